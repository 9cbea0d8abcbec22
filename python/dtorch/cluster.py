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
import os
import socket
import sys
import weakref
from typing import Any, Dict, List, Mapping, Optional

from . import _C
from ._launch import Launch, detect, expand_hostlist, read_token
from .global_option import GlobalOption

__all__ = ["MainNode", "Launch", "init", "expand_hostlist", "replace"]


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
        ("alive", "lost", "stopped", or "removed" by ``remove()``), ``cpu_devices``,
        ``first_device_id`` (its first global CPU device id), ``cuda_devices``, ``first_cuda_device_id`` (its first global CUDA device id),
        ``pid``, ``address``, ``host``, once lost ``error``, and the data of collectives and copies
        it sent to and received from other nodes (``data_bytes_sent``, ``data_messages_sent``,
        ``data_bytes_received``, ``data_messages_received``; as of its latest answer, so exact once
        a sync of that work has returned), and its clock's offset from this process's
        (``clock_offset_ns``, its clock minus ours, estimated from the heartbeats) with the round
        trip it was measured over (``clock_rtt_ns``: the offset is right within half of it; -1
        before the first exchange). A lost node given a new home by ``replace()`` shows
        ``state: "replaced"`` and ``replaced_by``: the new home (a worker node's index, or
        ``{kind: [device ids]}``)."""
        nodes = _C._cluster_nodes()
        for n in nodes:
            if n["index"] in _REPLACED:
                n["state"] = "replaced"
                n["replaced_by"] = _REPLACED[n["index"]]
        return nodes

    @staticmethod
    def remove(node: Any, to: Any = None) -> None:
        """Removes worker node ``node`` (its ``index``, or its entry of ``nodes()``) from the
        cluster while the program runs (docs/cluster.md, "Removing a node").

        Without ``to``, a node that holds no live value is told to stop (it exits 0); one that
        holds some is refused with a RuntimeError listing each value (shape, dtype, the line that
        made it) and nothing changes. With ``to``, the device ids to move them to (as many as the
        node has, its i-th device's pieces going to ``to[i]``; a dict ``{"cpu": [...], "cuda":
        [...]}`` for a node with both kinds), every value with a piece there is copied to the
        same mesh with those ids, and every dtorch.Tensor holding it now holds the copy (the same
        value, placements and shape; a Partial value's sum is finished on the way, its first
        coordinate holding it); then the node is removed. Its ids stay numbered but are
        marked removed: ``nodes()`` shows ``state: "removed"`` and a mesh on them is a
        ValueError. Call it from the thread that records the program's ops, with no other
        thread recording meanwhile.

        >>> MainNode.remove(1, to=[0, 1])  # doctest: +SKIP
        """
        index = _node_index(node, "node", "remove")
        nodes = MainNode.nodes()
        if not 0 <= index < len(nodes):
            raise IndexError(f"remove(): worker node {index} does not exist ({len(nodes)} registered)")
        info = nodes[index]
        if info["state"] != "alive":
            raise ValueError(f"remove(): worker node {index} is {info['state']}, not alive")
        ranges = _ranges(info)
        held = _held(ranges)
        if held and to is None:
            raise RuntimeError(f"MainNode.remove(): worker node {index} holds {len(held)} live value"
                               f"{'' if len(held) == 1 else 's'}; move them with remove({index}, to=[device ids]) "
                               f"or drop them first:\n" + _describe(held))
        if held:
            _drain(held, _destinations(index, ranges, to))
            left = _held(ranges)
            if left:
                raise RuntimeError(f"MainNode.remove(): worker node {index} still holds {len(left)} value"
                                   f"{'' if len(left) == 1 else 's'} that no dtorch.Tensor of this process "
                                   f"holds (the node stays):\n" + _describe(left))
        _C._cluster_remove(index)

    @staticmethod
    def replace(lost: Any, new: Any) -> Dict[str, int]:
        """Gives the device ids of worker node ``lost`` (lost: killed, hung, unreachable) a new
        home, so that the program goes on (docs/cluster.md, "Replacing a lost node").

        ``new`` is a worker node registered since (its index or ``nodes()`` entry: alive, with as
        many CPU and CUDA devices as the lost one), or device ids like ``remove()``'s ``to=`` (a
        list, in the lost node's device order; ``{"cpu": [...], "cuda": [...]}``; a DeviceMesh).
        Then a DeviceMesh on the lost ids, the ones that exist and the ones made later, is on the
        new home (the i-th lost id becomes the i-th new one), and each value that had a piece on
        the lost devices is, for every dtorch.Tensor holding it, either recomputed there from its
        recorded producer, when that op is pure and all its inputs are alive (or recomputed
        before it), bit-identical to before; or marked lost: a read of it raises ``KernelError``
        naming its shape, dtype, the line that made it and that it must be reloaded (a value
        loaded from host data: ``from_torch``, a checkpoint). Values elsewhere are untouched.
        Returns ``{"recomputed": n, "lost": m}``. ValueError for a node that does not exist or
        is not lost, or a bad ``new`` (a node not alive, other device counts, wrong ids), with
        nothing changed. Call it from the thread that records the program's ops.

        >>> MainNode.replace(0, 1)            # node 1 registered after node 0 was lost  # doctest: +SKIP
        {'recomputed': 12, 'lost': 3}
        """
        index = _node_index(lost, "lost")
        nodes = MainNode.nodes()
        if not 0 <= index < len(nodes):
            raise ValueError(f"replace(): worker node {index} does not exist ({len(nodes)} registered)")
        info = nodes[index]
        if info["state"] != "lost":
            raise ValueError(f"replace(): worker node {index} is {info['state']}, not lost: only a lost node's "
                             f"devices are replaced (MainNode.remove() moves a live node's values)")
        ranges = _ranges(info)
        maps, home = _new_home(index, info, ranges, new, nodes)
        return _recover(index, info, ranges, maps, home)

    @staticmethod
    def shutdown() -> None:
        """Tells every worker node to stop (they exit 0) and stops listening; also run at exit.
        Replacements (``replace()``) end with the cluster: ids are this process's again."""
        _C._cluster_shutdown()
        from .distributed_spec import _REDIRECT

        _REPLACED.clear()
        for redirect in _REDIRECT.values():
            redirect.clear()
        for ref, state in _MOVED_MESHES.values():  # a mesh made before the cluster means its own ids again
            mesh = ref()
            if mesh is not None:
                mesh._init(*state)
        _MOVED_MESHES.clear()


