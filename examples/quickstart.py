"""dtorch quickstart: a distributed tensor written like a single-device one.

Run from a fresh clone after the build (tools/demo.sh does both):

    .venv/bin/python examples/quickstart.py
"""

import dtorch

shape = (4, 3)
# Two virtual CPU devices, each with its own worker thread.
mesh = dtorch.DeviceMesh("cpu", [0, 1])
# Split tensor dim 0 across mesh dim 0: device 0 holds rows 0-1, device 1 rows 2-3.
placements = [dtorch.Shard(0)]
x = dtorch.rand(shape, device_mesh=mesh, placements=placements)
print(f"{x=}")

# Ops are recorded and return at once; each device works on its own rows.
# Summing over the sharded dim leaves a pending sum on each device: y is Partial().
y = (x * 2 + 1).sum(dim=0)
print(f"{y=}")

# Partial -> Replicate is an all-reduce: every device now holds the full sum.
z = y.redistribute(placements=[dtorch.Replicate()])
print(f"{z=}")

# Printing waited for the values; to_torch() gives a plain torch.Tensor copy.
expected = (x.to_torch() * 2 + 1).sum(dim=0)
print("matches eager PyTorch:", bool((z.to_torch() - expected).abs().max() <= 1e-5))
