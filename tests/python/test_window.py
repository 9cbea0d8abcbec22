"""The controller's window passes against eager torch: dead-node elimination (dce) and buffer
reuse (reuse). Each live result is compared bit for bit with torch.equal; the counts come from
dtorch.test.probes.graph_stats, with the controller held (held_controller) so that what a test
records lands in one window whatever the scheduling."""
import unittest

import torch

import dtorch
from dtorch import DeviceMesh, Replicate, Shard
from dtorch.test.probes import graph_stats, held_controller

CPU1 = DeviceMesh("cpu", [0])
CPU2 = DeviceMesh("cpu", [0, 1])
MESHES = [(CPU1, [Replicate()]), (CPU2, [Shard(0)]), (CPU2, [Replicate()])]


def mixed_chain(x):
    x = x.exp()
    x = x.sin()
    x = x.abs()
    x = x.sqrt()
    x = x * 3
    x = x + 1
    x = x.tanh()
    x = x - 0.5
    return x


def stats_delta(before):
    now = graph_stats()
    return {k: now[k] - before[k] for k in ("nodes_eliminated", "kernels_in_place")}


class TestDce(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.t = torch.randn(8, 6)

    def test_dropped_unread_values_are_never_lowered(self):
        for mesh, pl in MESHES:
            with self.subTest(mesh=mesh, placements=pl):
                x = dtorch.from_torch(self.t, mesh, pl)
                dtorch.synchronize()
                before = graph_stats()
                with held_controller():
                    y = x.exp()
                    z = y.sin()
                    del y, z  # the chain x.exp().sin(), both dropped unread
                    w = x.cos()
                    u = (x * 2).add_(1)  # an in-place Python form: a new value, rebound
                self.assertTrue(torch.equal(w.to_torch(), self.t.cos()))
                self.assertTrue(torch.equal(u.to_torch(), (self.t * 2).add_(1)))
                self.assertEqual(stats_delta(before)["nodes_eliminated"], 2)

    def test_dead_chain_in_a_loop(self):
        x = dtorch.from_torch(self.t, CPU2, [Shard(0)])
        acc, want = dtorch.from_torch(self.t, CPU2, [Shard(0)]), self.t.clone()
        dtorch.synchronize()
        before = graph_stats()
        with held_controller():
            for _ in range(20):
                a = x.exp()
                b = a * acc  # reads a live value: still dead, it is dropped unread
                del a, b
                acc = acc * 0.5 + x
                want = want * 0.5 + self.t
        self.assertTrue(torch.equal(acc.to_torch(), want))
        self.assertEqual(stats_delta(before)["nodes_eliminated"], 40)

    def test_reads_and_kept_values_stay(self):
        x = dtorch.from_torch(self.t)
        dtorch.synchronize()
        before = graph_stats()
        with held_controller():
            y = x.exp()
            f = y.to_torch_future() if hasattr(y, "to_torch_future") else None
            z = y * 2
            del y
        self.assertTrue(torch.equal(z.to_torch(), self.t.exp() * 2))
        if f is not None:
            self.assertTrue(torch.equal(f.result(), self.t.exp()))
        self.assertEqual(stats_delta(before)["nodes_eliminated"], 0)


class TestReuse(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(1)
        self.t = torch.rand(64, 33)

    def test_mixed_chain_is_bit_exact_and_in_place(self):
        for mesh, pl in MESHES:
            for held in (True, False):
                with self.subTest(mesh=mesh, placements=pl, held=held):
                    x = dtorch.from_torch(self.t, mesh, pl)
                    dtorch.synchronize()
                    before = graph_stats()
                    if held:
                        with held_controller():
                            y = mixed_chain(x)
                    else:
                        y = mixed_chain(x)
                    got = y.to_torch()
                    self.assertTrue(torch.equal(got, mixed_chain(self.t)))
                    self.assertTrue(torch.equal(x.to_torch(), self.t))  # the input is kept: never written
                    if held:
                        # A read of a Replicate value waits for one device's copy only: wait for all.
                        dtorch.synchronize()
                        # Seven of the eight steps read a dropped value; each runs on every device.
                        self.assertEqual(stats_delta(before)["kernels_in_place"], 7 * mesh.size())

    def test_kept_intermediate_view_and_later_read(self):
        for mesh, pl in MESHES:
            with self.subTest(mesh=mesh, placements=pl):
                x = dtorch.from_torch(self.t, mesh, pl)
                dtorch.synchronize()
                with held_controller():
                    a = x.exp()
                    b = a.sin()  # a is kept by the test: not written over
                    v = b.reshape(-1)  # a view of b, then b dropped
                    s = b[:, 1:]  # a slice view
                    del b
                    c = v.abs()  # reads the view's storage: must not write into it
                    c = c * 2
                    late = a.sqrt()  # a read of a later
                    d = s + 1
                ta = self.t.exp()
                tb = ta.sin()
                self.assertTrue(torch.equal(a.to_torch(), ta))
                self.assertTrue(torch.equal(v.to_torch(), tb.reshape(-1)))
                self.assertTrue(torch.equal(s.to_torch(), tb[:, 1:]))
                self.assertTrue(torch.equal(c.to_torch(), tb.reshape(-1).abs() * 2))
                self.assertTrue(torch.equal(late.to_torch(), ta.sqrt()))
                self.assertTrue(torch.equal(d.to_torch(), tb[:, 1:] + 1))

    def test_other_elementwise_kinds(self):
        t = self.t - 0.5
        m = t > 0
        for mesh, pl in MESHES[:2]:
            with self.subTest(mesh=mesh, placements=pl):
                x = dtorch.from_torch(t, mesh, pl)
                mk = dtorch.from_torch(m, mesh, pl)
                with held_controller():
                    y = dtorch.nn.functional.gelu(x * 1.5)
                    y = dtorch.nn.functional.silu(y)
                    y = y.clamp(-0.2, 0.3)
                    y = y.masked_fill(mk, 0.25)
                    y = y / x  # tensor-tensor: y's buffer
                    y = y.relu()
                want = torch.nn.functional.silu(torch.nn.functional.gelu(t * 1.5)).clamp(-0.2, 0.3)
                want = want.masked_fill(m, 0.25) / t
                self.assertTrue(torch.equal(y.to_torch(), want.relu()))


if __name__ == "__main__":
    unittest.main()
