"""Context-parallel attention (python/dtorch/nn/_context_parallel.py, src/ops/ring_attention.c)
against torch's SDPA.

Ulysses: sequence-sharded q/k/v on the mesh dim that ``SdpaOption.ulysess_cp_dim`` names, on 1-D
meshes of 2 and 4 devices, S divisible by the size and not, causal and not, GQA, masks (bool and
float, replicated and sequence-sharded), a scale, and combined with data parallel (batch sharded)
and tensor parallel (heads sharded) on 2-D meshes. The output keeps the query's sequence shards;
values are compared with torch's (allclose; each device's attention sees the rows torch's does)
and every replica is checked. Heads that do not divide, a sequence shard on a mesh dim that is not
context-parallel, and Ulysses switched off raise at the call.

Ring: sequence-sharded q/k/v on the ``ring_cp`` mesh dim of 2, 3 and 4 devices, even, uneven and
empty shards, causal and not, Sq != Sk, a scale, a value width unlike the key's, GQA, bfloat16,
with tp/dp, with k/v replicated on the ring, and Ulysses and ring together on 2-D and 3-D meshes;
a mask or dropout is refused at the call and the runtime keeps working.

Wrong mesh dims (generated): every placement of q/k/v from {R, S(0..3)} on each mesh dim of 2-D
meshes with a ring dim, a Ulysses dim, both, or neither, and of one input alone: the outcome is
decided by the rule the registry row states -- PlacementError where a sequence dim is sharded along a
mesh dim that is not context-parallel or an embedding dim along any, torch's value otherwise; and
the ring's C entry (``_C._nn_sdpa_ring``) on every placement and ring dim, accepted only for
S(seq) on the ring dim with R or a batch/head shard elsewhere, all three alike.
"""

import itertools

import unittest

import torch
import torch.nn.functional as TF

import dtorch
import dtorch.nn.functional as F
from dtorch import Replicate, Shard, SdpaOption

from helpers import assert_close_everywhere, randn

TOL = dict(atol=1e-5, rtol=1e-5)


def dist(t, mesh, placements):
    return dtorch.Tensor(t).redistribute(mesh, placements)


