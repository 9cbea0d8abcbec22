"""Bad input answered as torch answers it: the same exception class, raised at the call, with
nothing recorded (the runtime stays usable and no error surfaces later)."""

import os
import unittest

import torch

import dtorch
from dtorch import DeviceMesh, Replicate, Shard
from dtorch.test.test_util import assert_tensor_equal

from helpers import CPU1, CPU2, CPU2x2, CPU3


def torch_error(fn):
    """The exception class torch raises for fn(), or None."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the class is what we compare
        return type(e)
    return None


def n_cuda() -> int:
    """The first cuda id with no device behind it: the logical count under device virtualisation."""
    if not torch.cuda.is_available():
        return 0
    if os.environ.get("DTORCH_DTENSOR_IN_SAME_DEVICE") == "1":
        return int(os.environ.get("DTORCH_NUM_GPU_WHEN_ENABLE_DTENSOR_IN_SAME_DEVICE", "8"))
    return torch.cuda.device_count()


class BadInputCase(unittest.TestCase):
    def assertSameError(self, dt_call, torch_call, regex=None):
        """dtorch raises the class torch raises for the same call (and the runtime is fine after)."""
        expected = torch_error(torch_call)
        self.assertIsNotNone(expected, "torch accepts this call")
        with self.assertRaises(expected) as cm:
            dt_call()
        if regex is not None:
            self.assertRegex(str(cm.exception), regex)
        self.assertRuntimeWorks()

    def assertRuntimeWorks(self):
        dtorch.default_graph.sync()  # nothing half-recorded fails later
        assert_tensor_equal(self, dtorch.ones(3, device_mesh=CPU3, placements=[Shard(0)]) + 1, torch.full((3,), 2.0))


class TestNegativeSizes(BadInputCase):
    def test_factories(self):
        m = CPU2
        cases = [
            (lambda: dtorch.zeros(-1, 2), lambda: torch.zeros(-1, 2)),
            (lambda: dtorch.ones((3, -1)), lambda: torch.ones((3, -1))),
            (lambda: dtorch.empty(-4), lambda: torch.empty(-4)),
            (lambda: dtorch.rand(2, -3, device_mesh=m), lambda: torch.rand(2, -3)),
            (lambda: dtorch.randn(-1, device_mesh=m, placements=[Shard(0)]), lambda: torch.randn(-1)),
            (lambda: dtorch.full((-2,), 1.0), lambda: torch.full((-2,), 1.0)),
            (lambda: dtorch.randint(0, 5, (-1,)), lambda: torch.randint(0, 5, (-1,))),
            (lambda: dtorch.Tensor(2, -1), lambda: torch.Tensor(2, -1)),
            (lambda: dtorch.rand(2, -3, generator=torch.Generator()), lambda: torch.rand(2, -3)),
        ]
        for dt_call, torch_call in cases:
            with self.subTest(call=dt_call):
                self.assertSameError(dt_call, torch_call, "negative dimension")

    def test_arange(self):
        self.assertSameError(lambda: dtorch.arange(0, 10, 0), lambda: torch.arange(0, 10, 0), "nonzero")
        self.assertSameError(lambda: dtorch.arange(10, 0, 1), lambda: torch.arange(10, 0, 1), "step sign")
        self.assertSameError(lambda: dtorch.arange(0, 5, -1, device_mesh=CPU2), lambda: torch.arange(0, 5, -1))
        self.assertSameError(lambda: dtorch.arange(0.0, 1.0, 0.0), lambda: torch.arange(0.0, 1.0, 0.0))

    def test_element_count_overflow(self):
        self.assertSameError(lambda: dtorch.empty(2**62, 4), lambda: torch.empty(2**62, 4), "overflow")
        self.assertSameError(lambda: dtorch.zeros(2**40, 2**40, device_mesh=CPU2),
                             lambda: torch.zeros(2**40, 2**40), "overflow")
        # The bytes overflow although the element count fits.
        self.assertSameError(lambda: dtorch.empty(2**61, 2, dtype=torch.float64),
                             lambda: torch.empty(2**61, 2, dtype=torch.float64), "overflow")


class TestLikeOfNonTensors(BadInputCase):
    def test_every_like(self):
        cases = {
            "zeros_like": (lambda: dtorch.zeros_like("x"), lambda: torch.zeros_like("x")),
            "ones_like": (lambda: dtorch.ones_like("x"), lambda: torch.ones_like("x")),
            "empty_like": (lambda: dtorch.empty_like("x"), lambda: torch.empty_like("x")),
            "full_like": (lambda: dtorch.full_like("x", 1.0), lambda: torch.full_like("x", 1.0)),
            "rand_like": (lambda: dtorch.rand_like("x"), lambda: torch.rand_like("x")),
            "randn_like": (lambda: dtorch.randn_like("x"), lambda: torch.randn_like("x")),
            "randint_like": (lambda: dtorch.randint_like("x", 3), lambda: torch.randint_like("x", 3)),
        }
        for name, (dt_call, torch_call) in cases.items():
            with self.subTest(name=name):
                self.assertSameError(dt_call, torch_call)
        # A torch tensor is not a dtorch tensor either.
        with self.assertRaisesRegex(TypeError, "zeros_like"):
            dtorch.zeros_like(torch.ones(2))


class TestMeshArguments(BadInputCase):
    def test_init_device_mesh_names_mesh_shape(self):
        with self.assertRaisesRegex(TypeError, "mesh_shape"):
            dtorch.init_device_mesh("cpu", ("a", 2))
        with self.assertRaisesRegex(TypeError, "mesh_shape"):
            dtorch.init_device_mesh("cpu", "ab")
        with self.assertRaisesRegex(ValueError, "mesh_shape"):
            dtorch.init_device_mesh("cpu", (2, 0))
        self.assertRuntimeWorks()


@unittest.skipIf(n_cuda() >= 2, "these GPUs are usable: covered by the CUDA tests")
class TestUnavailableCuda(BadInputCase):
    def test_factories_name_the_device(self):
        missing = n_cuda()  # the first id with no GPU behind it
        mesh = DeviceMesh("cuda", [missing, missing + 1])
        calls = [
            lambda: dtorch.ones(2, device=f"cuda:{missing}"),
            lambda: dtorch.zeros(4, device_mesh=mesh, placements=[Shard(0)]),
            lambda: dtorch.rand(4, device_mesh=mesh),
            lambda: dtorch.arange(4, device_mesh=mesh),
            lambda: dtorch.randint(0, 3, (4,), device_mesh=mesh),
            lambda: dtorch.from_torch(torch.ones(4), mesh),
            lambda: dtorch.tensor([1.0, 2.0], device_mesh=mesh),
            lambda: dtorch.ones(4).redistribute(DeviceMesh("cuda", [missing]), None),
            lambda: dtorch.ones(4, device_mesh=CPU2).to(mesh),
            lambda: dtorch.ones(4, device_mesh=CPU2).cuda(),
        ]
        if missing == 0:
            calls.append(lambda: dtorch.ones(2, device="cuda"))
        for call in calls:
            with self.subTest(call=call):
                with self.assertRaisesRegex(RuntimeError, f"cuda:{missing}|cuda"):
                    call()
        with self.assertRaisesRegex(RuntimeError, f"cuda:{missing} is not available"):
            dtorch.zeros(4, device_mesh=mesh)
        self.assertRuntimeWorks()

    def test_satisfy_is_false(self):
        missing = n_cuda()
        self.assertFalse(dtorch.default_graph.satisfy(DeviceMesh("cuda", [missing])))
        self.assertFalse(dtorch.Graph.default_graph().satisfy(DeviceMesh("cuda", [missing + 3, missing])))
        self.assertTrue(dtorch.default_graph.satisfy(DeviceMesh("cpu", [0, 1, 5])))

    def test_meshes_themselves_are_fine(self):
        # Only using one fails: a mesh is a description.
        m = DeviceMesh("cuda", [0, 1])
        self.assertEqual(m.first_device(), torch.device("cuda", 0))
        self.assertEqual(m.unbind(0)[1], DeviceMesh("cuda", [1]))


if __name__ == "__main__":
    unittest.main()


class TestNnDtypes(BadInputCase):
    """nn ops on integer and bool inputs: torch 2.x's CPU kernels have no case for them
    (NotImplementedError), raised here at the call."""

    def test_integer_and_bool_inputs(self):
        import torch.nn.functional as TF

        import dtorch.nn.functional as DF

        calls = {
            "softmax": lambda F, t: F.softmax(t, 0),
            "log_softmax": lambda F, t: F.log_softmax(t, 0),
            "gelu": lambda F, t: F.gelu(t),
            "silu": lambda F, t: F.silu(t),
            "leaky_relu": lambda F, t: F.leaky_relu(t),
            "elu": lambda F, t: F.elu(t),
            "layer_norm": lambda F, t: F.layer_norm(t, (3,)),
            "rms_norm": lambda F, t: F.rms_norm(t, (3,)),
            "group_norm": lambda F, t: F.group_norm(t.reshape(1, 2, 3), 1),
        }
        for dtype in (torch.int64, torch.int32, torch.bool):
            a = torch.ones(2, 3, dtype=dtype)
            for name, call in calls.items():
                for mesh in (None, CPU2):
                    with self.subTest(op=name, dtype=dtype, mesh=mesh):
                        x = dtorch.from_torch(a, mesh, [Shard(0)]) if mesh else dtorch.from_torch(a)
                        self.assertSameError(lambda: call(DF, x), lambda: call(TF, a), "not implemented for")

    def test_negative_layer_sizes(self):
        for dt_call, torch_call in [
            (lambda: dtorch.nn.Linear(-1, 2), lambda: torch.nn.Linear(-1, 2)),
            (lambda: dtorch.nn.Linear(2, -3), lambda: torch.nn.Linear(2, -3)),
            (lambda: dtorch.nn.Embedding(-1, 4), lambda: torch.nn.Embedding(-1, 4)),
        ]:
            with self.subTest(call=dt_call):
                self.assertSameError(dt_call, torch_call)


class TestTorchExceptionClasses(BadInputCase):
    """Issue 31, item 5: the class (and the words) torch 2.13 raises, at the call."""

    def test_cat_of_nothing(self):
        for name in ("cat", "concat", "concatenate"):
            for empty in ([], ()):
                with self.subTest(op=name, arg=empty):
                    self.assertSameError(lambda: getattr(dtorch, name)(empty), lambda: getattr(torch, name)(empty),
                                         "expected a non-empty list of Tensors")
        self.assertSameError(lambda: dtorch.stack([]), lambda: torch.stack([]))
        # an empty list holds no dtorch tensor, so torch.cat([]) is torch's own call: nothing to map

    # one device (default and explicit), 1-D, uneven (3 rows over 2; 2 over 3: 1, 1, 0) and 2-D layouts
    LAYOUTS = [(None, None), (CPU1, [Replicate()]), (CPU2, [Shard(0)]), (CPU3, [Shard(0)]),
               (CPU2x2, [Shard(0), Replicate()]), (CPU2x2, [Replicate(), Replicate()])]

    def test_item_of_many_elements(self):
        for shape in ((3,), (2, 2), (0,)):
            for mesh, pl in self.LAYOUTS:
                with self.subTest(shape=shape, mesh=mesh, placements=pl):
                    a = torch.ones(shape)
                    x = dtorch.from_torch(a, mesh, pl) if mesh else dtorch.from_torch(a)
                    n = a.numel()
                    self.assertSameError(lambda: x.item(), lambda: a.item(),
                                         f"a Tensor with {n} elements cannot be converted to Scalar")

    def test_max_min_of_a_tensor_and_a_keepdim(self):
        # max(input, other) takes no keepdim: a third argument is torch's TypeError, not ignored
        a, b = torch.rand(2, 3), torch.rand(2, 3)
        for mesh, pl in self.LAYOUTS:
            x = dtorch.from_torch(a, mesh, pl) if mesh else dtorch.from_torch(a)
            y = dtorch.from_torch(b, mesh, pl) if mesh else dtorch.from_torch(b)
            for name in ("max", "min"):
                with self.subTest(op=name, mesh=mesh, placements=pl):
                    self.assertSameError(lambda: getattr(torch, name)(x, y, y), lambda: getattr(torch, name)(a, b, b))
                    self.assertSameError(lambda: getattr(dtorch, name)(x, y, True),
                                         lambda: getattr(torch, name)(a, b, True))
                    self.assertSameError(lambda: getattr(x, name)(y, keepdim=True), lambda: getattr(a, name)(b, keepdim=True))
                    assert_tensor_equal(self, getattr(torch, name)(x, y), getattr(torch, name)(a, b))

    def test_tril_triu_of_fewer_than_two_dims(self):
        for name in ("tril", "triu"):
            for a in (torch.ones(3), torch.tensor(2.0)):
                for mesh, pl in self.LAYOUTS:
                    if a.ndim == 0 and pl and any(p.is_shard() for p in pl):
                        continue  # a 0-d tensor has no dim to shard
                    with self.subTest(op=name, ndim=a.ndim, mesh=mesh, placements=pl):
                        x = dtorch.from_torch(a, mesh, pl) if mesh else dtorch.from_torch(a)
                        self.assertSameError(lambda: getattr(dtorch, name)(x), lambda: getattr(torch, name)(a),
                                             f"{name}: input tensor must have at least 2 dimensions")
                        self.assertSameError(lambda: getattr(x, name)(1), lambda: getattr(a, name)(1))
                        # torch's own function on the dtorch tensor (__torch_function__) raises the same
                        self.assertSameError(lambda: getattr(torch, name)(x), lambda: getattr(torch, name)(a))
