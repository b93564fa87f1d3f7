"""fusedmoe.MoeLayer: the library's MoeLayer for torch CUDA tensors."""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional, Tuple, Union

from . import _fusedmoe as _ext
from ._interop import arg, cuda_device_of, current_stream, device_guard
from ._fusedmoe import Error, MoeConfig, Precision, ReductionMode

_MODES = {"fast": ReductionMode.fast, "deterministic": ReductionMode.deterministic}


def _mode(mode: Union[str, ReductionMode]) -> ReductionMode:
    if isinstance(mode, ReductionMode):
        return mode
    m = _MODES.get(mode)  # type: ignore[arg-type]
    if m is None:
        raise Error(f"MoeLayer: mode must be 'fast' or 'deterministic', got {mode!r}")
    return m


def _require_torch(what: str) -> Any:
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch  # noqa: F811
        except ImportError as e:
            raise Error(f"{what} needs torch (pip install torch): {e}") from None
    return torch


_TORCH_VIEW = {  # fusedmoe DType of a checkpoint tensor -> the torch dtype its bytes are viewed as
    "e4m3": "float8_e4m3fn",
    "e2m1x2": "uint8",  # codes: the layer reads uint8 bytes as the format the config names
    "ue8m0": "uint8",
    "bf16": "bfloat16",
    "f32": "float32",
    "i32": "int32",
}


