/*
 * rtab_metrics.c - the measures kept in a room table's header (see
 * rtab_metrics.h): the hooks rtab.c calls at each state CAS, flag change
 * and byte count, and the snapshot kv-stat reads. Every add is a relaxed
 * atomic on the shared mapping: the measures carry no ordering, and a
 * reader may see a bucket before the matching sum (never a count that goes
 * back).
 */
#include "rtab_impl.h"

/* 0.1 ms to 10 s, roughly 1-2.5-5 per decade. */
static const uint64_t bounds_ns[RTAB_HIST_BOUNDS] = {
	100000ULL,     250000ULL,     500000ULL,     1000000ULL,
	2500000ULL,    5000000ULL,    10000000ULL,   25000000ULL,
	50000000ULL,   100000000ULL,  250000000ULL,  500000000ULL,
	1000000000ULL, 2500000000ULL, 5000000000ULL, 10000000000ULL,
};

static const char *const hist_names[RTAB_NHISTS] = {
	[RTAB_H_TRANSFER] = "transfer",
	[RTAB_H_BOOTSTRAP] = "bootstrap",
	[RTAB_H_ABORT_DRAIN] = "abort_drain",
};

uint64_t rtab_hist_bound_ns(unsigned i)
{
	return i < RTAB_HIST_BOUNDS ? bounds_ns[i] : UINT64_MAX;
}

const char *rtab_hist_str(unsigned h)
{
	return h < RTAB_NHISTS ? hist_names[h] : "?";
}

static int measuring(const struct rtab *t)
{
	return t->writable &&
	       atomic_load_explicit(&t->hdr->metrics.off,
				    memory_order_relaxed) == 0;
}

static void observe(struct rtab *t, unsigned h, uint64_t ns)
{
	struct rtab_hist *hi = &t->hdr->metrics.hist[h];
	unsigned i = 0;

	while (i < RTAB_HIST_BOUNDS && ns > bounds_ns[i])
		i++;
	FLD_ADD(&hi->bucket[i], 1);
	FLD_ADD(&hi->sum_ns, ns);
}

/* Observes now - since when since is set and not in the future. */
static void observe_since(struct rtab *t, unsigned h, uint64_t since,
			  uint64_t now)
{
	if (since != 0 && now >= since)
		observe(t, h, now - since);
}

void rtab_metric_insert(struct rtab *t, struct rtab_entry *e, uint64_t now_ns)
{
	for (unsigned s = 0; s < KVW_NSTATES; s++)
		FLD_STORE(&e->t_enter_ns[s], 0);
	FLD_STORE(&e->t_armed_ns, 0);
	if (!measuring(t))
		return;
	FLD_STORE(&e->t_enter_ns[KVW_BOOTSTRAPPING], now_ns);
	FLD_ADD(&t->hdr->metrics.entered[KVW_BOOTSTRAPPING], 1);
}

void rtab_metric_enter(struct rtab *t, struct rtab_entry *e, unsigned to,
		       unsigned reason)
{
	struct rtab_metrics *m = &t->hdr->metrics;
	uint64_t now;

	if (to >= KVW_NSTATES || !measuring(t))
		return;
	now = rtab_now_ns();
	FLD_STORE(&e->t_enter_ns[to], now);
	FLD_ADD(&m->entered[to], 1);
	if (to == KVW_FAILED && reason < RTAB_MAX_REASONS)
		FLD_ADD(&m->failed[reason], 1);
	if (to == KVW_WAITING)
		observe_since(t, RTAB_H_BOOTSTRAP,
			      FLD_LOAD(&e->t_enter_ns[KVW_BOOTSTRAPPING]), now);
	if (to == KVW_SUCCESS)
		observe_since(t, RTAB_H_TRANSFER,
			      FLD_LOAD(&e->t_enter_ns[KVW_WAITING]), now);
}

