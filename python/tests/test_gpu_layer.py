"""fusedmoe.MoeLayer on the GPU side by side with a plain torch implementation of the same layer
(torch_ref.py): every preset scaled down, one preset at its real shape, both reduction modes,
routing computed and given, outside and inside a CUDA graph. Skipped, with the reason, without
torch, a CUDA build of fusedmoe, or an sm_90 GPU."""

import pytest
import numpy as np

from torch_ref import gpu_skip_reason

_reason = gpu_skip_reason()
pytestmark = pytest.mark.skipif(_reason is not None, reason=f"needs torch + CUDA + an sm_90 GPU: {_reason}")

if _reason is None:
    import torch

import fusedmoe  # noqa: E402
from fusedmoe import Precision  # noqa: E402
import torch_ref  # noqa: E402

# Bounds of the comparison with the torch layer (which quantizes the activations as the kernels
# do): relative L2 over the output, and of the worst token row. What remains is fp32 accumulation
# order, intermediate values a few ulps apart that round to different e4m3 codes, and the bf16
# output rounding (tests/layer uses 1e-2 against the C++ reference; `fusedmoe run` 6e-2 per row).
REL_L2 = 1e-2
ROW_L2 = 6e-2

PRESETS = [
    "qwen3.5-35b-a3b",
    "qwen3-30b-a3b",
    "qwen3-235b-a22b",
    "deepseek-v3",
    "kimi-k2",
    "mixtral-8x7b",
    "gpt-oss-120b",
    "llama4-maverick",
]


def check(got, want, what):
    total, row, worst = torch_ref.rel_errors(got, want)
    assert torch.isfinite(got.float()).all(), f"{what}: non-finite outputs"
    assert total <= REL_L2 and row <= ROW_L2, (
        f"{what}: relative L2 {total:.3e} (bound {REL_L2}), worst token row {worst} at {row:.3e} "
        f"(bound {ROW_L2})"
    )


def build(cfg, seed=1, quantizer="library"):
    w = torch_ref.make_weights(cfg, seed, "cuda", quantizer)
    layer = fusedmoe.MoeLayer(cfg, **w)
    return layer, torch_ref.dequantized(cfg, w)


def inputs(cfg, T, seed):
    return (torch_ref.random_x(T, cfg.hidden, seed, "cuda"),
            torch_ref.tie_free_logits(T, cfg.num_experts, seed, "cuda"))


@pytest.mark.parametrize("precision", [Precision.fp8_block, Precision.bf16, Precision.nvfp4, Precision.mxfp4],
                         ids=["fp8", "bf16", "nvfp4", "mxfp4"])
@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_scaled_down(name, precision):
    cfg = torch_ref.scaled(name, 256, 128, 32, precision)
    layer, d = build(cfg)
    for T in (1, 7, 64):
        x, logits = inputs(cfg, T, seed=T)
        y = layer(x, logits)
        assert y.shape == (T, cfg.hidden) and y.dtype == torch.bfloat16 and y.device == x.device
        check(y, torch_ref.layer(cfg, d, x, logits), f"{cfg.summary()} T={T}")


def test_real_preset_shape():
    cfg = fusedmoe.MoeConfig.preset("qwen3-30b-a3b")  # H=2048 I=768 E=128 top-8, fp8 blocks
    layer, d = build(cfg, seed=3, quantizer="torch")
    for T in (4, 200):
        x, logits = inputs(cfg, T, seed=10 + T)
        check(layer(x, logits), torch_ref.layer(cfg, d, x, logits), f"{cfg.name} T={T}")


def test_deterministic_mode_is_bitwise_reproducible():
    cfg = torch_ref.scaled("deepseek-v3", 512, 256, 32)
    layer, d = build(cfg)
    x, logits = inputs(cfg, 96, seed=5)
    y1 = layer(x, logits, mode="deterministic")
    y2 = layer(x, logits, mode="deterministic")
    assert torch.equal(y1, y2)
    check(y1, torch_ref.layer(cfg, d, x, logits), "deterministic")
    check(layer(x, logits, mode="fast"), torch_ref.layer(cfg, d, x, logits), "fast after deterministic")


