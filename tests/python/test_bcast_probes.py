"""Eligibility of a shared record decided on a few devices (``dt__lw_probes``,
src/core/controller/lower_bcast.c): where every block of a node's values is even, a family checks
device 0 and one device along each mesh dim that is not Replicate everywhere, and the proof that the
others match rests on the blocks' offsets being linear in the coordinate. These cases are the ones
where that proof must not be taken, or must see what only a probe device shows: uneven shards on 3
devices and on one dim of 2-D meshes of 2 x 3 and 3 x 2 (and by both dims of a 2 x 2), a setitem that cuts a sharded dim, Partial
targets whose devices off the first coordinate write zeros. Each result is computed with the shared
records off and on (bitwise equal device by device, every shard, replica and Partial addend) and
against eager torch, and whether the node was shared is checked against what its devices' kernels
are.
"""

import os
import subprocess
import sys
import tempfile
import unittest

import torch

import dtorch
from dtorch import DeviceMesh, Partial, Replicate, Shard
from dtorch.nn import functional as F

from helpers import CPU2, CPU3, genuine_partial, int_valued, randn
from dtorch.test.probes import graph_stats
from dtorch.test.test_util import local_values
from test_bcast import same_both_ways

R, P = Replicate(), Partial()
M23 = DeviceMesh("cpu", [[0, 1, 2], [3, 4, 5]], mesh_dim_names=("a", "b"))
M32 = DeviceMesh("cpu", [[0, 1], [2, 3], [4, 5]], mesh_dim_names=("a", "b"))
CPU4 = DeviceMesh("cpu", [0, 1, 2, 3])
M22 = DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("a", "b"))

# (mesh, x shape, x placements, every device's block of one shape)
LAYOUTS = [
    (CPU3, (6, 2, 5), [Shard(0)], True),
    (CPU3, (5, 2, 6), [Shard(0)], False),  # rows 2, 2, 1
    (M23, (6, 2, 5), [R, Shard(0)], True),
    (M23, (4, 2, 6), [R, Shard(0)], False),  # 4 rows over mesh dim b (3): 2, 2, 0; even over a (2)
    (M23, (4, 2, 6), [Shard(0), R], True),
    (M23, (4, 3, 6), [Shard(0), Shard(1)], True),
    (M23, (4, 2, 6), [Shard(1), Shard(0)], False),  # dim 0 over b: 2, 2, 0
    (M32, (6, 2, 5), [Shard(0), R], True),
    (M32, (4, 2, 6), [Shard(0), R], False),  # 4 rows over mesh dim a (3)
    (M32, (3, 4, 5), [Shard(0), Shard(1)], True),
    (M32, (4, 4, 5), [Shard(1), Shard(0)], False),  # dim 1 (4) over a (3): 2, 2, 0; dim 0 over b even
    # One dim sharded by both mesh dims: b cuts what a left of it (dt__lw_even divides in turn).
    (M22, (4, 2, 6), [Shard(0), Shard(0)], True),
    (M22, (6, 2, 5), [Shard(0), Shard(0)], False),  # 6 over a: 3, 3; 3 over b: 2, 1 (6 divides by 2)
    (M22, (2, 6, 4), [Shard(1), Shard(1)], False),  # dim 1 as above, on a middle dim
]

# Nodes whose kernel carries the device's local shape: shared exactly where the blocks are even.
SHAPED = [
    ("reshape", lambda x: x.reshape(*x.shape[:2], 1, -1), lambda t: t.reshape(*t.shape[:2], 1, -1)),
    ("transpose_contiguous", lambda x: x.transpose(1, 2).contiguous(), lambda t: t.transpose(1, 2).contiguous()),
    ("getitem", lambda x: x[:, :, 1:4], lambda t: t[:, :, 1:4]),
    ("softmax", lambda x: F.softmax(x, dim=-1), lambda t: torch.softmax(t, dim=-1)),
]


