"""dtorch.applications.sd3 against diffusers: the SD3 transformer, the flow-matching scheduler, the
VAE decoder, the text encoders and the whole pipeline, at tiny random configs saved with
``save_pretrained`` into temporary folders. One device: torch.equal (docs/decisions.md lists what
cannot be); dp2, tp2 and dp2*tp2 meshes: allclose, every replica checked."""

import shutil
import tempfile
import unittest

import torch

import dtorch
from dtorch.applications.sd3 import FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel

from helpers import assert_close_everywhere, assert_equal_everywhere

# The application composes operators that their own test modules claim.
TESTED_OPS = set()

TINY = dict(sample_size=16, patch_size=2, in_channels=4, out_channels=4, num_layers=2, attention_head_dim=16,
            num_attention_heads=2, joint_attention_dim=32, caption_projection_dim=32, pooled_projection_dim=32,
            pos_embed_max_size=24)
# SD3.5: RMS-normed q/k and a dual-attention first block.
TINY35 = dict(TINY, qk_norm="rms_norm", dual_attention_layers=(0,))


def mesh(shape, names):
    return dtorch.init_device_mesh("cpu", shape, mesh_dim_names=names)


MESHES = {
    "dp2": mesh((2,), ("dp",)),
    "tp2": mesh((2,), ("tp",)),
    "dp2*tp2": mesh((2, 2), ("dp", "tp")),
    # Context-parallel dims of size 1 (the sequence stays whole) beside dp and tp.
    "dp2*tp1*cp1*cp1": mesh((2, 1, 1, 1), ("dp", "tp", "ulysess_cp", "ring_cp")),
}


