/*
 * bench.h - kv-bench's logic: simulated prefill and decode engines that
 * drive a running kvwire group through the engine API (api.h), plus the
 * pieces that make its results trustworthy: a verifiable data pattern that
 * depends only on what a byte *means* (room, layer, role, page of the room,
 * token, global head, byte of the head) and not on which rank holds it, so a
 * decode rank can check pages that arrived through a TP head slice or from
 * several PP stages; and a page allocator per engine instance.
 *
 * bench_pattern.c: pattern fill/verify and the allocator (pure, no I/O).
 * bench.c: the event loop (bench_run); bench_abort.c: --abort-frac;
 * bench_role.c: one side of a group split across two hosts (--role).
 */
#ifndef KVW_BENCH_H
#define KVW_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"
#include "plan/shape.h"

struct runinfo;

/* ---- pattern --------------------------------------------------------- */

/* How one rank stores KV: its layout (from shape_layout) and where its
 * heads sit among the model's heads. */
struct bench_geom {
	const struct kvw_buf *bufs; /* the rank's layout; not owned */
	uint32_t nbufs;
	uint32_t page_tokens;
	uint32_t rank_heads;   /* heads per token slot of this rank */
	uint32_t total_heads;  /* heads of the model (1 for MLA) */
	uint32_t head_bytes;
	uint32_t tp, tp_rank;  /* this rank's TP size and TP coordinate */
	struct bgpu *gpu;      /* --transport cuda: the pool's device mirror
				* (bench_gpu.h), which bench_fill pushes to
				* and bench_verify pulls from; else NULL */
};

/* Fills *g for rank c of topology t under shape s (bufs/nbufs as given). */
void bench_geom_init(struct bench_geom *g, const struct shape *s,
		     const struct kvw_topo *t, const struct kvw_coord *c,
		     const struct kvw_buf *bufs, uint32_t nbufs);

/* The model head held in local head slot h of this rank. */
uint32_t bench_global_head(const struct bench_geom *g, uint32_t h);

/* Writes the pattern of room `room` into pool `base`: page i of the room is
 * pages[i] in every K/V/KV buffer that is not a draft layer, and the aux
 * slot goes to `aux_slot` of every AUX buffer. Indices must be inside the
 * buffers (the caller allocated them). */
void bench_fill(uint8_t *base, const struct bench_geom *g, uint64_t room,
		const uint32_t *pages, uint32_t n, uint32_t aux_slot);

/* Checks the same bytes bench_fill would write at these places; returns
 * the number of bytes that differ (0 = intact). */
uint64_t bench_verify(const uint8_t *base, const struct bench_geom *g,
		      uint64_t room, const uint32_t *pages, uint32_t n,
		      uint32_t aux_slot);

/* Bytes bench_fill writes for n pages (what a receiver gets per room). */
uint64_t bench_room_bytes(const struct bench_geom *g, uint32_t n);

/* ---- page allocator --------------------------------------------------- */

struct bench_alloc {
	uint32_t *free; /* stack of free indices */
	uint32_t n;     /* how many are free */
	uint32_t cap;   /* indices 0..cap-1 */
};

/* All of 0..count-1 free, lowest handed out first. Returns 0 or
 * KVW_ENOMEM. */
int bench_alloc_init(struct bench_alloc *a, uint32_t count);
void bench_alloc_fini(struct bench_alloc *a);

/* Takes k indices into out: 0, or KVW_EAGAIN (fewer than k free; nothing
 * taken). */
int bench_alloc_take(struct bench_alloc *a, uint32_t k, uint32_t *out);

/* Gives k indices back (they must have come from take). */
void bench_alloc_put(struct bench_alloc *a, uint32_t k, const uint32_t *in);

/* ---- the run --------------------------------------------------------- */

/* --role: which side of a group split across two hosts this kv-bench
 * drives (bench_role.c); 0 drives both. */
enum { BENCH_ROLE_PREFILL = 1, BENCH_ROLE_DECODE = 2 };

#define BENCH_MAX_PEERS 7u /* --peers: run directories besides --run-dir */

enum { BENCH_ROUTE_RR = 0, BENCH_ROUTE_RANDOM = 1 };

