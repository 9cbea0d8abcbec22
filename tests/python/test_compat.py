"""The original DTorch's public names (docs/api.md, "Compatibility with the original DTorch"), each listed
explicitly, and their behaviour against eager torch. dtorch.nn.* is checked by the nn tests.

Every name below must exist: a missing one fails the test that lists it.
"""

import importlib
import pickle
import threading
import unittest

import numpy as np
import torch

import dtorch
from dtorch import DeviceMesh, Partial, Replicate, Shard
from dtorch.test.test_util import assert_tensor_allclose, assert_tensor_equal

from helpers import CPU1, CPU2, CPU2x2, CPU3, DEV, cpu_only, int_valued, randn

# ------------------------------------------------------------------ the names

MODULE_NAMES = {
    "dtorch.graph": ["Graph", "GraphOption", "VoidFutureCollect"],
    "dtorch.tensor": ["Tensor", "tensor", "TensorFuture"],
    "dtorch.distributed_spec": ["DeviceMesh", "Placement", "Shard", "Replicate", "Partial", "init_device_mesh",
                                "get_default_device_mesh", "assign_layers_to_stages"],
    "dtorch.memory_stats": ["MemoryStat", "MemoryStats"],
    "dtorch.global_option": ["GlobalOption"],
    "dtorch.type": ["OperatorFormat", "PaddingType", "PoolingKind"],
    "dtorch.cluster": ["MainNode"],
    "dtorch.cuda": ["nvtx", "is_available", "device_count"],
    "dtorch.cuda.nvtx": ["range_push", "range_pop", "mark", "module_register_nvtx"],
    "dtorch.util": ["TensorChecker", "Benchmark"],
    "dtorch.test.test_util": ["assert_tensor_equal", "assert_tensor_allclose", "gen_arg_list", "is_graph_satisfy"],
}

DEFAULT_GRAPH_ATTRS = ["id", "satisfy", "sync", "sync_future", "empty_cache", "get_memory_stats",
                       "device_mesh_guard", "dtype_guard", "default_device_mesh", "default_dtype"]
MAIN_NODE_METHODS = ["set_address", "wait_cluster_ready", "get_address", "num_node_in_cluster"]
MESH_ATTRS = ["is_distributed", "check_all_dim_names_in_set", "to_device", "first_device", "unbind"]
PLACEMENT_METHODS = ["is_shard", "is_replicate", "is_partial", "from_str", "to_str"]

DTYPES = ["float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64", "uint8", "bool",
          "half", "float", "double", "short", "int", "long", "complex64", "complex128", "cfloat", "cdouble"]
TORCH_REEXPORTS = ["dtype", "finfo", "iinfo", "device", "Generator", "Size"]
TYPED_CLASSES = {"FloatTensor": torch.float32, "HalfTensor": torch.float16, "BFloat16Tensor": torch.bfloat16,
                 "DoubleTensor": torch.float64, "LongTensor": torch.int64, "IntTensor": torch.int32,
                 "BoolTensor": torch.bool}

TOP_LEVEL = {
    "creation": ["zeros", "ones", "full", "empty", "arange", "rand", "randn", "randint", "from_torch", "from_numpy",
                 "zeros_like", "ones_like", "full_like", "empty_like", "rand_like", "randn_like", "randint_like"],
    "shape": ["reshape", "cat", "concat", "stack", "chunk", "unbind", "squeeze", "unsqueeze", "flatten", "transpose",
              "permute", "repeat_interleave"],
    "math": ["matmul", "einsum", "outer", "add", "sub", "mul", "div", "neg", "reciprocal", "pow", "abs", "exp", "log",
             "log2", "log10", "square", "rsqrt", "sin", "asin", "cos", "floor", "round", "isinf", "isnan", "sigmoid",
             "tanh", "relu", "softmax"],
    "compare": ["eq", "equal", "gt", "greater", "lt", "less", "ge", "greater_equal", "le", "less_equal",
                "logical_and", "logical_or", "where", "masked_fill", "masked_scatter", "nonzero"],
    "reduce": ["clamp", "clip", "clone", "max", "min", "maximum", "minimum", "argmax", "argmin", "sum", "mean", "any",
               "all"],
    "nn": ["batch_norm", "conv2d", "dropout", "embedding", "group_norm", "layer_norm", "rms_norm"],
    "layout": ["tensors_redistribute_by_dict", "default_graph", "MainNode", "GlobalOption", "MemoryStat",
               "MemoryStats", "GraphOption", "assign_layers_to_stages", "get_default_device_mesh"],
}

TENSOR_METHODS = ["data", "graph", "check_placement", "cpu", "cuda", "detach", "type", "type_as", "half", "bfloat16",
                  "float", "double", "bool", "byte", "char", "short", "int", "long", "item", "tolist", "numpy",
                  "copy_", "clone", "is_contiguous", "contiguous", "expand", "view", "repeat", "masked_fill_", "masked_scatter_",
                  "__getitem__", "__setitem__", "redistribute", "redistribute_like", "redistribute_by_dict"]


