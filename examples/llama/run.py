"""Llama-family text generation on a dtorch mesh, checked against one device.

By default a tiny random Llama (hidden 64, 4 heads, 2 kv heads, 3 layers, vocab 128) runs on 8
virtual CPU devices as dp=2 x tp=2 x pp=2, greedy-decodes from a prompt of token ids, and the same
model (dtorch's random values do not depend on the mesh) decodes on one device: the script prints
both and whether they match.

    .venv/bin/python examples/llama/run.py
    .venv/bin/python examples/llama/run.py --mesh dp=1,tp=2,pp=2 --max-new-tokens 16
    .venv/bin/python examples/llama/run.py --model /models/Llama-3.2-1B --mesh tp=2 --prompt "The capital of"
    .venv/bin/python examples/llama/run.py --model /models/llama --prompt-ids 1,450,7483 --sample --seed 0
    .venv/bin/python examples/llama/run.py --model /models/Qwen3-0.6B --mesh tp=2 --prompt "Hi" --prompt "The sky is"
    .venv/bin/python examples/llama/run.py --model /models/Mixtral-8x7B-v0.1 --mesh ep=4,tp=2 --prompt "Hello"

``--model`` is a Hugging Face folder of any model type ``dtorch.applications.AutoModelForCausalLM``
reads (llama, qwen2, qwen3, mistral, and the mixtures of experts mixtral, qwen2_moe, qwen3_moe:
config.json and safetensors); ``--prompt`` needs a tokenizer in that folder (transformers'
AutoTokenizer) and may be given several times: the prompts then make one batch, left-padded with its
attention mask. Mesh dims are any of dp, tp, pp, ulysess_cp, ring_cp and ep (the experts of a
mixture of experts split over it); ``--device cuda`` puts the mesh on GPUs.

Across worker nodes (docs/cluster.md): ``--nodes N`` makes this process a cluster's main node and
waits for N worker nodes, whose devices are then the mesh's (this process keeps none);
``--spawn-nodes`` starts them here on loopback, each with an equal share of the mesh's devices:

    .venv/bin/python examples/llama/run.py --nodes 2 --spawn-nodes      # 2 dtorch-node processes
    DTORCH_CLUSTER_TOKEN=... .venv/bin/python examples/llama/run.py --nodes 2 --main-node-address 0.0.0.0:5555
    # then on each of two hosts: DTORCH_CLUSTER_TOKEN=... dtorch-node --main-node-address=HOST:5555 --cpu-devices=4

``--cluster env`` takes the cluster from a launcher (``dtorch.cluster.init``): rank 0 is the main node
and runs the example, every other rank a worker node with an equal share of the mesh's devices:

    DTORCH_CLUSTER_TOKEN=... torchrun --nnodes 1 --nproc-per-node 3 examples/llama/run.py --cluster env
    DTORCH_CLUSTER_TOKEN=... srun -n 3 .venv/bin/python examples/llama/run.py --cluster env

``--kill-node-after K`` (with ``--nodes N --spawn-nodes``) shows recovery from a lost node: after K
new tokens it SIGKILLs worker node 0; the next read fails (KernelError); it starts a replacement
node, gives it the lost node's device ids (``dtorch.cluster.replace``), loads the model again onto
the same mesh, feeds the prompt and the K tokens through the same steps (so the KV cache and the
logits are those of an uninterrupted run) and generates the rest; the tokens equal the single-device
run's:

    .venv/bin/python examples/llama/run.py --nodes 2 --spawn-nodes --kill-node-after 5
"""

from __future__ import annotations

import argparse
import math
import os
import secrets
import signal
import subprocess
import sys
import time

import torch

import dtorch
from dtorch.applications import AutoModelForCausalLM
from dtorch.applications.llama import LlamaConfig, LlamaForCausalLM

NAMES = ("dp", "tp", "pp", "ulysess_cp", "ring_cp", "ep")
TINY = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=128, tie_word_embeddings=True, eos_token_id=None,
            initializer_range=0.2)  # wider than 0.02, so that the greedy tokens vary