void rtab_metric_flags(struct rtab *t, struct rtab_entry *e, uint32_t old,
		       uint32_t bits)
{
	uint64_t now;

	if (!(bits & ~old & (RTAB_F_ARMED | RTAB_F_RELEASABLE)) ||
	    !measuring(t))
		return;
	now = rtab_now_ns();
	if (bits & ~old & RTAB_F_ARMED)
		FLD_STORE(&e->t_armed_ns, now);
	if (bits & ~old & RTAB_F_RELEASABLE)
		observe_since(t, RTAB_H_ABORT_DRAIN, FLD_LOAD(&e->t_armed_ns),
			      now);
}

void rtab_metric_bytes(struct rtab *t, uint64_t n)
{
	if (measuring(t))
		FLD_ADD(&t->hdr->counters[RTAB_C_BYTES], n);
}

void rtab_metrics_get(const struct rtab *t, struct rtab_metrics_view *v)
{
	const struct rtab_metrics *m = &t->hdr->metrics;

	v->off = atomic_load_explicit(&m->off, memory_order_relaxed) != 0;
	for (unsigned s = 0; s < KVW_NSTATES; s++)
		v->entered[s] = FLD_LOAD(&m->entered[s]);
	for (unsigned r = 0; r < KVW_NREASONS; r++)
		v->failed[r] = FLD_LOAD(&m->failed[r]);
	for (unsigned h = 0; h < RTAB_NHISTS; h++) {
		struct rtab_hist_view *hv = &v->hist[h];

		hv->count = 0;
		for (unsigned i = 0; i < RTAB_HIST_BUCKETS; i++) {
			hv->bucket[i] = FLD_LOAD(&m->hist[h].bucket[i]);
			hv->count += hv->bucket[i];
		}
		hv->sum_ns = FLD_LOAD(&m->hist[h].sum_ns);
	}
	for (unsigned i = 0; i < RTAB_NSEC; i++)
		v->sec[i] = FLD_LOAD(&m->sec[i]);
	v->insecure = atomic_load_explicit(&m->insecure,
					   memory_order_relaxed) != 0;
	v->key_fp = atomic_load_explicit(&m->key_fp, memory_order_relaxed);
	v->rooms_reclaimed = FLD_LOAD(&m->rooms_reclaimed);
}

void rtab_rooms_reclaimed_add(struct rtab *t, uint64_t n)
{
	if (t && t->writable)
		FLD_ADD(&t->hdr->metrics.rooms_reclaimed, n);
}

void rtab_sec_add(struct rtab *t, unsigned which, uint64_t n)
{
	if (t && t->writable && which < RTAB_NSEC)
		FLD_ADD(&t->hdr->metrics.sec[which], n);
}

void rtab_set_insecure(struct rtab *t, int on)
{
	if (t && t->writable)
		atomic_store_explicit(&t->hdr->metrics.insecure, on ? 1u : 0u,
				      memory_order_relaxed);
}

void rtab_set_key_fp(struct rtab *t, uint64_t fp)
{
	if (t && t->writable)
		atomic_store_explicit(&t->hdr->metrics.key_fp, fp,
				      memory_order_relaxed);
}

const char *rtab_sec_str(unsigned which)
{
	static const char *const name[RTAB_NSEC] = {
		[RTAB_S_UNAUTHORISED] = "unauthorised",
		[RTAB_S_RATE_LIMITED] = "rate_limited",
		[RTAB_S_AUTH_FAILED] = "auth_failed",
		[RTAB_S_RECLAIMED] = "reclaimed",
		[RTAB_S_INTEGRITY_FAILED] = "integrity_failed",
		[RTAB_S_REDIALS] = "redials",
		[RTAB_S_RESENT] = "resent",
		[RTAB_S_DEST_REFUSED] = "dest_refused",
	};

	return which < RTAB_NSEC ? name[which] : "?";
}

int rtab_metrics_set_off(struct rtab *t, int off)
{
	if (!t->writable)
		return KVW_EINVAL;
	atomic_store_explicit(&t->hdr->metrics.off, off ? 1u : 0u,
			      memory_order_relaxed);
	return 0;
}
