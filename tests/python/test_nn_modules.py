"""dtorch.nn modules against torch.nn: names, state dicts, load_state_dict onto meshes and placements,
and outputs equal to the torch model's on the same inputs."""

import itertools
import unittest
from collections import OrderedDict

import torch
import torch.nn.functional as TF

import dtorch
import dtorch.nn.functional as F
from dtorch import Partial, Replicate, Shard, nn
# Every dtorch result is also checked on every replica (helpers.assert_*_everywhere).

from helpers import CPU1, CPU2, CPU2x2, randn
from helpers import assert_close_everywhere as assert_tensor_allclose
from helpers import assert_equal_everywhere as assert_tensor_equal
from test_nn_functional import ref_rms_norm

# The modules run the functional ops that test_nn_functional.py claims; no operator of their own.
TESTED_OPS = set()

R, P = Replicate(), Partial()
TP2 = dtorch.DeviceMesh("cpu", [0, 1], mesh_dim_names=("tp",))


class DBlock(nn.Module):
    """A dtorch module with parameters, a persistent and a non-persistent buffer, and children."""

    def __init__(self, mesh=None):
        super().__init__()
        self.norm = nn.LayerNorm(6, device_mesh=mesh)
        self.layers = nn.ModuleList([nn.GroupNorm(2, 4, device_mesh=mesh), nn.SiLU()])
        self.scale = nn.Parameter(torch.full((6,), 2.0), device_mesh=mesh or CPU1)
        self.register_buffer("shift", dtorch.zeros(6, device_mesh=mesh or CPU1))
        self.register_buffer("cache", dtorch.ones(1, device_mesh=mesh or CPU1), persistent=False)

    def forward(self, x):
        return self.norm(x)


class TBlock(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(6)
        self.layers = torch.nn.ModuleList([torch.nn.GroupNorm(2, 4), torch.nn.SiLU()])
        self.scale = torch.nn.Parameter(torch.full((6,), 2.0))
        self.register_buffer("shift", torch.zeros(6))
        self.register_buffer("cache", torch.ones(1), persistent=False)


def randomize(model):
    """Non-trivial parameter values in a torch model, deterministically."""
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))
    return model


class TestModuleBasics(unittest.TestCase):
    def test_names_match_torch(self):
        d, t = DBlock(), TBlock()
        self.assertEqual([n for n, _ in d.named_parameters()], [n for n, _ in t.named_parameters()])
        self.assertEqual([n for n, _ in d.named_buffers()], [n for n, _ in t.named_buffers()])
        self.assertEqual(list(d.state_dict()), list(t.state_dict()))
        self.assertEqual([n for n, _ in d.named_modules()], [n for n, _ in t.named_modules()])
        self.assertEqual([n for n, _ in d.named_children()], [n for n, _ in t.named_children()])
        self.assertEqual(len(list(d.parameters())), len(list(t.parameters())))
        self.assertTrue(all(isinstance(p, nn.Parameter) and isinstance(p, dtorch.Tensor) for p in d.parameters()))
        self.assertIs(d.layers[0].weight, d.state_dict()["layers.0.weight"])

    def test_attributes(self):
        d = DBlock()
        with self.assertRaises(AttributeError):
            d.missing
        with self.assertRaises(TypeError):
            d.scale = dtorch.ones(6)  # a parameter slot takes a Parameter
        with self.assertRaises(TypeError):
            d.norm = 3
        with self.assertRaises(TypeError):
            d.shift = torch.zeros(6)
        d.scale = None
        self.assertNotIn("scale", d.state_dict())
        d.extra = nn.ReLU()
        self.assertIn("extra", dict(d.named_children()))
        del d.extra
        self.assertNotIn("extra", dict(d.named_children()))

        class NoInit(nn.Module):
            def __init__(self):
                self.w = nn.Parameter(torch.ones(1))

        with self.assertRaises(AttributeError):
            NoInit()
        with self.assertRaises(NotImplementedError):
            nn.Module()(1)

    def test_train_eval_and_repr(self):
        d = DBlock()
        self.assertFalse(any(m.training for m in d.modules()))  # inference first: eval mode by default
        self.assertIs(d.train(), d)
        self.assertTrue(all(m.training for m in d.modules()))
        d.eval()
        self.assertFalse(d.layers[1].training)
        r = repr(d)
        # torch's own reprs (2.13 shows bias=, 2.11 does not)
        self.assertIn(f"(norm): {torch.nn.LayerNorm(6)!r}", r)
        self.assertIn(f"(0): {torch.nn.GroupNorm(2, 4)!r}", r)
        self.assertEqual(repr(nn.GELU("tanh")), "GELU(approximate='tanh')")

    def test_parameter(self):
        p = nn.Parameter(torch.arange(6.0).reshape(2, 3), device_mesh=CPU2, placements=[Shard(1)])
        self.assertIsInstance(p, nn.Parameter)
        self.assertEqual(p.placements, [Shard(1)])
        assert_tensor_equal(self, p, torch.arange(6.0).reshape(2, 3))
        x = dtorch.ones(2, 2)
        q = nn.Parameter(x)
        assert_tensor_equal(self, q, x)
        self.assertTrue(repr(q).startswith("Parameter containing:"))
        self.assertFalse(q.requires_grad)
        with self.assertRaises(TypeError):
            nn.Parameter([1.0])

    def test_containers(self):
        ml = nn.ModuleList([nn.ReLU(), nn.SiLU()])
        ml.append(nn.Tanh())
        ml.extend([nn.Sigmoid()])
        ml.insert(1, nn.Identity())
        self.assertEqual([type(m).__name__ for m in ml], ["ReLU", "Identity", "SiLU", "Tanh", "Sigmoid"])
        self.assertEqual(len(ml), 5)
        self.assertIsInstance(ml[-1], nn.Sigmoid)
        self.assertEqual(len(ml[1:3]), 2)
        del ml[0]
        self.assertEqual([n for n, _ in ml.named_children()], ["0", "1", "2", "3"])
        with self.assertRaises(IndexError):
            ml[4]
        seq = nn.Sequential(OrderedDict([("act", nn.ReLU()), ("out", nn.Tanh())]))
        self.assertEqual([n for n, _ in seq.named_children()], ["act", "out"])
        self.assertIsInstance(seq[1], nn.Tanh)
        self.assertEqual(len(seq[:1]), 1)
        x = randn(3, 4)
        assert_tensor_equal(self, seq(dtorch.from_torch(x)), torch.tanh(torch.relu(x)))