struct bench_config {
	struct shape shape;       /* the group's shape flags */
	uint32_t rooms;           /* rooms to run, >= 1 */
	uint32_t pages_per_room;  /* >= 1, <= shape.pages */
	uint32_t chunk_pages;     /* >= 1 */
	uint32_t concurrency;     /* rooms in flight, >= 1 */
	uint32_t prefill_ranks;   /* prefill members the run must have; 0 any */
	uint32_t decode_ranks;    /* decode members the run must have; 0 any */
	int verify;               /* check every destination byte */
	int zero_last;            /* full chunks then an empty last chunk */
	int no_fill;              /* leave source pages as they are (rooms
				   * mode, and --no-fill: the engine's work,
				   * not kvwire's); ignored with verify */
	int eager;                /* send chunks right after SEND_BEGIN instead
				   * of first polling for WaitingForInput: the
				   * sender queues them until the room's
				   * destinations are known (rooms mode) */
	int cuda;                 /* engines keep KV on GPUs (bench_gpu.h) */
	int engine_memory;        /* engines keep KV in their own host memory
				   * (kvw_alloc, kvw_register_host) */
	int decode_gpu;           /* cuda: the decode engines' device */
	int seeded;               /* room ids from seed (else random) */
	uint64_t seed;
	double room_timeout_s;    /* per-room deadline from its start */
	double abort_frac;        /* 0..1: rooms aborted on purpose, each at a
				   * random moment (before SEND_BEGIN, between
				   * chunks, or with copies in flight); its
				   * destination pages get a canary once the
				   * room is releasable, checked before reuse
				   * and at the end (a change counts corrupt) */
	uint64_t *lat_ns;         /* optional (caller's, lat_cap entries): the
				   * time from a room's first RECV_BEGIN to the
				   * bench seeing every decode rank Success, per
				   * successful room, in finishing order */
	uint32_t lat_cap;
	uint64_t *hop_ns;         /* optional (caller's, lat_cap rows of
				   * BENCH_NHOPS): where each of those rooms'
				   * time went (bench_hops.h); needs lat_ns */
	int role;                 /* 0, BENCH_ROLE_PREFILL or _DECODE */
	const char *peer;         /* --role: tcp://HOST:PORT the prefill side
				   * binds and the decode side dials */
	const char *peers[BENCH_MAX_PEERS]; /* --peers: more groups' run
				   * directories, each an instance of its own
				   * (xPyD): a room runs from one instance's
				   * prefill ranks to one's decode ranks */
	uint32_t npeers;
	const char *run_dir;      /* --run-dir's (or --spawn's) folder, for
				   * messages; may be NULL */
	int route;                /* BENCH_ROUTE_*: how a room's pair of
				   * instances is chosen */
};

struct bench_result {
	uint32_t rooms;    /* rooms finished (any outcome) */
	uint32_t success;  /* every decode rank Success (and intact) */
	uint32_t failed;   /* a rank reported Failed, or never started */
	uint32_t aborted;  /* aborted on purpose (abort_frac) */
	uint32_t stuck;    /* not terminal at the room's deadline, or aborted
			    * and not releasable by it */
	uint32_t corrupt;  /* Success but verify found a wrong byte, or a
			    * released room's canary changed */
	uint32_t inflight; /* rooms started and not finished */
	uint64_t bytes;    /* payload bytes landed in decode pools */
	double seconds;
	uint32_t nlat;     /* entries written to cfg->lat_ns */
	uint32_t nhops;    /* rows written to cfg->hop_ns */
};

/* Called about every 100 ms with the counts so far; a non-zero return
 * stops the run early (rooms in flight are CLEARed once, best effort, and
 * stay counted in `inflight`). */
typedef int bench_progress_fn(void *arg, const struct bench_result *sofar,
			      uint32_t total);

/* Runs cfg->rooms rooms through the group described by ri (its bootstrap,
 * prefill and decode members), as described in kv-bench --help. Returns 0
 * with *res filled whatever the rooms' outcomes, or a negative KVW_E* with
 * err when the run could not happen or had to stop (an engine could not be
 * opened, a pool is smaller than the shape's layout, a socket died); *res
 * then holds what was counted so far. */
int bench_run(const struct runinfo *ri, const struct bench_config *cfg,
	      bench_progress_fn *progress, void *arg,
	      struct bench_result *res, char *err, size_t errlen);

#endif
