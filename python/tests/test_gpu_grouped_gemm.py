"""fusedmoe.Nvfp4GroupedGemm (both operands NVFP4) against a float64 torch computation on the same
quantized bytes: groups that are empty or one row long, N and K off the tile sizes, the contest
shape D, every output dtype, a CUDA graph, clamped offsets, and argument errors. Skipped, with the
reason, without torch, a CUDA build or an sm_90 GPU."""

import re

import numpy as np
import pytest

from torch_ref import gpu_skip_reason

_reason = gpu_skip_reason()
pytestmark = pytest.mark.skipif(_reason is not None, reason=f"needs torch + CUDA + an sm_90 GPU: {_reason}")

if _reason is None:
    import torch

import fusedmoe  # noqa: E402
from fusedmoe import Error  # noqa: E402
import torch_ref  # noqa: E402


class Operands:
    """G groups of A rows and G B matrices [N, K], each quantized with its own global scale
    (fusedmoe.quantize_nvfp4: amax / (6 * 448)), on the GPU; scales as uint8 codes."""

    def __init__(self, rows, N, K, seed):
        rng = np.random.default_rng(seed)
        self.G, self.N, self.K, self.rows = len(rows), N, K, list(rows)
        self.M = sum(rows)
        aq, as_, ag, bq, bs, bg = [], [], [], [], [], []
        for r in rows:
            if r > 0:
                p, s, g = fusedmoe.quantize_nvfp4(rng.standard_normal((r, K)).astype(np.float32))
            else:  # an empty group: nothing to quantize
                p, s, g = np.zeros((0, K // 2), np.uint8), np.zeros((0, K // 16), np.uint8), 1.0
            aq.append(p)
            as_.append(s)
            ag.append(g)
            p, s, g = fusedmoe.quantize_nvfp4(rng.standard_normal((N, K)).astype(np.float32))
            bq.append(p)
            bs.append(s)
            bg.append(g)
        cuda = torch.device("cuda")
        self.a = torch.from_numpy(np.concatenate(aq)).to(cuda)
        self.a_scale = torch.from_numpy(np.concatenate(as_)).to(cuda)
        self.a_global = torch.tensor(ag, dtype=torch.float32, device=cuda)
        self.b = torch.from_numpy(np.stack(bq)).to(cuda)
        self.b_scale = torch.from_numpy(np.stack(bs)).to(cuda)
        self.b_global = torch.tensor(bg, dtype=torch.float32, device=cuda)
        self.offsets = torch.tensor(np.concatenate([[0], np.cumsum(rows)]), dtype=torch.int32, device=cuda)

    def gemm(self):
        return fusedmoe.Nvfp4GroupedGemm(self.b, self.b_scale, self.b_global)


def dequantize(packed, scale):
    """float64 e2m1 * e4m3 (per 16 along the last dim) of uint8 codes: exact."""
    v = torch_ref.e2m1_unpack_torch(packed).double()
    return v * scale.view(torch.float8_e4m3fn).float().double().repeat_interleave(16, -1)


def reference(op, offsets=None, a_global=True):
    """(value, sum |a*b|) [M, N] float64: each group's rows of dq(A) times dq(B_g)^T, times
    a_global[g] * b_global[g]; rows no group covers are 0. `offsets` (a list) may leave rows
    uncovered; None means op.offsets."""
    offs = op.offsets.tolist() if offsets is None else offsets
    A, B = dequantize(op.a, op.a_scale), dequantize(op.b, op.b_scale)
    want = torch.zeros(op.M, op.N, dtype=torch.float64, device="cuda")
    mag = torch.zeros_like(want)
    for g in range(op.G):
        r0, r1 = offs[g], offs[g + 1]
        if r1 <= r0:
            continue
        s = float(op.b_global[g]) * (float(op.a_global[g]) if a_global else 1.0)
        want[r0:r1] = (A[r0:r1] @ B[g].T) * s
        mag[r0:r1] = (A[r0:r1].abs() @ B[g].T.abs()) * abs(s)
    return want, mag


_UNIT = {}  # unit roundoff of one rounding to the output type


def check(c, want, mag, what):
    """|c - want| <= u(out) * |want| + 64 * u(fp32) * sum |a*b| per element (one output rounding
    plus fp32 accumulation), every element finite."""
    if not _UNIT:
        _UNIT.update({torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11, torch.float32: 2.0 ** -24})
    got = c.double()
    assert bool(torch.isfinite(got).all()), f"{what}: non-finite outputs at {torch.nonzero(~torch.isfinite(got))[:4].tolist()}"
    bound = want.abs() * _UNIT[c.dtype] + mag * 2.0 ** -18
    err = (got - want).abs()
    bad = err > bound
    if bool(bad.any()):
        i = int(torch.argmax(err - bound))
        r, n = divmod(i, c.shape[1])
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.numel()} outputs outside the bound; worst c[{r}, {n}] = "
            f"{float(got[r, n])!r}, want {float(want[r, n])!r} (sum |a*b| {float(mag[r, n]):.4g})"
        )


