"""Mixture-of-experts models against transformers 5 at tiny random sizes: MixtralForCausalLM (top-2 of 4
experts, float32 routing weights), Qwen2MoeForCausalLM (top-3 of 8, no renormalisation, a shared
expert behind its sigmoid gate, a dense layer from mlp_only_layers) and Qwen3MoeForCausalLM (q/k
norms, norm_topk_prob, a dense layer from decoder_sparse_step), each saved with save_pretrained and
loaded through AutoModelForCausalLM. The reference is transformers' eager experts (one GEMM per
expert on its tokens, contributions added in expert order).

One device: logits torch.equal in float32 (where this CPU's GEMMs give a row the same bits at the
routing's row counts as at many, gemm_rows_stable; else allclose) and bfloat16. Experts over ep (ep2,
ep4, ep2 x tp2, dp2 x ep2, ep2 x pp2): allclose (exact where no tp splits a sum), every replica equal; each rank holds
its block of experts; greedy generate of a left-padded batch equal to transformers'. The dispatch
is two all-to-alls per sparse layer on ep (explain), and the forward reads nothing back to the
client. Refusals (a missing, wrong-shaped or unused expert tensor, an ep size that does not divide
the experts, a context-parallel mesh dim, token ids outside the vocabulary) raise before anything is
queued, and the runtime keeps working.
"""

import os
import shutil
import tempfile
import unittest
from unittest import mock

import torch

import dtorch
from dtorch.applications import AutoModelForCausalLM
from dtorch.test.test_util import local_values

from helpers import assert_close_everywhere, assert_equal_everywhere, assert_refused_before_queueing, edited_folder

transformers = None
try:
    import transformers  # noqa: F811
except ImportError:  # pragma: no cover - the platform installs them
    pass

# 2 x 23 tokens (odd: padded to a multiple of ep inside the sparse blocks). Every expert of every
# case gets none or at least 3 of its (token, k) rows (test_prompt_rows_per_expert): transformers'
# eager experts run one GEMM per expert on its rows, and CPU float32 GEMMs of 1 or 2 rows round
# differently from longer ones (docs/decisions.md), so only then can float32 logits be bit-equal.
PROMPT = torch.randint(0, 128, (2, 24), generator=torch.Generator().manual_seed(0))[:, :23]
IDS = torch.tensor([[0, 0, 0, 5, 64, 1, 9, 8], [9, 8, 7, 6, 5, 4, 3, 100], [0, 0, 0, 0, 0, 0, 3, 4]])
MASK = (torch.arange(8)[None] >= torch.tensor([3, 0, 6])[:, None]).long()
NEW = 6
BASE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, vocab_size=128,
            rms_norm_eps=1e-5, max_position_embeddings=64, initializer_range=0.2)
