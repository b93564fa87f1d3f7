"""RoPE (fusedmoe.rope) from Python against a plain torch implementation of both styles: float64
math on the same bf16 / f16 / f32 inputs and the same fp32 cos/sin cache (vLLM's layout, built
as vLLM builds it). Skipped, with the reason, without torch, a CUDA build or an sm_90 GPU."""

import zlib

import pytest

from torch_ref import gpu_skip_reason

_reason = gpu_skip_reason()
pytestmark = pytest.mark.skipif(_reason is not None, reason=f"needs torch + CUDA + an sm_90 GPU: {_reason}")

if _reason is None:
    import torch

import fusedmoe  # noqa: E402

# Spacing of the storage type relative to |value| (at most 2^-mantissa_bits): one ulp.
_REL_ULP = {"bfloat16": 2.0**-7, "float16": 2.0**-10, "float32": 2.0**-23}


def cos_sin_cache(max_position, rope_dim, base=10000.0):
    """vLLM's RotaryEmbedding._compute_cos_sin_cache: fp32 frequencies, [max_position, rope_dim]."""
    inv_freq = 1.0 / (base ** (torch.arange(0, rope_dim, 2, dtype=torch.float) / rope_dim))
    t = torch.arange(max_position, dtype=torch.float)
    freqs = torch.einsum("i,j->ij", t, inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).cuda()


def torch_rope(x, positions, cache, rope_dim, style, inverse=False):
    """x [T, H, D] -> (rotated float64 [T, H, D], |x cos| + |y sin| per element): the last rope_dim
    values of each head, pairs (i, i + R/2) for neox, (2i, 2i + 1) for gptj. Positions outside the
    cache leave their token as it is."""
    T, H, D = x.shape
    R, half = rope_dim, rope_dim // 2
    x64 = x.double().cpu()
    out, terms = x64.clone(), torch.zeros_like(x64)
    pos = positions.long().cpu()
    ok = (pos >= 0) & (pos < cache.shape[0])
    rows = cache.double().cpu()[pos.clamp(0, cache.shape[0] - 1)]  # [T, R]
    cos, sin = rows[:, None, :half], rows[:, None, half:]
    if inverse:
        sin = -sin
    part = x64[..., D - R:]
    a, b = (part[..., :half], part[..., half:]) if style == "neox" else (part[..., 0::2], part[..., 1::2])
    na, nb = a * cos - b * sin, b * cos + a * sin
    ta, tb = (a * cos).abs() + (b * sin).abs(), (b * cos).abs() + (a * sin).abs()
    rot, rot_terms = torch.empty_like(part), torch.empty_like(part)
    if style == "neox":
        rot[..., :half], rot[..., half:] = na, nb
        rot_terms[..., :half], rot_terms[..., half:] = ta, tb
    else:
        rot[..., 0::2], rot[..., 1::2] = na, nb
        rot_terms[..., 0::2], rot_terms[..., 1::2] = ta, tb
    out[ok, :, D - R:] = rot[ok]
    terms[ok, :, D - R:] = rot_terms[ok]
    return out, terms


def assert_close(got, want, terms, what):
    # One ulp of the storage type (the kernel rounds its fp32 result once; near a midpoint fp32
    # noise may pick either neighbour), plus that fp32 noise itself (<= 2^-23 * terms), which is
    # what remains under cancellation.
    # Below the smallest normal the spacing is fixed: one subnormal step (fp16 2^-24, bf16 2^-133,
    # fp32 2^-149) is the floor of the bound (an H100 run met an fp16 result of -120 * 2^-24 for a
    # true -120.23 * 2^-24: correctly rounded, but 1.4e-8 off against a relative bound of 1.3e-8).
    name = str(got.dtype).replace("torch.", "")
    rel = _REL_ULP[name]
    step = {"float16": 2.0**-24, "bfloat16": 2.0**-133, "float32": 2.0**-149}[name]
    g = got.double().cpu()
    bound = (rel * want.abs()).clamp_min(step) + 4 * 2.0**-24 * terms + 1e-30
    err = (g - want).abs()
    bad = (err > bound) | ~torch.isfinite(g)
    if bad.any():
        i = tuple(int(v) for v in bad.nonzero()[0])
        raise AssertionError(f"{what}: {int(bad.sum())} elements off; first {i}: got {float(g[i])!r}, "
                             f"want {float(want[i])!r}, bound {float(bound[i]):.3g}")


