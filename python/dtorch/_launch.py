"""What a launcher (torchrun, Slurm's srun, a Kubernetes Job setting torchrun's variables) tells
each process it starts, read into one ``Launch`` (``dtorch.cluster.init``, docs/cluster.md).

Pure functions of an environment mapping, so the tests give them any environment; nothing here
starts, binds or reads a file but the token file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Mapping, Optional

__all__ = ["Launch", "detect", "expand_hostlist"]

# The port Slurm jobs use when nothing names one: BASE + 2 * (job id mod SPAN), so that two jobs
# sharing a host rarely meet (the main node takes the port and the next one, its heartbeats').
SLURM_PORT_BASE = 20000
SLURM_PORT_SPAN = 20000


@dataclass(frozen=True)
class Launch:
    """One process of a launched job: which launcher, its rank among ``world_size`` processes,
    its rank on its host (``local_rank``: the GPU it takes), the main node's host and port (rank 0
    listens there, the others connect) and ``job``, a name every process of the job shares and
    no other job does (it is mixed into the token, so a worker node of another job is refused)."""

    launcher: str
    rank: int
    world_size: int
    local_rank: int
    main_host: str
    port: int
    job: str


def _int(env: Mapping[str, str], name: str, low: int = 0, high: Optional[int] = None) -> int:
    text = env.get(name, "")
    try:
        v = int(text)
    except ValueError:
        raise ValueError(f"dtorch.cluster.init(): {name}={text!r} is not an integer") from None
    if v < low or (high is not None and v > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise ValueError(f"dtorch.cluster.init(): {name}={v} is out of range ({bound})")
    return v


def _split_top(text: str) -> List[str]:
    """``a[1,2],b`` -> ["a[1,2]", "b"]: the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"Slurm host list {text!r}: nested brackets")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"Slurm host list {text!r}: a ']' without its '['")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"Slurm host list {text!r}: a '[' without its ']'")
    parts.append(text[start:])
    return parts


def _range_values(body: str, whole: str) -> List[str]:
    """The values of one bracket's body, ``01-03,07`` -> ["01", "02", "03", "07"]: each range keeps
    its first bound's width (zero-padded), as Slurm writes them."""
    out = []
    for item in body.split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
        if not m:
            raise ValueError(f"Slurm host list {whole!r}: {item!r} is not a number or a range N-M")
        lo, hi = m.group(1), m.group(2) if m.group(2) is not None else m.group(1)
        if int(hi) < int(lo):
            raise ValueError(f"Slurm host list {whole!r}: the range {item!r} runs backwards")
        width = len(lo) if lo.startswith("0") else 0
        out.extend(str(v).zfill(width) for v in range(int(lo), int(hi) + 1))
    return out


