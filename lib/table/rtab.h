/*
 * rtab.h - the room table: one file per control process (kv-sender or
 * kv-receiver), e.g. /dev/shm/kvwire.<name>.rooms, mode 0600, mapped
 * MAP_SHARED by the owner, its workers, kv-heartbeat, the engine (read-only)
 * and kv-stat. Lock-free: readers never block. Only the owner inserts keys
 * and reuses slots; anyone with a writable mapping changes a room's state
 * only by compare-and-swap of its 64-bit state word, following the
 * legal[from][to] table (rtab_legal). A peer table sits after the rooms.
 *
 * File layout: struct rtab_hdr (1024 bytes: 128 of geometry, owner and
 * counters, then struct rtab_metrics), then `capacity` struct rtab_entry
 * (128 bytes, two cache lines each), then `peer_capacity` struct
 * rtab_peer (128 bytes). These three structs are the only public structs in
 * kvwire; their fields are _Atomic and are touched only through the
 * functions below (which use named acquire/release accessors).
 *
 * Identity: a struct rtab_ref {slot, gen} names one incarnation of a room.
 * Reusing a room id after CLEAR bumps the slot's generation; every call
 * through a ref fails with KVW_ESTALE once the slot's generation or kind has
 * changed. Generations start at 1, so a zeroed ref is never valid.
 *
 * Errors: functions return 0 (or a count / value >= 0) on success and a
 * negative KVW_E* on failure; on failure nothing in the table changed unless
 * the comment says otherwise. Calls that mutate the table on a read-only
 * table return KVW_EINVAL; owner-only calls on a non-owner table return
 * KVW_EINVAL. Thread- and process-safe except where "owner only" is said:
 * owner-only calls must be made by one thread of the one owner process.
 *
 * Layer table (lib/table/): the shared room and peer table (rtab*). It
 * includes only base/; wire, plan and xport never include it, nor it them.
 */
#ifndef KVW_RTAB_H
#define KVW_RTAB_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"
#include "rtab_metrics.h"

#define RTAB_MAGIC 0x3142415457564b00ULL /* "\0KVWTAB1" little-endian */
#define RTAB_VERSION 3u
#define RTAB_HDR_SIZE 1024u  /* 128 bytes of header, then the metrics */
#define RTAB_ENTRY_SIZE 128u
#define RTAB_PEER_SIZE 128u
#define RTAB_ENDPOINT_MAX 96u         /* bytes incl. the NUL */
#define RTAB_MAX_CAPACITY (1u << 22)  /* room slots */
#define RTAB_MAX_PEERS 65536u

/* Slot kind: the low byte of the state word. A zero-filled slot is EMPTY. */
enum rtab_kind {
	RTAB_K_EMPTY = 0,    /* never used, or forgotten (rtab_reclaim); ends
			      * a probe chain */
	RTAB_K_RESERVED = 1, /* transient: the owner is rewriting the slot */
	RTAB_K_LIVE = 2,     /* holds a key and an incarnation (any state) */
};

/* Room flags (31 bits usable). */
#define RTAB_F_ARMED 0x1u      /* abort sent; waiting for acks */
#define RTAB_F_RELEASABLE 0x2u /* every target acked: pages may be reused */
#define RTAB_F_DUMMY 0x4u      /* dummy destination: no data, status only */
#define RTAB_F_INFO 0x8u       /* prefill: a destination's XFER_INFO (real or
				* dummy) reached this incarnation */
#define RTAB_F_BEGUN 0x10u     /* the engine's BEGIN reached this incarnation
				* (a prefill's may be opened, even failed,
				* by its decode first: api_inc.h) */

/* Peer liveness. */
enum rtab_liveness {
	RTAB_PEER_UNKNOWN = 0,
	RTAB_PEER_ALIVE = 1,
	RTAB_PEER_DEAD = 2,
};

/* Header counters (kv-stat shows them). */
enum rtab_counter {
	RTAB_C_MALFORMED = 0, /* malformed frames dropped by the owner */
	RTAB_C_INSERTED = 1,  /* incarnations created */
	RTAB_C_FAILED = 2,    /* rooms failed by rtab_expire/_fail_peer/_fail_stale_owner */
	RTAB_C_STALE = 3,     /* messages dropped as stale (callers count) */
	RTAB_C_REFUSED = 4,   /* messages refused in their room's state */
	RTAB_C_WORKER_RESTART = 5, /* workers started again after dying */
	RTAB_C_OWNER_RESTART = 6,  /* owners that reopened this table */
	RTAB_C_BYTES = 7,     /* bytes moved (rtab_bytes_add), unless metrics off */
	RTAB_NCOUNTERS = 8,
};

