/*
 * rtab_impl.h - private to rtab.c, rtab_file.c and rtab_peer.c: the
 * handle behind struct rtab and the named accessors through which every
 * shared field of the mapping is read or written. Acquire loads pair
 * with release stores and CASes; counters that carry no ordering use
 * relaxed operations.
 */
#ifndef KVW_RTAB_IMPL_H
#define KVW_RTAB_IMPL_H

#include "rtab.h"

#include <sys/types.h>

struct rtab {
	void *map;
	size_t len;
	struct rtab_hdr *hdr;
	struct rtab_entry *ent;
	struct rtab_peer *peers;
	uint32_t cap;
	uint32_t mask;
	uint32_t peer_cap;
	int writable;
	int owner;
	dev_t dev; /* the mapped file, as mapped (rtab_is_at) */
	ino_t ino;
	int lock_fd; /* owner: the file, flock'ed for the owner's life; -1 */
	struct rtab_reclaim *reclaim; /* owner: rtab_reclaim's memory, or NULL */
	/* Owner: the EMPTY slots, kept by the two moves that change them
	 * (a take of an EMPTY slot, a reclaim), once a pass has counted
	 * them (nempty_known): rtab_reclaim_tick passes only when they are
	 * few. */
	uint32_t nempty;
	int nempty_known;
};

/* The home slot of a room id: splitmix64's finaliser (room ids are often
 * sequential). A key lives at its home or after it on the probe path,
 * which no EMPTY slot interrupts. */
static inline uint32_t rtab_home(const struct rtab *t, uint64_t room)
{
	room ^= room >> 30;
	room *= 0xbf58476d1ce4e5b9ULL;
	room ^= room >> 27;
	room *= 0x94d049bb133111ebULL;
	room ^= room >> 31;
	return (uint32_t)room & t->mask;
}

/* Frees rtab_reclaim's memory (rtab_close). Defined in rtab_reclaim.c. */
void rtab_reclaim_free(struct rtab *t);

/* ---- state word: gen (63..32) | reason (31..16) | state (15..8) | kind */

static inline uint64_t sw_pack(uint32_t gen, unsigned reason, unsigned state,
			       unsigned kind)
{
	return (uint64_t)gen << 32 | (uint64_t)(reason & 0xffffu) << 16 |
	       (uint64_t)(state & 0xffu) << 8 | (uint64_t)(kind & 0xffu);
}
static inline uint32_t sw_gen(uint64_t w) { return (uint32_t)(w >> 32); }
static inline unsigned sw_reason(uint64_t w) { return (unsigned)(w >> 16) & 0xffffu; }
static inline unsigned sw_state(uint64_t w) { return (unsigned)(w >> 8) & 0xffu; }
static inline unsigned sw_kind(uint64_t w) { return (unsigned)w & 0xffu; }
/* gen | kind: what identifies an incarnation */
static inline uint64_t sw_ident(uint64_t w) { return w & 0xffffffff000000ffULL; }

static inline uint64_t sw_load(const struct rtab_entry *e)
{
	return atomic_load_explicit(&e->state, memory_order_acquire);
}
static inline uint64_t sw_load_relaxed(const struct rtab_entry *e)
{
	return atomic_load_explicit(&e->state, memory_order_relaxed);
}
static inline void sw_store_release(struct rtab_entry *e, uint64_t w)
{
	atomic_store_explicit(&e->state, w, memory_order_release);
}
/* On failure *expected holds the current word. */
static inline int sw_cas(struct rtab_entry *e, uint64_t *expected, uint64_t w)
{
	return atomic_compare_exchange_strong_explicit(
		&e->state, expected, w, memory_order_acq_rel,
		memory_order_acquire);
}

/* ---- outstanding word: gen (63..32) | jobs (31..0) */

static inline uint64_t ow_pack(uint32_t gen, uint32_t n)
{
	return (uint64_t)gen << 32 | n;
}
static inline uint32_t ow_gen(uint64_t o) { return (uint32_t)(o >> 32); }
static inline uint32_t ow_count(uint64_t o) { return (uint32_t)o; }
static inline uint64_t ow_load(const struct rtab_entry *e)
{
	return atomic_load_explicit(&e->outstanding, memory_order_acquire);
}
static inline int ow_cas(struct rtab_entry *e, uint64_t *expected, uint64_t o)
{
	return atomic_compare_exchange_strong_explicit(
		&e->outstanding, expected, o, memory_order_acq_rel,
		memory_order_acquire);
}

/* ---- plain fields (ordering comes from the state word) */

#define FLD_LOAD(p) atomic_load_explicit((p), memory_order_relaxed)
#define FLD_STORE(p, v) atomic_store_explicit((p), (v), memory_order_relaxed)
#define FLD_ADD(p, v) atomic_fetch_add_explicit((p), (v), memory_order_relaxed)
#define PUB_LOAD(p) atomic_load_explicit((p), memory_order_acquire)
#define PUB_STORE(p, v) atomic_store_explicit((p), (v), memory_order_release)

/* Snapshot of slot s if it is LIVE (any state): 0, or KVW_ESTALE when it is
 * not LIVE or was rewritten during the read. If want_gen != 0, the slot's
 * generation must equal it. Defined in rtab.c. */
int rtab_snap(const struct rtab *t, uint32_t s, uint32_t want_gen,
	      struct rtab_view *v);

#endif
