"""Replay of run images (src/core/controller/replay.c, `dt__lw_step_replay` in
src/core/controller/lower_step.c): a node whose lowering was one image of a run of shared records
(test_step.py) has that image as its template; a later node with the same signature gets a copy of
it appended to its mesh's open run, bound to its own inputs' groups, without being lowered.

Each program runs several steps in a row, each step one controller round (`held_controller`), with
replay off and on (turning replay off drops the templates, so each run starts with none): every
device's value (every shard, replica and genuine Partial addend) of every step is checked bitwise
equal between the two and against eager torch; the counters say the later steps' nodes were
replayed (`replay_hits`) and were still images of runs (`bcast_nodes`, `step_runs` as with replay
off). Meshes: 1-D of 2 and 3 devices (uneven shards), 2-D; float32 and bfloat16. Then a changed
shape, dtype, placement, scalar or mesh in the middle of a repeated step (that node is lowered, the
others replayed), the switches a signature does not hold (shared records turned off after the
capture: no image is replayed), and one blob under two values (two groups holding it, or one group
under two values): the signature says so, so a per-device template of one is not used for the other.
"""

import unittest

import torch

import dtorch
from dtorch import Replicate, Shard
from dtorch.test.probes import bcast, bgroup, graph_stats, held_controller, replay, step
from dtorch.test.test_util import local_values

from helpers import CPU2, CPU3, CPU2x2, assert_equal_everywhere, bits, chain_case, int_valued, settle
from helpers import placements_1d, placements_2d

STEPS = 3


def stats():
    s = graph_stats()
    return {k: s[k] for k in ("replay_hits", "replay_misses", "bcast_nodes", "step_runs")}


def delta(s1, s0):
    return {k: s1[k] - s0[k] for k in s0}


def run(on, fn, *args, steps=STEPS):
    """fn(*args) `steps` times, each step one controller round, replay `on` (shared records, groups
    and runs on); per step its results, every device's values and the counters' change."""
    out = []
    with replay(on), bcast(True), bgroup(True), step(True):
        settle()
        for _ in range(steps):
            s0 = stats()
            with held_controller():
                ys = fn(*args)
            ys = list(ys) if isinstance(ys, (list, tuple)) else [ys]
            values = [v for y in ys for v in local_values(y)]
            out.append((ys, values, delta(stats(), s0)))
    return out


class TestRunImagesReplayed(unittest.TestCase):
    def compare(self, fn, *args, steps=STEPS):
        """fn's steps with replay off and on: the same bits everywhere, every node of a later step
        replayed into a run; returns the replayed steps' results."""
        off = run(False, fn, *args, steps=steps)
        on = run(True, fn, *args, steps=steps)
        for i, ((_, v_off, c_off), (_, v_on, c_on)) in enumerate(zip(off, on)):
            self.assertEqual(c_off["replay_hits"], 0)
            self.assertEqual(len(v_on), len(v_off))
            for d, (x, w) in enumerate(zip(v_on, v_off)):
                self.assertTrue(torch.equal(bits(x), bits(w)), f"step {i}, piece {d}")
            # Replayed nodes are images of runs as lowered ones are: as many, in as many runs.
            self.assertEqual(c_on["bcast_nodes"], c_off["bcast_nodes"], f"step {i}")
            self.assertEqual(c_on["step_runs"], c_off["step_runs"], f"step {i}")
            if i:  # every node the first step captured is replayed
                self.assertEqual(c_on["replay_misses"], 0, f"step {i}")
                first = on[0][2]
                self.assertEqual(c_on["replay_hits"], first["replay_hits"] + first["replay_misses"], f"step {i}")
        self.assertGreater(on[0][2]["bcast_nodes"], 0)
        return [ys for ys, _, _ in on]

    def test_meshes(self):
        # 1-D even and uneven (float32, bfloat16), 2-D; every layout, Partial ones genuine.
        cases = [(CPU2, (4, 6), placements_1d), (CPU3, (5, 7), placements_1d), (CPU2x2, (4, 6), placements_2d)]
        for mesh, shape, layouts in cases:
            for p in layouts(2):
                pl = list(p) if isinstance(p, (list, tuple)) else [p]
                for dt in (torch.float32, torch.bfloat16) if mesh is not CPU2x2 else (torch.float32,):
                    fn, ref, ta, tb, a, b = chain_case(mesh, pl, shape, dt)
                    with self.subTest(mesh=mesh, placements=pl, dtype=dt):
                        for (y,) in self.compare(fn, a, b):
                            assert_equal_everywhere(self, y, ref(ta, tb))

    def test_fresh_inputs_each_step(self):
        # Each step reads values made for it (new groups), as a decode step reads the last one's.
        ta, tb = int_valued(6, 4, seed=1), int_valued(6, 4, seed=2)
        a = dtorch.from_torch(ta, CPU3, [Shard(0)])
        b = dtorch.from_torch(tb, CPU3, [Shard(0)])
        state = {}

        def fn(a, b):
            x = state.get("x", a)
            state["x"] = ((x * 0.5) + b) - 1.0
            return state["x"]

        got = []
        for on in (False, True):
            state.clear()
            got.append(run(on, fn, a, b, steps=4))
        want = ta
        for i in range(4):
            want = want * 0.5 + tb - 1.0
            for k, label in enumerate(("off", "on")):
                ys, values, c = got[k][i]
                assert_equal_everywhere(self, ys[0], want)
                if k and i >= 2:  # step 1 reads the last step's output, not `a`: another signature
                    self.assertEqual((c["replay_hits"], c["replay_misses"]), (3, 0), f"step {i}")
            for x, w in zip(got[1][i][1], got[0][i][1]):
                self.assertTrue(torch.equal(bits(x), bits(w)), f"step {i}")


