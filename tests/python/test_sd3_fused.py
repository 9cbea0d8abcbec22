"""The SD3 transformer with compiled fused ops (issue 31, item 3): with
``ExecuteConfig(compile_fused_ops=True)`` every adaLN modulation runs as
``compiled_op.layer_norm_mul_add`` through torch.compile on the workers; the result is allclose to
diffusers at a tiny random config, and the trace shows the fused kernels. Without it the op
sequence is diffusers' (test_sd3.py checks it bit-identical). torch.compile is slow on a small
machine: one shape set per mesh, compiled once for the process."""

import os
import unittest

import torch


import dtorch
from dtorch.applications import _cache
from dtorch.applications.sd3 import SD3Transformer2DModel

import test_sd3
from helpers import assert_close_everywhere
from test_sd3 import inputs, mesh

TESTED_OPS = set()

ON = dtorch.ExecuteConfig(compile_fused_ops=True)
FUSED = "compiled_op.layer_norm_mul_add"
# adaLN sites per device, counted from diffusers' SD3 blocks: a full block modulates x and the
# context before the attention and before the FF (4); the last block (context_pre_only) x twice
# and the context once (AdaLayerNormContinuous) (3); a dual-attention block modulates x once more
# for its second attention; norm_out once.
SITES = {"sd3": 4 + 3 + 1, "sd35": 4 + 1 + 3 + 1}


def fused_kernels(events):
    return sum(1 for e in events if e.get("cat") == "kernel" and e["args"].get("kernel") == FUSED)


@unittest.skipIf(os.environ.get("DTORCH_SKIP_COMPILE") == "1", "DTORCH_SKIP_COMPILE=1: torch.compile cases skipped")
class FusedTransformerTest(unittest.TestCase):
    """SLOW: torch.compile on the workers (four shape sets: x and the context, on 1 device and dp2)."""

    # test_sd3's tiny random diffusers models ("sd3", "sd35") saved into a temporary folder
    setUpClass = classmethod(test_sd3.TransformerTest.setUpClass.__func__)
    tearDownClass = classmethod(test_sd3.TransformerTest.tearDownClass.__func__)
    want = test_sd3.TransformerTest.want

    def check(self, name, m):
        x, c, pooled, t = inputs()
        model = SD3Transformer2DModel.from_pretrained(self.dirs[name], device_mesh=m)
        with dtorch.profiler.trace(None) as tr:
            got = model(x, c, pooled, t, execute_config=ON)
            got.to_torch()
        self.assertEqual(fused_kernels(tr.events), SITES[name] * m.size())
        assert_close_everywhere(self, got, self.want(name, x, c, pooled, t), rtol=1e-4, atol=1e-4)
        # Off (the default, or a config without it): no fused kernel runs.
        with dtorch.profiler.trace(None) as tr:
            off = model(x, c, pooled, t, execute_config=dtorch.ExecuteConfig())
            off.to_torch()
        self.assertEqual(fused_kernels(tr.events), 0)

    def test_one_device(self):
        for name in ("sd3", "sd35"):
            with self.subTest(name):
                self.check(name, mesh((1,), ("dp",)))

    def test_dp2_tp2(self):
        """Batch-sharded (scale/shift follow x's Shard(0)) and head-split meshes, every replica."""
        self.check("sd3", mesh((2, 2), ("dp", "tp")))

    def test_cp2_uneven_text_tokens(self):
        """A 1-D mesh with uneven blocks: Ulysses context parallel over the tokens (7 text tokens:
        4 and 3 per device), x Shard(1) at every fused site, scale/shift Replicate."""
        self.check("sd3", mesh((2,), ("ulysess_cp",)))

    def test_bad_config_type(self):
        model = SD3Transformer2DModel.from_pretrained(self.dirs["sd3"], device_mesh=mesh((1,), ("dp",)))
        with self.assertRaisesRegex(TypeError, "execute_config must be a dtorch.ExecuteConfig"):
            model(*inputs(), execute_config={"compile_fused_ops": True})


@unittest.skipIf(os.environ.get("DTORCH_SKIP_COMPILE") == "1", "DTORCH_SKIP_COMPILE=1: torch.compile cases skipped")
class FusedPipelineTest(unittest.TestCase):
    """SLOW: the pipeline hands its execute_config to the transformer (alone, and merged with a
    cache threshold), against diffusers' pipeline on test_sd3's tiny random folder."""

    # test_sd3's tiny random pipeline folder and diffusers' latents for KW (3 steps, CFG)
    KW = test_sd3.PipelineTest.KW
    setUpClass = classmethod(test_sd3.PipelineTest.setUpClass.__func__)
    tearDownClass = classmethod(test_sd3.PipelineTest.tearDownClass.__func__)

    def test_config_reaches_the_transformer(self):
        from dtorch.applications.sd3 import StableDiffusion3Pipeline

        pipe = StableDiffusion3Pipeline.from_pretrained(self.tmp, device_mesh=dtorch.DeviceMesh("cpu", [0]))
        steps = self.KW["num_inference_steps"]
        # threshold 0: First-Block-Cache on but never skipping (a distance is never below 0)
        for extra in ({}, {"first_block_cache_threshold": 0.0}):
            with self.subTest(**extra), dtorch.profiler.trace(None) as tr:
                got = pipe(**self.KW, generator=torch.Generator().manual_seed(0), output_type="latent",
                           execute_config=ON, **extra).images
                got = got.to_torch() if isinstance(got, dtorch.Tensor) else got
            # one transformer call a step (the CFG halves are one batch), SITES["sd3"] sites each
            self.assertEqual(fused_kernels(tr.events), steps * SITES["sd3"])
            self.assertEqual(pipe.last_cache_stats is not None, bool(extra))
            torch.testing.assert_close(got, self.want_latents, rtol=1e-4, atol=1e-4)


class ExecuteConfigMergeTest(unittest.TestCase):
    """applications/_cache.execute_config keeps compile_fused_ops (it dropped a config asking for it alone)."""

    def test_fused_alone_is_kept(self):
        got = _cache.execute_config(ON, None, None)
        self.assertIsNotNone(got)
        self.assertTrue(got.compile_fused_ops)
        self.assertFalse(got.enabled)  # no cache

    def test_merged_with_a_threshold(self):
        got = _cache.execute_config(ON, 0.1, None)
        self.assertTrue(got.compile_fused_ops)
        self.assertEqual(got.first_block_cache_threshold, 0.1)
        self.assertFalse(_cache.execute_config(None, 0.1, None).compile_fused_ops)

    def test_nothing_asked_is_none(self):
        self.assertIsNone(_cache.execute_config(None, None, None))
        self.assertIsNone(_cache.execute_config(dtorch.ExecuteConfig(), None, None))


if __name__ == "__main__":
    unittest.main()
