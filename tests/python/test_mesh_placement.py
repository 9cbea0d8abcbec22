"""DeviceMesh, init_device_mesh and the placements: API, value semantics and errors."""

import pickle
import unittest

import torch

import dtorch
import dtorch.distributed_spec as spec
from dtorch import DeviceMesh, Partial, Replicate, Shard
from dtorch.test.test_util import assert_tensor_equal

from helpers import CPU2, cpu_only


class TestDeviceMesh(unittest.TestCase):
    @cpu_only("a cpu mesh's attributes")
    def test_attributes_1d(self):
        m = DeviceMesh("cpu", [0, 1])
        self.assertEqual(m.device_type, "cpu")
        self.assertEqual(m.ndim, 1)
        self.assertEqual(m.shape, (2,))
        self.assertEqual(m.size(), 2)
        self.assertEqual(m.size(0), 2)
        self.assertEqual(m.dim_names, ("dim0",))
        self.assertIsNone(m.mesh_dim_names)
        self.assertEqual(m.mesh.dtype, torch.int64)
        self.assertTrue(torch.equal(m.mesh, torch.tensor([0, 1])))
        self.assertEqual(m.first_device(), torch.device("cpu"))

    @cpu_only("a cpu mesh's attributes")
    def test_attributes_2d_named(self):
        m = DeviceMesh("cpu", [[4, 5, 6], [1, 2, 3]], mesh_dim_names=("dp", "tp"))
        self.assertEqual(m.ndim, 2)
        self.assertEqual(m.shape, (2, 3))
        self.assertEqual(m.size(), 6)
        self.assertEqual(m.size(1), 3)
        self.assertEqual(m.size(-2), 2)
        self.assertEqual(m.size("tp"), 3)
        self.assertEqual(m.dim_names, ("dp", "tp"))
        self.assertEqual(m.mesh_dim_names, ("dp", "tp"))
        self.assertTrue(m.has_dim_name("tp"))
        self.assertFalse(m.has_dim_name("pp"))
        self.assertEqual(m.dim_name_index("tp"), 1)
        with self.assertRaises(ValueError):
            m.dim_name_index("pp")
        self.assertTrue(torch.equal(m.mesh, torch.tensor([[4, 5, 6], [1, 2, 3]])))
        self.assertEqual(m.first_device(), torch.device("cpu"))

    def test_mesh_from_tensor(self):
        m = DeviceMesh("cpu", torch.arange(4).reshape(2, 2))
        self.assertEqual(m, DeviceMesh("cpu", [[0, 1], [2, 3]]))
        m32 = DeviceMesh("cpu", torch.tensor([3, 1], dtype=torch.int32))
        self.assertEqual(m32.mesh.tolist(), [3, 1])
        with self.assertRaises(TypeError):
            DeviceMesh("cpu", torch.tensor([0.0, 1.0]))

    @cpu_only("cpu meshes' reprs")
    def test_repr(self):
        self.assertEqual(repr(DeviceMesh("cpu", [0, 1])), "DeviceMesh('cpu', [0, 1])")
        self.assertEqual(
            repr(DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp"))),
            "DeviceMesh('cpu', [[0, 1], [2, 3]], mesh_dim_names=('dp', 'tp'))",
        )
        self.assertEqual(repr(DeviceMesh("cpu", [3], mesh_dim_names=("tp",))), "DeviceMesh('cpu', [3], mesh_dim_names=('tp',))")
        self.assertEqual(repr(DeviceMesh("cuda", [[0], [1]])), "DeviceMesh('cuda', [[0], [1]])")

    @cpu_only("cpu meshes' reprs")
    def test_one_device_meshes(self):
        self.assertEqual(DeviceMesh("cpu"), DeviceMesh("cpu", [0]))
        self.assertEqual(repr(DeviceMesh("cpu")), "DeviceMesh('cpu', [0])")
        self.assertEqual(DeviceMesh("cpu:3"), DeviceMesh("cpu", [3]))
        cuda1 = DeviceMesh("cuda:1")
        self.assertEqual(repr(cuda1), "DeviceMesh('cuda', [1])")
        self.assertEqual(cuda1.first_device(), torch.device("cuda", 1))
        self.assertEqual(DeviceMesh(torch.device("cpu", 2)), DeviceMesh("cpu", [2]))
        with self.assertRaises(ValueError):
            DeviceMesh("cuda:1", [0, 1])

    @cpu_only("compares cpu with cuda meshes")
    def test_equality_and_hash(self):
        a = DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp"))
        b = DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp"))
        self.assertEqual(a, b)
        self.assertEqual(hash(a), hash(b))
        self.assertEqual(len({a, b}), 1)
        self.assertNotEqual(a, DeviceMesh("cpu", [[0, 1], [2, 3]]))  # names differ
        self.assertNotEqual(a, DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("tp", "dp")))
        self.assertNotEqual(a, DeviceMesh("cpu", [[0, 2], [1, 3]], mesh_dim_names=("dp", "tp")))
        self.assertNotEqual(a, DeviceMesh("cuda", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp")))
        self.assertNotEqual(DeviceMesh("cpu", [0, 1, 2, 3]), DeviceMesh("cpu", [[0, 1, 2, 3]]))
        self.assertNotEqual(DeviceMesh("cpu", [0, 1]), [0, 1])
        # Default names are the explicit "dim<i>" names.
        self.assertEqual(DeviceMesh("cpu", [0, 1]), DeviceMesh("cpu", [0, 1], mesh_dim_names=("dim0",)))

    def test_immutable_and_picklable(self):
        m = DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp"))
        with self.assertRaises(AttributeError):
            m.device_type = "cuda"
        self.assertEqual(pickle.loads(pickle.dumps(m)), m)

    def test_sub_mesh(self):
        m = DeviceMesh("cpu", [[0, 1, 2], [3, 4, 5]], mesh_dim_names=("dp", "tp"))
        self.assertEqual(m["tp"], DeviceMesh("cpu", [0, 1, 2], mesh_dim_names=("tp",)))
        self.assertEqual(m["dp"], DeviceMesh("cpu", [0, 3], mesh_dim_names=("dp",)))
        self.assertEqual(m[("dp", "tp")], m)
        self.assertEqual(m[("tp", "dp")], DeviceMesh("cpu", [[0, 3], [1, 4], [2, 5]], mesh_dim_names=("tp", "dp")))
        with self.assertRaises(KeyError):
            m["pp"]
        m3 = dtorch.init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("pp", "dp", "tp"))
        self.assertEqual(m3[("pp", "tp")], DeviceMesh("cpu", [[0, 1], [4, 5]], mesh_dim_names=("pp", "tp")))

    def test_unbind(self):
        m = dtorch.init_device_mesh("cpu", (2, 2, 2), mesh_dim_names=("pp", "dp", "tp"))
        stages = m.unbind("pp")
        self.assertEqual(stages, [
            DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp")),
            DeviceMesh("cpu", [[4, 5], [6, 7]], mesh_dim_names=("dp", "tp")),
        ])
        self.assertEqual(m.unbind(("pp", "dp")), [
            DeviceMesh("cpu", [0, 1], mesh_dim_names=("tp",)),
            DeviceMesh("cpu", [2, 3], mesh_dim_names=("tp",)),
            DeviceMesh("cpu", [4, 5], mesh_dim_names=("tp",)),
            DeviceMesh("cpu", [6, 7], mesh_dim_names=("tp",)),
        ])
        # Names missing from the mesh are ignored; none left -> [mesh].
        self.assertEqual(m.unbind(("cp", "pp")), stages)
        self.assertEqual(m.unbind("cp"), [m])
        self.assertEqual(m.unbind([]), [m])
        self.assertEqual(len(m.unbind(("pp", "dp", "tp"))), 8)
        self.assertEqual(m.unbind(("pp", "dp", "tp"))[5].mesh.tolist(), [5])
        self.assertEqual(DeviceMesh("cpu", [[0, 1], [2, 3]]).unbind(0), [DeviceMesh("cpu", [0, 1], mesh_dim_names=("dim1",)), DeviceMesh("cpu", [2, 3], mesh_dim_names=("dim1",))])

    def test_init_device_mesh(self):
        m = dtorch.init_device_mesh("cpu", (2, 3), mesh_dim_names=("dp", "tp"))
        self.assertEqual(m, DeviceMesh("cpu", [[0, 1, 2], [3, 4, 5]], mesh_dim_names=("dp", "tp")))
        self.assertEqual(spec.init_device_mesh(device_type="cpu", mesh_shape=(2,)), DeviceMesh("cpu", [0, 1]))
        self.assertEqual(dtorch.init_device_mesh("cpu", 3), DeviceMesh("cpu", [0, 1, 2]))

    def test_exports(self):
        for name in ("DeviceMesh", "init_device_mesh", "Shard", "Replicate", "Partial"):
            self.assertIs(getattr(dtorch, name), getattr(spec, name))


class TestMeshErrors(unittest.TestCase):
    def assertRuntimeWorks(self):
        x = dtorch.from_torch(torch.arange(6.0).reshape(2, 3), CPU2, [Shard(1)])
        assert_tensor_equal(self, x * 2, torch.arange(6.0).reshape(2, 3) * 2)

    def test_duplicate_ids(self):
        with self.assertRaisesRegex(ValueError, r"(?i)mesh.*duplicate.*\[1\]"):
            DeviceMesh("cpu", [[0, 1], [1, 2]])
        self.assertRuntimeWorks()

    def test_bad_meshes(self):
        with self.assertRaisesRegex(ValueError, "device_type"):
            DeviceMesh("tpu", [0, 1])
        with self.assertRaisesRegex(ValueError, "negative"):
            DeviceMesh("cpu", [0, -1])
        with self.assertRaises(ValueError):
            DeviceMesh("cpu", [])
        with self.assertRaises(ValueError):
            DeviceMesh("cpu", [[0, 1], [2]])  # ragged
        with self.assertRaisesRegex(ValueError, "mesh_dim_names"):
            DeviceMesh("cpu", [0, 1], mesh_dim_names=("a", "b"))
        with self.assertRaisesRegex(ValueError, "mesh_dim_names"):
            DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("a", "a"))
        with self.assertRaisesRegex(ValueError, "at most"):
            dtorch.init_device_mesh("cpu", (1, 1, 1, 1, 1, 1, 1, 1, 2))  # 9 dims: at most 8
        self.assertRuntimeWorks()

    def test_wrong_placements_length(self):
        with self.assertRaises(ValueError) as cm:
            dtorch.zeros(4, 4, device_mesh=CPU2, placements=[Shard(0), Replicate()])
        self.assertIn("placements has 2 entries but the mesh has 1 dimension", str(cm.exception))
        with self.assertRaisesRegex(ValueError, "placements has 1 entry but the mesh has 2 dimensions"):
            dtorch.from_torch(torch.ones(4), dtorch.init_device_mesh("cpu", (2, 2)), [Shard(0)])
        with self.assertRaisesRegex(ValueError, "placements has 0 entries"):
            dtorch.ones(2, device_mesh=CPU2, placements=[])
        x = dtorch.ones(4, 4, device_mesh=CPU2)
        with self.assertRaisesRegex(ValueError, "placements has 2 entries"):
            x.redistribute(placements=[Shard(0), Shard(1)])
        self.assertRuntimeWorks()

    def test_shard_dim_out_of_range(self):
        with self.assertRaises(ValueError) as cm:
            dtorch.ones(4, 4, device_mesh=CPU2, placements=[Shard(2)])
        msg = str(cm.exception)
        self.assertIn("Shard(dim=2)", msg)
        self.assertIn("2 dimensions", msg)
        with self.assertRaisesRegex(ValueError, r"Shard\(dim=-3\)"):
            dtorch.from_torch(torch.ones(4, 4), CPU2, [Shard(-3)])
        with self.assertRaisesRegex(ValueError, r"Shard\(dim=0\).*0 dimensions"):
            dtorch.from_torch(torch.tensor(1.0), CPU2, [Shard(0)])
        x = dtorch.ones(4, 4, device_mesh=CPU2)
        with self.assertRaisesRegex(ValueError, r"Shard\(dim=5\)"):
            x.redistribute(placements=[Shard(5)])
        self.assertRuntimeWorks()

    def test_negative_shard_dim_is_normalised(self):
        t = torch.arange(12.0).reshape(3, 4)
        x = dtorch.from_torch(t, CPU2, [Shard(-1)])
        self.assertEqual(x.placements, [Shard(1)])
        assert_tensor_equal(self, x, t)

    def test_bad_placement_objects(self):
        with self.assertRaises(ValueError):  # a string that is not a placement's short form ("S0")
            dtorch.ones(2, device_mesh=CPU2, placements=["Shard(0)"])
        with self.assertRaises(TypeError):
            dtorch.ones(2, device_mesh=CPU2, placements=[0])
        with self.assertRaises(TypeError):
            dtorch.ones(2, device_mesh=CPU2, placements=Shard(0))
        self.assertRuntimeWorks()

    def test_device_and_device_mesh_together(self):
        with self.assertRaisesRegex(ValueError, "device"):
            dtorch.zeros(2, device="cpu", device_mesh=CPU2)
        with self.assertRaisesRegex(ValueError, "device"):
            dtorch.from_torch(torch.ones(2), CPU2, device="cpu")
        self.assertRuntimeWorks()


