"""Greedy decode of bench/scale.py's tiny Llama (S2), for counting the controller's instructions.

Loads the model on a 1-D tp mesh, decodes 2 tokens (warm-up), then `n`, and prints the tokens. Run it
twice under callgrind with two `n` and divide the difference by theirs (docs/benchmarks.md):

    valgrind --tool=callgrind --toggle-collect=dt__controller_main \\
        python bench/decode_ctl.py --tp 8 --n 10      # and --n 2
"""

import argparse
import os
import sys
import tempfile

import torch

import dtorch
from dtorch import DeviceMesh
from dtorch.applications.llama import LlamaForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama import hf_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tp", type=int, default=8)
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=128)
    args = ap.parse_args()
    ref = hf_model(args, heads=8, kv_heads=8)
    prompt = torch.randint(0, args.vocab, (1, 8), generator=torch.Generator().manual_seed(1))
    with tempfile.TemporaryDirectory() as d:
        ref.save_pretrained(d)
        mesh = DeviceMesh("cpu", list(range(args.tp)), mesh_dim_names=("tp",))
        model = LlamaForCausalLM.from_pretrained(d, device_mesh=mesh)
        model.generate(prompt, max_new_tokens=2, eos_token_id=[])
        print(model.generate(prompt, max_new_tokens=args.n, eos_token_id=[]).tolist())
        dtorch.synchronize()


if __name__ == "__main__":
    main()
