"""Bad tensor arguments are refused with fusedmoe.Error naming the op, the argument and expected vs
actual, before anything touches a GPU. numpy only (CPU arrays): no torch, no GPU needed."""

import re

import numpy as np
import pytest

import fusedmoe
from fusedmoe import DType, Error, MoeConfig, MoeLayer


def small_fp8_config():
    c = MoeConfig.preset("qwen3-30b-a3b")
    c.hidden, c.intermediate, c.num_experts, c.top_k = 256, 128, 8, 2
    c.validate()
    return c


def fp8_weights(c):
    E, H, I = c.num_experts, c.hidden, c.intermediate
    return dict(
        w13=np.zeros((E, 2 * I, H), np.uint8),
        w13_scale=np.ones((E, 2 * I // 128, H // 128), np.float32),
        w2=np.zeros((E, H, I), np.uint8),
        w2_scale=np.ones((E, H // 128, I // 128), np.float32),
    )


def test_cpu_weights_are_refused_before_any_gpu_work():
    c = small_fp8_config()
    with pytest.raises(Error, match=re.escape("MoeLayer: w13 must be in CUDA device memory, got [8, 256, 256] e4m3 cpu")):
        MoeLayer(c, **fp8_weights(c))


# Arguments are converted in order (w13, w13_scale, w2, ...); an absent one (None) passes
# conversion, so each case below leaves the arguments before the bad one out.
@pytest.mark.parametrize(
    "name,array,message",
    [
        ("w13", np.zeros((8, 256, 256), np.float64), "MoeLayer: w13 must be e4m3 (or uint8 codes), got float64"),
        ("w13_scale", np.zeros((8, 2, 2), np.int64), "MoeLayer: w13_scale must be f32, got int64"),
        ("w2", np.zeros((8, 256, 128), np.complex64), "MoeLayer: w2 must be e4m3 (or uint8 codes), got complex64"),
        ("routing_bias", np.zeros(8, np.uint8), "MoeLayer: routing_bias must be f32, got uint8"),
        ("shared_gate", np.zeros(256, np.float64), "MoeLayer: shared_gate must be bf16, got float64"),
        ("w2", np.zeros((8, 256, 128), np.float32), "MoeLayer: w2 must be in CUDA device memory, got [8, 256, 128] f32 cpu"),
    ],
)
def test_each_argument_is_named(name, array, message):
    c = small_fp8_config()
    kw = dict(w13=None, w2=None)
    kw[name] = array
    with pytest.raises(Error, match=re.escape(message)):
        MoeLayer(c, **kw)


def test_weights_are_required():
    with pytest.raises(Error, match=re.escape("MoeLayer: w13 is required")):
        MoeLayer(small_fp8_config(), w13=None, w2=None)


def test_a_bf16_layer_names_bf16_as_expected():
    c = small_fp8_config()
    c.weight_precision = c.activation_precision = fusedmoe.Precision.bf16
    with pytest.raises(Error, match=re.escape("MoeLayer: w2 must be bf16 (or uint8 codes), got int16")):
        MoeLayer(c, w13=None, w2=np.zeros((8, 256, 128), np.int16))


def test_not_a_tensor_and_too_many_dims():
    c = small_fp8_config()
    with pytest.raises(Error, match="MoeLayer: w13 must be a tensor or array .*got str"):
        MoeLayer(c, w13="weights", w2=np.zeros(1, np.uint8))
    with pytest.raises(Error, match=re.escape("MoeLayer: w13 has 5 dimensions; at most 4")):
        MoeLayer(c, w13=np.zeros((1, 1, 1, 1, 1), np.uint8), w2=np.zeros(1, np.uint8))


def test_dtype_override_tuple_must_fit_the_storage():
    c = small_fp8_config()
    with pytest.raises(Error, match=re.escape("MoeLayer: w13: a float32 storage cannot hold e4m3 elements (1 bytes each)")):
        MoeLayer(c, w13=(np.zeros(4, np.float32), DType.e4m3), w2=np.zeros(1, np.uint8))
    with pytest.raises(Error, match=re.escape("MoeLayer: w13 must be a tensor or a (tensor, fusedmoe.DType) pair")):
        MoeLayer(c, w13=(np.zeros(4, np.uint8), "e4m3"), w2=np.zeros(1, np.uint8))


def test_config_checks_come_first():
    c = small_fp8_config()
    c.hidden = 100
    with pytest.raises(Error, match="hidden size 100 must be a multiple of 16"):
        MoeLayer(c, **fp8_weights(small_fp8_config()))
    with pytest.raises(Error, match="config must be a fusedmoe.MoeConfig or a preset name, got int"):
        MoeLayer(3, **fp8_weights(small_fp8_config()))  # type: ignore[arg-type]
    with pytest.raises(Error, match='unknown preset "qwen9"'):
        MoeLayer("qwen9", **fp8_weights(small_fp8_config()))


def nvfp4_gemv_args(M=32, K=64):
    return dict(
        a=np.zeros((M, K // 2), np.uint8),
        a_scale=np.zeros((M, K // 16), np.uint8),
        a_global=np.ones(1, np.float32),
        b=np.zeros(K // 2, np.uint8),
        c=np.zeros(M, np.float32),
        b_scale=np.zeros(K // 16, np.uint8),
        b_global=np.ones(1, np.float32),
    )


def test_gemv_refuses_host_arrays():
    a = nvfp4_gemv_args()
    with pytest.raises(Error, match=re.escape("gemv_nvfp4: a must be in CUDA device memory, got [32, 32] e2m1x2 cpu")):
        fusedmoe.gemv_nvfp4(a.pop("a"), a.pop("a_scale"), a.pop("a_global"), a.pop("b"), a.pop("c"), **a)


def test_gemv_dtype_and_readonly_output():
    a = nvfp4_gemv_args()
    a["a"] = a["a"].astype(np.float64)
    with pytest.raises(Error, match=re.escape("gemv_nvfp4: a must be e2m1x2 (or uint8 codes), got float64")):
        fusedmoe.gemv_nvfp4(a.pop("a"), a.pop("a_scale"), a.pop("a_global"), a.pop("b"), a.pop("c"), **a)
    c = np.zeros(32, np.float32)
    c.flags.writeable = False
    with pytest.raises(Error, match=re.escape("gemv_nvfp4: c is read-only; it is written to")):
        fusedmoe.gemv_nvfp4(None, None, None, None, c)


def test_moe_gemv_refuses_wrong_id_dtype():
    with pytest.raises(Error, match=re.escape("moe_gemv_nvfp4: topk_ids must be i32, got int64")):
        fusedmoe.moe_gemv_nvfp4(
            None, None, None, None, np.zeros((1, 2), np.int64), None, np.zeros((1, 4), np.float32)
        )


def test_grouped_gemm_constructor_arguments():
    G, N, K = 2, 8, 32
    b, b_scale, b_global = np.zeros((G, N, K // 2), np.uint8), np.zeros((G, N, K // 16), np.uint8), np.ones(G, np.float32)
    with pytest.raises(Error, match=re.escape("Nvfp4GroupedGemm: b must be in CUDA device memory, got [2, 8, 16] e2m1x2 cpu")):
        fusedmoe.Nvfp4GroupedGemm(b, b_scale, b_global)
    with pytest.raises(Error, match=re.escape("Nvfp4GroupedGemm: b must be e2m1x2 (or uint8 codes), got float64")):
        fusedmoe.Nvfp4GroupedGemm(b.astype(np.float64), None, None)
    with pytest.raises(Error, match=re.escape("Nvfp4GroupedGemm: b_scale must be e4m3 (or uint8 codes), got int16")):
        fusedmoe.Nvfp4GroupedGemm(None, b_scale.astype(np.int16), None)
    with pytest.raises(Error, match=re.escape("Nvfp4GroupedGemm: b_global must be f32, got int64")):
        fusedmoe.Nvfp4GroupedGemm(None, None, np.ones(G, np.int64))
    with pytest.raises(Error, match=re.escape("Nvfp4GroupedGemm: b is required")):
        fusedmoe.Nvfp4GroupedGemm(None, None, None)