class TestPlacements(unittest.TestCase):
    def test_values(self):
        self.assertEqual(Shard(0), Shard(0))
        self.assertNotEqual(Shard(0), Shard(1))
        self.assertEqual(hash(Shard(1)), hash(Shard(1)))
        self.assertEqual(Replicate(), Replicate())
        self.assertEqual(Partial(), Partial())
        self.assertNotEqual(Replicate(), Partial())
        self.assertNotEqual(Shard(0), Replicate())
        self.assertEqual(len({Shard(0), Shard(0), Replicate(), Replicate(), Partial(), Shard(1)}), 4)
        self.assertEqual([Shard(0), Replicate()], [Shard(0), Replicate()])

    def test_repr(self):
        self.assertEqual(repr(Shard(0)), "Shard(dim=0)")
        self.assertEqual(repr(Shard(-1)), "Shard(dim=-1)")
        self.assertEqual(repr(Replicate()), "Replicate()")
        self.assertEqual(repr(Partial()), "Partial()")
        self.assertEqual(repr([Shard(1), Partial()]), "[Shard(dim=1), Partial()]")

    def test_predicates(self):
        self.assertTrue(Shard(1).is_shard())
        self.assertTrue(Shard(1).is_shard(1))
        self.assertFalse(Shard(1).is_shard(0))
        self.assertFalse(Shard(1).is_replicate() or Shard(1).is_partial())
        self.assertTrue(Replicate().is_replicate())
        self.assertFalse(Replicate().is_shard() or Replicate().is_partial())
        self.assertTrue(Partial().is_partial())
        self.assertFalse(Partial().is_shard() or Partial().is_replicate())
        self.assertEqual(Shard(2).dim, 2)

    def test_immutable(self):
        with self.assertRaises(AttributeError):
            Shard(0).dim = 1
        with self.assertRaises(TypeError):
            Shard("0")
        with self.assertRaises(TypeError):
            Shard(True)

    def test_pickle(self):
        for p in (Shard(1), Replicate(), Partial()):
            self.assertEqual(pickle.loads(pickle.dumps(p)), p)

    def test_tensor_placements_and_mesh(self):
        m = DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp"))
        x = dtorch.zeros(4, 6, device_mesh=m, placements=[Shard(1), Partial()])
        self.assertEqual(x.placements, [Shard(1), Partial()])
        self.assertIsInstance(x.placements, list)
        self.assertEqual(x.device_mesh, m)
        self.assertEqual(repr(x.device_mesh), repr(m))
        y = x * 2
        self.assertEqual(y.device_mesh, m)
        self.assertEqual(y.placements, [Shard(1), Partial()])
        # A mesh dim of size 1 is always Replicate.
        m1 = DeviceMesh("cpu", [[0], [1]])
        z = dtorch.zeros(4, device_mesh=m1, placements=[Shard(0), Shard(0)])
        self.assertEqual(z.placements, [Shard(0), Replicate()])


if __name__ == "__main__":
    unittest.main()
