/*
 * bench_impl.h - what kv-bench's event loop (bench.c), its aborts and
 * canaries (bench_abort.c) and its two-host roles (bench_role.c) share:
 * the simulated engines, the rooms in flight and the run. Private to
 * cmd/kv-bench.
 */
#ifndef KVBENCH_BENCH_IMPL_H
#define KVBENCH_BENCH_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "bench.h"
#include "bench_hops.h"
#include "api.h"
#include "plan/runinfo.h"
#include "table/rtab.h"

#define MAX_RANKS 64u
#define MAX_BUFS 4096u
#define MAX_INSTANCES (1u + BENCH_MAX_PEERS)

struct eng {
	const struct runinfo_member *m;
	struct kvw_engine *e;
	struct rtab *tab;  /* its control's table, read-only (--hops) */
	struct kvw_buf *bufs;
	struct bench_geom g;
	uint64_t down_since; /* its control process was last seen missing
			      * from then on; 0: running */
};

/* How often the group is looked at, and how long a control process may be
 * missing (a supervisor restarts one in about a second) before the bench
 * gives the group up. */
#define GROUP_CHECK_NS 500000000ull
#define GROUP_DOWN_NS 10000000000ull

/* Per-rank progress flags of one room. */
#define F_SENT 0x1u   /* BEGIN accepted */
#define F_READY 0x2u  /* prefill: room WaitingForInput or further */
#define F_DONE 0x4u   /* prefill: last chunk sent / decode: Success */
#define F_FAILED 0x8u /* the rank's room is Failed (or vanished) */
#define F_CLEAR 0x10u /* CLEAR accepted */
#define F_QUIET 0x80u /* prefill: no worker reads the room's source pages */
#define F_ABORT 0x20u /* decode: RECV_ABORT accepted */
#define F_REL 0x40u   /* decode: the aborted room is releasable (or Success) */

enum { R_IDLE, R_RUN, R_CLEAR };
enum { O_NONE, O_SUCCESS, O_FAILED, O_STUCK, O_CORRUPT, O_ABORTED,
       O_ABORT_STUCK };
/* When an aborted room is aborted (--abort-frac): right after its
 * RECV_BEGINs (before any SEND_BEGIN), after some of its chunks, or once
 * its last chunk went out and the prefill is transferring (copies in
 * flight), or already done. */
enum { AB_NONE, AB_BEFORE, AB_BETWEEN, AB_COPYING };
#define CANARY_SALT 0x63616e6172795f5fULL /* canary pattern key: id ^ salt */

/* One instance: a group's prefill ranks and decode ranks (either may be
 * none), its bootstrap, and the page allocators of its pools. A room runs
 * from a prefill instance to a decode instance: the group of --run-dir,
 * and with --peers every group named there (xPyD). */
struct inst {
	struct runinfo *own;     /* a --peers group's endpoints (freed) */
	const char *dir;         /* its run directory, for the summary */
	const char *boot;
	struct eng p[MAX_RANKS], d[MAX_RANKS];
	uint32_t np, nd;
	struct bench_alloc pa, da, paux, daux;
	uint64_t room_bytes;     /* payload a room lands in its decode pools */
};

struct room {
	int phase, outcome;
	struct inst *pi, *di; /* its prefill and decode instance */
	uint64_t id, deadline, t_begin, t_done;
	uint32_t *src, *dst, src_aux, dst_aux;
	uint8_t *pf, *df; /* flags per prefill / decode rank */
	uint64_t *pe, *de; /* control epoch when that rank took the BEGIN */
	uint32_t *cur;    /* prefill: pages sent so far */
	uint8_t abort_at, aborted; /* AB_*; RECV_ABORT went to a decode rank */
	uint32_t abort_pages;      /* AB_BETWEEN: pages sent before the abort */
	uint8_t peer_sent;         /* --role decode: the peer was told to send */
	uint8_t src_kept;          /* aborted: a prefill rank never showed its
				    * workers done, the source pages stay out */
};

