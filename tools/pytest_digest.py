#!/usr/bin/env python3
"""A short digest of a long pytest log (tools/gpu_check.sh: the device tool brings back files of at
most 16 MiB, and a suite with thousands of failures writes more).

    tools/pytest_digest.py LOG [--top N]

Prints: the summary line; each crashed worker and lost CUDA context with the test that caused it;
the first error line of each failure, digits folded to N, counted, most frequent first (so one cause
behind 5000 failures is one line); then up to --top failing test ids per error line."""
from __future__ import annotations

import argparse
import collections
import re
import sys


def digest(text: str, top: int) -> str:
    out = []
    summary = [ln for ln in text.splitlines() if re.match(r"^(=+ )?\d+ (passed|failed|error|skipped)", ln)]
    out.append("summary: " + (summary[-1].strip("= ") if summary else "none (timed out or crashed)"))
    for ln in text.splitlines():
        if "crashed while running" in ln or "CUDA context lost during" in ln or "node down" in ln:
            out.append("crash: " + ln.strip())
    parts = re.split(r"\n_{3,} (.+?) _{3,}\n", text)
    causes: "collections.Counter[str]" = collections.Counter()
    tests = collections.defaultdict(list)
    for i in range(1, len(parts) - 1, 2):
        name, body = parts[i], parts[i + 1]
        errors = [ln for ln in body.splitlines() if ln.startswith("E ")]
        where = [ln for ln in body.splitlines() if re.match(r"^\S+\.py:\d+: in ", ln)]
        first = errors[0][1:].strip()[:200] if errors else "(no E line)"
        key = re.sub(r"\d+", "N", first)
        causes[key] += 1
        tests[key].append(f"{name}  [{where[0].split(': in ')[0] if where else '?'}]")
    out.append(f"failures by first error line ({sum(causes.values())} sections):")
    for key, n in causes.most_common():
        out.append(f"{n:6d}  {key}")
        for t in tests[key][:top]:
            out.append(f"          {t}")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("log")
    ap.add_argument("--top", type=int, default=5, help="failing tests listed per error line (default 5)")
    args = ap.parse_args(argv)
    with open(args.log, errors="replace") as f:
        sys.stdout.write(digest(f.read(), args.top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