@pytest.mark.parametrize("style", ["neox", "gptj"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("shape", ["deepseek", "llama"])
@pytest.mark.parametrize("pos_dtype", ["int64", "int32"])
def test_matches_torch(style, dtype, shape, pos_dtype):
    seed = zlib.crc32(repr((style, dtype, shape, pos_dtype)).encode())  # stable across runs
    gen = torch.Generator().manual_seed(seed)
    T = 37
    Hq, Hk, D, R = (16, 0, 192, 64) if shape == "deepseek" else (8, 2, 128, 128)
    dt = getattr(torch, dtype)
    q = torch.randn(T, Hq, D, generator=gen).to(dt).cuda()
    k = torch.randn(T, Hk, D, generator=gen).to(dt).cuda() if Hk else None
    cache = cos_sin_cache(4096, R)
    positions = torch.randint(0, 4096, (T,), generator=gen).to(getattr(torch, pos_dtype)).cuda()
    want_q, terms_q = torch_rope(q, positions, cache, R, style)
    want_k, terms_k = torch_rope(k, positions, cache, R, style) if k is not None else (None, None)
    fusedmoe.rope(q, positions, cache, R, k=k, style=style)
    torch.cuda.synchronize()
    assert_close(q, want_q, terms_q, f"q {shape} {dtype} {style} positions {pos_dtype} seed {seed}")
    if k is not None:
        assert_close(k, want_k, terms_k, f"k {shape} {dtype} {style} positions {pos_dtype} seed {seed}")


@pytest.mark.parametrize("style", ["neox", "gptj"])
def test_fused_qkv_slices(style):
    # q and k as views of one [T, Hq + 2 Hk, D] qkv tensor: v and every non-rope value untouched.
    gen = torch.Generator().manual_seed(5)
    T, Hq, Hk, D, R = 19, 8, 2, 128, 64
    qkv = torch.randn(T, Hq + 2 * Hk, D, generator=gen).bfloat16().cuda()
    before = qkv.clone()
    q, k = qkv[:, :Hq], qkv[:, Hq:Hq + Hk]
    positions = torch.arange(T, device="cuda") * 3
    cache = cos_sin_cache(256, R)
    want_q, terms_q = torch_rope(q, positions, cache, R, style)
    want_k, terms_k = torch_rope(k, positions, cache, R, style)
    fusedmoe.rope(q, positions, cache, R, k=k, style=style)
    torch.cuda.synchronize()
    assert_close(q, want_q, terms_q, "q slice")
    assert_close(k, want_k, terms_k, "k slice")
    assert torch.equal(qkv[:, Hq + Hk:], before[:, Hq + Hk:]), "v changed"
    assert torch.equal(qkv[:, :Hq + Hk, :D - R], before[:, :Hq + Hk, :D - R]), "non-rope values changed"


@pytest.mark.parametrize("style", ["neox", "gptj"])
def test_forward_then_inverse(style):
    # Two bf16 roundings with a rotation between: within 2.5 * 2^-8 * (|x| + |y|) of the input.
    gen = torch.Generator().manual_seed(6)
    T, H, D, R = 128, 32, 128, 128
    x = torch.randn(T, H, D, generator=gen).bfloat16().cuda()
    q = x.clone()
    positions = torch.randint(0, 8192, (T,), generator=gen).cuda()
    cache = cos_sin_cache(8192, R)
    fusedmoe.rope(q, positions, cache, R, style=style)
    fusedmoe.rope(q, positions, cache, R, style=style, inverse=True)
    torch.cuda.synchronize()
    x64 = x.double().cpu()
    partner = x64.roll(R // 2, dims=-1) if style == "neox" else x64.view(T, H, D // 2, 2).flip(-1).reshape(T, H, D)
    bound = (2.5 * 2.0**-8 + 8 * 2.0**-24) * (x64.abs() + partner.abs())
    err = (q.double().cpu() - x64).abs()
    assert (err <= bound).all(), f"worst excess {float((err - bound).max()):.3g}"


def test_bad_positions_counted_and_left_alone():
    gen = torch.Generator().manual_seed(7)
    T, H, D, R = 10, 4, 64, 64
    q = torch.randn(T, H, D, generator=gen).bfloat16().cuda()
    before = q.clone()
    positions = torch.tensor([0, -1, 5, 100, 2**40, 99, -(2**40), 1, 2, 3], dtype=torch.int64, device="cuda")
    cache = cos_sin_cache(100, R)
    bad = torch.full((1,), 5, dtype=torch.int32, device="cuda")
    want, terms = torch_rope(q, positions, cache, R, "neox")
    fusedmoe.rope(q, positions, cache, R, bad_position_count=bad)
    torch.cuda.synchronize()
    # -1, 100 (== max_position), 2^40 and -2^40 (0 and 0 if truncated to 32 bits) are out of range
    assert int(bad.item()) == 5 + 4, "each bad position adds 1 to the counter (never reset)"
    for t in (1, 3, 4, 6):
        assert torch.equal(q[t], before[t]), f"token {t} with a bad position changed"
    assert_close(q, want, terms, "bad positions")


def test_current_stream_and_graph():
    # A call on a side stream and a CUDA-graph replay give the bits of an eager call.
    gen = torch.Generator().manual_seed(8)
    T, Hq, Hk, D, R = 64, 8, 2, 128, 128
    q0 = torch.randn(T, Hq, D, generator=gen).bfloat16().cuda()
    k0 = torch.randn(T, Hk, D, generator=gen).bfloat16().cuda()
    positions = torch.randint(0, 1024, (T,), generator=gen).cuda()
    cache = cos_sin_cache(1024, R)
    q1, k1 = q0.clone(), k0.clone()
    fusedmoe.rope(q1, positions, cache, R, k=k1)
    side = torch.cuda.Stream()
    q2, k2 = q0.clone(), k0.clone()
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        fusedmoe.rope(q2, positions, cache, R, k=k2)
    side.synchronize()
    assert torch.equal(q1, q2) and torch.equal(k1, k2)
    q3, k3 = q0.clone(), k0.clone()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fusedmoe.rope(q3, positions, cache, R, k=k3)
    q3.copy_(q0)
    k3.copy_(k0)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(q1, q3) and torch.equal(k1, k3)


def test_errors_name_the_argument():
    q = torch.zeros(4, 2, 64, dtype=torch.bfloat16, device="cuda")
    cache = cos_sin_cache(16, 64)
    pos = torch.zeros(4, dtype=torch.int64, device="cuda")
    cases = [
        (lambda: fusedmoe.rope(q, pos, cache, 64, style="llama"), "rope: style must be 'neox' or 'gptj', got 'llama'"),
        (lambda: fusedmoe.rope(q, pos.float(), cache, 64), "rope: positions must be i32 or i64, got [4] f32"),
        (lambda: fusedmoe.rope(q, pos, cache, 63), "rope: rope_dim must be a positive even number, got 63"),
        (lambda: fusedmoe.rope(q, pos, cache, 128), "rope: rope_dim = 128 is larger than head_dim = 64"),
        (lambda: fusedmoe.rope(q, pos, cache[:, :32], 64), "rope: cos_sin_cache must be [max_position, 64]"),
        (lambda: fusedmoe.rope(q, pos, cache.double(), 64), "rope: cos_sin_cache must be f32"),
        (lambda: fusedmoe.rope(q, pos[:3], cache, 64), "rope: positions must have shape [4]"),
        (lambda: fusedmoe.rope(q, pos, cache, 64, k=q.half()), "rope: k must have q's dtype bf16"),
        (lambda: fusedmoe.rope(q.cpu(), pos, cache, 64), "rope: q must be in CUDA device memory"),
        (lambda: fusedmoe.rope(q[..., ::2], pos, cos_sin_cache(16, 32), 32),
         "rope: q must have unit stride in its last dimension, got stride 2"),
        (lambda: fusedmoe.rope(q[0], pos, cache, 64), "rope: q must be [T, num_q_heads, head_dim]"),
    ]
    for call, needle in cases:
        with pytest.raises(fusedmoe.Error) as e:
            call()
        assert needle in str(e.value), f"{str(e.value)!r} does not contain {needle!r}"