class TestNames(unittest.TestCase):
    def test_module_paths(self):
        for module, names in MODULE_NAMES.items():
            m = importlib.import_module(module)
            for name in names:
                self.assertTrue(hasattr(m, name), f"{module}.{name} is missing")
        self.assertIsInstance(dtorch.__version__, str)
        # One version everywhere: the library's (the header's macros) and the package's metadata.
        import os
        import re
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        with open(os.path.join(root, "pyproject.toml")) as f:
            declared = re.search(r'^version = "([^"]+)"', f.read(), re.M).group(1)
        self.assertEqual(dtorch.__version__, declared)
        from dtorch.graph import Graph, GraphOption, VoidFutureCollect  # noqa: F401
        from dtorch.tensor import Tensor, TensorFuture, tensor  # noqa: F401
        self.assertIs(Tensor, dtorch.Tensor)

    def test_top_level_names(self):
        for family, names in TOP_LEVEL.items():
            for name in names:
                self.assertTrue(hasattr(dtorch, name), f"dtorch.{name} ({family}) is missing")

    def test_graph_names(self):
        for name in DEFAULT_GRAPH_ATTRS:
            self.assertTrue(hasattr(dtorch.default_graph, name), f"dtorch.default_graph.{name} is missing")
        for name in MAIN_NODE_METHODS:
            self.assertTrue(callable(getattr(dtorch.MainNode, name)), f"MainNode.{name} is missing")

    def test_mesh_and_placement_names(self):
        for name in MESH_ATTRS:
            self.assertTrue(hasattr(DeviceMesh, name), f"DeviceMesh.{name} is missing")
        for cls in (Shard, Replicate, Partial):
            for name in PLACEMENT_METHODS:
                self.assertTrue(hasattr(cls, name), f"{cls.__name__}.{name} is missing")
        self.assertTrue(hasattr(Shard, "get_shard_index"))

    def test_reexports(self):
        for name in DTYPES:
            self.assertIs(getattr(dtorch, name), getattr(torch, name), f"dtorch.{name}")
        every = [n for n in dir(torch) if not n.startswith("_") and isinstance(getattr(torch, n), torch.dtype)]
        for name in every:
            self.assertIs(getattr(dtorch, name), getattr(torch, name), f"dtorch.{name}")
        for name in TORCH_REEXPORTS:
            self.assertIs(getattr(dtorch, name), getattr(torch, name), f"dtorch.{name}")
        for name in TYPED_CLASSES:
            self.assertTrue(hasattr(dtorch, name), f"dtorch.{name} is missing")

    def test_tensor_methods(self):
        for name in TENSOR_METHODS:
            self.assertTrue(hasattr(dtorch.Tensor, name), f"dtorch.Tensor.{name} is missing")

    def test_method_naming_rule(self):
        # Where torch.Tensor.X exists for a listed dtorch function, dtorch.Tensor.X does too, and where
        # torch.X exists for a dtorch.Tensor method, dtorch.X does too (torch.cpu is a module).
        listed = [n for names in TOP_LEVEL.values() for n in names]
        missing = [n for n in listed if hasattr(torch.Tensor, n) and not hasattr(dtorch.Tensor, n)]
        self.assertEqual(missing, [])
        methods = [n for n in dir(dtorch.Tensor) if not n.startswith("_") and callable(getattr(torch, n, None))
                   and n != "cpu"]
        self.assertEqual([n for n in methods if not hasattr(dtorch, n)], [])


# ------------------------------------------------------------------ modules