/* Header, 128 bytes at offset 0. Geometry fields are written once before
 * the file becomes visible at its path and never change. */
struct rtab_hdr {
	uint64_t magic;            /* RTAB_MAGIC */
	uint32_t version;          /* RTAB_VERSION */
	uint32_t hdr_size;         /* RTAB_HDR_SIZE */
	uint32_t entry_size;       /* RTAB_ENTRY_SIZE */
	uint32_t capacity;         /* room slots, power of two */
	uint32_t peer_capacity;    /* peer slots */
	uint32_t peer_entry_size;  /* RTAB_PEER_SIZE */
	_Atomic uint64_t owner_epoch;
	_Atomic uint32_t owner_pid;
	_Atomic uint32_t peer_count; /* peer slots ever used (ids 1..peer_count);
				      * retired ones among them have id 0 */
	uint64_t created_ns;       /* CLOCK_REALTIME when the file was made */
	uint64_t reserved0;
	_Atomic uint64_t counters[RTAB_NCOUNTERS]; /* enum rtab_counter */
	struct rtab_metrics metrics; /* rtab_metrics.h */
};

/* State word: generation (bits 63..32) | reason (31..16) | state (15..8) |
 * kind (7..0). */
struct rtab_entry {
	_Atomic uint64_t key;         /* room id (any u64, 0 included) */
	_Atomic uint64_t state;       /* the state word */
	_Atomic uint32_t peer;        /* peer id (0 = none) */
	_Atomic uint32_t flags;       /* RTAB_F_* */
	_Atomic uint32_t pages_expected;
	_Atomic uint32_t pages_done;
	_Atomic uint64_t outstanding; /* generation (63..32) | jobs (31..0) */
	_Atomic uint64_t bytes;
	_Atomic uint64_t t_created_ns; /* CLOCK_MONOTONIC */
	_Atomic uint64_t deadline_ns;  /* CLOCK_MONOTONIC; 0 = none */
	/* Metrics (second cache line): CLOCK_MONOTONIC when the incarnation
	 * entered each state (0 = not yet) and when it was armed for abort.
	 * Written by rtab_metric_*. */
	_Atomic uint64_t t_enter_ns[KVW_NSTATES];
	_Atomic uint64_t t_armed_ns;
	/* The tokens the decode holds already from its prefix cache
	 * (decode: from its RECV_BEGIN; prefill: from the XFER_INFO, for the
	 * engine to skip them). In the slot's last 8 bytes, where a
	 * write-only releasable time was: a third cache line per slot cost
	 * tiny rooms a fifth of their rate (bench/README.md). */
	_Atomic uint32_t prefix_tokens;
	uint32_t reserved;
};

/* Peer slot; id = index + 1, 0 while unused. A slot the owner retired
 * (rtab_peer_retire) is used again for another endpoint: its seq is odd
 * from the retire until the new endpoint and fields are written, and
 * readers (rtab_peer_get) take a snapshot only between two equal, even
 * reads of seq, so no reader ever sees half of two peers. */
struct rtab_peer {
	_Atomic uint32_t id;
	_Atomic uint32_t liveness;    /* enum rtab_liveness */
	_Atomic uint64_t epoch;       /* 0 = not known yet */
	_Atomic uint32_t misses;      /* consecutive heartbeat misses */
	_Atomic uint32_t seq;         /* odd: being retired or rewritten */
	_Atomic uint64_t last_seen_ns; /* CLOCK_MONOTONIC */
	char endpoint[RTAB_ENDPOINT_MAX]; /* NUL-terminated */
};

_Static_assert(sizeof(struct rtab_hdr) == RTAB_HDR_SIZE, "rtab_hdr size");
_Static_assert(offsetof(struct rtab_hdr, owner_epoch) == 32, "owner_epoch");
_Static_assert(offsetof(struct rtab_hdr, created_ns) == 48, "created_ns");
_Static_assert(offsetof(struct rtab_hdr, counters) == 64, "counters");
_Static_assert(offsetof(struct rtab_hdr, metrics) == 128, "metrics");
_Static_assert(sizeof(struct rtab_entry) == RTAB_ENTRY_SIZE, "rtab_entry size");
_Static_assert(offsetof(struct rtab_entry, state) == 8, "state");
_Static_assert(offsetof(struct rtab_entry, outstanding) == 32, "outstanding");
_Static_assert(offsetof(struct rtab_entry, deadline_ns) == 56, "deadline");
_Static_assert(offsetof(struct rtab_entry, t_enter_ns) == 64, "t_enter_ns");
_Static_assert(sizeof(struct rtab_peer) == RTAB_PEER_SIZE, "rtab_peer size");
_Static_assert(offsetof(struct rtab_peer, endpoint) == 32, "endpoint");
/* Atomics shared between processes must be lock-free (address-free). */
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "lock-free 64-bit atomics");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "lock-free 32-bit atomics");

