/*
 * This process's CUDA devices as a cluster counts them (transport.h): the
 * main node numbers its own first, a worker node registers its own. Both
 * count what the default backend's CUDA variant sees ("torch_cuda", or the
 * tests' stand-in), with device virtualisation applied as in this process
 * (DTORCH_DTENSOR_IN_SAME_DEVICE). Any thread; pure but for getenv and the
 * backend's count.
 */
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda_map.h"
#include "comm/comm.h"
#include "net/transport.h"

int64_t dt__net_cuda_count(char *why, size_t whylen) {
    const dt__backend *be = dt__backend_find(NULL);
    const dt__backend *cu = dt__backend_for_device(be, DT_DEVICE_CUDA);
    int64_t n = cu->device_count ? cu->device_count(DT_DEVICE_CUDA) : 0;
    if (n < 0)
        n = 0;
    if (why && whylen) {
        char name[64], env[256];
        snprintf(name, sizeof name, "%s_cuda", be->name);
        why[0] = 0;
        if (n > 0)
            return n;
        if (dt__cuda_map_env_error(env, sizeof env))
            snprintf(why, whylen, "%s", env);
        else if (!dt__backend_find(name))
            snprintf(why, whylen,
                     "this dtorch was built without a CUDA backend (no '%s': built against a CPU torch, "
                     "or without the CUDA toolkit)",
                     name);
        else
            snprintf(why, whylen, "the '%s' backend sees no GPU here (torch.cuda.is_available() is False)",
                     name);
    }
    return n;
}

uint32_t dt__net_cuda_flags(void) {
    dt__cuda_map m;
    char err[256];
    uint32_t f = 0;
    if (dt__cuda_map_from_env(1, &m, err, sizeof err) == 0 && m.virtual_on)
        f |= DT__WIRE_REG_CUDA_VIRTUAL;
    if (dt__comm_nccl_usable())
        f |= DT__WIRE_REG_NCCL;
    return f;
}