class TestFallsBack(unittest.TestCase):
    """A node that differs from the captured one in the middle of a repeated step is lowered (a
    miss), the others replayed; every value torch's."""

    def setUp(self):
        self.ta = int_valued(6, 4, seed=5)
        self.tb = int_valued(6, 4, seed=6)

    def steps(self, variants, mesh_of_b=None):
        """The step `((a * 2) + s) - b` for each (a, scalar) of variants, after two plain steps."""
        b = dtorch.from_torch(self.tb, CPU3, [Shard(0)])
        out = []
        with replay(True), bcast(True), bgroup(True), step(True):
            settle()
            for a, ta, s in variants:
                same = ta.shape == self.tb.shape and ta.dtype == self.tb.dtype and \
                    a.device_mesh.ndim == 1 and a.device_mesh.size() == 3 and a.placements == (Shard(0),)
                bb = b if same else dtorch.from_torch(self.tb.to(ta.dtype)[:, :ta.shape[1]].contiguous(), a.device_mesh,
                                      list(a.placements))
                settle()
                s0 = stats()
                with held_controller():
                    y = ((a * 2.0) + s) - bb
                assert_equal_everywhere(self, y, (ta * 2.0 + s) - self.tb.to(ta.dtype)[:, :ta.shape[1]])
                out.append(delta(stats(), s0))  # after the read: the round's counts are in
        return out

    def test_each_change(self):
        base = (dtorch.from_torch(self.ta, CPU3, [Shard(0)]), self.ta, 1.5)
        changes = {
            "shape": (dtorch.from_torch(self.ta[:, :2].contiguous(), CPU3, [Shard(0)]), self.ta[:, :2], 1.5),
            "dtype": (dtorch.from_torch(self.ta.to(torch.bfloat16), CPU3, [Shard(0)]),
                      self.ta.to(torch.bfloat16), 1.5),
            "placement": (dtorch.from_torch(self.ta, CPU3, [Replicate()]), self.ta, 1.5),
            "scalar": (base[0], self.ta, 2.5),
            "mesh": (dtorch.from_torch(self.ta, CPU2, [Shard(0)]), self.ta, 1.5),
        }
        for name, changed in changes.items():
            with self.subTest(change=name):
                c = self.steps([base, base, changed, base])
                self.assertEqual(c[1]["replay_misses"], 0)
                self.assertEqual(c[1]["replay_hits"], 3)
                # The scalar changes one node only; the others change every node's signature.
                self.assertGreaterEqual(c[2]["replay_misses"], 1)
                self.assertEqual(c[2]["replay_hits"] + c[2]["replay_misses"], 3)
                self.assertEqual(c[3]["replay_hits"], 3)


class TestSwitchesOutsideTheSignature(unittest.TestCase):
    def test_shared_records_off_after_the_capture(self):
        """A template that is a run image is not replayed once shared records are off: those nodes
        are lowered one record per device (a miss each), with torch's values."""
        ta, tb = int_valued(6, 4, seed=3), int_valued(6, 4, seed=4)
        a = dtorch.from_torch(ta, CPU3, [Shard(0)])
        b = dtorch.from_torch(tb, CPU3, [Shard(0)])
        with replay(True), bgroup(True), step(True):
            for on in (True, True, False, True):
                with bcast(on):
                    settle()
                    s0 = stats()
                    with held_controller():
                        y = (a * 0.5 + b) - 2.0
                    assert_equal_everywhere(self, y, (ta * 0.5 + tb) - 2.0)
                    c = delta(stats(), s0)
                    if on:
                        self.assertEqual(c["bcast_nodes"], 3)
                    else:
                        self.assertEqual((c["bcast_nodes"], c["replay_hits"]), (0, 0))


