#!/usr/bin/env bash
# Fetches, here (where pip reaches PyPI), the wheels the GPU machine's image
# lacks for tools/gpu_check.sh, into .whl/ at the repository root, the folder
# the device machine's README names: git ignores it (.gitignore: wheels are
# never committed), a device call names it in `carry`, and gpu_check.sh installs
# what it holds into a private folder on PYTHONPATH. Today: diffusers (the
# version requirements.txt pins; pure Python, ~6 MB; test_sd3 and the SD3
# application need it). Its requirements are on the image already
# (importlib_metadata only below Python 3.8).
#
#   tools/gpu_wheels.sh && <device run, carry [".whl"]>: tools/gpu_check.sh
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p .whl
for name in diffusers; do
    pin=$(grep -iE "^$name==" requirements.txt)
    rm -f .whl/"$name"-*.whl
    # The device's python3 is CPython 3.12 on x86-64 Linux.
    python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "$pin"
done
ls -la .whl
du -sh .whl