SHAPES = [  # (group rows, N, K)
    ([3, 0, 1, 130, 1], 192, 256),  # an empty group, one-row groups, a group over one row tile
    ([1, 1, 1, 1], 128, 512),      # decode-like: every group one row
    ([33], 96, 160),               # N and K off the usual tile multiples (K = 10 * 16)
    ([0, 17, 0], 64, 64),          # empty first and last groups
]


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float16", "float32"])
@pytest.mark.parametrize("rows,N,K", SHAPES)
def test_matches_float64_reference(rows, N, K, out_dtype):
    op = Operands(rows, N, K, seed=sum(rows) * 31 + N + K)
    gemm = op.gemm()
    assert (gemm.groups, gemm.n, gemm.k) == (len(rows), N, K)
    assert gemm.prepared_bytes > 0
    c = gemm.run(op.a, op.a_scale, op.offsets, op.a_global, out_dtype=getattr(torch, out_dtype))
    torch.cuda.synchronize()
    assert c.shape == (op.M, N) and c.dtype == getattr(torch, out_dtype)
    check(c, *reference(op), f"rows {rows} N {N} K {K} {out_dtype}")
    assert not gemm.offsets_clamped()


def test_contest_shape_d():
    op = Operands([128, 384], 4096, 1536, seed=4)
    c = op.gemm().run(op.a, op.a_scale, op.offsets, op.a_global)
    torch.cuda.synchronize()
    assert c.dtype == torch.bfloat16
    check(c, *reference(op), "contest shape D")


def test_a_global_none_is_one_and_scale_dtypes_agree():
    op = Operands([5, 9], 128, 256, seed=5)
    gemm = op.gemm()
    ones = torch.ones(op.G, dtype=torch.float32, device="cuda")
    c_none = gemm.run(op.a, op.a_scale, op.offsets, None, out_dtype=torch.float32)
    c_ones = gemm.run(op.a, op.a_scale, op.offsets, ones, out_dtype=torch.float32)
    torch.cuda.synchronize()
    assert torch.equal(c_none, c_ones)
    check(c_none, *reference(op, a_global=False), "a_global None")
    # float8_e4m3fn scales are the same bytes as uint8 codes: the same output, bit for bit.
    gemm8 = fusedmoe.Nvfp4GroupedGemm(op.b, op.b_scale.view(torch.float8_e4m3fn), op.b_global)
    c8 = gemm8.run(op.a, op.a_scale.view(torch.float8_e4m3fn), op.offsets, None, out_dtype=torch.float32)
    torch.cuda.synchronize()
    assert torch.equal(c8, c_none)


def test_out_given_and_workspace_growth():
    small = Operands([2, 3], 128, 256, seed=6)
    gemm = small.gemm()
    assert gemm.workspace_size(0) <= gemm.workspace_size(5) <= gemm.workspace_size(500)
    out = torch.full((small.M, 128), float("nan"), dtype=torch.float16, device="cuda")
    c = gemm.run(small.a, small.a_scale, small.offsets, small.a_global, out=out)
    assert c is out
    # A larger call on the same object (same B): the workspace grows.
    big = Operands([200, 300], 128, 256, seed=6)
    big.b, big.b_scale, big.b_global = small.b, small.b_scale, small.b_global
    c_big = gemm.run(big.a, big.a_scale, big.offsets, big.a_global)
    torch.cuda.synchronize()
    check(out, *reference(small), "small call, out given")
    check(c_big, *reference(big), "larger call after growth")
    with pytest.raises(Error, match=re.escape("out is torch.float16 but out_dtype is torch.float32")):
        gemm.run(small.a, small.a_scale, small.offsets, out=out, out_dtype=torch.float32)


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


def test_cuda_graph():
    op = Operands([40, 0, 88], 256, 512, seed=7)
    gemm = op.gemm()
    gemm.reserve(op.M)
    c = torch.empty(op.M, 256, dtype=torch.bfloat16, device="cuda")
    g, _ = capture(lambda: gemm.run(op.a, op.a_scale, op.offsets, op.a_global, out=c))
    for seed in (8, 9):  # new A in the captured buffers, then replay
        new = Operands([40, 0, 88], 256, 512, seed=seed)
        op.a.copy_(new.a)
        op.a_scale.copy_(new.a_scale)
        op.a_global.copy_(new.a_global)
        c.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        new.b, new.b_scale, new.b_global = op.b, op.b_scale, op.b_global
        check(c, *reference(new), f"graph replay, A of seed {seed}")


