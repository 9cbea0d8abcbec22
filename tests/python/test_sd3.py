"""dtorch.applications.sd3 against diffusers: the SD3 transformer, the flow-matching scheduler, the
VAE decoder, the text encoders and the whole pipeline, at tiny random configs saved with
``save_pretrained`` into temporary folders. One device: torch.equal (docs/decisions.md lists what
cannot be); dp2, tp2 and dp2*tp2 meshes: allclose, every replica checked."""

import os
import shutil
import tempfile
import unittest

import numpy as np
import torch

import dtorch
from dtorch.applications.sd3 import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel

from helpers import assert_close_everywhere, assert_equal_everywhere, run_example_script

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

    def test_tokens_split_on_cp(self):
        """On the context-parallel dims the tokens are Shard(1) through the blocks, the joint attention's
        cat leaves them segmented ([image, context]; nested over both CP dims on their product) and the
        cat, and the transpose, reshape and split after the attention, move nothing."""
        import types

        from dtorch import _C
        from dtorch.applications.sd3 import transformer as tr

        x, c, pooled, t = inputs()
        want = self.want("sd3", x, c, pooled, t)
        seen, cats, after = [], [], []
        split, cat, functional = tr._split_tokens, tr._cat, tr.F

        def count():
            dtorch.synchronize()
            return _C._collectives_lowered()

        def spy_split(h, s):
            out = split(h, s)
            seen.append((_C._segments(h), list(h.placements), count() - after[-1]))
            return out

        def spy_cat(ts, dim):
            before = count()
            out = cat(ts, dim)
            cats.append(count() - before)
            return out

        def spy_sdpa(*args, **kwargs):
            out = functional.scaled_dot_product_attention(*args, **kwargs)
            after.append(count())
            return out

        meshes = {"ulysess_cp2": (mesh((2,), ("ulysess_cp",)), (1, 0, [64, 7])),
                  "ring_cp2": (mesh((2,), ("ring_cp",)), (1, 0, [64, 7])),
                  "ulysess_cp2*ring_cp2": (mesh((2, 2), ("ulysess_cp", "ring_cp")), (1, (0, 1), [64, 7])),
                  "dp2*ulysess_cp2*ring_cp2": (mesh((2, 2, 2), ("dp", "ulysess_cp", "ring_cp")),
                                               (1, (1, 2), [64, 7]))}
        tr._split_tokens, tr._cat = spy_split, spy_cat
        tr.F = types.SimpleNamespace(**{k: getattr(functional, k) for k in dir(functional) if not k.startswith("__")})
        tr.F.scaled_dot_product_attention = spy_sdpa
        try:
            for mname, (m, segs_want) in meshes.items():
                with self.subTest(mname):
                    seen.clear(), cats.clear()
                    model = SD3Transformer2DModel.from_pretrained(self.dirs["sd3"], device_mesh=m)
                    # The ring merges partial softmaxes (log-sum-exp): outputs of size ~10 differ by ~5e-4.
                    assert_close_everywhere(self, model(x, c, pooled, t), want, rtol=1e-4, atol=1e-3)
                    self.assertEqual(len(seen), TINY["num_layers"])
                    # The joint attention's q, k, v cats (and any other cat of the model) move nothing.
                    self.assertGreaterEqual(len(cats), 3 * TINY["num_layers"])
                    self.assertEqual(set(cats), {0})
                    for segs, pl, moved in seen:
                        for name in ("ulysess_cp", "ring_cp"):
                            if m.has_dim_name(name):
                                self.assertEqual(pl[m.dim_name_index(name)], dtorch.Shard(1))
                        self.assertEqual(segs, segs_want)
                        self.assertEqual(moved, 0)
        finally:
            tr._split_tokens, tr._cat, tr.F = split, cat, functional

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


# The spec's tiny SD3 VAE (one block, scale factor 1) and a two-block one with an upsampler.
TINY_VAE = dict(block_out_channels=(4,), layers_per_block=1, latent_channels=4, norm_num_groups=1,
                use_quant_conv=False, use_post_quant_conv=False, scaling_factor=1.5035, shift_factor=0.0609)
VAE2 = dict(block_out_channels=(8, 16), layers_per_block=1, latent_channels=4, norm_num_groups=4,
            down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2)


class VaeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from diffusers import AutoencoderKL as Ref

        torch.manual_seed(0)
        cls.tmp = tempfile.mkdtemp()
        cls.refs = {}
        for name, cfg in (("tiny", TINY_VAE), ("two", VAE2), ("no_attn", dict(VAE2, mid_block_add_attention=False))):
            cls.refs[name] = randomize(Ref(**cfg).eval(), scale=0.2)
            cls.refs[name].save_pretrained(f"{cls.tmp}/{name}")
        cls.z = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(3))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def want(self, name):
        with torch.no_grad():
            return self.refs[name].decode(self.z).sample

    def test_one_device(self):
        m1 = dtorch.DeviceMesh("cpu", [0])
        # With and without the mid-block attention the decode is torch.equal: torch's attention
        # output is a channels-last-strided view, and dtorch's is the same view (kernel results may
        # be views, docs/decisions.md), so the convolutions after it round as torch's do; and its
        # projections of the transposed tokens take the product torch takes for a module's weights
        # (docs/decisions.md, "A module's linear": they differ from a plain weight's on AVX512).
        vae = AutoencoderKL.from_pretrained(f"{self.tmp}/no_attn", device_mesh=m1)
        assert_equal_everywhere(self, vae.decode(dtorch.from_torch(self.z, m1)), self.want("no_attn"))
        for name in ("tiny", "two"):
            with self.subTest(name):
                vae = AutoencoderKL.from_pretrained(f"{self.tmp}/{name}", device_mesh=m1)
                attn = vae.decoder.mid_block.attentions[0]
                h = torch.randn(2, vae.decoder.conv_in.weight.shape[0], 8, 8)
                with torch.no_grad():
                    want_attn = self.refs[name].decoder.mid_block.attentions[0](h)
                assert_equal_everywhere(self, attn(dtorch.from_torch(h, m1)), want_attn)
                got = vae.decode(dtorch.from_torch(self.z, m1))
                self.assertEqual(tuple(got.shape), tuple(self.want(name).shape))
                assert_equal_everywhere(self, got, self.want(name))

    def test_batch_sharded(self):
        m = dtorch.DeviceMesh("cpu", [0, 1], mesh_dim_names=("dp",))
        for name in ("tiny", "two"):
            with self.subTest(name):
                vae = AutoencoderKL.from_pretrained(f"{self.tmp}/{name}", device_mesh=m)
                got = vae.decode(dtorch.from_torch(self.z, m, [dtorch.Shard(0)]))
                self.assertEqual(got.placements, [dtorch.Shard(0)])
                assert_close_everywhere(self, got, self.want(name), rtol=1e-5, atol=1e-5)
        self.assertEqual(AutoencoderKL(VAE2, device_mesh=m).vae_scale_factor, 2)
        with self.assertRaises(NotImplementedError):
            AutoencoderKL(dict(VAE2, up_block_types=("AttnUpDecoderBlock2D",) * 2), device_mesh=m)


def psnr(a, b):
    import numpy as np

    mse = float(((np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)) ** 2).mean())
    return float("inf") if mse == 0 else 10 * np.log10(1.0 / mse)


