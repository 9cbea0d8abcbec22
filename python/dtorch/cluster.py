"""``dtorch.cluster``: the main node of a multi-node cluster.

Worker nodes (``dtorch-node`` processes on other hosts, DESIGN.md section 5) are not part of this
build yet. Without a cluster, ``MainNode.num_node_in_cluster()`` is 0 and ``get_address()`` None;
``set_address`` and ``wait_cluster_ready`` raise RuntimeError rather than pretend a cluster exists.

>>> from dtorch.cluster import MainNode
>>> MainNode.num_node_in_cluster(), MainNode.get_address()
(0, None)
"""

from __future__ import annotations

from typing import Optional

__all__ = ["MainNode"]

_UNAVAILABLE = ("multi-node clusters are not available in this build of dtorch yet: there are no worker "
                "nodes to connect to; run on the local devices (one process) instead")


class MainNode:
    """The process that runs the controller for the whole cluster (static methods only)."""

    def __init__(self) -> None:
        raise TypeError("MainNode has static methods only: MainNode.set_address(...), MainNode.get_address()")

    @staticmethod
    def set_address(address: str) -> None:
        """Would listen for worker nodes at ``address`` ("HOST:PORT"); RuntimeError in this build."""
        if not isinstance(address, str):
            raise TypeError(f"set_address() takes a 'HOST:PORT' string, not {type(address).__name__}")
        raise RuntimeError(f"MainNode.set_address({address!r}): {_UNAVAILABLE}")

    @staticmethod
    def wait_cluster_ready(num_nodes: Optional[int] = None, timeout: Optional[float] = None) -> None:
        """Would wait until the worker nodes have joined; RuntimeError in this build."""
        raise RuntimeError(f"MainNode.wait_cluster_ready(): {_UNAVAILABLE}")

    @staticmethod
    def get_address() -> Optional[str]:
        """The address the main node listens at: None without a cluster."""
        return None

    @staticmethod
    def num_node_in_cluster() -> int:
        """The number of worker nodes connected: 0 without a cluster."""
        return 0
