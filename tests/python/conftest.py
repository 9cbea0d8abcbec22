"""pytest setup. dtorch is imported as installed in the running environment:
the project's .venv (tools/setup.sh puts a .pth file there pointing at this
checkout's python/ directory) or a `pip install .` of the package."""

import os

# DTORCH_TEST_DEVICE=cuda (tools/gpu_check.sh, on a machine with a GPU) runs the suite on cuda
# meshes: every DeviceMesh("cpu", ...) a test makes becomes a cuda one (run it with
# DTORCH_DTENSOR_IN_SAME_DEVICE=1 so one GPU holds the logical devices) and torch's default
# device becomes cuda, so the eager references run on the GPU too. Not yet run (docs/cuda.md).
if os.environ.get("DTORCH_TEST_DEVICE") == "cuda":
    import torch

    from dtorch.distributed_spec import DeviceMesh

    torch.set_default_device("cuda")
    _mesh_init = DeviceMesh.__init__

    def _cuda_mesh_init(self, device_type, mesh=None, mesh_dim_names=None):
        if isinstance(device_type, str) and (device_type == "cpu" or device_type.startswith("cpu:")):
            device_type = "cuda" + device_type[3:]
        _mesh_init(self, device_type, mesh, mesh_dim_names)

    DeviceMesh.__init__ = _cuda_mesh_init