/* Destination pages of an aborted room after it became releasable: they
 * hold a canary pattern that must never change (a byte landing after the
 * release would change it). */
struct canary {
	struct inst *di; /* whose decode pool the pages are */
	uint64_t key;
	uint32_t *dst, dst_aux;
};

struct run {
	const struct bench_config *c;
	struct inst in[MAX_INSTANCES];
	uint32_t ninst;
	uint32_t maxp, maxd;       /* the most prefill / decode ranks of one
				    * instance: the rooms' flag arrays */
	uint32_t pin[MAX_INSTANCES], din[MAX_INSTANCES]; /* instances with
				    * prefill / decode ranks, in order */
	uint32_t npin, ndin;
	uint64_t routed;           /* rooms given a pair so far */
	uint32_t *pairs;           /* rooms per (prefill, decode) instance */
	uint32_t *pairs_ok;        /* of those, rooms that succeeded */
	struct room *rooms;
	uint32_t nslots;           /* rooms[]: concurrency (--role prefill:
				    * twice that, for rooms still clearing) */
	struct bpeer *peer;        /* --role: the other host's kv-bench */
	uint64_t rng, arng;
	struct canary *can;
	uint32_t ncan, capcan;
	struct bench_result *res;
	uint32_t stuck_told;       /* rooms reported stuck on stderr */
	char *err;
	size_t errlen;
};

/* bench_inst.c: the instances. bench_setup opens every instance's
 * engines (--run-dir's group from ri, then --peers) and the rooms' slots:
 * 0, or < 0 with r->err; bench_teardown closes what it opened. */
int bench_setup(struct run *r, const struct runinfo *ri);
void bench_teardown(struct run *r);
/* Sets room x's prefill and decode instance (--route). */
void bench_route(struct run *r, struct room *x);
/* --peers: the rooms and successes of each pair, on stderr. */
void bench_tell_routes(const struct run *r);

/* bench.c: the steps of one room, shared with bench_role.c. */
int bench_sent(struct run *r, struct eng *x, int rc);
/* Takes pages and fills the source; id 0 draws a new room id. 1 started,
 * 0 the pools are exhausted. */
int bench_start_room(struct run *r, struct room *x, uint64_t now,
		     uint64_t id);
int bench_step_prefill(struct run *r, struct room *x, uint32_t k);
int bench_step_clear(struct run *r, struct room *x);
/* 1 once prefill rank k ended room x and no worker reads its source pages. */
int bench_prefill_ended(struct room *x, uint32_t k);
void bench_finish(struct run *r, struct room *x, struct bench_result *res);
void bench_nap(uint64_t idle_ns);
int bench_group_check(struct run *r, uint64_t now);

/* bench_role.c: --role, the link to the other host's kv-bench. */
struct bpeer;
/* Opens the link (prefill binds cfg->peer, decode dials it) and waits for
 * the other side's hello with the same workload: 0, or < 0 with r->err. */
int bench_peer_open(struct run *r);
/* Decode: tells the prefill side to send room x (1 told, 0 retry, < 0). */
int bench_peer_begin(struct run *r, struct room *x);
/* Decode: tells it room x is over, with its outcome (1 told or no peer,
 * 0 retry, < 0). */
int bench_peer_end(struct run *r, struct room *x);
/* Decode: reads the prefill side's messages, keeps the link alive: 0, or
 * < 0 with r->err (the peer went silent). */
int bench_peer_poll(struct run *r, uint64_t now);
/* Decode: sends the summary (res); either side with res NULL (it stopped
 * on an error): sends why. Then closes. */
void bench_peer_close(struct run *r, const struct bench_result *res);
/* Prefill: the whole run, driven by the decode side's messages. */
int bench_role_prefill(struct run *r, struct bench_result *res);

/* bench_abort.c: --abort-frac. */
void bench_plan_abort(struct run *r, struct room *x);
int bench_abort_due(struct room *x);
int bench_step_aborted(struct run *r, struct room *x, uint64_t now);
void bench_canary_flush(struct run *r);

#endif
