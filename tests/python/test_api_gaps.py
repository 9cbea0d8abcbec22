"""The original DTorch's small API forms (issue 31, item 4), each against torch: keyword forms of
view/reshape/repeat, gelu's approximate, getitem with an ellipsis inside tuples and None, and
dtorch.nn.functional._function_names."""

import unittest

import torch
import torch.nn.functional as TF

import dtorch
import dtorch.nn.functional as DF
from dtorch import Partial, Replicate, Shard
from dtorch.test.test_util import (assert_replicas_equal, assert_tensor_allclose, assert_tensor_equal,
                                   genuine_partial, local_regions, local_values)

from helpers import CPU1, CPU2, CPU2x2, CPU3, int_valued

TESTED_OPS = []  # forms of operators that test_views.py and test_nn_functional.py test


def meshes():
    """One device (default and explicit), 1-D, and uneven (5 rows over 2 and 3 devices) and 2-D layouts."""
    return [(None, None), (CPU1, [Replicate()]), (CPU2, [Shard(0)]), (CPU3, [Shard(0)]), (CPU3, [Shard(1)]),
            (CPU2x2, [Shard(0), Replicate()]), (CPU2x2, [Shard(1), Shard(0)])]


def on_layout_or_replicas(x, call):
    """call(x); where x's shards are refused (the op's family tests cover which layouts), call on
    replicas of x on the same mesh. Returns (result, whether the sharded layout ran)."""
    try:
        return call(x), True
    except dtorch.PlacementError:
        return call(x.redistribute(placements=[Replicate()] * x.device_mesh.ndim)), False


class TestKeywordForms(unittest.TestCase):
    def test_view_reshape_repeat_keywords(self):
        t = torch.arange(20.0).reshape(5, 4)  # rows 3, 2 over 2 devices and 2, 2, 1 over 3; columns 2, 2, 0
        calls = [lambda m: m.view(size=(5, 2, 2)), lambda m: m.view([5, -1]), lambda m: m.reshape(shape=(5, 4, 1)),
                 lambda m: m.repeat(repeats=(1, 2)), lambda m: m.repeat((2, 1, 1)), lambda m: m.repeat(1, 3),
                 lambda m: m.expand(size=(2, 5, 4)), lambda m: m.expand((3, -1, 4)), lambda m: m.permute(dims=(1, 0)),
                 lambda m: m.permute([1, 0]), lambda m: torch.permute(m, dims=(1, 0))]
        for mesh, pl in meshes():
            x = dtorch.from_torch(t, mesh, pl) if mesh else dtorch.from_torch(t)
            for i, call in enumerate(calls):
                with self.subTest(mesh=mesh, placements=pl, call=i):
                    got, _ = on_layout_or_replicas(x, call)
                    assert_tensor_equal(self, got, call(t))
                    assert_replicas_equal(self, got)

    def test_both_forms_is_torchs_type_error(self):
        t = torch.ones(2, 3)
        x = dtorch.from_torch(t)
        for call in (lambda m: m.view(3, 2, size=(3, 2)), lambda m: m.repeat(1, 2, repeats=(1, 2)),
                     lambda m: m.expand(2, 3, size=(2, 3)), lambda m: m.permute(1, 0, dims=(1, 0)),
                     # no sizes at all
                     lambda m: m.view(), lambda m: m.reshape(), lambda m: m.repeat(), lambda m: m.expand(),
                     lambda m: m.permute()):
            with self.assertRaises(TypeError):
                call(t)
            with self.assertRaises(TypeError):
                call(x)
        with self.assertRaises(TypeError):  # sizes and a dtype together
            x.view(3, 2, dtype=torch.int32)


