"""fusedmoe.rmsnorm_quant from Python against a plain torch RMSNorm in float64 (and the library's
CPU decoders for the quantized forms). Skipped, with the reason, without torch, a CUDA build or an
sm_90 GPU."""

import math

import numpy as np
import pytest

from torch_ref import gpu_skip_reason

_reason = gpu_skip_reason()
pytestmark = pytest.mark.skipif(_reason is not None, reason=f"needs torch + CUDA + an sm_90 GPU: {_reason}")

if _reason is None:
    import torch

import fusedmoe  # noqa: E402

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def inputs(T, H, seed, residual):
    g = torch.Generator().manual_seed(seed)
    x = (torch.randn(T, H, generator=g) * 3).bfloat16().cuda()
    w = (1 + 0.5 * torch.randn(H, generator=g)).bfloat16().cuda()
    r = (torch.randn(T, H, generator=g) * 2).bfloat16().cuda() if residual else None
    return x, w, r


def torch_norm(x, w, eps, r):
    """(h as written back to residual, y in float64, inv_rms in float64): the library's math."""
    h = (x.float() + r.float()).bfloat16() if r is not None else x
    hd = h.double().cpu()
    inv = 1.0 / torch.sqrt(hd.pow(2).mean(-1, keepdim=True) + eps)
    return h, hd * inv * w.double().cpu(), inv.squeeze(-1)


def e4m3_values(t):
    return torch.from_numpy(fusedmoe.e4m3_to_float(t.view(torch.uint8).cpu().numpy())).double()


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("T,H", [(1, 16), (7, 2048), (128, 7168), (33, 4112), (5, 1001)])
def test_bf16(T, H, residual):
    x, w, r = inputs(T, H, T * 7 + H, residual)
    h_want, y, inv_want = torch_norm(x, w, 1e-6, r)
    r_in = r.clone() if r is not None else None
    inv = torch.full((T,), float("nan"), device="cuda")
    out, scale = fusedmoe.rmsnorm_quant(x, w, eps=1e-6, residual=r_in, inv_rms=inv)
    torch.cuda.synchronize()
    assert scale is None and out.dtype == torch.bfloat16 and out.shape == (T, H)
    err = (out.double().cpu() - y).abs()
    # One bf16 rounding of y plus the fp32 computation of y (a few 2^-24).
    assert (err <= y.abs() * (2.0 ** -8 + 2.0 ** -20) + 1e-30).all(), f"worst {float(err.max()):.3e}"
    assert ((inv.double().cpu() - inv_want).abs() <= inv_want * 1e-5).all()
    if residual:
        assert torch.equal(r_in.view(torch.int16), h_want.view(torch.int16)), "residual write-back"


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("T,H", [(1, 128), (9, 200), (128, 7168)])
def test_fp8(T, H, residual):
    x, w, r = inputs(T, H, T * 11 + H, residual)
    _, y, _ = torch_norm(x, w, 1e-6, r)
    out, scale = fusedmoe.rmsnorm_quant(x, w, out_format="fp8", residual=r)
    torch.cuda.synchronize()
    nb = (H + 127) // 128
    assert scale.shape == (T, nb) and scale.dtype == torch.float32
    blocks = torch.nn.functional.pad(y.abs(), (0, nb * 128 - H)).view(T, nb, 128).amax(-1)
    s = scale.double().cpu()
    assert ((s - blocks / 448).abs() <= blocks / 448 * 1e-5).all(), "scale = amax / 448 per 128 columns"
    deq = e4m3_values(out) * s.repeat_interleave(128, dim=1)[:, :H]
    srep = s.repeat_interleave(128, dim=1)[:, :H]
    assert ((deq - y).abs() <= y.abs() * 2.0 ** -4 * 1.001 + srep * 2.0 ** -9).all()


