#!/usr/bin/env bash
# Fetches, here, the ZeroMQ library the GPU machine's image lacks, so that
# tools/gpu_check.sh can build dtorch with clusters there (its cluster_cuda
# step: CUDA devices on worker nodes, issue 13). It copies this machine's
# libzmq.so.5 (Debian's libzmq5), the libraries it needs beyond the C and
# C++ runtimes (what `ldd` lists: libsodium, libpgm, libnorm, libbsd, libmd,
# the Kerberos ones) and zmq.h (libzmq3-dev) into .zmq/lib and .zmq/include
# at the repository root: git ignores it (.gitignore), a device call names it
# in `carry`, and gpu_check.sh configures with it and puts .zmq/lib on
# LD_LIBRARY_PATH (never into the machine's /). Built on Debian 12 (glibc
# 2.36): it runs where the glibc is as new or newer (the H200 image's
# Ubuntu is).
#
#   tools/gpu_zmq.sh && <device run, carry [".zmq"]>: tools/gpu_check.sh
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
lib=/usr/lib/x86_64-linux-gnu/libzmq.so.5
[ -e "$lib" ] && [ -e /usr/include/zmq.h ] || {
    echo "gpu_zmq: needs $lib and /usr/include/zmq.h here (apt-get install libzmq3-dev)" >&2
    exit 1
}
rm -rf .zmq
mkdir -p .zmq/lib .zmq/include
cp -L "$lib" .zmq/lib/
# Every library ldd resolves, but the C and C++ runtimes the image has.
ldd "$lib" | awk '$3 ~ /^\// {print $3}' | while read -r dep; do
    case $(basename "$dep") in
    libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | librt.so.* | libresolv.so.* | ld-linux* | \
        libstdc++.so.* | libgcc_s.so.*) ;;
    *) cp -L "$dep" .zmq/lib/ ;;
    esac
done
ln -s libzmq.so.5 .zmq/lib/libzmq.so
cp /usr/include/zmq.h /usr/include/zmq_utils.h .zmq/include/ 2>/dev/null || cp /usr/include/zmq.h .zmq/include/
ls -la .zmq/lib .zmq/include
du -sh .zmq
