"""Loading rate of one checkpoint layer to the GPU: a DeepSeek-V3-shaped FP8 layer (256 experts of
3 x 7168 x 2048 e4m3 + their 128x128 scales, the shared expert, the router: 11.3 GB) written once
as a sharded safetensors checkpoint, then read from the page cache by
`fusedmoe.MoeLayer.from_pretrained` (the loader, the copies to the GPU and the layer's prepare).
The target is >= 2 GB/s for the whole call. Also the parts: `fusedmoe.load_moe_layer` alone
(files to host memory), and two ceilings measured in the same run: reading the shards from the
page cache into host memory (`readinto`, one thread) and a pinned host-to-device copy.

    PYTHONPATH=<build>/python python3 python/bench/load.py [--dir D] [--experts E] [--reps N]

Needs torch, a CUDA build of fusedmoe and an sm_90 GPU, and host memory for the checkpoint
twice over (page cache + the loader's copy). Prints one table and a PASS/FAIL line.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import struct
import sys
import tempfile
import time

import numpy as np
import torch

import fusedmoe

H, I, E_DEFAULT, LAYER = 7168, 2048, 256, 3
CONFIG = dict(model_type="deepseek_v3", hidden_size=H, moe_intermediate_size=I,
              n_routed_experts=E_DEFAULT, n_shared_experts=1, num_experts_per_tok=8, n_group=8,
              topk_group=4, norm_topk_prob=True, routed_scaling_factor=2.5,
              scoring_func="sigmoid", topk_method="noaux_tc",
              quantization_config={"quant_method": "fp8", "fmt": "e4m3",
                                   "activation_scheme": "dynamic",
                                   "weight_block_size": [128, 128]})


def write_checkpoint(d: str, experts: int, shards: int) -> int:
    """Writes the layer as `shards` safetensors files + model.safetensors.index.json; returns
    the tensor bytes. Each projection's codes are one random block reused for every expert
    (the loader's speed does not depend on the values); codes 0x00..0x7e are finite."""
    rng = np.random.default_rng(1)
    codes = {
        (I, H): rng.integers(0, 0x7F, (I, H), dtype=np.uint8),
        (H, I): rng.integers(0, 0x7F, (H, I), dtype=np.uint8),
    }
    scales = {k: (rng.random(((k[0] + 127) // 128, (k[1] + 127) // 128), dtype=np.float32) + 0.5) * 1e-3
              for k in codes}
    p = f"model.layers.{LAYER}.mlp."
    names = []  # (name, dtype, array)
    for j in list(range(experts)) + ["shared"]:
        base = f"{p}experts.{j}." if j != "shared" else f"{p}shared_experts."
        for proj, shape in (("gate_proj", (I, H)), ("up_proj", (I, H)), ("down_proj", (H, I))):
            names.append((f"{base}{proj}.weight", "F8_E4M3", codes[shape]))
            names.append((f"{base}{proj}.weight_scale_inv", "F32", scales[shape]))
    router = (rng.standard_normal((experts, H), dtype=np.float32) * 0.02).astype(np.float32)
    names.append((f"{p}gate.weight", "F32", router))
    names.append((f"{p}gate.e_score_correction_bias", "F32", np.zeros(experts, np.float32)))
    cfg = dict(CONFIG, n_routed_experts=experts)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    per = (len(names) + shards - 1) // shards
    weight_map, total = {}, 0
    for s in range(shards):
        part = names[s * per:(s + 1) * per]
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        header, offset = {}, 0
        for name, dt, a in part:
            header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
            offset += a.nbytes
            weight_map[name] = file
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(d, file), "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for _, _, a in part:
                f.write(memoryview(np.ascontiguousarray(a)).cast("B"))
        total += offset
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    return total


def read_ceiling(d: str) -> float:
    """Seconds to read every shard from the page cache into one host buffer (one thread)."""
    files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".safetensors"))
    size = max(os.path.getsize(f) for f in files)
    buf = bytearray(size)
    t0 = time.perf_counter()
    for f in files:
        with open(f, "rb", buffering=0) as fh:
            view = memoryview(buf)[:os.path.getsize(f)]
            while view:
                n = fh.readinto(view)
                view = view[n:]
    return time.perf_counter() - t0


def h2d_ceiling(nbytes: int) -> float:
    """Bytes per second of a pinned host-to-device copy of 1 GiB (median of 5)."""
    n = min(nbytes, 1 << 30)
    src = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    dst = torch.empty(n, dtype=torch.uint8, device="cuda")
    times = []
    for _ in range(6):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return n / statistics.median(times[1:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", default=None, help="where to write the checkpoint (default: a temporary folder)")
    ap.add_argument("--experts", type=int, default=E_DEFAULT)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--target-gbs", type=float, default=2.0)
    args = ap.parse_args()

    ok, why = fusedmoe.gpu_usable(0)
    if not (fusedmoe.built_with_cuda and torch.cuda.is_available() and ok):
        print(f"load: needs a CUDA build of fusedmoe and an sm_90 GPU: {why}")
        return 1
    tmp = None
    d = args.dir
    if d is None:
        tmp = tempfile.TemporaryDirectory(prefix="fmoe-load-")
        d = tmp.name
    os.makedirs(d, exist_ok=True)
    t0 = time.perf_counter()
    total = write_checkpoint(d, args.experts, args.shards)
    print(f"checkpoint: {d}: {args.experts} experts + shared, {total / 1e9:.2f} GB of tensors in "
          f"{args.shards} shards, written in {time.perf_counter() - t0:.1f} s")

    read_s = min(read_ceiling(d) for _ in range(2))  # the second read is from the page cache
    h2d = h2d_ceiling(total)

    host_s, full_s = [], []
    for _ in range(args.reps):
        t0 = time.perf_counter()
        cfg, tensors = fusedmoe.load_moe_layer(d, LAYER)
        host_s.append(time.perf_counter() - t0)
        del tensors
        gc.collect()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        layer = fusedmoe.MoeLayer.from_pretrained(d, LAYER)
        torch.cuda.synchronize()
        full_s.append(time.perf_counter() - t0)
        prepared = layer.prepared_bytes
        peak = torch.cuda.max_memory_allocated()
        del layer
        gc.collect()
        torch.cuda.empty_cache()

    def rate(s):
        return total / s / 1e9

    med_host, med_full = statistics.median(host_s), statistics.median(full_s)
    print(f"{'what':<52} {'time s':>8} {'GB/s':>7}")
    print(f"{'ceiling: page cache -> host (readinto, 1 thread)':<52} {read_s:8.2f} {rate(read_s):7.2f}")
    print(f"{'ceiling: pinned host -> device copy (1 GiB)':<52} {total / h2d:8.2f} {h2d / 1e9:7.2f}")
    print(f"{'load_moe_layer (files -> host tensors)':<52} {med_host:8.2f} {rate(med_host):7.2f}"
          f"   spread {min(host_s):.2f}-{max(host_s):.2f} s")
    print(f"{'MoeLayer.from_pretrained (files -> prepared layer)':<52} {med_full:8.2f} {rate(med_full):7.2f}"
          f"   spread {min(full_s):.2f}-{max(full_s):.2f} s")
    print(f"prepared layer {prepared / 1e9:.2f} GB; torch's peak allocation {peak / 1e9:.2f} GB")
    ok = rate(med_full) >= args.target_gbs
    print(f"{'PASS' if ok else 'FAIL'}: from_pretrained at {rate(med_full):.2f} GB/s "
          f"(target >= {args.target_gbs} GB/s)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
