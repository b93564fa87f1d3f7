"""Small Hugging Face style MoE checkpoints for the tests (numpy only): config.json plus one
safetensors file with per-expert FP8-block (or BF16) projections, the router, and optionally
DeepSeek's correction bias and shared experts or Qwen's shared expert and its gate."""

from __future__ import annotations

import json
import struct
from typing import Dict, Tuple

import numpy as np

import fusedmoe


def write_safetensors(path, tensors: Dict[str, Tuple[str, np.ndarray]]) -> None:
    """tensors: name -> (safetensors dtype string, array holding the stored bytes)."""
    header, blobs, offset = {}, [], 0
    for name, (dtype, array) in tensors.items():
        raw = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


QWEN3 = dict(model_type="qwen3_moe", num_experts_per_tok=2, norm_topk_prob=True)
DEEPSEEK_V3 = dict(model_type="deepseek_v3", num_experts_per_tok=4, n_group=4, topk_group=2,
                   norm_topk_prob=True, routed_scaling_factor=2.5, scoring_func="sigmoid",
                   topk_method="noaux_tc", n_shared_experts=1)
FP8 = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}


def write_checkpoint(d, family: dict, E: int, H: int, I: int, layer: int, seed: int = 0,
                     fp8: bool = True, drop: Tuple[str, ...] = ()) -> Dict[str, np.ndarray]:
    """Writes the checkpoint into directory d; returns what load_moe_layer must give back, in
    MoeLayerWeights layouts (codes as uint8, bf16 as uint16 bits, f32), plus router_weight.
    Tensors named in ``drop`` are left out of the file."""
    deepseek = family["model_type"] == "deepseek_v3"
    cfg = dict(family, hidden_size=H, moe_intermediate_size=I)
    cfg["n_routed_experts" if deepseek else "num_experts"] = E
    if fp8:
        cfg["quantization_config"] = FP8
    (d / "config.json").write_text(json.dumps(cfg))
    rng = np.random.default_rng(seed)
    tensors: Dict[str, Tuple[str, np.ndarray]] = {}
    p = f"model.layers.{layer}.mlp."

    def proj(name, rows, cols):
        w = (rng.random((rows, cols), dtype=np.float32) * 2 - 1) * np.float32(np.sqrt(3.0 / cols))
        if fp8:
            q, s = fusedmoe.quantize_fp8_block(w)
            tensors[name + ".weight"] = ("F8_E4M3", q)
            tensors[name + ".weight_scale_inv"] = ("F32", s)
            return q, s
        bits = fusedmoe.bf16_from_float(w)
        tensors[name + ".weight"] = ("BF16", bits)
        return bits, None

    gate, up, down = [], [], []
    for j in range(E):
        gate.append(proj(f"{p}experts.{j}.gate_proj", I, H))
        up.append(proj(f"{p}experts.{j}.up_proj", I, H))
        down.append(proj(f"{p}experts.{j}.down_proj", H, I))
    want = {
        "w13": np.stack([np.concatenate([g[0], u[0]]) for g, u in zip(gate, up)]),
        "w2": np.stack([dn[0] for dn in down]),
    }
    if fp8:
        want["w13_scale"] = np.stack([np.concatenate([g[1], u[1]]) for g, u in zip(gate, up)])
        want["w2_scale"] = np.stack([dn[1] for dn in down])
    want["router_weight"] = fusedmoe.bf16_from_float(rng.standard_normal((E, H)).astype(np.float32) * np.float32(0.05))
    tensors[p + "gate.weight"] = ("BF16", want["router_weight"])
    if deepseek:
        want["routing_bias"] = (rng.random(E, dtype=np.float32) * 0.1 - 0.05).astype(np.float32)
        tensors[p + "gate.e_score_correction_bias"] = ("F32", want["routing_bias"])
        S = I
        sg, su, sd = (proj(f"{p}shared_experts.{n}_proj", *shape)
                      for n, shape in (("gate", (S, H)), ("up", (S, H)), ("down", (H, S))))
        want["shared_w13"] = np.concatenate([sg[0], su[0]])
        want["shared_w2"] = sd[0]
        if fp8:
            want["shared_w13_scale"] = np.concatenate([sg[1], su[1]])
            want["shared_w2_scale"] = sd[1]
    for name in drop:  # a broken checkpoint: these tensors left out
        del tensors[name]
    write_safetensors(d / "model.safetensors", tensors)
    return want