class TestGeluAndIndexing(unittest.TestCase):
    def test_gelu_approximate(self):
        t = torch.randn(5, 6)
        for mesh, pl in meshes():
            x = dtorch.from_torch(t, mesh, pl) if mesh else dtorch.from_torch(t)
            for approx in ("none", "tanh"):
                with self.subTest(mesh=mesh, placements=pl, approximate=approx):
                    for got in (DF.gelu(x, approximate=approx), TF.gelu(x, approximate=approx)):
                        if mesh is None or mesh.size() == 1:
                            assert_tensor_equal(self, got, TF.gelu(t, approximate=approx))
                        else:
                            assert_tensor_allclose(self, got, TF.gelu(t, approximate=approx), rtol=1e-6, atol=1e-6)
        with self.assertRaises(type(_torch_error(lambda: TF.gelu(t, approximate="fast")))):
            DF.gelu(dtorch.from_torch(t), approximate="fast")

    def test_getitem_ellipsis_tuples(self):
        t = torch.arange(60.0).reshape(3, 4, 5)
        keys = [(..., 1), (None, ..., 0), (0, ..., None), (slice(None), ..., slice(1, 3)), (..., None, 2),
                (1, ...), (Ellipsis,),
                # several ellipses: torch 2.13 takes them, the first spanning the dims and the others none
                (..., ...), (..., 1, ...), (0, ..., ...), (..., None, ...), (Ellipsis, slice(1, 3), Ellipsis),
                (None, ..., slice(0, 2), ...),
                # a tuple inside the key is a sequence of indices, as a list is (torch's advanced indexing)
                ((0, 2), ...), (..., (0, 3)), ((0, 2),), ((1,), ..., None), ((True, False, True), ...),
                ((0, 2), (1, 3)), (0, (1, 2), ...), (..., (4, 0), ...)]
        layouts = [(None, None), (CPU1, [Replicate()]), (CPU2, [Shard(1)]), (CPU3, [Shard(0)]),
                   (CPU3, [Shard(1)]), (CPU3, [Shard(2)]), (CPU2x2, [Shard(2), Shard(1)]),
                   (CPU2x2, [Replicate(), Shard(0)])]  # Shard(1) over 3: 2, 2, 0; Shard(2): 2, 2, 1
        for mesh, pl in layouts:
            x = dtorch.from_torch(t, mesh, pl) if mesh else dtorch.from_torch(t)
            for k in keys:
                with self.subTest(mesh=mesh, placements=pl, key=k):
                    if mesh is None:
                        got = x[k]
                    else:  # an integer index or a slice of a sharded dim is refused (test_indexing.py)
                        got, sharded = on_layout_or_replicas(x, lambda v: v[k])
                        self.assertTrue(sharded or any(isinstance(e, (int, tuple)) or
                                                       (isinstance(e, slice) and e != slice(None)) for e in k))
                    assert_tensor_equal(self, got, t[k])
                    if mesh is not None:
                        assert_replicas_equal(self, got)


    def test_setitem_tuple_inside_the_key(self):
        t = torch.arange(60.0).reshape(3, 4, 5)
        for mesh, pl in ((None, None), (CPU1, [Replicate()]), (CPU3, [Replicate()]), (CPU3, [Shard(2)]),
                         (CPU2x2, [Replicate(), Shard(2)])):
            for k in (((0, 2), ...), (..., (1, 3), slice(None)), ((0, 2), (1, 3))):
                with self.subTest(mesh=mesh, placements=pl, key=k):
                    x = dtorch.from_torch(t, mesh, pl) if mesh else dtorch.from_torch(t)
                    want = t.clone()
                    want[k] = -1.0
                    x[k] = -1.0
                    assert_tensor_equal(self, x, want)
                    if mesh is not None:
                        assert_replicas_equal(self, x)


def _bits(t):
    """t's bytes, so that NaN patterns a reinterpretation makes compare too."""
    return t.contiguous().view(torch.uint8)


def assert_blocks(test_case, got, want):
    """Every device's block of ``got`` (each replica, each shard) is bitwise ``want``'s region."""
    regions = local_regions(tuple(want.shape), tuple(got.device_mesh.shape), list(got.placements))
    values = local_values(got)
    test_case.assertEqual(len(values), len(regions))
    for i, (v, r) in enumerate(zip(values, regions)):
        test_case.assertEqual(v.dtype, want.dtype)
        test_case.assertTrue(torch.equal(_bits(v), _bits(want[r])), f"device {i}: {v} != {want[r]}")


