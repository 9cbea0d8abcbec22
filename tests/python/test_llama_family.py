"""The Llama family against transformers 5 at tiny random sizes: configurations of LlamaForCausalLM
(multi-query attention, an explicit head_dim, tied embeddings, attention and MLP biases, every
rope_scaling type), Qwen2ForCausalLM (q/k/v biases, sliding-window layers), Qwen3ForCausalLM (q/k
norms) and MistralForCausalLM (sliding window), each saved with save_pretrained and loaded through
dtorch.applications.AutoModelForCausalLM. One device: logits torch.equal to transformers' in
float32, bfloat16 and float16. Meshes (tp2, tp4 with fewer kv heads than tp, dp2 x tp2, pp2, the
context-parallel dims): allclose, every replica bitwise equal. The rotary tables: equal to
transformers' rope init functions. Biases and norm weights are drawn away from their 0/1
initialisation so that reading them or not shows in the logits.
"""

import os
import shutil
import tempfile
import unittest

import torch

import dtorch
from dtorch.applications import AutoModelForCausalLM
from dtorch.applications.llama import LlamaConfig
from dtorch.applications.llama.rope import inv_freq_and_factor
from dtorch.test.test_util import local_values

from helpers import assert_close_everywhere, assert_equal_everywhere

transformers = None
try:
    import transformers  # noqa: F811
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
except ImportError:  # pragma: no cover - the platform installs it
    pass