/* Names one incarnation of a room. */
struct rtab_ref {
	uint32_t slot;
	uint32_t gen;
};

/* A snapshot of one room (best effort across fields; state, gen and key are
 * consistent with each other). */
struct rtab_view {
	uint64_t room;
	struct rtab_ref ref;
	uint8_t state;    /* enum kvw_state */
	uint16_t reason;  /* enum kvw_reason */
	uint32_t peer;
	uint32_t outstanding;
	uint32_t flags;
	uint32_t pages_expected;
	uint32_t pages_done;
	uint32_t prefix_tokens;
	uint64_t bytes;
	uint64_t t_created_ns;
	uint64_t deadline_ns;
};

/* A snapshot of one peer. */
struct rtab_peer_view {
	uint32_t id;
	uint32_t liveness;
	uint32_t misses;
	uint64_t epoch;
	uint64_t last_seen_ns;
	char endpoint[RTAB_ENDPOINT_MAX];
};

/* A snapshot of the header. */
struct rtab_info {
	uint32_t capacity;
	uint32_t peer_capacity;
	uint32_t peer_count; /* peers allocated now */
	uint32_t owner_pid;
	uint64_t owner_epoch;
	uint64_t created_ns;
	uint64_t counters[RTAB_NCOUNTERS];
};

struct rtab; /* opaque handle: one mapping of one table file */

/* Called by the sweeps below once per room they failed, after the CAS; v
 * shows the room in its new state. Runs in the caller's thread. */
typedef void rtab_room_cb(void *arg, const struct rtab_view *v);

/* ---- open and close ------------------------------------------------ */

/* Owner: creates the table at `path` (mode 0600, every byte initialised
 * before the file appears at `path`), or reopens an existing one with the
 * same magic, version and geometry: then *existed = 1, slots the previous
 * owner left RESERVED become Cleared tombstones, and the caller should call
 * rtab_fail_stale_owner(). Either way the owner pid is recorded. capacity
 * must be a power of two in [2, RTAB_MAX_CAPACITY], peer_capacity in
 * [1, RTAB_MAX_PEERS]. A file of another magic, version, geometry or size
 * -> KVW_EVERSION with text in err; system errors -> KVW_ESYS. On success
 * *out is the caller's to rtab_close(); on failure *out is NULL. */
int rtab_create(const char *path, uint32_t capacity, uint32_t peer_capacity,
		uint64_t owner_epoch, struct rtab **out, int *existed,
		char *err, size_t errlen);

/* Non-owner: maps an existing table read-write (writable != 0) or
 * read-only (PROT_READ: every mutating call returns KVW_EINVAL). Checks
 * magic, version, geometry and file size: KVW_EVERSION with text in err on
 * mismatch, KVW_ENOENT if the file is missing, KVW_ESYS otherwise. */
int rtab_open(const char *path, int writable, struct rtab **out, char *err,
	      size_t errlen);

/* Unmaps and frees; accepts NULL and *t == NULL; sets *t = NULL. The file
 * stays. */
void rtab_close(struct rtab **t);

/* Whether the file at path is still the one t maps: 1 yes, 0 when path is
 * gone or names another file now (the table was removed, or replaced by a
 * new group's). */
int rtab_is_at(const struct rtab *t, const char *path);

/* Removes the table file: 0, or KVW_ESYS (KVW_ENOENT if it was missing). */
int rtab_unlink(const char *path);

uint64_t rtab_owner_epoch(const struct rtab *t);
uint32_t rtab_capacity(const struct rtab *t);
uint32_t rtab_peer_capacity(const struct rtab *t);
void rtab_info(const struct rtab *t, struct rtab_info *info);

/* The raw mapping (read-only view) for tools that dump the table. */
const struct rtab_hdr *rtab_header(const struct rtab *t);

/* Adds n to a header counter (enum rtab_counter); ignored on a read-only
 * table or an unknown counter. */
