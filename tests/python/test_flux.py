"""dtorch.applications.flux against diffusers: the Flux transformer and the whole FluxPipeline at tiny
random configs saved with ``save_pretrained`` into temporary folders (``flux.testing``). One device:
torch.equal (float32 and bfloat16; latents, float image and 8-bit image); tp2, ulysess_cp2,
ring_cp2 and dp2 x tp2 meshes: allclose, every replica checked; bad input raises before anything
is recorded."""

import os
import shutil
import tempfile
import unittest

import numpy as np
import torch

import dtorch
from dtorch.applications.flux import FluxPipeline, FluxTransformer2DModel
from dtorch.applications.flux.transformer import rotary_tables

from helpers import assert_close_everywhere, assert_equal_everywhere, run_example_script

# The application composes operators that their own test modules claim.
TESTED_OPS = set()


def mesh(shape, names):
    return dtorch.init_device_mesh("cpu", shape, mesh_dim_names=names)


ONE = dtorch.DeviceMesh("cpu", [0])
MESHES = {
    "tp2": mesh((2,), ("tp",)),
    "ulysess_cp2": mesh((2,), ("ulysess_cp",)),
    "ring_cp2": mesh((2,), ("ring_cp",)),
    "dp2*tp2": mesh((2, 2), ("dp", "tp")),
}


def ids(h, w, text):
    img = torch.zeros(h, w, 3)
    img[..., 1] += torch.arange(h)[:, None]
    img[..., 2] += torch.arange(w)[None, :]
    return img.reshape(h * w, 3), torch.zeros(text, 3)


def inputs(batch=2, text=7, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 64, 16, generator=g)
    c = torch.randn(batch, text, 32, generator=g)
    pooled = torch.randn(batch, 32, generator=g)
    t = torch.tensor([0.9, 0.3])[:batch]
    return x, c, pooled, t


class FluxCase(unittest.TestCase):
    """Two tiny folders: FLUX.1-dev-like (guidance embedding) and schnell-like (none)."""

    @classmethod
    def setUpClass(cls):
        from dtorch.applications.flux.testing import make_tiny_pipeline

        cls.tmp = tempfile.mkdtemp()
        cls.dev, cls.schnell = f"{cls.tmp}/dev", f"{cls.tmp}/schnell"
        cls.ref = make_tiny_pipeline(cls.dev, seed=0)
        cls.ref_schnell = make_tiny_pipeline(cls.schnell, seed=3, guidance=False)
        for r in (cls.ref, cls.ref_schnell):
            r.set_progress_bar_config(disable=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)