_REPLACED: Dict[int, Any] = {}  # lost node index -> its new home (MainNode.replace)
# id(DeviceMesh) -> (weakref to it, its state before replace() moved it in place), until shutdown()
_MOVED_MESHES: Dict[int, Any] = {}


def _node_index(node: Any, what: str, who: str = "replace") -> int:
    """A worker node's index from its index or nodes() entry; TypeError naming `what`."""
    index = node.get("index") if isinstance(node, Mapping) else node
    if isinstance(index, bool) or not isinstance(index, int):
        raise TypeError(f"{who}(): {what} must be a worker node's index or its nodes() entry, not "
                        f"{type(node).__name__}")
    if MainNode.get_address() is None:
        raise RuntimeError(f"MainNode.{who}(): this process is not a main node (MainNode.set_address)")
    return index


def _new_home(index: int, info: Mapping[str, Any], ranges: Mapping[str, range], new: Any,
              nodes: List[Dict[str, Any]]) -> tuple:
    """new, checked: ({kind: {lost id: new id}}, what nodes() shows as replaced_by)."""
    if isinstance(new, (int, Mapping)) and not isinstance(new, bool) and (
            not isinstance(new, Mapping) or "index" in new):
        j = _node_index(new, "new")
        if not 0 <= j < len(nodes):
            raise ValueError(f"replace(): worker node {j} does not exist ({len(nodes)} registered)")
        other = nodes[j]
        if j == index or other["state"] != "alive":
            raise ValueError(f"replace(): the new home, worker node {j}, is {other['state']}, not alive")
        if j in _REPLACED.values():
            raise ValueError(f"replace(): worker node {j} is already the new home of another node")
        for key in ("cpu_devices", "cuda_devices"):
            if other[key] != info[key]:
                raise ValueError(f"replace(): worker node {j} has {other[key]} {key.replace('_', ' ')}, "
                                 f"worker node {index} had {info[key]}: the new home needs as many of each kind")
        new_ranges = _ranges(other)
        return {k: dict(zip(r, new_ranges[k])) for k, r in ranges.items()}, j
    maps = _destinations(index, ranges, new, "replace")
    return maps, {k: list(m.values()) for k, m in maps.items()}