class TestModules(unittest.TestCase):
    def test_tensor_module_is_the_factory_too(self):
        self.assertEqual(dtorch.tensor([1, 2]).tolist(), [1, 2])
        from dtorch.tensor import tensor
        assert_tensor_equal(self, tensor([[1.5, 2.0]]), torch.tensor([[1.5, 2.0]]))
        self.assertIs(dtorch.tensor.TensorFuture, dtorch.TensorFuture)

    @cpu_only("its keys name cpu devices")
    def test_memory_stats(self):
        from dtorch.memory_stats import MemoryStat, MemoryStats
        x = dtorch.ones(64, device_mesh=CPU2, placements=[Shard(0)])
        x.to_torch()
        stats = dtorch.default_graph.get_memory_stats(CPU2)
        self.assertIsInstance(stats, MemoryStats)
        self.assertEqual(sorted(stats), [f"{DEV}:0", f"{DEV}:1"])
        s = stats[f"{DEV}:0"]
        self.assertIsInstance(s, MemoryStat)
        self.assertGreaterEqual(s.current, 128)  # 32 float32 per device, alive
        self.assertGreaterEqual(s.peak, s.current)
        self.assertEqual(stats[torch.device("cpu", 1)].peak, stats[f"{DEV}:1"].peak)
        self.assertEqual(stats.total_current, sum(v.current for v in stats.values()))
        self.assertEqual(dtorch.memory_stats(CPU2), stats.to_dict())  # the module is callable
        dtorch.default_graph.get_memory_stats(CPU2, reset_peak=True)
        after = dtorch.default_graph.get_memory_stats(CPU2)
        self.assertEqual(after[f"{DEV}:0"].peak, after[f"{DEV}:0"].current)
        del x

    def test_global_option(self):
        from dtorch.global_option import GlobalOption
        self.assertIsInstance(GlobalOption.get("comm_timeout_second"), int)
        old = GlobalOption.comm_timeout_second
        try:
            GlobalOption.set("comm_timeout_second", 30)
            self.assertEqual(GlobalOption.comm_timeout_second, 30)
            with self.assertRaises(TypeError):
                GlobalOption.set("comm_timeout_second", "30")
            with self.assertRaises(KeyError):
                GlobalOption.get("nope")
        finally:
            GlobalOption.set("comm_timeout_second", old)
        self.assertIn("dtensor_in_same_device", GlobalOption.as_dict())

    def test_type_enums(self):
        from dtorch import _C
        from dtorch.type import OperatorFormat, PaddingType, PoolingKind
        self.assertEqual([p.name for p in PaddingType], ["EXPLICIT", "VALID", "SAME"])
        self.assertEqual((PaddingType.EXPLICIT, PaddingType.VALID, PaddingType.SAME),
                         (_C.CONV_PAD_EXPLICIT, _C.CONV_PAD_VALID, _C.CONV_PAD_SAME))
        self.assertEqual({p.name for p in PoolingKind}, {"MAX", "AVG"})
        self.assertEqual(OperatorFormat("NCHW"), OperatorFormat.NCHW)

    def test_cluster_without_nodes(self):
        from dtorch.cluster import MainNode
        self.assertIs(MainNode, dtorch.MainNode)
        self.assertEqual(MainNode.num_node_in_cluster(), 0)
        self.assertIsNone(MainNode.get_address())
        with self.assertRaisesRegex(RuntimeError, "set_address"):
            MainNode.wait_cluster_ready(1)
        with self.assertRaises(TypeError):
            MainNode.wait_cluster_ready()
        with self.assertRaises(TypeError):
            MainNode.set_address(5555)

    def test_cuda_nvtx(self):
        import dtorch.cuda
        from dtorch.cuda import nvtx
        self.assertEqual(dtorch.cuda.is_available(), torch.cuda.is_available())
        if not torch.cuda.is_available():
            self.assertEqual(nvtx.range_push("a"), -1)
            self.assertEqual(nvtx.range_pop(), -1)
            self.assertIsNone(nvtx.mark("m"))
            model = dtorch.nn.Linear(2, 2)
            forward = model.forward
            self.assertIs(nvtx.module_register_nvtx(model), model)
            self.assertEqual(model.forward, forward)  # unchanged without CUDA

    def test_nvtx_forwards_with_cuda(self):
        # With CUDA, calls go to torch.cuda.nvtx; a recorder stands in for it here.
        from dtorch.cuda import nvtx
        calls = []

        class Recorder:
            def range_push(self, msg):
                calls.append(("push", msg))
                return len([c for c in calls if c[0] == "push"]) - 1

            def range_pop(self):
                calls.append(("pop",))
                return 0

            def mark(self, msg):
                calls.append(("mark", msg))

        saved = nvtx._nvtx
        try:
            nvtx._nvtx = Recorder  # called like the real lookup: gives the object to forward to
            nvtx.range_push("step")
            nvtx.mark("here")
            nvtx.range_pop()
            model = dtorch.nn.Sequential(dtorch.nn.Linear(3, 2), dtorch.nn.ReLU())
            nvtx.module_register_nvtx(model, "net")
            x = dtorch.ones(1, 3)
            model(x)
        finally:
            nvtx._nvtx = saved
        self.assertEqual(calls[:3], [("push", "step"), ("mark", "here"), ("pop",)])
        pushed = [c[1] for c in calls[3:] if c[0] == "push"]
        self.assertEqual(pushed, ["net", "net.0", "net.1"])
        self.assertEqual(len([c for c in calls[3:] if c[0] == "pop"]), 3)

    def test_util_tensor_checker(self):
        from dtorch.util import TensorChecker
        c = TensorChecker()
        x = dtorch.from_torch(int_valued(4, 3), CPU2, [Shard(0)])
        self.assertTrue(c.equal(x * 2, int_valued(4, 3) * 2))
        self.assertTrue(c.allclose(x + 1e-9, int_valued(4, 3)))
        self.assertTrue(c.meanclose(x, int_valued(4, 3) + 1e-4, rtol=1e-3))
        with self.assertRaises(AssertionError):
            c.equal(x, int_valued(4, 3).double())  # dtype differs
        with self.assertRaises(AssertionError):
            c.allclose(x, int_valued(4, 3) + 1)
        soft = TensorChecker(raise_on_fail=False, name="demo")
        self.assertFalse(soft.meanclose(x, int_valued(4, 3) + 10))
        self.assertFalse(soft.equal([x], [int_valued(4, 4)]))
        self.assertEqual(len(soft.failures), 2)
        self.assertIn("demo", soft.failures[0])

    def test_util_benchmark(self):
        from dtorch.util import Benchmark
        x = dtorch.ones(32, 32)
        with Benchmark("mm") as b:
            y = x @ x
        self.assertGreaterEqual(b.elapsed_ms, 0.0)
        times = Benchmark("add").run(lambda: x + 1, warmup=1, repeat=3)
        self.assertEqual(len(times), 3)
        bench = Benchmark(sync=lambda: None)
        bench.run(lambda: None, warmup=0, repeat=2)
        self.assertGreaterEqual(bench.mean_ms, 0.0)
        with self.assertRaises(ValueError):
            bench.run(lambda: None, repeat=0)
        del y

    def test_test_util_additions(self):
        from dtorch.test.test_util import gen_arg_list, is_graph_satisfy
        self.assertEqual(gen_arg_list(a=[1, 2], b=["x"]), [{"a": 1, "b": "x"}, {"a": 2, "b": "x"}])
        self.assertEqual(gen_arg_list({"a": [1], "b": [2, 3]}), [{"a": 1, "b": 2}, {"a": 1, "b": 3}])
        self.assertEqual(gen_arg_list([1, 2], ["a"]), [(1, "a"), (2, "a")])
        with self.assertRaises(TypeError):
            gen_arg_list(a=3)
        self.assertTrue(is_graph_satisfy(CPU3))
        self.assertEqual(is_graph_satisfy(DeviceMesh("cuda", [0])), torch.cuda.device_count() >= 1)
        self.assertTrue(is_graph_satisfy(CPU2, dtorch.Graph()))


# ------------------------------------------------------------------ graphs