class TransformerTest(FluxCase):
    def want(self, ref, x, c, pooled, t, guidance):
        img_ids, txt_ids = ids(8, 8, c.shape[1])
        with torch.no_grad():
            return ref.transformer(x, c, pooled, t, img_ids, txt_ids, guidance).sample

    def run_model(self, folder, m, x, c, pooled, t, guidance, dtype=None):
        img_ids, txt_ids = ids(8, 8, c.shape[1])
        model = FluxTransformer2DModel.from_pretrained(f"{folder}/transformer", device_mesh=m, torch_dtype=dtype)
        return model, model(x, c, pooled, t, img_ids, txt_ids, guidance=guidance)

    def test_rotary_ids(self):
        # The tables against the formula written out here: axis a of the head dim, pair i, angle
        # pos_a * 10000 ** (-2i / d_a), each value twice; text ids are zeros (cos 1, sin 0).
        img_ids, txt_ids = ids(3, 4, 2)
        cos, sin = rotary_tables(torch.cat([txt_ids, img_ids]), (4, 6, 6))
        self.assertEqual(tuple(cos.shape), (14, 16))
        self.assertTrue(torch.equal(cos[:2], torch.ones(2, 16)) and torch.equal(sin[:2], torch.zeros(2, 16)))
        token = 2 + 1 * 4 + 3  # image row 1, column 3
        for axis, (pos, lo, d) in enumerate(((0, 0, 4), (1, 4, 6), (3, 10, 6))):
            for i in range(d // 2):
                angle = pos * 10000.0 ** (-2 * i / d)
                for j in (lo + 2 * i, lo + 2 * i + 1):
                    self.assertAlmostEqual(float(cos[token, j]), np.cos(angle), places=6)
                    self.assertAlmostEqual(float(sin[token, j]), np.sin(angle), places=6)

    def test_one_device_equal(self):
        x, c, pooled, t = inputs()
        g = torch.tensor([3.5, 2.0])
        _, got = self.run_model(self.dev, ONE, x, c, pooled, t, g)
        assert_equal_everywhere(self, got, self.want(self.ref, x, c, pooled, t, g))
        _, got = self.run_model(self.schnell, ONE, x, c, pooled, t, None)
        assert_equal_everywhere(self, got, self.want(self.ref_schnell, x, c, pooled, t, None))

    def test_bfloat16_equal(self):
        import copy

        x, c, pooled, t = (v.bfloat16() for v in inputs())
        g = torch.tensor([3.5, 2.0])
        ref = copy.deepcopy(self.ref.transformer).to(torch.bfloat16)
        img_ids, txt_ids = ids(8, 8, c.shape[1])
        with torch.no_grad():
            want = ref(x, c, pooled, t, img_ids.bfloat16(), txt_ids.bfloat16(), g).sample
        model = FluxTransformer2DModel.from_pretrained(f"{self.dev}/transformer", device_mesh=ONE,
                                                       torch_dtype=torch.bfloat16)
        got = model(x, c, pooled, t, img_ids.bfloat16(), txt_ids.bfloat16(), guidance=g)
        self.assertEqual(want.dtype, torch.bfloat16)
        assert_equal_everywhere(self, got, want)

    def test_meshes_allclose(self):
        x, c, pooled, t = inputs()
        g = torch.tensor([3.5, 2.0])
        want = self.want(self.ref, x, c, pooled, t, g)
        for name, m in dict(MESHES, **{"ulysess_cp2*ring_cp2": mesh((2, 2), ("ulysess_cp", "ring_cp"))}).items():
            with self.subTest(name):
                model, got = self.run_model(self.dev, m, x, c, pooled, t, g)
                if "tp" in name:
                    i = m.dim_name_index("tp")
                    blk = model.single_transformer_blocks[0]
                    self.assertEqual(model.transformer_blocks[0].attn.to_q.weight.placements[i], dtorch.Shard(0))
                    self.assertEqual(blk.proj_mlp.weight.placements[i], dtorch.Shard(0))
                    self.assertEqual(blk.proj_out.weight_attn.placements[i], dtorch.Shard(1))
                if m.has_dim_name("dp"):
                    self.assertEqual(got.placements[m.dim_name_index("dp")], dtorch.Shard(0))
                assert_close_everywhere(self, got, want, rtol=1e-4, atol=1e-4)

    def test_bad_input(self):
        x, c, pooled, t = inputs()
        img_ids, txt_ids = ids(8, 8, 7)
        with self.assertRaisesRegex(ValueError, "heads do not split over tp=4"):
            FluxTransformer2DModel.from_pretrained(f"{self.dev}/transformer", device_mesh=mesh((4,), ("tp",)))
        model = FluxTransformer2DModel.from_pretrained(f"{self.dev}/transformer", device_mesh=ONE)
        with self.assertRaisesRegex(ValueError, "guidance"):
            model(x, c, pooled, t, img_ids, txt_ids)
        with self.assertRaisesRegex(ValueError, "img_ids"):
            model(x, c, pooled, t, img_ids[:10], txt_ids, guidance=3.5)
        with self.assertRaisesRegex(ValueError, "packed latents"):
            model(torch.randn(2, 4, 8, 8), c, pooled, t, img_ids, txt_ids, guidance=3.5)
        with self.assertRaisesRegex(FileNotFoundError, "config.json"):
            FluxTransformer2DModel.from_pretrained(self.tmp, device_mesh=ONE)


class PipelineTest(FluxCase):
    KW = dict(prompt="a photo of a cat", num_inference_steps=3, height=32, width=32, guidance_scale=3.5,
              max_sequence_length=16)

    def want(self, ref, **kw):
        kw = dict(self.KW, **kw)
        with torch.no_grad():
            return ref(**kw, generator=torch.Generator().manual_seed(0)).images

    def pipe(self, m=ONE, folder=None, dtype=None):
        return FluxPipeline.from_pretrained(folder or self.dev, device_mesh=m, torch_dtype=dtype)

    def test_one_device_equal(self):
        pipe = self.pipe()
        latents = pipe(**self.KW, seed=0, output_type="latent").images
        self.assertTrue(torch.equal(latents, self.want(self.ref, output_type="latent")))
        out = pipe(**self.KW, seed=0, output_type="np").images
        self.assertTrue(np.array_equal(out, self.want(self.ref, output_type="np")))
        pil = pipe(**self.KW, seed=0, progress=True).images
        self.assertTrue(np.array_equal(np.asarray(pil[0]), np.asarray(self.want(self.ref)[0])))
        self.assertTrue(np.array_equal(pipe.async_call(**self.KW, seed=0, output_type="np").get().images, out))

    def test_arguments_equal(self):
        pipe = self.pipe()
        cases = {
            "schnell (no guidance embedding)": (self.ref_schnell, dict(guidance_scale=0.0, num_inference_steps=2)),
            "true CFG": (self.ref, dict(negative_prompt="blurry", true_cfg_scale=2.0)),
            "two prompts, two images each": (self.ref, dict(prompt=["a cat", "a dog on the moon"],
                                                            prompt_2=["red", "blue house"], num_images_per_prompt=2,
                                                            num_inference_steps=2)),
            "sigmas": (self.ref, dict(sigmas=[1.0, 0.6, 0.2], num_inference_steps=3)),
            "given packed latents": (self.ref, dict(latents=torch.randn(1, 256, 16,
                                                                        generator=torch.Generator().manual_seed(9)))),
            "negative_prompt_2": (self.ref, dict(negative_prompt="blurry", negative_prompt_2="a dark night",
                                                 true_cfg_scale=2.0)),
            "non-square, another guidance scale": (self.ref, dict(height=32, width=48, guidance_scale=5.0)),
        }
        schnell = self.pipe(folder=self.schnell)
        for name, (ref, kw) in cases.items():
            with self.subTest(name):
                want = self.want(ref, output_type="latent", **kw)
                got = (schnell if ref is self.ref_schnell else pipe)(**dict(self.KW, **kw), seed=0,
                                                                      output_type="latent").images
                self.assertEqual(got.shape, want.shape)
                self.assertTrue(torch.equal(got, want), (got - want).abs().max())

    def test_generator_and_pt(self):
        # generator= instead of seed=, and output_type="pt" (the decoded image as a tensor).
        kw = dict(self.KW, output_type="pt", num_inference_steps=2)
        want = self.want(self.ref, **kw)
        got = self.pipe()(**kw, generator=torch.Generator().manual_seed(0)).images
        self.assertIsInstance(got, torch.Tensor)
        self.assertEqual(got.shape, want.shape)
        self.assertTrue(torch.equal(got, want), (got - want).abs().max())

    def test_prompt_embeds_equal(self):
        pipe = self.pipe()
        with torch.no_grad():
            pe, ppe, _ = self.ref.encode_prompt("a photo of a cat", None, max_sequence_length=16)
            npe, nppe, _ = self.ref.encode_prompt("blurry", None, max_sequence_length=16)
        kw = {k: v for k, v in self.KW.items() if k != "prompt"}
        embeds = dict(prompt_embeds=pe, pooled_prompt_embeds=ppe, negative_prompt_embeds=npe,
                      negative_pooled_prompt_embeds=nppe, true_cfg_scale=2.0)
        with torch.no_grad():
            want = self.ref(**kw, **embeds, generator=torch.Generator().manual_seed(0), output_type="latent").images
        got = pipe(**kw, **embeds, seed=0, output_type="latent").images
        self.assertTrue(torch.equal(got, want))
        with self.assertRaisesRegex(ValueError, "Cannot forward both"):
            pipe(**self.KW, prompt_embeds=pe, pooled_prompt_embeds=ppe)
        with self.assertRaisesRegex(ValueError, "pooled_prompt_embeds"):
            pipe(**kw, prompt_embeds=pe)

    def test_bfloat16_equal(self):
        from diffusers import FluxPipeline as Ref

        ref = Ref.from_pretrained(self.dev).to(torch.bfloat16)
        ref.set_progress_bar_config(disable=True)
        want = self.want(ref, output_type="latent")
        got = self.pipe(dtype=torch.bfloat16)(**self.KW, seed=0, output_type="latent").images
        self.assertEqual(want.dtype, torch.bfloat16)
        self.assertTrue(torch.equal(got, want), (got.float() - want.float()).abs().max())

    def test_meshes_allclose(self):
        want = self.want(self.ref, output_type="latent")
        want_cfg = self.want(self.ref, output_type="latent", negative_prompt="blurry", true_cfg_scale=2.0)
        for name, m in MESHES.items():
            with self.subTest(name):
                pipe = self.pipe(m)
                self.assertFalse(any(n in pipe.text_encoder.mesh.dim_names for n in ("ulysess_cp", "ring_cp")))
                self.assertEqual(len(pipe.vae.mesh.device_ids), 1)
                got = pipe(**self.KW, seed=0, output_type="latent").images
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
                if m.has_dim_name("dp"):
                    # True CFG's two halves in one call split over dp (the CFG parallel).
                    got = pipe(**self.KW, seed=0, output_type="latent", negative_prompt="blurry",
                               true_cfg_scale=2.0).images
                    torch.testing.assert_close(got, want_cfg, rtol=1e-4, atol=1e-4)

    def test_parallel_set(self):
        # dp x tp x ring_cp on 8 devices (item 4): the CFG pair on dp, heads on tp, tokens on the ring.
        m = mesh((2, 2, 2), ("dp", "tp", "ring_cp"))
        want = self.want(self.ref, output_type="latent", negative_prompt="blurry", true_cfg_scale=2.0)
        got = self.pipe(m)(**self.KW, seed=0, output_type="latent", negative_prompt="blurry",
                           true_cfg_scale=2.0).images
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

    def test_bad_input(self):
        pipe = self.pipe()
        with self.assertRaisesRegex(ValueError, "divisible by 2"):
            pipe(**dict(self.KW, height=33))
        with self.assertRaisesRegex(ValueError, "max_sequence_length"):
            pipe(**dict(self.KW, max_sequence_length=513))
        with self.assertRaisesRegex(ValueError, "output_type"):
            pipe(**dict(self.KW, output_type="jpeg"))
        # A folder without the transformer is refused before any component is read.
        broken = f"{self.tmp}/broken"
        shutil.copytree(self.dev, broken)
        shutil.rmtree(f"{broken}/transformer")
        with self.assertRaisesRegex(FileNotFoundError, "has no transformer"):
            FluxPipeline.from_pretrained(broken, device_mesh=ONE)
        with self.assertRaisesRegex(FileNotFoundError, "model_index.json"):
            FluxPipeline.from_pretrained(f"{self.dev}/vae", device_mesh=ONE)
        # The runtime keeps working after the refusals.
        self.assertTrue(torch.equal(pipe(**self.KW, seed=0, output_type="latent").images,
                                    self.want(self.ref, output_type="latent")))

    def test_example_runs(self):
        run_example_script(self, "flux", os.path.join(self.tmp, "example.png"))


class CacheTest(FluxCase):
    """First-Block-Cache against diffusers' own (``FirstBlockCacheConfig``), TeaCache against its
    rule written out here; the skip counts and the PSNR against the uncached run for fixed seeds."""

    KW = dict(prompt="a photo of a cat", num_inference_steps=8, height=32, width=32, guidance_scale=3.5,
              max_sequence_length=16, output_type="np")

    def want_fbcache(self, threshold, **kw):
        from diffusers.hooks import FirstBlockCacheConfig

        self.ref.transformer.enable_cache(FirstBlockCacheConfig(threshold=threshold))
        try:
            with torch.no_grad():
                return self.ref(**dict(self.KW, **kw), generator=torch.Generator().manual_seed(0)).images
        finally:
            self.ref.transformer.disable_cache()

    def test_first_block_cache(self):
        from dtorch.applications._diffusion import psnr

        pipe = FluxPipeline.from_pretrained(self.dev, device_mesh=ONE)
        plain = pipe(**self.KW, seed=0).images
        self.assertIsNone(pipe.last_cache_stats)
        got = pipe(**self.KW, seed=0, first_block_cache_threshold=0.9).images
        stats = pipe.last_cache_stats
        # diffusers' FirstBlockCache makes the same decisions on the same values: the image is equal.
        self.assertTrue(np.array_equal(got, self.want_fbcache(0.9)))
        self.assertEqual((stats["steps"], stats["skipped"]), (8, 2))
        self.assertEqual(stats["decisions"], [False, False, False, True, True, False, False, False])
        self.assertTrue(25 < psnr(got, plain) < 30, psnr(got, plain))
        # The same through dtorch.ExecuteConfig; threshold 0 never skips and changes nothing.
        cfg = dtorch.ExecuteConfig(first_block_cache_threshold=0.9)
        self.assertTrue(np.array_equal(pipe(**self.KW, seed=0, execute_config=cfg).images, got))
        self.assertTrue(np.array_equal(pipe(**self.KW, seed=0, first_block_cache_threshold=0.0).images, plain))
        self.assertEqual(pipe.last_cache_stats["skipped"], 0)
        # True CFG's two calls keep one cache each (diffusers' cache contexts "cond" and "uncond").
        cfg_kw = dict(negative_prompt="blurry", true_cfg_scale=2.0)
        got = pipe(**self.KW, **cfg_kw, seed=0, first_block_cache_threshold=1.2).images
        self.assertEqual(pipe.last_cache_stats["steps"], 16)
        self.assertGreater(pipe.last_cache_stats["skipped"], 0)
        self.assertTrue(np.array_equal(got, self.want_fbcache(1.2, **cfg_kw)))

    def test_first_block_cache_meshes(self):
        from dtorch.applications._diffusion import psnr

        want = self.want_fbcache(0.9)
        for name in ("tp2", "ulysess_cp2"):
            with self.subTest(name):
                pipe = FluxPipeline.from_pretrained(self.dev, device_mesh=MESHES[name])
                got = pipe(**self.KW, seed=0, first_block_cache_threshold=0.9).images
                self.assertEqual(pipe.last_cache_stats["decisions"],
                                 [False, False, False, True, True, False, False, False])
                self.assertGreater(psnr(got, want), 60)

    def test_teacache(self):
        from dtorch.applications._cache import TEACACHE_FLUX_COEFFICIENTS
        from dtorch.applications._diffusion import psnr

        pipe = FluxPipeline.from_pretrained(self.dev, device_mesh=ONE)
        plain = pipe(**self.KW, seed=0).images
        got = pipe(**self.KW, seed=0, teacache_threshold=10.0).images
        stats = pipe.last_cache_stats
        self.assertEqual((stats["steps"], stats["skipped"]), (8, 2))
        self.assertTrue(25 < psnr(got, plain) < 30, psnr(got, plain))
        # TeaCache's rule on the distances read: the first and last steps computed, the rescaled
        # distances summed, a step skipped while the sum stays below the threshold, reset when computed.
        self.assertEqual(len(stats["distances"]), 6)
        acc, want = 0.0, [False]
        for d in stats["distances"]:
            n = len(TEACACHE_FLUX_COEFFICIENTS)
            acc += sum(c * d ** (n - 1 - i) for i, c in enumerate(TEACACHE_FLUX_COEFFICIENTS))
            want.append(acc < 10.0)
            acc = acc if want[-1] else 0.0
        self.assertEqual(stats["decisions"], want + [False])
        self.assertTrue(np.array_equal(pipe(**self.KW, seed=0, teacache_threshold=0.0).images, plain))

    def test_bad_threshold(self):
        pipe = FluxPipeline.from_pretrained(self.dev, device_mesh=ONE)
        for kw, err in ((dict(first_block_cache_threshold=-0.1), ValueError), (dict(teacache_threshold=-1), ValueError),
                        (dict(teacache_threshold=float("nan")), ValueError),
                        (dict(first_block_cache_threshold="0.1"), TypeError),
                        (dict(first_block_cache_threshold=0.1, teacache_threshold=0.1), ValueError),
                        (dict(execute_config=dict(teacache_threshold=0.1)), TypeError)):
            with self.subTest(kw):
                with self.assertRaisesRegex(err, "threshold|ExecuteConfig"):
                    pipe(**self.KW, seed=0, **kw)
        with self.assertRaisesRegex(ValueError, ">= 0"):
            dtorch.ExecuteConfig(first_block_cache_threshold=-1.0)
        self.assertTrue(np.array_equal(pipe(**self.KW, seed=0).images, pipe(**self.KW, seed=0).images))


if __name__ == "__main__":
    unittest.main()
