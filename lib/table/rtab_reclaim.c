/*
 * rtab_reclaim.c - forgetting old Cleared tombstones (rtab.h: "forgetting
 * Cleared rooms"), so that the slots of a long-lived table do not all end
 * as tombstones that every miss must walk through.
 *
 * Linear probing finds a key by walking from its home slot until the key
 * or an EMPTY slot: a slot may become EMPTY only when no key that stays
 * lies beyond it on a path through it. One pass: read every slot once,
 * note each kept key's path [home, slot), then turn into EMPTY the old
 * tombstones that no kept path crosses. A tombstone crossed by a kept
 * path is itself kept, and its own path then protects others: rounds
 * until nothing changes. Only the owner inserts (and this runs in the
 * owner's one table thread), so no path grows meanwhile; a job counted on
 * a tombstone after it was read (only rtab_outstanding_add can change a
 * Cleared slot) makes its claim fail, and the pass then gives every claim
 * back and forgets nothing.
 */
#include <stdlib.h>
#include <string.h>

#include "rtab_impl.h"

/* Rounds of the kept-path closure before a pass gives up (a long chain of
 * tombstones each crossing the next: forgotten by a later pass). */
#define RECLAIM_ROUNDS 16

enum { C_KEEP = 0, C_OLD = 1, C_CLAIMED = 2 };

struct rtab_reclaim {
	uint32_t *aged;   /* per slot: the generation it had as a jobless
			   * Cleared tombstone at the last pass, 0 for none */
	uint32_t *home;   /* per slot, this pass: its key's home (kept keys) */
	int32_t *cross;   /* per slot + 1: kept paths over it (this pass) */
	uint8_t *cand;    /* per slot, this pass: C_KEEP, C_OLD, C_CLAIMED */
	uint8_t *filled;  /* per slot, this pass: not EMPTY */
	uint64_t next_ns; /* rtab_reclaim_tick: the next pass by time */
	uint64_t inserted; /* RTAB_C_INSERTED when a pass was last due */
	uint64_t counted;  /* RTAB_C_INSERTED at the last pass */
};

void rtab_reclaim_free(struct rtab *t)
{
	struct rtab_reclaim *m = t->reclaim;

	if (m == NULL)
		return;
	free(m->aged);
	free(m->home);
	free(m->cross);
	free(m->cand);
	free(m->filled);
	free(m);
	t->reclaim = NULL;
}

static struct rtab_reclaim *memory(struct rtab *t)
{
	struct rtab_reclaim *m = t->reclaim;

	if (m != NULL)
		return m;
	m = calloc(1, sizeof(*m));
	if (m == NULL)
		return NULL;
	t->reclaim = m;
	m->aged = calloc(t->cap, sizeof(*m->aged));
	m->home = calloc(t->cap, sizeof(*m->home));
	m->cross = calloc((size_t)t->cap + 1, sizeof(*m->cross));
	m->cand = calloc(t->cap, sizeof(*m->cand));
	m->filled = calloc(t->cap, sizeof(*m->filled));
	if (!m->aged || !m->home || !m->cross || !m->cand || !m->filled) {
		rtab_reclaim_free(t);
		return NULL;
	}
	return m;
}

/* Reads every slot: which are filled, which old tombstones (the same
 * jobless Cleared generation as at the last pass), the home of the rest.
 * Returns the EMPTY slots; *old counts the old tombstones. */
static uint32_t read_slots(struct rtab *t, struct rtab_reclaim *m,
			   uint32_t *old)
{
	uint32_t empty = 0;

	*old = 0;
	for (uint32_t s = 0; s < t->cap; s++) {
		const struct rtab_entry *e = &t->ent[s];
		uint64_t w = sw_load(e);
		uint32_t gen = sw_gen(w);

		m->cand[s] = C_KEEP;
		m->filled[s] = sw_kind(w) != RTAB_K_EMPTY;
		m->home[s] = s; /* an empty path unless a key says otherwise */
		if (!m->filled[s]) {
			m->aged[s] = 0;
			empty++;
			continue;
		}
		if (sw_kind(w) == RTAB_K_LIVE)
			m->home[s] = rtab_home(t, FLD_LOAD(&e->key));
		if (sw_kind(w) != RTAB_K_LIVE || sw_state(w) != KVW_CLEARED ||
		    ow_load(e) != ow_pack(gen, 0)) {
			m->aged[s] = 0;
		} else if (m->aged[s] != gen) {
			m->aged[s] = gen; /* old at the next pass */
		} else {
			m->cand[s] = C_OLD;
			(*old)++;
		}
	}
	return empty;
}