class MoeLayer:
    """One MoE layer on the GPU (fusedmoe::MoeLayer): routing, both grouped GEMMs with the
    activation, the weighted combine and the shared experts, as one graph-capturable call.

    The weights are torch CUDA tensors in checkpoint layouts (``MoeLayerWeights``): ``w13``
    [E, 2I, H] and ``w2`` [E, H, I] in ``torch.float8_e4m3fn`` (or uint8 codes) with
    ``w13_scale`` [E, ceil(2I/128), ceil(H/128)] and ``w2_scale`` [E, ceil(H/128), ceil(I/128)]
    f32 (DeepSeek ``weight_scale_inv``), or bf16 without scales. 4-bit weights (``nvfp4`` /
    ``mxfp4`` configs, run with bf16 activations) are uint8 [E, 2I, H/2]
    and [E, H, I/2], two E2M1 values per byte with the even element in the low nibble; NVFP4
    with ``w13_scale`` [E, 2I, H/16] / ``w2_scale`` [E, H, I/16] E4M3 (``float8_e4m3fn`` or
    uint8) and the f32 ``w13_scale_2`` [E, 2] or [E] / ``w2_scale_2`` [E] (ModelOpt
    ``weight_scale_2``); MXFP4 (gpt-oss) with ``w13_scale`` [E, 2I, H/32] / ``w2_scale``
    [E, H, I/32] UE8M0 (uint8 or ``float8_e8m0fnu``); ``b13`` [E, 2I] / ``b2`` [E, H]
    (config.expert_bias), ``routing_bias`` [E] f32, the shared expert ``shared_w13`` [2S, H],
    ``shared_w2`` [H, S] (+ scales) and ``shared_gate`` [H] bf16. They are read once, by the
    constructor, which re-lays them into memory the layer owns (on torch's current stream of
    their device, synchronized before it returns); they need not be kept.

    ``config`` is a :class:`MoeConfig` or a preset name.
    """

    def __init__(
        self,
        config: Union[MoeConfig, str],
        *,
        w13: Any,
        w2: Any,
        w13_scale: Any = None,
        w2_scale: Any = None,
        b13: Any = None,
        b2: Any = None,
        routing_bias: Any = None,
        shared_w13: Any = None,
        shared_w13_scale: Any = None,
        shared_w2: Any = None,
        shared_w2_scale: Any = None,
        shared_gate: Any = None,
        w13_scale_2: Any = None,
        w2_scale_2: Any = None,
        shared_w13_scale_2: Any = None,
        shared_w2_scale_2: Any = None,
        stream: Optional[int] = None,
    ) -> None:
        if isinstance(config, str):
            config = MoeConfig.preset(config)
        if not isinstance(config, MoeConfig):
            raise Error(
                f"MoeLayer: config must be a fusedmoe.MoeConfig or a preset name, got "
                f"{type(config).__name__}"
            )
        device = cuda_device_of(w13)
        if stream is None:
            stream = current_stream(device)
        with device_guard(device):
            self._impl = _ext._Layer(
                config, arg(w13), arg(w13_scale), arg(w2), arg(w2_scale), arg(b13), arg(b2),
                arg(routing_bias), arg(shared_w13), arg(shared_w13_scale), arg(shared_w2),
                arg(shared_w2_scale), arg(shared_gate), arg(w13_scale_2), arg(w2_scale_2),
                arg(shared_w13_scale_2), arg(shared_w2_scale_2), stream,
            )
        self._device: int = self._impl.device
        self._hidden: int = config.hidden
        # mode -> (workspace tensor, the tokens it serves)
        self._workspaces: Dict[ReductionMode, Tuple[Any, int]] = {}
        # Workspaces replaced by larger ones: kept alive, since a CUDA graph captured with one
        # still writes to it on replay (release_workspaces() frees them).
        self._retired: List[Any] = []
        self.router_weight: Any = None  # from_pretrained: the router [E, H], for the logits

    # ---- construction from a checkpoint -----------------------------------------------------
    @classmethod
    def from_pretrained(
        cls, path: Union[str, "os.PathLike[str]"], layer: int, *, device: Any = "cuda"
    ) -> "MoeLayer":
        """Layer ``layer`` of the Hugging Face checkpoint in directory ``path`` (config.json and
        safetensors, single or sharded), read by the library's checkpoint loader, copied to
        ``device`` and prepared. ``router_weight`` is set to the router's [E, H] weight (logits =
        x @ router_weight.T).

        A ModelOpt NVFP4 checkpoint was calibrated with NVFP4 activations too (``input_scale``);
        Hopper has no FP4 tensor cores, and the layer runs its 4-bit weights with bf16
        activations (W4A16, ``config.activation_precision`` bf16), as vLLM's and TensorRT-LLM's
        Hopper paths run these checkpoints: ``input_scale`` is not used."""
        from . import load_moe_layer

        cfg, tensors = load_moe_layer(path, layer)
        if cfg.weight_precision == Precision.nvfp4:  # W4A16: the activation scales are not used
            tensors = {n: t for n, t in tensors.items() if not n.endswith("input_scale")}
        torch = _require_torch("MoeLayer.from_pretrained")
        dev = torch.device(device)
        weights: Dict[str, Any] = {}
        router = None
        for name, (array, dtype) in tensors.items():
            t = torch.from_numpy(array)
            view = _TORCH_VIEW.get(dtype.name)
            if view is None:
                raise Error(f"MoeLayer.from_pretrained: {name} is {dtype.name}, not a layer dtype")
            t = t.view(getattr(torch, view))
            if name in ("b13", "b2"):  # gpt-oss biases are stored bf16; the layer takes fp32
                t = t.float()
            t = t.to(dev)
            if name == "router_weight":
                router = t
            else:
                weights[name] = t
        obj = cls(cfg, **weights)
        obj.router_weight = router
        return obj

    # ---- properties -----------------------------------------------------------------------
    @property
    def config(self) -> MoeConfig:
        return self._impl.config

    @property
    def device(self) -> int:
        """The CUDA device index the layer lives on."""
        return self._device

    @property
    def prepared_bytes(self) -> int:
        """Device bytes of the prepared weights."""
        return self._impl.prepared_bytes

    def workspace_size(self, max_tokens: int, mode: Union[str, ReductionMode] = "fast") -> int:
        """Workspace bytes for calls of up to ``max_tokens`` tokens in ``mode``."""
        return self._impl.workspace_size(max_tokens, _mode(mode))

    # ---- workspaces -----------------------------------------------------------------------
    def reserve(self, max_tokens: int, mode: Union[str, ReductionMode] = "fast") -> None:
        """Allocates the layer's workspace for calls of up to ``max_tokens`` tokens in ``mode``
        (nothing when it already serves that many). Call it before capturing a CUDA graph: no
        workspace can be allocated while a graph is being captured."""
        m = _mode(mode)
        have = self._workspaces.get(m)
        if have is None or have[1] < max_tokens:
            self._allocate(int(max_tokens), m)

    def release_workspaces(self) -> None:
        """Frees the workspaces replaced by larger ones. Only when no CUDA graph captured with an
        earlier (smaller) workspace of this layer will be replayed again."""
        self._retired.clear()

    def _allocate(self, tokens: int, m: ReductionMode) -> Tuple[Any, int]:
        torch = _require_torch("MoeLayer")
        nbytes = self._impl.workspace_size(tokens, m)
        ws = torch.empty(max(nbytes, 1), dtype=torch.uint8, device=torch.device("cuda", self._device))
        old = self._workspaces.get(m)
        if old is not None:
            self._retired.append(old[0])
        entry = (ws, tokens)
        self._workspaces[m] = entry
        return entry

    def _workspace(self, tokens: int, m: ReductionMode) -> Any:
        entry = self._workspaces.get(m)
        if entry is not None and tokens <= entry[1]:
            return entry[0]
        torch = _require_torch("MoeLayer")
        if torch.cuda.is_current_stream_capturing():
            have = 0 if entry is None else entry[1]
            raise Error(
                f"MoeLayer: a call of {tokens} tokens in {m.name} mode is being captured into a "
                f"CUDA graph, but the layer's {m.name} workspace serves {have} tokens and none can "
                f"be allocated during capture; call layer.reserve({tokens}, mode='{m.name}') "
                f"before capturing (or pass workspace=)"
            )
        grow = tokens if entry is None else max(tokens, 2 * entry[1])
        return self._allocate(grow, m)[0]

    # ---- the call --------------------------------------------------------------------------
    def __call__(
        self,
        x: Any,
        router_logits: Any = None,
        out: Any = None,
        *,
        mode: Union[str, ReductionMode] = "fast",
        topk_ids: Any = None,
        topk_weights: Any = None,
        validate_routing: bool = True,
        workspace: Any = None,
        stream: Optional[int] = None,
        x_fp8: Any = None,
        x_fp8_scales: Any = None,
    ) -> Any:
        """y = the layer on ``x`` [T, H] bf16 with ``router_logits`` [T, E] f32, or with the
        routing given as ``topk_ids`` [T, top_k] int32 and ``topk_weights`` [T, top_k] f32
        (the shared experts are added; with ``validate_routing`` and outside graph capture the
        ids are checked on the host, which synchronizes). Writes ``out`` [T, H] bf16 (allocated
        when None) and returns it.

        Runs on torch's current CUDA stream of the layer's device (or ``stream``, a
        cudaStream_t as an int) with no host synchronization, so it can be captured in
        ``torch.cuda.graph``. The workspace is the layer's own for ``mode``, allocated once and
        grown on demand outside capture (see :meth:`reserve`), or ``workspace``, a CUDA tensor
        of at least ``workspace_size(T, mode)`` bytes.

        FP8 layers also take the activations already quantized, ``x_fp8`` [T, H]
        ``torch.float8_e4m3fn`` (or uint8 codes) with ``x_fp8_scales`` [T, ceil(H/128)] f32 (e.g.
        :func:`rmsnorm_quant`'s fp8 output): the layer's own quantization is skipped, and ``x``
        may be None (it is still read by Qwen's shared-expert gate)."""
        m = _MODES.get(mode) if isinstance(mode, str) else mode
        if m is None:
            m = _mode(mode)
        shape = (x if x is not None else x_fp8).shape
        tokens = shape[0] if len(shape) > 0 else 0
        if out is None:
            torch = _require_torch("MoeLayer: allocating out")
            lead = x if x is not None else x_fp8
            device = lead.device if isinstance(lead, torch.Tensor) else torch.device("cuda", self._device)
            out = torch.empty((tokens, self._hidden), dtype=torch.bfloat16, device=device)
        ws = self._workspace(tokens, m) if workspace is None else workspace
        if stream is None:
            torch = sys.modules.get("torch")
            stream = torch.cuda.current_stream(self._device).cuda_stream if torch is not None else 0
        self._impl.forward(
            arg(x), arg(router_logits), arg(out), arg(ws), stream, m, arg(topk_ids),
            arg(topk_weights), validate_routing, arg(x_fp8), arg(x_fp8_scales),
        )
        return out

    def dropped_routes(self, mode: Union[str, ReductionMode] = "fast", *, workspace: Any = None) -> int:
        """Routes the last call on the workspace dropped (caller ids out of range or repeated
        within a token). Synchronizes the stream; for diagnostics."""
        m = _mode(mode)
        if workspace is None:
            entry = self._workspaces.get(m)
            if entry is None:
                raise Error(f"MoeLayer.dropped_routes: no {m.name} call has run on this layer")
            workspace = entry[0]
        stream = current_stream(self._device)
        return self._impl.dropped_routes(arg(workspace), stream)

    def host_ns_per_forward(
        self, x: Any, router_logits: Any, out: Any, workspace: Any, *,
        mode: Union[str, ReductionMode] = "fast", iters: int = 100,
    ) -> float:
        """Host nanoseconds per call of the C++ forward alone (``iters`` calls on converted
        arguments, torch's current stream, no synchronization): the baseline of
        bench/python_overhead.py."""
        stream = current_stream(self._device)
        return self._impl.host_ns_per_forward(
            arg(x), arg(router_logits), arg(out), arg(workspace), stream, _mode(mode), iters
        )

    def __repr__(self) -> str:
        return f"fusedmoe.MoeLayer({self.config.summary()}, cuda:{self._device})"