class TestGraphs(unittest.TestCase):
    def test_default_graph_is_an_object(self):
        g = dtorch.Graph.default_graph()
        self.assertFalse(isinstance(dtorch.default_graph, type(lambda: 0)))  # not a function
        self.assertIsInstance(dtorch.default_graph, dtorch.Graph)
        self.assertEqual(dtorch.default_graph.id, g.id)
        self.assertTrue(dtorch.default_graph.satisfy(CPU2))
        dtorch.default_graph.sync()
        f = dtorch.default_graph.sync_future()
        self.assertIsInstance(f, dtorch.VoidFutureCollect)
        self.assertIsNone(f.get())
        dtorch.default_graph.empty_cache()
        self.assertIs(dtorch.ones(1, graph=dtorch.default_graph).graph, g)

    def test_guards_through_the_object(self):
        with dtorch.default_graph.device_mesh_guard(CPU2):
            self.assertEqual(dtorch.default_graph.default_device_mesh, CPU2)
            self.assertEqual(dtorch.get_default_device_mesh(), CPU2)
            self.assertEqual(dtorch.zeros(4).device_mesh, CPU2)
        self.assertIsNone(dtorch.default_graph.default_device_mesh)
        self.assertEqual(dtorch.get_default_device_mesh(), CPU1)
        with dtorch.default_graph.dtype_guard(torch.float64):
            self.assertEqual(dtorch.default_graph.default_dtype, torch.float64)
            self.assertEqual(dtorch.ones(2).dtype, torch.float64)
        self.assertEqual(dtorch.ones(2).dtype, torch.float32)

    def test_each_thread_has_its_own(self):
        main = dtorch.Graph.default_graph()
        seen = {}

        def body():
            seen["graph"] = dtorch.Graph.default_graph()
            seen["id"] = dtorch.default_graph.id
            seen["again"] = dtorch.default_graph() is seen["graph"]
            with dtorch.default_graph.device_mesh_guard(CPU3):
                x = dtorch.ones(3)
                seen["mesh"] = x.device_mesh
                seen["value"] = (x + 1).to_torch()
            seen["tensor_graph"] = x.graph

        th = threading.Thread(target=body)
        th.start()
        th.join(60)
        self.assertIsNot(seen["graph"], main)
        self.assertNotEqual(seen["id"], main.id)
        self.assertTrue(seen["again"])
        self.assertIs(seen["tensor_graph"], seen["graph"])
        self.assertEqual(seen["mesh"], CPU3)
        assert_tensor_equal(self, seen["value"], torch.full((3,), 2.0))
        self.assertIsNone(main.default_device_mesh)  # the other thread's guard did not touch ours

    def test_graph_option(self):
        g = dtorch.Graph(dtorch.GraphOption(per_device_per_process=False))
        x = dtorch.from_torch(int_valued(4, 3), CPU2, [Shard(0)], graph=g)
        assert_tensor_equal(self, x * 2, int_valued(4, 3) * 2)
        self.assertEqual(dtorch.Graph(backend="ref").backend, "ref")
        self.assertEqual(dtorch.Graph(dtorch.GraphOption(backend="ref")).backend, "ref")
        with self.assertRaises(ValueError):  # True runs processes: test_per_process.py
            dtorch.Graph(dtorch.GraphOption(per_device_per_process=True, num_devices=0))
        with self.assertRaises(TypeError):
            dtorch.Graph(3)
        self.assertNotEqual(g.id, dtorch.default_graph.id)
        stats = g.get_memory_stats(CPU2)
        self.assertIn(f"{DEV}:1", stats)
        g.shutdown()

    @cpu_only("CPU2x2 must be a cpu mesh")
    def test_satisfy(self):
        self.assertTrue(dtorch.default_graph.satisfy(CPU2x2))
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        self.assertEqual(dtorch.default_graph.satisfy(DeviceMesh("cuda", [0])), n >= 1)
        self.assertEqual(dtorch.default_graph.satisfy(DeviceMesh("cuda", [0, 1])), n >= 2)
        self.assertFalse(dtorch.Graph(backend="ref").satisfy(DeviceMesh("cuda", [0])))


# ------------------------------------------------------------------ meshes and placements


class TestMeshes(unittest.TestCase):
    @cpu_only("cpu meshes' devices")
    def test_is_distributed_and_devices(self):
        self.assertFalse(CPU1.is_distributed)
        self.assertTrue(CPU2.is_distributed)
        self.assertEqual(CPU1.to_device(), torch.device("cpu"))
        self.assertEqual(DeviceMesh("cuda:1").to_device(), torch.device("cuda", 1))
        with self.assertRaises(ValueError):
            CPU2.to_device()
        self.assertEqual(CPU2x2.first_device(), torch.device("cpu"))
        self.assertEqual(DeviceMesh("cuda", [[3, 1]]).first_device(), torch.device("cuda", 3))

    def test_check_all_dim_names_in_set(self):
        self.assertTrue(CPU2x2.check_all_dim_names_in_set({"dp", "tp", "pp"}))
        self.assertTrue(CPU2x2.check_all_dim_names_in_set(["tp", "dp"]))
        self.assertFalse(CPU2x2.check_all_dim_names_in_set({"tp"}))
        self.assertTrue(DeviceMesh("cpu", [0, 1], mesh_dim_names=("tp",)).check_all_dim_names_in_set("tp"))

    def test_unbind_stages(self):
        mesh = DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("pp", "tp"))
        stages = mesh.unbind("pp")
        self.assertEqual(stages, [DeviceMesh("cpu", [0, 1], mesh_dim_names=("tp",)),
                                  DeviceMesh("cpu", [2, 3], mesh_dim_names=("tp",))])
        self.assertEqual(mesh.unbind(["pp", "tp"]), [DeviceMesh("cpu", [i]) for i in range(4)])
        self.assertEqual(mesh.unbind("absent"), [mesh])