def randomize(model, seed=0, scale=0.3):
    """Non-trivial values in every parameter of a torch model (diffusers zero-initialises none of
    SD3's, but a random draw leaves no accidental symmetry), deterministically."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)
    return model


def inputs(batch=2, tokens=7, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 4, 16, 16, generator=g)
    c = torch.randn(batch, tokens, 32, generator=g)
    pooled = torch.randn(batch, 32, generator=g)
    t = torch.tensor([981.5, 3.25])[:batch]
    return x, c, pooled, t


class TransformerTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from diffusers import SD3Transformer2DModel as Ref

        torch.manual_seed(0)
        cls.tmp = tempfile.mkdtemp()
        cls.refs, cls.dirs = {}, {}
        for name, cfg in (("sd3", TINY), ("sd35", TINY35)):
            ref = randomize(Ref(**cfg).eval())
            cls.refs[name] = ref
            cls.dirs[name] = f"{cls.tmp}/{name}"
            ref.save_pretrained(cls.dirs[name])
        # A sharded checkpoint (index.json and several files) of the SD3 model.
        cls.dirs["sharded"] = f"{cls.tmp}/sharded"
        cls.refs["sd3"].save_pretrained(cls.dirs["sharded"], max_shard_size="40KB")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def want(self, name, x, c, pooled, t):
        with torch.no_grad():
            return self.refs[name](x, c, pooled, t).sample

    def test_one_device_equal(self):
        x, c, pooled, t = inputs()
        for name in ("sd3", "sd35"):
            with self.subTest(name):
                model = SD3Transformer2DModel.from_pretrained(self.dirs[name], device_mesh=mesh((1,), ("dp",)))
                assert_equal_everywhere(self, model(x, c, pooled, t), self.want(name, x, c, pooled, t))

    def test_sharded_checkpoint(self):
        import os

        self.assertTrue(os.path.exists(f"{self.dirs['sharded']}/diffusion_pytorch_model.safetensors.index.json"))
        x, c, pooled, t = inputs()
        model = SD3Transformer2DModel.from_pretrained(self.dirs["sharded"], device_mesh=dtorch.DeviceMesh("cpu", [0]))
        assert_equal_everywhere(self, model(x, c, pooled, t), self.want("sd3", x, c, pooled, t))

    def test_meshes_allclose(self):
        x, c, pooled, t = inputs()
        for name in ("sd3", "sd35"):
            want = self.want(name, x, c, pooled, t)
            for mname, m in MESHES.items():
                with self.subTest(f"{name} on {mname}"):
                    model = SD3Transformer2DModel.from_pretrained(self.dirs[name], device_mesh=m)
                    if m.has_dim_name("tp") and m.size(m.dim_name_index("tp")) > 1:
                        # Heads and MLP really are split: to_q's weight is Shard(0) on tp.
                        w = model.transformer_blocks[0].attn.to_q.weight
                        self.assertEqual(w.placements[m.dim_name_index("tp")], dtorch.Shard(0))
                    got = model(x, c, pooled, t)
                    if m.has_dim_name("dp"):
                        self.assertEqual(got.placements[m.dim_name_index("dp")], dtorch.Shard(0))
                    assert_close_everywhere(self, got, want, rtol=1e-4, atol=1e-4)

    def test_dtorch_inputs_and_bfloat16(self):
        # Inputs already on the mesh (the pipeline's path) and a bfloat16 load of the same file.
        x, c, pooled, t = inputs()
        m = MESHES["dp2"]
        model = SD3Transformer2DModel.from_pretrained(self.dirs["sd3"], device_mesh=m)
        on = [dtorch.Shard(0)]
        args = [dtorch.from_torch(v, m, on) for v in (x, c, pooled, t)]
        assert_close_everywhere(self, model(*args), self.want("sd3", x, c, pooled, t), rtol=1e-4, atol=1e-4)
        m1 = dtorch.DeviceMesh("cpu", [0])
        model = SD3Transformer2DModel.from_pretrained(self.dirs["sd3"], device_mesh=m1, torch_dtype=torch.bfloat16)
        self.assertEqual(model.dtype, torch.bfloat16)
        import copy

        ref = copy.deepcopy(self.refs["sd3"]).to(torch.bfloat16)
        with torch.no_grad():
            want = ref(x.bfloat16(), c.bfloat16(), pooled.bfloat16(), t).sample
        args = (x.bfloat16(), c.bfloat16(), pooled.bfloat16(), t)
        assert_equal_everywhere(self, model(*args), want)

    def test_bad_input(self):
        with self.assertRaisesRegex(ValueError, "heads do not split over tp=4"):
            SD3Transformer2DModel(TINY, device_mesh=mesh((4,), ("tp",)))
        with self.assertRaisesRegex(ValueError, "caption_projection_dim"):
            SD3Transformer2DModel(dict(TINY, caption_projection_dim=16), device_mesh=mesh((1,), ("dp",)))
        with self.assertRaisesRegex(RuntimeError, "size mismatch"):
            bad = dict(TINY, joint_attention_dim=16)
            m1 = mesh((1,), ("dp",))
            model = SD3Transformer2DModel(bad, device_mesh=m1)
            from dtorch.applications.sd3._common import Checkpoint, load_module

            load_module(model, Checkpoint(self.dirs["sd3"], "diffusion_pytorch_model"))
        model = SD3Transformer2DModel.from_pretrained(self.dirs["sd3"], device_mesh=mesh((1,), ("dp",)))
        x, c, pooled, t = inputs()
        with self.assertRaisesRegex(ValueError, "larger than pos_embed_max_size"):
            model(torch.randn(2, 4, 64, 64), c, pooled, t)


class SchedulerTest(unittest.TestCase):
    def ref(self, **kw):
        from diffusers import FlowMatchEulerDiscreteScheduler as Ref

        return Ref(**kw)

    def test_schedule_matches_diffusers(self):
        for kw in (dict(shift=3.0), dict(shift=1.0), dict(shift=3.0, num_train_timesteps=500),
                   dict(shift=3.0, invert_sigmas=True), dict(shift=3.0, shift_terminal=0.1),
                   dict(use_dynamic_shifting=True)):
            for n in (1, 2, 4, 28):
                with self.subTest(kw=kw, n=n):
                    ref, got = self.ref(**kw), FlowMatchEulerDiscreteScheduler(**kw)
                    self.assertTrue(torch.equal(got.sigmas, ref.sigmas))
                    mu = 0.7 if kw.get("use_dynamic_shifting") else None
                    ref.set_timesteps(n, mu=mu)
                    got.set_timesteps(n, mu=mu)
                    exact = dict(rtol=0, atol=0, equal_nan=True)  # (shift_terminal with n=1 is nan in both)
                    torch.testing.assert_close(got.timesteps, ref.timesteps, **exact)
                    torch.testing.assert_close(got.sigmas, ref.sigmas, **exact)
        # The spec's 28-step SD3 values, computed from the formulas (to about 1e-5).
        s = FlowMatchEulerDiscreteScheduler(shift=3.0)
        s.set_timesteps(28)
        self.assertAlmostEqual(float(s.sigmas[1]), 0.98738, places=4)
        self.assertAlmostEqual(float(s.sigmas[27]), 0.0089286, places=5)
        self.assertEqual(float(s.sigmas[28]), 0.0)

    def test_steps_equal(self):
        g = torch.Generator().manual_seed(0)
        sample = torch.randn(2, 4, 8, 8, generator=g)
        velocities = [torch.randn(2, 4, 8, 8, generator=g) for _ in range(4)]
        for m, pl in ((dtorch.DeviceMesh("cpu", [0]), [dtorch.Replicate()]),
                      (dtorch.DeviceMesh("cpu", [0, 1]), [dtorch.Shard(0)])):
            with self.subTest(mesh=m):
                ref, got = self.ref(shift=3.0), FlowMatchEulerDiscreteScheduler(shift=3.0)
                ref.set_timesteps(4)
                got.set_timesteps(4)
                want, have = sample, dtorch.from_torch(sample, m, pl)
                for t, v in zip(ref.timesteps, velocities):
                    want = ref.step(v, t, want).prev_sample
                    have = got.step(dtorch.from_torch(v, m, pl), t, have)
                    assert_equal_everywhere(self, have, want)
                self.assertEqual(got.step_index, 4)

    def test_bad_input(self):
        s = FlowMatchEulerDiscreteScheduler(shift=3.0)
        s.set_timesteps(4)
        with self.assertRaisesRegex(ValueError, "integer indices"):
            s.step(dtorch.zeros(2), 0, dtorch.zeros(2))
        with self.assertRaisesRegex(ValueError, "not in the schedule"):
            s.step(dtorch.zeros(2), 123.5, dtorch.zeros(2))
        with self.assertRaisesRegex(ValueError, "`mu` must be passed"):
            FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True).set_timesteps(4)
        with self.assertRaises(NotImplementedError):
            FlowMatchEulerDiscreteScheduler(use_karras_sigmas=True)


if __name__ == "__main__":
    unittest.main()
