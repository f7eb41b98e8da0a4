/*
 * rtab.c - the room operations of the shared room table: the legal
 * transition table, insert (owner), lookup, snapshots, CAS state
 * transitions and the per-room counters. The table file itself is made and
 * mapped in rtab_file.c; peers and bulk sweeps are in rtab_peer.c. See
 * rtab.h for the layout and the contracts; every shared field is touched
 * only through the accessors of rtab_impl.h.
 */
#include <sched.h>
#include <time.h>

#include "rtab_impl.h"

#define NO_SLOT UINT32_MAX
#define RESERVED_SPINS 64
#define RESERVED_YIELDS 256

uint64_t rtab_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#endif
}

/* ---- rooms ----------------------------------------------------------- */

/* Rewrites slot s (EMPTY, or a Cleared tombstone with no jobs) as a new
 * incarnation of room. Owner only. */
static int take_slot(struct rtab *t, uint32_t s, uint64_t room, uint32_t peer,
		     uint64_t deadline_ns, struct rtab_ref *out)
{
	struct rtab_entry *e = &t->ent[s];
	uint64_t w = sw_load(e);
	uint32_t gen = sw_gen(w), ng = gen + 1 == 0 ? 1 : gen + 1;
	uint64_t o = ow_pack(gen, 0), now = rtab_now_ns();

	if (!(sw_kind(w) == RTAB_K_EMPTY ||
	      (sw_kind(w) == RTAB_K_LIVE && sw_state(w) == KVW_CLEARED)))
		return KVW_EAGAIN;
	/* Claim the job counter first: from here on no holder of an old ref
	 * can add a job, and a job still counted keeps the slot. */
	if (!ow_cas(e, &o, ow_pack(ng, 0)))
		return KVW_EAGAIN;
	if (!sw_cas(e, &w, sw_pack(ng, KVW_R_NONE, 0, RTAB_K_RESERVED))) {
		o = ow_pack(ng, 0);
		ow_cas(e, &o, ow_pack(gen, 0));
		return KVW_EAGAIN;
	}
	if (sw_kind(w) == RTAB_K_EMPTY && t->nempty > 0)
		t->nempty--;
	atomic_thread_fence(memory_order_release);
	FLD_STORE(&e->key, room);
	FLD_STORE(&e->peer, peer);
	FLD_STORE(&e->flags, 0);
	FLD_STORE(&e->pages_expected, 0);
	FLD_STORE(&e->pages_done, 0);
	FLD_STORE(&e->prefix_tokens, 0);
	FLD_STORE(&e->bytes, 0);
	FLD_STORE(&e->t_created_ns, now);
	FLD_STORE(&e->deadline_ns, deadline_ns);
	rtab_metric_insert(t, e, now);
	sw_store_release(e, sw_pack(ng, KVW_R_NONE, KVW_BOOTSTRAPPING,
				    RTAB_K_LIVE));
	FLD_ADD(&t->hdr->counters[RTAB_C_INSERTED], 1);
	out->slot = s;
	out->gen = ng;
	return 0;
}

int rtab_insert(struct rtab *t, uint64_t room, uint32_t peer,
		uint64_t deadline_ns, struct rtab_ref *out)
{
	uint32_t h, cand = NO_SLOT;

	if (!t->owner)
		return KVW_EINVAL;
	h = rtab_home(t, room);
	for (uint32_t i = 0; i < t->cap; i++) {
		uint32_t s = (h + i) & t->mask;
		struct rtab_entry *e = &t->ent[s];
		uint64_t w = sw_load(e), o;

		if (sw_kind(w) == RTAB_K_EMPTY) {
			if (cand == NO_SLOT)
				cand = s;
			break;
		}
		if (sw_kind(w) != RTAB_K_LIVE)
			continue;
		if (FLD_LOAD(&e->key) == room) {
			if (sw_state(w) != KVW_CLEARED) {
				out->slot = s;
				out->gen = sw_gen(w);
				return KVW_EEXIST;
			}
			return take_slot(t, s, room, peer, deadline_ns, out);
		}
		o = ow_load(e);
		if (cand == NO_SLOT && sw_state(w) == KVW_CLEARED &&
		    o == ow_pack(sw_gen(w), 0))
			cand = s;
	}
	if (cand == NO_SLOT)
		return KVW_ENOMEM;
	return take_slot(t, cand, room, peer, deadline_ns, out);
}