class TestViewDtype(unittest.TestCase):
    """``x.view(dtype)``: torch's bit reinterpretation, per device block (issue 31 item 4)."""

    # bit patterns without NaN either way: integer-valued floats (their low halves are zero) and small ints
    SOURCES = [int_valued(4, 12, seed=1), int_valued(4, 12, dtype=torch.bfloat16, seed=2),
               torch.randint(-300, 300, (4, 12), dtype=torch.int32), torch.randint(0, 200, (4, 12)).to(torch.uint8)]
    TARGETS = [torch.float32, torch.int32, torch.int16, torch.uint8, torch.float16, torch.bfloat16, torch.int64,
               torch.float64, torch.int8]

    def _cases(self, t):
        for dt in self.TARGETS:
            try:
                want = t.view(dt)
            except RuntimeError:
                continue  # torch refuses (12 bytes of uint8 do not make float64s): test_errors
            yield dt, want

    def test_one_device_equal(self):
        for t in self.SOURCES:
            for mesh in (None, CPU1):
                x = dtorch.from_torch(t, mesh) if mesh else dtorch.from_torch(t)
                for dt, want in self._cases(t):
                    with self.subTest(src=t.dtype, dst=dt, mesh=mesh):
                        got = x.view(dt)
                        self.assertEqual(got.dtype, dt)
                        self.assertEqual(got.shape, want.shape)
                        self.assertTrue(torch.equal(_bits(got.to_torch()), _bits(want)))
                        self.assertTrue(torch.equal(_bits(x.view(dtype=dt).to_torch()), _bits(want)))

    def test_meshes_every_block(self):
        layouts = [(CPU2, [Replicate()]), (CPU2, [Shard(0)]), (CPU2, [Shard(1)]), (CPU3, [Shard(1)]),
                   (CPU3, [Shard(0)]), (CPU2x2, [Shard(0), Shard(1)]), (CPU2x2, [Replicate(), Shard(1)]),
                   (CPU2x2, [Shard(1), Shard(1)])]
        for t in self.SOURCES:
            for mesh, pl in layouts:
                x = dtorch.from_torch(t, mesh, pl)
                for dt, want in self._cases(t):
                    with self.subTest(src=t.dtype, dst=dt, mesh=mesh, pl=pl):
                        try:
                            got = x.view(dt)
                        except dtorch.PlacementError:
                            # refused only where a device's block bytes are not the result's block bytes
                            old = local_regions(tuple(t.shape), tuple(mesh.shape), pl)
                            new = local_regions(tuple(want.shape), tuple(mesh.shape), pl)
                            self.assertTrue(any((a[-1].stop - a[-1].start) * t.element_size()
                                                != (b[-1].stop - b[-1].start) * want.element_size()
                                                for a, b in zip(old, new)), (mesh, pl, dt))
                            continue
                        self.assertEqual(list(got.placements), pl)
                        assert_blocks(self, got, want)
                        assert_replicas_equal(self, got)

    def test_uneven_last_dim_refused_or_exact(self):
        t = int_valued(3, 8)  # 8 float32 columns over 3 devices: blocks 3, 3, 2
        x = dtorch.from_torch(t, CPU3, [Shard(1)])
        assert_blocks(self, x.view(torch.float16), t.view(torch.float16))  # 6, 6, 4 halves: exact
        with self.assertRaises(dtorch.PlacementError):  # 4 int64 columns would be blocks 2, 2, 0
            x.view(torch.int64)
        with self.assertRaises(dtorch.PlacementError):
            genuine_partial(t, CPU2, [Partial()]).view(torch.int32)
        # the runtime goes on, and a Replicate copy of the same value reinterprets fine
        y = x.redistribute(placements=[Replicate()]).view(torch.int64) + 1
        self.assertTrue(torch.equal(y.to_torch(), t.view(torch.int64) + 1))
        assert_replicas_equal(self, y)

    def test_errors_are_torchs(self):
        cases = [(torch.tensor(1.5), torch.float16), (torch.ones(3, 5), torch.int64), (torch.ones(2, 3), torch.float64),
                 (torch.ones(2, 3, dtype=torch.uint8), torch.int32)]
        for t, dt in cases:
            with self.subTest(shape=tuple(t.shape), src=t.dtype, dst=dt):
                expected = type(_torch_error(lambda: t.view(dt)))
                with self.assertRaises(expected):
                    dtorch.from_torch(t).view(dt)
        with self.assertRaises(TypeError):
            dtorch.from_torch(torch.ones(2)).view(dtype="float16")
        x = dtorch.from_torch(torch.ones(3, 4))
        self.assertTrue(torch.equal(x.view(torch.int32).to_torch(), torch.ones(3, 4).view(torch.int32)))