def _recover(index: int, info: Mapping[str, Any], ranges: Mapping[str, range], maps: Mapping[str, Dict[int, int]],
             home: Any) -> Dict[str, int]:
    """Recomputes or marks lost every value on the lost ids (oldest first, so that a value's
    recomputed inputs come before it), rebinds the tensors holding them, then points every
    DeviceMesh on the lost ids, and the ones made later, at the new home."""
    import gc

    from .distributed_spec import _REDIRECT, DeviceMesh

    gc.collect()  # tensors and meshes only garbage holds are not moved
    affected = {v[0]: v for v in _held(ranges)}
    holders: Dict[int, list] = {}  # value id -> [tensors holding it], every live tensor
    meshes = []
    for o in gc.get_objects():
        if issubclass(type(o), _C.TensorBase):  # type(): no proxy's __class__
            holders.setdefault(o._id, []).append(o)
        elif type(o) is DeviceMesh and any(i in maps.get(o._device_type, ()) for i in o._ids):
            meshes.append(o)
    new_mesh = {}  # (device type, ids, names) of an old mesh -> the mesh on the new home

    def moved(mesh):
        m = maps.get(mesh.device_type, {})
        key = (mesh.device_type, mesh._ids, mesh.dim_names)
        if key not in new_mesh:
            new_mesh[key] = mesh._sub(mesh.shape, [m.get(i, i) for i in mesh._ids], mesh.dim_names)
        return new_mesh[key]

    # Every value's new mesh first: one refused (a duplicate id) is a ValueError with nothing
    # changed. A DeviceMesh object no value needs that the mapping would make invalid (a local id
    # it already has) keeps its ids: using it fails as a lost node's mesh does.
    for vid in affected:
        if vid in holders:
            moved(holders[vid][0].device_mesh)
    meshes = [m for m in meshes if _movable(moved, m)]
    why = info.get("error") or f"worker node {index} was lost"
    done: Dict[int, Any] = {}
    lost = 0
    for vid in sorted(affected):
        if vid not in holders:
            continue  # no dtorch.Tensor of this process holds it
        x = holders[vid][0]
        reason = _recompute_reason(x, affected, done, holders)
        if reason is None:
            op, ins = _C._lineage(x)
            inputs = [None if i == 0 else done[i] if i in done else holders[i][0] for i in ins]
            try:
                done[vid] = _C._recompute(x, inputs, moved(x.device_mesh))
                continue
            except (RuntimeError, ValueError, TypeError) as e:
                reason = f"recomputing its producer ({op}) failed: {e}"
        _, shape, dtype, file, line = affected[vid]
        _C._mark_lost(x, f"a value of shape {list(shape)}, {dtype}, made at "
                         f"{f'{file}:{line}' if file else '(unknown line)'}, was lost with worker node {index} "
                         f"({why}) and cannot be recomputed ({reason}): reload it (from_torch, or load the "
                         f"checkpoint again) onto its mesh, which is now on the replacement's devices")
        lost += 1
    for vid, y in done.items():
        for o in holders[vid]:
            _C._rebind(o, y)
    for kind, m in maps.items():
        redirect = _REDIRECT[kind]
        for old, now in list(redirect.items()):  # an earlier replacement's ids, lost again
            redirect[old] = m.get(now, now)
        redirect.update(m)
    for mesh in meshes:  # the DeviceMesh objects on the lost ids: on the new home
        seen = _MOVED_MESHES.get(id(mesh))
        if seen is None or seen[0]() is not mesh:  # as it was before the first replace; shutdown() restores it
            _MOVED_MESHES[id(mesh)] = (weakref.ref(mesh), (mesh._handle, mesh._device_type, mesh._shape, mesh._ids,
                                                           mesh._names))
        handle = moved(mesh)._handle
        mesh._init(handle, mesh._device_type, handle.shape, handle.ids, handle.dim_names)
    _REPLACED[index] = home
    return {"recomputed": len(done), "lost": lost}


def _movable(moved: Any, mesh: Any) -> bool:
    try:
        moved(mesh)
        return True
    except ValueError:
        return False


def _recompute_reason(x: Any, affected: Mapping[int, tuple], done: Mapping[int, Any],
                      holders: Mapping[int, list]) -> Optional[str]:
    """None when x can be recomputed now, else why not."""
    lineage = _C._lineage(x)
    if lineage is None:
        return "it was loaded from host data or made by an op that is not pure, so no producer was recorded"
    op, ins = lineage
    for i in ins:
        if i == 0 or i in done:  # 0: an input the op left out
            continue
        if i in affected:
            return f"an input of its producer ({op}) was lost too and cannot be recomputed"
        if i not in holders:
            return f"an input of its producer ({op}) is no longer held by any dtorch.Tensor"
    return None


def _ranges(info: Mapping[str, Any]) -> Dict[str, range]:
    """The node's global device ids per kind, those it has."""
    out = {"cpu": range(info["first_device_id"], info["first_device_id"] + info["cpu_devices"]),
           "cuda": range(info["first_cuda_device_id"], info["first_cuda_device_id"] + info["cuda_devices"])}
    return {k: r for k, r in out.items() if len(r)}


