"""Lifecycle as a new user meets it: fork, interpreter exit, Ctrl-C.

Each case runs a small script in a subprocess. The subprocess timeout is a hang guard (a
generous bound that only turns a hang into a failure), never a timing assertion: work is held
pending with a closed test gate (``dtorch.test.probes.Gate``), so "it did not run" is proved
by counters and failed reads, not by clocks.
"""

import os
import signal
import subprocess
import sys
import textwrap
import unittest

HANG_GUARD_S = 120
PKG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python")


def run_script(src, **kw):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.abspath(PKG) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", textwrap.dedent(src)], capture_output=True, text=True,
                          timeout=HANG_GUARD_S, env=env, **kw)


# Registered before dtorch is imported, so it runs after dtorch's own exit handler: it sees what
# the exit did to the work queued behind the gate.
REPORT = """
import atexit
state = {}

def report():
    from dtorch.test.probes import graph_stats
    f = state["future"]
    try:
        f.get()
        outcome = "value"
    except RuntimeError as e:
        outcome = "error: " + str(e)
    print("READY", f.is_ready())
    print("OUTCOME", outcome)
    print("CANCELLED", graph_stats(state["graph"])["cancelled"])

atexit.register(report)
"""

QUEUE = """
import dtorch
from dtorch.test.probes import Gate
x = dtorch.ones(4, 4)
x.to_torch()
gate = Gate()
y = gate.hold(x)
for _ in range(2000):
    y = y * 1.0001 + 1
state["future"] = y.to_torch_async()
state["graph"] = dtorch.default_graph()
"""


def fork_script(before, child, after):
    """A script that runs `before`, forks, runs `child` in the child (exit status 0 unless it sets
    `code` or raises: 6) and `after` in the parent, which prints CHILD_EXIT and PARENT_OK."""
    ind = lambda src, n: textwrap.indent(textwrap.dedent(src).strip(), " " * n)  # noqa: E731
    return "\n".join([
        "import os", ind(before, 0), "pid = os.fork()", "if pid == 0:", "    code = 0", "    try:",
        ind(child, 8), "    except BaseException as err:", "        print('CHILD', repr(err), flush=True)",
        "        code = 6", "    os._exit(code)", "_, status = os.waitpid(pid, 0)",
        "print('CHILD_EXIT', os.waitstatus_to_exitcode(status))", ind(after, 0), "print('PARENT_OK')", ""])


class TestFork(unittest.TestCase):
    def check_fork(self, before, child, after):
        r = run_script(fork_script(before, child, after))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("CHILD_EXIT 0", r.stdout, r.stdout + r.stderr)
        self.assertIn("PARENT_OK", r.stdout)

    def test_default_graph_works_in_the_child(self):
        self.check_fork("""
            import torch, dtorch
            x = dtorch.ones(2, 3)
            assert torch.equal(x.to_torch(), torch.ones(2, 3))
            explicit = dtorch.Graph()
            e = dtorch.ones(2, graph=explicit)
            e.to_torch()
        """, """
            y = (dtorch.arange(6.0).reshape(2, 3) * 3 + 1).to_torch()
            want = torch.arange(6.0).reshape(2, 3) * 3 + 1
            if not torch.equal(y, want):
                code = 3
            for make in (lambda: x + 1, lambda: e + 1, lambda: explicit.sync()):
                try:
                    make()
                    code = 4
                except RuntimeError as err:
                    if "fork" not in str(err):
                        print("MESSAGE", err, flush=True)
                        code = 5
        """, """
            assert torch.equal((x + 1).to_torch(), torch.full((2, 3), 2.0))
        """)

    # The parent's caller thread has an OpenMP team (eager torch with two threads) when it forks;
    # the child's copy of that thread has a team whose threads are not there.
    STALE_BEFORE = """
        import torch
        torch.set_num_threads(2)
        a = torch.randint(-2, 3, (512, 512)).float()
        want = ((a @ a).clamp(-4, 4) @ a).clamp(-4, 4)[:3, :3]
        small = a[:8] @ a[:, :8]  # the child's eager torch would hang on a matmul (MKL's team)
    """
    STALE_CHILD = """
        import dtorch
        x = dtorch.ones(64, 64)
        for _ in range(200):  # long enough that the read blocks
            x = (x @ x).clamp(-1, 1)
        x.to_torch()
        got = (dtorch.from_torch(a[:8]) @ dtorch.from_torch(a[:, :8].contiguous())).to_torch()
        if not torch.equal(got, small):
            code = 3
    """
    STALE_AFTER = "assert torch.equal(((a @ a).clamp(-4, 4) @ a).clamp(-4, 4)[:3, :3], want)"

    def test_child_of_a_parent_with_an_openmp_team(self):
        """dtorch was loaded before the fork: the child's forking thread must not give its team
        back when a read blocks (libgomp would wait for the missing threads for ever). The child's
        reads wait and give the right values; the parent goes on."""
        self.check_fork("import dtorch\n" + textwrap.dedent(self.STALE_BEFORE), self.STALE_CHILD,
                        self.STALE_AFTER)

    def test_dtorch_first_imported_in_such_a_child(self):
        """dtorch is first imported in the child (no fork handler of dtorch's saw the fork), which
        sets torch to one thread, the usual remedy for eager torch there: dtorch then leaves the
        stale team alone too, and the child's eager torch works."""
        self.check_fork(self.STALE_BEFORE, "torch.set_num_threads(1)\nassert torch.equal(a[:8] @ a[:, :8], small)\n"
                        + textwrap.dedent(self.STALE_CHILD), self.STALE_AFTER)