int rtab_lookup(const struct rtab *t, uint64_t room, struct rtab_ref *out)
{
	uint32_t h = rtab_home(t, room);
	int skipped = 0;

	for (uint32_t i = 0; i < t->cap; i++) {
		const struct rtab_entry *e = &t->ent[(h + i) & t->mask];
		unsigned spins = 0;
		uint64_t w1, w2, key;

	again:
		w1 = sw_load(e);
		if (sw_kind(w1) == RTAB_K_EMPTY)
			break;
		if (sw_kind(w1) == RTAB_K_RESERVED) {
			if (++spins > RESERVED_SPINS + RESERVED_YIELDS) {
				skipped = 1;
				continue;
			}
			if (spins > RESERVED_SPINS)
				sched_yield();
			else
				cpu_relax();
			goto again;
		}
		if (sw_kind(w1) != RTAB_K_LIVE)
			continue;
		key = FLD_LOAD(&e->key);
		atomic_thread_fence(memory_order_acquire);
		w2 = sw_load_relaxed(e);
		if (sw_ident(w1) != sw_ident(w2))
			goto again;
		if (key == room) {
			out->slot = (h + i) & t->mask;
			out->gen = sw_gen(w1);
			return 0;
		}
	}
	return skipped ? KVW_EAGAIN : KVW_ENOENT;
}

int rtab_snap(const struct rtab *t, uint32_t s, uint32_t want_gen,
	      struct rtab_view *v)
{
	const struct rtab_entry *e;
	uint64_t w1, w2, o;

	if (s >= t->cap)
		return KVW_ESTALE;
	e = &t->ent[s];
	w1 = sw_load(e);
	if (sw_kind(w1) != RTAB_K_LIVE || (want_gen != 0 && sw_gen(w1) != want_gen))
		return KVW_ESTALE;
	v->room = FLD_LOAD(&e->key);
	v->peer = FLD_LOAD(&e->peer);
	v->flags = FLD_LOAD(&e->flags);
	v->pages_expected = FLD_LOAD(&e->pages_expected);
	v->pages_done = FLD_LOAD(&e->pages_done);
	v->prefix_tokens = FLD_LOAD(&e->prefix_tokens);
	v->bytes = FLD_LOAD(&e->bytes);
	v->t_created_ns = FLD_LOAD(&e->t_created_ns);
	v->deadline_ns = FLD_LOAD(&e->deadline_ns);
	o = FLD_LOAD(&e->outstanding);
	atomic_thread_fence(memory_order_acquire);
	w2 = sw_load_relaxed(e);
	if (sw_ident(w1) != sw_ident(w2))
		return KVW_ESTALE;
	v->ref.slot = s;
	v->ref.gen = sw_gen(w2);
	v->state = (uint8_t)sw_state(w2);
	v->reason = (uint16_t)sw_reason(w2);
	v->outstanding = ow_gen(o) == sw_gen(w2) ? ow_count(o) : 0;
	return 0;
}

int rtab_times(const struct rtab *t, struct rtab_ref ref,
	       uint64_t enter_ns[KVW_NSTATES])
{
	const struct rtab_entry *e;
	uint64_t w1, w2;

	if (ref.slot >= t->cap)
		return KVW_ESTALE;
	e = &t->ent[ref.slot];
	w1 = sw_load(e);
	if (sw_kind(w1) != RTAB_K_LIVE || sw_gen(w1) != ref.gen)
		return KVW_ESTALE;
	for (unsigned s = 0; s < KVW_NSTATES; s++)
		enter_ns[s] = FLD_LOAD(&e->t_enter_ns[s]);
	atomic_thread_fence(memory_order_acquire);
	w2 = sw_load_relaxed(e);
	return sw_ident(w1) == sw_ident(w2) ? 0 : KVW_ESTALE;
}

int rtab_get(const struct rtab *t, struct rtab_ref ref, struct rtab_view *v)
{
	if (ref.gen == 0)
		return KVW_ESTALE;
	return rtab_snap(t, ref.slot, ref.gen, v);
}

