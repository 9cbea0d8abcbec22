"""dtorch.applications.llama against transformers' LlamaForCausalLM: a tiny random model saved with
save_pretrained (one safetensors file, and a sharded checkpoint with model.safetensors.index.json),
loaded with from_pretrained on one device (logits torch.equal) and on dp/tp/pp/context-parallel meshes
and 5-D meshes (allclose 1e-4, every replica bitwise equal); greedy generate() tokens equal to transformers'
generate(do_sample=False); sampled generate() equal to a reference sampler built from transformers'
own logits warpers; stop tokens as transformers handles them.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch

import dtorch
from dtorch import Partial, Replicate, Shard
from dtorch.applications.llama import LlamaConfig, LlamaForCausalLM
from dtorch.test.test_util import local_values

from helpers import assert_close_everywhere, assert_equal_everywhere

transformers = None
try:
    import transformers  # noqa: F811
except ImportError:  # pragma: no cover - the platform installs it
    pass

PROMPT = torch.tensor([[3, 17, 99, 5, 64, 1, 9, 8], [9, 8, 7, 6, 5, 4, 3, 100]])
NEW = 32


def _hf_model(tied, seed, **kw):
    torch.manual_seed(seed)
    cfg = transformers.LlamaConfig(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=128, tie_word_embeddings=tied,
                                   rms_norm_eps=1e-5, rope_theta=500.0, **kw)
    return transformers.LlamaForCausalLM(cfg).eval()


def _mesh(shape, names):
    return dtorch.init_device_mesh("cpu", shape, mesh_dim_names=names)


@unittest.skipIf(transformers is None, "transformers is not installed")
class TestLlama(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="dtorch_llama_")
        cls.tied_dir = os.path.join(cls.tmp, "tied")
        cls.untied_dir = os.path.join(cls.tmp, "untied")
        cls.hf_tied = _hf_model(True, 0)
        cls.hf_tied.save_pretrained(cls.tied_dir)
        cls.hf_untied = _hf_model(False, 1)
        cls.hf_untied.save_pretrained(cls.untied_dir, max_shard_size="100KB")
        with torch.no_grad():
            cls.ref_tied = cls.hf_tied(PROMPT).logits
            cls.ref_untied = cls.hf_untied(PROMPT).logits

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_config(self):
        cfg = LlamaConfig.from_json_file(self.untied_dir)
        hf = self.hf_untied.config
        self.assertEqual((cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, cfg.num_attention_heads,
                          cfg.num_key_value_heads, cfg.head_dim, cfg.vocab_size, cfg.tie_word_embeddings),
                         (64, 96, 3, 4, 2, 16, 128, False))
        self.assertEqual((cfg.rms_norm_eps, cfg.rope_theta, cfg.bos_token_id, cfg.eos_token_ids),
                         (1e-5, 500.0, hf.bos_token_id, [hf.eos_token_id]))
        self.assertTrue(LlamaConfig.from_json_file(self.tied_dir).tie_word_embeddings)
        # A transformers 4.x file (rope_theta and rope_scaling at the top level) and llama3 scaling.
        old = LlamaConfig.from_dict({"hidden_size": 64, "num_attention_heads": 4, "rope_theta": 1e6,
                                     "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                      "high_freq_factor": 4.0,
                                                      "original_max_position_embeddings": 8192}})
        self.assertEqual((old.rope_theta, old.rope_type, old.head_dim), (1e6, "llama3", 16))
        hf3 = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, rope_theta=1e6,
                                       rope_scaling=old.rope_scaling)
        want, _ = transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS["llama3"](hf3, None)
        self.assertTrue(torch.equal(old.inv_freq(), want))
        lin = LlamaConfig.from_dict({"hidden_size": 64, "num_attention_heads": 4, "rope_parameters": {
            "rope_type": "linear", "factor": 4.0, "rope_theta": 1e4}})
        hf_lin = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4,
                                          rope_parameters={"rope_type": "linear", "factor": 4.0, "rope_theta": 1e4})
        want, _ = transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS["linear"](hf_lin, None)
        self.assertTrue(torch.equal(lin.inv_freq(), want))
        with self.assertRaisesRegex(ValueError, "rope type 'proportional' is not supported"):
            LlamaConfig.from_dict({"rope_scaling": {"rope_type": "proportional", "factor": 2.0}})

    def test_sharded_checkpoint_files(self):
        names = os.listdir(self.untied_dir)
        self.assertIn("model.safetensors.index.json", names)
        with open(os.path.join(self.untied_dir, "model.safetensors.index.json")) as f:
            self.assertGreater(len(set(json.load(f)["weight_map"].values())), 1)

    def test_one_device_equal(self):
        for folder, ref in ((self.tied_dir, self.ref_tied), (self.untied_dir, self.ref_untied)):
            for mesh in (None, dtorch.DeviceMesh("cpu", [0])):
                with self.subTest(folder=os.path.basename(folder), mesh=mesh):
                    model = LlamaForCausalLM.from_pretrained(folder, device_mesh=mesh)
                    assert_equal_everywhere(self, model(PROMPT), ref)

    def test_one_device_bfloat16_equal(self):
        hf = transformers.LlamaForCausalLM.from_pretrained(self.untied_dir, dtype=torch.bfloat16).eval()
        with torch.no_grad():
            want = hf(PROMPT).logits
        model = LlamaForCausalLM.from_pretrained(self.untied_dir, dtype=torch.bfloat16)
        self.assertEqual(model.model.layers[0].mlp.up_proj.weight.dtype, torch.bfloat16)
        assert_equal_everywhere(self, model(PROMPT), want)

    def test_biases(self):
        """attention_bias and mlp_bias (non-zero): column biases Shard(0), row biases Partial (added once)."""
        hf = _hf_model(False, 2, attention_bias=True, mlp_bias=True)
        with torch.no_grad():
            for name, p in hf.named_parameters():
                if name.endswith("bias"):
                    p.normal_()
            want = hf(PROMPT).logits
        folder = os.path.join(self.tmp, "bias")
        hf.save_pretrained(folder)
        assert_equal_everywhere(self, LlamaForCausalLM.from_pretrained(folder)(PROMPT), want)
        mesh = _mesh((2, 2), ("dp", "tp"))
        model = LlamaForCausalLM.from_pretrained(folder, device_mesh=mesh)
        self.assertEqual(list(model.model.layers[0].self_attn.o_proj.bias.placements), [Replicate(), Partial()])
        assert_close_everywhere(self, model(PROMPT), want, atol=1e-4, rtol=1e-4)

    def test_meshes_allclose(self):
        cases = [((2,), ("dp",)), ((2,), ("tp",)), ((2,), ("pp",)), ((2, 2), ("tp", "pp")),
                 ((2, 2, 2), ("dp", "tp", "pp")),
                 ((2, 2, 2, 1, 1), ("dp", "tp", "pp", "ulysess_cp", "ring_cp"))]
        for shape, names in cases:
            for folder, ref in ((self.tied_dir, self.ref_tied), (self.untied_dir, self.ref_untied)):
                with self.subTest(names=names, folder=os.path.basename(folder)):
                    mesh = _mesh(shape, names)
                    model = LlamaForCausalLM.from_pretrained(folder, device_mesh=mesh)
                    logits = model(PROMPT)
                    assert_close_everywhere(self, logits, ref, atol=1e-4, rtol=1e-4)
                    self.assertEqual(logits.device_mesh, mesh.unbind("pp")[-1])

    def test_context_parallel(self):
        """The context-parallel attention (Ulysses, ring, both) under the unchanged model: the sequence
        sharded on the CP dims (9 tokens: uneven), with dp, tp and pp, up to 16 devices."""
        ids = torch.cat([PROMPT, torch.tensor([[7], [1]])], dim=1)
        with torch.no_grad():
            ref = self.hf_untied(ids).logits
        cases = [((2,), ("ulysess_cp",)), ((2,), ("ring_cp",)), ((2, 2), ("ulysess_cp", "ring_cp")),
                 ((2, 2, 2, 2), ("dp", "tp", "pp", "ulysess_cp")),
                 ((1, 2, 1, 2, 2), ("dp", "tp", "pp", "ulysess_cp", "ring_cp"))]
        for shape, names in cases:
            with self.subTest(names=names):
                mesh = _mesh(shape, names)
                model = LlamaForCausalLM.from_pretrained(self.untied_dir, device_mesh=mesh)
                logits = model(ids)
                cp = [i for i, n in enumerate(logits.device_mesh.dim_names) if n in ("ulysess_cp", "ring_cp")]
                self.assertTrue(all(logits.placements[i] == Shard(1) for i in cp))  # the sequence stays sharded
                assert_close_everywhere(self, logits, ref, atol=1e-4, rtol=1e-4)
        with torch.no_grad():
            want = self.hf_untied.generate(ids[:1], max_new_tokens=12, do_sample=False)
        model = LlamaForCausalLM.from_pretrained(self.untied_dir, device_mesh=_mesh((2, 2), ("tp", "ring_cp")))
        self.assertTrue(torch.equal(model.generate(ids[:1], max_new_tokens=12), want))

    def test_parameter_layout(self):
        """Each parameter lives on its layer's stage and every device holds only its shard."""
        mesh = _mesh((2, 2, 2), ("dp", "tp", "pp"))
        model = LlamaForCausalLM.from_pretrained(self.untied_dir, device_mesh=mesh)
        stages = mesh.unbind("pp")
        self.assertEqual(dtorch.assign_layers_to_stages(3, 2), [0, 0, 1])
        for i, stage in enumerate([0, 0, 1]):
            layer = model.model.layers[i]
            q, o = layer.self_attn.q_proj.weight, layer.self_attn.o_proj.weight
            self.assertEqual(q.device_mesh, stages[stage])
            self.assertEqual(list(q.placements), [Replicate(), Shard(0)])
            self.assertEqual(list(o.placements), [Replicate(), Shard(1)])
            self.assertEqual([tuple(v.shape) for v in local_values(q)], [(32, 64)] * 4)
            self.assertEqual([tuple(v.shape) for v in local_values(layer.mlp.down_proj.weight)], [(64, 48)] * 4)
        self.assertEqual(model.model.embed_tokens.weight.device_mesh, stages[0])
        self.assertEqual(model.lm_head.weight.device_mesh, stages[1])
        self.assertEqual(list(model.lm_head.weight.placements), [Replicate(), Shard(0)])
        cache = model.new_cache(2, 16)
        self.assertEqual(list(cache.k[0].placements), [Shard(0), Shard(1)])
        self.assertEqual(cache.k[2].device_mesh, stages[1])
        # The tied model across stages: lm_head is the embedding's weight, copied to the last stage.
        tied = LlamaForCausalLM.from_pretrained(self.tied_dir, device_mesh=_mesh((2,), ("pp",)))
        self.assertEqual(tied.lm_head.weight.device_mesh, dtorch.DeviceMesh("cpu", [1]))
        assert_equal_everywhere(self, tied.lm_head.weight, self.hf_tied.lm_head.weight.detach())

    def test_stage_moves(self):
        """What the pipeline relies on: redistribute_by_dict onto another stage's mesh, with dims of size 1
        not named (raise_error mode) and names the mesh lacks, and onto the one-device stages of pp=2."""
        t = torch.arange(8.0).view(2, 4)
        stages = _mesh((1, 2, 2), ("dp", "tp", "pp")).unbind("pp")
        x = dtorch.from_torch(t, stages[0], [Replicate(), Shard(1)])
        y = x.redistribute_by_dict(stages[1], {"tp": Shard(0), "ulysess_cp": Shard(1)})
        self.assertEqual((y.device_mesh, list(y.placements)), (stages[1], [Replicate(), Shard(0)]))
        assert_equal_everywhere(self, y, t)
        one = _mesh((2,), ("pp",)).unbind("pp")
        z = dtorch.from_torch(t, one[0]).redistribute_by_dict(one[1], {"dp": Shard(0), "tp": Replicate()})
        self.assertEqual(z.device_mesh, dtorch.DeviceMesh("cpu", [1]))
        assert_equal_everywhere(self, z, t)

    def test_chunked_prefill(self):
        """The prompt in two chunks through the cache (the second attends to the cached positions with a
        causal mask offset by them) gives the logits of the whole prompt."""
        for mesh in (dtorch.DeviceMesh("cpu", [0]), _mesh((2, 2), ("tp", "pp"))):
            with self.subTest(mesh=mesh):
                model = LlamaForCausalLM.from_pretrained(self.untied_dir, device_mesh=mesh)
                cache = model.new_cache(2, 8)
                first = model(PROMPT[:, :5], cache=cache, start=0).to_torch()
                second = model(PROMPT[:, 5:], cache=cache, start=5).to_torch()
                got = torch.cat([first, second], dim=1)
                self.assertTrue(torch.allclose(got, self.ref_untied, atol=1e-4, rtol=1e-4),
                                f"max difference {(got - self.ref_untied).abs().max()}")

    def test_generate_greedy(self):
        prompt = PROMPT[:1]
        with torch.no_grad():
            want = self.hf_untied.generate(prompt, max_new_tokens=NEW, do_sample=False)
        self.assertEqual(want.shape[1], prompt.shape[1] + NEW)  # no stop token met: a full-length check
        for mesh in (dtorch.DeviceMesh("cpu", [0]), _mesh((2, 2), ("tp", "pp"))):
            with self.subTest(mesh=mesh):
                model = LlamaForCausalLM.from_pretrained(self.untied_dir, device_mesh=mesh)
                got = model.generate(prompt, max_new_tokens=NEW)
                self.assertTrue(torch.equal(got, want), f"{got.tolist()} != {want.tolist()}")

    def test_generate_batch_dp(self):
        with torch.no_grad():
            want = self.hf_tied.generate(PROMPT, max_new_tokens=8, do_sample=False)
        model = LlamaForCausalLM.from_pretrained(self.tied_dir, device_mesh=_mesh((2, 2), ("dp", "tp")))
        self.assertTrue(torch.equal(model.generate(PROMPT, max_new_tokens=8), want))

    def test_stop_token(self):
        model = LlamaForCausalLM.from_pretrained(self.tied_dir)
        full = model.generate(PROMPT, max_new_tokens=12, eos_token_id=[])
        s = PROMPT.shape[1]
        # A token that the first sequence makes at step 4 and that ends it there.
        stop = int(full[0, s + 4])
        first = next(j for j in range(12) if int(full[0, s + j]) == stop)
        with torch.no_grad():
            want = self.hf_tied.generate(PROMPT, max_new_tokens=12, do_sample=False, eos_token_id=stop,
                                         pad_token_id=0)
        got = model.generate(PROMPT, max_new_tokens=12, eos_token_id=stop, pad_token_id=0)
        self.assertTrue(torch.equal(got, want), f"{got.tolist()} != {want.tolist()}")
        self.assertEqual(int(got[0, s + first]), stop)
        self.assertTrue(bool((got[0, s + first + 1:] == 0).all()))
        # stop_token_ids add to the config's eos; a batch of one ends at its stop token.
        one = model.generate(PROMPT[:1], max_new_tokens=12, stop_token_ids=[stop])
        self.assertEqual(one.shape[1], s + first + 1)

    def test_generate_sampled(self):
        model = LlamaForCausalLM.from_pretrained(self.tied_dir)
        kw = dict(do_sample=True, temperature=0.7, top_k=20, top_p=0.9, eos_token_id=[])
        a = model.generate(PROMPT, 10, seed=5, **kw)
        self.assertTrue(torch.equal(a, model.generate(PROMPT, 10, seed=5, **kw)))
        self.assertTrue(torch.equal(a, model.generate(PROMPT, 10, generator=torch.Generator().manual_seed(5), **kw)))
        self.assertFalse(torch.equal(a, model.generate(PROMPT, 10, seed=6, **kw)))
        # The reference: transformers' logits and its own warpers, torch.multinomial with the same generator.
        lp = transformers.generation.logits_process
        warpers = [lp.TemperatureLogitsWarper(0.7), lp.TopKLogitsWarper(20), lp.TopPLogitsWarper(0.9)]
        g = torch.Generator().manual_seed(5)
        ids = PROMPT.clone()
        with torch.no_grad():
            for _ in range(10):
                scores = self.hf_tied(ids).logits[:, -1, :].float()
                for w in warpers:
                    scores = w(ids, scores)
                nxt = torch.multinomial(scores.softmax(-1), 1, generator=g)
                ids = torch.cat([ids, nxt], dim=1)
        self.assertTrue(torch.equal(a, ids), f"{a.tolist()} != {ids.tolist()}")

    def test_random_init_and_dtorch_ids(self):
        cfg = LlamaConfig.from_json_file(self.tied_dir)
        mesh = _mesh((2,), ("tp",))
        dtorch.manual_seed(0)
        model = LlamaForCausalLM(cfg, device_mesh=mesh)
        ids = dtorch.from_torch(PROMPT, mesh)
        a, b = model(ids).to_torch(), model(PROMPT).to_torch()
        self.assertTrue(torch.equal(a, b))
        self.assertEqual(a.shape, (2, 8, 128))

    def test_example_runs_with_its_defaults(self):
        """examples/llama/run.py: dp2 x tp2 x pp2 on 8 CPU devices, compared with one device by the script."""
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        here = os.path.dirname(os.path.dirname(os.path.abspath(dtorch.__file__)))  # the dtorch this test imports
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
        r = subprocess.run([sys.executable, os.path.join(root, "examples", "llama", "run.py")], env=env,
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("mesh {'dp': 2, 'tp': 2, 'pp': 2}: 32 new tokens", r.stdout)
        self.assertIn("matches single-device: True", r.stdout)
        self.assertEqual(r.stdout.count("ids:"), 2)

    @unittest.skipUnless(dtorch._C._cluster_info()["available"], "built without ZeroMQ")
    def test_example_on_two_worker_nodes(self):
        """examples/llama/run.py --nodes 2 --spawn-nodes: the same dp2 x tp2 x pp2 generation with this
        process as a cluster's main node and the 8 devices on two dtorch-node processes (4 each), equal
        to one device; the nodes it started are gone when it returns."""
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        here = os.path.dirname(os.path.dirname(os.path.abspath(dtorch.__file__)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
        env.pop("DTORCH_CLUSTER_TOKEN", None)  # the script makes one for the nodes it starts
        r = subprocess.run([sys.executable, os.path.join(root, "examples", "llama", "run.py"), "--nodes", "2",
                            "--spawn-nodes", "--max-new-tokens", "8", "--node-timeout", "120"], env=env,
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"worker node 0 \(.*\): devices 0\.\.3\n")
        self.assertRegex(r.stdout, r"worker node 1 \(.*\): devices 4\.\.7\n")
        self.assertIn("mesh {'dp': 2, 'tp': 2, 'pp': 2}: 8 new tokens", r.stdout)
        self.assertIn("matches single-device: True", r.stdout)
        pids = [int(m) for m in re.findall(r"pid (\d+)\)", r.stdout)]
        self.assertEqual(len(pids), 2)
        for pid in pids:  # the script waited for them: reaped, no such process now
            self.assertFalse(os.path.exists(f"/proc/{pid}"), pid)

    def test_errors(self):
        with self.assertRaisesRegex(ValueError, r"num_attention_heads \(4\) must be divisible by the tp size \(8\)"):
            LlamaForCausalLM.from_pretrained(self.tied_dir, device_mesh=_mesh((8,), ("tp",)))
        with self.assertRaises(FileNotFoundError):
            LlamaForCausalLM.from_pretrained(self.tmp)
        model = LlamaForCausalLM.from_pretrained(self.tied_dir)
        with self.assertRaisesRegex(ValueError, "input_ids must be"):
            model(torch.tensor([1, 2, 3]))
        with self.assertRaisesRegex(ValueError, "max_new_tokens"):
            model.generate(PROMPT, max_new_tokens=-1)
        cache = model.new_cache(2, 4)
        with self.assertRaisesRegex(ValueError, "do not fit"):
            model(PROMPT, cache=cache)


if __name__ == "__main__":
    unittest.main()