@pytest.mark.parametrize("residual", [False, True])
@pytest.mark.parametrize("T,H", [(1, 16), (7, 2048), (128, 7168)])
def test_nvfp4(T, H, residual):
    x, w, r = inputs(T, H, T * 13 + H, residual)
    _, y, _ = torch_norm(x, w, 1e-6, r)
    g = float(y.abs().max()) / (6 * 448)
    out, scale = fusedmoe.rmsnorm_quant(x, w, out_format="nvfp4", residual=r, global_scale=g)
    torch.cuda.synchronize()
    assert out.shape == (T, H // 2) and out.dtype == torch.uint8 and scale.shape == (T, H // 16)
    packed = out.cpu()
    codes = torch.stack([packed & 15, packed >> 4], dim=-1).view(T, H).long()
    vals = torch.tensor(E2M1, dtype=torch.float64)[codes & 7] * (1.0 - 2.0 * (codes >= 8).double())
    sf = e4m3_values(scale).repeat_interleave(16, dim=1)
    gd = float(torch.tensor(g, dtype=torch.float32))
    deq = vals * sf * gd
    denom = sf * gd
    q = y.abs() / denom
    half_step = torch.full_like(q, 1.0)  # half the E2M1 step around q: 0.25 below 2, 0.5 below 4
    half_step[q < 4] = 0.5
    half_step[q < 2] = 0.25
    bound = (half_step + (q - 6).clamp(min=0)) * denom * 1.001
    assert ((deq - y).abs() <= bound).all(), f"worst excess {float(((deq - y).abs() - bound).max()):.3e}"
    amax16 = y.abs().view(T, H // 16, 16).amax(-1)
    want_sf = torch.from_numpy(fusedmoe.e4m3_from_float(((amax16 / 6) / gd).float().numpy()))
    assert (scale.view(torch.uint8).cpu().int() - want_sf.int()).abs().max() <= 1, "block scales within one e4m3 step"


def test_given_outputs_and_graph_capture():
    T, H = 64, 2048
    x, w, _ = inputs(T, H, 3, False)
    _, y, _ = torch_norm(x, w, 1e-5, None)
    out = torch.empty(T, H // 2, dtype=torch.uint8, device="cuda")
    scale = torch.empty(T, H // 16, dtype=torch.uint8, device="cuda")  # e4m3 codes as uint8
    g = torch.tensor([float(y.abs().max()) / (6 * 448)], device="cuda")
    eager = fusedmoe.rmsnorm_quant(x, w, 1e-5, "nvfp4", global_scale=g, out=out.clone(), out_scale=scale.clone())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fusedmoe.rmsnorm_quant(x, w, 1e-5, "nvfp4", global_scale=g, out=out, out_scale=scale)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager[0]) and torch.equal(scale, eager[1].view(torch.uint8))


def test_errors():
    x, w, _ = inputs(4, 48, 1, False)
    with pytest.raises(fusedmoe.Error, match="out_format must be"):
        fusedmoe.rmsnorm_quant(x, w, out_format="int8")
    with pytest.raises(fusedmoe.Error, match="multiple of 16"):
        fusedmoe.rmsnorm_quant(x[:, :40], w[:40], out_format="nvfp4", global_scale=1.0)
    with pytest.raises(fusedmoe.Error, match="eps must be positive"):
        fusedmoe.rmsnorm_quant(x, w, eps=0.0)
    with pytest.raises(fusedmoe.Error, match="weight must have shape"):
        fusedmoe.rmsnorm_quant(x, w[:32])
    with pytest.raises(fusedmoe.Error, match="out_format 'fp8' needs out of dtype"):
        fusedmoe.rmsnorm_quant(x, w, out_format="fp8", out=torch.empty_like(x))
    with pytest.raises(fusedmoe.Error, match="x must be in CUDA device memory"):
        fusedmoe.rmsnorm_quant(x.cpu(), w, out=torch.empty_like(x))
    assert math.isfinite(float(fusedmoe.rmsnorm_quant(x, w)[0].float().abs().max()))