/* The entry a ref names, or NULL when it no longer names a LIVE
 * incarnation. */
static struct rtab_entry *ref_entry(const struct rtab *t, struct rtab_ref ref)
{
	struct rtab_entry *e;
	uint64_t w;

	if (ref.slot >= t->cap || ref.gen == 0)
		return NULL;
	e = &t->ent[ref.slot];
	w = sw_load(e);
	if (sw_kind(w) != RTAB_K_LIVE || sw_gen(w) != ref.gen)
		return NULL;
	return e;
}

int rtab_state(const struct rtab *t, struct rtab_ref ref)
{
	uint64_t w;

	if (ref.slot >= t->cap || ref.gen == 0)
		return KVW_ESTALE;
	w = sw_load(&t->ent[ref.slot]);
	if (sw_kind(w) != RTAB_K_LIVE || sw_gen(w) != ref.gen)
		return KVW_ESTALE;
	return (int)sw_state(w);
}

int rtab_transition_if(struct rtab *t, struct rtab_ref ref,
		       unsigned from_mask, unsigned to, unsigned reason,
		       unsigned *prev)
{
	struct rtab_entry *e;
	uint64_t w, nw;

	if (!t->writable || to >= KVW_NSTATES)
		return KVW_EINVAL;
	if (ref.slot >= t->cap || ref.gen == 0)
		return KVW_ESTALE;
	e = &t->ent[ref.slot];
	w = sw_load(e);
	for (;;) {
		unsigned from = sw_state(w);

		if (sw_kind(w) != RTAB_K_LIVE || sw_gen(w) != ref.gen)
			return KVW_ESTALE;
		if (prev != NULL)
			*prev = from;
		if (from >= KVW_NSTATES || !(from_mask & RTAB_M(from)) ||
		    !rtab_legal(from, to))
			return KVW_ESTATE;
		nw = sw_pack(ref.gen,
			     to == KVW_FAILED ? reason : sw_reason(w), to,
			     RTAB_K_LIVE);
		if (sw_cas(e, &w, nw)) {
			rtab_metric_enter(t, e, to, reason);
			return 0;
		}
	}
}

int rtab_transition(struct rtab *t, struct rtab_ref ref, unsigned to,
		    unsigned reason)
{
	return rtab_transition_if(t, ref, RTAB_M_ANY, to, reason, NULL);
}

int rtab_fail(struct rtab *t, struct rtab_ref ref, unsigned reason)
{
	return rtab_transition_if(t, ref, RTAB_M_ACTIVE, KVW_FAILED, reason,
				  NULL);
}

int rtab_clear(struct rtab *t, struct rtab_ref ref, unsigned reason)
{
	int rc = rtab_fail(t, ref, reason);

	if (rc < 0 && rc != KVW_ESTATE)
		return rc;
	return rtab_transition_if(t, ref, RTAB_M(KVW_SUCCESS) | RTAB_M(KVW_FAILED),
				  KVW_CLEARED, reason, NULL);
}

int rtab_outstanding_add(struct rtab *t, struct rtab_ref ref, int delta)
{
	struct rtab_entry *e;
	uint64_t o;

	if (!t->writable)
		return KVW_EINVAL;
	if (ref.slot >= t->cap || ref.gen == 0)
		return KVW_ESTALE;
	e = &t->ent[ref.slot];
	o = ow_load(e);
	for (;;) {
		int64_t n = (int64_t)ow_count(o) + delta;

		if (ow_gen(o) != ref.gen)
			return KVW_ESTALE;
		if (n < 0 || n > INT32_MAX)
			return KVW_ERANGE;
		if (ow_cas(e, &o, ow_pack(ref.gen, (uint32_t)n)))
			return (int)n;
	}
}

int rtab_pages_done_add(struct rtab *t, struct rtab_ref ref, uint32_t n)
{
	struct rtab_entry *e;
	uint32_t cur;

	if (!t->writable)
		return KVW_EINVAL;
	if ((e = ref_entry(t, ref)) == NULL)
		return KVW_ESTALE;
	cur = FLD_LOAD(&e->pages_done);
	do {
		if ((uint64_t)cur + n > INT32_MAX)
			return KVW_ERANGE;
	} while (!atomic_compare_exchange_weak_explicit(
		&e->pages_done, &cur, cur + n, memory_order_relaxed,
		memory_order_relaxed));
	return (int)(cur + n);
}

