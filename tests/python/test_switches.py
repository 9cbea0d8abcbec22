"""Each controller mechanism that a switch turns on or off gives the same values both ways
(issue 35, item 3): capture and replay (``DTORCH_REPLAY`` / ``probes.replay``), blocked elementwise
chains (``DTORCH_CHAINS`` / ``probes.chains``), the overlap schedule (``DTORCH_SCHEDULE`` /
``probes.schedule``) and device-independent records (``DTORCH_BCAST`` / ``probes.bcast``), alone and
all together, and the collectives' stream (``DTORCH_OVERLAP=0``, read
when a graph is made: a child process).

One program -- elementwise runs long enough to chain, a reduction of a sharded dim (Partial), a
matmul, softmax, collectives (all-gather, all-reduce), a cat, two micro-batches of a
tensor-parallel MLP one after the other (what the schedule reorders) -- runs three times per
setting on one device and on a 2x2 mesh. The all-off run is compared with eager torch (equal on one
device, allclose on the mesh); every other setting must be bitwise equal to the all-off run on every
device, and its counters show the mechanism ran (replayed nodes, fused nodes, reordered nodes, shared
records), so
a switch that stops working fails here rather than passing vacuously.
"""

import os
import subprocess
import sys
import unittest

import torch

import dtorch
from dtorch import Replicate, Shard
from dtorch.test.probes import bcast, bgroup, chains, graph_stats, held_controller, replay, schedule, step
from dtorch.test.test_util import local_values

from helpers import CPU1, CPU2x2, randn

N = 3 * 32768 + 5  # past the chain pass's minimum and block size


def program(x, w):
    """x [4, N/…] sharded or not, w [8, 8]: returns several results of different paths."""
    y = x * 1.5 + 0.25
    y = y.sin() * y.cos() - y.exp().clamp(max=4.0)
    s = y.sum(dim=0)  # Partial on a mesh dim that shards dim 0
    m = w @ w.t()
    p = m.softmax(dim=-1)
    c = dtorch.cat([p, p * 2.0], dim=0)
    nd = y.device_mesh.ndim
    r = y.redistribute(placements=[Replicate()] * nd)
    # Two micro-batches of a tensor-parallel MLP, one after the other: the schedule's case (B's first
    # layer runs while A's all-reduce is in flight).
    w1 = w.redistribute(placements=[Replicate()] * (nd - 1) + [Shard(1)])
    w2 = w.redistribute(placements=[Replicate()] * (nd - 1) + [Shard(0)])
    mbs = []
    for k in range(2):
        h = w * (k + 1.0)
        for _ in range(2):
            h = ((h @ w1).relu() @ w2).redistribute(placements=[Replicate()] * nd)
        mbs.append(h)
    return [s, p, c, r.mean(dim=1)] + mbs


def torch_program(x, w):
    y = x * 1.5 + 0.25
    y = y.sin() * y.cos() - y.exp().clamp(max=4.0)
    m = w @ w.t()
    p = m.softmax(dim=-1)
    mbs = []
    for k in range(2):
        h = w * (k + 1.0)
        for _ in range(2):
            h = (h @ w).relu() @ w
        mbs.append(h)
    return [y.sum(dim=0), p, torch.cat([p, p * 2.0], dim=0), y.mean(dim=1)] + mbs


SETTINGS = {
    "off": dict(replay=False, chains=False, schedule=False, bcast=False),
    "replay": dict(replay=True, chains=False, schedule=False, bcast=False),
    "chains": dict(replay=False, chains=True, schedule=False, bcast=False),
    "schedule": dict(replay=False, chains=False, schedule=True, bcast=False),
    "bcast": dict(replay=False, chains=False, schedule=False, bcast=True),
    # Shared records without blob groups (``probes.bgroup``; on everywhere else).
    "bcast_no_groups": dict(replay=False, chains=False, schedule=False, bcast=True, bgroup=False),
    # Shared records one per node (``probes.step``; runs on everywhere else).
    "bcast_no_runs": dict(replay=False, chains=False, schedule=False, bcast=True, step=False),
    "all": dict(replay=True, chains=True, schedule=True, bcast=True),
}
COUNTER = {"replay": "replay_hits", "chains": "nodes_fused", "schedule": "nodes_reordered", "bcast": "bcast_nodes"}