/* cross[s] > 0 for every slot on the path [home, s) of a kept key. */
static void mark_paths(const struct rtab *t, struct rtab_reclaim *m)
{
	int32_t run = 0;

	memset(m->cross, 0, ((size_t)t->cap + 1) * sizeof(*m->cross));
	for (uint32_t s = 0; s < t->cap; s++) {
		uint32_t h = m->home[s];

		if (!m->filled[s] || m->cand[s] != C_KEEP || h == s)
			continue;
		m->cross[h]++;
		if (h < s) {
			m->cross[s]--;
		} else { /* the path wraps past the last slot */
			m->cross[t->cap]--;
			m->cross[0]++;
			m->cross[s]--;
		}
	}
	for (uint32_t s = 0; s < t->cap; s++) {
		run += m->cross[s];
		m->cross[s] = run;
	}
}

/* Keeps every old tombstone that a kept path crosses, until none is: 1
 * when done, 0 when RECLAIM_ROUNDS did not settle it. */
static int close_kept(const struct rtab *t, struct rtab_reclaim *m)
{
	for (int round = 0; round < RECLAIM_ROUNDS; round++) {
		int changed = 0;

		mark_paths(t, m);
		for (uint32_t s = 0; s < t->cap; s++) {
			if (m->cand[s] == C_OLD && m->cross[s] > 0) {
				m->cand[s] = C_KEEP;
				changed = 1;
			}
		}
		if (!changed)
			return 1;
	}
	return 0;
}

static uint32_t next_gen(uint32_t gen)
{
	return gen + 1 == 0 ? 1 : gen + 1;
}

/* Claims the job counters of every old tombstone left, for the next
 * generation, as a take does: no old ref can add a job after it. 1 when
 * every claim held; else every claim is given back and 0. */
static int claim_all(struct rtab *t, struct rtab_reclaim *m)
{
	uint32_t s;

	for (s = 0; s < t->cap; s++) {
		struct rtab_entry *e = &t->ent[s];
		uint64_t o;

		if (m->cand[s] != C_OLD)
			continue;
		o = ow_pack(m->aged[s], 0);
		if (!ow_cas(e, &o, ow_pack(next_gen(m->aged[s]), 0)))
			break;
		m->cand[s] = C_CLAIMED;
	}
	if (s == t->cap)
		return 1;
	while (s-- > 0) {
		uint64_t o = ow_pack(next_gen(m->aged[s]), 0);

		if (m->cand[s] != C_CLAIMED)
			continue;
		ow_cas(&t->ent[s], &o, ow_pack(m->aged[s], 0));
		m->cand[s] = C_KEEP;
	}
	return 0;
}

int rtab_reclaim(struct rtab *t, uint32_t want_empty)
{
	struct rtab_reclaim *m;
	uint32_t old, n = 0;

	if (!t->owner)
		return KVW_EINVAL;
	m = memory(t);
	if (m == NULL)
		return KVW_ENOMEM;
	t->nempty = read_slots(t, m, &old);
	t->nempty_known = 1;
	if (t->nempty >= want_empty || old == 0 || !close_kept(t, m) ||
	    !claim_all(t, m))
		return 0;
	for (uint32_t s = 0; s < t->cap; s++) {
		struct rtab_entry *e = &t->ent[s];
		uint32_t gen = m->aged[s], ng = next_gen(gen);
		uint64_t w = sw_pack(gen, sw_reason(sw_load(e)), KVW_CLEARED,
				     RTAB_K_LIVE);

		if (m->cand[s] != C_CLAIMED)
			continue;
		m->aged[s] = 0;
		if (sw_cas(e, &w, sw_pack(ng, KVW_R_NONE, 0, RTAB_K_EMPTY))) {
			n++;
			t->nempty++;
		} else { /* not a tombstone of gen any more: left as it is */
			uint64_t o = ow_pack(ng, 0);

			ow_cas(e, &o, ow_pack(gen, 0));
		}
	}
	return (int)n;
}

int rtab_reclaim_tick(struct rtab *t, uint64_t now_ns)
{
	struct rtab_reclaim *m;
	uint64_t ins;

	if (!t->owner)
		return KVW_EINVAL;
	m = memory(t);
	if (m == NULL)
		return KVW_ENOMEM;
	ins = FLD_LOAD(&t->hdr->counters[RTAB_C_INSERTED]);
	if (ins == m->inserted ||
	    (now_ns < m->next_ns && ins - m->inserted < t->cap / 8))
		return 0;
	m->inserted = ins;
	m->next_ns = now_ns + RTAB_RECLAIM_NS;
	/* A table with room has nothing to forget: no pass (a pass of 65,536
	 * slots reads 8 MiB, 1-3 ms of the control's loop). The first pass
	 * under pressure only ages; the next forgets. A pass each 4 x the
	 * capacity in inserts counts the EMPTY slots afresh all the same. */
	if (t->nempty_known && t->nempty >= t->cap / 2 &&
	    ins - m->counted < 4ull * t->cap)
		return 0;
	m->counted = ins;
	return rtab_reclaim(t, t->cap / 2);
}