def write_gpt_oss(d, E: int, H: int, I: int, layer: int, seed: int = 0,
                  mxfp4: bool = False) -> Dict[str, np.ndarray]:
    """A gpt-oss checkpoint with its biases [E, 2I] / [E, H], router.weight and router.bias, and
    its experts either in BF16 (experts.gate_up_proj [E, H, 2I] with gate and up interleaved by
    column, experts.down_proj [E, I, H]) or, with `mxfp4`, in the released MXFP4 layout
    (experts.gate_up_proj_blocks U8 [E, 2I, H/32, 16]: rows gate 2i / up 2i + 1, even element in
    the low nibble; _scales U8 [E, 2I, H/32] UE8M0; down_proj_blocks [E, H, I/32, 16] + _scales).
    Returns what load_moe_layer must give back: w13 [E, 2I, H] interleaved by row and w2 [E, H, I]
    (bf16 bits), or the codes [E, 2I, H/2], [E, H, I/2] and scales as uint8; biases as bf16 bits,
    routing_bias as f32."""
    cfg = dict(model_type="gpt_oss", hidden_size=H, intermediate_size=I, num_local_experts=E,
               num_experts_per_tok=2, swiglu_limit=7.0)
    if mxfp4:
        cfg["quantization_config"] = dict(quant_method="mxfp4",
                                          modules_to_not_convert=["model.layers.*.self_attn"])
    (d / "config.json").write_text(json.dumps(cfg))
    rng = np.random.default_rng(seed)
    p = f"model.layers.{layer}.mlp."

    def bf16(shape, scale):
        return fusedmoe.bf16_from_float(((rng.random(shape, dtype=np.float32) * 2 - 1) * np.float32(scale)))

    def scales(shape, fan_in):  # powers of two near sqrt(3 / fan_in) / 4.5, spanning 2 binades
        e0 = int(round(np.log2(np.sqrt(3.0 / fan_in) / 4.5)))
        return (127 + e0 - 1 + rng.integers(0, 3, shape)).astype(np.uint8)

    tensors: Dict[str, Tuple[str, np.ndarray]] = {}
    want: Dict[str, np.ndarray] = {}
    if mxfp4:
        gu_blocks = rng.integers(0, 256, (E, 2 * I, H // 32, 16), dtype=np.uint8)
        d_blocks = rng.integers(0, 256, (E, H, I // 32, 16), dtype=np.uint8)
        gu_scales, d_scales = scales((E, 2 * I, H // 32), H), scales((E, H, I // 32), I)
        tensors[p + "experts.gate_up_proj_blocks"] = ("U8", gu_blocks)
        tensors[p + "experts.gate_up_proj_scales"] = ("U8", gu_scales)
        tensors[p + "experts.down_proj_blocks"] = ("U8", d_blocks)
        tensors[p + "experts.down_proj_scales"] = ("U8", d_scales)
        want.update(w13=gu_blocks.reshape(E, 2 * I, H // 2), w13_scale=gu_scales,
                    w2=d_blocks.reshape(E, H, I // 2), w2_scale=d_scales)
    else:
        gate_up = bf16((E, H, 2 * I), np.sqrt(3.0 / H))
        down = bf16((E, I, H), np.sqrt(3.0 / I))
        tensors[p + "experts.gate_up_proj"] = ("BF16", gate_up)
        tensors[p + "experts.down_proj"] = ("BF16", down)
        want.update(w13=np.ascontiguousarray(gate_up.transpose(0, 2, 1)),
                    w2=np.ascontiguousarray(down.transpose(0, 2, 1)))
    b13, b2 = bf16((E, 2 * I), 0.1), bf16((E, H), 0.1)
    router, router_bias = bf16((E, H), 0.05), bf16((E,), 0.5)
    tensors[p + "experts.gate_up_proj_bias"] = ("BF16", b13)
    tensors[p + "experts.down_proj_bias"] = ("BF16", b2)
    tensors[p + "router.weight"] = ("BF16", router)
    tensors[p + "router.bias"] = ("BF16", router_bias)
    write_safetensors(d / "model.safetensors", tensors)
    want.update(b13=b13, b2=b2, routing_bias=(router_bias.astype(np.uint32) << 16).view(np.float32),
                router_weight=router)
    return want


def write_nvfp4(d, E: int, H: int, I: int, layer: int, seed: int = 0) -> None:
    """A ModelOpt NVFP4 checkpoint (hf_quant_config.json; per-expert packed weight U8 [N, K/2],
    weight_scale F8_E4M3 [N, K/16], weight_scale_2 and input_scale F32 scalars) with random bytes:
    enough for the loader, which reads it for the CPU reference only."""
    cfg = dict(QWEN3, hidden_size=H, moe_intermediate_size=I, num_experts=E)
    (d / "config.json").write_text(json.dumps(cfg))
    (d / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "NVFP4", "group_size": 16}}))
    rng = np.random.default_rng(seed)
    p = f"model.layers.{layer}.mlp."
    tensors: Dict[str, Tuple[str, np.ndarray]] = {}
    for j in range(E):
        for name, (n, k) in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
            q = f"{p}experts.{j}.{name}."
            tensors[q + "weight"] = ("U8", rng.integers(0, 256, (n, k // 2), dtype=np.uint8))
            tensors[q + "weight_scale"] = ("F8_E4M3", rng.integers(0x30, 0x40, (n, k // 16), dtype=np.uint8))
            tensors[q + "weight_scale_2"] = ("F32", np.array(0.01, dtype=np.float32))
            tensors[q + "input_scale"] = ("F32", np.array(0.5, dtype=np.float32))
    tensors[p + "gate.weight"] = ("BF16", fusedmoe.bf16_from_float(rng.standard_normal((E, H)).astype(np.float32)))
    write_safetensors(d / "model.safetensors", tensors)