class TestSwitches(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.x = randn(4, N // 4, seed=1)
        cls.w = randn(8, 8, seed=2)
        cls.want = torch_program(cls.x, cls.w)

    def run_setting(self, mesh, pl, setting):
        sw = SETTINGS[setting]
        before = graph_stats()
        with replay(sw["replay"]), chains(sw["chains"]), schedule(sw["schedule"]), bcast(sw["bcast"]), \
                bgroup(sw.get("bgroup", True)), step(sw.get("step", True)):
            outs = []
            for _ in range(3):  # replay captures the first pass and replays the others
                x = dtorch.from_torch(self.x, mesh, pl)
                w = dtorch.from_torch(self.w, mesh, [Replicate()] * mesh.ndim)
                with held_controller():
                    res = program(x, w)
                outs.append([[v.clone() for v in local_values(t)] for t in res])
            dtorch.synchronize()
        after = graph_stats()
        return outs, {k: after[k] - before[k] for k in COUNTER.values()}

    def check_mesh(self, mesh, pl, exact):
        base, _ = self.run_setting(mesh, pl, "off")
        for got, want in zip(base[0], self.want):
            for piece in got:  # every device's local value of a Replicate/Partial-reduced result
                self.assertEqual(piece.dtype, want.dtype)
        for setting in SETTINGS:
            if setting == "off":
                continue
            with self.subTest(mesh=mesh, setting=setting):
                outs, counters = self.run_setting(mesh, pl, setting)
                for rep in range(3):
                    for i, (a, b) in enumerate(zip(outs[rep], base[0])):
                        self.assertEqual(len(a), len(b))
                        for d, (pa, pb) in enumerate(zip(a, b)):
                            self.assertTrue(torch.equal(pa, pb), f"{setting}: result {i}, pass {rep}, device {d}")
                for mech, key in COUNTER.items():
                    # The schedule reorders only around collectives on the communication stream.
                    comm_stream = os.environ.get("DTORCH_OVERLAP") != "0" and mesh.size() > 1
                    # Shared records need a mesh of several devices.
                    if SETTINGS[setting][mech] and (mech != "schedule" or comm_stream) and (
                            mech != "bcast" or mesh.size() > 1):
                        self.assertGreater(counters[key], 0, f"{setting}: {key} did not move")
                    if not SETTINGS[setting][mech]:
                        self.assertEqual(counters[key], 0, f"{setting}: {key} moved while off")
        return base

    def test_one_device(self):
        base = self.check_mesh(CPU1, [Replicate()], exact=True)
        for got, want in zip(base[0], self.want):
            self.assertTrue(torch.equal(got[0], want))

    def test_two_by_two(self):
        pl = [Shard(0), Shard(1)]
        self.check_mesh(CPU2x2, pl, exact=False)
        # The all-off run against torch: the read value, allclose (sums of sharded pieces).
        with replay(False), chains(False), schedule(False), bcast(False):
            res = program(dtorch.from_torch(self.x, CPU2x2, pl),
                          dtorch.from_torch(self.w, CPU2x2, [Replicate(), Replicate()]))
            for got, want in zip(res, self.want):
                torch.testing.assert_close(got.to_torch(), want, rtol=1e-5, atol=1e-5)


class TestOverlapSwitch(unittest.TestCase):
    def test_overlap_off_same_values(self):
        """DTORCH_OVERLAP=0 (collectives on the compute stream), read at graph creation: a child process
        prints the program's values on the 2x2 mesh; they equal this process's bit for bit."""
        code = ("import sys, torch, dtorch; sys.path.insert(0, %r)\n"
                "import test_switches as t\n"
                "x, w = t.randn(4, t.N // 4, seed=1), t.randn(8, 8, seed=2)\n"
                "res = t.program(dtorch.from_torch(x, t.CPU2x2, [dtorch.Shard(0), dtorch.Shard(1)]),\n"
                "                dtorch.from_torch(w, t.CPU2x2, [dtorch.Replicate()] * 2))\n"
                "torch.save([r.to_torch() for r in res], sys.argv[1])\n") % os.path.dirname(os.path.abspath(__file__))
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            outs = {}
            for ov in ("0", "1"):
                path = os.path.join(tmp, f"o{ov}.pt")
                env = dict(os.environ, DTORCH_OVERLAP=ov)
                r = subprocess.run([sys.executable, "-c", code, path], env=env, capture_output=True, text=True,
                                   timeout=300)
                self.assertEqual(r.returncode, 0, r.stderr[-3000:])
                outs[ov] = torch.load(path)
        for a, b in zip(outs["0"], outs["1"]):
            self.assertTrue(torch.equal(a, b))


if __name__ == "__main__":
    unittest.main()