class TestPlacementStrings(unittest.TestCase):
    def test_parse_and_print(self):
        P = dtorch.Placement
        self.assertEqual(P.from_str("S0"), Shard(0))
        self.assertEqual(P.from_str("S-1"), Shard(-1))
        self.assertEqual(P.from_str("S12"), Shard(12))
        self.assertEqual(P.from_str("R"), Replicate())
        self.assertEqual(P.from_str("P"), Partial())
        self.assertEqual([p.to_str() for p in (Shard(1), Replicate(), Partial())], ["S1", "R", "P"])
        self.assertEqual(repr(Shard(0)), "Shard(dim=0)")  # the repr stays torch's
        for bad in ("S", "Shard(0)", "S(0)", "r", "S1-", "S--1", ""):
            with self.assertRaises(ValueError, msg=bad):
                P.from_str(bad)
        with self.assertRaises(TypeError):
            P.from_str(0)
        self.assertEqual(Shard(3).get_shard_index(), 3)
        self.assertTrue(Shard(1).is_shard() and Shard(1).is_shard(1) and not Shard(1).is_shard(0))
        self.assertTrue(Replicate().is_replicate() and Partial().is_partial() and not Partial().is_shard())
        self.assertEqual(pickle.loads(pickle.dumps(Shard(2))), Shard(2))

    def test_strings_wherever_placements_go(self):
        t = int_valued(4, 6)
        x = dtorch.from_torch(t, CPU2x2, ["S0", "R"])
        self.assertEqual(x.placements, [Shard(0), Replicate()])
        assert_tensor_equal(self, x, t)
        y = x.redistribute(placements=["R", "S1"])
        self.assertEqual(y.placements, [Replicate(), Shard(1)])
        assert_tensor_equal(self, y, t)
        self.assertEqual(dtorch.ones(4, 6, device_mesh=CPU2x2, placements=["S-1", "P"]).placements,
                         [Shard(1), Partial()])
        z = dtorch.zeros(4, device_mesh=CPU2, placements=["S0"])
        self.assertEqual(z.placements, [Shard(0)])
        self.assertEqual(x.redistribute(CPU2x2, ["R", "R"]).placements, [Replicate(), Replicate()])
        self.assertEqual(x.redistribute(["S1", "R"]).placements, [Shard(1), Replicate()])  # list alone: placements


# ------------------------------------------------------------------ re-exported torch names


class TestReexports(unittest.TestCase):
    def test_typed_classes(self):
        for name, dtype in TYPED_CLASSES.items():
            cls = getattr(dtorch, name)
            x = dtorch.zeros(2, dtype=dtype)
            self.assertIsInstance(x, cls)
            others = [c for n, c in TYPED_CLASSES.items() if n != name]
            self.assertFalse(any(isinstance(x, getattr(dtorch, n)) for n in TYPED_CLASSES if n != name), others)
            self.assertFalse(isinstance(torch.zeros(2, dtype=dtype), cls))  # dtorch tensors only
            made = cls(2, 3)
            self.assertEqual((made.dtype, made.shape), (dtype, torch.Size([2, 3])))

        def annotated(x: dtorch.FloatTensor) -> dtorch.LongTensor:
            return x.long()

        self.assertIsInstance(annotated(dtorch.ones(2)), dtorch.LongTensor)
        self.assertTrue(issubclass(dtorch.FloatTensor, dtorch.FloatTensor))

    def test_from_numpy(self):
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        x = dtorch.from_numpy(a)
        self.assertIsInstance(x, dtorch.Tensor)
        self.assertEqual(x.device_mesh, dtorch.get_default_device_mesh())
        assert_tensor_equal(self, x, torch.from_numpy(a))
        a[0, 0] = 100.0  # copied at the call
        self.assertEqual(x[0, 0].item(), 0.0)
        y = dtorch.from_numpy(np.arange(6).reshape(2, 3), CPU2, [Shard(1)])
        assert_tensor_equal(self, y, torch.arange(6).reshape(2, 3))
        self.assertEqual(y.placements, [Shard(1)])
        with dtorch.default_graph.device_mesh_guard(CPU3):
            self.assertEqual(dtorch.from_numpy(np.ones(3)).device_mesh, CPU3)

    @cpu_only("compares devices with the host's")
    def test_torch_types(self):
        self.assertEqual(dtorch.finfo(dtorch.float16).max, torch.finfo(torch.float16).max)
        self.assertEqual(dtorch.iinfo(dtorch.int8).min, -128)
        self.assertEqual(dtorch.ones(dtorch.Size([2, 3])).shape, dtorch.Size([2, 3]))
        g = dtorch.Generator().manual_seed(0)
        ref = torch.rand(3, generator=torch.Generator().manual_seed(0))
        assert_tensor_equal(self, dtorch.rand(3, generator=g), ref)
        self.assertEqual(dtorch.ones(1).device, dtorch.device("cpu"))
        self.assertIsInstance(dtorch.float32, dtorch.dtype)


# ------------------------------------------------------------------ top-level functions


