"""pytest setup. dtorch is imported as installed in the running environment:
the project's .venv (tools/setup.sh puts a .pth file there pointing at this
checkout's python/ directory) or a `pip install .` of the package."""

import gc
import os
import sys


def pytest_runtest_teardown(item, nextitem):
    """A failed test's traceback, which pytest keeps in sys.last_* for post-mortem debugging, holds
    the test's frames and so its dtorch tensors: values it made on a worker node stayed live, and
    the next cluster test counted them as its own (test_cluster_drain's "holds 4 live values" saw
    13 after a test_cluster.py failure). Dropped here, before the test's fixtures end."""
    if any(getattr(sys, n, None) is not None for n in ("last_traceback", "last_exc")):
        for name in ("last_type", "last_value", "last_traceback", "last_exc"):
            if hasattr(sys, name):
                delattr(sys, name)
        gc.collect()

# DTORCH_TEST_DEVICE=cuda (tools/gpu_check.sh, on a machine with a GPU) runs the suite on cuda
# meshes: every DeviceMesh("cpu", ...) a test makes becomes a cuda one (run it with
# DTORCH_DTENSOR_IN_SAME_DEVICE=1 so one GPU holds the logical devices) and torch's default
# device becomes cuda, so the eager references run on the GPU too (docs/cuda.md says what ran).
if os.environ.get("DTORCH_TEST_DEVICE") == "cuda":
    import torch

    from dtorch.distributed_spec import DeviceMesh

    torch.set_default_device("cuda")
    _mesh_init = DeviceMesh.__init__

    def _cuda_mesh_init(self, device_type, mesh=None, mesh_dim_names=None):
        if isinstance(device_type, str) and (device_type == "cpu" or device_type.startswith("cpu:")):
            device_type = "cuda" + device_type[3:]
        _mesh_init(self, device_type, mesh, mesh_dim_names)

    DeviceMesh.__init__ = _cuda_mesh_init

    # The tests draw their inputs from seeded CPU generators (torch.Generator()), which torch
    # refuses for a factory on the default cuda device; such a draw runs on the host, with the
    # same generator and so the same values as in a CPU run, and moves to the GPU. (Not inside
    # `with torch.device("cpu")`: leaving that block leaves the process's default device on the
    # host, which turned every later reference into a CPU one.)
    import functools

    # Some torch versions raise for the CPU generator; others (torch 2.11 on the GPU machine, seen
    # 2026-12-04) follow the generator and return a CPU tensor with no error, which made every
    # reference built from such a draw a CPU one. Either way the draw ends on the GPU unless the
    # caller named a device.
    def _host_draw(fn):
        @functools.wraps(fn)
        def draw(*args, **kwargs):
            try:
                r = fn(*args, **kwargs)
                if isinstance(r, torch.Tensor) and r.device.type == "cpu" and kwargs.get("device") is None:
                    r = r.to("cuda")
                return r
            except RuntimeError as e:
                if "for generator but found 'cpu'" not in str(e):
                    raise
            host = [a.cpu() if isinstance(a, torch.Tensor) else a for a in args]
            try:
                r = fn(*host, **dict(kwargs, device="cpu"))
            except TypeError:  # no device argument (multinomial, bernoulli, ...): the inputs' device
                r = fn(*host, **kwargs)
            return r.to("cuda")

        return draw

    for _name in ("rand", "randn", "randint", "randperm", "normal", "multinomial", "bernoulli", "poisson",
                  "randint_like", "rand_like", "randn_like"):
        setattr(torch, _name, _host_draw(getattr(torch, _name)))


if os.environ.get("DTORCH_TEST_DEVICE") == "cuda":
    import re

    import pytest

    import dtorch

    # A test whose mesh names more logical devices than this run maps onto the GPU (ids 40..,
    # or >= 4 in the "1 GPU as 4" run) is reported as skipped, with the reason, not failed.
    # Likewise a test on the 'ref' backend (CPU kernels only), which has no CUDA device.
    _NOT_MAPPED = re.compile(r"cuda:\d+ is not available: the 'torch_cuda' backend sees \d+ CUDA devices"
                             r"|cuda:\d+ is not available: the 'ref' backend sees no CUDA device")

    @pytest.fixture(autouse=True)
    def _cuda_context_alive(request):
        """After each test, its queued work has run and the CUDA context is healthy. A device-side
        assert (an index out of range in a kernel) leaves the context unusable for every later test
        in this process, so the process ends here, naming the test: xdist reports "worker crashed
        while running <test>" and starts a fresh worker for the rest."""
        yield
        try:
            dtorch.synchronize()
        except Exception:  # noqa: BLE001 - a kernel error of the test's own: the context may be fine
            pass
        try:
            torch.cuda.synchronize()
        except Exception as e:  # noqa: BLE001
            sys.stderr.write(f"CUDA context lost during {request.node.nodeid}: {str(e).splitlines()[0]}\n")
            sys.stderr.flush()
            os._exit(70)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item, call):
        outcome = yield
        report = outcome.get_result()
        if report.failed and call.excinfo is not None and _NOT_MAPPED.search(str(call.excinfo.value)):
            report.outcome = "skipped"
            report.longrepr = (str(item.path), item.location[1] or 0,
                               "needs more logical cuda devices: " + _NOT_MAPPED.search(str(call.excinfo.value))[0])


# DTORCH_TEST_FAILLOG=PATH (tools/gpu_check.sh's suite steps): each failed test or subtest is one
# line in PATH as its report arrives (seconds since the start, node id, phase, first error line),
# so a run stopped by its time limit still says what failed; the summary pytest prints at the end
# never comes then.
_FAILLOG = os.environ.get("DTORCH_TEST_FAILLOG")
if _FAILLOG:
    import time as _time

    _T0 = _time.monotonic()

    def _faillog_line(text):
        with open(_FAILLOG, "a") as f:
            f.write(f"{_time.monotonic() - _T0:6.0f}s {text}\n")

    def pytest_runtest_logreport(report):
        # In the xdist controller (it receives every worker's reports) or a run without xdist.
        if report.failed and not os.environ.get("PYTEST_XDIST_WORKER"):
            errors = [ln[2:].strip() for ln in report.longreprtext.splitlines() if ln.startswith("E ")]
            first = errors[0] if errors else (report.longreprtext.strip().splitlines() or ["?"])[-1]
            ctx = getattr(report, "context", None)  # a subtest's message and parameters
            try:
                sub = f" [{ctx.msg or ''}{' ' + str(ctx.kwargs) if ctx.kwargs else ''}]" if ctx is not None else ""
            except AttributeError:  # another plugin's report type
                sub = f" [{ctx}]"
            _faillog_line(f"{report.nodeid}{sub} ({report.when}): {first[:300]}")

    def pytest_sessionfinish(session, exitstatus):
        if not os.environ.get("PYTEST_XDIST_WORKER"):
            _faillog_line(f"session finished, exit status {int(exitstatus)}")
