/*
 * netns.h - kv-bench demo --netns: two hosts played by two network
 * namespaces that kv-bench makes and removes (a veth pair, 10.202.0.1/30
 * in A and .2 in B, used only inside them), a whole group split across
 * them (kv-up --role prefill in A, --role decode in B, over tcp with the
 * group's keys), and the raw stream between them (bench_stream.h) as the
 * limit. kv-bench itself stays in its own namespace and drives both
 * sides' engines through the run directories' ipc sockets (files, not
 * network): every network connection has both ends inside A and B.
 * Needs root and iproute2's `ip`.
 */
#ifndef KVBENCH_NETNS_H
#define KVBENCH_NETNS_H

#include <stddef.h>

#include "spawn.h"

#define NETNS_ADDR_A "10.202.0.1" /* the prefill host */
#define NETNS_ADDR_B "10.202.0.2" /* the decode host */

struct bench_netns {
	char ns[2][32];   /* A (prefill), B (decode); "" when not made */
	char veth[2][16]; /* the link's end in each */
	char dir[256];    /* run directory: keys, endpoints, p/ and d/ */
	char kv_up[4096];
	int up[2];        /* that side's kv-up --daemon was run */
	int keep;         /* a side failed once started: its logs stay */
};

/* Makes the two namespaces and their link, and waits (bounded) until the
 * link is up. 0, or -1 with err (what failed; nothing left behind). */
int netns_make(struct bench_netns *n, char *err, size_t errlen);

/* Starts the split group: keys (kv-keygen beside kv_up), kv-up --daemon
 * --role prefill in A and --role decode in B, each with args (NULL-ended:
 * the shape and transport flags), and DIR/endpoints naming both sides
 * for one kv-bench. 0, or -1 with err (the group stopped, its logs kept
 * in the directory named there). */
int netns_group_start(struct bench_netns *n, const char *kv_up,
		      char *const *args, char *err, size_t errlen);

/* Stops what netns_group_start started, removes the run directory (not
 * when a side failed after it started: its logs) and the namespaces.
 * Accepts a struct never made (all zero). */
void netns_free(struct bench_netns *n);

/* Runs the calling thread in namespace i (0: A, 1: B) until netns_leave:
 * sockets made in between belong to it. 0, or -1 (errno). */
int netns_enter(const struct bench_netns *n, int i, int *saved);
void netns_leave(int saved);

#endif