class TestTopLevelFunctions(unittest.TestCase):
    def test_nn_forms_one_device(self):
        t = randn(2, 4, 5, 5)
        x = dtorch.from_torch(t)
        assert_tensor_equal(self, dtorch.relu(x), torch.relu(t))
        assert_tensor_equal(self, dtorch.softmax(x, -1), torch.softmax(t, -1))
        assert_tensor_equal(self, dtorch.softmax(x, 1, dtype=torch.float64), torch.softmax(t, 1, dtype=torch.float64))
        assert_tensor_equal(self, dtorch.log_softmax(x, 2), torch.log_softmax(t, 2))
        w, b = randn(4, seed=1), randn(4, seed=2)
        mean, var = randn(4, seed=3), randn(4, seed=4).abs() + 0.5
        assert_tensor_allclose(self, dtorch.batch_norm(x, dtorch.from_torch(w), dtorch.from_torch(b),
                                                       dtorch.from_torch(mean), dtorch.from_torch(var), False, 0.1,
                                                       1e-5, True),
                               torch.batch_norm(t, w, b, mean, var, False, 0.1, 1e-5, True), rtol=1e-5, atol=1e-6)
        k = randn(3, 4, 3, 3, seed=5)
        assert_tensor_allclose(self, dtorch.conv2d(x, dtorch.from_torch(k), None, 1, 1),
                               torch.conv2d(t, k, None, 1, 1), rtol=1e-4, atol=1e-5)
        assert_tensor_equal(self, dtorch.dropout(x, 0.5, False), torch.dropout(t, 0.5, False))
        weight = randn(10, 3, seed=6)
        ids = torch.tensor([[1, 9], [0, 4]])
        assert_tensor_equal(self, dtorch.embedding(dtorch.from_torch(weight), dtorch.from_torch(ids)),
                            torch.embedding(weight, ids))
        # nn.functional's order (indices first) reads the same.
        assert_tensor_equal(self, dtorch.embedding(dtorch.from_torch(ids), dtorch.from_torch(weight)),
                            torch.embedding(weight, ids))
        assert_tensor_allclose(self, dtorch.group_norm(x, 2, dtorch.from_torch(w), dtorch.from_torch(b)),
                               torch.group_norm(t, 2, w, b), rtol=1e-5, atol=1e-6)
        assert_tensor_allclose(self, dtorch.layer_norm(x, (5,)), torch.layer_norm(t, (5,)), rtol=1e-5, atol=1e-6)
        assert_tensor_allclose(self, dtorch.rms_norm(x, [5, 5], eps=1e-6), torch.rms_norm(t, [5, 5], eps=1e-6),
                               rtol=1e-5, atol=1e-6)

    def test_nn_forms_sharded(self):
        t = randn(4, 6, 3)
        ref = torch.softmax(torch.relu(t), -1)
        for mesh, pl in ((CPU2, [Shard(0)]), (CPU3, [Shard(1)]), (CPU2x2, [Shard(0), Shard(1)])):
            x = dtorch.from_torch(t, mesh, pl)
            y = dtorch.softmax(dtorch.relu(x), -1)
            self.assertEqual(y.placements, x.placements)
            assert_tensor_equal(self, y, ref)
            assert_tensor_allclose(self, dtorch.layer_norm(x, (3,)), torch.layer_norm(t, (3,)), rtol=1e-5, atol=1e-6)

    def test_equal_is_a_bool(self):
        t = int_valued(5, 3)
        a = dtorch.from_torch(t, CPU3, [Shard(0)])
        self.assertIs(dtorch.equal(a, dtorch.from_torch(t, CPU3, [Shard(1)])), True)
        self.assertIs(dtorch.equal(a, dtorch.from_torch(t + 1, CPU3)), False)
        self.assertIs(dtorch.equal(a, dtorch.from_torch(t[:4], CPU3)), False)
        self.assertIs(a.equal(a), True)

    def test_method_forms(self):
        t = int_valued(3, 4)
        x = dtorch.from_torch(t, CPU2, [Shard(1)])
        self.assertEqual(dtorch.numel(x), torch.numel(t))
        assert_tensor_equal(self, dtorch.t(x), torch.t(t))
        assert_tensor_equal(self, dtorch.clamp_min(x, 0.0), torch.clamp_min(t, 0.0))
        self.assertTrue(dtorch.is_floating_point(x))
        y = dtorch.from_torch(t.clone(), CPU2, [Shard(1)])
        self.assertIs(dtorch.exp_(y), y)
        assert_tensor_equal(self, y, torch.exp(t))
        with self.assertRaises(TypeError):
            dtorch.numel(t)


# ------------------------------------------------------------------ Tensor


