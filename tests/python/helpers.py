"""Shared helpers of the Python tests: meshes, placement lists and torch references."""

import itertools
import os
import subprocess
import unittest

import torch

import dtorch
from dtorch import Partial, Replicate, Shard
from dtorch.test.probes import chains, held_controller
from dtorch.test.test_util import assert_replicas_equal, assert_tensor_allclose, assert_tensor_equal
from dtorch.test.test_util import genuine_partial  # noqa: F401  (re-exported for the tests)

# The suite on cuda meshes (DTORCH_TEST_DEVICE=cuda, tests/python/conftest.py): the device type
# the tests' meshes really have, for the messages and keys that name it.
ON_CUDA = os.environ.get("DTORCH_TEST_DEVICE") == "cuda"
DEV = "cuda" if ON_CUDA else "cpu"


def cpu_only(why):
    """Skips a test in the cuda run: it is about cpu meshes themselves, or about what torch does on the host."""
    return unittest.skipIf(ON_CUDA, f"cpu only: {why}")


def device_assert(why):
    """Skips a test in the cuda run whose kernel error is a CUDA device-side assert: it leaves the
    process's CUDA context unusable for every later test (test_cuda.py checks, in a child process,
    that such an error surfaces at the read and the process lives on)."""
    return unittest.skipIf(ON_CUDA, f"a device-side assert on CUDA: {why}")


CPU1 = dtorch.DeviceMesh("cpu", [0])
CPU2 = dtorch.DeviceMesh("cpu", [0, 1])
CPU3 = dtorch.DeviceMesh("cpu", [0, 1, 2])
CPU2x2 = dtorch.DeviceMesh("cpu", [[0, 1], [2, 3]], mesh_dim_names=("dp", "tp"))


def placements_1d(ndim, partial=True):
    """Every single placement for a tensor of ``ndim`` dims: R, S(0..ndim-1) and P."""
    out = [Replicate()] + [Shard(d) for d in range(ndim)]
    if partial:
        out.append(Partial())
    return out


def placements_2d(ndim, partial=True):
    """Pairs of placements for a 2-D mesh where no tensor dim is sharded twice."""
    out = []
    for a, b in itertools.product(placements_1d(ndim, partial), repeat=2):
        if a.is_shard() and b.is_shard() and a.dim == b.dim:
            continue
        out.append([a, b])
    return out