def mesh_dims(text: str) -> tuple:
    """``dp=2,tp=2,pp=2`` -> (("dp", "tp", "pp"), (2, 2, 2))."""
    names, sizes = [], []
    for part in text.split(","):
        name, _, size = part.partition("=")
        name = name.strip()
        if name not in NAMES or not size.strip().isdigit() or int(size) < 1:
            raise SystemExit(f"--mesh: expected NAME=SIZE with NAME one of {NAMES}, got {part!r}")
        names.append(name)
        sizes.append(int(size))
    return tuple(names), tuple(sizes)


def parse_mesh(text: str, device: str) -> dtorch.DeviceMesh:
    """``dp=2,tp=2,pp=2`` -> an init_device_mesh with those names and sizes."""
    names, sizes = mesh_dims(text)
    return dtorch.init_device_mesh(device, sizes, mesh_dim_names=names)


def build(args: argparse.Namespace, mesh: dtorch.DeviceMesh) -> LlamaForCausalLM:
    if args.model:
        return AutoModelForCausalLM.from_pretrained(args.model, device_mesh=mesh)
    dtorch.manual_seed(args.seed)
    return LlamaForCausalLM(LlamaConfig(**TINY), device_mesh=mesh)


def prompt_ids(args: argparse.Namespace, batch: int):
    """The prompt batch, its attention mask (None: no padding) and the tokenizer (None without --prompt)."""
    tok = None
    if args.prompt:
        if not args.model:
            raise SystemExit("--prompt needs --model with a tokenizer; use --prompt-ids for the random model")
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(args.model, padding_side="left")
        if tok.pad_token is None:
            tok.pad_token = tok.eos_token
        enc = tok(args.prompt, return_tensors="pt", padding=True)
        if len(args.prompt) > 1:  # one row per prompt, left-padded
            return enc.input_ids, enc.attention_mask, tok
        ids = enc.input_ids
    else:
        ids = torch.tensor([[int(t) for t in args.prompt_ids.split(",")]])
    # Row i is the prompt rotated by i: the sequences dp shards differ.
    return torch.cat([ids.roll(i, dims=1) for i in range(batch)]), None, tok


def print_nodes() -> None:
    for n in dtorch.MainNode.nodes():
        print(f"worker node {n['index']} ({n['host']}, pid {n['pid']}): devices "
              f"{n['first_device_id']}..{n['first_device_id'] + n['cpu_devices'] - 1}")