class TestTensorCompat(unittest.TestCase):
    def test_constructors(self):
        for args, ref in (((), torch.Tensor()), ((2, 3), torch.Tensor(2, 3)),
                          ((torch.Size([4, 1]),), torch.Tensor(torch.Size([4, 1])))):
            x = dtorch.Tensor(*args)
            self.assertEqual((x.shape, x.dtype), (ref.shape, ref.dtype))
        t = int_valued(4, 3)
        assert_tensor_equal(self, dtorch.Tensor(t), t)
        x = dtorch.Tensor(t, device="cpu")
        self.assertEqual(x.device_mesh, CPU1)
        x = dtorch.Tensor(t, device_mesh=CPU2, placements=[Shard(0)])
        self.assertEqual((x.device_mesh, x.placements), (CPU2, [Shard(0)]))
        g = dtorch.Graph()
        self.assertIs(dtorch.Tensor(t, graph=g).graph, g)
        self.assertIs(dtorch.Tensor(t).graph, dtorch.Graph.default_graph())

    def test_data(self):
        x = dtorch.from_torch(int_valued(4, 3), CPU2, [Shard(0)])
        alias = x
        d = x.data
        self.assertIsNot(d, x)
        assert_tensor_equal(self, d, int_valued(4, 3))
        new = dtorch.zeros(5, dtype=torch.int64)
        x.data = new
        self.assertIs(alias, x)
        assert_tensor_equal(self, alias, torch.zeros(5, dtype=torch.int64))
        self.assertEqual(x.device_mesh, CPU1)
        assert_tensor_equal(self, d, int_valued(4, 3))  # the earlier .data keeps its value
        with self.assertRaises(TypeError):
            x.data = torch.zeros(2)
        with self.assertRaises(ValueError):
            x.data = dtorch.ones(2, graph=dtorch.Graph())  # another graph

    def test_check_placement(self):
        x = dtorch.ones(4, 6, device_mesh=CPU2x2, placements=[Shard(0), Replicate()])
        self.assertTrue(x.check_placement(0, Shard(0)))
        self.assertTrue(x.check_placement("dp", "S0"))
        self.assertTrue(x.check_placement("dp", Shard(-2)))
        self.assertFalse(x.check_placement("tp", Shard(0)))
        self.assertTrue(x.check_placement(-1, "R"))
        self.assertTrue(x.check_placement("pp", "R"))  # a dim the mesh lacks holds everything
        self.assertFalse(x.check_placement("pp", "S0"))
        with self.assertRaises(IndexError):
            x.check_placement(2, "R")

    def test_devices_and_casts(self):
        t = randn(3, 4)
        x = dtorch.from_torch(t, CPU2, [Shard(1)])
        self.assertIs(x.cpu(), x)
        self.assertIsNot(x.detach(), x)
        assert_tensor_equal(self, x.detach(), t)
        self.assertTrue(x.is_contiguous() and x.transpose(0, 1).is_contiguous())
        if not torch.cuda.is_available():
            with self.assertRaisesRegex(RuntimeError, "cuda"):
                x.cuda()
            with self.assertRaisesRegex(RuntimeError, "cuda"):
                dtorch.from_torch(t).cuda(0)
        self.assertEqual(x.type(), t.type())
        for dtype in (torch.float16, torch.bfloat16, torch.float64, torch.int32, torch.int64, torch.bool,
                      torch.uint8, torch.int8, torch.int16):
            self.assertEqual(dtorch.zeros(1, dtype=dtype).type(), torch.zeros(1, dtype=dtype).type())
        assert_tensor_equal(self, x.type(torch.float64), t.type(torch.float64))
        assert_tensor_equal(self, x.type("torch.IntTensor"), t.type("torch.IntTensor"))
        assert_tensor_equal(self, x.type(dtorch.HalfTensor), t.half())
        assert_tensor_equal(self, x.type(torch.DoubleTensor), t.double())
        with self.assertRaises(ValueError):
            x.type("torch.NoSuchTensor")
        assert_tensor_equal(self, x.type_as(dtorch.ones(1, dtype=torch.int64)), t.type_as(torch.ones(1).long()))
        for cast in ("half", "bfloat16", "float", "double", "bool", "byte", "char", "short", "int", "long"):
            assert_tensor_equal(self, getattr(x, cast)(), getattr(t, cast)())
            self.assertEqual(getattr(x, cast)().placements, [Shard(1)])

    def test_values_and_views(self):
        t = int_valued(2, 3)
        for mesh, pl in ((CPU1, [Replicate()]), (CPU2, [Shard(1)]), (CPU3, [Shard(1)])):
            x = dtorch.from_torch(t, mesh, pl)
            self.assertEqual(x.tolist(), t.tolist())
            np.testing.assert_array_equal(x.numpy(), t.numpy())
            self.assertEqual(x.redistribute(placements=[Replicate()])[1, 2].item(), t[1, 2].item())
            self.assertEqual(x.sum().item(), t.sum().item())
            assert_tensor_equal(self, x.clone(), t.clone())
            assert_tensor_equal(self, x.contiguous(), t)
            assert_tensor_equal(self, x.expand(4, 2, 3), t.expand(4, 2, 3))
            assert_tensor_equal(self, x.repeat(2, 1), t.repeat(2, 1))  # the sharded dim 1 repeated once
            assert_tensor_equal(self, x.repeat(3, 2, 1), t.repeat(3, 2, 1))
            y = dtorch.zeros(2, 3, device_mesh=mesh, placements=pl)
            self.assertIs(y.copy_(x), y)
            assert_tensor_equal(self, y, t)
            z = x.clone()
            z.masked_fill_(z > 0, -1.0)
            assert_tensor_equal(self, z, t.masked_fill(t > 0, -1.0))
        assert_tensor_equal(self, dtorch.from_torch(t).view(3, 2), t.view(3, 2))

    def test_getitem_several_tensor_indices(self):
        t = int_valued(4, 5, 6)
        keys = [
            (torch.tensor([0, 3, -1]), torch.tensor([4, 0, 2])),                    # adjacent, in place
            (slice(None), torch.tensor([[0], [4]]), torch.tensor([1, 5])),          # broadcast 2x2
            (torch.tensor([1, 2]), slice(1, 4), torch.tensor([0, 5])),              # split: to the front
            (torch.tensor([True, False, True, True]), torch.tensor([0, 1, 2])),     # bool mask + long
            (Ellipsis, torch.tensor([0, 4]), torch.tensor(3)),                      # 0-d index
            (None, torch.tensor([1]), torch.tensor([2, 3]), 0),
        ]
        for mesh, pl in ((CPU1, [Replicate()]), (CPU2, [Replicate()]), (CPU3, [Replicate()])):
            x = dtorch.from_torch(t, mesh, pl)
            for key in keys:
                with self.subTest(mesh=mesh, key=key):
                    assert_tensor_equal(self, x[key], t[key])
                    dkey = tuple(dtorch.from_torch(k, mesh) if isinstance(k, torch.Tensor) else k for k in key)
                    assert_tensor_equal(self, x[dkey], t[key])
        # The dims not indexed keep their shards.
        x = dtorch.from_torch(t, CPU2, [Shard(2)])
        y = x[torch.tensor([0, 1]), torch.tensor([2, 3])]
        self.assertEqual(y.placements, [Shard(1)])
        assert_tensor_equal(self, y, t[torch.tensor([0, 1]), torch.tensor([2, 3])])
        with self.assertRaises(IndexError):
            x[torch.tensor([0, 9]), torch.tensor([1, 1])]
        with self.assertRaises(IndexError):
            x[torch.tensor([0, 1]), torch.tensor([1, 1, 1])]

    def test_setitem_several_tensor_indices(self):
        t = int_valued(4, 5, 3)
        # (key, the dim a mesh may shard: one that is not indexed)
        keys = [((torch.tensor([0, 3]), torch.tensor([4, 1])), 2),
                ((torch.tensor([1, 2]), slice(None), torch.tensor([0, -1])), 1),
                ((torch.tensor([[True, False, False, True, False]] * 4),), 2)]
        for key, free in keys:
            ref = t.clone()
            ref[key] = 7.0
            for mesh, pl in ((CPU1, [Replicate()]), (CPU2, [Shard(free)]), (CPU3, [Shard(free)])):
                with self.subTest(key=key, mesh=mesh):
                    x = dtorch.from_torch(t, mesh, pl)
                    x[key] = 7.0
                    assert_tensor_equal(self, x, ref)
                    self.assertEqual(x.placements, pl)
                    dkey = tuple(dtorch.from_torch(k, mesh) if isinstance(k, torch.Tensor) else k for k in key)
                    y = dtorch.from_torch(t, mesh, pl)
                    y[dkey] = 7.0
                    assert_tensor_equal(self, y, ref)

    def test_redistribute_forms(self):
        t = int_valued(4, 6)
        x = dtorch.from_torch(t, CPU2x2, [Shard(0), Replicate()])
        y = x.redistribute(CPU2x2, [Replicate(), Shard(1)])
        self.assertEqual(y.placements, [Replicate(), Shard(1)])
        assert_tensor_equal(self, y, t)
        other = dtorch.zeros(4, 6, device_mesh=CPU3, placements=[Shard(1)])
        z = x.redistribute_like(other)
        self.assertEqual((z.device_mesh, z.placements), (CPU3, [Shard(1)]))
        assert_tensor_equal(self, z, t)