class TextEncoderTest(unittest.TestCase):
    """CLIP (with projection) and T5 at tiny configs against transformers (its sdpa attention)."""

    @classmethod
    def setUpClass(cls):
        from transformers import CLIPTextConfig, CLIPTextModelWithProjection as RefClip, T5Config, T5EncoderModel as RefT5

        torch.manual_seed(0)
        cls.tmp = tempfile.mkdtemp()
        cls.refs = {}
        for name, eos in (("clip", 599), ("clip_legacy", 2)):  # eos 2: transformers' legacy argmax pooling
            cfg = CLIPTextConfig(hidden_size=32, intermediate_size=37, num_hidden_layers=3, num_attention_heads=4,
                                 projection_dim=24, hidden_act="quick_gelu" if eos == 2 else "gelu", vocab_size=600,
                                 max_position_embeddings=77, eos_token_id=eos, bos_token_id=598, pad_token_id=599)
            cls.refs[name] = randomize(RefClip(cfg).eval())
        cls.refs["t5"] = randomize(RefT5(T5Config(vocab_size=300, d_model=32, d_kv=8, d_ff=37, num_layers=2,
                                                  num_heads=4, feed_forward_proj="gated-gelu",
                                                  relative_attention_num_buckets=8,
                                                  relative_attention_max_distance=20)).eval())
        for name, ref in cls.refs.items():
            ref.save_pretrained(f"{cls.tmp}/{name}")
        g = torch.Generator().manual_seed(5)
        cls.clip_ids = torch.randint(0, 598, (2, 77), generator=g)
        cls.clip_ids[0, 9:], cls.clip_ids[1, 30:] = 599, 599
        cls.t5_ids = torch.randint(0, 300, (2, 40), generator=g)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def check(self, name, m, exact):
        from dtorch.applications.sd3 import CLIPTextModelWithProjection, T5EncoderModel

        ref = self.refs[name]
        check = assert_equal_everywhere if exact else (lambda tc, a, b: assert_close_everywhere(tc, a, b, rtol=1e-4,
                                                                                                   atol=1e-4))
        with torch.no_grad():
            if name == "t5":
                want = ref(self.t5_ids).last_hidden_state
                check(self, T5EncoderModel.from_pretrained(f"{self.tmp}/{name}", device_mesh=m)(self.t5_ids), want)
                return
            want = ref(self.clip_ids, output_hidden_states=True)
        pooled, hidden = CLIPTextModelWithProjection.from_pretrained(f"{self.tmp}/{name}", device_mesh=m)(self.clip_ids)
        self.assertEqual(len(hidden), len(want.hidden_states))
        check(self, pooled, want.text_embeds)
        check(self, hidden[-2], want.hidden_states[-2])
        check(self, hidden[-1], want.hidden_states[-1])

    def test_one_device_equal(self):
        for name in self.refs:
            with self.subTest(name):
                self.check(name, dtorch.DeviceMesh("cpu", [0]), True)

    def test_t5_bfloat16_equal(self):
        # gelu_new's `0.044715 * x.pow(3.0)` in bf16 runs in place into a dropped operand; it must round
        # like torch's out-of-place multiply for the result to stay bit-identical.
        import copy

        from dtorch.applications.sd3 import T5EncoderModel

        ref = copy.deepcopy(self.refs["t5"]).to(torch.bfloat16)
        with torch.no_grad():
            want = ref(self.t5_ids).last_hidden_state
        got = T5EncoderModel.from_pretrained(f"{self.tmp}/t5", device_mesh=dtorch.DeviceMesh("cpu", [0]),
                                             torch_dtype=torch.bfloat16)(self.t5_ids)
        self.assertEqual(want.dtype, torch.bfloat16)
        assert_equal_everywhere(self, got, want)

    def test_meshes(self):
        for name in self.refs:
            for mname in ("dp2", "tp2", "dp2*tp2"):
                with self.subTest(f"{name} on {mname}"):
                    self.check(name, MESHES[mname], False)
        with self.assertRaisesRegex(ValueError, "do not split over tp=8"):
            from dtorch.applications.sd3 import T5EncoderModel

            T5EncoderModel.from_pretrained(f"{self.tmp}/t5", device_mesh=mesh((8,), ("tp",)))