int rtab_bytes_add(struct rtab *t, struct rtab_ref ref, uint64_t n)
{
	struct rtab_entry *e;

	if (!t->writable)
		return KVW_EINVAL;
	if ((e = ref_entry(t, ref)) == NULL)
		return KVW_ESTALE;
	FLD_ADD(&e->bytes, n);
	rtab_metric_bytes(t, n);
	return 0;
}

/* The live entry of ref for an owner's field update: 0 with *e, or
 * KVW_EINVAL (a read-only mapping) or KVW_ESTALE. */
static int entry_to_write(struct rtab *t, struct rtab_ref ref,
			  struct rtab_entry **e)
{
	if (!t->writable)
		return KVW_EINVAL;
	*e = ref_entry(t, ref);
	return *e ? 0 : KVW_ESTALE;
}

int rtab_set_expected(struct rtab *t, struct rtab_ref ref, uint32_t pages)
{
	struct rtab_entry *e;
	int rc = entry_to_write(t, ref, &e);

	if (rc == 0)
		FLD_STORE(&e->pages_expected, pages);
	return rc;
}

int rtab_set_prefix(struct rtab *t, struct rtab_ref ref, uint32_t tokens)
{
	struct rtab_entry *e;
	int rc = entry_to_write(t, ref, &e);

	if (rc == 0)
		FLD_STORE(&e->prefix_tokens, tokens);
	return rc;
}

int rtab_set_deadline(struct rtab *t, struct rtab_ref ref,
		      uint64_t deadline_ns)
{
	struct rtab_entry *e;
	int rc = entry_to_write(t, ref, &e);

	if (rc == 0)
		FLD_STORE(&e->deadline_ns, deadline_ns);
	return rc;
}

int rtab_set_peer(struct rtab *t, struct rtab_ref ref, uint32_t peer)
{
	struct rtab_entry *e;
	int rc = entry_to_write(t, ref, &e);

	if (rc == 0)
		FLD_STORE(&e->peer, peer);
	return rc;
}

int rtab_flags_or(struct rtab *t, struct rtab_ref ref, uint32_t bits)
{
	struct rtab_entry *e;
	uint32_t old;

	if (!t->writable || (bits & 0x80000000u))
		return KVW_EINVAL;
	if ((e = ref_entry(t, ref)) == NULL)
		return KVW_ESTALE;
	old = atomic_fetch_or_explicit(&e->flags, bits, memory_order_acq_rel);
	rtab_metric_flags(t, e, old, bits);
	return (int)(old & 0x7fffffffu);
}

int rtab_flags_clear(struct rtab *t, struct rtab_ref ref, uint32_t bits)
{
	struct rtab_entry *e;

	if (!t->writable || (bits & 0x80000000u))
		return KVW_EINVAL;
	if ((e = ref_entry(t, ref)) == NULL)
		return KVW_ESTALE;
	return (int)(atomic_fetch_and_explicit(&e->flags, ~bits,
					       memory_order_acq_rel) &
		     0x7fffffffu);
}

int rtab_next(const struct rtab *t, uint32_t *cursor, struct rtab_view *v)
{
	while (*cursor < t->cap) {
		uint32_t s = (*cursor)++;

		if (rtab_snap(t, s, 0, v) == 0)
			return 0;
	}
	return KVW_ENOENT;
}

uint64_t rtab_next_deadline(const struct rtab *t)
{
	uint64_t best = 0;

	for (uint32_t s = 0; s < t->cap; s++) {
		const struct rtab_entry *e = &t->ent[s];
		uint64_t w = sw_load(e), d;

		if (sw_kind(w) != RTAB_K_LIVE || rtab_terminal(sw_state(w)))
			continue;
		d = FLD_LOAD(&e->deadline_ns);
		if (d != 0 && (best == 0 || d < best))
			best = d;
	}
	return best;
}