# 12 tokens: longer than the original context of the scaled rope cases (8) and than max_position_embeddings
# of the dynamic case (8), so that longrope's long factors and dynamic's grown base are what run.
PROMPT = torch.tensor([[3, 17, 99, 5, 64, 1, 9, 8, 7, 2, 11, 12], [9, 8, 7, 6, 5, 4, 3, 100, 1, 2, 3, 4]])
BASE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=128, rms_norm_eps=1e-5, max_position_embeddings=16)
ROPE = {
    "linear": {"rope_type": "linear", "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 8},
    "longrope": {"rope_type": "longrope", "short_factor": [1.0 + i / 8 for i in range(8)],
                 "long_factor": [1.0 + i / 4 for i in range(8)], "original_max_position_embeddings": 8},
}
# name: (transformers class prefix, config keywords)
CASES = {
    "llama_mqa": ("Llama", dict(num_key_value_heads=1, rms_norm_eps=1e-3)),
    "llama_head_dim_bias_tied": ("Llama", dict(head_dim=24, attention_bias=True, mlp_bias=True,
                                               tie_word_embeddings=True)),
    **{f"rope_{k}": ("Llama", dict(rope_parameters={**v, "rope_theta": 500.0})) for k, v in ROPE.items()},
    "qwen2": ("Qwen2", dict()),
    "qwen2_sliding": ("Qwen2", dict(use_sliding_window=True, sliding_window=4, max_window_layers=1)),
    "qwen3": ("Qwen3", dict(head_dim=16, attention_bias=True)),
    "mistral": ("Mistral", dict(sliding_window=5)),
}
CASES["rope_dynamic"][1]["max_position_embeddings"] = 8
DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def hf_model(prefix, seed=0, **kw):
    """A tiny transformers model with biases and norm weights drawn away from 0 and 1."""
    torch.manual_seed(seed)
    cfg = getattr(transformers, prefix + "Config")(**{**BASE, **kw})
    model = getattr(transformers, prefix + "ForCausalLM")(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.5)
            elif "norm" in name:
                p.normal_(1.0, 0.3)
    return model


def mesh(shape, names):
    return dtorch.init_device_mesh("cpu", shape, mesh_dim_names=names)


@unittest.skipIf(transformers is None, "transformers is not installed")
class TestLlamaFamily(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
        cls.tmp = tempfile.mkdtemp(prefix="dtorch_llama_family_")
        cls.dirs, cls.hf, cls.ref = {}, {}, {}
        for i, (name, (prefix, kw)) in enumerate(CASES.items()):
            cls.hf[name] = hf_model(prefix, seed=i, **kw)
            cls.dirs[name] = os.path.join(cls.tmp, name)
            cls.hf[name].save_pretrained(cls.dirs[name])
            with torch.no_grad():
                cls.ref[name] = cls.hf[name](PROMPT).logits

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def load(self, name, **kw):
        return AutoModelForCausalLM.from_pretrained(self.dirs[name], **kw)

    def test_class_by_model_type(self):
        want = {"Llama": "LlamaForCausalLM", "Qwen2": "Qwen2ForCausalLM", "Qwen3": "Qwen3ForCausalLM",
                "Mistral": "MistralForCausalLM"}
        for name, (prefix, _) in CASES.items():
            with self.subTest(name=name):
                self.assertEqual(type(self.load(name)).__name__, want[prefix])

    def test_rope_tables_equal_transformers(self):
        """The inverse frequencies and attention factor of each type, at load and, for dynamic and
        longrope, at a length past the original context (transformers' update functions' inputs)."""
        for kind, rope in ROPE.items():
            hf_cfg = transformers.LlamaConfig(**{**BASE, "rope_parameters": {**rope, "rope_theta": 500.0}})
            cfg = LlamaConfig.from_dict(hf_cfg.to_dict())
            with self.subTest(kind=kind):
                want_inv, want_factor = ROPE_INIT_FUNCTIONS[kind](hf_cfg, None)
                got_inv, got_factor = inv_freq_and_factor(cfg)
                self.assertTrue(torch.equal(got_inv, want_inv), f"{got_inv} != {want_inv}")
                self.assertEqual(got_factor, want_factor)
                if kind in ("dynamic", "longrope"):
                    n = 40
                    want_inv, _ = ROPE_INIT_FUNCTIONS[kind](hf_cfg, None, seq_len=torch.tensor(n) if kind == "dynamic"
                                                            else n)
                    self.assertTrue(torch.equal(inv_freq_and_factor(cfg, n)[0], want_inv))
                    self.assertFalse(torch.equal(want_inv, inv_freq_and_factor(cfg)[0]))  # the update matters
        yarn = dict(ROPE["yarn"], mscale=2.0, mscale_all_dim=1.0, beta_fast=16, truncate=False)
        hf_cfg = transformers.LlamaConfig(**{**BASE, "rope_parameters": {**yarn, "rope_theta": 500.0}})
        cfg = LlamaConfig.from_dict(hf_cfg.to_dict())
        want_inv, want_factor = ROPE_INIT_FUNCTIONS["yarn"](hf_cfg, None)
        got_inv, got_factor = inv_freq_and_factor(cfg)
        self.assertTrue(torch.equal(got_inv, want_inv))
        self.assertEqual(got_factor, want_factor)

    def test_one_device_equal(self):
        for name, (prefix, _) in CASES.items():
            for dtype in DTYPES:
                with self.subTest(name=name, dtype=dtype):
                    if dtype == torch.float32:
                        want = self.ref[name]
                    else:
                        hf = getattr(transformers, prefix + "ForCausalLM").from_pretrained(self.dirs[name], dtype=dtype)
                        with torch.no_grad():
                            want = hf.eval()(PROMPT).logits
                    model = self.load(name, dtype=dtype)
                    self.assertEqual(model.model.layers[0].mlp.up_proj.weight.dtype, dtype)
                    assert_equal_everywhere(self, model(PROMPT), want)

    def test_meshes_allclose(self):
        """Every model type on tp2, tp4 (2 kv heads: each replicated on two ranks; one kv head for the
        multi-query case: on all four), dp2 x tp2, pp2 and the context-parallel dims (ring attention takes
        no mask, so the sliding-window models are refused there, before anything is queued); the rope
        variants on tp2 and dp2 x tp2 x ulysess_cp2 (their tables are mesh-independent host data)."""
        full = [((2,), ("tp",)), ((4,), ("tp",)), ((2, 2), ("dp", "tp")), ((2,), ("pp",)),
                ((2, 2), ("ulysess_cp", "ring_cp"))]
        rope = [((2,), ("tp",)), ((2, 2, 2), ("dp", "tp", "ulysess_cp"))]
        for name in CASES:
            for shape, names in rope if name.startswith("rope_") else full:
                with self.subTest(name=name, names=names):
                    model = self.load(name, device_mesh=mesh(shape, names))
                    if "ring_cp" in names and name in ("qwen2_sliding", "mistral"):
                        with self.assertRaisesRegex(NotImplementedError, "ring_cp"):
                            model(PROMPT)
                        continue
                    assert_close_everywhere(self, model(PROMPT), self.ref[name], atol=1e-4, rtol=1e-4)

    def test_kv_heads_replicated_on_tp(self):
        """tp4 with 2 kv heads: rank r computes kv head r // 2 (the one its query heads r read), with the
        key/value weights and biases of that head; the KV cache holds one head per rank."""
        for name, per in (("qwen2", 2), ("llama_mqa", 4)):
            hf = self.hf[name]
            model = self.load(name, device_mesh=mesh((4,), ("tp",)))
            d = hf.config.hidden_size // hf.config.num_attention_heads
            attn, hf_attn = model.model.layers[1].self_attn, hf.model.layers[1].self_attn
            for proj in ("k_proj", "v_proj"):
                for part in ("weight", "bias") if name == "qwen2" else ("weight",):
                    got = local_values(getattr(getattr(attn, proj), part))
                    full = getattr(getattr(hf_attn, proj), part).detach()
                    for r, piece in enumerate(got):
                        with self.subTest(name=name, proj=proj, part=part, rank=r):
                            head = r // per
                            self.assertTrue(torch.equal(piece, full[head * d:(head + 1) * d]))
            cache = model.new_cache(2, 4)
            self.assertEqual([tuple(v.shape) for v in local_values(cache.k[0])], [(2, 1, 4, d)] * 4)

    def test_explicit_head_dim_layout(self):
        """head_dim 24 with hidden 64: q/k/v have heads * 24 rows, o_proj 96 columns, split by heads on tp."""
        model = self.load("llama_head_dim_bias_tied", device_mesh=mesh((2,), ("tp",)))
        attn = model.model.layers[0].self_attn
        self.assertEqual([tuple(v.shape) for v in local_values(attn.q_proj.weight)], [(48, 64)] * 2)
        self.assertEqual([tuple(v.shape) for v in local_values(attn.k_proj.weight)], [(24, 64)] * 2)
        self.assertEqual([tuple(v.shape) for v in local_values(attn.o_proj.weight)], [(64, 48)] * 2)
        self.assertIs(model.lm_head.weight, model.model.embed_tokens.weight)

    def test_tied_checkpoint_that_stores_lm_head(self):
        """Some tied checkpoints store lm_head.weight too: read when it equals the embedding, refused
        (naming it) when it does not."""
        from safetensors.torch import load_file, save_file

        name = "llama_head_dim_bias_tied"
        for delta, ok in ((0.0, True), (1.0, False)):
            folder = os.path.join(self.tmp, f"tied_lm_head_{ok}")
            shutil.copytree(self.dirs[name], folder)
            path = os.path.join(folder, "model.safetensors")
            tensors = load_file(path)
            tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"] + delta
            save_file(tensors, path, metadata={"format": "pt"})
            if ok:
                assert_equal_everywhere(self, AutoModelForCausalLM.from_pretrained(folder)(PROMPT), self.ref[name])
            else:
                with self.assertRaisesRegex(ValueError, "lm_head.weight differs from model.embed_tokens.weight"):
                    AutoModelForCausalLM.from_pretrained(folder)


if __name__ == "__main__":
    unittest.main()
