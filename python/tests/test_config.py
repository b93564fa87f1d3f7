"""MoeConfig from Python: presets, config.json import, field access, validation errors.
CPU only: numpy is not even needed here."""

import json

import pytest

import fusedmoe
from fusedmoe import ActivationFn, Error, MoeConfig, Precision, RoutingFn

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


def test_presets_listed_in_order_with_the_default_first():
    names = [c.name for c in MoeConfig.presets()]
    assert names == PRESETS
    assert MoeConfig.default_preset_name() == "qwen3.5-35b-a3b"


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_is_valid_and_named(name):
    c = MoeConfig.preset(name)
    c.validate()
    assert c.name == name
    assert c.summary().startswith(name + ": ")
    assert repr(c) == f"MoeConfig({c.summary()})"


def test_deepseek_v3_fields():
    c = MoeConfig.preset("deepseek-v3")
    assert (c.hidden, c.intermediate, c.num_experts, c.top_k) == (7168, 2048, 256, 8)
    assert (c.num_shared_experts, c.shared_intermediate) == (1, 2048)
    assert c.routing.fn == RoutingFn.sigmoid_grouped_topk
    assert (c.routing.num_groups, c.routing.topk_groups) == (8, 4)
    assert c.routing.correction_bias and c.routing.renormalize
    assert c.routing.routed_scaling_factor == pytest.approx(2.5)
    assert c.activation.fn == ActivationFn.swiglu
    assert c.weight_precision == Precision.fp8_block == c.activation_precision


def test_gpt_oss_and_llama4_fields():
    g = MoeConfig.preset("gpt-oss-120b")
    assert g.routing.fn == RoutingFn.topk_softmax and g.routing.router_bias
    assert g.activation.fn == ActivationFn.swiglu_clamped and g.expert_bias
    assert g.activation.limit == pytest.approx(7.0) and g.activation.alpha == pytest.approx(1.702)
    m = MoeConfig.preset("llama4-maverick")
    assert m.routing.fn == RoutingFn.sigmoid_top1_on_input and m.top_k == 1
    q = MoeConfig.preset("qwen3.5-35b-a3b")
    assert q.shared_expert_gate and q.routing.fn == RoutingFn.softmax_topk


def test_preset_returns_a_copy_and_fields_are_writable():
    c = MoeConfig.preset("qwen3-30b-a3b")
    c.hidden = 256
    c.routing.routed_scaling_factor = 2.0  # nested fields write through
    assert c.routing.routed_scaling_factor == pytest.approx(2.0)
    assert MoeConfig.preset("qwen3-30b-a3b").hidden == 2048
    d = c.copy()
    d.hidden = 512
    assert c.hidden == 256
    c.validate()


def test_unknown_preset_lists_the_names():
    with pytest.raises(Error, match=r'unknown preset "nope"; the presets are: qwen3\.5-35b-a3b, '):
        MoeConfig.preset("nope")


@pytest.mark.parametrize(
    "field,value,pattern",
    [
        ("hidden", 100, "hidden size 100 must be a multiple of 16"),
        ("top_k", 0, "top-k must be at least 1, got 0"),
        ("num_experts", 5000, r"number of experts 5000 is out of range: expected \[1, 4096\]"),
    ],
)
def test_validate_names_the_bad_field(field, value, pattern):
    c = MoeConfig.preset("qwen3-30b-a3b")
    setattr(c, field, value)
    with pytest.raises(Error, match=pattern):
        c.validate()


def test_wrong_python_type_for_a_field_is_a_type_error():
    c = MoeConfig.preset("qwen3-30b-a3b")
    with pytest.raises(TypeError):
        c.hidden = "2048"


QWEN3 = {
    "architectures": ["Qwen3MoeForCausalLM"],
    "model_type": "qwen3_moe",
    "hidden_size": 1024,
    "moe_intermediate_size": 256,
    "num_experts": 64,
    "num_experts_per_tok": 4,
    "norm_topk_prob": True,
    "quantization_config": {
        "quant_method": "fp8",
        "fmt": "e4m3",
        "activation_scheme": "dynamic",
        "weight_block_size": [128, 128],
    },
}