@pytest.mark.parametrize("name", ["qwen3.5-35b-a3b", "deepseek-v3", "llama4-maverick"])
def test_routing_given(name):
    cfg = torch_ref.scaled(name, 256, 128, 32)
    layer, d = build(cfg)
    x, logits = inputs(cfg, 33, seed=7)
    ids, weights = torch_ref.route(cfg, logits, d.get("routing_bias"))
    y = layer(x, topk_ids=ids, topk_weights=weights)
    check(y, torch_ref.layer(cfg, d, x, ids=ids, weights=weights), f"{name} routing given")
    # the routing given must be what the layer uses: other weights, another output
    y2 = layer(x, topk_ids=ids, topk_weights=weights * 0.5)
    check(y2, torch_ref.layer(cfg, d, x, ids=ids, weights=weights * 0.5), f"{name} half weights")
    assert layer.dropped_routes() == 0


@pytest.mark.parametrize("name", ["deepseek-v3", "qwen3.5-35b-a3b"])
def test_prequantized_fp8_rows_give_the_same_bits(name):
    # The library's activation quantizer on the host, passed as x_fp8 / x_fp8_scales: the layer
    # skips its own quantization and gives the bits it gives from x (deterministic mode).
    cfg = torch_ref.scaled(name, 256, 128, 32)
    layer, _ = build(cfg)
    x, logits = inputs(cfg, 41, seed=11)
    q, s = fusedmoe.quantize_fp8_per_token(x.float().cpu().numpy(), 128)
    x_fp8 = torch.from_numpy(q).to("cuda").view(torch.float8_e4m3fn)
    x_scales = torch.from_numpy(s).to("cuda")
    want = layer(x, logits, mode="deterministic")
    assert torch.equal(layer(x, logits, mode="deterministic", x_fp8=x_fp8, x_fp8_scales=x_scales), want)
    if not cfg.shared_expert_gate:
        assert torch.equal(layer(None, logits, mode="deterministic", x_fp8=x_fp8, x_fp8_scales=x_scales), want)
    else:  # Qwen's shared gate reads x
        with pytest.raises(fusedmoe.Error, match="give x too"):
            layer(None, logits, mode="deterministic", x_fp8=x_fp8, x_fp8_scales=x_scales)


def test_out_workspace_and_stream_arguments():
    cfg = torch_ref.scaled("qwen3-30b-a3b", 256, 128, 16)
    layer, d = build(cfg)
    x, logits = inputs(cfg, 20, seed=9)
    want = torch_ref.layer(cfg, d, x, logits)
    out = torch.full((20, cfg.hidden), float("nan"), dtype=torch.bfloat16, device="cuda")
    assert layer(x, logits, out=out) is out
    check(out, want, "out=")
    ws = torch.empty(layer.workspace_size(20), dtype=torch.uint8, device="cuda")
    check(layer(x, logits, workspace=ws), want, "workspace=")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = layer(x, logits)  # torch's current stream is s here
    s.synchronize()
    check(y, want, "side stream")
    # grow on demand: a larger call after a smaller one
    x2, l2 = inputs(cfg, 300, seed=11)
    check(layer(x2, l2), torch_ref.layer(cfg, d, x2, l2), "grown workspace")
    # no tokens
    assert layer(x[:0], logits[:0]).shape == (0, cfg.hidden)


