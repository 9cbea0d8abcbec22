"""dtorch.compiled_op (issue 31, item 3): the original's fused ops (rotary embedding, SwiGLU gate,
adaLN modulation) on each device's local pieces, against the same eager torch code written here;
the default path bit-identical on one device, the torch.compile path (opt-in) allclose."""

import os
import unittest

import torch
import torch.nn.functional as F

import dtorch
from dtorch import Partial, Replicate, Shard
from dtorch.test.test_util import assert_replicas_equal, assert_tensor_allclose, assert_tensor_equal

from helpers import CPU1, CPU2, CPU2x2, CPU3

TESTED_OPS = []  # python-level fused ops on local_map's USER kernels, not registered operators


# ---- the references: eager torch as the models write it

def rotary_ref(x, cos, sin, interleaved):
    if interleaved:  # diffusers' apply_rotary_emb(use_real=True, use_real_unbind_dim=-1)
        x_real, x_imag = x.reshape(*x.shape[:-1], -1, 2).unbind(-1)
        x_rotated = torch.stack([-x_imag, x_real], dim=-1).flatten(3)
    else:  # Llama's rotate_half
        half = x.shape[-1] // 2
        x_rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x.float() * cos + x_rotated.float() * sin).to(x.dtype)


def swiglu_ref(x, w, b):
    h = F.linear(x, w, b)
    a, g = h.chunk(2, dim=-1)
    return F.silu(a) * g


def adaln_ref(x, scale, shift, w=None, b=None, eps=1e-6):
    return F.layer_norm(x, (x.shape[-1],), w, b, eps) * (1 + scale) + shift


def inputs(dtype, b=2, h=2, s=6, d=8):
    x = torch.randn(b, h, s, d).to(dtype)
    ang = torch.randn(s, d)
    return x, ang.cos(), ang.sin()


def put(t, mesh, pl):
    return dtorch.from_torch(t, mesh, pl)