def launched_cluster(args: argparse.Namespace, devices: int) -> None:
    """--cluster env: one cluster of the processes torchrun or srun started (rank 0 returns here as
    the main node; every other rank serves as a worker node and never returns)."""
    from dtorch._launch import detect

    world = detect(os.environ).world_size
    if world < 2 or devices % (world - 1):
        raise SystemExit(f"--cluster env: the mesh's {devices} devices do not split evenly over the "
                         f"{world - 1} worker rank(s) of {world} processes")
    launch = dtorch.cluster.init(cpu_devices=devices // (world - 1), timeout_second=args.node_timeout)
    print(f"main node ({launch.launcher} rank 0 of {world}) at {dtorch.MainNode.get_address()}")
    print_nodes()


def form_cluster(args: argparse.Namespace, devices: int) -> list:
    """Makes this process the main node and waits for --nodes worker nodes (started here with
    --spawn-nodes, each with devices / nodes CPU devices); returns the processes it started."""
    if args.spawn_nodes and not os.environ.get("DTORCH_CLUSTER_TOKEN"):
        os.environ["DTORCH_CLUSTER_TOKEN"] = secrets.token_hex(32)  # the nodes started here inherit it
    if not os.environ.get("DTORCH_CLUSTER_TOKEN"):
        raise SystemExit("--nodes: set DTORCH_CLUSTER_TOKEN to the secret the worker nodes are started with")
    if args.spawn_nodes and devices % args.nodes:
        raise SystemExit(f"--spawn-nodes: the mesh's {devices} devices do not split evenly over {args.nodes} nodes")
    dtorch.MainNode.set_address(args.main_node_address, cpu_devices=0)
    address = dtorch.MainNode.get_address()
    procs = []
    if args.spawn_nodes:
        from dtorch.node import executable

        for _ in range(args.nodes):
            procs.append(subprocess.Popen([executable(), f"--main-node-address={address}",
                                           f"--cpu-devices={devices // args.nodes}", "--quiet"]))
    else:
        print(f"main node at {address}: start {args.nodes} worker node(s) with\n"
              f"  dtorch-node --main-node-address=HOST:{address.rsplit(':', 1)[1]} --cpu-devices=N")
    dtorch.MainNode.wait_cluster_ready(args.nodes, timeout_second=args.node_timeout)
    print_nodes()
    return procs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", help="a Hugging Face llama, qwen2, qwen3 or mistral folder (default: a tiny random "
                    "Llama)")
    ap.add_argument("--mesh", default="dp=2,tp=2,pp=2", help="mesh dims and sizes (default dp=2,tp=2,pp=2)")
    ap.add_argument("--device", default="cpu", help="cpu (virtual devices) or cuda")
    ap.add_argument("--prompt", action="append", help="text (needs a tokenizer in --model); several: a left-padded "
                    "batch")
    ap.add_argument("--prompt-ids", default="3,17,99,5,64,1,9,8", help="comma-separated token ids")
    ap.add_argument("--batch", type=int, default=2, help="rows (the prompt rotated by 0, 1, ...; dp shards them; "
                    "several --prompt: one row each)")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--sample", action="store_true", help="sample (temperature 0.8, top-p 0.95) instead of greedy")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-check", action="store_true", help="skip the single-device comparison")
    ap.add_argument("--nodes", type=int, default=0, help="run on N worker nodes (this process: the main node)")
    ap.add_argument("--spawn-nodes", action="store_true", help="with --nodes: start them here on loopback")
    ap.add_argument("--main-node-address", default=None,
                    help="with --nodes: HOST:PORT to listen at (default: DTORCH_MAIN_NODE_ADDRESS, else loopback)")
    ap.add_argument("--node-timeout", type=float, default=600, help="seconds to wait for the worker nodes")
    ap.add_argument("--cluster", choices=["env"], default=None,
                    help="env: a cluster of the processes torchrun or srun started (rank 0 runs the example)")
    ap.add_argument("--kill-node-after", type=int, default=None, metavar="K",
                    help="with --nodes --spawn-nodes: SIGKILL worker node 0 after K new tokens, replace it, go on")
    args = ap.parse_args()
    if args.kill_node_after is not None and (not args.spawn_nodes or args.sample or args.prompt or args.model
                                             or not 0 < args.kill_node_after < args.max_new_tokens):
        raise SystemExit("--kill-node-after K: with --nodes N --spawn-nodes, the random model, greedy, "
                         "0 < K < --max-new-tokens")
    if args.cluster and (args.nodes or args.device != "cpu"):
        raise SystemExit("--cluster env: not with --nodes; this example forms clusters of CPU devices")
    if args.nodes < 0 or (args.spawn_nodes and not args.nodes):
        raise SystemExit("--spawn-nodes needs --nodes N (N >= 1)")
    if args.nodes and args.device != "cpu":
        raise SystemExit("--nodes: this example forms clusters of CPU devices (docs/cluster.md has CUDA)")

    if args.cluster:
        launched_cluster(args, math.prod(mesh_dims(args.mesh)[1]))
    procs = form_cluster(args, math.prod(mesh_dims(args.mesh)[1])) if args.nodes else []
    try:
        return run(args, procs)
    finally:
        if procs:  # what the exit would do: the worker nodes hear stop and exit 0
            dtorch.MainNode.shutdown()
            for p in procs:
                p.wait(timeout=60)