class TestLoadStateDict(unittest.TestCase):
    def cnn(self, lib, **kw):
        if lib is torch.nn:
            return torch.nn.Sequential(
                torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.GroupNorm(2, 8), torch.nn.SiLU(),
                torch.nn.Conv2d(8, 6, 3, stride=2, padding=1, padding_mode="reflect", bias=False),
                torch.nn.GELU(approximate="tanh"), torch.nn.Conv2d(6, 4, 1, groups=2), torch.nn.Dropout(0.3))
        return nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, **kw), nn.GroupNorm(2, 8, **kw), nn.SiLU(),
            nn.Conv2d(8, 6, 3, stride=2, padding=1, padding_mode="reflect", bias=False, **kw),
            nn.GELU(approximate="tanh"), nn.Conv2d(6, 4, 1, groups=2, **kw), nn.Dropout(0.3))

    def test_cnn_one_device_exact(self):
        t = randomize(self.cnn(torch.nn)).eval()
        d = self.cnn(nn).eval()
        keys = d.load_state_dict(t.state_dict())
        self.assertEqual((keys.missing_keys, keys.unexpected_keys), ([], []))
        x = randn(2, 3, 9, 7)
        with torch.no_grad():
            assert_tensor_equal(self, d(dtorch.from_torch(x)), t(x))

    def test_cnn_on_meshes(self):
        t = randomize(self.cnn(torch.nn)).eval()
        x = randn(4, 3, 9, 7)
        with torch.no_grad():
            expected = t(x)
        for mesh, xpl in ((CPU2, [Shard(0)]), (CPU2x2, [Shard(0), R])):
            with self.subTest(mesh=mesh.shape):
                d = self.cnn(nn, device_mesh=mesh).eval()
                d.load_state_dict(t.state_dict())
                self.assertEqual(d[0].weight.device_mesh, mesh)
                out = d(dtorch.from_torch(x, mesh, xpl))
                self.assertEqual(out.placements, xpl)
                assert_tensor_allclose(self, out, expected, rtol=1e-4, atol=1e-5)
        # Output channels sharded on "tp" (weight and bias Shard(0)).
        conv = nn.Conv2d(3, 8, 3, padding=1, device_mesh=CPU2x2, tp_dim="tp")
        tconv = randomize(torch.nn.Conv2d(3, 8, 3, padding=1))
        conv.load_state_dict(tconv.state_dict())
        self.assertEqual(conv.weight.placements, [R, Shard(0)])
        out = conv(dtorch.from_torch(x, CPU2x2, [Shard(0), R]))
        self.assertEqual(out.placements, [Shard(0), Shard(1)])
        with torch.no_grad():
            assert_tensor_allclose(self, out, tconv(x), rtol=1e-4, atol=1e-5)

    def test_embedding_and_norms(self):
        temb = randomize(torch.nn.Embedding(13, 6, padding_idx=2))
        tln = randomize(torch.nn.LayerNorm(6))
        ids = torch.tensor([[0, 12, 2, 5], [7, 7, 1, 11]])
        with torch.no_grad():
            h = tln(temb(ids))
        rms_w = randn(6, seed=9)
        expected = ref_rms_norm(TF.gelu(h), (6,), rms_w, 1e-6)
        for mesh, ipl in ((CPU1, [R]), (TP2, [R]), (CPU2x2, [Shard(0), R])):
            with self.subTest(mesh=mesh.shape, names=mesh.dim_names):
                emb = nn.Embedding(13, 6, padding_idx=2, device_mesh=mesh)
                ln = nn.LayerNorm(6, device_mesh=mesh)
                rms = nn.RMSNorm(6, eps=1e-6, device_mesh=mesh)
                emb.load_state_dict(temb.state_dict())
                ln.load_state_dict(tln.state_dict())
                rms.load_state_dict({"weight": rms_w})
                e = emb(dtorch.from_torch(ids, mesh, ipl))
                tp = mesh.has_dim_name("tp")
                self.assertEqual(emb.weight.placements[-1], Shard(1) if tp else R)  # embedding dim on "tp"
                self.assertEqual(e.placements[-1], Shard(2) if tp else R)
                assert_tensor_equal(self, e, temb(ids).detach())
                e = e.redistribute(placements=[R if p == Shard(2) else p for p in e.placements])
                out = rms(F.gelu(ln(e)))
                if mesh is CPU1:
                    assert_tensor_equal(self, out, expected)
                else:
                    assert_tensor_allclose(self, out, expected, rtol=1e-5, atol=1e-6)
        emb = nn.EmbeddingWithReplicateOutput(13, 6, device_mesh=CPU2x2)
        emb.load_state_dict(temb.state_dict())
        out = emb(dtorch.from_torch(ids, CPU2x2, [Shard(1), R]))
        self.assertEqual(out.placements, [Shard(1), R])
        assert_tensor_equal(self, out, temb(ids).detach())
        fresh = nn.Embedding(13, 6, padding_idx=-1, device_mesh=TP2)
        assert_tensor_equal(self, fresh.weight.to_torch()[12], torch.zeros(6))  # torch zeroes the padding row

    def test_strict_and_errors(self):
        d = nn.LayerNorm(4)
        t = torch.nn.LayerNorm(4)
        with self.assertRaisesRegex(RuntimeError, 'Missing key\\(s\\) in state_dict: "bias"'):
            d.load_state_dict({"weight": torch.ones(4)})
        with self.assertRaisesRegex(RuntimeError, 'Unexpected key\\(s\\) in state_dict: "extra"'):
            d.load_state_dict({**t.state_dict(), "extra": torch.ones(1)})
        with self.assertRaisesRegex(RuntimeError, "size mismatch for weight"):
            d.load_state_dict({"weight": torch.ones(5), "bias": torch.zeros(4)})
        keys = d.load_state_dict({"weight": torch.full((4,), 3.0), "extra": torch.ones(1)}, strict=False)
        self.assertEqual(keys.missing_keys, ["bias"])
        self.assertEqual(keys.unexpected_keys, ["extra"])
        assert_tensor_equal(self, d.weight, torch.full((4,), 3.0))
        with self.assertRaises(TypeError):
            d.load_state_dict([("weight", torch.ones(4))])

    def test_identity_kept_and_dtorch_state(self):
        src = nn.GroupNorm(2, 4, device_mesh=CPU2)
        src.load_state_dict({"weight": randn(4), "bias": randn(4, seed=1)})
        dst = nn.GroupNorm(2, 4, device_mesh=CPU2)
        w = dst.weight
        dst.load_state_dict(src.state_dict())  # dtorch tensors load too
        self.assertIs(dst.weight, w)
        assert_tensor_equal(self, dst.weight, randn(4))
        g = nn.GroupNorm(2, 4, dtype=torch.float64)
        g.load_state_dict(torch.nn.GroupNorm(2, 4).state_dict())  # cast to the parameter's dtype
        self.assertEqual(g.weight.dtype, torch.float64)

    def test_to_dtype(self):
        t = randomize(torch.nn.Sequential(torch.nn.Conv2d(2, 4, 3), torch.nn.GroupNorm(2, 4))).double()
        d = nn.Sequential(nn.Conv2d(2, 4, 3), nn.GroupNorm(2, 4))
        w = d[0].weight
        self.assertIs(d.to(torch.float64), d)
        self.assertIs(d[0].weight, w)
        self.assertEqual(w.dtype, torch.float64)
        d.load_state_dict(t.state_dict())
        x = randn(1, 2, 5, 5, dtype=torch.float64)
        with torch.no_grad():
            assert_tensor_equal(self, d(dtorch.from_torch(x)), t(x))
        with self.assertRaises(TypeError):
            d.to(torch.int64)

    def test_dropout_module(self):
        x = randn(6, 8)
        drop = nn.Dropout(0.5).train()
        dtorch.manual_seed(2)
        y = drop(dtorch.from_torch(x)).to_torch()
        self.assertTrue(bool((y == 0).any()))
        dtorch.manual_seed(2)
        assert_tensor_equal(self, F.dropout(dtorch.from_torch(x), 0.5), y)
        drop.eval()
        d = dtorch.from_torch(x)
        self.assertIs(drop(d), d)
        with self.assertRaises(ValueError):
            nn.Dropout(2.0)


