"""A plain torch implementation of the MoE layer, for the GPU tests: dequantized weights (fp8
block: code value times the 128x128 block's scale), the activations quantized as the layer
quantizes them (fp8 per token per 128 columns for x, per 64 for the intermediate, straight from
fp32; bf16 otherwise), routing as ref/route.cpp, float64 matmuls, one bf16 rounding at the end.
(The GPU layer's fast mode quantizes the intermediate per 128 at BLOCK_T=128, i.e. more than 40
routes per expert expected; these tests stay below that, where it is per 64.)

Also: the skip reason of the GPU tests, seeded weights for a config, tie-free router logits."""

from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import numpy as np

import fusedmoe
from fusedmoe import ActivationFn, Precision, RoutingFn


def gpu_skip_reason() -> Optional[str]:
    """None when torch, a CUDA build of fusedmoe and an sm_90 GPU are all here."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not fusedmoe.built_with_cuda:
        return "fusedmoe was built without the CUDA kernels"
    if not torch.cuda.is_available():
        return "torch sees no CUDA device"
    ok, why = fusedmoe.gpu_usable(torch.cuda.current_device())
    return None if ok else why


def scaled(name: str, H: int, I: int, E: int, precision: Precision = Precision.fp8_block) -> fusedmoe.MoeConfig:
    """A preset shrunk to test size, keeping its routing, activation, shared experts and biases
    (as tests/layer/layer_test_util.hpp does)."""
    c = fusedmoe.MoeConfig.preset(name)
    groups = c.routing.num_groups
    c.hidden, c.intermediate = H, I
    c.num_experts = max(E, c.top_k)
    if c.routing.fn == RoutingFn.sigmoid_grouped_topk and c.num_experts % groups:
        c.num_experts = (c.num_experts // groups + 1) * groups
    if c.num_shared_experts > 0:
        c.shared_intermediate = I * c.num_shared_experts
    c.weight_precision = c.activation_precision = precision
    if precision in (Precision.nvfp4, Precision.mxfp4):
        c.activation_precision = Precision.bf16  # the GPU layer runs 4-bit weights as W4A16
    c.validate()
    return c


# E2M1 magnitudes by code (bit 3 the sign): the values a packed nibble holds.
_E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


def e2m1_unpack_torch(packed):
    """float32 [.., 2 * n] from packed uint8 [.., n] (even element in the low nibble)."""
    import torch

    lut = torch.tensor(_E2M1 + tuple(-v for v in _E2M1), dtype=torch.float32, device=packed.device)
    p = packed.to(torch.int64)
    vals = torch.stack((lut[p & 0xF], lut[p >> 4]), dim=-1)
    return vals.reshape(*packed.shape[:-1], packed.shape[-1] * 2)


def fp4_dequantize_torch(cfg, w: Dict[str, object], name: str):
    """float32 [.., N, K] of a 4-bit weight: e2m1 * e4m3 (per 16) * weight_scale_2 (nvfp4), or
    e2m1 * 2^(ue8m0 - 127) (per 32, mxfp4), in torch."""
    import torch

    v = e2m1_unpack_torch(w[name])
    s = w[name + "_scale"]
    if cfg.weight_precision == Precision.nvfp4:
        sc = s.view(torch.float8_e4m3fn).float().repeat_interleave(16, -1)
        g = w[name + "_scale_2"].float()
        out = v * sc
        shared = name.startswith("shared")
        if name.endswith("w13") and (g.numel() == 2 if shared else g.dim() == 2):  # gate, up apart
            half = out.shape[-2] // 2
            g = g.reshape(-1, 2)
            gate, up = out[..., :half, :], out[..., half:, :]
            if shared:
                return torch.cat((gate * g[0, 0], up * g[0, 1]), dim=-2)
            return torch.cat((gate * g[:, 0].reshape(-1, 1, 1), up * g[:, 1].reshape(-1, 1, 1)), dim=-2)
        if name.startswith("shared"):
            return out * g.reshape(-1)[0]
        return out * g.reshape(-1, 1, 1)
    sc = torch.exp2(s.to(torch.float32) - 127.0).repeat_interleave(32, -1)
    return v * sc


# ---- weights --------------------------------------------------------------------------------------

def fp8_scale_inv(amax):
    """(amax / 448, 448 / amax; 0 and 0 for amax = 0) correctly rounded as the library computes
    them. Not `amax / 448.0`: torch on CUDA divides by a Python scalar as a multiplication by its
    reciprocal, which is one ulp off for about half of the scales (measured on an H100)."""
    import torch

    c = torch.full_like(amax, 448.0)
    pos = amax > 0
    return (torch.where(pos, amax / c, torch.zeros_like(amax)),
            torch.where(pos, c / amax, torch.zeros_like(amax)))


def fp8_block_quantize_torch(w):
    """FP8 E4M3 codes and 128x128 block scales of w [..., R, C] (the library's rule, on the GPU)."""
    import torch

    *lead, R, C = w.shape
    RB, CB = -(-R // 128), -(-C // 128)
    pad = torch.zeros(*lead, RB * 128, CB * 128, dtype=torch.float32, device=w.device)
    pad[..., :R, :C] = w
    blocks = pad.view(*lead, RB, 128, CB, 128)
    amax = blocks.abs().amax(dim=(-3, -1), keepdim=True)
    scale, inv = fp8_scale_inv(amax)
    q = (blocks * inv).to(torch.float8_e4m3fn).view(*lead, RB * 128, CB * 128)[..., :R, :C]
    return q.contiguous(), scale.view(*lead, RB, CB).contiguous()


def fp8_block_dequantize_torch(q, scale):
    R, C = q.shape[-2:]
    s = scale.repeat_interleave(128, dim=-2).repeat_interleave(128, dim=-1)[..., :R, :C]
    return q.float() * s


def make_weights(cfg, seed: int, device, quantizer: str = "library") -> Dict[str, object]:
    """Seeded random weights of `cfg` as torch CUDA tensors in MoeLayerWeights layouts.
    quantizer: 'library' (fusedmoe.quantize_fp8_block on the CPU) or 'torch' (on the GPU, for
    full-size presets)."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    E, H, I = cfg.num_experts, cfg.hidden, cfg.intermediate
    S = cfg.shared_intermediate if cfg.num_shared_experts > 0 else 0
    fp8 = cfg.weight_precision == Precision.fp8_block
    fp4 = cfg.weight_precision in (Precision.nvfp4, Precision.mxfp4)

    def uniform(shape, scale):
        if quantizer == "torch":
            gg = torch.Generator(device=device).manual_seed(seed * 1000 + len(out))
            return (torch.rand(shape, generator=gg, device=device) * 2 - 1) * scale
        return (torch.rand(shape, generator=g) * 2 - 1) * scale

    out: Dict[str, object] = {}

    def weight(name, shape, fan_in):
        if fp4:
            # Codes drawn directly (every E2M1 code), block scales near sqrt(3 / fan_in) / 4.5 so
            # values reach about the float weights' range: e4m3 0.5..0.94 * a per-matrix global
            # (nvfp4), or powers of two 2^(e0-1)..2^(e0+1) (mxfp4).
            amp = math.sqrt(3.0 / fan_in)
            *lead, n, k = shape
            out[name] = torch.randint(0, 256, (*lead, n, k // 2), generator=g, dtype=torch.uint8).to(device)
            if cfg.weight_precision == Precision.nvfp4:
                out[name + "_scale"] = torch.randint(0x30, 0x40, (*lead, n, k // 16), generator=g,
                                                     dtype=torch.uint8).to(device)
                glob = torch.full((lead[0],) if lead else (1,), amp / 4.5, dtype=torch.float32)
                out[name + "_scale_2"] = glob.to(device)
            else:
                e0 = round(math.log2(amp / 4.5))
                out[name + "_scale"] = (127 + e0 - 1 + torch.randint(0, 3, (*lead, n, k // 32), generator=g)
                                        ).to(torch.uint8).to(device)
            return
        w = uniform(shape, math.sqrt(3.0 / fan_in))
        if not fp8:
            out[name] = w.to(torch.bfloat16).to(device)
        elif quantizer == "torch":
            out[name], out[name + "_scale"] = fp8_block_quantize_torch(w)
        else:
            q, s = fusedmoe.quantize_fp8_block(w.float().contiguous().numpy())
            out[name] = torch.from_numpy(q).view(torch.float8_e4m3fn).to(device)
            out[name + "_scale"] = torch.from_numpy(s).to(device)

    weight("w13", (E, 2 * I, H), H)
    weight("w2", (E, H, I), I)
    if cfg.expert_bias:
        out["b13"] = uniform((E, 2 * I), 0.1).to(device).float()
        out["b2"] = uniform((E, H), 0.1).to(device).float()
    if cfg.routing.correction_bias:
        out["routing_bias"] = uniform((E,), 0.05).to(device).float()
    if cfg.routing.router_bias:
        out["routing_bias"] = uniform((E,), 0.5).to(device).float()
    if S:
        weight("shared_w13", (2 * S, H), H)
        weight("shared_w2", (H, S), S)
        if cfg.shared_expert_gate:
            out["shared_gate"] = uniform((H,), math.sqrt(3.0 / H)).to(torch.bfloat16).to(device)
    return out


def dequantized(cfg, w: Dict[str, object]) -> Dict[str, object]:
    """float32 weights as the kernels multiply them."""
    d = {}
    fp8 = cfg.weight_precision == Precision.fp8_block
    for name in ("w13", "w2", "shared_w13", "shared_w2"):
        if name in w:
            if cfg.weight_precision in (Precision.nvfp4, Precision.mxfp4):
                d[name] = fp4_dequantize_torch(cfg, w, name)
            else:
                d[name] = fp8_block_dequantize_torch(w[name], w[name + "_scale"]) if fp8 else w[name].float()
    for name in ("b13", "b2", "routing_bias", "shared_gate"):
        if name in w:
            d[name] = w[name].float()
    return d


def tie_free_logits(T: int, E: int, seed: int, device):
    """Router logits with no ties and gaps of 8/E: each row a random permutation of a grid."""
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed)
    grid = torch.arange(E, dtype=torch.float32) * (8.0 / E) - 4.0
    rows = [grid[torch.randperm(E, generator=g)] for _ in range(T)]
    return torch.stack(rows).to(device) if T else torch.empty(0, E, device=device)


def random_x(T: int, H: int, seed: int, device):
    import torch

    g = torch.Generator(device="cpu").manual_seed(seed + 0x78)
    return (torch.rand(T, H, generator=g) * 2 - 1).to(torch.bfloat16).to(device)


# ---- the reference --------------------------------------------------------------------------------

def route(cfg, logits, bias=None) -> Tuple[object, object]:
    """(ids [T, k] int32, weights [T, k] float32) as ref/route.cpp: selection on the routing
    function's choice scores (ties to the lower id), weights in float64, times
    routed_scaling_factor."""
    import torch

    r = cfg.routing
    k = cfg.top_k
    l = logits.double()
    T, E = l.shape
    if r.fn == RoutingFn.softmax_topk:
        v = r.softcap * torch.tanh(l / r.softcap) if r.softcap > 0 else l
        p = torch.softmax(v, dim=-1)
        ids = torch.topk(v, k, dim=-1).indices
        w = p.gather(1, ids)
        if r.renormalize:
            w = w / w.sum(-1, keepdim=True)
    elif r.fn == RoutingFn.sigmoid_grouped_topk:
        score = torch.sigmoid(l)
        choice = score + (bias.double() if r.correction_bias else 0.0)
        G = r.num_groups
        per = E // G
        top2 = torch.topk(choice.view(T, G, per), min(2, per), dim=-1).values.sum(-1)
        keep = torch.topk(top2, r.topk_groups, dim=-1).indices
        allowed = torch.zeros(T, G, dtype=torch.bool, device=l.device)
        allowed.scatter_(1, keep, True)
        masked = choice.masked_fill(~allowed.repeat_interleave(per, dim=1), float("-inf"))
        ids = torch.topk(masked, k, dim=-1).indices
        w = score.gather(1, ids)
        if r.renormalize:
            w = w / (w.sum(-1, keepdim=True) + 1e-20)
    elif r.fn == RoutingFn.sigmoid_top1_on_input:
        ids = l.argmax(-1, keepdim=True)
        w = torch.sigmoid(l.gather(1, ids))
    else:  # topk_softmax
        choice = l + (bias.double() if r.router_bias else 0.0)
        ids = torch.topk(choice, k, dim=-1).indices
        w = torch.softmax(choice.gather(1, ids), dim=-1)
    return ids.int(), (w * r.routed_scaling_factor).float()


def quant_act(a, block: int):
    """Dequantized fp8 activations: per row per `block` columns, scale = amax / 448,
    q = e4m3(a * (448 / amax)) (a zero block stays zero)."""
    import torch

    a = a.float()
    R, C = a.shape
    nb = -(-C // block)
    pad = torch.zeros(R, nb * block, dtype=torch.float32, device=a.device)
    pad[:, :C] = a
    blocks = pad.view(R, nb, block)
    amax = blocks.abs().amax(-1, keepdim=True)
    scale, inv = fp8_scale_inv(amax)
    q = (blocks * inv).to(torch.float8_e4m3fn).float()
    return (q * scale).view(R, nb * block)[:, :C]


def mlp(cfg, a, w13, w2, b13=None, b2=None):
    """One expert on rows `a` (float32 values of the rows GEMM 1 reads): float64 [rows, H]."""
    import torch

    fp8 = cfg.activation_precision == Precision.fp8_block
    I = w13.shape[0] // 2
    a1 = quant_act(a, 128) if fp8 else a.float()
    gu = a1.double() @ w13.double().T
    if b13 is not None:
        gu = gu + b13.double()
    gu = gu.float().double()  # the GEMM's fp32 accumulator
    act = cfg.activation
    if act.fn == ActivationFn.swiglu:
        gate, up = gu[:, :I], gu[:, I:]
        h = gate * torch.sigmoid(gate) * up
    else:
        gate = gu[:, 0::2].clamp(max=act.limit)
        up = gu[:, 1::2].clamp(-act.limit, act.limit)
        h = (up + 1.0) * gate * torch.sigmoid(act.alpha * gate)
    h = h.float()
    h = quant_act(h, 64) if fp8 else h.to(torch.bfloat16).float()
    o = h.double() @ w2.double().T
    if b2 is not None:
        o = o + b2.double()
    return o


def layer(cfg, d: Dict[str, object], x, logits=None, ids=None, weights=None):
    """y [T, H] bf16 of the layer on x with dequantized weights `d` (see dequantized())."""
    import torch

    T, H = x.shape
    if ids is None:
        ids, weights = route(cfg, logits, d.get("routing_bias"))
    on_input = cfg.routing.fn == RoutingFn.sigmoid_top1_on_input
    xf = x.float()
    y = torch.zeros(T, H, dtype=torch.float64, device=x.device)
    for e in torch.unique(ids).tolist():
        tok, slot = (ids == e).nonzero(as_tuple=True)
        w = weights[tok, slot].float()
        a = (xf[tok] * w[:, None]).to(torch.bfloat16).float() if on_input else xf[tok]
        o = mlp(cfg, a, d["w13"][e], d["w2"][e],
                d["b13"][e] if "b13" in d else None, d["b2"][e] if "b2" in d else None)
        y.index_add_(0, tok, o if on_input else o * w.double()[:, None])
    if cfg.num_shared_experts > 0:
        s = mlp(cfg, xf, d["shared_w13"], d["shared_w2"])
        if cfg.shared_expert_gate:
            s = s * torch.sigmoid(xf.double() @ d["shared_gate"].double().view(-1, 1))
        y += s
    return y.to(torch.bfloat16)


def rel_errors(got, want) -> Tuple[float, float, int]:
    """(relative L2 error over all, worst relative L2 of a token row, that row)."""
    g, w = got.double(), want.double()
    diff = (g - w).norm(dim=-1)
    norm = w.norm(dim=-1).clamp_min(1e-30)
    rows = diff / norm
    worst = int(rows.argmax()) if rows.numel() else -1
    total = float((g - w).norm() / w.norm().clamp_min(1e-30))
    return total, float(rows.max()) if rows.numel() else 0.0, worst


def nvfp4_dequantize_torch(packed_np: np.ndarray, scales_np: np.ndarray, global_scale: float):
    """float32 values of an NVFP4 matrix, by the library's CPU decoder."""
    import torch

    return torch.from_numpy(fusedmoe.dequantize_nvfp4(packed_np, scales_np, global_scale))
