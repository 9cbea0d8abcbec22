"""Quick smoke runs of benchmark scripts at tiny sizes on the host (skipped when what they compare
against is missing): they print their figure lines and their outputs match eager torch."""

import contextlib
import importlib.util
import io
import os
import types
import unittest

import torch

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")


@contextlib.contextmanager
def torch_threads_kept():
    """Restores torch's intra-op thread count after a bench's main() (bench/scale.py and threads.py
    set one thread): later tests in this process compare graphs whose workers follow it with worker
    processes that keep their own (test_per_process.py), and on some CPUs a GEMM's bits depend on
    how many threads share it."""
    n = torch.get_num_threads()
    try:
        yield
    finally:
        torch.set_num_threads(n)


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", os.path.join(BENCH, name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


try:
    import diffusers  # noqa: F401
except ImportError:
    diffusers = None


@unittest.skipIf(diffusers is None, "needs diffusers (the eager SD3 transformer)")
class TestSd3Medium(unittest.TestCase):
    def test_tiny_cpu_figures(self):
        bench = load("sd3_medium")
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = bench.main(["--tiny", "--device", "cpu", "--steps", "1", "--repeat", "1"])
        text = out.getvalue()
        self.assertEqual(rc, 0, text)
        for figure in ("time", "client", "memory", "diff"):
            self.assertRegex(text, rf"(?m)^sd3m {figure} *: .*\d", text)
        self.assertIn("allclose(rtol=atol=0.0001) True", text)

    def test_tiny_cpu_two_steps_equal_diffusers(self):
        # One device, float32: the denoised latents are bit-identical to diffusers' eager module.
        bench = load("sd3_medium")
        b = bench.build(types.SimpleNamespace(tiny=True, device="cpu", steps=2, seed=3))
        _, want = bench.run_torch(b, "cpu")
        _, _, got = bench.run_dtorch(b)
        self.assertEqual(got.shape, (1, 16, 32, 32))
        self.assertGreater(float(want.abs().max()), 0.1)  # a genuine output, not zeros
        self.assertTrue(torch.equal(got, want), f"max |diff| {float((got - want).abs().max()):.3e}")


class TestScale(unittest.TestCase):
    def test_tiny_figures_and_tokens(self):
        # bench/scale.py imports its neighbours (threads.py, llama.py) as bench/ scripts do.
        import sys

        try:
            import transformers  # noqa: F401
        except ImportError:
            self.skipTest("needs transformers (the eager Llama)")
        sys.path.insert(0, BENCH)
        try:
            bench = load("scale")
            out = io.StringIO()
            with contextlib.redirect_stdout(out), torch_threads_kept():
                rc = bench.main(["--n", "200", "--repeat", "1", "--devices", "1", "2", "--tp", "1", "2",
                                 "--long", "4", "--short", "2"])
        finally:
            sys.path.remove(BENCH)
        text = out.getvalue()
        self.assertEqual(rc, 0, text)
        for ndev in ("1 device ", "2 devices"):
            self.assertRegex(text, rf"(?m)^ +{ndev}: client +\d+ +controller +\d+ +workers +\d+ +ns/op", text)
        for tp in (1, 2):  # the decoded tokens are transformers' on each mesh
            self.assertRegex(text, rf"(?m)^ +tp{tp}: .*tokens equal: True$", text)
        # Per token is (long run - short run) / tokens: at these sizes the difference is noise and
        # may come out negative (a CI run printed x-3.56); the format is what is checked here.
        self.assertRegex(text, r"(?m)^ +controller growth over tp1: x 1.00 x *-?\d", text)


def run_bench(name, argv):
    """bench/<name>.py's main(argv) with its output captured: (rc, text). bench/ scripts import their
    neighbours (local_map.py's helpers), as they do when run from there."""
    import sys

    out = io.StringIO()
    sys.path.insert(0, BENCH)
    try:
        with contextlib.redirect_stdout(out), torch_threads_kept():
            rc = load(name).main(argv)
    finally:
        sys.path.remove(BENCH)
    return rc, out.getvalue()


class TestIssue31Benches(unittest.TestCase):
    """Issue 31's figures (docs/benchmarks.md): each script runs at tiny sizes, checks its own
    results against torch (the scripts assert it) and prints its figure lines."""

    def test_local_map(self):
        rc, text = run_bench("local_map", ["--numel", "64", "--steps", "10", "--repeat", "1", "--devices", "1", "2"])
        self.assertEqual(rc, 0, text)
        for n in (1, 2):
            self.assertRegex(text, rf"(?m)^{n} device\(s\): builtin +\d+ ns/op \| local_map +\d+ ns/op .*eager torch",
                             text)

    @unittest.skipIf(os.environ.get("DTORCH_SKIP_COMPILE") == "1", "DTORCH_SKIP_COMPILE=1: torch.compile skipped")
    def test_compiled_op(self):
        rc, text = run_bench("compiled_op", ["--tokens", "16", "--dim", "16", "--steps", "1", "--repeat", "1",
                                             "--no-sd3"])
        self.assertEqual(rc, 0, text)  # the script asserts dtorch eager bit-identical to torch eager
        for op in ("apply_rotary_emb", "silu_linear_chunk", "layer_norm_mul_add"):
            self.assertRegex(text, rf"(?m)^{op} +\d+\.\d+ +\d+\.\d+ +\d+\.\d+ +\d+\.\d+ ", text)

    def test_per_process(self):
        from dtorch import _C
        if not _C._cluster_info()["available"]:
            self.skipTest("built without ZeroMQ")
        rc, text = run_bench("per_process", ["--numel", "64", "--dim", "16", "--steps", "5", "--repeat", "1"])
        self.assertEqual(rc, 0, text)  # the script asserts the processes' results equal the threads'
        for n in (1, 2):
            for kind in ("tiny", "matmul"):
                self.assertRegex(text, rf"(?m)^{n} device\(s\) {kind} +: threads +\d+ ns/op \| processes +\d+ ns/op",
                                 text)


if __name__ == "__main__":
    unittest.main()


class TestCudaGraph(unittest.TestCase):
    def test_tiny_decode_graphs_on_and_off(self):
        # bench/cuda_graph.py on the CPU: the graphs are the backend's emulation; the tokens with
        # graphs on must equal graphs off and transformers' on 1 and 2 devices, with slots launched.
        try:
            import transformers  # noqa: F401
        except ImportError:
            self.skipTest("needs transformers (the eager Llama)")
        rc, text = run_bench("cuda_graph", ["--device", "cpu", "--long", "6", "--short", "2", "--repeat", "1",
                                            "--tp", "2", "--hidden", "64", "--vocab", "128"])
        self.assertEqual(rc, 0, text)
        for label in ("G1 1 device", "G2 tp2"):
            self.assertRegex(text, rf"(?m)^{label}: torch +[-\d.]+ us/token +graphs off +[-\d.]+ +graphs on ", text)
            self.assertRegex(text, rf"(?m)^{label}: captured \d+ launched [1-9]\d* eager \d+; tokens on == off: "
                                   r"True, on == transformers: True$", text)