class TestOneBlobTwoGroups(unittest.TestCase):
    def check_not_served(self, x, alias, z, tx, tz):
        """With shared records off (one record per device, each a per-device template): x * alias
        (x's blobs twice) twice, then x * z, which must be lowered (a miss), not served by it."""
        with bcast(False):
            for _ in range(2):
                settle()
                with held_controller():
                    y = x * alias + 1.5
                assert_equal_everywhere(self, y, tx * tx + 1.5)
            settle()
            s0 = stats()
            with held_controller():
                y = x * z + 1.5
            assert_equal_everywhere(self, y, tx * tz + 1.5)
            self.assertGreaterEqual(delta(stats(), s0)["replay_misses"], 1)

    def test_adopted_groups_sharing_blobs(self):
        """x and a view of it made one record per device hold the same blobs; a run image reading
        both adopts each into a group of its own. A per-device template of x * v (one blob twice) must
        not serve x * z, whose group holds other blobs."""
        for together, width in ((True, 4), (False, 3)):
            # together: the run image reads x and v in one kernel (the signature's template then is
            # that image); else each alone, so the per-device x * v below is the template. Widths
            # no other test uses.
            with self.subTest(together=together):
                tx, tz = int_valued(6, width, seed=7), int_valued(6, width, seed=8)
                with replay(True), bgroup(True), step(True):
                    with bcast(False):
                        x = dtorch.from_torch(tx, CPU2, [Shard(0)])
                        v = x.view(6, width)  # per device: the same blob as x's
                        z = dtorch.from_torch(tz, CPU2, [Shard(0)])
                    with bcast(True):
                        settle()
                        if together:
                            assert_equal_everywhere(self, (x * v) + (z * 1.0), tx * tx + tz)  # groups adopted
                        else:
                            assert_equal_everywhere(self, (x * 1.0 + v * 1.0) + (z * 1.0), tx + tx + tz)
                        settle()
                    self.check_not_served(x, v, z, tx, tz)

    def test_own_group_and_a_view_of_it(self):
        """x made by a run (its group's own members) and a view of it made one record per device,
        adopted when a run reads it or not: either way the view holds x's members, so it is not
        loose (replay_sig.c's short form for blobs that share nothing with own groups). A per-device
        template of x * v must not serve x * z (z's blobs its own). Widths no other test uses, so
        no other template answers."""
        for adopt, width in ((True, 5), (False, 7)):
            with self.subTest(adopted=adopt):
                tx, tz = int_valued(6, width, seed=11), int_valued(6, width, seed=12)
                with replay(True), bgroup(True), step(True):
                    with bcast(True):
                        x = dtorch.from_torch(tx, CPU2, [Shard(0)]) * 1.0
                        settle()  # lowered in a round that takes shared records
                    with bcast(False):
                        v = x.view(6, width)  # per device: x's members
                        z = dtorch.from_torch(tz, CPU2, [Shard(0)])
                    if adopt:
                        with bcast(True):
                            settle()
                            assert_equal_everywhere(self, (v * 1.0) + (z * 1.0), tx + tz)  # runs adopt v, z
                            settle()
                    self.check_not_served(x, v, z, tx, tz)

    def test_loose_groups_replayed(self):
        """A run image reading a value made per device (adopted: a loose group, as a decode's weights)
        after one a run made is replayed on later steps (hits, no misses) with torch's values; another
        loose group in its place is the same signature, and served with its own blobs."""
        tx, tw, tu = int_valued(6, 4, seed=13), int_valued(6, 4, seed=14), int_valued(6, 4, seed=15)
        with replay(True), bgroup(True), step(True):
            with bcast(False):
                w = dtorch.from_torch(tw, CPU2, [Shard(0)])
                u = dtorch.from_torch(tu, CPU2, [Shard(0)])
            with bcast(True):
                x = dtorch.from_torch(tx, CPU2, [Shard(0)]) * 1.0
                for i, (m, tm) in enumerate([(w, tw), (w, tw), (u, tu), (w, tw)]):
                    settle()
                    s0 = stats()
                    with held_controller():
                        y = (x + 1.0) * m
                    assert_equal_everywhere(self, y, (tx + 1.0) * tm)
                    if i:
                        c = delta(stats(), s0)
                        self.assertEqual((c["replay_hits"], c["replay_misses"]), (2, 0))

    def test_one_group_under_two_values(self):
        """y, a redistribution of x to its own layout, is another value holding x's group (both
        made by runs); a per-device template of x * y (one blob twice) must not serve x * z."""
        tx, tz = int_valued(6, 4, seed=9), int_valued(6, 4, seed=10)
        with replay(True), bgroup(True), step(True):
            with bcast(True):
                x = dtorch.from_torch(tx, CPU2, [Shard(0)]) * 1.0
                z = dtorch.from_torch(tz, CPU2, [Shard(0)]) * 1.0
                y = x.redistribute(CPU2, [Shard(0)])
                self.assertIsNot(y, x)
                settle()
            self.check_not_served(x, y, z, tx, tz)


if __name__ == "__main__":
    unittest.main()
