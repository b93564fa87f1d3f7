"""Bad torch arguments to the GPU ops raise fusedmoe.Error with the library's message: a CPU tensor
where a CUDA one is needed, non-contiguous or wrongly strided tensors, wrong dtypes and shapes, an
undersized workspace. Skipped, with the reason, without torch, a CUDA build or an sm_90 GPU."""

import re

import pytest

from torch_ref import gpu_skip_reason

_reason = gpu_skip_reason()
pytestmark = pytest.mark.skipif(_reason is not None, reason=f"needs torch + CUDA + an sm_90 GPU: {_reason}")

if _reason is None:
    import torch

import fusedmoe  # noqa: E402
from fusedmoe import Error  # noqa: E402
import torch_ref  # noqa: E402


@pytest.fixture(scope="module")
def small():
    cfg = torch_ref.scaled("qwen3-30b-a3b", 256, 128, 16)
    w = torch_ref.make_weights(cfg, 1, "cuda")
    return cfg, w, fusedmoe.MoeLayer(cfg, **w)


def raises(message, fn):
    with pytest.raises(Error, match=re.escape(message)):
        fn()


def test_weights(small):
    cfg, w, _ = small
    E, H, I = cfg.num_experts, cfg.hidden, cfg.intermediate

    def with_(**kw):
        return lambda: fusedmoe.MoeLayer(cfg, **dict(w, **kw))

    raises(f"MoeLayer: w13 must be in CUDA device memory, got [{E}, {2 * I}, {H}] e4m3 cpu",
           with_(w13=w["w13"].cpu()))
    raises(f"MoeLayer: w13 must be e4m3, got [{E}, {2 * I}, {H}] bf16 cuda:0",
           with_(w13=w["w13"].to(torch.bfloat16)))
    raises(f"MoeLayer: w2 must have shape [{E}, {H}, {I}], got [{E}, {H}, {I - 16}] e4m3 cuda:0",
           with_(w2=w["w2"][:, :, 16:]))
    raises("MoeLayer: w2 must be contiguous (row-major)",
           with_(w2=w["w2"].transpose(1, 2).contiguous().transpose(1, 2)))
    raises("MoeLayer: w13_scale must be f32, got float64", with_(w13_scale=w["w13_scale"].double()))
    raises("MoeLayer: routing_bias was given but the routing function uses no bias",
           with_(routing_bias=torch.zeros(E, device="cuda")))


def test_forward_arguments(small):
    cfg, _, layer = small
    T, H, E = 8, cfg.hidden, cfg.num_experts
    x = torch.zeros(T, H, dtype=torch.bfloat16, device="cuda")
    logits = torch.zeros(T, E, device="cuda")
    raises(f"MoeLayer: x must be in CUDA device memory, got [{T}, {H}] bf16 cpu", lambda: layer(x.cpu(), logits))
    raises(f"MoeLayer: router_logits must be in CUDA device memory, got [{T}, {E}] f32 cpu",
           lambda: layer(x, logits.cpu()))
    raises(f"MoeLayer: x must be bf16, got [{T}, {H}] f32 cuda:0", lambda: layer(x.float(), logits))
    raises("MoeLayer: router_logits must be f32, got float64", lambda: layer(x, logits.double()))
    raises(f"MoeLayer: router_logits must have shape [{T}, {E}], got [{T}, {E - 1}] f32 cuda:0",
           lambda: layer(x, logits[:, 1:]))
    xt = torch.zeros(H, T, dtype=torch.bfloat16, device="cuda").t()  # [T, H], column-major
    raises(f"MoeLayer: x must have unit stride in its last dimension, got stride {T}", lambda: layer(xt, logits))
    raises("MoeLayer: y must be bf16", lambda: layer(x, logits, out=torch.empty(T, H, device="cuda")))
    raises("MoeLayer: mode must be 'fast' or 'deterministic', got 'quick'", lambda: layer(x, logits, mode="quick"))
    raises("MoeLayer: give either router_logits or topk_ids/topk_weights, not both",
           lambda: layer(x, logits, topk_ids=torch.zeros(T, cfg.top_k, dtype=torch.int32, device="cuda"),
                         topk_weights=torch.zeros(T, cfg.top_k, device="cuda")))
    ws = torch.empty(layer.workspace_size(T) - 256, dtype=torch.uint8, device="cuda")
    raises("MoeLayer: workspace of", lambda: layer(x, logits, workspace=ws))
    raises("MoeLayer: workspace must be in CUDA device memory",
           lambda: layer(x, logits, workspace=torch.empty(layer.workspace_size(T), dtype=torch.uint8)))


def test_given_routing_arguments(small):
    cfg, _, layer = small
    T, k = 8, cfg.top_k
    x = torch.zeros(T, cfg.hidden, dtype=torch.bfloat16, device="cuda")
    ids = torch.arange(k, dtype=torch.int32, device="cuda").repeat(T, 1)
    w = torch.full((T, k), 1.0 / k, device="cuda")
    raises("MoeLayer: topk_ids must be i32, got int64", lambda: layer(x, topk_ids=ids.long(), topk_weights=w))
    ids_nc = torch.arange(k, dtype=torch.int32, device="cuda").repeat(2 * T, 1)[::2]
    raises("MoeLayer: topk_ids must be contiguous (row-major)", lambda: layer(x, topk_ids=ids_nc, topk_weights=w))
    raises("MoeLayer: routing given by the caller needs both topk_ids and topk_weights",
           lambda: layer(x, topk_ids=ids))
    bad = ids.clone()
    bad[3, 1] = cfg.num_experts
    raises(f"MoeLayer: topk_ids[3, 1] = {cfg.num_experts} is not an expert id in [0, {cfg.num_experts})",
           lambda: layer(x, topk_ids=bad, topk_weights=w))  # checked on the host outside capture
    layer(x, topk_ids=bad, topk_weights=w, validate_routing=False)  # dropped and counted
    assert layer.dropped_routes() == 1


def test_gemv_arguments():
    M, K = 64, 128
    a = torch.zeros(M, K // 2, dtype=torch.uint8, device="cuda")
    a_s = torch.zeros(M, K // 16, dtype=torch.float8_e4m3fn, device="cuda")
    a_g = torch.ones(1, device="cuda")
    b = torch.zeros(K, dtype=torch.bfloat16, device="cuda")
    c = torch.zeros(M, device="cuda")
    raises(f"gemv_nvfp4: a must be in CUDA device memory, got [{M}, {K // 2}] e2m1x2 cpu",
           lambda: fusedmoe.gemv_nvfp4(a.cpu(), a_s, a_g, b, c))
    raises("gemv_nvfp4: a_scale must be e4m3", lambda: fusedmoe.gemv_nvfp4(a, a_s.float(), a_g, b, c))
    raises("gemv_nvfp4: b must be e2m1x2 (NVFP4) or bf16, got f32", lambda: fusedmoe.gemv_nvfp4(a, a_s, a_g, b.float(), c))