class TestExit(unittest.TestCase):
    def check_cancelled(self, r):
        out = r.stdout
        self.assertIn("READY True", out, out + r.stderr)
        self.assertIn("OUTCOME error: ", out)
        self.assertIn("cancelled", out.split("OUTCOME", 1)[1].splitlines()[0])
        cancelled = int(out.split("CANCELLED", 1)[1].split()[0])
        self.assertGreaterEqual(cancelled, 2000)  # the queued ops were dropped, not run

    def test_exit_with_queued_work_cancels_it(self):
        r = run_script(REPORT + QUEUE)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.check_cancelled(r)

    def test_uncaught_keyboard_interrupt_cancels_the_queue(self):
        r = run_script(REPORT + QUEUE + "\nraise KeyboardInterrupt\n")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("KeyboardInterrupt", r.stderr)
        self.check_cancelled(r)


class TestInterrupt(unittest.TestCase):
    def test_sigint_while_waiting_for_capacity(self):
        src = """
            import signal, sys, threading, dtorch
            # Started from a shell without job control, a child inherits SIGINT ignored (and
            # Python then installs no handler): restore the default one explicitly.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            from dtorch.test.probes import Gate, graph_stats
            g = dtorch.Graph()
            x = dtorch.ones(1, graph=g)
            x.to_torch()
            gate = Gate()
            y = gate.hold(x)
            done = threading.Event()

            def watch():
                # The main thread waits with the GIL released, so this thread runs.
                while not done.wait(0.01):
                    if graph_stats(g)["flow_waits"] > 0:
                        print("WAITING", flush=True)
                        return

            threading.Thread(target=watch, daemon=True).start()
            try:
                for _ in range(10_000_000):
                    y = y + 1
                print("LOOP_ENDED", flush=True)
            finally:
                done.set()
        """
        env = dict(os.environ)
        env["PYTHONPATH"] = os.path.abspath(PKG) + os.pathsep + env.get("PYTHONPATH", "")
        p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(src)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
        try:
            line = p.stdout.readline()
            self.assertEqual(line.strip(), "WAITING", p.stderr.read() if not line else line)
            p.send_signal(signal.SIGINT)
            out, err = p.communicate(timeout=HANG_GUARD_S)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
        self.assertIn("KeyboardInterrupt", err)
        self.assertNotIn("LOOP_ENDED", out)
        self.assertNotEqual(p.returncode, 0)


if __name__ == "__main__":
    unittest.main()
