"""Documented options whose behaviour the rest of the suite did not pin down (issue 35, item 1), each
against transformers, diffusers or torch on the same inputs; docs/testing.md's option table lists
which test covers each option.

- ``generate(do_sample=True)``: each sampling warper alone (temperature, top_k, top_p), all together,
  with stop tokens (``eos_token_id`` as an int and a list, ``stop_token_ids`` added to it,
  ``pad_token_id``) against transformers' sampled ``generate`` with the same global seed;
  ``max_new_tokens=0``.
- The SD3 pipeline's ``__call__``: several prompts with ``num_images_per_prompt > 1`` (the order of
  the images), ``sigmas=``, ``prompt_3``/``negative_prompt_2``/``negative_prompt_3``, the skip-layer
  guidance window and scale, ``max_sequence_length``, ``output_type="pt"``, a non-square size with
  another guidance scale, ``mu`` (given and computed) on a dynamic-shifting scheduler: latents or images
  ``torch.equal`` to diffusers' on one device.
- The flow-matching scheduler's ``set_timesteps`` with user-given ``sigmas=``, ``timesteps=``, both,
  and with dynamic shifting (``mu``), inverted sigmas and a terminal shift: ``torch.equal``.
- Environment variables no other test sets: ``DTORCH_COMM_TIMEOUT_SECOND`` (GlobalOption),
  ``DTORCH_CPU_CACHE_MB`` (the CPU allocation cache's bound; 0 turns it off) and
  ``DTORCH_CHAIN_BLOCK`` (the chain runner's block size: blocks counted, values unchanged), in child
  processes.
- torch's global state that operators read: ``torch.set_default_dtype(torch.float64)`` (factories,
  integer division, casts of Python floats, reductions' dtype), the legacy implicit dim of
  ``softmax``/``log_softmax`` for 0- to 4-D inputs.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest
import warnings

import torch
import torch.nn.functional as TF

import dtorch
import dtorch.nn.functional as F
from dtorch.applications.sd3 import FlowMatchEulerDiscreteScheduler

from helpers import CPU2, randn

transformers = None
try:
    import diffusers  # noqa: F401
    import transformers  # noqa: F811
except ImportError:  # pragma: no cover - the platform installs them
    pass

IDS = torch.tensor([[3, 17, 99, 5, 64, 1, 9, 8], [9, 8, 7, 6, 5, 4, 3, 100]])


@unittest.skipIf(transformers is None, "transformers is not installed")
class TestGenerateOptions(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        transformers.logging.set_verbosity_error()
        cls.tmp = tempfile.mkdtemp(prefix="dtorch_options_")
        torch.manual_seed(0)
        cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                                       num_key_value_heads=2, vocab_size=64, rms_norm_eps=1e-5, rope_theta=500.0,
                                       initializer_range=0.5)
        cls.hf = transformers.LlamaForCausalLM(cfg).eval()
        cls.hf.save_pretrained(cls.tmp)
        from dtorch.applications.llama import LlamaForCausalLM

        cls.model = LlamaForCausalLM.from_pretrained(cls.tmp)
        cls.ids = IDS % 64

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def hf_generate(self, seed, **kw):
        torch.manual_seed(seed)
        with torch.no_grad():
            return self.hf.generate(self.ids, attention_mask=torch.ones_like(self.ids), **kw)

    def ours(self, seed, **kw):
        torch.manual_seed(seed)
        return self.model.generate(self.ids, **kw)

    def test_each_warper_alone_and_together(self):
        # transformers' defaults (top_k=50, top_p=1, temperature=1) made explicit on both sides: 0 and 1
        # are "off" in both.
        off = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=8, eos_token_id=None,
                   pad_token_id=0)
        cases = {"plain": {}, "temperature": dict(temperature=0.4), "top_k": dict(top_k=3),
                 "top_p": dict(top_p=0.3), "all": dict(temperature=1.7, top_k=5, top_p=0.6)}
        seen = set()
        for name, kw in cases.items():
            with self.subTest(name):
                want = self.hf_generate(7, **{**off, **kw})
                got = self.ours(7, **{**off, **kw, "eos_token_id": []})
                self.assertTrue(torch.equal(got, want), f"{got[:, 8:].tolist()} != {want[:, 8:].tolist()}")
                seen.add(tuple(got[:, 8:].flatten().tolist()))
        self.assertEqual(len(seen), len(cases))  # each option changes the tokens: the cases can fail

    def test_sampled_stop_tokens(self):
        kw = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=10)
        full = self.hf_generate(3, **kw, eos_token_id=None, pad_token_id=0)
        # Row 0's third token stops it; a later token of row 1 (another one) stops the other.
        a = int(full[0, 8 + 2])
        b = next(int(t) for t in full[1, 8 + 4:] if int(t) != a)
        for eos, extra in ((a, None), ([a, b], None), (a, [b])):
            with self.subTest(eos=eos, stop_token_ids=extra):
                hf_eos = eos if extra is None else [eos] + extra
                want = self.hf_generate(3, **kw, eos_token_id=hf_eos, pad_token_id=63)
                got = self.ours(3, **kw, eos_token_id=eos, stop_token_ids=extra, pad_token_id=63)
                self.assertTrue(torch.equal(got, want), f"{got[:, 8:].tolist()} != {want[:, 8:].tolist()}")
                self.assertEqual(int(got[0, 8 + 2]), a)
                self.assertTrue(bool((got[0, 8 + 3:] == 63).all()))

    def test_no_new_tokens(self):
        self.assertTrue(torch.equal(self.model.generate(self.ids, max_new_tokens=0), self.ids))
        self.assertTrue(torch.equal(self.model.generate(self.ids, max_new_tokens=0, do_sample=True), self.ids))


@unittest.skipIf(transformers is None, "diffusers is not installed")
class TestSchedulerOptions(unittest.TestCase):
    def test_set_timesteps_given(self):
        from diffusers import FlowMatchEulerDiscreteScheduler as Ref

        sig = [1.0, 0.8, 0.55, 0.3, 0.1]
        ts = [999.0, 800.0, 512.5, 250.0, 30.0]
        for cfg in (dict(shift=3.0), dict(shift=1.0), dict(use_dynamic_shifting=True), dict(shift=2.0, invert_sigmas=True),
                    dict(shift=3.0, shift_terminal=0.2)):
            for kw in (dict(sigmas=sig), dict(timesteps=ts), dict(sigmas=sig, timesteps=ts),
                       dict(num_inference_steps=5, sigmas=sig)):
                if cfg.get("use_dynamic_shifting"):
                    kw = dict(kw, mu=0.8)
                with self.subTest(cfg=cfg, kw=kw):
                    ref, got = Ref(**cfg), FlowMatchEulerDiscreteScheduler(**cfg)
                    ref.set_timesteps(**kw)
                    got.set_timesteps(**kw)
                    self.assertTrue(torch.equal(got.timesteps, ref.timesteps), (got.timesteps, ref.timesteps))
                    self.assertTrue(torch.equal(got.sigmas, ref.sigmas), (got.sigmas, ref.sigmas))
                    self.assertEqual(got.num_inference_steps, ref.num_inference_steps)
        # The given values are used: not the default schedule of the same length.
        a, b = FlowMatchEulerDiscreteScheduler(shift=1.0), FlowMatchEulerDiscreteScheduler(shift=1.0)
        a.set_timesteps(sigmas=sig)
        b.set_timesteps(5)
        self.assertFalse(torch.equal(a.sigmas, b.sigmas))
        with self.assertRaisesRegex(ValueError, "same length"):
            a.set_timesteps(sigmas=sig, timesteps=ts[:3])
        with self.assertRaisesRegex(ValueError, "num_inference_steps"):
            a.set_timesteps(4, sigmas=sig)


@unittest.skipIf(transformers is None, "diffusers is not installed")
class TestPipelineOptions(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        from dtorch.applications.sd3 import StableDiffusion3Pipeline
        from dtorch.applications.sd3.testing import make_tiny_pipeline

        cls.tmp = tempfile.mkdtemp()
        cls.ref = make_tiny_pipeline(cls.tmp, seed=0)
        cls.ref.set_progress_bar_config(disable=True)
        cls.pipe = StableDiffusion3Pipeline.from_pretrained(cls.tmp, device_mesh=dtorch.DeviceMesh("cpu", [0]))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def compare(self, **kw):
        base = dict(height=32, width=32, max_sequence_length=16, output_type="latent", num_inference_steps=2)
        kw = {**base, **kw}
        with torch.no_grad():
            want = self.ref(**kw, generator=torch.Generator().manual_seed(0)).images
        got = self.pipe(**kw, generator=torch.Generator().manual_seed(0)).images
        self.assertEqual(got.shape, want.shape)
        self.assertTrue(torch.equal(got, want), (got - want).abs().max())
        return got

    def test_prompts_times_images_per_prompt(self):
        # Two prompts, three images each: diffusers' order is prompt-major (a, a, a, b, b, b).
        got = self.compare(prompt=["a cat", "a dog on the moon"], negative_prompt=["red", "blue"],
                           num_images_per_prompt=3)
        self.assertEqual(got.shape[0], 6)
        self.assertFalse(torch.equal(got[2], got[3]))

    def test_sigmas(self):
        got = self.compare(prompt="a cat", sigmas=[1.0, 0.5, 0.2], num_inference_steps=None)
        other = self.compare(prompt="a cat", num_inference_steps=3)
        self.assertFalse(torch.equal(got, other))

    def test_third_prompt_and_negatives(self):
        self.compare(prompt="a cat", prompt_2="a dog", prompt_3="the moon", negative_prompt="red",
                     negative_prompt_2="blue", negative_prompt_3="a tree")

    def test_skip_layer_guidance_window(self):
        self.compare(prompt="a cat", num_inference_steps=6, skip_guidance_layers=[1], skip_layer_guidance_scale=1.5,
                     skip_layer_guidance_start=0.0, skip_layer_guidance_stop=0.6)

    def test_size_and_guidance(self):
        got = self.compare(prompt="a cat", height=16, width=32, guidance_scale=2.5)
        self.assertEqual(tuple(got.shape), (1, 4, 16, 32))

    def test_dynamic_shifting_and_mu(self):
        # Both pipelines on a scheduler with use_dynamic_shifting: mu computed from the image's
        # token count (no mu=), and mu= given.
        from diffusers import FlowMatchEulerDiscreteScheduler as Ref

        old = self.ref.scheduler, self.pipe.scheduler
        try:
            self.ref.scheduler = Ref(use_dynamic_shifting=True, base_image_seq_len=16, max_image_seq_len=256)
            self.pipe.scheduler = FlowMatchEulerDiscreteScheduler(use_dynamic_shifting=True, base_image_seq_len=16,
                                                                  max_image_seq_len=256)
            a = self.compare(prompt="a cat", num_inference_steps=3)
            b = self.compare(prompt="a cat", num_inference_steps=3, mu=1.7)
            self.assertFalse(torch.equal(a, b))
        finally:
            self.ref.scheduler, self.pipe.scheduler = old

    def test_max_sequence_length_and_pt(self):
        self.compare(prompt="a photo of a cat on the moon", max_sequence_length=4)
        kw = dict(prompt="a cat", num_inference_steps=2, height=32, width=32, max_sequence_length=16, output_type="pt")
        with torch.no_grad():
            want = self.ref(**kw, generator=torch.Generator().manual_seed(0)).images
        got = self.pipe(**kw, generator=torch.Generator().manual_seed(0)).images
        self.assertTrue(torch.equal(got, want), (got - want).abs().max())


class TestGlobalState(unittest.TestCase):
    def test_default_dtype_float64(self):
        old = torch.get_default_dtype()
        i = torch.tensor([[1, 2, 3], [4, 5, 7]])
        f = randn(2, 3, dtype=torch.float32)
        cases = {
            "zeros": (lambda: dtorch.zeros(2, 3), lambda: torch.zeros(2, 3)),
            "full": (lambda: dtorch.full((2,), 1.5), lambda: torch.full((2,), 1.5)),
            "arange": (lambda: dtorch.arange(0, 1, 0.25), lambda: torch.arange(0, 1, 0.25)),
            "tensor": (lambda: dtorch.tensor([1.5, 2.0]), lambda: torch.tensor([1.5, 2.0])),
            "int / int": (lambda: dtorch.from_torch(i) / dtorch.from_torch(i + 1), lambda: i / (i + 1)),
            "int / 3": (lambda: dtorch.from_torch(i) / 3, lambda: i / 3),
            "int * 1.5": (lambda: dtorch.from_torch(i) * 1.5, lambda: i * 1.5),
            "float32 * 1.5": (lambda: dtorch.from_torch(f) * 1.5, lambda: f * 1.5),
            "sqrt(int)": (lambda: dtorch.from_torch(i).sqrt(), lambda: i.sqrt()),
            "mean(float32)": (lambda: dtorch.from_torch(f).mean(), lambda: f.mean()),
            "int on 2 devices / 2": (lambda: dtorch.from_torch(i, CPU2, [dtorch.Shard(1)]) / 2, lambda: i / 2),
        }
        try:
            torch.set_default_dtype(torch.float64)
            for name, (ours, ref) in cases.items():
                with self.subTest(name):
                    got, want = ours().to_torch(), ref()
                    self.assertEqual(got.dtype, want.dtype)
                    self.assertTrue(torch.equal(got, want), (got, want))
            self.assertEqual(dtorch.zeros(2).dtype, torch.float64)
        finally:
            torch.set_default_dtype(old)
        # And back: float32 again.
        self.assertEqual((dtorch.from_torch(i) / 3).dtype, torch.float32)
        self.assertEqual(dtorch.zeros(2).dtype, torch.float32)

    def test_softmax_implicit_dim(self):
        # torch's legacy rule: dim 0 for 0-, 1- and 3-D inputs, else dim 1.
        for shape in ((), (5,), (3, 4), (2, 3, 4), (2, 3, 4, 5)):
            x = randn(*shape) if shape else torch.tensor(0.5)
            for fn, ref in ((F.softmax, TF.softmax), (F.log_softmax, TF.log_softmax)):
                with self.subTest(fn=fn.__name__, ndim=len(shape)):
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        want = ref(x)
                        got = fn(dtorch.from_torch(x)).to_torch()
                    self.assertTrue(torch.equal(got, want))
                    # (not assertWarns: it walks sys.modules, and transformers' lazy modules import on that)
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        fn(dtorch.from_torch(x))
                    self.assertTrue(any("Implicit dimension choice" in str(w.message) for w in caught), caught)


def child(code, **env):
    """Runs ``code`` in a fresh interpreter with ``env`` added; its stdout's last line."""
    here = os.path.dirname(os.path.dirname(os.path.abspath(dtorch.__file__)))
    e = dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]), **env)
    for k, v in env.items():
        if v is None:
            e.pop(k)
    r = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError(r.stderr[-3000:])
    return r.stdout.strip().splitlines()[-1]