class TestUlysses(unittest.TestCase):
    def check(self, mesh, placements, shape, kv_shape=None, mask=None, mask_placements=None, **kw):
        q0 = randn(*shape, seed=1)
        k0 = randn(*(kv_shape or shape), seed=2)
        v0 = randn(*(kv_shape or shape), seed=3)
        want = TF.scaled_dot_product_attention(q0, k0, v0, attn_mask=mask, **kw)
        q, k, v = (dist(t, mesh, placements) for t in (q0, k0, v0))
        m = None if mask is None else dist(mask, mesh, mask_placements or [Replicate()] * mesh.ndim)
        got = F.scaled_dot_product_attention(q, k, v, attn_mask=m, **kw)
        self.assertEqual(list(got.placements), list(q.placements))
        assert_close_everywhere(self, got, want, **TOL)
        return got

    def test_1d_even_and_uneven(self):
        for n in (2, 4):
            mesh = dtorch.DeviceMesh("cpu", list(range(n)), mesh_dim_names=("ulysess_cp",))
            for s in (8, 7, 3):
                for causal in (False, True):
                    with self.subTest(n=n, s=s, causal=causal):
                        self.check(mesh, [Shard(2)], (2, 4, s, 8), is_causal=causal)

    def test_negative_seq_dim_and_scale(self):
        mesh = dtorch.DeviceMesh("cpu", [0, 1], mesh_dim_names=("ulysess_cp",))
        self.check(mesh, [Shard(-2)], (1, 2, 6, 4), scale=0.3)

    def test_gqa(self):
        mesh = dtorch.DeviceMesh("cpu", [0, 1], mesh_dim_names=("ulysess_cp",))
        for causal in (False, True):
            with self.subTest(causal=causal):
                self.check(mesh, [Shard(2)], (2, 4, 5, 8), kv_shape=(2, 2, 5, 8), enable_gqa=True, is_causal=causal)

    def test_masks(self):
        mesh = dtorch.DeviceMesh("cpu", [0, 1], mesh_dim_names=("ulysess_cp",))
        g = torch.Generator().manual_seed(5)
        bool_mask = torch.rand(7, 7, generator=g) > 0.3
        bool_mask[:, 0] = True  # no row fully masked
        float_mask = torch.randn(2, 1, 7, 7, generator=g)
        for mask, mpl in ((bool_mask, [Replicate()]), (float_mask, [Replicate()]), (float_mask, [Shard(2)]),
                          (bool_mask, [Shard(0)])):
            with self.subTest(dtype=mask.dtype, placements=mpl):
                self.check(mesh, [Shard(2)], (2, 4, 7, 8), mask=mask, mask_placements=mpl)

    def test_with_tensor_parallel_heads(self):
        mesh = dtorch.DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("tp", "ulysess_cp"))
        for causal in (False, True):
            with self.subTest(causal=causal):
                self.check(mesh, [Shard(1), Shard(2)], (2, 4, 7, 8), is_causal=causal)

    def test_with_data_parallel(self):
        mesh = dtorch.DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "ulysess_cp"))
        self.check(mesh, [Shard(0), Shard(2)], (2, 2, 5, 4), is_causal=True)

    def test_kv_replicated_on_cp_dim(self):
        # Only the query is sequence-sharded: key and value are cut to heads locally.
        mesh = dtorch.DeviceMesh("cpu", [0, 1], mesh_dim_names=("ulysess_cp",))
        q0, k0, v0 = randn(1, 2, 6, 4, seed=1), randn(1, 2, 6, 4, seed=2), randn(1, 2, 6, 4, seed=3)
        got = F.scaled_dot_product_attention(dist(q0, mesh, [Shard(2)]), dist(k0, mesh, [Replicate()]),
                                             dist(v0, mesh, [Replicate()]))
        self.assertEqual(list(got.placements), [Shard(2)])
        assert_close_everywhere(self, got, TF.scaled_dot_product_attention(q0, k0, v0), **TOL)

    def test_custom_dim_name(self):
        mesh = dtorch.DeviceMesh("cpu", [0, 1], mesh_dim_names=("cp",))
        q0 = randn(1, 2, 6, 4, seed=1)
        q = dist(q0, mesh, [Shard(2)])
        got = F.scaled_dot_product_attention(q, q, q, sdpa_option=SdpaOption(ulysess_cp_dim="cp"))
        assert_close_everywhere(self, got, TF.scaled_dot_product_attention(q0, q0, q0), **TOL)
        # Under the default names "cp" is no context-parallel dim: the sequence shard is refused.
        with self.assertRaises(dtorch.PlacementError):
            F.scaled_dot_product_attention(q, q, q)

    def test_switched_off(self):
        mesh = dtorch.DeviceMesh("cpu", [0, 1], mesh_dim_names=("ulysess_cp",))
        q = dist(randn(1, 2, 6, 4), mesh, [Shard(2)])
        with self.assertRaises(dtorch.PlacementError):
            F.scaled_dot_product_attention(q, q, q, sdpa_option=SdpaOption(ulysess_cp_dim=None, ring_cp_dim=None))

    def test_heads_must_divide(self):
        mesh = dtorch.DeviceMesh("cpu", [0, 1], mesh_dim_names=("ulysess_cp",))
        q = dist(randn(1, 3, 6, 4), mesh, [Shard(2)])
        with self.assertRaisesRegex(ValueError, "3 heads"):
            F.scaled_dot_product_attention(q, q, q)

    def test_size_one_cp_dim_is_plain_attention(self):
        mesh = dtorch.DeviceMesh("cpu", [[0], [1]], mesh_dim_names=("dp", "ulysess_cp"))
        self.check(mesh, [Shard(0), Shard(2)], (2, 2, 5, 4), is_causal=True)