void rtab_counter_add(struct rtab *t, unsigned which, uint64_t n);
uint64_t rtab_counter_get(const struct rtab *t, unsigned which);

/* CLOCK_MONOTONIC in ns. */
uint64_t rtab_now_ns(void);

/* ---- state machine ------------------------------------------------- */

/* 1 if from -> to is in the legal table, else 0 (also for values out of
 * range). Same-state pairs are not legal. Success and Failed go only to
 * Cleared; Cleared goes nowhere. */
int rtab_legal(unsigned from, unsigned to);

/* 1 for Success, Failed and Cleared. */
int rtab_terminal(unsigned state);

/* Roles and the messages they act on, as listed in rtab_states.def (the
 * table the Promela model in model/ is generated from). */
#define RTAB_STATE(name, term)
#define RTAB_LEGAL(from, to)
#define RTAB_ACCEPT(role, msg, state)
#define RTAB_MSG(name)
#define RTAB_ROLE(name) RTAB_ROLE_##name,
enum rtab_role {
#include "rtab_states.def"
	RTAB_NROLES
};
#undef RTAB_ROLE
#define RTAB_ROLE(name)
#undef RTAB_MSG
#define RTAB_MSG(name) RTAB_MSG_##name,
enum rtab_msg {
#include "rtab_states.def"
	RTAB_NMSGS
};
#undef RTAB_STATE
#undef RTAB_LEGAL
#undef RTAB_ACCEPT
#undef RTAB_MSG
#undef RTAB_ROLE

/* 1 if `role` acts on `msg` (enum rtab_msg) while its room is in `state`,
 * else 0 (also for values out of range): the message is dropped. */
int rtab_accepts(unsigned role, unsigned state, unsigned msg);

/* "DECODE", "STATUS", ... as in rtab_states.def; "?" out of range. */
const char *rtab_role_str(unsigned role);
const char *rtab_msg_str(unsigned msg);

/* Bit for a state in a from-mask. */
#define RTAB_M(s) (1u << (s))
#define RTAB_M_ANY 0x3fu
#define RTAB_M_ACTIVE (RTAB_M(KVW_BOOTSTRAPPING) | RTAB_M(KVW_WAITING) | \
		       RTAB_M(KVW_TRANSFERRING))

/* ---- rooms --------------------------------------------------------- */

/* Owner only. Inserts an incarnation of `room` in state Bootstrapping with
 * counters and flags zero, t_created = now, the given peer id and deadline
 * (0 = none); *out names it. If the key exists in a non-Cleared state ->
 * KVW_EEXIST and *out names the existing incarnation. If it exists Cleared
 * with no outstanding jobs, that slot is reused with generation + 1; if it
 * exists Cleared with jobs still outstanding -> KVW_EAGAIN. Otherwise the
 * first Cleared tombstone (of another key, no outstanding jobs) on the
 * probe path or the first EMPTY slot is taken. No room -> KVW_ENOMEM. */
int rtab_insert(struct rtab *t, uint64_t room, uint32_t peer,
		uint64_t deadline_ns, struct rtab_ref *out);

/* Anyone: the current incarnation of `room` (in any state, Cleared
 * included): 0 and *out, or KVW_ENOENT. KVW_EAGAIN if a slot on the path
 * stayed RESERVED for too long (an owner died mid-rewrite). */
int rtab_lookup(const struct rtab *t, uint64_t room, struct rtab_ref *out);

/* Anyone: a snapshot of the incarnation: 0, or KVW_ESTALE. */
int rtab_get(const struct rtab *t, struct rtab_ref ref, struct rtab_view *v);

/* Anyone: when the incarnation entered each state (CLOCK_MONOTONIC ns, 0
 * where it did not or the table does not measure: rtab_metrics.h), into
 * enter_ns[0..KVW_NSTATES): 0, or KVW_ESTALE. Where a room's time went
 * (kv-bench --hops): one host's processes share the clock. */
int rtab_times(const struct rtab *t, struct rtab_ref ref,
	       uint64_t enter_ns[KVW_NSTATES]);

/* Anyone: the state (enum kvw_state, >= 0) of the incarnation, or
 * KVW_ESTALE. One atomic load: what an engine polls. */
int rtab_state(const struct rtab *t, struct rtab_ref ref);

/* Moves the incarnation to `to` by CAS from whatever state it is in, if
 * that pair is legal. `reason` is stored when to == Failed; moving to
 * Cleared keeps the reason; other moves leave it. Returns 0, KVW_ESTALE
 * (generation or kind changed), KVW_ESTATE (illegal pair; state unchanged)
 * or KVW_EINVAL (to out of range). */
