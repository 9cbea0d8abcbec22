/*
 * dtorch-node: a worker node of a dtorch cluster (docs/cluster.md).
 *
 *     DTORCH_CLUSTER_TOKEN=secret dtorch-node --main-node-address=HOST:PORT [--cpu-devices=N]
 *                                             [--cuda-devices=N|all|I,J,...]
 *
 * Without --main-node-address, DTORCH_MAIN_NODE_ADDRESS is the main node's
 * address. Exit status: 0 when the main node said stop or went away, 1 when refused
 * or unable to register, 2 for bad arguments. Flag parsing only; the node
 * is dt_node_run (src/net/node.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtorch/dtorch_cluster.h"

static const char usage[] =
    "usage: dtorch-node --main-node-address=HOST:PORT [--cpu-devices=N] [--cuda-devices=N|all|I,J,...]\n"
    "                   [--token=T] [--connect-timeout=SECONDS] [--quiet]\n"
    "Joins the dtorch cluster whose main node listens at HOST:PORT and serves until it says stop\n"
    "or goes away. The shared secret comes from --token or DTORCH_CLUSTER_TOKEN; the address\n"
    "from DTORCH_MAIN_NODE_ADDRESS when the flag is absent. --cuda-devices offers the first N\n"
    "GPUs, all of them, or the GPUs of the listed indices (as CUDA_VISIBLE_DEVICES; a single\n"
    "index is written with a trailing comma: 3,); default none.\n";

/* The value of flag `name` at argv[*i] ("--name=V" or "--name V"), else NULL. */
static const char *flag(int argc, char **argv, int *i, const char *name) {
    size_t n = strlen(name);
    const char *a = argv[*i];
    if (strncmp(a, name, n) != 0)
        return NULL;
    if (a[n] == '=')
        return a + n + 1;
    if (a[n] == 0 && *i + 1 < argc)
        return argv[++*i];
    return NULL;
}