def int_valued(*shape, dtype=torch.float32, low=-5, high=6, seed=0):
    """Integer-valued floats, so that sums in any order are exact."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(low, high, tuple(shape), generator=g).to(dtype)


def randn(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(tuple(shape), generator=g, dtype=torch.float64).to(dtype)


# Chains of elementwise ops and views shared by the tests of shared records' variants
# (test_bgroup.py, test_step.py), compared bit for bit.

def bits(t):
    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().view(ints) if t.dtype.is_floating_point else t


def wait_stat(g, key, n):
    """Until graph_stats(g)[key] reaches n (work the controller lowers behind a gate), 30 s at most."""
    import time

    from dtorch.test.probes import graph_stats

    for _ in range(3000):
        if graph_stats(g)[key] >= n:
            return
        time.sleep(0.01)


def cancel_behind_gate(tc, g, gate, f, dropped):
    """Cancels g while its work waits behind `gate`, then opens it: the read f fails as cancelled,
    and at least `dropped` kernels were dropped, not run."""
    from dtorch.test.probes import graph_stats

    g.cancel(0)
    gate.open()
    g.cancel()  # waits until the workers have dropped what was queued
    with tc.assertRaises(Exception) as cm:
        f.get()
    tc.assertIn("cancelled", str(cm.exception))
    tc.assertGreaterEqual(graph_stats(g)["cancelled"], dropped)


def settle():
    # Two rounds: the first's dead blobs are freed at the head of the next.
    dtorch.synchronize()
    dtorch.synchronize()


def linear_chain(a, b):
    # Linear in its inputs (Partial stays Partial): a read by two shared records, intermediates
    # dropped (written in place), a view of a group's members (permute: a `base`).
    y = a + b
    z = ((y * 2.0) - b) * 0.5 + a
    return z.permute(1, 0) * 2.0


def full_chain(a, b):
    return (linear_chain(a, b).abs() + 1.0) * (a.permute(1, 0) - 0.5)


def ref_linear(a, b):
    return (((a + b) * 2.0 - b) * 0.5 + a).permute(1, 0) * 2.0


def ref_full(a, b):
    return (ref_linear(a, b).abs() + 1.0) * (a.permute(1, 0) - 0.5)


def chain_case(mesh, pl, shape, dtype):
    """The chain for layout pl (the linear one where a placement is Partial), its torch reference,
    two integer-valued torch inputs and them laid out on mesh (Partial ones genuine)."""
    partial = any(p.is_partial() for p in pl)
    fn, ref = (linear_chain, ref_linear) if partial else (full_chain, ref_full)
    ta = int_valued(*shape, dtype=dtype, seed=1)
    tb = int_valued(*shape, dtype=dtype, seed=2)
    return fn, ref, ta, tb, genuine_partial(ta, mesh, pl, seed=3), genuine_partial(tb, mesh, pl, seed=4)


def assert_in_place_alike(tc, run_in, modes):
    """A chain whose intermediates are dropped (each written in place into its input) on 3 devices,
    run in each mode by run_in(mode, fn, mesh, x) -> (values, in-place kernels): torch's values and
    the same in-place kernels in every mode (the multiply, subtract, scale and abs on each device).

    The chain is recorded with the controller held (chains off), so each node and the drop of its
    input land in one round: the controller lets go of a value dropped in the round before the
    round's kernels are queued. A drop that reached it a round later, after a kernel reading the
    value had run, would leave that kernel out of place in any mode, by timing alone (a CI run saw
    [9, 12, 12] that way)."""
    t = int_valued(64, 64)
    x = dtorch.from_torch(t, CPU3, [Shard(0)])

    def ref(x):
        return (((x + 1.0) * 2.0 - 3.0) * 0.5).abs()

    def fn(x):
        with chains(False), held_controller():
            return ref(x)

    counts = []
    for mode in modes:
        values, in_place = run_in(mode, fn, CPU3, x)
        counts.append(in_place)
        tc.assertTrue(torch.equal(torch.cat(values), ref(t)), mode)
    tc.assertEqual(len(set(counts)), 1, counts)
    tc.assertGreaterEqual(counts[-1], 3 * 3)


def has_partial(placements):
    return any(p.is_partial() for p in placements)


def _dtorch_parts(x):
    if isinstance(x, (list, tuple)):
        return [p for item in x for p in _dtorch_parts(item)]
    return [x] if isinstance(x, dtorch.Tensor) else []


def assert_equal_everywhere(tc, got, want):
    """``assert_tensor_equal``, and every copy of each dtorch result on its Replicate mesh dims
    bitwise equal (a read looks only at the first)."""
    for x in _dtorch_parts(got):
        assert_replicas_equal(tc, x)
    assert_tensor_equal(tc, got, want)


def assert_close_everywhere(tc, got, want, **kw):
    """``assert_tensor_allclose`` (same keywords), and every replica as ``assert_equal_everywhere``."""
    for x in _dtorch_parts(got):
        assert_replicas_equal(tc, x)
    assert_tensor_allclose(tc, got, want, **kw)


def thread_names(pid="self"):
    """How many threads of process `pid` have each name (/proc/PID/task/*/comm; Linux)."""
    names = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:  # a thread that has just exited
            continue
        names[name] = names.get(name, 0) + 1
    return names


def node_data_bytes():
    """Each worker node's data bytes sent to and received from other nodes so far, as it last
    answered (MainNode.nodes(): exact once a sync of the work has returned)."""
    return [(n["data_bytes_sent"], n["data_bytes_received"]) for n in dtorch.MainNode.nodes()]


def moved_between_nodes(g, step):
    """Bytes of data between nodes that `step()` moved through the main node (its DATA counters,
    sent plus received: dtorch._C._cluster_info()), once what it started has run in graph g; and
    what step() returned."""
    info = dtorch._C._cluster_info()
    before = info["data_bytes_sent"] + info["data_bytes_received"]
    keep = step()
    g.sync()
    info = dtorch._C._cluster_info()
    return info["data_bytes_sent"] + info["data_bytes_received"] - before, keep


def edited_folder(src, tmp, edit_config=None, edit_tensors=None):
    """A copy (under ``tmp``) of the saved Hugging Face folder ``src`` with its config.json edited by
    ``edit_config(dict)`` and its model.safetensors by ``edit_tensors(dict)``."""
    import json
    import shutil
    import tempfile

    from safetensors.torch import load_file, save_file

    dst = tempfile.mkdtemp(dir=tmp)
    shutil.copytree(src, dst, dirs_exist_ok=True)
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


def assert_refused_before_queueing(tc, call, exc, pattern, g=None):
    """``call(g)`` raises ``exc`` matching ``pattern`` and submits nothing to the graph g (a new one
    unless given)."""
    g = g or dtorch.Graph()
    g.sync()
    before = dtorch._C._graph_stats(g)["submitted"]
    with tc.assertRaisesRegex(exc, pattern):
        call(g)
    g.sync()
    tc.assertEqual(dtorch._C._graph_stats(g)["submitted"], before + 1)  # the sync only


def reap(procs):
    """Kills every child process of `procs` still running and collects them all (bounded: 30 s each)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.communicate(timeout=30)


def communicate_within(p, timeout):
    """(exit status, stdout, stderr) of child `p`; a test failure showing its output when it runs past
    `timeout` seconds (it is killed then)."""
    import pytest

    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate(timeout=30)
        pytest.fail(f"{p.args} still ran after {timeout} s; its stdout {out!r}, its stderr {err[-3000:]!r}")
    return p.returncode, out, err


def run_example_script(tc, name, out):
    """Runs ``examples/<name>/run.py --out OUT`` with its defaults (this tree's dtorch first); checks it
    exits 0, wrote a 32x32 PNG, printed a PSNR against one device above 40 dB and drew its tqdm bar."""
    import re
    import subprocess
    import sys

    from PIL import Image

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, PYTHONPATH=os.path.join(root, "python"))
    r = subprocess.run([sys.executable, os.path.join(root, "examples", name, "run.py"), "--out", out],
                       capture_output=True, text=True, timeout=300, env=env)
    tc.assertEqual(r.returncode, 0, r.stderr[-2000:])
    tc.assertEqual(Image.open(out).size, (32, 32))
    m = re.search(r"PSNR against one device: ([0-9.]+|inf) dB", r.stdout)
    tc.assertIsNotNone(m, r.stdout)
    tc.assertGreater(float(m.group(1)), 40)
    tc.assertIn("denoising", r.stderr)  # the tqdm bar