class TestRing(unittest.TestCase):
    def check(self, mesh, placements, shape, kv_shape=None, kv_placements=None, **kw):
        q0 = randn(*shape, seed=11)
        k0 = randn(*(kv_shape or shape), seed=12)
        v0 = randn(*(kv_shape or shape), seed=13)
        want = TF.scaled_dot_product_attention(q0, k0, v0, **kw)
        q = dist(q0, mesh, placements)
        k, v = (dist(t, mesh, kv_placements or placements) for t in (k0, v0))
        got = F.scaled_dot_product_attention(q, k, v, **kw)
        self.assertEqual(list(got.placements), list(q.placements))
        assert_close_everywhere(self, got, want, **TOL)
        return got

    def test_1d_even_uneven_and_empty_shards(self):
        for n in (2, 3, 4):
            mesh = dtorch.DeviceMesh("cpu", list(range(n)), mesh_dim_names=("ring_cp",))
            for s in (8, 7, 3):  # 3 on 4 devices: 1, 1, 1, 0 rows
                for causal in (False, True):
                    with self.subTest(n=n, s=s, causal=causal):
                        self.check(mesh, [Shard(2)], (2, 3, s, 8), is_causal=causal)

    def test_scale_and_value_width(self):
        mesh = dtorch.DeviceMesh("cpu", [0, 1, 2], mesh_dim_names=("ring_cp",))
        q0, k0, v0 = randn(1, 2, 9, 4, seed=1), randn(1, 2, 9, 4, seed=2), randn(1, 2, 9, 6, seed=3)
        for causal in (False, True):
            with self.subTest(causal=causal):
                got = F.scaled_dot_product_attention(*(dist(t, mesh, [Shard(2)]) for t in (q0, k0, v0)), scale=0.7,
                                                     is_causal=causal)
                want = TF.scaled_dot_product_attention(q0, k0, v0, scale=0.7, is_causal=causal)
                assert_close_everywhere(self, got, want, **TOL)

    def test_cross_attention_lengths(self):
        # Sq != Sk: causal keeps key <= query position (torch's top-left alignment).
        mesh = dtorch.DeviceMesh("cpu", [0, 1, 2], mesh_dim_names=("ring_cp",))
        for causal in (False, True):
            with self.subTest(causal=causal):
                self.check(mesh, [Shard(2)], (1, 2, 10, 4), kv_shape=(1, 2, 7, 4), is_causal=causal)

    def test_gqa(self):
        mesh = dtorch.DeviceMesh("cpu", [0, 1], mesh_dim_names=("ring_cp",))
        self.check(mesh, [Shard(2)], (2, 4, 7, 8), kv_shape=(2, 2, 7, 8), enable_gqa=True, is_causal=True)

    def test_half_precision_accumulates_in_float32(self):
        mesh = dtorch.DeviceMesh("cpu", [0, 1], mesh_dim_names=("ring_cp",))
        q0, k0, v0 = (randn(1, 2, 8, 8, seed=i).to(torch.bfloat16) for i in range(3))
        got = F.scaled_dot_product_attention(*(dist(t, mesh, [Shard(2)]) for t in (q0, k0, v0)), is_causal=True)
        self.assertEqual(got.dtype, torch.bfloat16)
        want = TF.scaled_dot_product_attention(q0.float(), k0.float(), v0.float(), is_causal=True)
        assert_close_everywhere(self, got, want.to(torch.bfloat16), atol=2e-2, rtol=2e-2)

    def test_with_tensor_and_data_parallel(self):
        mesh = dtorch.DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("tp", "ring_cp"))
        self.check(mesh, [Shard(1), Shard(2)], (2, 4, 7, 8), is_causal=True)
        mesh = dtorch.DeviceMesh("cpu", [[0, 1, 2], [3, 4, 5]], mesh_dim_names=("dp", "ring_cp"))
        self.check(mesh, [Shard(0), Shard(2)], (2, 2, 8, 4), is_causal=True)

    def test_kv_replicated_on_the_ring(self):
        mesh = dtorch.DeviceMesh("cpu", [0, 1], mesh_dim_names=("ring_cp",))
        self.check(mesh, [Shard(2)], (1, 2, 6, 4), kv_placements=[Replicate()], is_causal=True)

    def test_ulysses_and_ring_together(self):
        mesh = dtorch.DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("ulysess_cp", "ring_cp"))
        for s in (8, 7):
            for causal in (False, True):
                with self.subTest(s=s, causal=causal):
                    self.check(mesh, [Shard(2), Shard(2)], (2, 4, s, 8), is_causal=causal)
        mesh = dtorch.DeviceMesh("cpu", [[[0, 1], [2, 3]], [[4, 5], [6, 7]]],
                                 mesh_dim_names=("tp", "ulysess_cp", "ring_cp"))
        self.check(mesh, [Shard(1), Shard(2), Shard(2)], (1, 8, 6, 4), is_causal=True)

    def test_mask_and_dropout_refused(self):
        mesh = dtorch.DeviceMesh("cpu", [0, 1], mesh_dim_names=("ring_cp",))
        q = dist(randn(1, 2, 6, 4), mesh, [Shard(2)])
        mask = dist(torch.ones(6, 6, dtype=torch.bool), mesh, [Replicate()])
        with self.assertRaisesRegex(NotImplementedError, "attn_mask"):
            F.scaled_dot_product_attention(q, q, q, attn_mask=mask)
        with self.assertRaisesRegex(NotImplementedError, "dropout"):
            F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
        # The runtime keeps working.
        self.check(mesh, [Shard(2)], (1, 2, 6, 4))

    def test_runs_the_ring_not_a_gather(self):
        # The values above could also come from gathering k/v: check the ring entry ran, once per call,
        # on sequence shards.
        from dtorch import _C
        calls = []
        real = _C._nn_sdpa_ring

        def spy(q, k, v, *rest):
            calls.append([list(t.placements) for t in (q, k, v)])
            return real(q, k, v, *rest)

        mesh = dtorch.DeviceMesh("cpu", [0, 1, 2], mesh_dim_names=("ring_cp",))
        _C._nn_sdpa_ring = spy
        try:
            self.check(mesh, [Shard(2)], (1, 2, 9, 4), is_causal=True)
        finally:
            _C._nn_sdpa_ring = real
        self.assertEqual(calls, [[[Shard(2)]] * 3])

    def test_c_entry_checks_placements(self):
        mesh = dtorch.DeviceMesh("cpu", [0, 1], mesh_dim_names=("ring_cp",))
        q = dist(randn(1, 2, 6, 4), mesh, [Shard(2)])
        r = dist(randn(1, 2, 6, 4), mesh, [Replicate()])
        from dtorch import _C
        with self.assertRaises(dtorch.PlacementError):
            _C._nn_sdpa_ring(q, r, r, False, None, 0)
        with self.assertRaises(IndexError):
            _C._nn_sdpa_ring(q, q, q, False, None, 1)