DEEPSEEK = {
    "model_type": "deepseek_v3",
    "hidden_size": 2048,
    "moe_intermediate_size": 512,
    "n_routed_experts": 64,
    "n_shared_experts": 1,
    "num_experts_per_tok": 6,
    "n_group": 8,
    "topk_group": 3,
    "norm_topk_prob": True,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "topk_method": "noaux_tc",
}


def write(tmp_path, obj, name="config.json"):
    p = tmp_path / name
    p.write_text(obj if isinstance(obj, str) else json.dumps(obj))
    return p


def test_from_json_qwen3(tmp_path):
    c = MoeConfig.from_json(str(write(tmp_path, QWEN3)))
    assert (c.hidden, c.intermediate, c.num_experts, c.top_k) == (1024, 256, 64, 4)
    assert c.num_shared_experts == 0
    assert c.routing.fn == RoutingFn.softmax_topk and c.routing.renormalize
    assert c.weight_precision == Precision.fp8_block


def test_from_json_without_quantization_is_bf16_and_override_applies(tmp_path):
    plain = dict(QWEN3)
    del plain["quantization_config"]
    p = write(tmp_path, plain)
    assert MoeConfig.from_json(str(p)).weight_precision == Precision.bf16
    assert MoeConfig.from_json(str(p), precision="fp8").weight_precision == Precision.fp8_block


def test_from_json_deepseek_routing(tmp_path):
    c = MoeConfig.from_json(str(write(tmp_path, DEEPSEEK)))
    assert c.routing.fn == RoutingFn.sigmoid_grouped_topk
    assert (c.routing.num_groups, c.routing.topk_groups, c.top_k) == (8, 3, 6)
    assert c.routing.routed_scaling_factor == pytest.approx(2.5)
    assert (c.num_shared_experts, c.shared_intermediate) == (1, 512)


def test_from_json_text_names_the_origin():
    c = MoeConfig.from_json_text(json.dumps(QWEN3), "inline")
    assert c.top_k == 4
    with pytest.raises(Error, match="inline"):
        MoeConfig.from_json_text("{", "inline")


def test_malformed_json_names_the_file(tmp_path):
    p = write(tmp_path, '{"model_type": "qwen3_moe", "hidden_size": ')
    with pytest.raises(Error) as e:
        MoeConfig.from_json(str(p))
    assert "config.json" in str(e.value)


def test_missing_field_is_named(tmp_path):
    bad = dict(QWEN3)
    del bad["num_experts"]
    with pytest.raises(Error, match="num_experts"):
        MoeConfig.from_json(str(write(tmp_path, bad)))


def test_mistyped_and_out_of_range_fields_are_named(tmp_path):
    bad = dict(QWEN3, hidden_size="1024")
    with pytest.raises(Error, match="hidden_size"):
        MoeConfig.from_json(str(write(tmp_path, bad)))
    bad = dict(QWEN3, num_experts_per_tok=65)
    with pytest.raises(Error, match="num_experts_per_tok"):
        MoeConfig.from_json(str(write(tmp_path, bad)))


def test_unknown_model_type_is_named(tmp_path):
    with pytest.raises(Error, match='"llama_dense" is not a supported MoE family'):
        MoeConfig.from_json(str(write(tmp_path, dict(QWEN3, model_type="llama_dense"))))


def test_missing_file_and_directory_are_refused(tmp_path):
    with pytest.raises(Error, match="nothere.json"):
        MoeConfig.from_json(str(tmp_path / "nothere.json"))
    with pytest.raises(Error):
        MoeConfig.from_json(str(tmp_path))


def test_bad_precision_override_is_named(tmp_path):
    with pytest.raises(Error, match="fp7"):
        MoeConfig.from_json(str(write(tmp_path, QWEN3)), precision="fp7")


def test_module_flags():
    assert isinstance(fusedmoe.built_with_cuda, bool)
    assert isinstance(fusedmoe.has_checkpoint_loader, bool)
    ok, why = fusedmoe.gpu_usable(0)
    assert isinstance(ok, bool)
    assert ok or why  # a reason whenever there is no usable GPU