_KIND = {"cpu": _C.DEVICE_CPU, "cuda": _C.DEVICE_CUDA}


def _held(ranges: Mapping[str, range]) -> List[tuple]:
    """The live values with a piece on those ids: (id, shape, dtype, file, line) each."""
    return [v for k, r in ranges.items() for v in _C._values_on_devices(_KIND[k], r.start, len(r))]


def _describe(values: List[tuple]) -> str:
    return "\n".join(f"  shape {list(shape)}, {dtype}, made at {f'{file}:{line}' if file else '(unknown line)'}"
                     for _, shape, dtype, file, line in values)


def _destinations(index: int, ranges: Mapping[str, range], to: Any, who: str = "remove") -> Dict[str, Dict[int, int]]:
    """to, checked, as {kind: {node's id: new id}}; a ValueError naming ``to`` before anything moves."""
    from .distributed_spec import DeviceMesh, _check_cluster_ids

    if isinstance(to, DeviceMesh):
        to = {to.device_type: list(to._ids)}
    elif not isinstance(to, Mapping):
        if len(ranges) != 1:
            raise ValueError(f"{who}(): worker node {index} has CPU and CUDA devices: give to as "
                             f"{{'cpu': [...], 'cuda': [...]}}")
        to = {next(iter(ranges)): to}
    out = {}
    for kind, r in ranges.items():
        ids = to.get(kind)
        if ids is None:
            raise ValueError(f"{who}(): to names no {kind} devices for worker node {index}'s {len(r)}")
        ids = list(ids)
        if any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
            raise TypeError(f"{who}(): to must hold int device ids, not {ids!r}")
        if len(ids) != len(r):
            raise ValueError(f"{who}(): to has {len(ids)} {kind} device ids but worker node {index} has "
                             f"{len(r)} (ids {r.start}..{r.stop - 1}), mapped in order")
        if len(set(ids)) != len(ids) or any(i in r for i in ids):
            raise ValueError(f"{who}(): to={ids} must name {len(r)} distinct {kind} devices, none of worker "
                             f"node {index}'s own ({r.start}..{r.stop - 1})")
        _check_cluster_ids(ids, kind)
        out[kind] = dict(zip(r, ids))
    return out


def _drain(held: List[tuple], maps: Mapping[str, Dict[int, int]]) -> None:
    """Copies every value in `held` to its mesh with the node's ids mapped, then points each
    dtorch.Tensor holding it at the copy: the meshes are made (and refused) before anything
    moves, and the tensors change only once the copies have run."""
    import gc

    wanted = {v[0] for v in held}
    found: Dict[int, list] = {}  # value id -> [tensors holding it]
    for o in gc.get_objects():
        if issubclass(type(o), _C.TensorBase) and o._id in wanted:  # type(): no proxy's __class__
            found.setdefault(o._id, []).append(o)
    dests = {}
    for vid, holders in found.items():
        mesh = holders[0].device_mesh
        m = maps[mesh.device_type]
        dests[vid] = mesh._sub(mesh.shape, [m.get(i, i) for i in mesh._ids], mesh.dim_names)
    copies = {vid: found[vid][0].redistribute(device_mesh=dests[vid], placements=found[vid][0].placements)
              for vid in found}
    for g in {id(c.graph): c.graph for c in copies.values()}.values():
        g.sync()
    for vid, holders in found.items():
        for o in holders:
            _C._rebind(o, copies[vid])


_LOOPBACK = ("localhost", "127.0.0.1", "::1", "ip6-localhost")


def _worker_argv(launch: Launch, cpu_devices: int, device: str, connect_timeout: float) -> List[str]:
    """The ``dtorch-node`` command line a rank other than 0 becomes."""
    from .node import executable

    argv = [executable(), f"--main-node-address={launch.main_host}:{launch.port}", f"--cpu-devices={cpu_devices}",
            f"--connect-timeout={max(1, int(round(connect_timeout)))}", "--quiet"]
    if device == "cuda":  # the GPU LOCAL_RANK names (a single index is written "I,"), or the one
        visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        argv.append(f"--cuda-devices={0 if len(visible) == 1 else launch.local_rank},")  # the launcher left
    return argv


