"""fusedmoe: fused Mixture-of-Experts layers on NVIDIA Hopper GPUs, from Python.

The C++ library (include/fusedmoe) through a nanobind extension: :class:`MoeConfig` (presets and
Hugging Face config.json import), :class:`MoeLayer` (the whole layer on torch CUDA tensors, on
torch's current stream, CUDA-graph capturable), the NVFP4 GEMV (:func:`gemv_nvfp4`,
:func:`moe_gemv_nvfp4`), the NVFP4 x NVFP4 grouped GEMM (:class:`Nvfp4GroupedGemm`), the fused
RMSNorm + quantize (:func:`rmsnorm_quant`) and the CPU codecs and quantizers (numpy in, numpy
out). Every bad argument raises :class:`Error` with the library's
message (op, argument, expected vs actual). torch is imported only by the calls that need it.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional, Tuple, Union

from . import _fusedmoe
from ._fusedmoe import (
    ActivationConfig,
    ActivationFn,
    DType,
    Error,
    MoeConfig,
    Precision,
    ReductionMode,
    RoutingConfig,
    RoutingFn,
    bf16_from_float,
    dequantize_fp8_block,
    dequantize_fp8_per_token,
    dequantize_mxfp4,
    dequantize_nvfp4,
    e4m3_from_float,
    e4m3_to_float,
    gpu_usable,
    quantize_fp8_block,
    quantize_fp8_per_token,
    quantize_mxfp4,
    quantize_nvfp4,
)
from ._interop import arg as _arg
from ._interop import cuda_device_of as _cuda_device_of
from ._interop import current_stream as _current_stream
from ._grouped_gemm import Nvfp4GroupedGemm
from ._layer import MoeLayer

__version__ = "0.1.0"

#: True when the extension was built with the CUDA kernels (else only the CPU parts work).
built_with_cuda: bool = _fusedmoe.built_with_cuda
#: True when the extension has the checkpoint loader (MoeLayer.from_pretrained).
has_checkpoint_loader: bool = _fusedmoe.has_checkpoint_loader


def load_moe_layer(path: Union[str, "os.PathLike[str]"], layer: int) -> Tuple[MoeConfig, Dict[str, Tuple[Any, DType]]]:
    """Layer ``layer`` of the Hugging Face checkpoint in directory ``path`` (config.json beside
    the safetensors, single or sharded), read by the library's loader into host memory: the
    config and {name: (numpy array, DType)} in MoeLayerWeights layouts (``w13``, ``w13_scale``,
    ``w2``, ``w2_scale``, gpt-oss's ``b13`` / ``b2``, ``routing_bias``, ``shared_*``, and
    ``router_weight`` [E, H]; NVFP4 layers add ``*_scale_2`` and ``*_input_scale``). Arrays hold
    the stored bits: uint8 for e4m3 and packed e2m1, int16 for bf16, float32.
    :meth:`MoeLayer.from_pretrained` puts them on the GPU."""
    if not has_checkpoint_loader:
        raise Error(
            "load_moe_layer: this build of fusedmoe has no checkpoint loader (its source tree had "
            "no include/fusedmoe/checkpoint.hpp); see docs/python.md"
        )
    return _fusedmoe.load_moe_layer(os.fspath(path), int(layer))


def _stream_for(t: Any, stream: Optional[int]) -> int:
    return stream if stream is not None else _current_stream(_cuda_device_of(t))


def gemv_nvfp4(
    a: Any,
    a_scale: Any,
    a_global: Any,
    b: Any,
    c: Any,
    *,
    b_scale: Any = None,
    b_global: Any = None,
    pdl: bool = False,
    stream: Optional[int] = None,
) -> Any:
    """Batched NVFP4 GEMV (fusedmoe::gemv_nvfp4): c[l, m] = sum_k A_l[m, k] * b_l[k].

    ``a`` [L, M, K/2] packed E2M1 (uint8), ``a_scale`` [L, M, K/16] e4m3
    (torch.float8_e4m3fn or uint8 codes), ``a_global`` [L] f32; ``b`` NVFP4 [L, K/2] with
    ``b_scale`` [L, K/16] and ``b_global`` [L], or bf16 [L, K] alone; ``c`` [L, M] f16/bf16/f32,
    written. 2-d a / 1-d b and c for L = 1. CUDA tensors; runs on torch's current stream of c's
    device (or ``stream``). Returns c."""
    _fusedmoe.gemv_nvfp4(
        _arg(a), _arg(a_scale), _arg(a_global), _arg(b), _arg(c), _arg(b_scale), _arg(b_global),
        pdl, _stream_for(c, stream),
    )
    return c


def moe_gemv_nvfp4(
    w: Any,
    w_scale: Any,
    w_global: Any,
    x: Any,
    topk_ids: Any,
    topk_weights: Any,
    y: Any,
    *,
    bad_id_count: Any = None,
    pdl: bool = False,
    stream: Optional[int] = None,
) -> Any:
    """MoE decode projection with NVFP4 experts (fusedmoe::moe_gemv_nvfp4):
    y[t, n] = sum_j topk_weights[t, j] * sum_k W_{topk_ids[t, j]}[n, k] * x[t, k].

    ``w`` [E, N, K/2] packed E2M1, ``w_scale`` [E, N, K/16] e4m3, ``w_global`` [E] f32, ``x``
    [T, K] bf16, ``topk_ids`` [T, k] int32, ``topk_weights`` [T, k] f32, ``y`` [T, N]
    f16/bf16/f32 (written); ``bad_id_count`` an optional [1] int32 counter of ids outside [0, E).
    Returns y."""
    _fusedmoe.moe_gemv_nvfp4(
        _arg(w), _arg(w_scale), _arg(w_global), _arg(x), _arg(topk_ids), _arg(topk_weights),
        _arg(y), _arg(bad_id_count), pdl, _stream_for(y, stream),
    )
    return y


def rmsnorm_quant(
    x: Any,
    weight: Any,
    eps: float = 1e-6,
    out_format: str = "bf16",
    residual: Any = None,
    global_scale: Any = None,
    out: Any = None,
    out_scale: Any = None,
    stream: Optional[int] = None,
    *,
    inv_rms: Any = None,
    pdl: bool = False,
) -> Tuple[Any, Any]:
    """Fused RMSNorm + quantize (fusedmoe::rmsnorm_quant): y = h / sqrt(mean(h^2) + eps) * weight in
    fp32, h = x, or bf16(x + residual) written back into ``residual`` (vLLM's fused_add_rms_norm).

    ``x`` [T, H] bf16 CUDA tensor (last dim contiguous), ``weight`` [H] bf16. ``out_format``:
    "bf16" -> out [T, H] bf16, scale None; "fp8" -> out [T, H] float8_e4m3fn and scale
    [T, ceil(H/128)] f32 (amax / 448 per 128 columns); "nvfp4" -> out [T, H/2] uint8 (E2M1
    pairs, even element in the low nibble) and scale [T, H/16] float8_e4m3fn, under
    ``global_scale`` (ModelOpt's input_scale: a [1] f32 CUDA tensor, or a float, which is copied
    to the device: pass a tensor while capturing a CUDA graph). ``out`` / ``out_scale`` are
    allocated when not given (torch). ``inv_rms``: an optional [T] f32 tensor that receives each
    row's 1/rms. Runs on torch's current stream of x's device (or ``stream``). Returns
    (out, scale)."""
    if out_format not in ("bf16", "fp8", "nvfp4"):
        raise Error(f"rmsnorm_quant: out_format must be 'bf16', 'fp8' or 'nvfp4', got {out_format!r}")
    if out is None or (out_format != "bf16" and out_scale is None) or (
        out_format == "nvfp4" and isinstance(global_scale, (int, float))
    ):
        import torch

        if not isinstance(x, torch.Tensor) or x.dim() != 2:
            raise Error("rmsnorm_quant: allocating out needs x as a 2-d torch tensor; pass out (and out_scale)")
        T, H = x.shape
        if out_format == "nvfp4" and H % 16:
            raise Error(f"rmsnorm_quant: an nvfp4 out needs H to be a multiple of 16, got H = {H}")
        e4m3 = getattr(torch, "float8_e4m3fn", torch.uint8)
        if out is None:
            if out_format == "bf16":
                out = torch.empty((T, H), dtype=torch.bfloat16, device=x.device)
            elif out_format == "fp8":
                out = torch.empty((T, H), dtype=e4m3, device=x.device)
            else:
                out = torch.empty((T, H // 2), dtype=torch.uint8, device=x.device)
        if out_scale is None and out_format == "fp8":
            out_scale = torch.empty((T, (H + 127) // 128), dtype=torch.float32, device=x.device)
        if out_scale is None and out_format == "nvfp4":
            out_scale = torch.empty((T, H // 16), dtype=e4m3, device=x.device)
        if isinstance(global_scale, (int, float)):
            global_scale = torch.tensor([float(global_scale)], dtype=torch.float32, device=x.device)
    _fusedmoe.rmsnorm_quant(
        _arg(x), _arg(weight), float(eps), out_format, _arg(out), _arg(out_scale), _arg(residual),
        _arg(global_scale), _arg(inv_rms), pdl, _stream_for(x, stream),
    )
    return out, out_scale


def rope(
    q: Any,
    positions: Any,
    cos_sin_cache: Any,
    rope_dim: int,
    k: Any = None,
    style: str = "neox",
    inverse: bool = False,
    bad_position_count: Any = None,
    stream: Optional[int] = None,
) -> None:
    """Rotary position embedding in place (fusedmoe::rope): the last ``rope_dim`` values of every
    head of ``q`` [T, Hq, head_dim] (and of ``k`` [T, Hk, head_dim], same dtype) are rotated by
    their token's position. bf16, f16 or f32 CUDA tensors whose last dimension is contiguous; any
    token and head strides (a q / k slice of a fused qkv tensor works). ``positions`` [T] int32 or
    int64; ``cos_sin_cache`` [max_position, rope_dim] float32, contiguous, vLLM's layout (cos of
    the rope_dim/2 frequencies, then sin). ``style``: "neox" pairs (i, i + rope_dim/2), "gptj"
    pairs (2i, 2i + 1). ``inverse`` rotates by -angle. A position outside [0, max_position)
    leaves its token unchanged and adds 1 to ``bad_position_count`` (an optional [1] int32 CUDA
    tensor). Runs on torch's current stream of q's device (or ``stream``); returns None."""
    _fusedmoe.rope(
        _arg(q), _arg(positions), _arg(cos_sin_cache), int(rope_dim), _arg(k), style, bool(inverse),
        _arg(bad_position_count), _stream_for(q, stream),
    )


__all__ = [
    "ActivationConfig",
    "ActivationFn",
    "DType",
    "Error",
    "MoeConfig",
    "MoeLayer",
    "Nvfp4GroupedGemm",
    "Precision",
    "ReductionMode",
    "RoutingConfig",
    "RoutingFn",
    "bf16_from_float",
    "built_with_cuda",
    "dequantize_fp8_block",
    "dequantize_fp8_per_token",
    "dequantize_mxfp4",
    "dequantize_nvfp4",
    "e4m3_from_float",
    "e4m3_to_float",
    "gemv_nvfp4",
    "gpu_usable",
    "has_checkpoint_loader",
    "load_moe_layer",
    "moe_gemv_nvfp4",
    "quantize_fp8_block",
    "quantize_fp8_per_token",
    "quantize_mxfp4",
    "quantize_nvfp4",
    "rmsnorm_quant",
    "rope",
]
