"""fusedmoe.Nvfp4GroupedGemm: the library's NVFP4 x NVFP4 grouped GEMM for torch CUDA tensors."""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from . import _fusedmoe as _ext
from ._fusedmoe import Error
from ._interop import arg, cuda_device_of, current_stream, device_guard
from ._layer import _require_torch

_OP = "Nvfp4GroupedGemm"


class Nvfp4GroupedGemm:
    """Grouped GEMM with both operands NVFP4 (fusedmoe::Nvfp4GroupedGemm, the GPUMODE contest
    form): for each group g, rows r in [offsets[g], offsets[g + 1]) of A and C,
    ``c[r, n] = a_global[g] * b_global[g] * sum_k dq(a)[r, k] * dq(b[g])[n, k]`` with
    ``dq(x) = e2m1(x) * e4m3(x_scale)`` per 16 values along K.

    ``b`` [G, N, K/2] uint8 (two E2M1 values per byte, the even element in the low nibble),
    ``b_scale`` [G, N, K/16] E4M3 (``torch.float8_e4m3fn`` or uint8 codes), ``b_global`` [G]
    float32; contiguous CUDA tensors. The constructor checks the scales (a NaN or negative code
    raises :class:`fusedmoe.Error` naming its group, row and block) and re-lays B into memory the
    object owns, on torch's current stream of b's device (or ``stream``), synchronized before it
    returns; the tensors need not be kept.
    """

    def __init__(self, b: Any, b_scale: Any, b_global: Any, *, stream: Optional[int] = None) -> None:
        device = cuda_device_of(b)
        if stream is None:
            stream = current_stream(device)
        with device_guard(device):
            self._impl = _ext._Nvfp4GroupedGemm(arg(b), arg(b_scale), arg(b_global), stream)
        self._device: int = self._impl.device
        self._n: int = self._impl.n
        # (workspace tensor, the rows it serves)
        self._ws: Optional[Tuple[Any, int]] = None
        # Workspaces replaced by larger ones: kept alive, since a CUDA graph captured with one
        # still uses it on replay (release_workspaces() frees them).
        self._retired: List[Any] = []

    # ---- properties -------------------------------------------------------------------------
    @property
    def groups(self) -> int:
        """G, the number of groups (B matrices)."""
        return self._impl.groups

    @property
    def n(self) -> int:
        """N, the output columns."""
        return self._n

    @property
    def k(self) -> int:
        """K, the reduction length (values, not bytes)."""
        return self._impl.k

    @property
    def device(self) -> int:
        """The CUDA device index B was prepared on."""
        return self._device

    @property
    def prepared_bytes(self) -> int:
        """Device bytes of the prepared B."""
        return self._impl.prepared_bytes

    def workspace_size(self, max_rows: int) -> int:
        """Workspace bytes for calls of up to ``max_rows`` rows of A (all groups together)."""
        return self._impl.workspace_size(int(max_rows))

    # ---- workspace --------------------------------------------------------------------------
    def reserve(self, max_rows: int) -> None:
        """Allocates the workspace for calls of up to ``max_rows`` rows (nothing when it already
        serves that many). Call it before capturing a CUDA graph: no workspace can be allocated
        while a graph is being captured."""
        if self._ws is None or self._ws[1] < max_rows:
            self._allocate(int(max_rows))

    def release_workspaces(self) -> None:
        """Frees the workspaces replaced by larger ones. Only when no CUDA graph captured with an
        earlier (smaller) workspace of this object will be replayed again."""
        self._retired.clear()

    def _allocate(self, rows: int) -> Any:
        torch = _require_torch(_OP)
        nbytes = self._impl.workspace_size(rows)
        ws = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=torch.device("cuda", self._device))
        if self._ws is not None:
            self._retired.append(self._ws[0])
        self._ws = (ws, rows)
        return ws

    def _workspace(self, rows: int) -> Any:
        if self._ws is not None and rows <= self._ws[1]:
            return self._ws[0]
        torch = _require_torch(_OP)
        if torch.cuda.is_current_stream_capturing():
            have = 0 if self._ws is None else self._ws[1]
            raise Error(
                f"{_OP}.run: a call of {rows} rows is being captured into a CUDA graph, but the "
                f"workspace serves {have} rows and none can be allocated during capture; call "
                f"reserve({rows}) before capturing (or pass workspace=)"
            )
        # Doubling: a caller whose M creeps up one row at a time reallocates log(M) times.
        grow = rows if self._ws is None else max(rows, 2 * self._ws[1])
        return self._allocate(grow)

    # ---- the call ---------------------------------------------------------------------------
    def run(
        self,
        a: Any,
        a_scale: Any,
        offsets: Any,
        a_global: Any = None,
        out: Any = None,
        out_dtype: Any = None,
        *,
        validate_offsets: bool = True,
        workspace: Any = None,
        stream: Optional[int] = None,
    ) -> Any:
        """c = the grouped GEMM of ``a`` [M, K/2] uint8 (E2M1 pairs, every group's rows),
        ``a_scale`` [M, K/16] E4M3 (``float8_e4m3fn`` or uint8), ``offsets`` [G + 1] int32
        (offsets[0] = 0, non-decreasing, offsets[G] = M) and ``a_global`` [G] float32 (None: 1)
        with the prepared B. Writes ``out`` [M, N] (bf16, f16 or f32; allocated as
        ``out_dtype``, torch.bfloat16 by default, when None) and returns it.

        Runs on torch's current stream of the object's device (or ``stream``) with no host
        synchronization, except that with ``validate_offsets`` and a stream not being captured
        the offsets are copied to the host and checked (a bad one raises fusedmoe.Error).
        Unchecked, bad offsets are clamped (see :meth:`offsets_clamped`) and rows no group covers
        are written as zeros. The workspace is the object's own, grown on demand outside
        capture (see :meth:`reserve`), or ``workspace``, a CUDA tensor of at least
        ``workspace_size(M)`` bytes."""
        torch = _require_torch(f"{_OP}.run")
        if out is not None and out_dtype is not None and getattr(out, "dtype", None) != out_dtype:
            raise Error(f"{_OP}.run: out is {getattr(out, 'dtype', type(out).__name__)} but out_dtype "
                        f"is {out_dtype}; give one of them")
        shape = getattr(a, "shape", None)
        if shape is None or len(shape) != 2:
            raise Error(f"{_OP}.run: a must be a 2-d tensor [M, K/2], got "
                        f"{'shape ' + str(tuple(shape)) if shape is not None else type(a).__name__}")
        rows = int(shape[0])
        if out is None:
            dtype = torch.bfloat16 if out_dtype is None else out_dtype
            if dtype not in (torch.bfloat16, torch.float16, torch.float32):
                raise Error(f"{_OP}.run: out_dtype must be torch.bfloat16, torch.float16 or "
                            f"torch.float32, got {dtype}")
            device = a.device if isinstance(a, torch.Tensor) else torch.device("cuda", self._device)
            out = torch.empty((rows, self._n), dtype=dtype, device=device)
        ws = self._workspace(rows) if workspace is None else workspace
        if stream is None:
            stream = torch.cuda.current_stream(self._device).cuda_stream
        self._impl.run(arg(a), arg(a_scale), arg(a_global), arg(offsets), arg(out), arg(ws), stream,
                       bool(validate_offsets))
        return out

    def offsets_clamped(self, *, workspace: Any = None) -> bool:
        """Whether the last call on the workspace had to clamp its offsets (calls with
        ``validate_offsets=False`` or under capture). Synchronizes the stream; for diagnostics."""
        if workspace is None:
            if self._ws is None:
                raise Error(f"{_OP}.offsets_clamped: no call has run on this object")
            workspace = self._ws[0]
        return self._impl.offsets_clamped(arg(workspace), current_stream(self._device))

    def __repr__(self) -> str:
        return f"fusedmoe.Nvfp4GroupedGemm(groups={self.groups}, n={self.n}, k={self.k}, cuda:{self._device})"
