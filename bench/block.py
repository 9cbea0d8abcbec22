"""A small transformer (issue 14's "new user" test): 12 pre-norm layers (dim 256, 4 heads, seq 64,
batch 1, float32: layer norm, fused qkv projection, causal scaled dot product attention, output
projection, GELU MLP of width 1024) on one CPU device, dtorch against eager torch in one process.

  total/torch  dtorch's time for a forward pass, recorded and read, over eager torch's; best of
               --repeat interleaved runs, with replay on and off (dtorch.test.probes.replay);
               goal <= 0.8 (issue 14)
  hits         nodes replayed per forward pass (graph_stats()["replay_hits"])

Results are checked against torch (allclose). Machines are noisy: run it several times.

Replay is off by default (DTORCH_REPLAY=1 turns it on); the script switches it itself.

    /usr/bin/python3 bench/block.py
    /usr/bin/python3 bench/block.py --repeat 20 --threads 1
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import dtorch  # noqa: E402
from dtorch.test.probes import graph_stats, replay  # noqa: E402

DIM, HEADS, SEQ, LAYERS = 256, 4, 64, 12


def weights(seed):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g) / s[0] ** 0.5  # noqa: E731
    return [dict(ln1w=torch.rand(DIM, generator=g) + 0.5, ln1b=torch.randn(DIM, generator=g) * 0.1,
                 wqkv=mk(DIM, 3 * DIM), wo=mk(DIM, DIM),
                 ln2w=torch.rand(DIM, generator=g) + 0.5, ln2b=torch.randn(DIM, generator=g) * 0.1,
                 w1=mk(DIM, 4 * DIM), w2=mk(4 * DIM, DIM)) for _ in range(LAYERS)]


def forward(x, ws, F):
    hd = DIM // HEADS
    for w in ws:
        h = F.layer_norm(x, (DIM,), w["ln1w"], w["ln1b"])
        qkv = h @ w["wqkv"]
        q, k, v = (qkv[..., i * DIM:(i + 1) * DIM].reshape(1, SEQ, HEADS, hd).transpose(1, 2) for i in range(3))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + a.transpose(1, 2).reshape(1, SEQ, DIM) @ w["wo"]
        h = F.layer_norm(x, (DIM,), w["ln2w"], w["ln2b"])
        x = x + F.gelu(h @ w["w1"]) @ w["w2"]
    return x


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import dtorch.nn.functional as DF
    import torch.nn.functional as TF

    ws = weights(0)
    dws = [{k: dtorch.from_torch(t) for k, t in w.items()} for w in ws]
    x = torch.randn(1, SEQ, DIM, generator=torch.Generator().manual_seed(1))
    dx = dtorch.from_torch(x)
    want = forward(x, ws, TF)
    best = {"torch": float("inf"), True: float("inf"), False: float("inf")}
    hits = {}
    for rep in range(args.repeat):
        t0 = time.perf_counter()
        forward(x, ws, TF)
        best["torch"] = min(best["torch"], time.perf_counter() - t0)
        for on in ((False, True) if rep % 2 == 0 else (True, False)):  # alternate: no order bias
            with replay(on):
                forward(dx, dws, DF).to_torch()  # first sighting (on) / warm-up (off)
                h0 = graph_stats()["replay_hits"]
                t0 = time.perf_counter()
                got = forward(dx, dws, DF).to_torch()
                best[on] = min(best[on], time.perf_counter() - t0)
                hits[on] = graph_stats()["replay_hits"] - h0
            if not torch.allclose(got, want, rtol=1e-4, atol=1e-4):
                raise SystemExit(f"mismatch: max abs diff {(got - want).abs().max().item()}")
    print(f"# {platform.node()} {os.cpu_count()} cpus, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, load {os.getloadavg()[0]:.1f}")
    print(f"torch {best['torch'] * 1e3:.2f} ms")
    for on in (False, True):
        print(f"dtorch replay {'on ' if on else 'off'} {best[on] * 1e3:.2f} ms  total/torch "
              f"{best[on] / best['torch']:.2f}  hits/pass {hits[on]}")


if __name__ == "__main__":
    main()