def _serve(argv: List[str], token: str) -> None:
    """Replaces this process with the worker node `argv`: it never returns into the caller's
    script; the process exits as the node does (0 when the main node ends)."""
    env = dict(os.environ)
    env["DTORCH_CLUSTER_TOKEN"] = token
    env.pop("DTORCH_CLUSTER_TOKEN_FILE", None)
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(argv[0], argv, env)
    except OSError as e:  # only when the executable cannot run; never back into the script
        print(f"dtorch.cluster.init(): cannot start the worker node {argv[0]}: {e}", file=sys.stderr, flush=True)
    os._exit(1)


def init(*, cpu_devices: int = 1, main_cpu_devices: int = 0, device: str = "cpu", token: Optional[str] = None,
         token_file: Optional[str] = None, heartbeat_second: Optional[float] = None, timeout_second: float = 600,
         env: Optional[Mapping[str, str]] = None) -> Launch:
    """Makes one cluster of the processes a launcher started, one script on every host
    (docs/cluster.md, "Launchers"): torchrun's variables (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
    ``MASTER_PORT``, ``LOCAL_RANK``; a Kubernetes Job may set them) or Slurm's (``SLURM_PROCID``,
    ``SLURM_NTASKS``, ``SLURM_STEP_NODELIST``; srun sets them).

    Rank 0 becomes the main node (``main_cpu_devices`` CPU devices of its own), listening on the
    main host at ``MASTER_PORT + 1`` under torchrun (whose agent holds ``MASTER_PORT``), at
    ``20000 + 2 * (SLURM_JOB_ID mod 20000)`` under Slurm, or at ``DTORCH_MAIN_NODE_PORT``; the
    heartbeats take the next port. It waits until every other rank has joined (TimeoutError after
    ``timeout_second``) and returns the ``Launch``: the program runs there.

    Every other rank becomes a worker node and never returns: the process is replaced by
    ``dtorch-node`` offering ``cpu_devices`` CPU devices (and, with ``device="cuda"``, the GPU
    ``LOCAL_RANK`` names), which serves until the main node ends and exits 0 (1 when refused:
    a wrong token, a main node of another job or of another dtorch version).

    The token is ``token``, else ``DTORCH_CLUSTER_TOKEN``, else the contents of ``token_file`` or
    ``DTORCH_CLUSTER_TOKEN_FILE``; the job's name is mixed into it, so the ranks of another job
    with the same secret are refused. ``env`` (default ``os.environ``) is where the variables are read.

    >>> launch = dtorch.cluster.init(cpu_devices=4)   # doctest: +SKIP
    >>> launch.rank, dtorch.MainNode.num_node_in_cluster()  # only rank 0 gets here  # doctest: +SKIP
    (0, 2)
    """
    for name, v in (("cpu_devices", cpu_devices), ("main_cpu_devices", main_cpu_devices)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"init(): {name} must be an int, not {type(v).__name__}")
        if v < 0:
            raise ValueError(f"init(): {name} must be >= 0, not {v}")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"init(): device must be 'cpu' or 'cuda', not {device!r}")
    env = os.environ if env is None else env
    launch = detect(env)
    secret = read_token(token, token_file, env)
    job_token = f"{secret}\n{launch.job}"  # another job's ranks, with the same secret, are refused
    if len(job_token.encode()) > 1024:
        raise ValueError("init(): the cluster token is at most 1024 bytes with the job's name")
    if launch.rank != 0:
        _serve(_worker_argv(launch, cpu_devices, device, timeout_second), job_token)
    if device == "cuda" and "CUDA_VISIBLE_DEVICES" not in os.environ:
        os.environ["CUDA_VISIBLE_DEVICES"] = str(launch.local_rank)  # the main node's own GPU
    bind = "127.0.0.1" if launch.main_host in _LOOPBACK else "0.0.0.0"
    address = f"{bind}:{launch.port}"
    if not _C._cluster_info()["available"]:
        raise RuntimeError("dtorch.cluster.init(): this build of dtorch has no ZeroMQ; install libzmq3-dev and "
                           "rebuild to form clusters")
    try:
        MainNode.set_address(address, cpu_devices=main_cpu_devices, token=job_token,
                             heartbeat_second=heartbeat_second)
    except RuntimeError as e:
        raise RuntimeError(
            f"dtorch.cluster.init(): rank 0 cannot be the main node at {address} (host {socket.gethostname()}): "
            f"{e}. Another dtorch main node (another job?) or another program holds port {launch.port} or "
            f"{launch.port + 1}: give every rank a free one in DTORCH_MAIN_NODE_PORT") from None
    MainNode.wait_cluster_ready(launch.world_size - 1, timeout_second=timeout_second)
    return launch


replace = MainNode.replace

atexit.register(_C._cluster_shutdown)