class TestCompiledOpEager(unittest.TestCase):
    def test_one_device_bit_identical(self):
        co = dtorch.compiled_op
        for dtype in (torch.float32, torch.bfloat16):
            for mesh in (None, CPU1):
                with self.subTest(dtype=dtype, mesh=mesh):
                    on = (lambda t: dtorch.from_torch(t, mesh)) if mesh else dtorch.from_torch
                    x, cos, sin = inputs(dtype)
                    for inter in (True, False):
                        y = co.apply_rotary_emb(on(x), on(cos), on(sin), interleaved=inter)
                        self.assertEqual((y.shape, y.dtype), (x.shape, dtype))
                        assert_tensor_equal(self, y, rotary_ref(x, cos, sin, inter))
                    t = torch.randn(3, 5, 8).to(dtype)
                    w, b = torch.randn(12, 8).to(dtype), torch.randn(12).to(dtype)
                    assert_tensor_equal(self, co.silu_linear_chunk(on(t), on(w), on(b)), swiglu_ref(t, w, b))
                    assert_tensor_equal(self, co.silu_linear_chunk(on(t), on(w)), swiglu_ref(t, w, None))
                    sc, sh = torch.randn(3, 1, 8).to(dtype), torch.randn(3, 1, 8).to(dtype)
                    lw, lb = torch.randn(8).to(dtype), torch.randn(8).to(dtype)
                    assert_tensor_equal(self, co.layer_norm_mul_add(on(t), on(sc), on(sh)), adaln_ref(t, sc, sh))
                    assert_tensor_equal(self, co.layer_norm_mul_add(on(t), on(sc), on(sh), on(lw), on(lb), eps=1e-5),
                                        adaln_ref(t, sc, sh, lw, lb, 1e-5))

    def test_meshes_every_replica(self):
        co = dtorch.compiled_op
        x, cos, sin = inputs(torch.float32, b=3, s=7)
        t = torch.randn(5, 7, 8)
        w, b = torch.randn(12, 8), torch.randn(12)
        sc, sh = torch.randn(5, 1, 8), torch.randn(5, 1, 8)
        # (mesh, x's placements, the tables' (cos/sin) placements, scale/shift placements for t)
        cases = [(CPU2, [Shard(0)], [Replicate()], [Shard(0)]),
                 (CPU3, [Shard(2)], [Shard(0)], [Replicate()]),      # uneven; sequence-sharded rotary
                 (CPU2, [Replicate()], [Replicate()], [Replicate()]),
                 (CPU2x2, [Shard(0), Shard(2)], [Replicate(), Shard(0)], [Shard(0), Replicate()]),
                 (CPU2x2, [Replicate(), Shard(1)], [Replicate(), Replicate()], [Replicate(), Replicate()])]
        for mesh, pl, tab, mod in cases:
            with self.subTest(mesh=mesh, placements=pl):
                R = [Replicate()] * mesh.ndim
                for inter in (True, False):
                    y = co.apply_rotary_emb(put(x, mesh, pl), put(cos, mesh, tab), put(sin, mesh, tab), inter)
                    self.assertEqual(y.placements, pl)
                    assert_tensor_allclose(self, y, rotary_ref(x, cos, sin, inter), rtol=1e-6, atol=1e-6)
                    assert_replicas_equal(self, y)
                tpl = [Shard(min(p.dim, 1)) if p.is_shard() else p for p in pl]  # t is 3-D
                y = co.silu_linear_chunk(put(t, mesh, tpl), put(w, mesh, R), put(b, mesh, R))
                self.assertEqual(y.placements, tpl)
                assert_tensor_allclose(self, y, swiglu_ref(t, w, b), rtol=1e-5, atol=1e-5)
                assert_replicas_equal(self, y)
                y = co.layer_norm_mul_add(put(t, mesh, tpl), put(sc, mesh, mod), put(sh, mesh, mod))
                assert_tensor_allclose(self, y, adaln_ref(t, sc, sh), rtol=1e-5, atol=1e-5)
                assert_replicas_equal(self, y)

    def test_refused_placements_raise_at_the_call(self):
        co = dtorch.compiled_op
        x, cos, sin = inputs(torch.float32)
        R = [Replicate()]
        with self.assertRaisesRegex(dtorch.PlacementError, "apply_rotary_emb: x is Partial"):
            co.apply_rotary_emb(dtorch.from_torch(x, CPU2, [Partial()]), put(cos, CPU2, R), put(sin, CPU2, R))
        with self.assertRaisesRegex(dtorch.PlacementError, "x is Shard\\(3\\).*last dim"):
            co.apply_rotary_emb(put(x, CPU2, [Shard(3)]), put(cos, CPU2, R), put(sin, CPU2, R))
        with self.assertRaisesRegex(dtorch.PlacementError, "cos is .* where x is .*must be Shard\\(0\\)"):
            co.apply_rotary_emb(put(x, CPU2, [Shard(2)]), put(cos, CPU2, R), put(sin, CPU2, [Shard(0)]))
        with self.assertRaisesRegex(dtorch.PlacementError, "sin .*must be Replicate"):
            co.apply_rotary_emb(put(x, CPU2, [Shard(0)]), put(cos, CPU2, R), put(sin, CPU2, [Shard(0)]))
        t = torch.randn(4, 8)
        with self.assertRaisesRegex(dtorch.PlacementError, "silu_linear_chunk: weight must be Replicate"):
            co.silu_linear_chunk(put(t, CPU2, [Shard(0)]), put(torch.randn(6, 8), CPU2, [Shard(0)]))
        with self.assertRaisesRegex(dtorch.PlacementError, "layer_norm_mul_add: x is Shard\\(1\\)"):
            co.layer_norm_mul_add(put(t, CPU2, [Shard(1)]), put(t, CPU2, [Shard(1)]), put(t, CPU2, [Shard(1)]))
        with self.assertRaisesRegex(dtorch.PlacementError, "scale is .*must be Shard\\(0\\)"):
            co.layer_norm_mul_add(put(t, CPU2, [Shard(0)]), put(t, CPU2, R), put(t, CPU2, [Shard(0)]))
        with self.assertRaisesRegex(TypeError, "execute_config must be a dtorch.ExecuteConfig"):
            co.silu_linear_chunk(put(t, CPU2, R), put(torch.randn(6, 8), CPU2, R), execute_config=True)
        with self.assertRaisesRegex(TypeError, "compile_fused_ops must be a bool"):
            dtorch.ExecuteConfig(compile_fused_ops=1)
        # nothing was enqueued: the runtime goes on
        y = co.silu_linear_chunk(put(t, CPU2, [Shard(0)]), put(torch.randn(6, 8), CPU2, R))
        self.assertEqual(tuple(y.shape), (4, 3))


