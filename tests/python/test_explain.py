"""dtorch.explain(): the communication each user source line caused.

Each case runs ops inside ``with dtorch.explain() as e:`` and checks the records against what the
placements imply: the collective, the mesh dim and its name, the count, and the bytes per device
(computed here from the shapes: the largest input one device contributes to each collective,
summed over them; for moves between meshes, the most one device receives). The values are checked
against torch as well, so a recorded collective is one that produced the right result. Explicit
redistributes (all-gather, all-reduce from a genuine Partial, reduce-scatter, all-to-all),
Shard+Replicate broadcasting (no communication: the Replicate side is sliced locally), a sum over
a sharded dim (Partial, then the all-reduce where it is made Replicate), amax/max over a sharded
dim (all-gathers), cat along a sharded dim, Ulysses and ring attention, and a move between meshes.
Nothing is recorded outside the ``with``; ``str(e)`` is the table; DTORCH_EXPLAIN=1 prints it at
exit of a subprocess.
"""

import inspect
import os
import subprocess
import sys
import unittest

import torch
import torch.nn.functional as TF

import dtorch
import dtorch.nn.functional as F
from dtorch import Partial, Replicate, SdpaOption, Shard

from helpers import CPU2, CPU2x2, assert_close_everywhere, assert_tensor_equal, genuine_partial, int_valued, randn

F32 = 4  # bytes of a float32


def here():
    """The caller's line number."""
    return inspect.currentframe().f_back.f_lineno


def rec(e, **want):
    """The records of ``e`` (as dicts of the named fields) for comparison."""
    return [{k: getattr(r, k) for k in want} for r in e.records]


