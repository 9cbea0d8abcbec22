"""Batched generation of the Llama family against transformers' generate, explicit graphs, and what
the loaders and generate refuse.

A batch of prompts of different lengths, left-padded with its attention_mask as transformers takes
it: greedy tokens equal to transformers' generate on one device and on tp2 (and dp2 x tp2, tp2 x
ulysess_cp2, tp2 x pp2, dp2 x tp2 x pp2), for Llama with GQA, a dynamic rope that grows while
decoding, Mistral with a sliding window shorter than the prompt plus the new tokens, and Qwen3; the
padded forward's logits equal;
sampled tokens equal to transformers' sampled generate with the same global seed (its RNG use,
torch.multinomial on the global generator, is reproduced); stop tokens ending rows at different
steps, with the pad token after. A model on a graph of its own next to one on the default graph.
Refusals (unknown model_type, rope type, checkpoint tensors missing, unknown or of the wrong shape,
token ids outside the vocabulary, right padding, a mask on ring attention) raise before anything is
queued (a fresh graph has allocated nothing), and a good model runs after each.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch

import dtorch
from dtorch.applications import AutoModelForCausalLM
from dtorch.applications.llama import LlamaForCausalLM, Qwen2Config

transformers = None
try:
    import transformers  # noqa: F811
    from safetensors.torch import load_file, save_file
except ImportError:  # pragma: no cover - the platform installs them
    pass

BASE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=128, rms_norm_eps=1e-5, max_position_embeddings=64, initializer_range=0.2)
# Three rows: 3 pads, none, 6 pads.
IDS = torch.tensor([[0, 0, 0, 5, 64, 1, 9, 8], [9, 8, 7, 6, 5, 4, 3, 100], [0, 0, 0, 0, 0, 0, 3, 4]])
MASK = (torch.arange(8)[None] >= torch.tensor([3, 0, 6])[:, None]).long()
NEW = 12
CASES = {
    "llama": ("Llama", dict()),
    "dynamic": ("Llama", dict(max_position_embeddings=10, rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                                                          "rope_theta": 100.0})),
    "mistral": ("Mistral", dict(sliding_window=5)),
    "qwen3": ("Qwen3", dict(head_dim=16)),
}


def mesh(shape, names):
    return dtorch.init_device_mesh("cpu", shape, mesh_dim_names=names)


@unittest.skipIf(transformers is None, "transformers is not installed")
class TestLlamaGenerate(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
        cls.tmp = tempfile.mkdtemp(prefix="dtorch_llama_generate_")
        cls.dirs, cls.hf = {}, {}
        for i, (name, (prefix, kw)) in enumerate(CASES.items()):
            torch.manual_seed(i)
            cfg = getattr(transformers, prefix + "Config")(**{**BASE, **kw})
            cls.hf[name] = getattr(transformers, prefix + "ForCausalLM")(cfg).eval()
            cls.dirs[name] = os.path.join(cls.tmp, name)
            cls.hf[name].save_pretrained(cls.dirs[name])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def hf_generate(self, name, **kw):
        with torch.no_grad():
            return self.hf[name].generate(IDS, attention_mask=MASK, max_new_tokens=NEW, eos_token_id=None,
                                          pad_token_id=0, **kw)

    def test_left_padded_greedy_equal_transformers(self):
        meshes = [None, mesh((2,), ("tp",))]
        for name in CASES:
            want = self.hf_generate(name, do_sample=False)
            self.assertEqual(want.shape, (3, 8 + NEW))
            extra = {"llama": [mesh((2, 2), ("dp", "tp")), mesh((2, 2), ("tp", "ulysess_cp"))],
                     "dynamic": [mesh((2, 2), ("tp", "pp"))], "mistral": [mesh((2, 2, 2), ("dp", "tp", "pp"))]}
            extra = extra.get(name, [])
            for m in meshes + extra:
                with self.subTest(name=name, mesh=m):
                    model = AutoModelForCausalLM.from_pretrained(self.dirs[name], device_mesh=m)
                    got = model.generate(IDS, attention_mask=MASK, max_new_tokens=NEW, eos_token_id=[])
                    self.assertTrue(torch.equal(got, want), f"\n{got[:, 8:].tolist()} !=\n{want[:, 8:].tolist()}")

    def test_each_padded_row_equals_its_prompt_alone(self):
        """Padding changes nothing in a row: each equals transformers' generate of that row's prompt alone."""
        model = AutoModelForCausalLM.from_pretrained(self.dirs["llama"])
        got = model.generate(IDS, attention_mask=MASK, max_new_tokens=NEW, eos_token_id=[])
        for row, start in enumerate((3, 0, 6)):
            with torch.no_grad():
                alone = self.hf["llama"].generate(IDS[row:row + 1, start:], max_new_tokens=NEW, do_sample=False,
                                                  eos_token_id=None, pad_token_id=0)
            self.assertTrue(torch.equal(got[row, 8:], alone[0, 8 - start:]), row)

    def test_padded_forward_equal(self):
        """model(ids, attention_mask=...) as transformers' forward: positions 0..S-1, padded keys masked."""
        for name in ("llama", "mistral"):
            with torch.no_grad():
                want = self.hf[name](IDS, attention_mask=MASK).logits
            model = AutoModelForCausalLM.from_pretrained(self.dirs[name])
            self.assertTrue(torch.equal(model(IDS, attention_mask=MASK).to_torch(), want), name)

    def test_dynamic_rope_state_follows_transformers(self):
        """transformers' dynamic rope regrows its base when a forward passes the longest length so far and
        resets below max_position_embeddings: after a generate past it, a short and a medium forward."""
        model = AutoModelForCausalLM.from_pretrained(self.dirs["dynamic"])
        hf = self.hf["dynamic"]
        with torch.no_grad():
            want = hf.generate(IDS[1:], max_new_tokens=NEW, do_sample=False, eos_token_id=None)
        self.assertTrue(torch.equal(model.generate(IDS[1:], max_new_tokens=NEW, eos_token_id=[]), want))
        for ids in (torch.cat([IDS[1:], IDS[1:, :4]], 1), IDS[1:, :5], torch.cat([IDS[1:], IDS[1:]], 1)):
            with torch.no_grad():
                ref = hf(ids).logits
            self.assertTrue(torch.equal(model(ids).to_torch(), ref), ids.shape)

    def test_sampled_equal_transformers(self):
        """do_sample with temperature, top-k and top-p, drawn from torch's global generator as transformers
        draws: the same seed gives the same tokens. A seed or a generator reproduces a run."""
        kw = dict(do_sample=True, temperature=0.8, top_k=40, top_p=0.9)
        for name in ("llama", "mistral"):
            torch.manual_seed(11)
            want = self.hf_generate(name, **kw)
            model = AutoModelForCausalLM.from_pretrained(self.dirs[name])
            torch.manual_seed(11)
            got = model.generate(IDS, attention_mask=MASK, max_new_tokens=NEW, eos_token_id=[], **kw)
            self.assertTrue(torch.equal(got, want), f"{name}\n{got[:, 8:].tolist()} !=\n{want[:, 8:].tolist()}")
        a = model.generate(IDS, attention_mask=MASK, max_new_tokens=6, eos_token_id=[], seed=3, **kw)
        b = model.generate(IDS, attention_mask=MASK, max_new_tokens=6, eos_token_id=[],
                           generator=torch.Generator().manual_seed(3), **kw)
        self.assertTrue(torch.equal(a, b))

    def test_stop_tokens_per_row(self):
        """eos_token_id as a list: each row stops at its first stop token, then gets pad_token_id."""
        full = self.hf_generate("llama", do_sample=False)
        stops = [int(full[0, 8 + 2]), int(full[2, 8 + 6])]
        with torch.no_grad():
            want = self.hf["llama"].generate(IDS, attention_mask=MASK, max_new_tokens=NEW, do_sample=False,
                                             eos_token_id=stops, pad_token_id=127)
        ended = [bool((row[8:] == 127).any()) for row in want]
        self.assertIn(True, ended)
        for m in (None, mesh((2,), ("tp",))):
            model = AutoModelForCausalLM.from_pretrained(self.dirs["llama"], device_mesh=m)
            for eos in (stops, stops[0]):
                with self.subTest(mesh=m, eos=eos):
                    if isinstance(eos, int):
                        with torch.no_grad():
                            want1 = self.hf["llama"].generate(IDS, attention_mask=MASK, max_new_tokens=NEW,
                                                              do_sample=False, eos_token_id=eos, pad_token_id=127)
                    got = model.generate(IDS, attention_mask=MASK, max_new_tokens=NEW, eos_token_id=eos,
                                         pad_token_id=127)
                    self.assertTrue(torch.equal(got, want if isinstance(eos, list) else want1),
                                    f"{got[:, 8:].tolist()}")

    def test_explicit_graph(self):
        """A model on dtorch.Graph() next to one on the default graph: weights, rotary tables, masks,
        caches and tokens all on its graph (an op mixing graphs raises), the same results."""
        g = dtorch.Graph()
        tp2 = mesh((2,), ("tp",))
        on_g = AutoModelForCausalLM.from_pretrained(self.dirs["mistral"], device_mesh=tp2, graph=g)
        on_default = AutoModelForCausalLM.from_pretrained(self.dirs["mistral"], device_mesh=tp2)
        self.assertIs(on_g.graph, g)
        want = self.hf_generate("mistral", do_sample=False)
        for model in (on_g, on_default):
            self.assertTrue(torch.equal(model.generate(IDS, attention_mask=MASK, max_new_tokens=NEW, eos_token_id=[]),
                                        want))
        kw = dict(max_new_tokens=5, eos_token_id=[], do_sample=True, top_p=0.9, seed=2)
        self.assertTrue(torch.equal(on_g.generate(IDS, attention_mask=MASK, **kw),
                                    on_default.generate(IDS, attention_mask=MASK, **kw)))
        with torch.no_grad():
            ref = self.hf["mistral"](IDS).logits
        one = AutoModelForCausalLM.from_pretrained(self.dirs["mistral"], graph=g)
        self.assertTrue(torch.equal(one(IDS).to_torch(), ref))
        cfg = Qwen2Config(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=1, vocab_size=64)
        dtorch.manual_seed(0)
        rand = AutoModelForCausalLM.from_config(cfg, device_mesh=mesh((2,), ("tp",)), graph=g)
        self.assertEqual(rand.generate(IDS[:, -3:] % 64, max_new_tokens=3).shape, (3, 6))

    def _folder(self, name, edit_config=None, edit_tensors=None):
        """A copy of a saved model with its config.json or its tensors edited."""
        dst = tempfile.mkdtemp(dir=self.tmp)
        shutil.copytree(self.dirs["llama"], dst, dirs_exist_ok=True)
        if edit_config:
            with open(os.path.join(dst, "config.json")) as f:
                cfg = json.load(f)
            edit_config(cfg)
            with open(os.path.join(dst, "config.json"), "w") as f:
                json.dump(cfg, f)
        if edit_tensors:
            path = os.path.join(dst, "model.safetensors")
            tensors = load_file(path)
            edit_tensors(tensors)
            save_file(tensors, path, metadata={"format": "pt"})
        return dst

    def assert_refused_before_queueing(self, call, exc, pattern, g=None):
        """``call(g)`` raises ``exc`` matching ``pattern`` and submits nothing to the graph g (a new one
        unless given)."""
        g = g or dtorch.Graph()
        g.sync()
        before = dtorch._C._graph_stats(g)["submitted"]
        with self.assertRaisesRegex(exc, pattern):
            call(g)
        g.sync()
        self.assertEqual(dtorch._C._graph_stats(g)["submitted"], before + 1)  # the sync only

    def test_loaders_refuse_before_queueing(self):
        def rope(cfg):
            cfg["rope_parameters"] = {"rope_type": "proportional", "factor": 2.0, "rope_theta": 1e4}

        cases = [
            (lambda c: c.update(model_type="gemma"), None, ValueError, "model_type 'gemma' is not supported"),
            (rope, None, ValueError, "rope type 'proportional' is not supported"),
            (None, lambda t: t.update({"model.layers.0.self_attn.rotary_emb.inv_freq": torch.ones(8)}), ValueError,
             r"does not use: model\.layers\.0\.self_attn\.rotary_emb\.inv_freq"),
            (None, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"), ValueError,
             r"lacks 1 tensor\(s\).*model\.layers\.1\.mlp\.up_proj\.weight"),
            (None, lambda t: t.update({"model.layers.0.self_attn.k_proj.weight": torch.zeros(48, 64)}), ValueError,
             r"model\.layers\.0\.self_attn\.k_proj\.weight has shape \(48, 64\) in the checkpoint; the config gives "
             r"\(32, 64\)"),
        ]
        m = mesh((2,), ("tp",))
        for edit_config, edit_tensors, exc, pattern in cases:
            with self.subTest(pattern=pattern):
                folder = self._folder("llama", edit_config, edit_tensors)
                self.assert_refused_before_queueing(
                    lambda g: AutoModelForCausalLM.from_pretrained(folder, device_mesh=m, graph=g), exc, pattern)
        # Each class refuses another model_type; so does a mesh the heads cannot split over.
        self.assert_refused_before_queueing(
            lambda g: LlamaForCausalLM.from_pretrained(self.dirs["qwen3"], graph=g), ValueError,
            "model_type is 'qwen3', not 'llama'")
        self.assert_refused_before_queueing(
            lambda g: LlamaForCausalLM.from_pretrained(self.dirs["llama"], device_mesh=mesh((8,), ("tp",)), graph=g),
            ValueError, r"num_attention_heads \(4\) must be divisible by the tp size \(8\)")
        # The runtime goes on: a good model after the refusals.
        g = dtorch.Graph()
        model = AutoModelForCausalLM.from_pretrained(self.dirs["llama"], device_mesh=m, graph=g)
        self.assertTrue(torch.equal(model.generate(IDS, attention_mask=MASK, max_new_tokens=NEW, eos_token_id=[]),
                                    self.hf_generate("llama", do_sample=False)))

    def test_inputs_refused_before_queueing(self):
        g = dtorch.Graph()
        model = AutoModelForCausalLM.from_pretrained(self.dirs["llama"], device_mesh=mesh((2,), ("tp",)), graph=g)
        for bad in (torch.tensor([[1, 2, 128]]), torch.tensor([[-1, 2, 3]])):
            with self.subTest(bad=bad.tolist()):
                self.assert_refused_before_queueing(lambda _: model(bad), IndexError,
                                                    r"input_ids holds token id -?\d+, outside the vocabulary", g)
                self.assert_refused_before_queueing(lambda _: model.generate(bad, max_new_tokens=2), IndexError,
                                                    "input_ids", g)
        with torch.no_grad():  # torch raises the same type for an id outside the embedding
            with self.assertRaises(IndexError):
                self.hf["llama"](torch.tensor([[1, 2, 128]]))
        self.assert_refused_before_queueing(
            lambda _: model.generate(IDS, attention_mask=MASK.flip(1), max_new_tokens=2), ValueError,
            "row 0 has padding after a token", g)
        self.assert_refused_before_queueing(
            lambda _: model.generate(IDS, attention_mask=MASK[:, 1:], max_new_tokens=2), ValueError,
            "attention_mask must be", g)
        ring = AutoModelForCausalLM.from_pretrained(self.dirs["llama"], device_mesh=mesh((2,), ("ring_cp",)), graph=g)
        self.assert_refused_before_queueing(
            lambda _: ring.generate(IDS, attention_mask=MASK, max_new_tokens=2), NotImplementedError, "ring_cp", g)
        # Unpadded rows run on ring attention, and the models still work after the refusals. So does a
        # sliding window there when the prompt fits in it: the decoding steps read the window's keys only,
        # and a mask that keeps them all is dropped.
        with torch.no_grad():
            want = self.hf["llama"].generate(IDS[1:2], max_new_tokens=NEW, do_sample=False, eos_token_id=None)
        for m in (ring, model):
            self.assertTrue(torch.equal(m.generate(IDS[1:2], max_new_tokens=NEW, eos_token_id=[]), want))
        with torch.no_grad():
            want = self.hf["mistral"].generate(IDS[1:2, :4], max_new_tokens=NEW, do_sample=False, eos_token_id=None)
        ring = AutoModelForCausalLM.from_pretrained(self.dirs["mistral"], device_mesh=mesh((2,), ("ring_cp",)))
        self.assertTrue(torch.equal(ring.generate(IDS[1:2, :4], max_new_tokens=NEW, eos_token_id=[]), want))
        self.assert_refused_before_queueing(lambda _: ring.generate(IDS[1:2], max_new_tokens=2), NotImplementedError,
                                            "sliding window", ring.graph)

    def test_example_takes_any_family_folder(self):
        """examples/llama/run.py --model on a Qwen3 folder with a word-level tokenizer: two --prompt make a
        left-padded batch, generated on tp2 and on one device by the script, which compares them."""
        from tokenizers import Tokenizer, models, pre_tokenizers

        folder = os.path.join(self.tmp, "qwen3_tok")
        shutil.copytree(self.dirs["qwen3"], folder)
        words = Tokenizer(models.WordLevel({f"w{i}": i for i in range(128)}, unk_token="w1"))
        words.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
        transformers.PreTrainedTokenizerFast(tokenizer_object=words, pad_token="w0", eos_token="w2",
                                             unk_token="w1").save_pretrained(folder)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        here = os.path.dirname(os.path.dirname(os.path.abspath(dtorch.__file__)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
        r = subprocess.run([sys.executable, os.path.join(root, "examples", "llama", "run.py"), "--model", folder,
                            "--mesh", "tp=2", "--prompt", "w5 w6 w7 w8", "--prompt", "w9", "--max-new-tokens", "4"],
                           env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("Qwen3ForCausalLM, mesh {'tp': 2}: 4 new tokens", r.stdout)
        self.assertIn("matches single-device: True", r.stdout)
        self.assertIn("  ids: [0, 0, 0, 9, ", r.stdout)  # the short prompt, left-padded
        self.assertIn("  text: w5 w6 w7 w8 w", r.stdout)


if __name__ == "__main__":
    unittest.main()