def test_capture_without_a_reserved_workspace_is_an_error():
    op = Operands([8, 8], 128, 128, seed=10)
    gemm = op.gemm()
    c = torch.empty(op.M, 128, dtype=torch.bfloat16, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        with pytest.raises(Error, match=re.escape("call reserve(16) before capturing")):
            gemm.run(op.a, op.a_scale, op.offsets, op.a_global, out=c)


def test_unchecked_bad_offsets_are_clamped():
    """validate_offsets=False: offsets [0, 6, 2, 20] (decreasing, ending short of M = 24) run as
    the prefix maximum [0, 6, 6, 20]; rows 20..23 belong to no group and come out 0."""
    op = Operands([6, 0, 18], 128, 256, seed=11)
    gemm = op.gemm()
    bad = torch.tensor([0, 6, 2, 20], dtype=torch.int32, device="cuda")
    c = torch.full((op.M, 128), float("nan"), dtype=torch.float32, device="cuda")
    gemm.run(op.a, op.a_scale, bad, op.a_global, out=c, validate_offsets=False)
    assert gemm.offsets_clamped()
    check(c, *reference(op, offsets=[0, 6, 6, 20]), "clamped offsets")
    assert bool((c[20:] == 0).all())
    gemm.run(op.a, op.a_scale, op.offsets, op.a_global, out=c, validate_offsets=False)
    assert not gemm.offsets_clamped()


def test_argument_errors():
    op = Operands([4, 4], 64, 128, seed=12)
    gemm = op.gemm()

    def raises(message, fn, regex=False):
        with pytest.raises(Error, match=message if regex else re.escape(message)):
            fn()

    # Checked offsets (the default): a bad one raises, naming offsets.
    for bad in ([0, 5, 4], [0, 4, 7], [1, 4, 8], [0, 9, 8]):
        offs = torch.tensor(bad, dtype=torch.int32, device="cuda")
        raises(r"offsets", lambda: gemm.run(op.a, op.a_scale, offs, op.a_global), regex=True)
    raises("Nvfp4GroupedGemm: offsets must be i32, got int64",
           lambda: gemm.run(op.a, op.a_scale, op.offsets.long(), op.a_global))
    raises("Nvfp4GroupedGemm: a must be e2m1x2 (or uint8 codes), got float64",
           lambda: gemm.run(op.a.double(), op.a_scale, op.offsets, op.a_global))
    raises("Nvfp4GroupedGemm: a_scale must be e4m3 (or uint8 codes), got int16",
           lambda: gemm.run(op.a, op.a_scale.short(), op.offsets, op.a_global))
    raises("Nvfp4GroupedGemm: a must be in CUDA device memory",
           lambda: gemm.run(op.a.cpu(), op.a_scale, op.offsets, op.a_global))
    raises("Nvfp4GroupedGemm.run: out_dtype must be torch.bfloat16, torch.float16 or torch.float32, got torch.int32",
           lambda: gemm.run(op.a, op.a_scale, op.offsets, op.a_global, out_dtype=torch.int32))
    # Shapes and dtypes the library checks (its messages name the argument).
    raises(r"\ba_scale\b", lambda: gemm.run(op.a, op.a_scale[:, :4], op.offsets, op.a_global), regex=True)
    raises(r"\ba_global\b", lambda: gemm.run(op.a, op.a_scale, op.offsets, op.a_global[:1]), regex=True)
    raises(r"\bc\b", lambda: gemm.run(op.a, op.a_scale, op.offsets, op.a_global,
                                       out=torch.empty(op.M, 63, dtype=torch.bfloat16, device="cuda")), regex=True)
    raises(r"\bworkspace\b", lambda: gemm.run(op.a, op.a_scale, op.offsets, op.a_global,
                                               workspace=torch.empty(1, dtype=torch.uint8, device="cuda")), regex=True)
    # The constructor: a NaN block scale in B, a missing or short b_global.
    nan_scale = op.b_scale.clone()
    nan_scale[1, 3, 2] = 0x7F
    raises(r"(?i)b_scale|nan", lambda: fusedmoe.Nvfp4GroupedGemm(op.b, nan_scale, op.b_global), regex=True)
    raises("Nvfp4GroupedGemm: b_global is required", lambda: fusedmoe.Nvfp4GroupedGemm(op.b, op.b_scale, None))
    raises(r"\bb_global\b", lambda: fusedmoe.Nvfp4GroupedGemm(op.b, op.b_scale, op.b_global[:1]), regex=True)
