"""Host overhead of the Python call: `layer(x, logits, out=y)` outside a graph against the C++
`MoeLayer::forward` alone on the same converted arguments, both enqueueing on torch's current
stream. Host time per call: batches of `--iters` calls timed with a monotonic clock (no
synchronization inside a batch; the stream is drained between batches so the launch queue never
fills), median over `--reps` batches. The extra host time of the Python call is the difference;
the target is < 20 us. Also the parts of it: torch's current stream, one DLPack export, an output
allocation.

    PYTHONPATH=<build>/python python3 python/bench/host_overhead.py [--preset NAME] [--tokens T]

Needs torch, a CUDA build of fusedmoe and an sm_90 GPU. Prints one table and a PASS/FAIL line
(exit 1 on FAIL).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

import fusedmoe


def per_call_ns(fn, iters: int, reps: int) -> float:
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        for _ in range(iters):
            fn()
        t1 = time.perf_counter_ns()
        torch.cuda.synchronize()
        samples.append((t1 - t0) / iters)
    return statistics.median(samples)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="qwen3.5-35b-a3b")
    ap.add_argument("--tokens", type=int, default=1)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--reps", type=int, default=41)
    ap.add_argument("--budget-us", type=float, default=20.0)
    args = ap.parse_args()

    ok, why = fusedmoe.gpu_usable(torch.cuda.current_device() if torch.cuda.is_available() else 0)
    if not (fusedmoe.built_with_cuda and torch.cuda.is_available() and ok):
        print(f"host_overhead: needs a CUDA build of fusedmoe and an sm_90 GPU: {why}")
        return 1

    cfg = fusedmoe.MoeConfig.preset(args.preset)
    E, H, I = cfg.num_experts, cfg.hidden, cfg.intermediate
    S = cfg.shared_intermediate if cfg.num_shared_experts else 0
    dev = "cuda"

    def codes(*shape):  # e4m3 weights drawn as codes (finite, positive; no float32 temporaries,
        # so full-size presets fit): the timing does not depend on the values
        return torch.randint(0, 0x78, shape, dtype=torch.uint8, device=dev).view(torch.float8_e4m3fn)

    def scales(rows, cols, *lead):
        return torch.full((*lead, -(-rows // 128), -(-cols // 128)), 1e-2, device=dev)

    w = dict(w13=codes(E, 2 * I, H), w13_scale=scales(2 * I, H, E), w2=codes(E, H, I), w2_scale=scales(H, I, E))
    if cfg.routing.correction_bias or cfg.routing.router_bias:
        w["routing_bias"] = torch.zeros(E, device=dev)
    if cfg.expert_bias:
        w["b13"] = torch.zeros(E, 2 * I, device=dev)
        w["b2"] = torch.zeros(E, H, device=dev)
    if S:
        w.update(shared_w13=codes(2 * S, H), shared_w13_scale=scales(2 * S, H), shared_w2=codes(H, S),
                 shared_w2_scale=scales(H, S))
        if cfg.shared_expert_gate:
            w["shared_gate"] = torch.zeros(H, dtype=torch.bfloat16, device=dev)
    layer = fusedmoe.MoeLayer(cfg, **w)
    del w

    T = args.tokens
    x = torch.randn(T, H, device=dev).to(torch.bfloat16)
    logits = torch.randn(T, E, device=dev)
    y = torch.empty(T, H, dtype=torch.bfloat16, device=dev)
    layer.reserve(T)  # the Python call uses the layer's own workspace; the C++ loop one of its size
    ws = torch.empty(layer.workspace_size(T), dtype=torch.uint8, device=dev)

    def cpp_loop(n):
        return layer.host_ns_per_forward(x, logits, y, ws, iters=n)

    cpp_loop(args.iters)  # warm-up
    torch.cuda.synchronize()
    cpp = []
    for _ in range(args.reps):
        cpp.append(cpp_loop(args.iters))
        torch.cuda.synchronize()
    cpp_ns = statistics.median(cpp)
    py_ns = per_call_ns(lambda: layer(x, logits, out=y), args.iters, args.reps)
    py_alloc_ns = per_call_ns(lambda: layer(x, logits), args.iters, args.reps)
    stream_ns = per_call_ns(lambda: torch.cuda.current_stream(0).cuda_stream, args.iters, args.reps)
    dlpack_ns = per_call_ns(lambda: torch.utils.dlpack.to_dlpack(x), args.iters, args.reps)

    extra = (py_ns - cpp_ns) / 1e3
    print(f"host_overhead: {cfg.summary()}, T={T}, {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"  C++ MoeLayer::forward                 {cpp_ns / 1e3:8.2f} us/call (median of {args.reps} x {args.iters})")
    print(f"  Python layer(x, logits, out=y)        {py_ns / 1e3:8.2f} us/call")
    print(f"  Python layer(x, logits) (allocates y) {py_alloc_ns / 1e3:8.2f} us/call")
    print(f"  parts: torch.cuda.current_stream()    {stream_ns / 1e3:8.2f} us, to_dlpack {dlpack_ns / 1e3:.2f} us (x4 per call)")
    verdict = "PASS" if extra < args.budget_us else "FAIL"
    print(f"  extra host time of the Python call    {extra:8.2f} us (budget {args.budget_us:g} us): {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