class TestProbeDevices(unittest.TestCase):
    def test_local_shape_kernels_on_even_and_uneven_blocks(self):
        for mesh, shape, pl, even in LAYOUTS:
            if len(pl) != mesh.ndim:
                continue
            t = randn(*shape, seed=1)
            x = dtorch.from_torch(t, mesh, pl)
            for name, fn, ref in SHAPED:
                with self.subTest(mesh=mesh, shape=shape, placements=pl, op=name):
                    same_both_ways(self, fn, (x,), ref(t), even, exact=name != "softmax")

    def test_replicate_broadcast_beside_shards(self):
        # A Replicate row broadcast over the sharded dims: each device's region of it is its whole
        # block, on uneven blocks too (elementwise kernels carry no shape).
        for mesh, shape, pl, _ in LAYOUTS:
            tx, tv = int_valued(*shape, seed=2), int_valued(1, 1, shape[-1], seed=3)
            x = dtorch.from_torch(tx, mesh, pl)
            v = dtorch.from_torch(tv, mesh, [R] * mesh.ndim)
            with self.subTest(mesh=mesh, shape=shape, placements=pl):
                same_both_ways(self, lambda a, b: a * b, (x, v), tx * tv, True, exact=True)

    def test_setitem_of_part_of_a_sharded_dim(self):
        # c[0:5] = 7 on 8 rows over 4 devices: devices 0 and 1 write 2 rows from 0, device 2 one,
        # device 3 none, so the first two devices alone do not show that the kernels differ.
        t = int_valued(8, 3, seed=4)
        want = t.clone()
        want[0:5] = 7.0

        def fill(a):
            a[0:5] = 7.0
            return a

        for mesh in (CPU4, CPU2):
            with self.subTest(mesh=mesh):
                same_both_ways(self, fill, (dtorch.from_torch(t, mesh, [Shard(0)]),), want, False, exact=True)
        # The whole sharded dim and a slice of an unsharded one: every device's part is the same.
        want = t.clone()
        want[:, 1:3] = 7.0

        def fill_cols(a):
            a[:, 1:3] = 7.0
            return a

        for mesh in (CPU4, CPU3):
            even = mesh is CPU4
            with self.subTest(mesh=mesh, cols=True):
                same_both_ways(self, fill_cols, (dtorch.from_torch(t, mesh, [Shard(0)]),), want, even, exact=True)

    def test_setitem_of_partial_target(self):
        # A Partial target with a Replicate value: the devices off the first coordinate write zeros
        # (their addends sum to the value), so their kernels differ from device 0's: per device.
        t, tv = int_valued(4, 6, seed=5), int_valued(4, 2, seed=6)
        want = t.clone()
        want[:, 2:4] = tv
        for mesh, pl in ((CPU2, [P]), (CPU3, [P]), (M23, [R, P]), (M23, [P, R]), (M32, [P, P])):

            def write(a, v):
                a[:, 2:4] = v
                return a

            with self.subTest(mesh=mesh, placements=pl):
                x = genuine_partial(t, mesh, pl, seed=7)
                v = dtorch.from_torch(tv, mesh, [R] * mesh.ndim)
                same_both_ways(self, write, (x, v), want, False, exact=True)

    def test_partial_inputs_add(self):
        # Genuine multi-piece Partial inputs laid out alike: one kernel on every device.
        ta, tb = int_valued(4, 6, seed=8), int_valued(4, 6, seed=9)
        for mesh, pl in ((CPU3, [P]), (M23, [R, P]), (M32, [P, Shard(0)])):
            a, b = genuine_partial(ta, mesh, pl, seed=10), genuine_partial(tb, mesh, pl, seed=11)
            with self.subTest(mesh=mesh, placements=pl):
                same_both_ways(self, lambda a, b: a + b, (a, b), ta + tb, True, exact=True)

    def test_linear_contracting_a_sharded_dim(self):
        # x [4, 6] @ w.T with the contracted dim sharded on both: a Partial result; 6 over 4 devices
        # is uneven (2, 2, 2, 0), over 3 even; the kernel carries no shape, so shared either way.
        tx, tw = randn(4, 6, seed=12), randn(5, 6, seed=13)
        for mesh in (CPU4, CPU3, CPU2):
            x = dtorch.from_torch(tx, mesh, [Shard(1)])
            w = dtorch.from_torch(tw, mesh, [Shard(1)])
            with self.subTest(mesh=mesh):
                y = same_both_ways(self, lambda x, w: F.linear(x, w), (x, w), tx @ tw.T, True)
                self.assertGreater(y, 0)


def sweep_all():
    """Every SHAPED op on every layout: each case's per-device values and the nodes it shared."""
    out = []
    for mesh, shape, pl, _ in LAYOUTS:
        t = randn(*shape, seed=1)
        x = dtorch.from_torch(t, mesh, pl)
        dtorch.synchronize()  # x's own node (shared where Replicate) counted before the first case
        for _, fn, _ in SHAPED:
            n0 = graph_stats()["bcast_nodes"]
            values = local_values(fn(x))
            out.append((graph_stats()["bcast_nodes"] - n0, values))
    return out


class TestSwitchesReadAtCreation(unittest.TestCase):
    def test_proof_and_spin_switches_change_no_record(self):
        """DTORCH_BCAST_PROOF=0 (every device checked) and DTORCH_SPIN_ADAPT=0 (the fixed spin), read
        when a graph is made: child processes sweep every layout and op; the nodes shared and every
        device's values are the same as with both on, bit for bit."""
        code = ("import sys, torch; sys.path.insert(0, %r)\n"
                "import test_bcast_probes as t\n"
                "torch.save(t.sweep_all(), sys.argv[1])\n") % os.path.dirname(os.path.abspath(__file__))
        outs = {}
        with tempfile.TemporaryDirectory() as tmp:
            for name, env in (("on", {}), ("proof0", {"DTORCH_BCAST_PROOF": "0"}),
                              ("spin0", {"DTORCH_SPIN_ADAPT": "0"})):
                path = os.path.join(tmp, f"{name}.pt")
                r = subprocess.run([sys.executable, "-c", code, path], env=dict(os.environ, **env),
                                   capture_output=True, text=True, timeout=300)
                self.assertEqual(r.returncode, 0, r.stderr[-3000:])
                outs[name] = torch.load(path)
        self.assertGreater(sum(n for n, _ in outs["on"]), 0)
        for name in ("proof0", "spin0"):
            self.assertEqual(len(outs[name]), len(outs["on"]))
            for i, ((n_a, va), (n_b, vb)) in enumerate(zip(outs["on"], outs[name])):
                self.assertEqual(n_a, n_b, f"{name} case {i}: nodes shared")
                self.assertEqual(len(va), len(vb))
                for d, (a, b) in enumerate(zip(va, vb)):
                    self.assertTrue(torch.equal(a, b), f"{name} case {i} device {d}")


if __name__ == "__main__":
    unittest.main()
