"""The checkpoint loader from Python (fusedmoe.load_moe_layer) on small checkpoints the tests write
(checkpoint_util.py). CPU, numpy only. Skipped, with the reason, when the extension was built
without the loader (include/fusedmoe/checkpoint.hpp)."""

import numpy as np
import pytest

import fusedmoe
from fusedmoe import DType, Error, Precision, RoutingFn
import checkpoint_util as ck

pytestmark = pytest.mark.skipif(
    not fusedmoe.has_checkpoint_loader,
    reason="this build has no checkpoint loader (no include/fusedmoe/checkpoint.hpp in its tree)",
)

E, H, I = 4, 256, 128
STORED = {DType.e4m3: np.uint8, DType.e2m1x2: np.uint8, DType.ue8m0: np.uint8, DType.bf16: np.int16,
          DType.f32: np.float32}


def check_tensors(tensors, want):
    assert set(tensors) == set(want)
    for name, w in want.items():
        got, dtype = tensors[name]
        assert got.dtype == STORED[dtype], name
        assert got.shape == w.shape, name
        np.testing.assert_array_equal(got.view(w.dtype), w, err_msg=name)


def test_qwen3_fp8(tmp_path):
    want = ck.write_checkpoint(tmp_path, ck.QWEN3, E, H, I, layer=1, seed=1)
    cfg, tensors = fusedmoe.load_moe_layer(tmp_path, 1)
    assert (cfg.hidden, cfg.intermediate, cfg.num_experts, cfg.top_k) == (H, I, E, 2)
    assert cfg.weight_precision == Precision.fp8_block
    check_tensors(tensors, want)
    assert tensors["w13"][1] == DType.e4m3 and tensors["router_weight"][1] == DType.bf16


def test_deepseek_v3_with_bias_and_shared_expert(tmp_path):
    want = ck.write_checkpoint(tmp_path, ck.DEEPSEEK_V3, 8, H, I, layer=0, seed=2)
    cfg, tensors = fusedmoe.load_moe_layer(str(tmp_path), 0)
    assert cfg.routing.fn == RoutingFn.sigmoid_grouped_topk and cfg.num_shared_experts == 1
    check_tensors(tensors, want)


def test_bf16(tmp_path):
    want = ck.write_checkpoint(tmp_path, ck.QWEN3, E, H, I, layer=0, seed=3, fp8=False)
    cfg, tensors = fusedmoe.load_moe_layer(tmp_path, 0)
    assert cfg.weight_precision == Precision.bf16
    check_tensors(tensors, want)
    assert tensors["w13"][1] == DType.bf16


def test_loader_errors_name_the_tensor_and_file(tmp_path):
    ck.write_checkpoint(tmp_path, ck.QWEN3, E, H, I, layer=1,
                        drop=("model.layers.1.mlp.experts.2.up_proj.weight_scale_inv",))
    with pytest.raises(Error, match=r"tensor model\.layers\.1\.mlp\.experts\.2\.up_proj\.weight_scale_inv is missing"):
        fusedmoe.load_moe_layer(tmp_path, 1)
    with pytest.raises(Error, match=r"layer 7 has no MoE router: none of model\.layers\.7\.mlp\.gate\.weight"):
        fusedmoe.load_moe_layer(tmp_path, 7)
    with pytest.raises(Error, match="layer must be >= 0, got -1"):
        fusedmoe.load_moe_layer(tmp_path, -1)
    with pytest.raises(Error, match="config.json"):
        fusedmoe.load_moe_layer(tmp_path / "nowhere", 0)


def test_gpt_oss_bf16(tmp_path):
    want = ck.write_gpt_oss(tmp_path, E, H, 64, layer=3, seed=5)
    cfg, tensors = fusedmoe.load_moe_layer(tmp_path, 3)
    assert (cfg.hidden, cfg.intermediate, cfg.num_experts, cfg.top_k) == (H, 64, E, 2)
    assert cfg.weight_precision == Precision.bf16 and cfg.expert_bias
    check_tensors(tensors, want)
    assert tensors["b13"][1] == DType.bf16 and tensors["routing_bias"][1] == DType.f32


def test_gpt_oss_mxfp4(tmp_path):
    want = ck.write_gpt_oss(tmp_path, E, H, 64, layer=2, seed=7, mxfp4=True)
    cfg, tensors = fusedmoe.load_moe_layer(tmp_path, 2)
    assert cfg.weight_precision == Precision.mxfp4 and cfg.activation_precision == Precision.bf16
    assert tensors["w13"][1] == DType.e2m1x2 and tensors["w13_scale"][1] == DType.ue8m0
    assert "w13_scale_2" not in tensors
    check_tensors(tensors, want)


def test_nvfp4_is_read_with_its_scales(tmp_path):
    ck.write_nvfp4(tmp_path, E, H, I, layer=0, seed=6)
    cfg, tensors = fusedmoe.load_moe_layer(tmp_path, 0)
    assert cfg.weight_precision == Precision.nvfp4
    assert tensors["w13"][0].shape == (E, 2 * I, H // 2)
    assert tensors["w13_scale"][0].shape == (E, 2 * I, H // 16)
    assert tensors["w2"][0].shape == (E, H, I // 2)
    np.testing.assert_array_equal(tensors["w13_scale_2"][0], np.full((E, 2), 0.01, np.float32))
    np.testing.assert_array_equal(tensors["w2_input_scale"][0], np.full((E,), 0.5, np.float32))


def test_nvfp4_checkpoint_runs_as_w4a16(tmp_path):
    """NVFP4 weights with bf16 activations (the layer of MoeLayer.from_pretrained, which
    tests/test_gpu_layer.py runs on the GPU)."""
    ck.write_nvfp4(tmp_path, E, H, I, layer=0)
    cfg, _ = fusedmoe.load_moe_layer(tmp_path, 0)
    assert cfg.weight_precision == Precision.nvfp4 and cfg.activation_precision == Precision.bf16