def capture(fn):
    """A CUDA graph of fn() after one warm-up call on a side stream (torch's recipe)."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    return g, out


@pytest.mark.parametrize("mode", ["fast", "deterministic"])
@pytest.mark.parametrize("name", ["qwen3.5-35b-a3b", "deepseek-v3", "gpt-oss-120b"])
def test_cuda_graph(name, mode):
    precision = Precision.bf16 if name == "gpt-oss-120b" else Precision.fp8_block
    cfg = torch_ref.scaled(name, 256, 128, 32, precision)
    layer, d = build(cfg)
    T = 16
    x, logits = inputs(cfg, T, seed=21)
    layer.reserve(T, mode)
    y = torch.empty(T, cfg.hidden, dtype=torch.bfloat16, device="cuda")
    g, _ = capture(lambda: layer(x, logits, out=y, mode=mode))
    for seed in (22, 23):  # new inputs in the captured buffers, then replay
        x2, l2 = inputs(cfg, T, seed)
        x.copy_(x2)
        logits.copy_(l2)
        y.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        check(y, torch_ref.layer(cfg, d, x2, l2), f"{name} {mode} graph replay seed {seed}")
    # fewer tokens than reserved, output allocated inside the capture
    x3, l3 = inputs(cfg, 5, seed=24)
    g3, y3 = capture(lambda: layer(x3, l3, mode=mode))
    g3.replay()
    torch.cuda.synchronize()
    check(y3, torch_ref.layer(cfg, d, x3, l3), f"{name} {mode} graph, T=5, out allocated in capture")


def test_capture_with_routing_given():
    cfg = torch_ref.scaled("deepseek-v3", 256, 128, 32)
    layer, d = build(cfg)
    x, logits = inputs(cfg, 12, seed=31)
    ids, weights = torch_ref.route(cfg, logits, d["routing_bias"])
    layer.reserve(12)
    g, y = capture(lambda: layer(x, topk_ids=ids, topk_weights=weights))
    g.replay()
    torch.cuda.synchronize()
    check(y, torch_ref.layer(cfg, d, x, ids=ids, weights=weights), "routing given in a graph")


def test_capture_without_a_reserved_workspace_is_an_error():
    cfg = torch_ref.scaled("qwen3-30b-a3b", 256, 128, 16)
    layer, d = build(cfg)
    x, logits = inputs(cfg, 8, seed=41)
    y = torch.empty(8, cfg.hidden, dtype=torch.bfloat16, device="cuda")
    # The error is raised before any work is enqueued: the capture itself ends cleanly (empty).
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        with pytest.raises(fusedmoe.Error, match=r"call layer\.reserve\(8, mode='fast'\) before capturing"):
            layer(x, logits, out=y)
    layer.reserve(4)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        with pytest.raises(fusedmoe.Error, match=r"the layer's fast workspace serves 4 tokens"):
            layer(x, logits, out=y)
    layer.reserve(8)  # and after reserving, the same capture works
    g, _ = capture(lambda: layer(x, logits, out=y))
    g.replay()
    torch.cuda.synchronize()
    check(y, torch_ref.layer(cfg, d, x, logits), "captured after reserve")


def test_graph_survives_workspace_growth():
    """A graph captured with a small workspace still replays correctly after a larger call grew
    the layer's workspace (the old one is kept alive)."""
    cfg = torch_ref.scaled("qwen3-30b-a3b", 256, 128, 16)
    layer, d = build(cfg)
    x, logits = inputs(cfg, 4, seed=51)
    layer.reserve(4)
    y = torch.empty(4, cfg.hidden, dtype=torch.bfloat16, device="cuda")
    g, _ = capture(lambda: layer(x, logits, out=y))
    xb, lb = inputs(cfg, 512, seed=52)
    layer(xb, lb)  # grows the fast workspace
    junk = [torch.full((1 << 20,), 255, dtype=torch.uint8, device="cuda") for _ in range(8)]
    g.replay()
    torch.cuda.synchronize()
    check(y, torch_ref.layer(cfg, d, x, logits), "replay after growth")
    del junk


def test_quantized_weights_from_numpy_match_torch_quantization():
    """The library's CPU quantizer and the torch one agree on codes and scales, so either can
    feed the layer."""
    w = (torch.rand(2, 256, 384) * 2 - 1) * 0.05
    q, s = fusedmoe.quantize_fp8_block(w.numpy())
    qt, st = torch_ref.fp8_block_quantize_torch(w.cuda())
    assert torch.equal(torch.from_numpy(s), st.cpu())
    assert torch.equal(torch.from_numpy(q), qt.view(torch.uint8).cpu())


@pytest.mark.parametrize("block", [128, 64])
def test_torch_activation_quantizer_matches_the_library(block):
    """torch_ref.quant_act, the torch layer's activation quantizer, gives the values of the
    library's per-token quantizer bit for bit, on x-like and on SwiGLU-like (heavy-tailed) rows."""
    g = torch.Generator().manual_seed(block)
    gate, up = torch.randn(48, 384, generator=g), torch.randn(48, 384, generator=g)
    for a in ((torch.rand(48, 384, generator=g) * 2 - 1), gate * torch.sigmoid(gate) * up):
        q, s = fusedmoe.quantize_fp8_per_token(a.contiguous().numpy(), block)
        want = torch.from_numpy(q).view(torch.float8_e4m3fn).float() * torch.from_numpy(s).repeat_interleave(block, 1)
        assert torch.equal(torch_ref.quant_act(a.cuda(), block).cpu(), want)


