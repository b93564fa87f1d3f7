"""fusedmoe: fused Mixture-of-Experts layers on NVIDIA Hopper GPUs, from Python.

The C++ library (include/fusedmoe) through a nanobind extension: :class:`MoeConfig` (presets and
Hugging Face config.json import), :class:`MoeLayer` (the whole layer on torch CUDA tensors, on
torch's current stream, CUDA-graph capturable), the NVFP4 GEMV (:func:`gemv_nvfp4`,
:func:`moe_gemv_nvfp4`) and the CPU codecs and quantizers (numpy in, numpy out). Every bad
argument raises :class:`Error` with the library's message (op, argument, expected vs actual).
torch is imported only by the calls that need it.
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
    dequantize_nvfp4,
    e4m3_from_float,
    e4m3_to_float,
    gpu_usable,
    quantize_fp8_block,
    quantize_fp8_per_token,
    quantize_nvfp4,
)
from ._interop import arg as _arg
from ._interop import cuda_device_of as _cuda_device_of
from ._interop import current_stream as _current_stream
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


__all__ = [
    "ActivationConfig",
    "ActivationFn",
    "DType",
    "Error",
    "MoeConfig",
    "MoeLayer",
    "Precision",
    "ReductionMode",
    "RoutingConfig",
    "RoutingFn",
    "bf16_from_float",
    "built_with_cuda",
    "dequantize_fp8_block",
    "dequantize_fp8_per_token",
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
    "quantize_nvfp4",
]