class TestCopyBetweenMeshes(unittest.TestCase):
    """``dst.copy_(src)`` and ``load_state_dict`` with a source on another mesh (issue 31 item 4)."""

    A = dtorch.DeviceMesh("cpu", [0, 1])
    B = dtorch.DeviceMesh("cpu", [[2, 3], [4, 5]], mesh_dim_names=("dp", "tp"))
    C = dtorch.DeviceMesh("cpu", [6, 7, 8])

    def test_copy_from_another_mesh(self):
        t = int_valued(5, 6, seed=3)
        sources = [(self.B, [Shard(0), Replicate()]), (self.B, [Partial(), Shard(1)]), (self.B, [Partial(), Partial()]),
                   (self.C, [Shard(0)]), (self.C, [Partial()]), (CPU1, [Replicate()])]
        dests = [(self.A, [Shard(1)]), (self.A, [Replicate()]), (self.A, [Partial()]), (self.C, [Shard(1)]),
                 (self.C, [Shard(0)]), (self.B, [Shard(1), Shard(0)]), (CPU1, [Replicate()])]
        for smesh, spl in sources:
            src = genuine_partial(t, smesh, spl)
            for dmesh, dpl in dests:
                with self.subTest(src=(smesh, spl), dst=(dmesh, dpl)):
                    dst = dtorch.zeros(5, 6, device_mesh=dmesh, placements=dpl)
                    same = dst
                    dst.copy_(src)
                    self.assertIs(dst, same)
                    self.assertEqual((dst.device_mesh, list(dst.placements)), (dmesh, dpl))
                    assert_tensor_equal(self, dst, torch.zeros(5, 6).copy_(t))
                    assert_replicas_equal(self, dst)
                    assert_tensor_equal(self, src, t)  # the source is unchanged

    def test_copy_casts_and_broadcasts(self):
        t = int_valued(1, 6, dtype=torch.bfloat16, seed=4)
        src = dtorch.from_torch(t, self.C, [Shard(1)])
        dst = dtorch.zeros(4, 6, device_mesh=self.B, placements=[Shard(0), Replicate()])
        dst.copy_(src)
        want = torch.zeros(4, 6).copy_(t)
        assert_tensor_equal(self, dst, want)
        assert_replicas_equal(self, dst)
        bad = dtorch.from_torch(torch.ones(3, 6), self.C, [Shard(0)])
        with self.assertRaises(type(_torch_error(lambda: torch.zeros(4, 6).copy_(torch.ones(3, 6))))):
            dst.copy_(bad)
        assert_tensor_equal(self, dst, want)  # unchanged, and the runtime goes on
        other = dtorch.Graph()
        with self.assertRaises(ValueError):  # tensors of two graphs never mix
            dst.copy_(dtorch.from_torch(torch.ones(4, 6), self.C, graph=other))

    def test_load_state_dict_from_another_mesh(self):
        torch.manual_seed(0)
        ref = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
        src_model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
        ref.load_state_dict(src_model.state_dict())
        x = torch.randn(3, 6)

        def make(mesh):
            return dtorch.nn.Sequential(dtorch.nn.Linear(6, 8, device_mesh=mesh, tp_shard_type="col"),
                                        dtorch.nn.ReLU(),
                                        dtorch.nn.Linear(8, 4, device_mesh=mesh, tp_shard_type="row"))

        a = dtorch.DeviceMesh("cpu", [0, 1], mesh_dim_names=("tp",))
        b = dtorch.DeviceMesh("cpu", [[2, 3], [4, 5]], mesh_dim_names=("dp", "tp"))
        c = dtorch.DeviceMesh("cpu", [6, 7, 8], mesh_dim_names=("tp",))
        for dst_mesh, src_mesh in ((a, b), (b, c), (c, a), (a, CPU1)):
            with self.subTest(dst=dst_mesh, src=src_mesh):
                src = make(src_mesh)
                src.load_state_dict(src_model.state_dict())  # torch tensors onto src's mesh
                dst = make(dst_mesh)
                params = {k: id(v) for k, v in dst.named_parameters()}
                dst.load_state_dict(src.state_dict())  # dtorch tensors on src's mesh
                self.assertEqual(params, {k: id(v) for k, v in dst.named_parameters()})
                for k, v in dst.state_dict().items():
                    self.assertEqual(v.device_mesh, dst_mesh, k)
                    assert_tensor_equal(self, v, ref.state_dict()[k])
                    assert_replicas_equal(self, v)
                y = dst(dtorch.from_torch(x, dst_mesh))
                assert_tensor_allclose(self, y, ref(x), rtol=1e-5, atol=1e-6)


class TestFunctionNames(unittest.TestCase):
    def test_function_names(self):
        self.assertEqual(DF._function_names, DF.__all__)
        self.assertIn("gelu", DF._function_names)
        for name in DF._function_names:
            self.assertTrue(hasattr(TF, name), name)  # each one is torch.nn.functional's
            self.assertTrue(callable(getattr(DF, name)), name)


def _torch_error(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the class is what we compare
        return e
    raise AssertionError("torch accepted the call")


if __name__ == "__main__":
    unittest.main()
