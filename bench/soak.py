"""Soak: 1,000,000 tiny ops through the pipeline while resident memory is sampled.

Runs `a = a + b` (and a read every 100,000 ops), alternating a one-device and a two-device mesh,
and prints the process's resident memory after each 100,000 ops. Memory must stay flat: the
script exits 1 when the last sample exceeds the one after warm-up (both meshes used once) by more
than --slack-mib.

    /usr/bin/python3 bench/soak.py
    /usr/bin/python3 bench/soak.py --ops 200000
"""
from __future__ import annotations

import argparse
import sys
import time

import dtorch  # noqa: E402
from dtorch import DeviceMesh, Shard  # noqa: E402


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ops", type=int, default=1_000_000)
    ap.add_argument("--slack-mib", type=float, default=32.0)
    args = ap.parse_args()
    step = 100_000
    meshes = [(DeviceMesh("cpu", [0]), None, 1), (DeviceMesh("cpu", [0, 1]), [Shard(0)], 2)]
    samples = []
    t0 = time.perf_counter()
    done = 0
    while done < args.ops:
        mesh, pl, numel = meshes[(done // step) % 2]
        a = dtorch.ones(numel, device_mesh=mesh, placements=pl)
        b = dtorch.ones(numel, device_mesh=mesh, placements=pl)
        for _ in range(step):
            a = a + b
        value = a.to_torch()
        assert float(value[0]) == step + 1, value
        done += step
        samples.append(rss_mib())
        print(f"{done:>9} ops  rss {samples[-1]:8.1f} MiB  {time.perf_counter() - t0:7.1f} s", flush=True)
    # The first two steps warm both meshes up (worker threads, their malloc arenas, the buffer cache).
    base = samples[min(1, len(samples) - 1)]
    growth = samples[-1] - base
    print(f"resident memory growth after warm-up ({2 * step} ops): {growth:+.1f} MiB (slack {args.slack_mib} MiB)")
    return 0 if growth <= args.slack_mib else 1


if __name__ == "__main__":
    sys.exit(main())
