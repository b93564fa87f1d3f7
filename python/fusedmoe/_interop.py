"""Tensor and stream hand-off to the extension.

torch tensors go to the extension as DLPack capsules made by ``torch.utils.dlpack.to_dlpack``:
that call has no stream semantics (``Tensor.__dlpack__`` may record an event on the current
stream and make another stream wait on it, which is not allowed while a CUDA graph is being
captured) and costs less than ``__dlpack__``. Element types that not every torch exports by DLPack
(float8, float4) travel as uint8 views tagged with their fusedmoe DType. Any other object (numpy,
cupy, a DLPack capsule) is passed on as it is; the extension imports it through nanobind.

torch is never imported here: an object can only be a torch tensor when the caller has imported
torch already, so ``sys.modules`` tells.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

from . import _fusedmoe as _ext

_special_dtypes: Optional[dict] = None
_to_dlpack: Any = None


def _torch() -> Any:
    return sys.modules.get("torch")


def _init(torch: Any) -> None:
    global _special_dtypes, _to_dlpack
    special = {}
    for name, dtype in (
        ("float8_e4m3fn", _ext.DType.e4m3),
        ("float8_e8m0fnu", _ext.DType.ue8m0),
        ("float4_e2m1fn_x2", _ext.DType.e2m1x2),
    ):
        t = getattr(torch, name, None)
        if t is not None:
            special[t] = dtype
    import torch.utils.dlpack  # noqa: F401  (a submodule torch imports itself; made explicit)

    _to_dlpack = torch.utils.dlpack.to_dlpack
    _special_dtypes = special


def arg(t: Any) -> Any:
    """One tensor argument in the form the extension takes (None stays None)."""
    if t is None:
        return None
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(t, torch.Tensor):
        if _to_dlpack is None:
            _init(torch)
        special = _special_dtypes.get(t.dtype)  # type: ignore[union-attr]
        if special is not None:
            return (_to_dlpack(t.view(torch.uint8)), special)
        return _to_dlpack(t)
    return t


def cuda_device_of(t: Any) -> Optional[int]:
    """The CUDA device index of a torch tensor, or None (not torch, or not on a GPU)."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(t, torch.Tensor) and t.is_cuda:
        return t.device.index if t.device.index is not None else torch.cuda.current_device()
    return None


def current_stream(device_index: Optional[int]) -> int:
    """The handle (cudaStream_t as an int) of torch's current stream on the device; 0 (the legacy
    default stream) when there is no torch tensor to go by."""
    if device_index is None:
        return 0
    torch = sys.modules["torch"]
    return torch.cuda.current_stream(device_index).cuda_stream


class device_guard:
    """Makes `device_index` torch's (and so the CUDA runtime's) current device for a block."""

    def __init__(self, device_index: Optional[int]) -> None:
        self._index = device_index
        self._ctx: Any = None

    def __enter__(self) -> None:
        if self._index is not None:
            self._ctx = sys.modules["torch"].cuda.device(self._index)
            self._ctx.__enter__()

    def __exit__(self, *exc: Any) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)
