"""``python -m dtorch.node``: runs a dtorch worker node (the ``dtorch-node`` executable).

    DTORCH_CLUSTER_TOKEN=secret python -m dtorch.node --main-node-address=HOST:PORT [--cpu-devices=N] \
        [--cuda-devices=N|all|I,J,...]

The flags are ``dtorch-node``'s (``--help``); this module finds the executable installed with the
package (``dtorch/bin/dtorch-node``, else one on PATH) and replaces the Python process with it, so
the exit status and signals are the node's own. See docs/cluster.md.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import List, Optional

__all__ = ["executable", "main"]


def executable() -> str:
    """The path of the ``dtorch-node`` executable; FileNotFoundError when there is none.
    ``DTORCH_NODE_EXECUTABLE`` names another build of it (tools/asan_node.sh: an ASan one)."""
    given = os.environ.get("DTORCH_NODE_EXECUTABLE")
    if given:
        if not os.access(given, os.X_OK):
            raise FileNotFoundError(f"DTORCH_NODE_EXECUTABLE={given!r} is not an executable file")
        return given
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "dtorch-node")
    if os.access(here, os.X_OK):
        return here
    found = shutil.which("dtorch-node")
    if found:
        return found
    raise FileNotFoundError(f"dtorch-node is not installed: looked for {here} and on PATH "
                            "(build dtorch with ZeroMQ, or pip install it)")


def main(argv: Optional[List[str]] = None) -> None:
    """Replaces this process with ``dtorch-node argv...`` (default: sys.argv[1:])."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        exe = executable()
    except FileNotFoundError as e:
        print(f"python -m dtorch.node: {e}", file=sys.stderr)
        sys.exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(exe, [exe] + args)


if __name__ == "__main__":
    main()
