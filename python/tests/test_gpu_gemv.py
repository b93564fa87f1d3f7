"""The NVFP4 GEMV from Python against torch matmuls on the dequantized operands (the library's CPU
decoder). Skipped, with the reason, without torch, a CUDA build or an sm_90 GPU."""

import numpy as np
import pytest

from torch_ref import gpu_skip_reason

_reason = gpu_skip_reason()
pytestmark = pytest.mark.skipif(_reason is not None, reason=f"needs torch + CUDA + an sm_90 GPU: {_reason}")

if _reason is None:
    import torch

import fusedmoe  # noqa: E402


def nvfp4(rng, rows, cols):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    packed, scales, g = fusedmoe.quantize_nvfp4(x)
    return packed, scales, g, torch.from_numpy(fusedmoe.dequantize_nvfp4(packed, scales, g)).double()


def close(got, want, bound, what):
    # E2M1 x E4M3 products are exact in fp16; the sums are fp32: the bound scales with sum |a*b|.
    err = (got.double().cpu() - want).abs()
    assert (err <= bound).all(), f"{what}: worst error {float((err - bound).max()):.3e} over the bound"


@pytest.mark.parametrize("b_kind", ["bf16", "nvfp4"])
def test_batched_gemv(b_kind):
    rng = np.random.default_rng(7)
    L, M, K = 3, 128, 512
    mats = [nvfp4(rng, M, K) for _ in range(L)]
    a = torch.from_numpy(np.stack([m[0] for m in mats])).cuda()
    a_scale = torch.from_numpy(np.stack([m[1] for m in mats])).cuda().view(torch.float8_e4m3fn)
    a_global = torch.tensor([m[2] for m in mats], dtype=torch.float32, device="cuda")
    A = torch.stack([m[3] for m in mats])  # [L, M, K] float64
    c = torch.full((L, M), float("nan"), device="cuda")
    if b_kind == "bf16":
        b = torch.from_numpy(rng.standard_normal((L, K)).astype(np.float32)).to(torch.bfloat16).cuda()
        B = b.double().cpu()
        fusedmoe.gemv_nvfp4(a, a_scale, a_global, b, c)
    else:
        vecs = [nvfp4(rng, 1, K) for _ in range(L)]
        b = torch.from_numpy(np.concatenate([v[0] for v in vecs])).cuda()
        b_scale = torch.from_numpy(np.concatenate([v[1] for v in vecs])).cuda()  # uint8 codes
        b_global = torch.tensor([v[2] for v in vecs], dtype=torch.float32, device="cuda")
        B = torch.cat([v[3] for v in vecs])
        fusedmoe.gemv_nvfp4(a, a_scale, a_global, b, c, b_scale=b_scale, b_global=b_global)
    torch.cuda.synchronize()
    want = torch.einsum("lmk,lk->lm", A, B)
    bound = torch.einsum("lmk,lk->lm", A.abs(), B.abs()) * (K * 2.0 ** -21) + want.abs() * 2.0 ** -22
    close(c, want, bound, f"gemv_nvfp4 b={b_kind}")


def test_moe_gemv():
    rng = np.random.default_rng(8)
    E, N, K, T, k = 8, 128, 256, 5, 2
    mats = [nvfp4(rng, N, K) for _ in range(E)]
    w = torch.from_numpy(np.stack([m[0] for m in mats])).cuda()
    w_scale = torch.from_numpy(np.stack([m[1] for m in mats])).cuda().view(torch.float8_e4m3fn)
    w_global = torch.tensor([m[2] for m in mats], dtype=torch.float32, device="cuda")
    W = torch.stack([m[3] for m in mats])
    x = torch.from_numpy(rng.standard_normal((T, K)).astype(np.float32)).to(torch.bfloat16).cuda()
    ids = torch.tensor([[0, 3], [3, 7], [1, 2], [7, 0], [5, 6]], dtype=torch.int32, device="cuda")
    weights = torch.from_numpy(rng.random((T, k)).astype(np.float32)).cuda()
    y = torch.full((T, N), float("nan"), device="cuda")
    bad = torch.zeros(1, dtype=torch.int32, device="cuda")
    fusedmoe.moe_gemv_nvfp4(w, w_scale, w_global, x, ids, weights, y, bad_id_count=bad)
    torch.cuda.synchronize()
    X = x.double().cpu()
    Wsel = W[ids.long().cpu()]  # [T, k, N, K]
    want = torch.einsum("tj,tjnk,tk->tn", weights.double().cpu(), Wsel, X)
    mag = torch.einsum("tj,tjnk,tk->tn", weights.double().cpu().abs(), Wsel.abs(), X.abs())
    close(y, want, mag * (K * 2.0 ** -21) + want.abs() * 2.0 ** -22, "moe_gemv_nvfp4")
    assert int(bad.item()) == 0