int rtab_transition(struct rtab *t, struct rtab_ref ref, unsigned to,
		    unsigned reason);

/* As rtab_transition, but only from a state in from_mask (RTAB_M bits),
 * else KVW_ESTATE. If prev is not NULL it receives the state that was
 * replaced on success, or the state that blocked the move on ESTATE. */
int rtab_transition_if(struct rtab *t, struct rtab_ref ref,
		       unsigned from_mask, unsigned to, unsigned reason,
		       unsigned *prev);

/* Failed from any non-terminal state with `reason`; KVW_ESTATE if the room
 * is already terminal (its state and reason unchanged). */
int rtab_fail(struct rtab *t, struct rtab_ref ref, unsigned reason);

/* Cleared from Success or Failed; a non-terminal room is first failed with
 * `reason` (e.g. KVW_R_CLEARED). KVW_ESTATE if it was already Cleared. */
int rtab_clear(struct rtab *t, struct rtab_ref ref, unsigned reason);

/* Adds delta to the outstanding-job count of the incarnation (an atomic CAS
 * on generation | count, so a count can never leak into a later
 * incarnation). Returns the new count (>= 0), KVW_ESTALE, or KVW_ERANGE if
 * the count would go below zero or above INT32_MAX (count unchanged: a bug
 * in the caller). A slot is reused only when its count is zero. */
int rtab_outstanding_add(struct rtab *t, struct rtab_ref ref, int delta);

/* Field updates through a ref. Each checks the generation first and
 * returns KVW_ESTALE if it changed. They are exact while the slot cannot be
 * reused under the caller: the room is not Cleared, or the caller holds an
 * outstanding job on it, or the caller is the owner. */
int rtab_pages_done_add(struct rtab *t, struct rtab_ref ref, uint32_t n);
				/* new value, or KVW_ERANGE past INT32_MAX */
int rtab_bytes_add(struct rtab *t, struct rtab_ref ref, uint64_t n);
int rtab_set_expected(struct rtab *t, struct rtab_ref ref, uint32_t pages);
int rtab_set_prefix(struct rtab *t, struct rtab_ref ref, uint32_t tokens);
int rtab_set_deadline(struct rtab *t, struct rtab_ref ref,
		      uint64_t deadline_ns);
int rtab_set_peer(struct rtab *t, struct rtab_ref ref, uint32_t peer);
/* Atomic OR / AND-NOT of flag bits (bit 31 is refused: KVW_EINVAL).
 * Return the flags before the change (>= 0). */
int rtab_flags_or(struct rtab *t, struct rtab_ref ref, uint32_t bits);
int rtab_flags_clear(struct rtab *t, struct rtab_ref ref, uint32_t bits);

/* ---- forgetting Cleared rooms ---------------------------------------- */

/* A Cleared room stays in its slot as a tombstone: a lookup still finds
 * it (a late frame meets Cleared, not a new room), and an insert on its
 * path may take the slot over. Slots only ever went from EMPTY to LIVE, so
 * after some ten times the capacity in distinct room ids every slot was a
 * tombstone and each lookup of an id not in the table (a new room's
 * insert, an engine polling a room its control has not taken yet) walked
 * the whole table: a group slowed from 40,000 to under 1,000 rooms a
 * second after about 600,000 rooms on a 65,536-slot table.
 *
 * Owner only. One pass over the table. A Cleared tombstone with no
 * outstanding jobs that was already one, of the same generation, at the
 * previous pass is old. When fewer than want_empty slots are EMPTY, every
 * old tombstone that no other key's probe path crosses (a key stays
 * reachable from its home) becomes EMPTY again, with its generation
 * bumped: refs to it are stale, and lookups of its id find nothing.
 * Returns the number of slots forgotten (>= 0), KVW_EINVAL (not the
 * owner) or KVW_ENOMEM (its memory: 9 bytes a slot, kept until
 * rtab_close). Readers and other writers may run meanwhile: only the
 * owner inserts, so no path grows during the pass. */
int rtab_reclaim(struct rtab *t, uint32_t want_empty);

/* Owner only: rtab_reclaim(t, capacity / 2) when a pass is due - rooms
 * were inserted since the last one and either RTAB_RECLAIM_NS have passed
 * or capacity / 8 rooms were inserted - and fewer than half the slots are
 * EMPTY (the owner counts them: the first pass, then every take of an
 * EMPTY slot and every slot forgotten), else 0. A table with room is not
 * read at all; under pressure the first pass ages its tombstones and the
 * next forgets. A Cleared room stays visible for at least one pass, and
 * for good while the table has room: the controls call this from their
 * timers. */
