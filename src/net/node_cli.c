/*
 * dtorch-node: a worker node of a dtorch cluster (docs/cluster.md).
 *
 *     DTORCH_CLUSTER_TOKEN=secret dtorch-node --main-node-address=HOST:PORT [--cpu-devices=N]
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
    "usage: dtorch-node --main-node-address=HOST:PORT [--cpu-devices=N] [--token=T]\n"
    "                   [--connect-timeout=SECONDS] [--quiet]\n"
    "Joins the dtorch cluster whose main node listens at HOST:PORT and serves until it says stop\n"
    "or goes away. The shared secret comes from --token or DTORCH_CLUSTER_TOKEN; the address\n"
    "from DTORCH_MAIN_NODE_ADDRESS when the flag is absent.\n";

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
            fprintf(stderr,
                    "dtorch-node: --cuda-devices: CUDA devices on worker nodes are not supported yet\n");
            return 2;
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