class TestExplicit(unittest.TestCase):
    def test_all_gather_named_dim(self):
        t = int_valued(8, 6)
        x = dtorch.from_torch(t, device_mesh=CPU2x2, placements=[Shard(0), Shard(1)])
        with dtorch.explain() as e:
            line = here() + 1
            y = x.redistribute(placements=[Replicate(), Shard(1)])
        self.assertEqual(len(e.records), 1)
        r = e.records[0]
        self.assertEqual((r.file, r.line), (__file__, line))
        self.assertEqual((r.op, r.collective, r.mesh_dim, r.mesh_dim_name, r.count),
                         ("redistribute", "all_gather", 0, "dp", 1))
        self.assertEqual(r.bytes, (8 // 2) * (6 // 2) * F32)  # each device's (4, 3) block
        assert_close_everywhere(self, y, t)

    def test_groups_count_once_and_bytes_are_the_largest(self):
        # All-gather along "tp" runs in both "dp" groups: dp row 0 holds rows 0-1, row 1 holds row 2,
        # so the blocks are (2, 2) in one group and (1, 2) in the other. One collective per device;
        # the bytes are the larger block's.
        t = int_valued(3, 4, seed=9)
        x = dtorch.from_torch(t, device_mesh=CPU2x2, placements=[Shard(0), Shard(1)])
        with dtorch.explain() as e:
            y = x.redistribute(placements=[Shard(0), Replicate()])
        self.assertEqual(rec(e, collective=0, mesh_dim=0, mesh_dim_name=0, count=0, bytes=0),
                         [dict(collective="all_gather", mesh_dim=1, mesh_dim_name="tp", count=1, bytes=2 * 2 * F32)])
        assert_close_everywhere(self, y, t)

    def test_all_reduce_and_reduce_scatter_of_genuine_partials(self):
        t = int_valued(4, 6, seed=1)
        p = genuine_partial(t, CPU2, [Partial()])
        with dtorch.explain() as e:
            l1 = here() + 1
            r = p.redistribute(placements=[Replicate()])
            l2 = here() + 1
            s = p.redistribute(placements=[Shard(1)])
        self.assertEqual(rec(e, line=0, collective=0, mesh_dim=0, mesh_dim_name=0, count=0, bytes=0), [
            dict(line=l1, collective="all_reduce", mesh_dim=0, mesh_dim_name=None, count=1, bytes=4 * 6 * F32),
            dict(line=l2, collective="reduce_scatter", mesh_dim=0, mesh_dim_name=None, count=1, bytes=4 * 6 * F32),
        ])
        assert_close_everywhere(self, r, t)
        assert_close_everywhere(self, s, t)

    def test_all_to_all_uneven(self):
        t = int_valued(5, 4, seed=2)
        x = dtorch.from_torch(t, device_mesh=CPU2, placements=[Shard(0)])
        with dtorch.explain() as e:
            y = x.redistribute(placements=[Shard(1)])
        self.assertEqual(rec(e, collective=0, count=0, bytes=0),
                         [dict(collective="all_to_all", count=1, bytes=3 * 4 * F32)])  # rows 3 + 2: the larger
        assert_tensor_equal(self, y, t)

    def test_nothing_outside_the_with(self):
        x = dtorch.from_torch(int_valued(4, 2), device_mesh=CPU2, placements=[Shard(0)])
        before = x.redistribute(placements=[Replicate()])
        with dtorch.explain() as e:
            pass
        after = x.redistribute(placements=[Replicate()])
        self.assertEqual(e.records, [])
        self.assertIn("no communication", str(e))
        with dtorch.explain() as e2:
            line = here() + 1
            inside = x.redistribute(placements=[Replicate()])
        after.to_torch()
        self.assertEqual([(r.line, r.count) for r in e2.records], [(line, 1)])
        assert_tensor_equal(self, before, inside)

    def test_a_threads_graph_collected_inside(self):
        # Another thread's default graph is collected when the thread ends, inside the with: its
        # records are handed over first.
        import threading

        t = int_valued(4, 2)
        got = {}

        def other():
            x = dtorch.from_torch(t, device_mesh=CPU2, placements=[Shard(0)])
            got["line"] = here() + 1
            got["v"] = x.redistribute(placements=[Replicate()]).to_torch()

        with dtorch.explain() as e:
            th = threading.Thread(target=other)
            th.start()
            th.join()
            import gc

            gc.collect()
        self.assertEqual([(r.line, r.collective, r.bytes) for r in e.records], [(got["line"], "all_gather", 2 * 2 * F32)])
        assert_tensor_equal(self, got["v"], t)

    def test_nested_and_table(self):
        x = dtorch.from_torch(int_valued(4, 2), device_mesh=CPU2x2, placements=[Shard(0), Replicate()])
        with dtorch.explain() as outer:
            l1 = here() + 1
            a = x.redistribute(placements=[Replicate(), Replicate()])
            with dtorch.explain() as inner:
                l2 = here() + 1
                b = x.redistribute(placements=[Shard(1), Replicate()])
        self.assertEqual([r.line for r in outer.records], [l1, l2])
        self.assertEqual([(r.line, r.collective) for r in inner.records], [(l2, "all_to_all")])
        text = str(outer)
        self.assertIn(f"test_explain.py:{l1}", text)
        self.assertIn("all_gather", text)
        self.assertIn("0 (dp)", text)
        self.assertIn("bytes/device", text)
        assert_tensor_equal(self, a, b)


class TestImplicit(unittest.TestCase):
    def test_shard_replicate_broadcast_is_local(self):
        a0, b0 = int_valued(4, 3), int_valued(3, seed=3)
        a = dtorch.from_torch(a0, device_mesh=CPU2, placements=[Shard(0)])
        b = dtorch.from_torch(b0, device_mesh=CPU2, placements=[Replicate()])
        with dtorch.explain() as e:
            c = a + b
        self.assertEqual(e.records, [])
        assert_tensor_equal(self, c, a0 + b0)

    def test_sum_over_sharded_dim(self):
        t = int_valued(4, 3, seed=4)
        x = dtorch.from_torch(t, device_mesh=CPU2, placements=[Shard(0)])
        with dtorch.explain() as e:
            s = x.sum(dim=0)  # a Partial: no communication yet
            line = here() + 1
            r = s.redistribute(placements=[Replicate()])
        self.assertEqual(list(s.placements), [Partial()])
        self.assertEqual([(r_.line, r_.collective, r_.count, r_.bytes) for r_ in e.records],
                         [(line, "all_reduce", 1, 3 * F32)])
        assert_close_everywhere(self, r, t.sum(dim=0))

    def test_amax_and_max_over_sharded_dim(self):
        t = int_valued(4, 3, seed=5)
        x = dtorch.from_torch(t, device_mesh=CPU2, placements=[Shard(0)])
        with dtorch.explain() as e:
            l1 = here() + 1
            m = x.amax(dim=0)
            l2 = here() + 1
            v, i = x.max(dim=0)
        # Each device reduces its rows to one (keepdim) and the (1, 3) pieces are all-gathered.
        # max(dim) is two nodes: the values (their pieces gathered) and the indices (the values'
        # pieces and the int64 global indices' gathered, to pick the winner).
        self.assertEqual([(r.line, r.op, r.collective, r.count, r.bytes) for r in e.records],
                         [(l1, "amax", "all_gather", 1, 3 * F32), (l2, "max", "all_gather", 3, 3 * F32 * 2 + 3 * 8)])
        assert_tensor_equal(self, m, t.amax(dim=0))
        want_v, want_i = t.max(dim=0)
        assert_tensor_equal(self, v, want_v)
        assert_tensor_equal(self, i, want_i)

    def test_cat_along_sharded_dim(self):
        a0, b0 = int_valued(4, 3, seed=6), int_valued(6, 3, seed=7)
        a = dtorch.from_torch(a0, device_mesh=CPU2, placements=[Shard(0)])
        b = dtorch.from_torch(b0, device_mesh=CPU2, placements=[Shard(0)])
        with dtorch.explain() as e:
            c = dtorch.cat([a, b], dim=0)
            line = here() + 1
            f = c.flip(1)
        # The cat is a local cat on each device (a segmented dim): no communication. flip does not
        # take a segmented input, so it is first made regular: each device all-gathers its
        # (2 + 3, 3) block of the segments.
        self.assertEqual([(r.line, r.collective, r.count, r.bytes) for r in e.records],
                         [(line, "all_gather", 1, (2 + 3) * 3 * F32)])
        assert_tensor_equal(self, c, torch.cat([a0, b0], dim=0))
        assert_tensor_equal(self, f, torch.cat([a0, b0], dim=0).flip(1))

    def _qkv(self, mesh, shape):
        q0, k0, v0 = (randn(*shape, seed=s) for s in (1, 2, 3))
        return [q0, k0, v0], [dtorch.from_torch(t, device_mesh=mesh, placements=[Shard(2)]) for t in (q0, k0, v0)]

    def test_ulysses(self):
        mesh = dtorch.DeviceMesh("cpu", [0, 1], mesh_dim_names=("cp",))
        (q0, k0, v0), (q, k, v) = self._qkv(mesh, (1, 2, 4, 3))
        with dtorch.explain() as e:
            line = here() + 1
            o = F.scaled_dot_product_attention(q, k, v, sdpa_option=SdpaOption(ulysess_cp_dim="cp", ring_cp_dim=None))
        # q, k and v from sequence to heads, the output back: four all-to-alls of (1, 2, 2, 3) and
        # (1, 1, 4, 3) blocks.
        self.assertEqual([(r.line, r.collective, r.mesh_dim_name, r.count, r.bytes) for r in e.records],
                         [(line, "all_to_all", "cp", 4, 4 * (1 * 2 * 2 * 3) * F32)])
        assert_close_everywhere(self, o, TF.scaled_dot_product_attention(q0, k0, v0), atol=1e-5, rtol=1e-5)

    def test_ring(self):
        mesh = dtorch.DeviceMesh("cpu", [0, 1, 2], mesh_dim_names=("cp",))
        (q0, k0, v0), (q, k, v) = self._qkv(mesh, (1, 2, 6, 3))
        with dtorch.explain() as e:
            line = here() + 1
            o = F.scaled_dot_product_attention(q, k, v, sdpa_option=SdpaOption(ulysess_cp_dim=None, ring_cp_dim="cp"))
        # Three devices: two ring steps, each passing a (1, 2, 2, 3 + 3) block of k and v.
        self.assertEqual([(r.line, r.op, r.collective, r.mesh_dim, r.count, r.bytes) for r in e.records],
                         [(line, "scaled_dot_product_attention", "shift", 0, 2, 2 * (1 * 2 * 2 * 6) * F32)])
        assert_close_everywhere(self, o, TF.scaled_dot_product_attention(q0, k0, v0), atol=1e-5, rtol=1e-5)

    def test_between_meshes(self):
        t = int_valued(4, 3, seed=8)
        src = dtorch.DeviceMesh("cpu", [0, 1])
        dst = dtorch.DeviceMesh("cpu", [2, 3])
        x = dtorch.from_torch(t, device_mesh=src, placements=[Shard(0)])
        with dtorch.explain() as e:
            y = x.redistribute(dst, [Shard(0)])
        self.assertEqual([(r.collective, r.mesh_dim, r.count, r.bytes) for r in e.records],
                         [("send_recv", None, 1, 2 * 3 * F32)])
        assert_tensor_equal(self, y, t)


def with_explain_env(code, value="1"):
    """Runs ``code`` in a fresh interpreter with DTORCH_EXPLAIN=value; its CompletedProcess."""
    env = dict(os.environ, DTORCH_EXPLAIN=value)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)


class TestEnvironment(unittest.TestCase):
    def test_dtorch_explain_prints_at_exit(self):
        code = (
            "import dtorch\n"
            "m = dtorch.DeviceMesh('cpu', [0, 1], mesh_dim_names=('dp',))\n"
            "x = dtorch.ones(4, 3, device_mesh=m, placements=[dtorch.Shard(0)])\n"
            "y = x.redistribute(placements=[dtorch.Replicate()])\n"
        )
        out = with_explain_env(code)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("dtorch.explain: 1 collective(s)", out.stderr)
        self.assertIn("<string>:4", out.stderr)
        self.assertIn("all_gather", out.stderr)
        self.assertIn(str(2 * 3 * F32), out.stderr)
        out = with_explain_env(code, "0")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertNotIn("dtorch.explain", out.stderr)

    def test_a_block_after_a_full_buffer_under_dtorch_explain(self):
        """DTORCH_EXPLAIN=1 keeps recording on for the whole run: a block opened after more collectives
        than the record buffer holds (2^18) still sees its own (it showed "no communication")."""
        code = (
            "import torch, dtorch\n"
            "m = dtorch.DeviceMesh('cpu', [0, 1], mesh_dim_names=('tp',))\n"
            "p = dtorch.ones(1, device_mesh=m, placements=[dtorch.Partial()])\n"
            "for _ in range(2 ** 18 + 100):\n"
            "    p.redistribute(placements=[dtorch.Replicate()])\n"
            "x, w1, w2 = torch.randn(4, 8), torch.randn(16, 8), torch.randn(8, 16)\n"
            "dx = dtorch.from_torch(x, m, [dtorch.Replicate()])\n"
            "d1 = dtorch.from_torch(w1, m, [dtorch.Shard(0)])\n"  # column parallel
            "d2 = dtorch.from_torch(w2, m, [dtorch.Shard(1)])\n"  # row parallel: a Partial out
            "with dtorch.explain() as e:\n"
            "    y = (dx @ d1.t() @ d2.t()).redistribute(placements=[dtorch.Replicate()])\n"
            "print([(r.collective, r.mesh_dim_name, r.count, r.bytes) for r in e.records], e.dropped)\n"
            "print(torch.allclose(y.to_torch(), x @ w1.t() @ w2.t(), atol=1e-5))\n"
        )
        out = with_explain_env(code)
        self.assertEqual(out.returncode, 0, out.stderr)
        # The pair's only communication: the all-reduce of the row-parallel Partial, [4, 8] per device.
        self.assertEqual(out.stdout.split("\n")[:2], [f"[('all_reduce', 'tp', 1, {4 * 8 * F32})] 0", "True"])
        # The whole run: the 2^18 the buffer held (taken when the block opened), the 100 beyond them
        # dropped, then the block's own.
        self.assertIn(f"dtorch.explain: {2 ** 18 + 1} collective(s)", out.stderr)
        self.assertIn("(100 collective(s) not recorded: the record buffer was full)", out.stderr)


class TestDroppedResults(unittest.TestCase):
    """A forward whose result nobody keeps is recorded as if it were kept (dead-code elimination is off
    while explain records)."""

    def test_linear_pair_result_discarded(self):
        x, w1, w2 = randn(4, 8), randn(16, 8, seed=1), randn(8, 16, seed=2)
        dx = dtorch.from_torch(x, CPU2, [Replicate()])
        d1, d2 = dtorch.from_torch(w1, CPU2, [Shard(0)]), dtorch.from_torch(w2, CPU2, [Shard(1)])
        with dtorch.explain() as e:
            line = here() + 1
            (dx @ d1.t() @ d2.t()).redistribute(placements=[Replicate()])
        # Column- then row-parallel: one all-reduce of the [4, 8] Partial on the mesh's only dim.
        self.assertEqual([(r.line, r.collective, r.mesh_dim, r.count, r.bytes) for r in e.records],
                         [(line, "all_reduce", 0, 1, 4 * 8 * F32)])
        with dtorch.explain() as e:  # the kept form records the same
            y = (dx @ d1.t() @ d2.t()).redistribute(placements=[Replicate()])
        self.assertEqual([(r.collective, r.count, r.bytes) for r in e.records], [("all_reduce", 1, 4 * 8 * F32)])
        assert_close_everywhere(self, y, x @ w1.t() @ w2.t())

    def test_model_forward_discarded(self):
        from dtorch.applications.llama import LlamaConfig, LlamaForCausalLM
        layers, hidden, vocab = 2, 32, 64
        cfg = LlamaConfig(hidden_size=hidden, intermediate_size=48, num_hidden_layers=layers, num_attention_heads=4,
                          num_key_value_heads=2, vocab_size=vocab)
        mesh = dtorch.DeviceMesh("cpu", [0, 1], mesh_dim_names=("tp",))
        dtorch.manual_seed(0)
        model = LlamaForCausalLM(cfg, device_mesh=mesh)
        ids = torch.tensor([[3, 17, 9, 5]])
        with dtorch.explain() as e:
            model(ids)
        got = sorted((r.collective, r.mesh_dim_name, r.count, r.bytes) for r in e.records)
        # tp2 Megatron layout: the vocab-sharded embedding's Partial, each layer's o_proj and down_proj
        # (row parallel) all-reduce a [1, 4, hidden] activation; the vocab-sharded logits are gathered.
        act = 4 * hidden * F32
        self.assertEqual(got, sorted([("all_reduce", "tp", 2 * layers + 1, (2 * layers + 1) * act),
                                      ("all_gather", "tp", 1, 4 * (vocab // 2) * F32)]))


if __name__ == "__main__":
    unittest.main()