CASES = {
    "mixtral": ("Mixtral", dict(num_local_experts=4, num_experts_per_tok=2, intermediate_size=48)),
    "qwen2_moe": ("Qwen2Moe", dict(num_experts=8, num_experts_per_tok=3, moe_intermediate_size=24,
                                   shared_expert_intermediate_size=40, intermediate_size=64, mlp_only_layers=[0])),
    "qwen3_moe": ("Qwen3Moe", dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=24, intermediate_size=64,
                                   norm_topk_prob=True, decoder_sparse_step=2, attention_bias=True)),
}
CLASSES = {"mixtral": "MixtralForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}


def mesh(shape, names):
    return dtorch.init_device_mesh("cpu", shape, mesh_dim_names=names)


def hf_class(name):
    return getattr(transformers, CASES[name][0] + "ForCausalLM")


def gemm_rows_stable(counts, shapes):
    """Whether this CPU's float32 GEMM gives a row the same bits whatever the row count of the GEMM it
    is in, for every count in ``counts`` and every (in, out) in ``shapes``. transformers' eager experts
    run one GEMM per expert on its rows, dtorch one batched GEMM of every row of a rank's slot: the
    two agree bit for bit exactly when this holds at the counts the routing gives. BLAS kernels take
    other paths for few rows (seen: rows of 1 or 2 differ on an AVX2 machine; rows of fewer than 12
    that are not a multiple of 4 on an AVX-512 EPYC). The path is chosen by shape, not data, so one
    random probe per count tells."""
    g = torch.Generator().manual_seed(0)
    big = 64
    for k, n in shapes:
        w, a = torch.randn(n, k, generator=g), torch.randn(big, k, generator=g)
        full = torch.nn.functional.linear(a, w)
        for c in counts:
            if 0 < c < big and not torch.equal(torch.nn.functional.linear(a[:c], w), full[:c]):
                return False
    return True


def rows_per_expert(hf, prompt):
    """The row count of each expert of each sparse layer in transformers' forward of ``prompt``."""
    seen = []
    gates = [layer.mlp.gate for layer in hf.model.layers if hasattr(layer.mlp, "experts")]
    hooks = [g.register_forward_hook(lambda m, i, o: seen.append(o[2])) for g in gates]
    with torch.no_grad():
        hf(prompt)
    for h in hooks:
        h.remove()
    return [torch.bincount(chosen.flatten(), minlength=hf.config.num_experts).tolist() for chosen in seen]


@unittest.skipIf(transformers is None, "transformers is not installed")
class TestMoe(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        transformers.logging.set_verbosity_error()
        transformers.logging.disable_progress_bar()
        cls.tmp = tempfile.mkdtemp(prefix="dtorch_moe_")
        cls.dirs, cls.hf, cls.ref, cls.exact = {}, {}, {}, {}
        for i, (name, (prefix, kw)) in enumerate(CASES.items()):
            torch.manual_seed(i)
            cfg = getattr(transformers, prefix + "Config")(**{**BASE, **kw}, experts_implementation="eager")
            model = hf_class(name)(cfg).eval()
            with torch.no_grad():  # biases and norm weights away from 0 and 1, so that reading them shows
                for pname, p in model.named_parameters():
                    if pname.endswith("bias"):
                        p.normal_(0.0, 0.5)
                    elif "norm" in pname:
                        p.normal_(1.0, 0.3)
            cls.hf[name] = model
            cls.dirs[name] = os.path.join(cls.tmp, name)
            model.save_pretrained(cls.dirs[name])
            with torch.no_grad():
                cls.ref[name] = model(PROMPT).logits
            experts = next(layer.mlp.experts for layer in model.model.layers if hasattr(layer.mlp, "experts"))
            _, two_i, h = experts.gate_up_proj.shape
            counts = {c for layer in rows_per_expert(model, PROMPT) for c in layer}
            cls.exact[name] = gemm_rows_stable(counts, [(h, two_i), (two_i // 2, h)])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def load(self, name, **kw):
        return AutoModelForCausalLM.from_pretrained(self.dirs[name], **kw)

    def assert_ref(self, got, name):
        """got equals transformers' float32 logits of PROMPT on every device where this CPU's GEMMs
        allow it (gemm_rows_stable at the routing's row counts), else is allclose to them."""
        if self.exact[name]:
            assert_equal_everywhere(self, got, self.ref[name])
        else:
            assert_close_everywhere(self, got, self.ref[name], atol=1e-5, rtol=1e-4)

    def hf_eager(self, name, dtype):
        return hf_class(name).from_pretrained(self.dirs[name], dtype=dtype, experts_implementation="eager").eval()

    def test_class_by_model_type(self):
        for name in CASES:
            with self.subTest(name=name):
                model = self.load(name)
                self.assertEqual(type(model).__name__, CLASSES[name])
        qwen2 = self.load("qwen2_moe").model.layers
        self.assertEqual([type(layer.mlp).__name__ for layer in qwen2], ["LlamaMLP", "SparseMoeBlock"])
        qwen3 = self.load("qwen3_moe").model.layers
        self.assertEqual([type(layer.mlp).__name__ for layer in qwen3], ["LlamaMLP", "SparseMoeBlock"])

    def test_one_device_equal(self):
        for name in CASES:
            for dtype in (torch.float32, torch.bfloat16):
                with self.subTest(name=name, dtype=dtype):
                    got = self.load(name, dtype=dtype)(PROMPT)
                    if dtype == torch.float32:
                        self.assert_ref(got, name)
                    else:
                        with torch.no_grad():
                            assert_equal_everywhere(self, got, self.hf_eager(name, dtype)(PROMPT).logits)

    def test_meshes_allclose(self):
        """ep2 and ep4 (one expert per rank for Mixtral), ep2 x tp2 (each expert's MLP split over tp),
        dp2 x ep2 and ep2 x pp2; every replica equal. On ep and pp alone every GEMM keeps transformers'
        row counts: equal (dp halves them, and CPU GEMMs with one output column round by the row count)."""
        exact = [((2,), ("ep",)), ((4,), ("ep",)), ((2, 2), ("dp", "ep")), ((2, 2), ("ep", "pp"))]
        for name in CASES:
            for shape, names in exact + [((2, 2), ("ep", "tp"))]:
                with self.subTest(name=name, names=names):
                    if name == "qwen2_moe" and shape == (4,) or name != "qwen2_moe" and "dp" in names:
                        continue  # keeps the suite short: each model on four of the five meshes
                    got = self.load(name, device_mesh=mesh(shape, names))(PROMPT)
                    if "tp" in names or "dp" in names:
                        assert_close_everywhere(self, got, self.ref[name], atol=1e-5, rtol=1e-4)
                    else:
                        self.assert_ref(got, name)
        with torch.no_grad():  # bfloat16 on ep alone: still equal (a tp split moves near-tied routing choices)
            want = self.hf_eager("qwen2_moe", torch.bfloat16)(PROMPT).logits
        assert_equal_everywhere(self, self.load("qwen2_moe", device_mesh=mesh((2,), ("ep",)), dtype=torch.bfloat16)(
            PROMPT), want)

    def test_prompt_rows_per_expert(self):
        """The float32 equalities' precondition (gemm_rows_stable): on every CPU seen, Mixtral's routing
        of PROMPT gives each expert at least 12 rows, where the GEMM paths agree, so at least one model
        is compared bit for bit everywhere; every (token, k) is counted once."""
        for layer in rows_per_expert(self.hf["mixtral"], PROMPT):
            self.assertGreaterEqual(min(layer), 12, layer)
        self.assertTrue(self.exact["mixtral"])
        for name, hf in self.hf.items():
            for layer in rows_per_expert(hf, PROMPT):
                self.assertEqual(sum(layer), PROMPT.numel() * hf.config.num_experts_per_tok, name)

    def test_slot_groups(self):
        """A prefill too big for one batched matmul of every expert runs the experts in groups (here of
        3, 3 and 2 of Qwen2-MoE's 8, and of 1): the same bits."""
        from dtorch.applications.llama import moe

        whole = self.load("qwen2_moe")(PROMPT)  # every slot in one batched matmul
        self.assert_ref(whole, "qwen2_moe")
        rows = 2 * 23 * 3 * 48  # a slot's SwiGLU input [B, S * K, 2I] on one device
        for budget in (3 * rows, 1):
            with self.subTest(budget=budget), mock.patch.object(moe, "SLOT_BUDGET", budget):
                assert_equal_everywhere(self, self.load("qwen2_moe")(PROMPT), whole.to_torch())

    def test_experts_split_over_ep(self):
        """On ep2 x tp2 rank (e, t) holds experts e * E/2 .. and, of each, the t-th block of the gate and
        up rows and of the down columns."""
        model = self.load("qwen2_moe", device_mesh=mesh((2, 2), ("ep", "tp")))
        block, hf_experts = model.model.layers[1].mlp, self.hf["qwen2_moe"].model.layers[1].mlp.experts
        gate_up, down = hf_experts.gate_up_proj.detach(), hf_experts.down_proj.detach()
        m = gate_up.shape[1] // 2
        gu, dn = local_values(block.experts.gate_up_proj), local_values(block.experts.down_proj)
        self.assertEqual([tuple(v.shape) for v in gu], [(1, 4, m, 32)] * 4)
        for j in range(4):
            for rank in range(4):
                e, t = divmod(rank, 2)
                expert = e * 4 + j
                rows = torch.cat([gate_up[expert, t * m // 2:(t + 1) * m // 2],
                                  gate_up[expert, m + t * m // 2:m + (t + 1) * m // 2]])
                with self.subTest(slot=j, rank=rank):
                    self.assertTrue(torch.equal(gu[rank][0, j], rows))
                    self.assertTrue(torch.equal(dn[rank][0, j], down[expert][:, t * m // 2:(t + 1) * m // 2]))

    def test_generate_equal_transformers(self):
        """Greedy decoding of a left-padded batch (each step one token per row: a sequence padded to ep
        rows inside the sparse blocks) equals transformers' generate."""
        meshes = {"mixtral": [None, mesh((2, 2), ("ep", "tp"))], "qwen2_moe": [mesh((4,), ("ep",))],
                  "qwen3_moe": [mesh((2, 2), ("dp", "ep")), mesh((2, 2), ("ep", "pp"))]}
        for name, ms in meshes.items():
            with torch.no_grad():
                want = self.hf[name].generate(IDS, attention_mask=MASK, max_new_tokens=NEW, do_sample=False,
                                              eos_token_id=None, pad_token_id=0)
            for m in ms:
                with self.subTest(name=name, mesh=m):
                    got = self.load(name, device_mesh=m).generate(IDS, attention_mask=MASK, max_new_tokens=NEW,
                                                                  eos_token_id=[])
                    self.assertTrue(torch.equal(got, want), f"\n{got[:, 8:].tolist()} !=\n{want[:, 8:].tolist()}")

    def test_explain_shows_the_all_to_alls(self):
        """Per sparse layer: one all-to-all out to the experts' ranks and one back, on ep, of the
        worst-case buffer [ep, B, S, K, H] (per device: its [ep, B, S/ep, K, H] block)."""
        model = self.load("mixtral", device_mesh=mesh((2, 2), ("ep", "tp")))
        with dtorch.explain() as e:
            logits = model(PROMPT)  # kept: a result nobody holds is never computed
        assert_close_everywhere(self, logits, self.ref["mixtral"], atol=1e-5, rtol=1e-4)
        a2a = [r for r in e.records if r.collective == "all_to_all"]
        self.assertEqual(sum(r.count for r in a2a), 4, str(e))  # 2 layers x (dispatch + combine)
        self.assertEqual({r.mesh_dim_name for r in a2a}, {"ep"})
        self.assertTrue(all(r.file == __file__ for r in a2a), str(e))
        per_call = 2 * 2 * 12 * 2 * 32 * 4  # ep * B * (24 / ep) * K * H * float32
        self.assertEqual(sum(r.bytes for r in a2a), 4 * per_call, str(e))

    def test_forward_reads_nothing_back(self):
        """The routing stays on the devices: no value read (to_torch, item, tolist, bool) during the
        forward on ep2 x tp2; the logits read afterwards are right."""
        model = self.load("qwen2_moe", device_mesh=mesh((2, 2), ("ep", "tp")))
        tensor_type = type(model.lm_head.weight)

        def refuse(*_args, **_kw):
            raise AssertionError("a value read during the forward")

        patches = [mock.patch.object(tensor_type, attr, refuse) for attr in ("to_torch", "item", "tolist", "__bool__")
                   if hasattr(tensor_type, attr)]
        for p in patches:
            p.start()
        try:
            logits = model(PROMPT)
        finally:
            for p in patches:
                p.stop()
        assert_close_everywhere(self, logits, self.ref["qwen2_moe"], atol=1e-5, rtol=1e-4)

    def assert_refused_before_queueing(self, call, exc, pattern, g=None):
        assert_refused_before_queueing(self, call, exc, pattern, g)

    def test_refusals_before_queueing(self):
        e = "model.layers.1.block_sparse_moe.experts."
        q = "model.layers.1.mlp."
        cases = [
            ("mixtral", lambda t: t.pop(e + "3.w3.weight"), None, ValueError,
             r"lacks 1 tensor\(s\).*experts\.3\.w3\.weight"),
            ("mixtral", lambda t: t.update({e + "1.w2.weight": torch.zeros(32, 40)}), None, ValueError,
             r"experts\.1\.w2\.weight has shape \(32, 40\) in the checkpoint; the config gives \(32, 48\)"),
            ("mixtral", lambda t: t.update({e + "4.w1.weight": torch.zeros(48, 32)}), None, ValueError,
             r"does not use: .*experts\.4\.w1\.weight"),
            ("qwen2_moe", lambda t: t.pop(q + "shared_expert_gate.weight"), None, ValueError,
             r"lacks 1 tensor\(s\).*shared_expert_gate\.weight"),
            ("qwen2_moe", lambda t: t.update({"model.layers.0.mlp.gate.weight": torch.zeros(8, 32)}), None,
             ValueError, r"does not use: model\.layers\.0\.mlp\.gate\.weight"),  # layer 0 is dense
            ("qwen3_moe", None, lambda c: c.update(model_type="deepseek_v3"), ValueError,
             "model_type 'deepseek_v3' is not supported"),
            ("qwen3_moe", None, lambda c: c.update(use_sliding_window=True), NotImplementedError,
             "use_sliding_window"),
        ]
        m = mesh((2, 2), ("ep", "tp"))
        for name, edit_tensors, edit_config, exc, pattern in cases:
            with self.subTest(pattern=pattern):
                folder = edited_folder(self.dirs[name], self.tmp, edit_config, edit_tensors)
                self.assert_refused_before_queueing(
                    lambda g: AutoModelForCausalLM.from_pretrained(folder, device_mesh=m, graph=g), exc, pattern)
        for shape, names, exc, pattern in (((8,), ("ep",), ValueError, r"num_experts \(4\) must be divisible by the "
                                            r"ep size \(8\)"),
                                           ((2, 2), ("ep", "ulysess_cp"), NotImplementedError, "ulysess_cp")):
            self.assert_refused_before_queueing(
                lambda g: AutoModelForCausalLM.from_pretrained(self.dirs["mixtral"], device_mesh=mesh(shape, names),
                                                               graph=g), exc, pattern)
        g = dtorch.Graph()
        model = AutoModelForCausalLM.from_pretrained(self.dirs["mixtral"], device_mesh=m, graph=g)
        for bad in (torch.tensor([[1, 2, 128]]), torch.tensor([[-1, 2, 3]])):
            self.assert_refused_before_queueing(lambda _: model(bad), IndexError,
                                                r"input_ids holds token id -?\d+, outside the vocabulary", g)
            self.assert_refused_before_queueing(lambda _: model.generate(bad, max_new_tokens=2), IndexError,
                                                "input_ids", g)
        # The runtime goes on: the same model after the refusals.
        assert_close_everywhere(self, model(PROMPT), self.ref["mixtral"], atol=1e-5, rtol=1e-4)

    def test_example_takes_a_moe_folder(self):
        """examples/llama/run.py --model on the Mixtral folder, on ep2 x tp2 (--prompt-ids): the script's
        tokens match its single-device run."""
        import subprocess
        import sys

        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        here = os.path.dirname(os.path.dirname(os.path.abspath(dtorch.__file__)))
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
        r = subprocess.run([sys.executable, os.path.join(root, "examples", "llama", "run.py"), "--model",
                            self.dirs["mixtral"], "--mesh", "ep=2,tp=2", "--prompt-ids", "5,6,7,8",
                            "--max-new-tokens", "4"], env=env, capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("MixtralForCausalLM, mesh {'ep': 2, 'tp': 2}: 4 new tokens", r.stdout)
        self.assertIn("matches single-device: True", r.stdout)


if __name__ == "__main__":
    unittest.main()
