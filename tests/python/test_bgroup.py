"""Blob groups (``dt_graph_set_bgroup``, ``DTORCH_BGROUP=0`` off; src/core/records/bgroup.h): a shared
record makes its output's blobs on every device as one group, and the value and each shared record
that reads it hold the group once instead of each device's blob.

Each chain is run three ways: one record per device (shared records off), shared records without
groups, and with groups; every device's value (every shard, replica and Partial addend) is checked
bitwise equal across the three and against eager torch, and the memory charged to each device
(and, on a plain chain, the in-place kernels) checked equal with groups on and off. Meshes: 1-D of 2, 3 and 12 devices
(uneven shards; 12 is past the groups' pool), 2-D; genuine multi-piece Partial inputs; float32 and bfloat16. Plus a kernel error
and a dropped value inside a chain of groups.
"""

import inspect
import os
import unittest

import torch

import dtorch
from dtorch import Shard
from dtorch.test.probes import bcast, bgroup, graph_stats, replay
from dtorch.test.test_util import local_values

from helpers import CPU2, CPU3, CPU2x2, assert_equal_everywhere, bits
from helpers import assert_in_place_alike, chain_case, settle
from helpers import placements_1d, placements_2d

CPU12 = dtorch.DeviceMesh("cpu", list(range(12)))
MODES = (("per device", False, False), ("shared", True, False), ("groups", True, True))


def run(mode, fn, mesh, *args):
    """fn(*args) in one mode: its per-device values, in-place kernels, bytes charged per device while
    its result lives, and nodes taken as shared records."""
    _, on, groups = mode
    with replay(False), bcast(on), bgroup(groups):
        settle()
        mem0 = dtorch.memory_stats(mesh)
        s0 = graph_stats()
        y = fn(*args)
        values = local_values(y)
        settle()
        mem = dtorch.memory_stats(mesh)
        s1 = graph_stats()
    charged = {d: mem[d]["current"] - mem0[d]["current"] for d in mem}
    return y, values, s1["kernels_in_place"] - s0["kernels_in_place"], charged, s1["bcast_nodes"] - s0["bcast_nodes"]


class TestGroupsAsWithout(unittest.TestCase):
    def sweep(self, mesh, layouts, shape, dtype):
        took = 0
        for pl in layouts:
            fn, ref, ta, tb, a, b = chain_case(mesh, pl, shape, dtype)
            with self.subTest(mesh=mesh, placements=pl, dtype=dtype):
                runs = [run(m, fn, mesh, a, b) for m in MODES]
                (_, base_v, _, _, n_dev), (_, _, _, mem_sh, n_sh), (y, _, _, mem_grp, n_grp) = runs
                self.assertEqual(n_dev, 0)
                self.assertGreater(n_grp, 0)
                self.assertEqual(n_sh, n_grp)
                took += n_grp
                for name, (_, values, _, _, _) in zip([m[0] for m in MODES], runs):
                    self.assertEqual(len(values), len(base_v), name)
                    for d, (x, w) in enumerate(zip(values, base_v)):
                        self.assertTrue(torch.equal(bits(x), bits(w)), f"{name}, device {d}")
                # (In-place kernels are compared on a plain chain below: here `a` has several
                # readers, and whether a dropped value's buffer is free when its last reader runs
                # depends on how far the other devices and the controller have got, both ways.)
                self.assertEqual(mem_grp, mem_sh)
                self.assertTrue(any(v > 0 for v in mem_grp.values()))
                assert_equal_everywhere(self, y, ref(ta, tb))
        return took

    def test_meshes(self):
        # 1-D even and uneven (float32, bfloat16), 2-D; every layout, Partial ones genuine.
        cases = [(CPU2, (4, 6), placements_1d), (CPU3, (5, 7), placements_1d), (CPU2x2, (4, 6), placements_2d),
                 (CPU12, (25, 3), placements_1d)]  # past the groups' pool (8 members): allocated
        for mesh, shape, layouts in cases:
            pls = [list(p) if isinstance(p, (list, tuple)) else [p] for p in layouts(2)]
            dtypes = (torch.float32, torch.bfloat16) if mesh in (CPU2, CPU3) else (torch.float32,)
            self.assertGreater(sum(self.sweep(mesh, pls, shape, dt) for dt in dtypes), 0)

    def test_dropped_intermediates_are_written_in_place(self):
        # The window's reuse mark on a group read by its only holder: the kernel takes the group's
        # reference on its device's member over, so the buffer is reused as per device.
        assert_in_place_alike(self, lambda *a: run(*a)[1:3], MODES)


class TestGroupErrors(unittest.TestCase):
    def test_kernel_error_in_a_chain_of_groups(self):
        x = dtorch.from_torch(torch.tensor([4, 6, 8, 10]), CPU2, [Shard(0)])
        z = dtorch.from_torch(torch.tensor([2, 3, 0, 5]), CPU2, [Shard(0)])  # device 1 divides by 0
        with bcast(True), bgroup(True):
            a, b = x + 0, z * 1
            line = inspect.currentframe().f_lineno + 1
            y = a // b
            w = (y + a) * b
            with self.assertRaises(dtorch.KernelError) as cm:
                w.to_torch()
            msg = str(cm.exception)
            self.assertIn("floor_divide failed on cpu:1", msg)
            self.assertIn(f"{os.path.basename(__file__)}:{line}", msg)
            # The groups the failed kernel read are still right, and the runtime keeps working.
            assert_equal_everywhere(self, a * b, torch.tensor([8, 18, 0, 50]))
            del y, w
            assert_equal_everywhere(self, a + b, torch.tensor([6, 9, 8, 15]))


if __name__ == "__main__":
    unittest.main()