class TestEnvironment(unittest.TestCase):
    def test_comm_timeout_second(self):
        # Read at import: in a child process; GlobalOption.reload() reads it again in this one.
        code = "from dtorch.global_option import GlobalOption as G; print(G.comm_timeout_second)"
        self.assertEqual(child(code, DTORCH_COMM_TIMEOUT_SECOND="7"), "7")
        from dtorch.global_option import GlobalOption

        old = os.environ.pop("DTORCH_COMM_TIMEOUT_SECOND", None)
        try:
            GlobalOption.reload()
            self.assertEqual(GlobalOption.comm_timeout_second, 600)
            os.environ["DTORCH_COMM_TIMEOUT_SECOND"] = "9"
            GlobalOption.reload()
            self.assertEqual(GlobalOption.comm_timeout_second, 9)
        finally:
            os.environ.pop("DTORCH_COMM_TIMEOUT_SECOND", None)
            if old is not None:
                os.environ["DTORCH_COMM_TIMEOUT_SECOND"] = old
            GlobalOption.reload()

    def test_cpu_cache_mb(self):
        # A freed 8 MiB buffer is kept for reuse up to DTORCH_CPU_CACHE_MB; 0 keeps nothing, 4 (MiB)
        # too little for it.
        code = ("import dtorch; from dtorch.test.probes import cached_bytes\n"
                "m = dtorch.DeviceMesh('cpu', [0]); dtorch.empty_cache()\n"
                "x = dtorch.ones(2 * 1024 * 1024, device_mesh=m) + 1; dtorch.synchronize(); del x\n"
                "dtorch.synchronize(); print(cached_bytes())")
        self.assertGreaterEqual(int(child(code, DTORCH_CPU_CACHE_MB=None)), 8 << 20)
        self.assertEqual(int(child(code, DTORCH_CPU_CACHE_MB="0")), 0)
        self.assertEqual(int(child(code, DTORCH_CPU_CACHE_MB="4")), 0)

    def test_heartbeat_ms(self):
        # Read (getenv) each time a main node starts: out of range it is refused naming the value
        # read, so a change to the variable's name, parsing or bounds shows; heartbeat_second= wins.
        code = ("import os, dtorch\n"
                "from dtorch import _C\n"
                "if not _C._cluster_info()['available']: print('no zmq'); raise SystemExit\n"
                "out = []\n"
                "for ms, kw in (('5', {}), ('9', {}), ('600001', {}), ('5', {'heartbeat_second': 1})):\n"
                "    os.environ['DTORCH_HEARTBEAT_MS'] = ms\n"
                "    try:\n"
                "        dtorch.MainNode.set_address('127.0.0.1:0', cpu_devices=1, **kw)\n"
                "        out.append('listening')\n"
                "    except Exception as e:\n"
                "        out.append(type(e).__name__ + ' ' + str(e).split(': ')[-1])\n"
                "print(out)")
        got = child(code, DTORCH_CLUSTER_TOKEN="t")
        if got == "no zmq":
            self.skipTest("this build has no ZeroMQ")
        bad = "ValueError the heartbeat interval must be in [10, 600000] ms, not "
        self.assertEqual(got, str([bad + "5", bad + "9", bad + "600001", "listening"]))

    def test_chain_block(self):
        # The torch backend's chain runner walks a chain in blocks of DTORCH_CHAIN_BLOCK elements
        # (read once per process: a child each), 1024..32768 rounded down to a multiple of 1024,
        # 32768 when unset or out of range. Values never change (torch.equal to eager torch, every
        # size); the blocks run (graph_stats' chain_blocks) are ceil(elements / size) per device.
        code = ("import torch, dtorch\n"
                "from dtorch import DeviceMesh, Replicate, Shard\n"
                "from dtorch.test.probes import chains, graph_stats, held_controller\n"
                "n = 3 * 32768 + 7\n"
                "x = torch.randn(2 * n, generator=torch.Generator().manual_seed(0))\n"
                "def fn(x):\n"
                "    x = x * 2\n"
                "    x = x + 1\n"
                "    x = x.exp()\n"
                "    x = x - 3\n"
                "    return x\n"
                "out = []\n"
                "for mesh, pl in ((DeviceMesh('cpu', [0]), [Replicate()]), (DeviceMesh('cpu', [0, 1]), [Shard(0)])):\n"
                "    d = dtorch.from_torch(x, mesh, pl)\n"
                "    dtorch.synchronize()\n"
                "    s0 = graph_stats()\n"
                "    with chains(True):\n"
                "        with held_controller():\n"
                "            y = fn(d)\n"
                "        dtorch.synchronize()\n"
                "    s1 = graph_stats()\n"
                "    a, b = y.to_torch(), fn(x)\n"
                "    eq = torch.equal(a, b)\n"
                "    if not eq:  # what a rare mismatch was (seen twice in CI, not reproduced here)\n"
                "        bad = (a != b).nonzero().flatten()\n"
                "        print('mismatch at', bad[:8].tolist(), 'of', bad.numel(), 'threads', torch.get_num_threads(),\n"
                "              'dtorch', a[bad[:3]].tolist(), 'eager', b[bad[:3]].tolist(),\n"
                "              'eager again equal', torch.equal(fn(x), b), 'input equal', torch.equal(d.to_torch(), x))\n"
                "    out += [s1['nodes_fused'] - s0['nodes_fused'], s1['chain_blocks'] - s0['chain_blocks'], eq]\n"
                "print(out)")
        n = 3 * 32768 + 7
        for value, size in ((None, 32768), ("1024", 1024), ("5000", 4096), ("2047", 1024),
                            ("512", 32768), ("40000", 32768)):
            with self.subTest(DTORCH_CHAIN_BLOCK=value):
                # One device: 2n elements; two devices, Shard(0): n each.
                want = [4, -(-2 * n // size), True, 4, 2 * -(-n // size), True]
                self.assertEqual(child(code, DTORCH_CHAIN_BLOCK=value), str(want))


if __name__ == "__main__":
    unittest.main()