def refused(placements, mesh, cp_names, ndim=4):
    """The registry row's rule: no Shard of the embedding dim, no Shard of the sequence dim along a
    mesh dim (of more than one device) that is not context-parallel."""
    for md, p in enumerate(placements):
        if mesh.shape[md] > 1 and p.is_shard():
            if p.dim == ndim - 1 or (p.dim == ndim - 2 and mesh.mesh_dim_names[md] not in cp_names):
                return True
    return False


class TestWrongMeshDims(unittest.TestCase):
    PL = [Replicate(), Shard(0), Shard(1), Shard(2), Shard(3)]
    MESHES = (("dp", "ring_cp"), ("ring_cp", "dp"), ("tp", "ulysess_cp"), ("ulysess_cp", "ring_cp"), ("dp", "tp"))

    @classmethod
    def setUpClass(cls):
        cls.t = [randn(2, 4, 6, 4, seed=s) for s in (21, 22, 23)]

    def outcome(self, mesh, pls, causal):
        q, k, v = (dist(t, mesh, list(p)) for t, p in zip(self.t, pls))
        if any(refused(p, mesh, ("ulysess_cp", "ring_cp")) for p in pls):
            with self.assertRaises(dtorch.PlacementError):
                F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        else:
            got = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            assert_close_everywhere(self, got, TF.scaled_dot_product_attention(*self.t, is_causal=causal), **TOL)

    def test_every_placement_of_all_three(self):
        n_refused = 0
        for names in self.MESHES:
            mesh = dtorch.DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=names)
            for pl in itertools.product(self.PL, repeat=2):
                n_refused += refused(pl, mesh, ("ulysess_cp", "ring_cp"))
                with self.subTest(mesh=names, placements=pl):
                    self.outcome(mesh, [pl] * 3, causal=True)
        self.assertGreater(n_refused, 30)  # the generator does reach the refusals

    def test_one_input_on_a_wrong_dim(self):
        # q and the others on the ring (or Ulysses) dim; one of them also split along the other mesh dim.
        for names in (("dp", "ring_cp"), ("dp", "ulysess_cp"), ("ulysess_cp", "ring_cp")):
            mesh = dtorch.DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=names)
            good = [Shard(1) if names[0] == "ulysess_cp" else Replicate(), Shard(2)]
            for which in range(3):
                for wrong in ([Shard(2), Shard(2)], [good[0], Shard(3)], [Shard(3), Shard(2)]):
                    pls = [good] * 3
                    pls[which] = wrong
                    with self.subTest(mesh=names, input=which, wrong=wrong):
                        self.outcome(mesh, pls, causal=False)
        # The refusals left nothing behind: the runtime keeps working.
        mesh = dtorch.DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "ring_cp"))
        self.outcome(mesh, [[Shard(0), Shard(2)]] * 3, causal=True)

    def test_three_dim_mesh(self):
        mesh = dtorch.DeviceMesh("cpu", [[[0, 1], [2, 3]], [[4, 5], [6, 7]]],
                                 mesh_dim_names=("dp", "ulysess_cp", "ring_cp"))
        for pl in ([Shard(2), Shard(2), Shard(2)], [Shard(0), Shard(2), Shard(3)], [Shard(0), Shard(3), Shard(2)],
                   [Shard(0), Shard(2), Shard(2)], [Shard(0), Replicate(), Shard(2)]):
            with self.subTest(placements=pl):
                self.outcome(mesh, [pl] * 3, causal=True)

    def test_ring_c_entry(self):
        from dtorch import _C
        mesh = dtorch.DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("a", "b"))
        want = TF.scaled_dot_product_attention(*self.t)
        accepted = 0
        for ring_dim in (0, 1):
            for pl in itertools.product(self.PL, repeat=2):
                q, k, v = (dist(t, mesh, list(pl)) for t in self.t)
                other = pl[1 - ring_dim]
                ok = pl[ring_dim] == Shard(2) and (other.is_replicate() or other.dim < 2)
                with self.subTest(ring_dim=ring_dim, placements=pl):
                    if ok:
                        accepted += 1
                        assert_close_everywhere(self, _C._nn_sdpa_ring(q, k, v, False, None, ring_dim), want, **TOL)
                    else:
                        with self.assertRaises(dtorch.PlacementError):
                            _C._nn_sdpa_ring(q, k, v, False, None, ring_dim)
                # q, k and v must agree: k alone on another placement is refused.
                if ok:
                    k2 = dist(self.t[1], mesh, [Replicate(), Replicate()])
                    with self.assertRaises(dtorch.PlacementError):
                        _C._nn_sdpa_ring(q, k2, v, False, None, ring_dim)
        self.assertEqual(accepted, 6)


if __name__ == "__main__":
    unittest.main()