@pytest.mark.skipif(not fusedmoe.has_checkpoint_loader, reason="this build has no checkpoint loader")
@pytest.mark.parametrize("family", ["qwen3_moe", "deepseek_v3", "gpt_oss"])
def test_from_pretrained(tmp_path, family):
    import checkpoint_util as ck

    if family == "gpt_oss":
        E = 8
        want = ck.write_gpt_oss(tmp_path, E, 256, 128, layer=2, seed=4)
    else:
        fam, E = (ck.QWEN3, 8) if family == "qwen3_moe" else (ck.DEEPSEEK_V3, 16)
        want = ck.write_checkpoint(tmp_path, fam, E, 256, 128, layer=2, seed=4)
    layer = fusedmoe.MoeLayer.from_pretrained(tmp_path, 2)
    cfg = layer.config
    r = layer.router_weight
    assert r.shape == (E, 256) and r.dtype == torch.bfloat16 and r.is_cuda
    assert torch.equal(r.cpu().view(torch.int16), torch.from_numpy(want["router_weight"].view("int16")))
    w = {}
    for name, a in want.items():
        if name == "router_weight":
            continue
        if a.dtype == np.uint8:
            t = torch.from_numpy(a).view(torch.float8_e4m3fn)
        elif a.dtype == np.uint16:  # bf16 bits
            t = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
        else:
            t = torch.from_numpy(a)
        w[name] = t.cuda()
    d = torch_ref.dequantized(cfg, w)
    x, logits = inputs(cfg, 24, seed=61)
    check(layer(x, logits), torch_ref.layer(cfg, d, x, logits), f"from_pretrained {family}")
    logits = (x.float() @ r.float().T).contiguous()  # the router as the checkpoint has it
    check(layer(x, logits), torch_ref.layer(cfg, d, x, logits), f"from_pretrained {family}, router logits")


@pytest.mark.skipif(not fusedmoe.has_checkpoint_loader, reason="this build has no checkpoint loader")
def test_from_pretrained_gpt_oss_mxfp4(tmp_path):
    """gpt-oss's MXFP4 release layout, read, uploaded and run (W4A16) against torch on the same
    codes and scales, dequantized in torch."""
    import checkpoint_util as ck

    E, H, I = 8, 256, 128
    want = ck.write_gpt_oss(tmp_path, E, H, I, layer=1, seed=5, mxfp4=True)
    layer = fusedmoe.MoeLayer.from_pretrained(tmp_path, 1)
    cfg = layer.config
    assert cfg.weight_precision == Precision.mxfp4 and cfg.activation_precision == Precision.bf16
    w = {}
    for name, a in want.items():
        if name == "router_weight":
            continue
        if a.dtype == np.uint16:  # bf16 bits
            w[name] = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16).cuda()
        else:
            w[name] = torch.from_numpy(np.ascontiguousarray(a)).cuda()
    d = torch_ref.dequantized(cfg, w)
    for T in (1, 24, 300):
        x, logits = inputs(cfg, T, seed=62 + T)
        check(layer(x, logits), torch_ref.layer(cfg, d, x, logits), f"from_pretrained gpt-oss mxfp4 T={T}")


@pytest.mark.skipif(not fusedmoe.has_checkpoint_loader, reason="this build has no checkpoint loader")
def test_from_pretrained_nvfp4_runs_as_w4a16(tmp_path):
    """A ModelOpt NVFP4 checkpoint (calibrated with NVFP4 activations), read, uploaded and run as W4A16 (bf16
    activations, input_scale unused) against torch on the same codes and scales, dequantized in
    torch, with the gate and up global scales apart."""
    import checkpoint_util as ck

    E, H, I = 8, 256, 128
    ck.write_nvfp4(tmp_path, E, H, I, layer=0, seed=7)
    layer = fusedmoe.MoeLayer.from_pretrained(tmp_path, 0)
    cfg = layer.config
    assert cfg.weight_precision == Precision.nvfp4 and cfg.activation_precision == Precision.bf16
    _, tensors = fusedmoe.load_moe_layer(tmp_path, 0)
    w = {}
    for name, (a, _) in tensors.items():
        if name != "router_weight" and not name.endswith("input_scale"):
            w[name] = torch.from_numpy(np.ascontiguousarray(a)).cuda()
    d = torch_ref.dequantized(cfg, w)
    for T in (1, 24, 300):
        x, logits = inputs(cfg, T, seed=70 + T)
        check(layer(x, logits), torch_ref.layer(cfg, d, x, logits), f"from_pretrained nvfp4 T={T}")
