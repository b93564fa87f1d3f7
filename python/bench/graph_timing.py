"""The peer benchmarks' one timing method (contest_peers.py, deepgemm_peer.py): CUDA events around
a CUDA graph of `launches` calls, warmed up outside the capture (workspaces, JIT compilation,
autotuning), median and p10/p90 per call over `reps` replays after two warm-up replays."""

from __future__ import annotations

import statistics

import torch


def time_graph(calls, launches: int, reps: int) -> tuple[float, float, float]:
    """Median, p10, p90 in microseconds per launch: `calls[i % len(calls)]` captured `launches`
    times into one graph, replayed `reps` times after two warm-up replays."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for c in calls:  # warm-up outside capture (workspaces, autotuning)
            c()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for i in range(launches):
            calls[i % len(calls)]()
    for _ in range(2):
        graph.replay()
    torch.cuda.synchronize()
    samples = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1e3 / launches)
    samples.sort()
    return statistics.median(samples), samples[len(samples) // 10], samples[(9 * len(samples)) // 10]
