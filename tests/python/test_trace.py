"""dtorch.profiler.trace(path): the Chrome/Perfetto trace JSON.

A traced run on a 2-device mesh (an elementwise op, a redistribute whose all-gather runs on the
communication streams, a reduction, a read) must write JSON that parses, with metadata naming the
process, the controller, the client thread and one track per (device, stream); a kernel event per
kernel with op, kernel, shapes, dtype, bytes (its output's, computed here from the local shapes)
and this file's line in args; flows from each op's slice on the client track to its kernels, whose
two ends lie inside existing slices; slices that nest (never partially overlap) on every track;
and nothing from before or after the ``with``.
"""

import inspect
import json
import os
import tempfile
import unittest
from collections import defaultdict

import torch

import dtorch
from dtorch import Replicate, Shard

from helpers import CPU2, DEV, assert_tensor_equal, int_valued

EPS = 1e-3  # microseconds: one nanosecond of rounding


def here():
    return inspect.currentframe().f_back.f_lineno


class TestTrace(unittest.TestCase):
    def run_traced(self):
        t = int_valued(4, 6)
        x = dtorch.from_torch(t, device_mesh=CPU2, placements=[Shard(0)])
        early = (x + 1).to_torch()  # before the with: not in the trace
        path = os.path.join(tempfile.mkdtemp(), "trace.json")
        with dtorch.profiler.trace(path) as tr:
            self.l_mul = here() + 1
            y = x * 2
            self.l_red = here() + 1
            z = y.redistribute(placements=[Replicate()])
            self.l_sum = here() + 1
            s = z.sum(dim=1)
            got = s.to_torch()
        late = (x - 1).to_torch()  # after: not in it either
        assert_tensor_equal(self, got, (t * 2).sum(dim=1))
        assert_tensor_equal(self, early, t + 1)
        assert_tensor_equal(self, late, t - 1)
        with open(path) as f:
            doc = json.load(f)
        self.assertEqual(doc["traceEvents"], tr.events)
        return doc["traceEvents"], tr

    def test_structure(self):
        events, tr = self.run_traced()
        self.assertEqual(tr.dropped, 0)
        names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
        procs = [e for e in events if e["ph"] == "M" and e["name"] == "process_name"]
        self.assertTrue(procs)
        tracks = set(names.values())
        for want in ("controller", "client thread", f"{DEV}:0 compute", f"{DEV}:1 compute", f"{DEV}:0 comm", f"{DEV}:1 comm"):
            self.assertTrue(any(n.startswith(want) for n in tracks), (want, tracks))
        slices = [e for e in events if e["ph"] == "X"]
        for e in slices:
            self.assertIn((e["pid"], e["tid"]), names, e)  # every slice is on a named track
            self.assertGreaterEqual(e["dur"], 0)
        kernels = [e for e in slices if e["cat"] == "kernel"]
        sites = {e["args"]["site"] for e in kernels}
        self.assertEqual(sites, {f"{__file__}:{n}" for n in (self.l_mul, self.l_red, self.l_sum)})
        for e in kernels:
            for key in ("op", "kernel", "shapes", "dtype", "bytes", "site", "device", "stream"):
                self.assertIn(key, e["args"])
        mul = [e for e in kernels if e["args"]["site"].endswith(f":{self.l_mul}")]
        self.assertEqual(sorted(e["args"]["device"] for e in mul), [f"{DEV}:0", f"{DEV}:1"])
        for e in mul:
            self.assertEqual(e["args"]["op"], "mul")
            self.assertEqual(e["args"]["dtype"], str(torch.float32))
            self.assertEqual(e["args"]["shapes"]["output"], [4, 6])
            self.assertEqual(e["args"]["bytes"], 2 * 6 * 4)  # each device's (2, 6) block
        gather = [e for e in kernels if e["args"]["site"].endswith(f":{self.l_red}")]
        self.assertEqual(len(gather), 2)
        for e in gather:
            self.assertEqual((e["args"]["kernel"], e["args"]["stream"]), ("collective", "comm"))
            self.assertEqual(e["args"]["bytes"], 4 * 6 * 4)  # the gathered whole
        # The client track has one slice per op recorded: mul, redistribute, sum (reads are not drawn).
        ops = [e for e in slices if e["cat"] == "op"]
        self.assertEqual([e["name"] for e in sorted(ops, key=lambda e: e["ts"])], ["mul", "redistribute", "sum"])
        self.assertEqual(len([e for e in slices if e["cat"] == "lowering"]), 3)

    def test_flows_connect_slices(self):
        events, _ = self.run_traced()
        slices = defaultdict(list)
        for e in events:
            if e["ph"] == "X":
                slices[(e["pid"], e["tid"])].append(e)

        def inside(e):
            return [s for s in slices[(e["pid"], e["tid"])] if s["ts"] - EPS <= e["ts"] <= s["ts"] + s["dur"] + EPS]

        starts = {e["id"]: e for e in events if e["ph"] == "s"}
        ends = {e["id"]: e for e in events if e["ph"] == "f"}
        self.assertEqual(set(starts), set(ends))
        kernels = [e for e in events if e["ph"] == "X" and e["cat"] == "kernel"]
        self.assertEqual(len(ends), len(kernels))  # every kernel's node was recorded
        for fid, s in starts.items():
            src = [x for x in inside(s) if x["cat"] == "op"]
            dst = [x for x in inside(ends[fid]) if x["cat"] == "kernel"]
            self.assertEqual(len(src), 1, s)
            self.assertEqual(len(dst), 1, ends[fid])
            self.assertEqual(src[0]["args"]["node"], dst[0]["args"]["node"])
            self.assertEqual(src[0]["name"], dst[0]["args"]["op"])
            self.assertLessEqual(s["ts"], ends[fid]["ts"])  # recorded before it ran

    def test_slices_nest_per_track(self):
        events, _ = self.run_traced()
        tracks = defaultdict(list)
        for e in events:
            if e["ph"] == "X":
                tracks[(e["pid"], e["tid"])].append(e)
        for key, evs in tracks.items():
            stack = []
            for e in sorted(evs, key=lambda e: (e["ts"], -e["dur"])):
                end = e["ts"] + e["dur"]
                while stack and stack[-1] <= e["ts"] + EPS:
                    stack.pop()
                if stack:
                    self.assertLessEqual(end, stack[-1] + EPS, (key, e))  # inside the enclosing slice
                stack.append(end)

    def test_two_threads_two_graphs(self):
        # Each Python thread has its own default graph: a process per graph, each with its
        # client thread's track, and the other thread's ops on it.
        import threading

        t = int_valued(4, 2)
        out = {}

        def other():
            y = dtorch.from_torch(t, device_mesh=CPU2, placements=[Shard(0)])
            out["v"] = (y * 3).to_torch()

        with dtorch.profiler.trace(None) as tr:
            x = dtorch.from_torch(t, device_mesh=CPU2, placements=[Shard(0)])
            th = threading.Thread(target=other)
            th.start()
            th.join()
            (x + 5).to_torch()
        assert_tensor_equal(self, out["v"], t * 3)
        procs = {e["pid"] for e in tr.events if e["ph"] == "M" and e["name"] == "process_name"}
        self.assertEqual(len(procs), 2)
        clients = {e["pid"] for e in tr.events
                   if e["ph"] == "M" and e["name"] == "thread_name" and e["args"]["name"].startswith("client thread")}
        self.assertEqual(clients, procs)
        ops = sorted(e["name"] for e in tr.events if e["ph"] == "X" and e["cat"] == "op")
        self.assertEqual(ops, ["add", "mul", "tensor", "tensor"])

    def test_no_path_and_nothing_when_off(self):
        x = dtorch.from_torch(int_valued(2, 2), device_mesh=CPU2, placements=[Replicate()])
        with dtorch.profiler.trace(None) as tr:
            pass
        (x * 3).to_torch()
        self.assertEqual([e for e in tr.events if e["ph"] != "M"], [])
        self.assertFalse(dtorch._C._record_enabled(1))


if __name__ == "__main__":
    unittest.main()
