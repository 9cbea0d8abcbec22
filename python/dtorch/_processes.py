"""The local worker processes of ``Graph(GraphOption(per_device_per_process=True))``.

Such a graph runs each CPU device's kernels in a process of its own: a ``dtorch-node`` child of
this process, one per device id, serving that id alone. They are the cluster machinery's worker
nodes (docs/cluster.md) on loopback: the first such graph makes this process a *private* main
node (``127.0.0.1``, a free port, a fresh random token handed to the children in their
environment, no CPU device of its own), then starts the children one after the other, each
waiting for the previous one to register, so that child ``k`` serves global CPU id ``k``: the ids
of the graph's meshes are the children's devices as they are. Being private, the cluster serves
only per-device-per-process graphs; every other graph keeps all its devices in this process
(``dt_cluster_options.private_nodes``).

Each child starts with the torch intra-op thread count this process has when it is started
(``OMP_NUM_THREADS`` and ``MKL_NUM_THREADS`` in its environment), which is what this process's own
worker threads use, so that a device's bits do not depend on whether it runs in a thread or a child.
A later ``torch.set_num_threads`` reaches children started after it only.

The children are shared by every such graph of the process. When the last of those graphs
ends (it is collected, which happens once no tensor of it is left, or the program ends), the
graph finishes its work, the main node tells the children to stop (each exits 0), this module
reaps them and the private cluster closes; a later such graph starts new ones. If this process
dies without that (SIGKILL, a crash), each child sees the main node's heartbeats stop and exits
within two intervals (one second each by default). A graph that asks for more devices than are
running starts the missing ones.
"""

from __future__ import annotations

import atexit
import os
import secrets
import subprocess
import threading
from typing import List

import torch

from . import _C

__all__ = ["ensure", "release", "private", "pids"]

# Re-entrant: a graph's __del__ (release) may run from a garbage collection on a thread that is
# inside ensure(); the new graph is counted first, so that release never stops the children then.
_lock = threading.RLock()
_children: List[subprocess.Popen] = []
_graphs = 0  # live per-device-per-process graphs
_listening = False  # this module made the (private) cluster
_token = ""
_START_TIMEOUT_S = 120.0  # a child's registration, on a loaded machine


def ensure(num_devices: int) -> None:
    """For a new per-device-per-process graph: starts children until CPU ids
    ``0..num_devices-1`` each have one, and counts the graph (``release`` uncounts it)."""
    global _graphs
    with _lock:
        _graphs += 1
        try:
            _start(num_devices)
        except BaseException:
            _graphs -= 1
            if not _graphs:
                _stop_all()
            raise


def release() -> None:
    """A per-device-per-process graph ended: the last one stops the children."""
    global _graphs
    with _lock:
        _graphs -= 1
        if _graphs <= 0:
            _graphs = 0
            _stop_all()


def _start(num_devices: int) -> None:
    global _token, _listening
    from .node import executable  # late: only this mode needs the executable

    if not _listening:
        if _C._cluster_address() is not None:
            raise NotImplementedError(
                "GraphOption(per_device_per_process=True) in a process that is already a cluster's main node "
                "(MainNode.set_address): per-device processes beside a user's cluster are not implemented")
        _token = secrets.token_hex(32)
        _C._cluster_listen("127.0.0.1:0", 0, _token, 0, True)
        _listening = True
    exe = executable()
    address = _C._cluster_address()
    # Each child runs its kernels with the intra-op thread count this process's own workers use,
    # torch's setting now (a torch.set_num_threads() before the first such graph is followed), so
    # their bits are those of threads and of eager torch here: GEMMs and some reductions split
    # their work by thread count and round differently per split.
    threads = str(torch.get_num_threads())
    env = dict(os.environ, DTORCH_CLUSTER_TOKEN=_token, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    env.pop("DTORCH_MAIN_NODE_ADDRESS", None)
    while len(_children) < num_devices:
        k = len(_children)
        child = subprocess.Popen([exe, f"--main-node-address={address}", "--cpu-devices=1", "--quiet"], env=env,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        _children.append(child)
        try:
            _C._cluster_wait(k + 1, _START_TIMEOUT_S)
        except BaseException:
            child.kill()
            child.wait()
            _children.pop()
            raise
        first = _C._cluster_nodes()[k]["first_device_id"]
        if first != k:  # registration order is what maps ids to processes
            raise RuntimeError(f"per_device_per_process: the process for cpu:{k} serves id {first}")


def private() -> bool:
    """Whether this process's cluster is the per-device processes' own (no other graph uses it)."""
    return _listening


def pids() -> List[int]:
    """The children's process ids, in device-id order (device ``k`` runs in ``pids()[k]``)."""
    with _lock:
        return [c.pid for c in _children]


def _stop(child: subprocess.Popen) -> None:
    try:
        child.wait(timeout=10)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _stop_all() -> None:
    """The main node tells every child to stop (each exits 0); they are reaped; the cluster closes."""
    global _listening
    if not _listening:
        return
    _listening = False
    _C._cluster_shutdown()
    for child in _children:
        _stop(child)
    _children.clear()


def _shutdown() -> None:
    with _lock:
        _stop_all()


atexit.register(_shutdown)