def expand_hostlist(text: str) -> List[str]:
    """Slurm's compressed host list to host names, in order: ``node[01-03,07],gpu5`` ->
    ["node01", "node02", "node03", "node07", "gpu5"]; several brackets in one name multiply
    (``r[1-2]n[1-2]`` -> r1n1, r1n2, r2n1, r2n2). ValueError for a malformed list."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"Slurm host list {text!r} is empty")
    hosts: List[str] = []
    for part in _split_top(text.strip()):
        if not part:
            raise ValueError(f"Slurm host list {text!r}: an empty name")
        if "]" in part and not part.endswith("]"):  # as Slurm: a name's text ends at its last range
            raise ValueError(f"Slurm host list {text!r}: text after the last ']' of {part!r}")
        names = [""]
        for m in re.finditer(r"([^\[\]]*)(?:\[([^\]]*)\])?", part):
            prefix, body = m.group(1), m.group(2)
            if body is None:
                names = [n + prefix for n in names]
                continue
            values = _range_values(body, text)
            names = [n + prefix + v for n in names for v in values]
        hosts.extend(names)
    return hosts


def _port(env: Mapping[str, str], default: int) -> int:
    if env.get("DTORCH_MAIN_NODE_PORT"):
        return _int(env, "DTORCH_MAIN_NODE_PORT", 1, 65534)
    return default


def _torchrun(env: Mapping[str, str]) -> Launch:
    world = _int(env, "WORLD_SIZE", 1)
    rank = _int(env, "RANK", 0, world - 1)
    local = _int(env, "LOCAL_RANK", 0) if env.get("LOCAL_RANK") else 0
    master_port = _int(env, "MASTER_PORT", 1, 65533)
    # torchrun's agent holds MASTER_PORT itself (its store): the main node takes the next two.
    port = _port(env, master_port + 1)
    host = env["MASTER_ADDR"]
    job = f"torchrun/{env.get('TORCHELASTIC_RUN_ID', '')}/{host}:{master_port}"
    return Launch("torchrun", rank, world, local, host, port, job)


def _slurm(env: Mapping[str, str]) -> Launch:
    world = _int(env, "SLURM_NTASKS", 1) if env.get("SLURM_NTASKS") else _int(env, "SLURM_NPROCS", 1)
    rank = _int(env, "SLURM_PROCID", 0, world - 1)
    local = _int(env, "SLURM_LOCALID", 0) if env.get("SLURM_LOCALID") else 0
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if not nodelist:
        raise ValueError("dtorch.cluster.init(): Slurm set SLURM_PROCID but no SLURM_STEP_NODELIST, "
                         "SLURM_JOB_NODELIST or SLURM_NODELIST: run the script with srun")
    job_id = _int(env, "SLURM_JOB_ID", 0) if env.get("SLURM_JOB_ID") else 0
    step = env.get("SLURM_STEP_ID", "")
    # Task 0 runs on the step's first host (srun's block distribution, the default).
    host = expand_hostlist(nodelist)[0]
    port = _port(env, SLURM_PORT_BASE + 2 * (job_id % SLURM_PORT_SPAN))
    return Launch("slurm", rank, world, local, host, port, f"slurm/{job_id}.{step}")


def detect(env: Mapping[str, str]) -> Launch:
    """The launch described by `env`: torchrun's variables (``RANK``, ``WORLD_SIZE``,
    ``MASTER_ADDR``, ``MASTER_PORT``, ``LOCAL_RANK``; also what a Kubernetes PyTorchJob sets)
    first, else Slurm's (``SLURM_PROCID``, ``SLURM_NTASKS``, ``SLURM_STEP_NODELIST``, ...).
    ``DTORCH_MAIN_NODE_PORT`` overrides the port; ``DTORCH_MAIN_NODE_ADDRESS`` (``HOST:PORT``) the
    host and port. RuntimeError when neither launcher's variables are there; ValueError for one
    that is malformed."""
    if all(env.get(k) for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")):
        launch = _torchrun(env)
    elif env.get("SLURM_PROCID"):
        launch = _slurm(env)
    else:
        raise RuntimeError("dtorch.cluster.init(): no launcher's variables: start the script with torchrun "
                           "(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or srun (SLURM_PROCID, SLURM_NTASKS, "
                           "SLURM_STEP_NODELIST), or use MainNode.set_address and dtorch-node directly")
    address = env.get("DTORCH_MAIN_NODE_ADDRESS")
    if address:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65535:
            raise ValueError(f"dtorch.cluster.init(): DTORCH_MAIN_NODE_ADDRESS={address!r} is not HOST:PORT")
        launch = Launch(launch.launcher, launch.rank, launch.world_size, launch.local_rank, host, int(port),
                        launch.job)
    return launch


def read_token(token: Optional[str], token_file: Optional[str], env: Mapping[str, str]) -> str:
    """The cluster's secret: `token`, else ``DTORCH_CLUSTER_TOKEN``, else the contents of
    `token_file` or ``DTORCH_CLUSTER_TOKEN_FILE`` (its trailing newline dropped). ValueError when
    there is none, or the file is empty; OSError when it cannot be read."""
    if token is None:
        token = env.get("DTORCH_CLUSTER_TOKEN") or None
    if token is None:
        path = token_file or env.get("DTORCH_CLUSTER_TOKEN_FILE")
        if not path:
            raise ValueError("dtorch.cluster.init(): no cluster token: set DTORCH_CLUSTER_TOKEN, or "
                             "DTORCH_CLUSTER_TOKEN_FILE to a file every rank can read")
        with open(path, encoding="utf-8") as f:
            token = f.read().rstrip("\r\n")
        if not token:
            raise ValueError(f"dtorch.cluster.init(): the token file {path} is empty")
    if not isinstance(token, str) or not token:
        raise ValueError("dtorch.cluster.init(): the cluster token must be a non-empty str")
    return token