@unittest.skipUnless(hasattr(F, "linear"), "dtorch.nn.functional.linear comes with the linear-algebra family")
class TestLinearLayers(unittest.TestCase):
    def test_linear(self):
        t = randomize(torch.nn.Linear(6, 5))
        d = nn.Linear(6, 5)
        self.assertEqual([n for n, _ in d.named_parameters()], ["weight", "bias"])
        d.load_state_dict(t.state_dict())
        x = randn(3, 6)
        with torch.no_grad():
            assert_tensor_equal(self, d(dtorch.from_torch(x)), t(x))

    def test_transposed_input_module_and_functional(self):
        """A module's weight is an nn.Parameter, which requires grad, and torch's matmul folds a
        3-D input into one matrix product then; a plain weight gets a batched product. For a
        transposed input the two round apart on some CPUs (MKL on AVX512). dtorch's module equals
        torch's module, and F.linear on a plain weight equals torch's F.linear on it, exactly, on
        one device, with and without a bias and on several inputs."""
        # Which shapes round apart depends on the CPU's kernels: (3, 5, 7) -> 8 does on one
        # AVX512 machine, (2, 4, 64) -> 4 on another; testing both keeps the check alive on each.
        for bias, (batch, n_in, seq, n_out) in itertools.product((True, False), ((2, 4, 64, 4), (3, 5, 7, 8))):
            t = randomize(torch.nn.Linear(n_in, n_out, bias=bias))
            d = nn.Linear(n_in, n_out, bias=bias)
            d.load_state_dict(t.state_dict())
            w, b = t.weight.detach().clone(), (t.bias.detach().clone() if bias else None)
            dw, db = dtorch.from_torch(w), (dtorch.from_torch(b) if bias else None)
            for seed in range(4):
                h = randn(batch, n_in, seq, seed=seed)
                x, dx = h.transpose(1, 2), dtorch.from_torch(h).transpose(1, 2)
                with torch.no_grad():
                    assert_tensor_equal(self, d(dx), t(x))
                assert_tensor_equal(self, F.linear(dx, dw, db), TF.linear(x, w, b))
                # A Parameter passed to F.linear is a module's weight too.
                with torch.no_grad():
                    assert_tensor_equal(self, F.linear(dx, d.weight, d.bias), TF.linear(x, t.weight, t.bias))

    def test_tensor_parallel(self):
        t1, t2 = randomize(torch.nn.Linear(6, 8)), randomize(torch.nn.Linear(8, 4))
        x = randn(3, 6)
        with torch.no_grad():
            expected = t2(t1(x))
        col = nn.ColumnParallelLinear(6, 8, device_mesh=TP2)
        row = nn.RowParallelLinear(8, 4, device_mesh=TP2)
        col.load_state_dict(t1.state_dict())
        row.load_state_dict(t2.state_dict())
        self.assertEqual(col.weight.placements, [Shard(0)])
        self.assertEqual(row.weight.placements, [Shard(1)])
        h = col(dtorch.from_torch(x, TP2))
        self.assertEqual(h.placements, [Shard(1)])
        y = row(h)
        self.assertEqual(y.placements, [P])
        assert_tensor_allclose(self, y, expected, rtol=1e-5, atol=1e-6)
        rowr = nn.RowParallelLinearWithReplicateOutput(8, 4, device_mesh=TP2)
        rowr.load_state_dict(t2.state_dict())
        colr = nn.ColumnParallelLinearWithReplicateOutput(6, 8, device_mesh=TP2)
        colr.load_state_dict(t1.state_dict())
        y = rowr(colr(dtorch.from_torch(x, TP2)))
        self.assertEqual(y.placements, [R])
        assert_tensor_allclose(self, y, expected, rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
    unittest.main()