@unittest.skipIf(os.environ.get("DTORCH_SKIP_COMPILE") == "1", "DTORCH_SKIP_COMPILE=1: torch.compile cases skipped")
class TestCompiledOpCompiled(unittest.TestCase):
    """SLOW: torch.compile (Inductor, C++ on CPU) on the worker threads, ONE compiled case per op at
    tiny shapes (tens of seconds each on a loaded machine, the first time; Inductor's disk cache helps
    later runs). On a 2-device mesh with even shards: each op compiles once and both workers run it."""

    def test_each_op_compiled_allclose(self):
        co = dtorch.compiled_op
        cfg = dtorch.ExecuteConfig(compile_fused_ops=True)
        before = len(co.compiled_kernels())
        R = [Replicate()]
        x, cos, sin = inputs(torch.float32, b=2, s=4, d=8)
        y = co.apply_rotary_emb(put(x, CPU2, [Shard(0)]), put(cos, CPU2, R), put(sin, CPU2, R), execute_config=cfg)
        assert_tensor_allclose(self, y, rotary_ref(x, cos, sin, True), rtol=1e-5, atol=1e-5)
        assert_replicas_equal(self, y)
        t, w, b = torch.randn(4, 3, 8), torch.randn(12, 8), torch.randn(12)
        y = co.silu_linear_chunk(put(t, CPU2, [Shard(0)]), put(w, CPU2, R), put(b, CPU2, R), execute_config=cfg)
        assert_tensor_allclose(self, y, swiglu_ref(t, w, b), rtol=1e-4, atol=1e-5)
        sc, sh = torch.randn(4, 1, 8), torch.randn(4, 1, 8)
        y = co.layer_norm_mul_add(put(t, CPU2, [Shard(0)]), put(sc, CPU2, [Shard(0)]), put(sh, CPU2, [Shard(0)]),
                                  execute_config=cfg)
        assert_tensor_allclose(self, y, adaln_ref(t, sc, sh), rtol=1e-4, atol=1e-5)  # the reads waited
        self.assertEqual(len(co.compiled_kernels()) - before, 3)  # one per op: both workers share it

    def test_uneven_and_2d_meshes_every_replica(self):
        # The compiled kernels on 5 rows over 3 devices (local 2, 2 and 1: two keys per op, the 2-row
        # one shared with the test above) and on a 2x2 mesh (batch on dp, replicas on tp).
        co = dtorch.compiled_op
        cfg = dtorch.ExecuteConfig(compile_fused_ops=True)
        x, cos, sin = inputs(torch.float32, b=5, s=4, d=8)
        t, w, b = torch.randn(5, 3, 8), torch.randn(12, 8), torch.randn(12)
        sc, sh = torch.randn(5, 1, 8), torch.randn(5, 1, 8)
        for mesh, rows in ((CPU3, [Shard(0)]), (CPU2x2, [Shard(0), Replicate()])):
            with self.subTest(mesh=mesh):
                R = [Replicate()] * mesh.ndim
                y = co.apply_rotary_emb(put(x, mesh, rows), put(cos, mesh, R), put(sin, mesh, R), execute_config=cfg)
                assert_tensor_allclose(self, y, rotary_ref(x, cos, sin, True), rtol=1e-5, atol=1e-5)
                assert_replicas_equal(self, y)
                y = co.silu_linear_chunk(put(t, mesh, rows), put(w, mesh, R), put(b, mesh, R), execute_config=cfg)
                assert_tensor_allclose(self, y, swiglu_ref(t, w, b), rtol=1e-4, atol=1e-5)
                assert_replicas_equal(self, y)
                y = co.layer_norm_mul_add(put(t, mesh, rows), put(sc, mesh, rows), put(sh, mesh, rows),
                                          execute_config=cfg)
                assert_tensor_allclose(self, y, adaln_ref(t, sc, sh), rtol=1e-4, atol=1e-5)
                assert_replicas_equal(self, y)

    def test_more_shapes_than_dynamos_recompile_limit(self):
        # Dynamo refuses a 9th shape on one code object (recompile_limit 8); a model meets more
        # adaLN shapes than that (image and text tokens, per mesh, per resolution): each key
        # compiles a code object of its own. 9 token counts, one device.
        co = dtorch.compiled_op
        cfg = dtorch.ExecuteConfig(compile_fused_ops=True)
        sc, sh = torch.randn(1, 1, 4), torch.randn(1, 1, 4)
        dsc, dsh = dtorch.from_torch(sc, CPU1), dtorch.from_torch(sh, CPU1)
        for n in range(1, 10):
            x = torch.randn(1, n, 4)
            y = co.layer_norm_mul_add(dtorch.from_torch(x, CPU1), dsc, dsh, eps=1e-5, execute_config=cfg)
            assert_tensor_allclose(self, y, adaln_ref(x, sc, sh, eps=1e-5), rtol=1e-4, atol=1e-5)

    def test_environment_default_and_explicit_off(self):
        # DTORCH_COMPILE_FUSED=1 compiles calls without execute_config (here the rotary's halves form:
        # one more compile); an explicit ExecuteConfig() keeps the call eager, bit-identical
        co = dtorch.compiled_op
        x, cos, sin = inputs(torch.float32, b=1, s=4, d=8)
        args = [dtorch.from_torch(t) for t in (x, cos, sin)]
        old = os.environ.get("DTORCH_COMPILE_FUSED")
        os.environ["DTORCH_COMPILE_FUSED"] = "1"
        try:
            before = co.compiled_kernels()
            y = co.apply_rotary_emb(*args, interleaved=False, execute_config=dtorch.ExecuteConfig())
            assert_tensor_equal(self, y, rotary_ref(x, cos, sin, False))
            self.assertEqual(co.compiled_kernels(), before)
            y = co.apply_rotary_emb(*args, interleaved=False)
            assert_tensor_allclose(self, y, rotary_ref(x, cos, sin, False), rtol=1e-5, atol=1e-5)
            self.assertEqual([k[0] for k in co.compiled_kernels() if k not in before], ["_rotary_halves"])
        finally:
            if old is None:
                del os.environ["DTORCH_COMPILE_FUSED"]
            else:
                os.environ["DTORCH_COMPILE_FUSED"] = old


if __name__ == "__main__":
    unittest.main()