class TestRedistributeByDict(unittest.TestCase):
    def setUp(self):
        self.t = int_valued(4, 6)
        self.x = dtorch.from_torch(self.t, CPU2x2, [Shard(0), Replicate()])

    def test_mesh_first_and_dict_first(self):
        for y in (self.x.redistribute_by_dict(CPU2x2, {"dp": Replicate(), "tp": Shard(1)}),
                  self.x.redistribute_by_dict(device_mesh=CPU2x2, placements_dict={"dp": "R", "tp": "S1"}),
                  self.x.redistribute_by_dict({"dp": Replicate(), "tp": Shard(1)}),
                  self.x.redistribute_by_dict({0: "R", 1: "S1"}, CPU2x2),
                  self.x.redistribute_by_dict(None, {"tp": "S1"}, default_placement_mode="replicate")):
            self.assertEqual(y.placements, [Replicate(), Shard(1)])
            assert_tensor_equal(self, y, self.t)
        y = self.x.redistribute_by_dict(CPU2x2, {"tp": Shard(1), "absent": Shard(0)}, default_placement_mode="keep")
        self.assertEqual(y.placements, [Shard(0), Shard(1)])
        with self.assertRaises(ValueError):
            self.x.redistribute_by_dict(CPU2x2, {"tp": Shard(1)})

    def test_one_device_meshes_are_replicate(self):
        mesh = DeviceMesh("cpu", [0, 1], mesh_dim_names=("pp",))
        stages = mesh.unbind("pp")
        x = dtorch.from_torch(self.t, stages[0])
        for stage in stages:
            y = x.redistribute_by_dict(stage, {"tp": Shard(0)})  # no "tp": one device, Replicate
            self.assertEqual((y.device_mesh, y.placements), (stage, [Replicate()]))
            assert_tensor_equal(self, y, self.t)
        # pp x tp: the stages keep tp.
        pp_tp = DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("pp", "tp"))
        for stage in pp_tp.unbind("pp"):
            y = self.x.redistribute_by_dict(stage, {"pp": Shard(1), "tp": Shard(1)})
            self.assertEqual((y.device_mesh, y.placements), (stage, [Shard(1)]))
            assert_tensor_equal(self, y, self.t)
        # A size-1 mesh dim needs no name either.
        m = DeviceMesh("cpu", [[0, 1]], mesh_dim_names=("dp", "tp"))
        y = self.x.redistribute_by_dict(m, {"tp": "S1"})
        self.assertEqual(y.placements, [Replicate(), Shard(1)])
        assert_tensor_equal(self, y, self.t)

    def test_shard_of_size_one_becomes_replicate(self):
        t = int_valued(1, 6)
        x = dtorch.from_torch(t, CPU2)
        y = x.redistribute_by_dict(CPU2, {"dim0": Shard(0)})
        self.assertEqual(y.placements, [Replicate()])
        y = x.redistribute_by_dict(CPU2, {"dim0": Shard(0)}, convert_shard_size_one_to_replicate=False)
        self.assertEqual(y.placements, [Shard(0)])
        assert_tensor_equal(self, y, t)
        y = x.redistribute_by_dict(CPU2, {"dim0": Shard(-1)})
        self.assertEqual(y.placements, [Shard(1)])

    def test_uneven_shards(self):
        t = int_valued(5, 7)
        x = dtorch.from_torch(t, CPU3, [Shard(0)])
        y = x.redistribute_by_dict(CPU3, {0: Shard(1)})
        self.assertEqual(y.placements, [Shard(1)])
        assert_tensor_equal(self, y, t)

    def test_tensors_redistribute_by_dict(self):
        a = dtorch.from_torch(self.t, CPU2x2)
        b = dtorch.from_torch(self.t * 2, CPU2x2, ["S0", "S1"])
        out = dtorch.tensors_redistribute_by_dict([a, b, None, 3], CPU2x2, {"dp": "S0", "tp": "R"})
        self.assertEqual([o.placements for o in out[:2]], [[Shard(0), Replicate()]] * 2)
        self.assertEqual(out[2:], [None, 3])
        assert_tensor_equal(self, out[1], self.t * 2)
        tup = dtorch.tensors_redistribute_by_dict((a, b), {"dp": "R", "tp": "S1"})
        self.assertIsInstance(tup, tuple)
        self.assertEqual(tup[0].placements, [Replicate(), Shard(1)])
        d = dtorch.tensors_redistribute_by_dict({"k": a}, CPU2x2, {"tp": "S0"}, default_placement_mode="replicate")
        self.assertEqual(d["k"].placements, [Replicate(), Shard(0)])
        one = dtorch.tensors_redistribute_by_dict(a, CPU2x2, {"dp": "R", "tp": "R"})
        self.assertIsInstance(one, dtorch.Tensor)


if __name__ == "__main__":
    unittest.main()