static int number(const char *s, const char *what, int *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < 0 || v > 1000000) {
        fprintf(stderr, "dtorch-node: %s must be a non-negative integer, not '%s'\n%s", what, s, usage);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* --cuda-devices: a count (N), "all", or a comma-separated list of GPU
 * indices, which becomes CUDA_VISIBLE_DEVICES (composed with one already
 * set: the indices are positions in it, as for any CUDA program) before
 * anything initialises CUDA; the count is then the list's length. -1 for a
 * bad value (the message printed). */
static int cuda_devices(const char *v, int *out) {
    if (!strcmp(v, "all")) {
        *out = DT_NODE_CUDA_ALL;
        return 0;
    }
    if (!strchr(v, ','))
        return number(v, "--cuda-devices", out);
    const char *outer = getenv("CUDA_VISIBLE_DEVICES");
    char visible[4096] = "";
    size_t len = 0;
    int n = 0, idx[4096];
    for (const char *p = v; *p;) {
        char *end;
        long i = strtol(p, &end, 10);
        int dup = 0;
        for (int k = 0; k < n; k++)
            dup |= idx[k] == i;
        if (end == p || *p == '-' || *p == '+' || i < 0 || i > 4095 || dup || (*end && *end != ',') ||
            n == 4096) {
            fprintf(stderr,
                    "dtorch-node: --cuda-devices takes a count, 'all' or distinct GPU indices separated by "
                    "commas, not '%s'\n%s",
                    v, usage);
            return -1;
        }
        idx[n++] = (int)i;
        const char *name = NULL; /* the i-th entry of an outer CUDA_VISIBLE_DEVICES */
        size_t nl = 0;
        char num[16];
        if (outer) {
            const char *q = outer;
            for (long k = 0; k < i && q; k++)
                q = strchr(q, ',') ? strchr(q, ',') + 1 : NULL;
            if (!q || !*q || *q == ',') {
                fprintf(stderr,
                        "dtorch-node: --cuda-devices=%s: GPU index %ld is past CUDA_VISIBLE_DEVICES=%s\n", v,
                        i, outer);
                return -1;
            }
            name = q;
            nl = strcspn(q, ",");
        } else {
            nl = (size_t)snprintf(num, sizeof num, "%ld", i);
            name = num;
        }
        if (len + nl + 2 > sizeof visible) {
            fprintf(stderr, "dtorch-node: --cuda-devices: too long a list\n");
            return -1;
        }
        if (len)
            visible[len++] = ',';
        memcpy(visible + len, name, nl);
        len += nl;
        visible[len] = 0;
        p = *end == ',' ? end + 1 : end;
    }
    if (!n) {
        fprintf(stderr, "dtorch-node: --cuda-devices: an empty list\n%s", usage);
        return -1;
    }
    setenv("CUDA_VISIBLE_DEVICES", visible, 1);
    *out = n;
    return 0;
}

int main(int argc, char **argv) {
    dt_node_options o = {0};
    for (int i = 1; i < argc; i++) {
        const char *v;
        int secs;
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            fputs(usage, stdout);
            return 0;
        } else if (!strcmp(argv[i], "--version")) {
            printf("dtorch-node %s\n", dt_version());
            return 0;
        } else if (!strcmp(argv[i], "--quiet")) {
            o.quiet = 1;
        } else if ((v = flag(argc, argv, &i, "--main-node-address"))) {
            o.main_address = v;
        } else if ((v = flag(argc, argv, &i, "--token"))) {
            o.token = v;
        } else if ((v = flag(argc, argv, &i, "--cpu-devices"))) {
            if (number(v, "--cpu-devices", &o.cpu_devices) != 0)
                return 2;
        } else if ((v = flag(argc, argv, &i, "--connect-timeout"))) {
            if (number(v, "--connect-timeout", &secs) != 0)
                return 2;
            o.connect_timeout_ms = secs * 1000;
        } else if ((v = flag(argc, argv, &i, "--cuda-devices"))) {
            if (cuda_devices(v, &o.cuda_devices) != 0)
                return 2;
        } else if ((v = flag(argc, argv, &i, "--debug-wire-version"))) {
            /* Tests only (dt_debug_wire_version): speak another wire
             * version, as a dtorch-node of another release would. */
            int version;
            if (number(v, "--debug-wire-version", &version) != 0 || dt_debug_wire_version(version) != DT_OK)
                return 2;
        } else if ((v = flag(argc, argv, &i, "--debug-clock-skew-ms"))) {
            /* Tests only (dt_debug_node_clock_skew): heartbeats read the
             * clock this many ms ahead, as another host's would. */
            int ms;
            if (number(v, "--debug-clock-skew-ms", &ms) != 0)
                return 2;
            dt_debug_node_clock_skew((int64_t)ms * 1000000);
        } else if ((v = flag(argc, argv, &i, "--debug-fake-gpus"))) {
            /* Tests only (dt_debug_fake_cuda): N stand-in GPUs served by
             * the CPU kernels, for the CUDA-on-node tests of a machine
             * without a GPU. Not in the usage text. */
            int gpus;
            if (number(v, "--debug-fake-gpus", &gpus) != 0)
                return 2;
            if (dt_debug_fake_cuda(gpus) != DT_OK) {
                fprintf(stderr, "dtorch-node: --debug-fake-gpus: %s\n", dt_last_error());
                return 2;
            }
        } else {
            fprintf(stderr, "dtorch-node: unknown argument '%s'\n%s", argv[i], usage);
            return 2;
        }
    }
    if (!o.main_address) { /* the original's variable, as GlobalOption reads it */
        const char *env = getenv("DTORCH_MAIN_NODE_ADDRESS");
        o.main_address = env && *env ? env : NULL;
    }
    if (!o.main_address) {
        fprintf(stderr, "dtorch-node: --main-node-address=HOST:PORT is required\n%s", usage);
        return 2;
    }
    return dt_node_run(&o);
}