def decode(model: LlamaForCausalLM, ids: torch.Tensor, toks: list, max_new: int, after=None) -> torch.Tensor:
    """Greedy decoding of max_new tokens after ids [B, S], one step at a time, appending each new
    token to toks (the caller's list, so the tokens survive a failure); tokens already in toks
    (those generated before a recovery) are fed through the same steps instead of being chosen,
    so the cache and the logits are those of an uninterrupted run. after(n): called once the
    n-th new token has been read."""
    b, s = ids.shape
    cache = model.new_cache(b, s + max_new)
    logits = model(ids, cache=cache, start=0, logits_to_keep=1)
    for step in range(max_new):
        if step == len(toks):
            toks.append(logits[:, -1, :].argmax(dim=-1).to_torch().to(torch.int64))
            if after:
                after(len(toks))
        if step < max_new - 1:
            logits = model(toks[step][:, None], cache=cache, start=s + step, logits_to_keep=1)
    return torch.cat([ids, torch.stack(toks, dim=1)], dim=1)


def recover_demo(args: argparse.Namespace, mesh: dtorch.DeviceMesh, ids: torch.Tensor, procs: list) -> tuple:
    """--kill-node-after K: generation with worker node 0 SIGKILLed after K tokens, the node
    replaced and the model loaded again; returns (tokens, model)."""
    from dtorch.node import executable

    model, toks = build(args, mesh), []

    def kill(n):
        if n == args.kill_node_after:
            print(f"after {n} tokens: SIGKILL worker node 0 (pid {dtorch.MainNode.nodes()[0]['pid']})")
            os.kill(dtorch.MainNode.nodes()[0]["pid"], signal.SIGKILL)

    try:
        return decode(model, ids, toks, args.max_new_tokens, kill), model
    except dtorch.KernelError as e:
        print(f"read failed after {len(toks)} tokens: {str(e).splitlines()[0]}")
    deadline = time.monotonic() + args.node_timeout
    while dtorch.MainNode.nodes()[0]["state"] != "lost" and time.monotonic() < deadline:
        time.sleep(0.05)
    info = dtorch.MainNode.nodes()[0]
    procs.append(subprocess.Popen([executable(), f"--main-node-address={dtorch.MainNode.get_address()}",
                                   f"--cpu-devices={info['cpu_devices']}", "--quiet"]))
    dtorch.MainNode.wait_cluster_ready(args.nodes, timeout_second=args.node_timeout)
    new = dtorch.MainNode.nodes()[-1]["index"]
    got = dtorch.cluster.replace(0, new)
    print(f"worker node {new} replaces worker node 0: {got['recomputed']} values recomputed, {got['lost']} to "
          f"reload; mesh now {mesh.mesh.flatten().tolist()}")
    del model
    model = build(args, mesh)  # the lost shards (here the whole model) loaded again, on the same mesh
    return decode(model, ids, toks, args.max_new_tokens), model


def run(args: argparse.Namespace, procs: list) -> int:
    mesh = parse_mesh(args.mesh, args.device)
    ids, mask, tok = prompt_ids(args, args.batch)
    kw = dict(do_sample=args.sample, temperature=0.8, top_p=0.95, seed=args.seed) if args.sample else {}
    if mask is not None:
        kw["attention_mask"] = mask

    t0 = time.perf_counter()
    if args.kill_node_after is not None:
        out, model = recover_demo(args, mesh, ids, procs)
    else:
        model = build(args, mesh)
        out = model.generate(ids, max_new_tokens=args.max_new_tokens, **kw)
    dt = time.perf_counter() - t0
    print(f"{type(model).__name__}, mesh {dict(zip(mesh.dim_names, mesh.shape))}: {out.shape[1] - ids.shape[1]} new "
          f"tokens in {dt:.2f} s")
    for row in out.tolist():
        print("  ids:", row)
        if tok is not None:
            print("  text:", tok.decode(row, skip_special_tokens=True))
    if args.no_check:
        return 0
    one = build(args, dtorch.DeviceMesh(args.device if args.device != "cuda" else "cuda:0"))
    ref = one.generate(ids, max_new_tokens=args.max_new_tokens, **kw)
    same = torch.equal(out, ref)
    print(f"matches single-device: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
