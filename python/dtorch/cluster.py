"""``dtorch.cluster``: the main node of a multi-node cluster (docs/cluster.md).

A cluster is this process, the **main node** (the client and the controller), and **worker nodes**:
``dtorch-node`` processes (or ``python -m dtorch.node``), usually one per other host, that register
with it over ZeroMQ. Both sides hold a shared secret, the token (``DTORCH_CLUSTER_TOKEN``): it is
checked at registration (in constant time) and, when libzmq has CURVE, every connection is
encrypted and authenticated with keys derived from it. Heartbeats run both ways (default every
second): the main node marks a worker node lost after two silent intervals, and a worker node exits
(status 0) when the main node says stop or goes silent.

Device ids are global and node-major, per device type: the main node's own CPU devices first
(``cpu_devices``), then each worker node's, in registration order; likewise CUDA ids: the main node's
own GPUs first (what its CUDA backend sees), then each worker node's (``dtorch-node
--cuda-devices=N``). ``MainNode.nodes()`` lists them.

What works today: forming the cluster, heartbeats and loss detection, and meshes of one worker
node's devices: their kernels run on that node, reads come back (docs/cluster.md); redistributes
between meshes of different nodes, and meshes spanning nodes (their collectives exchange messages,
with results bit-identical to a one-process mesh of the same shape).

>>> import os, subprocess
>>> from dtorch import MainNode
>>> os.environ.setdefault("DTORCH_CLUSTER_TOKEN", "example-secret")  # doctest: +SKIP
>>> MainNode.set_address("127.0.0.1:0", cpu_devices=2)               # doctest: +SKIP
>>> node = subprocess.Popen(["python", "-m", "dtorch.node",
...                          f"--main-node-address={MainNode.get_address()}", "--cpu-devices=2"])  # doctest: +SKIP
>>> MainNode.wait_cluster_ready(1, timeout_second=60)               # doctest: +SKIP
>>> MainNode.num_node_in_cluster(), MainNode.nodes()[0]["first_device_id"]  # doctest: +SKIP
(1, 2)
"""

from __future__ import annotations

import atexit
from typing import Any, Dict, List, Optional

from . import _C
from .global_option import GlobalOption

__all__ = ["MainNode"]


class MainNode:
    """The process that runs the controller for the whole cluster (static methods only)."""

    def __init__(self) -> None:
        raise TypeError("MainNode has static methods only: MainNode.set_address(...), MainNode.get_address()")

    @staticmethod
    def set_address(address: Optional[str] = None, cpu_devices: int = 0, *, token: Optional[str] = None,
                    heartbeat_second: Optional[float] = None) -> None:
        """Makes this process the main node, listening for worker nodes at ``address``.

        ``address`` is ``"HOST:PORT"`` (port 0: a free port; ``"0.0.0.0:PORT"`` to accept other
        hosts; None: ``GlobalOption.main_node_address``, from ``DTORCH_MAIN_NODE_ADDRESS``, else
        ``127.0.0.1`` on a free port). ``cpu_devices`` is the number of this process's
        own CPU devices (global ids ``0..cpu_devices-1``). The token defaults to
        ``DTORCH_CLUSTER_TOKEN``; ``heartbeat_second`` to ``DTORCH_HEARTBEAT_MS`` / 1000, else 1.
        ValueError for a bad address, a missing token or a second call; RuntimeError when the
        address cannot be bound.

        >>> MainNode.set_address("0.0.0.0:5555", cpu_devices=2)  # doctest: +SKIP
        """
        if address is not None and not isinstance(address, str):
            raise TypeError(f"set_address() takes a 'HOST:PORT' string, not {type(address).__name__}")
        if isinstance(cpu_devices, bool) or not isinstance(cpu_devices, int):
            raise TypeError(f"set_address(): cpu_devices must be an int, not {type(cpu_devices).__name__}")
        if token is not None and not isinstance(token, str):
            raise TypeError(f"set_address(): token must be a str, not {type(token).__name__}")
        hb_ms = 0
        if heartbeat_second is not None:
            hb_ms = int(round(float(heartbeat_second) * 1000))
            if hb_ms <= 0:
                raise ValueError(f"set_address(): heartbeat_second must be > 0, not {heartbeat_second}")
        if not _C._cluster_info()["available"]:
            raise RuntimeError("MainNode.set_address(): this build of dtorch has no ZeroMQ; install "
                               "libzmq3-dev and rebuild to form clusters")
        if address is None:
            address = GlobalOption.main_node_address
        _C._cluster_listen(address, cpu_devices, token, hb_ms)

    @staticmethod
    def wait_cluster_ready(num_nodes: int, timeout_second: float = 600) -> None:
        """Waits until ``num_nodes`` worker nodes are connected and alive; TimeoutError after
        ``timeout_second`` seconds. Ctrl-C interrupts the wait.

        >>> MainNode.wait_cluster_ready(2, timeout_second=60)  # doctest: +SKIP
        """
        if isinstance(num_nodes, bool) or not isinstance(num_nodes, int):
            raise TypeError(f"wait_cluster_ready(): num_nodes must be an int, not {type(num_nodes).__name__}")
        if MainNode.get_address() is None:
            raise RuntimeError("MainNode.wait_cluster_ready(): call MainNode.set_address() first")
        _C._cluster_wait(num_nodes, float(timeout_second))

    @staticmethod
    def get_address() -> Optional[str]:
        """The ``"HOST:PORT"`` the main node listens at (the port bound); None when not listening."""
        return _C._cluster_address()

    @staticmethod
    def num_node_in_cluster() -> int:
        """The number of worker nodes connected and alive (0 without a cluster)."""
        return int(_C._cluster_info()["num_alive"])

    @staticmethod
    def nodes() -> List[Dict[str, Any]]:
        """Every worker node registered so far, in registration order: ``index``, ``state``
        ("alive", "lost" or "stopped"), ``cpu_devices``, ``first_device_id`` (its first global CPU
        device id), ``cuda_devices``, ``first_cuda_device_id`` (its first global CUDA device id),
        ``pid``, ``address``, ``host``, once lost ``error``, and the data of collectives and copies
        it sent to and received from other nodes (``data_bytes_sent``, ``data_messages_sent``,
        ``data_bytes_received``, ``data_messages_received``; as of its latest answer, so exact once
        a sync of that work has returned)."""
        return _C._cluster_nodes()

    @staticmethod
    def shutdown() -> None:
        """Tells every worker node to stop (they exit 0) and stops listening; also run at exit."""
        _C._cluster_shutdown()


atexit.register(_C._cluster_shutdown)
