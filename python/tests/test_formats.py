"""The CPU codecs and quantizers from Python (numpy in, numpy out): exact codes where the format
fixes them, the documented scale rules, and their argument errors."""

import re

import numpy as np
import pytest

import fusedmoe
from fusedmoe import Error


def e4m3_values():
    """Every finite e4m3 code and its value, from the format's definition (1 sign, 4 exponent bits
    with bias 7, 3 mantissa bits; exponent 0 is subnormal; S.1111.111 is NaN)."""
    codes, values = [], []
    for c in range(256):
        s, e, m = c >> 7, (c >> 3) & 0xF, c & 7
        if e == 0xF and m == 7:
            continue
        v = (m / 8) * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        codes.append(c)
        values.append(-v if s else v)
    return np.array(codes, np.uint8), np.array(values, np.float32)


def test_e4m3_decode_matches_the_format_definition():
    codes, values = e4m3_values()
    np.testing.assert_array_equal(fusedmoe.e4m3_to_float(codes), values)
    assert np.isnan(fusedmoe.e4m3_to_float(np.array([0x7F, 0xFF], np.uint8))).all()


def test_e4m3_encode_round_trips_every_value_and_saturates():
    codes, values = e4m3_values()
    back = fusedmoe.e4m3_from_float(values)
    # +0 and -0 both exist; every other value has one code
    np.testing.assert_array_equal(back, codes)
    got = fusedmoe.e4m3_from_float(np.array([500.0, -1e9, np.inf, np.nan, 1.0 + 1 / 16], np.float32))
    # saturate to +-448 (0x7E / 0xFE), NaN -> 0x7F, 1 + 1/16 is the tie between 1 and 1.125: even (1.0)
    np.testing.assert_array_equal(got, np.array([0x7E, 0xFE, 0x7E, 0x7F, 0x38], np.uint8))


def test_e4m3_codec_keeps_the_shape():
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 3, 4)
    q = fusedmoe.e4m3_from_float(x)
    assert q.shape == (2, 3, 4) and q.dtype == np.uint8
    assert fusedmoe.e4m3_to_float(q).shape == (2, 3, 4)


def test_bf16_rounds_to_nearest_even():
    x = np.array([1.0, 1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, -2.0, np.inf], np.float32)
    np.testing.assert_array_equal(
        fusedmoe.bf16_from_float(x), np.array([0x3F80, 0x3F80, 0x3F82, 0xC000, 0x7F80], np.uint16)
    )


def dequant_blocks(q, s, rows_per, cols_per):
    """Reference dequantization: e4m3 value times its block's scale."""
    v = fusedmoe.e4m3_to_float(q)
    rs = np.repeat(np.repeat(s, rows_per, axis=-2), cols_per, axis=-1)
    return v * rs[..., : v.shape[-2], : v.shape[-1]]


def test_fp8_block_scales_are_amax_over_448_per_128x128_block():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((300, 200)).astype(np.float32)
    q, s = fusedmoe.quantize_fp8_block(w)
    assert q.shape == (300, 200) and q.dtype == np.uint8
    assert s.shape == (3, 2) and s.dtype == np.float32
    for bi in range(3):
        for bj in range(2):
            blk = w[bi * 128 : (bi + 1) * 128, bj * 128 : (bj + 1) * 128]
            assert s[bi, bj] == np.float32(np.abs(blk).max() / np.float32(448))
    d = fusedmoe.dequantize_fp8_block(q, s)
    np.testing.assert_array_equal(d, dequant_blocks(q, s, 128, 128))
    # e4m3 keeps 3 mantissa bits: relative error at most 2^-4 above the subnormal range
    big = np.abs(w) > 2.0 ** -6 * np.repeat(np.repeat(s, 128, 0), 128, 1)[:300, :200]
    assert np.all(np.abs(d - w)[big] <= 2.0 ** -4 * np.abs(w)[big])


def test_fp8_block_3d_is_per_expert():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((3, 256, 128)).astype(np.float32)
    w[1] *= 100
    q, s = fusedmoe.quantize_fp8_block(w)
    assert q.shape == w.shape and s.shape == (3, 2, 1)
    for e in range(3):
        qe, se = fusedmoe.quantize_fp8_block(np.ascontiguousarray(w[e]))
        np.testing.assert_array_equal(q[e], qe)
        np.testing.assert_array_equal(s[e], se)
    np.testing.assert_array_equal(fusedmoe.dequantize_fp8_block(q, s)[1], dequant_blocks(q[1], s[1], 128, 128))


def test_fp8_block_zero_block_and_nan_poisoning():
    w = np.ones((256, 128), np.float32)
    w[:128] = 0
    w[200, 5] = np.nan
    q, s = fusedmoe.quantize_fp8_block(w)
    assert s[0, 0] == 0 and not q[:128].any()
    d = fusedmoe.dequantize_fp8_block(q, s)
    assert not d[:128].any()
    assert np.isnan(d[128:]).all()  # the block with the NaN dequantizes to NaN, all of it


def test_fp8_per_token_scales():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 320)).astype(np.float32)
    q, s = fusedmoe.quantize_fp8_per_token(x)
    assert q.shape == (5, 320) and s.shape == (5, 3)
    for b in range(3):
        np.testing.assert_array_equal(s[:, b], np.abs(x[:, b * 128 : (b + 1) * 128]).max(1) / np.float32(448))
    np.testing.assert_array_equal(fusedmoe.dequantize_fp8_per_token(q, s), dequant_blocks(q, s, 1, 128))
    q64, s64 = fusedmoe.quantize_fp8_per_token(x, block=64)
    assert s64.shape == (5, 5)
    np.testing.assert_array_equal(s64[:, 0], np.abs(x[:, :64]).max(1) / np.float32(448))