class PipelineTest(unittest.TestCase):
    """The whole pipeline against diffusers' StableDiffusion3Pipeline on a tiny random folder."""

    KW = dict(prompt="a photo of a cat", negative_prompt="blurry", num_inference_steps=3, height=32, width=32,
              guidance_scale=5.0, max_sequence_length=16)

    @classmethod
    def setUpClass(cls):
        from dtorch.applications.sd3.testing import make_tiny_pipeline

        cls.tmp = tempfile.mkdtemp()
        cls.ref = make_tiny_pipeline(cls.tmp, seed=0)
        cls.ref.set_progress_bar_config(disable=True)
        with torch.no_grad():
            cls.want_latents = cls.ref(**cls.KW, generator=torch.Generator().manual_seed(0),
                                       output_type="latent").images
            cls.want_np = cls.ref(**cls.KW, generator=torch.Generator().manual_seed(0), output_type="np").images
            cls.want_pil = cls.ref(**cls.KW, generator=torch.Generator().manual_seed(0)).images

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def pipe(self, m):
        from dtorch.applications.sd3 import StableDiffusion3Pipeline

        return StableDiffusion3Pipeline.from_pretrained(self.tmp, device_mesh=m)

    def test_one_device(self):
        import numpy as np

        pipe = self.pipe(dtorch.DeviceMesh("cpu", [0]))
        latents = pipe(**self.KW, generator=torch.Generator().manual_seed(0), output_type="latent").images
        self.assertTrue(torch.equal(latents, self.want_latents))
        # The decoded floats are identical too (the VAE's mid attention keeps torch's layout).
        out = pipe(**self.KW, seed=0, output_type="np").images
        self.assertTrue(np.array_equal(out, self.want_np))
        pil = pipe(**self.KW, seed=0, progress=True).images
        self.assertEqual(len(pil), 1)
        self.assertTrue(np.array_equal(np.asarray(pil[0]), np.asarray(self.want_pil[0])))
        # async_call: recorded without waiting, the same image when read.
        pending = pipe.async_call(**self.KW, seed=0, output_type="np")
        self.assertTrue(np.array_equal(pending.get().images, out))
        # Given latents are used as given (diffusers' latents= argument).
        lat = torch.randn(1, 4, 32, 32, generator=torch.Generator().manual_seed(9))
        with torch.no_grad():
            want = self.ref(**self.KW, latents=lat, output_type="latent").images
        self.assertTrue(torch.equal(pipe(**self.KW, latents=lat, output_type="latent").images, want))

    def test_prompt_embeds_equal(self):
        # Embeddings instead of prompts, as diffusers takes them: diffusers' own encode_prompt output
        # (torch tensors) given to both pipelines, and dtorch's encode_prompt output given back to it.
        pipe = self.pipe(dtorch.DeviceMesh("cpu", [0]))
        kw = {k: v for k, v in self.KW.items() if k not in ("prompt", "negative_prompt")}
        with torch.no_grad():
            pe, npe, ppe, nppe = self.ref.encode_prompt("a photo of a cat", None, None, negative_prompt="blurry",
                                                        max_sequence_length=16)
        embeds = dict(prompt_embeds=pe, negative_prompt_embeds=npe, pooled_prompt_embeds=ppe,
                      negative_pooled_prompt_embeds=nppe)
        with torch.no_grad():
            want = self.ref(**kw, **embeds, generator=torch.Generator().manual_seed(0), output_type="latent").images
        self.assertTrue(torch.equal(want, self.want_latents))
        got = pipe(**kw, **embeds, generator=torch.Generator().manual_seed(0), output_type="latent").images
        self.assertTrue(torch.equal(got, want))
        mine = pipe.encode_prompt("a photo of a cat", negative_prompt="blurry", max_sequence_length=16)
        self.assertIsInstance(mine[0], dtorch.Tensor)
        got = pipe(**kw, **dict(zip(embeds, (mine[0], mine[1], mine[2], mine[3]))), seed=0, output_type="latent").images
        self.assertTrue(torch.equal(got, want))
        # Only the positive embeddings: the negative ones are encoded from negative_prompt.
        got = pipe(**kw, negative_prompt="blurry", prompt_embeds=pe, pooled_prompt_embeds=ppe, seed=0,
                   output_type="latent").images
        self.assertTrue(torch.equal(got, want))
        # On a dp x tp mesh the given torch embeddings are split over dp like the encoders' output.
        got = self.pipe(MESHES["dp2*tp2"])(**kw, **embeds, seed=0, output_type="latent").images
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        for bad, msg in ((dict(prompt="a cat", prompt_embeds=pe, pooled_prompt_embeds=ppe), "Cannot forward both"),
                         (dict(prompt_embeds=pe), "pooled_prompt_embeds"),
                         (dict(prompt="a cat", negative_prompt_embeds=npe), "negative_pooled_prompt_embeds"),
                         (dict(prompt_embeds=pe, pooled_prompt_embeds=ppe, negative_prompt_embeds=npe[:, :3],
                               negative_pooled_prompt_embeds=nppe), "same shape"),
                         (dict(), "Provide either")):
            with self.subTest(msg):
                with self.assertRaisesRegex(ValueError, msg):
                    pipe(**kw, **bad)

    def test_bfloat16_equal(self):
        # bf16 latents are bit-identical: the scheduler multiplies by the 0-d float32 sigma difference
        # as diffusers does (torch rounds it to bf16 first), not by a Python float.
        from diffusers import StableDiffusion3Pipeline as Ref

        from dtorch.applications.sd3 import StableDiffusion3Pipeline

        ref = Ref.from_pretrained(self.tmp).to(torch.bfloat16)
        ref.set_progress_bar_config(disable=True)
        with torch.no_grad():
            want = ref(**self.KW, generator=torch.Generator().manual_seed(0), output_type="latent").images
        pipe = StableDiffusion3Pipeline.from_pretrained(self.tmp, device_mesh=dtorch.DeviceMesh("cpu", [0]),
                                                        torch_dtype=torch.bfloat16)
        got = pipe(**self.KW, seed=0, output_type="latent").images
        self.assertEqual(want.dtype, torch.bfloat16)
        self.assertTrue(torch.equal(got, want), (got.float() - want.float()).abs().max())

    def test_caches(self):
        # First-Block-Cache and TeaCache on SD3's CFG batch: the skip counts and the PSNR against the
        # uncached run for this seed; threshold 0 changes nothing; a negative one is refused at the call.
        pipe = self.pipe(dtorch.DeviceMesh("cpu", [0]))
        kw = dict(self.KW, num_inference_steps=8, output_type="np", seed=0)
        plain = pipe(**kw).images
        for cache, decisions, lo, hi in ((dict(first_block_cache_threshold=1.0), [1], 33, 40),
                                         (dict(teacache_threshold=150.0), [1, 4, 6], 25, 32)):
            with self.subTest(cache):
                got = pipe(**kw, **cache).images
                stats = pipe.last_cache_stats
                self.assertEqual(stats["steps"], 8)
                self.assertEqual([i for i, d in enumerate(stats["decisions"]) if d], decisions)
                self.assertTrue(lo < psnr(got, plain) < hi, psnr(got, plain))
                zero = {k: 0.0 for k in cache}
                self.assertTrue(np.array_equal(pipe(**kw, **zero).images, plain))
        with self.assertRaisesRegex(ValueError, "first_block_cache_threshold must be >= 0"):
            pipe(**kw, first_block_cache_threshold=-0.5)

    def test_arguments_equal(self):
        # diffusers' other arguments, latents compared on one device (torch.equal).
        pipe = self.pipe(dtorch.DeviceMesh("cpu", [0]))
        base = dict(height=32, width=32, max_sequence_length=16, output_type="latent")
        cases = {
            "num_images_per_prompt": dict(prompt="a cat", num_inference_steps=2, num_images_per_prompt=2),
            "two prompts": dict(prompt=["a cat", "a dog on the moon"], negative_prompt=["red", "blue"],
                                num_inference_steps=2),
            "skip-layer guidance": dict(prompt="a cat", num_inference_steps=10, skip_guidance_layers=[0]),
            "no CFG": dict(prompt="a cat", num_inference_steps=2, guidance_scale=1.0),
            "clip_skip": dict(prompt="a cat", prompt_2="a dog", num_inference_steps=2, clip_skip=1),
        }
        for name, kw in cases.items():
            with self.subTest(name):
                with torch.no_grad():
                    want = self.ref(**base, **kw, generator=torch.Generator().manual_seed(0)).images
                got = pipe(**base, **kw, generator=torch.Generator().manual_seed(0)).images
                self.assertEqual(got.shape, want.shape)
                self.assertTrue(torch.equal(got, want), (got - want).abs().max())

    def test_meshes_psnr(self):
        # The context-parallel meshes: the text encoders on the unbound mesh, the VAE on the first
        # device, and the transformer's tokens split on the cp dims (Ulysses, ring, both nested).
        cp = {"ulysess_cp2": mesh((2,), ("ulysess_cp",)), "ring_cp2": mesh((2,), ("ring_cp",)),
              "dp2*ulysess_cp2*ring_cp2": mesh((2, 2, 2), ("dp", "ulysess_cp", "ring_cp")),
              "dp2*tp2*ring_cp2": mesh((2, 2, 2), ("dp", "tp", "ring_cp"))}
        for mname in ("dp2", "tp2", "dp2*tp2", "dp2*tp1*cp1*cp1") + tuple(cp):
            with self.subTest(mname):
                pipe = self.pipe(MESHES.get(mname) or cp[mname])
                text_mesh = pipe.text_encoder.mesh
                self.assertFalse(any(n in text_mesh.dim_names for n in ("ulysess_cp", "ring_cp")))
                self.assertEqual(len(pipe.vae.mesh.device_ids), 1)
                out = pipe(**self.KW, seed=0, output_type="np").images
                self.assertGreater(psnr(out, self.want_np), 40)

    def test_example_runs(self):
        # examples/sd3/run.py with its defaults: tiny random weights on dp=2 x tp=2, a PNG written.
        run_example_script(self, "sd3", os.path.join(self.tmp, "example.png"))

    def test_bad_input(self):
        pipe = self.pipe(dtorch.DeviceMesh("cpu", [0]))
        with self.assertRaisesRegex(ValueError, "divisible by 2"):
            pipe(**dict(self.KW, height=33))
        with self.assertRaisesRegex(ValueError, "output_type"):
            pipe(**dict(self.KW, output_type="jpeg"))
        with self.assertRaisesRegex(ValueError, "batch size"):
            pipe(**dict(self.KW, negative_prompt=["x", "y"], prompt=["a cat"]))


if __name__ == "__main__":
    unittest.main()