#define RTAB_RECLAIM_NS 2000000000ull
int rtab_reclaim_tick(struct rtab *t, uint64_t now_ns);

/* Iterates LIVE slots (any state, Cleared included) for tools and owners.
 * Start with *cursor = 0; returns 0 and fills v, or KVW_ENOENT at the end.
 * Slots being rewritten are skipped. */
int rtab_next(const struct rtab *t, uint32_t *cursor, struct rtab_view *v);

/* The earliest non-zero deadline among non-terminal rooms, 0 if none: the
 * owner's poll timeout. */
uint64_t rtab_next_deadline(const struct rtab *t);

/* ---- sweeps (return how many rooms this call failed) ----------------- */

/* Fails with KVW_R_TIMEOUT every non-terminal room whose deadline is set
 * and <= now_ns; cb (may be NULL) runs per failed room. */
int rtab_expire(struct rtab *t, uint64_t now_ns, rtab_room_cb *cb, void *arg);

/* Fails with `reason` every non-terminal room whose peer id is `peer`
 * (peer != 0); terminal rooms are untouched. */
int rtab_fail_peer(struct rtab *t, uint32_t peer, unsigned reason,
		   rtab_room_cb *cb, void *arg);

/* Owner only, after a restart: stores new_epoch as the owner epoch, fails
 * every non-terminal room with KVW_R_OWNER_RESTART and zeroes the
 * outstanding count of every room (the old epoch's workers are gone). */
int rtab_fail_stale_owner(struct rtab *t, uint64_t new_epoch,
			  rtab_room_cb *cb, void *arg);

/* ---- peers ----------------------------------------------------------- */

/* Owner only: finds the peer with exactly this endpoint or allocates an
 * id: a retired slot's first, else the next one (liveness UNKNOWN, misses
 * 0). epoch 0 means "not known": it never
 * overwrites a known epoch. *epoch_changed (may be NULL) = 1 when a known
 * epoch was replaced by a different non-zero one (the caller then fails the
 * peer's rooms). KVW_EINVAL for an empty endpoint or one of
 * RTAB_ENDPOINT_MAX bytes or more; KVW_ENOMEM when the peer table is full. */
int rtab_peer_upsert(struct rtab *t, const char *endpoint, uint64_t epoch,
		     uint32_t *id, int *epoch_changed);

/* Owner only: frees the slots of the n peer ids[] that no non-terminal
 * room names, for other endpoints (issue 14: a flood of registrations that
 * never complete, or peers that died, must not use the table up for
 * good); done[i] (may be NULL) = 1 for each id retired. The rooms are
 * scanned once for all ids. Terminal rooms keep naming an id, which may
 * come to stand for another endpoint. Ids are index + 1, so a reused slot
 * has the same id: whoever caches something by id (the heartbeat's
 * socket) compares the endpoint. Returns the number retired (ids not
 * allocated are skipped), or KVW_EINVAL (not the owner) / KVW_ENOMEM. */
int rtab_peers_retire(struct rtab *t, const uint32_t *ids, uint32_t n,
		      uint8_t *done);

/* Anyone: 0 and a consistent snapshot, or KVW_ENOENT. */
int rtab_peer_get(const struct rtab *t, uint32_t id, struct rtab_peer_view *v);

/* A reply came from peer `id` carrying `epoch` (0 = none): misses = 0,
 * liveness ALIVE, last_seen = now_ns. Returns 1 if a known epoch changed
 * (stored), 0 otherwise, or KVW_ENOENT. */
int rtab_peer_seen(struct rtab *t, uint32_t id, uint64_t epoch,
		   uint64_t now_ns);

/* A heartbeat went unanswered: returns the new consecutive miss count, or
 * KVW_ENOENT. */
int rtab_peer_miss(struct rtab *t, uint32_t id);

/* Sets liveness (enum rtab_liveness): 0, KVW_ENOENT or KVW_EINVAL. */
int rtab_peer_set_liveness(struct rtab *t, uint32_t id, unsigned liveness);

/* Iterates allocated peers; *cursor = 0 to start; 0 and v, or KVW_ENOENT
 * at the end. */
int rtab_peer_next(const struct rtab *t, uint32_t *cursor,
		   struct rtab_peer_view *v);

#endif