def e2m1_value(code):
    mag = [0, 0.5, 1, 1.5, 2, 3, 4, 6][code & 7]
    return -mag if code & 8 else mag


def test_nvfp4_layout_and_values():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    packed, scales, g = fusedmoe.quantize_nvfp4(x)
    assert packed.shape == (4, 32) and scales.shape == (4, 4)
    assert g == pytest.approx(np.abs(x).max() / (6 * 448), rel=1e-6)
    d = fusedmoe.dequantize_nvfp4(packed, scales, g)
    sv = fusedmoe.e4m3_to_float(scales)
    for r in range(4):
        for k in range(64):
            code = packed[r, k // 2] >> (4 * (k % 2)) & 0xF  # even element in the low nibble
            assert d[r, k] == np.float32(e2m1_value(code) * sv[r, k // 16] * np.float32(g))
    # E2M1 steps are at most a third of the value above the block's smallest step
    assert np.all(np.abs(d - x) <= np.maximum(np.abs(x) / 3, np.repeat(sv, 16, 1) * g))


def test_mxfp4_layout_and_values():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 96)).astype(np.float32)
    x[2] = 0.0  # an all-zero row: code 0 scales, zero values
    packed, scales = fusedmoe.quantize_mxfp4(x)
    assert packed.shape == (3, 48) and scales.shape == (3, 3) and scales.dtype == np.uint8
    d = fusedmoe.dequantize_mxfp4(packed, scales)
    for r in range(3):
        for b in range(3):
            amax = np.abs(x[r, 32 * b:32 * b + 32]).max()
            s = 2.0 ** (int(scales[r, b]) - 127)
            # the scale is the power of two amax / 6 rounded up: nothing clips
            assert amax == 0 or (s >= amax / 6 and s / 2 < amax / 6), (r, b, s, amax)
            for k in range(32 * b, 32 * b + 32):
                code = packed[r, k // 2] >> (4 * (k % 2)) & 0xF  # even element in the low nibble
                assert d[r, k] == np.float32(e2m1_value(code) * s)
    assert np.all(d[2] == 0) and np.all(scales[2] == 0)
    with pytest.raises(fusedmoe.Error, match="quantize_mxfp4: x has 48 columns; MXFP4 needs a multiple of 32"):
        fusedmoe.quantize_mxfp4(np.zeros((2, 48), np.float32))
    with pytest.raises(fusedmoe.Error, match="dequantize_mxfp4: scales"):
        fusedmoe.dequantize_mxfp4(packed, scales[:, :2].copy())


@pytest.mark.parametrize(
    "call,message",
    [
        (lambda: fusedmoe.quantize_fp8_block(np.zeros((4, 4), np.float64)), "quantize_fp8_block: w must be f32, got float64"),
        (lambda: fusedmoe.quantize_fp8_block(np.zeros(4, np.float32)), "quantize_fp8_block: w must have 2 to 3 dimensions, got [4] f32 cpu"),
        (lambda: fusedmoe.quantize_fp8_block(np.zeros((4, 8), np.float32)[:, ::2]),
         "quantize_fp8_block: w must be contiguous (row-major), got [4, 4] f32 cpu with strides [8, 2]"),
        (lambda: fusedmoe.dequantize_fp8_block(np.zeros((256, 128), np.uint8), np.zeros((1, 1), np.float32)),
         "dequantize_fp8_block: scale_inv must have shape [2, 1], got [1, 1] f32 cpu"),
        (lambda: fusedmoe.dequantize_fp8_block(np.zeros((2, 2), np.float32), np.zeros((1, 1), np.float32)),
         "dequantize_fp8_block: q must be e4m3, got [2, 2] f32 cpu"),
        (lambda: fusedmoe.quantize_fp8_per_token(np.zeros((2, 2), np.float32), block=0), "quantize_fp8_per_token: block must be >= 1, got 0"),
        (lambda: fusedmoe.dequantize_fp8_per_token(np.zeros((2, 300), np.uint8), np.zeros((2, 2), np.float32)),
         "dequantize_fp8_per_token: scales must have shape [2, 3], got [2, 2] f32 cpu"),
        (lambda: fusedmoe.quantize_nvfp4(np.zeros((2, 24), np.float32)), "quantize_nvfp4: x has 24 columns; NVFP4 needs a multiple of 16"),
        (lambda: fusedmoe.quantize_nvfp4(np.ones((2, 32), np.float32), global_scale=-1.0), "quantize_nvfp4: global_scale must be finite and > 0, got -1"),
        (lambda: fusedmoe.dequantize_nvfp4(np.zeros((2, 16), np.uint8), np.zeros((2, 1), np.uint8), 1.0),
         "dequantize_nvfp4: block_scales must have shape [2, 2], got [2, 1] e4m3 cpu"),
        (lambda: fusedmoe.e4m3_from_float(np.zeros(3, np.int32)), "e4m3_from_float: x must be f32, got [3] i32 cpu"),
        (lambda: fusedmoe.e4m3_from_float([1.0, 2.0]), "e4m3_from_float: x must be a tensor or array (DLPack or the buffer protocol), got list"),
    ],
)
def test_argument_errors(call, message):
    with pytest.raises(Error, match=re.escape(message)):
        call()
