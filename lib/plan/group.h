/*
 * group.h - the group plan: from a topology, the side of it that runs on
 * this host and a model shape, every member a group has (its name, role,
 * coordinates, control endpoint and port, engine socket, room table and
 * pool file) in start order. The one owner of the group's naming, port and
 * topology rules (issue 31): kv-plan prints the plan as the run directory's
 * endpoints file, kv-up starts and supervises what it lists, and everyone
 * else reads that file back through runinfo (lib/plan/runinfo.h). Pure: no
 * sockets, no files.
 *
 * The plan, for side both (prefill only: the first three kinds; decode
 * only: a line for each prefill instance's bootstrap it was given, named
 * bootstrap, bootstrap1, ..., none when rooms name their instance; then
 * the last two):
 *   bootstrap   kv-bootstrap        DIR/boot.sock     or tcp://A:N
 *   p<i>        kv-sender, rank i   DIR/p<i>.peer     or tcp://A:N+1+i
 *   d<i>        kv-receiver, rank i DIR/d<i>.peer     or tcp://A:N+512+i
 *   hb<i>       kv-heartbeat of d<i>'s table
 *   hbp<i>      kv-heartbeat of p<i>'s table
 * where i = pp * tp_size + tp, A is the advertised address and N the port
 * base; engine sockets are DIR/<name>.eng (engines are on the member's
 * host), tables and pools /dev/shm/kvwire.<runid>.<name>.{rooms,pool}.
 */
#ifndef KVW_GROUP_H
#define KVW_GROUP_H

#include <stddef.h>
#include <stdint.h>

#include "runinfo.h"
#include "shape.h"

enum group_side {
	GROUP_BOTH = 0,    /* one host: every member */
	GROUP_PREFILL = 1, /* kv-bootstrap, kv-senders and their heartbeats */
	GROUP_DECODE = 2,  /* kv-receivers and their heartbeats */
};

#define GROUP_MAX_SIZE 64u      /* TP size, PP stages: each 1..64 */
#define GROUP_DECODE_PORTS 512u /* decode rank i at port base + 512 + i */
#define GROUP_RUNID_MAX 64u
#define GROUP_POOL_DIR_MAX 128u
#define GROUP_MAX_BOOTSTRAPS 64u /* prefill instances a decode side names */

struct group_spec {
	unsigned side;            /* enum group_side */
	uint32_t ptp, ppp;        /* prefill TP size and PP stages */
	uint32_t dtp, dpp;        /* decode TP size and PP stages */
	const char *dir;          /* the run directory, an absolute path */
	const char *runid;        /* names the /dev/shm files: [A-Za-z0-9_-],
				   * "CLUSTER+..." in a cluster (kv-up
				   * --cluster, lib/roles/sender/sender_authz.c) */
	const char *pool_dir;     /* where the pools go (the tables stay in
				   * /dev/shm): NULL for /dev/shm; an
				   * absolute path, the run directory's
				   * alphabet (kv-up --pool-dir, e.g. a tmpfs
				   * mounted with huge=within_size) */
	const char *advertise;    /* numeric IP: control sockets on tcp://
				   * there; NULL or "": ipc:// in dir */
	uint32_t port_base;       /* with advertise: 1..64000 */
	const char *const *bootstraps; /* GROUP_DECODE: prefill instances'
					* kv-bootstraps, tcp://HOST:PORT */
	uint32_t nboot;                /* 0..GROUP_MAX_BOOTSTRAPS (decode) */
	struct shape shape;
};

/* Checks the spec (sizes, the decode PP rule, TP sizes that divide one
 * another, kv heads that split over each TP, the run directory's path, the
 * address, ports and bootstrap endpoint, every ipc:// path within
 * sun_path) and fills out[0..*n) with the members in start order.
 * Returns 0; KVW_EINVAL with the reason in err (the message kv-up prints);
 * KVW_ENOMEM when cap is too small (*n = needed). */
int group_plan(const struct group_spec *g, struct runinfo_member *out,
	       uint32_t cap, uint32_t *n, char *err, size_t errlen);

/* Members in a group of spec g (the cap group_plan needs); 0 when the
 * sizes are out of range. */
uint32_t group_size(const struct group_spec *g);

/* Parses a side's name ("both", "prefill", "decode") into *side. Returns 0
 * or KVW_EINVAL. */
int group_side_parse(const char *name, unsigned *side);

#endif
