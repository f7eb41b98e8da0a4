/*
 * plan_chunk.c - turns one chunk's page lists into copies for a built
 * plan: range-checks every page index against the smallest paired buffer
 * on each side, counts the copies before writing any, then emits
 * coalesced page runs (computed once per chunk) or per-token-slot head
 * slices. No allocation: the caller's output array is the only memory.
 */
#include "plan_impl.h"

uint64_t plan_chunk_max(const struct plan *p, uint32_t npages, int with_aux)
{
	uint32_t paged;

	if (p == NULL)
		return 0;
	paged = p->npairs - p->naux - p->nstate;
	return (uint64_t)(paged - p->nsliced) * npages +
	       p->sliced_slots * npages +
	       (with_aux ? p->naux : 0);
}

/* Range-checks a chunk's page lists and aux slots; counts page runs. */
static int chunk_check(const struct plan *p, const uint32_t *sp,
		       const uint32_t *dp, uint32_t npages, int with_aux,
		       uint32_t src_aux, uint32_t dst_aux, uint64_t *nruns,
		       uint32_t maxp[2], char *err, size_t errlen)
{
	uint64_t runs = 0;
	uint32_t ms = 0, md = 0;

	for (uint32_t i = 0; i < npages; i++) {
		if (sp[i] >= p->src_min_pages || dp[i] >= p->dst_min_pages) {
			int s = sp[i] >= p->src_min_pages;
			const struct pair *pr =
			    &p->pairs[s ? p->src_min_at : p->dst_min_at];

			kvw_seterr(err, errlen,
				   "%s page index %u (position %u) outside "
				   "layer %u role %s (%u pages)",
				   s ? "source" : "destination",
				   s ? sp[i] : dp[i], i, pr->layer_id,
				   plan_role_str(pr->role),
				   s ? p->src_min_pages : p->dst_min_pages);
			return KVW_ERANGE;
		}
		runs +=
		    i == 0 || sp[i] != sp[i - 1] + 1 || dp[i] != dp[i - 1] + 1;
		ms = sp[i] > ms ? sp[i] : ms;
		md = dp[i] > md ? dp[i] : md;
	}
	if (with_aux && p->naux &&
	    (src_aux >= p->src_aux_min || dst_aux >= p->dst_aux_min)) {
		int s = src_aux >= p->src_aux_min;

		kvw_seterr(err, errlen,
			   "%s aux slot %u outside AUX buffer (%u slots)",
			   s ? "source" : "destination", s ? src_aux : dst_aux,
			   s ? p->src_aux_min : p->dst_aux_min);
		return KVW_ERANGE;
	}
	*nruns = runs;
	maxp[0] = ms;
	maxp[1] = md;
	return 0;
}

/* The last line before bytes move: plan_build and chunk_check already
 * bound every copy, so this only fires on a planner bug. */
static int out_of_buffer(const struct pair *pr, char *err, size_t errlen)
    __attribute__((cold, noinline));
static int out_of_buffer(const struct pair *pr, char *err, size_t errlen)
{
	kvw_seterr(err, errlen, "layer %u role %s: copy outside its buffer",
		   pr->layer_id, plan_role_str(pr->role));
	return KVW_ERANGE;
}

#define OUTSIDE(pr, so, dof, len)                                              \
	__builtin_expect(                                                      \
	    (so) + (len) > (pr)->src_end || (dof) + (len) > (pr)->dst_end, 0)

/* Writes the chunk's page runs into runs[0..) as (src page, dst page,
 * page count) in the src_off/dst_off/len fields. */
static void runs_fill(const uint32_t *sp, const uint32_t *dp, uint32_t npages,
		      struct plan_copy *runs)
{
	for (uint32_t i = 0, j, r = 0; i < npages; i = j, r++) {
		for (j = i + 1; j < npages && sp[j] == sp[j - 1] + 1 &&
				dp[j] == dp[j - 1] + 1;
		     j++)
			;
		runs[r] = (struct plan_copy){sp[i], dp[i], j - i, 0, 0};
	}
}

/* Copies of an unsliced pair, one per run of runs[0..nruns). The caller
 * checked the pair's extent for the chunk once (pair_fits), so no copy
 * needs a check of its own. runs may alias out (pair 0): run r is read
 * before copy r overwrites it. */
static void emit_runs(const struct pair *pr, const struct plan_copy *runs,
		      uint64_t nruns, struct plan_copy *out)
{
	const uint64_t sb = pr->src_base, db = pr->dst_base;
	const uint64_t si = pr->src_item, di = pr->dst_item;
	const uint8_t spool = pr->src_pool, dpool = pr->dst_pool;

	for (uint64_t r = 0; r < nruns; r++) {
		const uint64_t so = sb + runs[r].src_off * si;
		const uint64_t dof = db + runs[r].dst_off * di;
		const uint64_t len = runs[r].len * si;

		out[r].src_off = so; /* field by field: no padding stores */
		out[r].dst_off = dof;
		out[r].len = len;
		out[r].src_pool = spool;
		out[r].dst_pool = dpool;
	}
}

/* Emits the copies of one page-indexed pair at out[0..): one per token
 * slot per page when sliced, else one per run of runs[0..nruns). runs may
 * alias out (pair 0): run r is read before copy r overwrites it. */
static int emit_pair(const struct plan *p, const struct pair *pr,
		     const uint32_t *sp, const uint32_t *dp, uint32_t npages,
		     const struct plan_copy *runs, uint64_t nruns,
		     const uint32_t maxp[2], struct plan_copy *out, char *err,
		     size_t errlen)
{
	if (pr->sliced) {
		const struct plan_heads *h = &p->heads;
		uint64_t sslot = pr->src_item / pr->slots;
		uint64_t dslot = pr->dst_item / pr->slots;
		uint64_t len = (uint64_t)h->n_heads * h->head_bytes;
		uint64_t sh = (uint64_t)h->src_head_start * h->head_bytes;
		uint64_t dh = (uint64_t)h->dst_head_start * h->head_bytes;

		for (uint32_t i = 0; i < npages; i++) {
			uint64_t so =
			    pr->src_base + (uint64_t)sp[i] * pr->src_item + sh;
			uint64_t dof =
			    pr->dst_base + (uint64_t)dp[i] * pr->dst_item + dh;

			for (uint32_t t = 0; t < pr->slots; t++) {
				uint64_t s1 = so + t * sslot,
					 d1 = dof + t * dslot;

				if (OUTSIDE(pr, s1, d1, len))
					return out_of_buffer(pr, err, errlen);
				*out++ = (struct plan_copy){
				    s1, d1, len, pr->src_pool, pr->dst_pool};
			}
		}
		return 0;
	}
	/* Every run lies within pages [0, maxp] of each side: one check of
	 * the highest page bounds all of this pair's copies. */
	if (nruns &&
	    OUTSIDE(pr, pr->src_base + (uint64_t)maxp[0] * pr->src_item,
		    pr->dst_base + (uint64_t)maxp[1] * pr->dst_item,
		    (uint64_t)pr->src_item))
		return out_of_buffer(pr, err, errlen);
	emit_runs(pr, runs, nruns, out);
	return 0;
}

int plan_chunk(const struct plan *p, const uint32_t *src_pages,
	       const uint32_t *dst_pages, uint32_t npages, int with_aux,
	       uint32_t src_aux, uint32_t dst_aux, struct plan_copy *out,
	       size_t cap, size_t *n, char *err, size_t errlen)
{
	uint64_t nruns, need;
	uint32_t paged, maxp[2];
	size_t k;
	int rc;

	if (n != NULL)
		*n = 0;
	if (p == NULL || n == NULL || (npages && (!src_pages || !dst_pages)) ||
	    (cap && out == NULL)) {
		kvw_seterr(err, errlen, "plan_chunk: missing argument");
		return KVW_EINVAL;
	}
	if (npages > KVW_MAX_PAGES) {
		kvw_seterr(err, errlen, "chunk of %u pages (max %u)", npages,
			   KVW_MAX_PAGES);
		return KVW_EINVAL;
	}
	rc = chunk_check(p, src_pages, dst_pages, npages, with_aux, src_aux,
			 dst_aux, &nruns, maxp, err, errlen);
	if (rc < 0)
		return rc;
	paged = p->npairs - p->naux - p->nstate;
	need = (uint64_t)(paged - p->nsliced) * nruns +
	       p->sliced_slots * npages +
	       (with_aux ? p->naux : 0);
	*n = (size_t)need;
	if (need > cap) {
		kvw_seterr(err, errlen, "chunk needs %llu copies, room for %zu",
			   (unsigned long long)need, cap);
		return KVW_ENOMEM;
	}
	/* The run table lives in out[0..nruns), which pair 0's own copies
	 * cover (nruns <= npages <= npages x slots), so pairs are emitted last to
	 * first and pair 0 converts the table in place at the end. */
	if (paged > p->nsliced)
		runs_fill(src_pages, dst_pages, npages, out);
	k = (size_t)(need - (with_aux ? p->naux : 0));
	for (uint32_t i = paged; i-- > 0 && rc == 0;) {
		const struct pair *pr = &p->pairs[i];

		k -= pr->sliced ? (uint64_t)npages * pr->slots : nruns;
		rc = emit_pair(p, pr, src_pages, dst_pages, npages, out, nruns,
			       maxp, out + k, err, errlen);
	}
	k = (size_t)(need - (with_aux ? p->naux : 0));
	for (uint32_t i = p->npairs - p->naux; with_aux && i < p->npairs &&
					       rc == 0; i++) {
		const struct pair *pr = &p->pairs[i];
		uint64_t so = pr->src_base + (uint64_t)src_aux * pr->src_item;
		uint64_t dof = pr->dst_base + (uint64_t)dst_aux * pr->dst_item;

		if (OUTSIDE(pr, so, dof, pr->src_item))
			rc = out_of_buffer(pr, err, errlen);
		else
			out[k++] = (struct plan_copy){
			    so, dof, pr->src_item, pr->src_pool, pr->dst_pool};
	}
	if (rc < 0)
		*n = 0;
	return rc;
}

/* Whether a row at so / dof (a row index times the item length, which
 * may have wrapped) leaves either buffer of the pair. */
static int row_outside(const struct pair *pr, uint64_t so, uint64_t dof)
{
	return so < pr->src_base || dof < pr->dst_base ||
	       so + pr->src_item > pr->src_end ||
	       dof + pr->dst_item > pr->dst_end;
}

uint32_t plan_state_max(const struct plan *p, uint32_t comp, uint32_t nrows)
{
	uint32_t n = 0;

	for (uint32_t i = 0; p != NULL && i < p->nstate; i++)
		n += KVW_STATE_OF(p->pairs[p->npairs - p->naux - p->nstate + i]
					  .layer_id) == comp;
	return n * nrows;
}

int plan_state(const struct plan *p, uint32_t comp, const uint32_t *src_rows,
	       const uint32_t *dst_rows, uint32_t nrows, struct plan_copy *out,
	       size_t cap, size_t *n, char *err, size_t errlen)
{
	uint32_t first;
	size_t k = 0;

	if (n != NULL)
		*n = 0;
	if (p == NULL || n == NULL || (nrows && (!src_rows || !dst_rows)) ||
	    (cap && out == NULL))
		return kvw_errf(err, errlen, KVW_EINVAL,
				"plan_state: missing argument");
	if (nrows > KVW_MAX_STATE_IDX)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"%u state rows (max %u)", nrows,
				KVW_MAX_STATE_IDX);
	if (plan_state_max(p, comp, nrows) > cap) {
		*n = plan_state_max(p, comp, nrows);
		return kvw_errf(err, errlen, KVW_ENOMEM,
				"state needs %zu copies, room for %zu", *n,
				cap);
	}
	first = p->npairs - p->naux - p->nstate;
	for (uint32_t i = first; i < first + p->nstate; i++) {
		const struct pair *pr = &p->pairs[i];

		if (KVW_STATE_OF(pr->layer_id) != comp)
			continue;
		for (uint32_t r = 0; r < nrows; r++) {
			uint64_t so = pr->src_base +
				      (uint64_t)src_rows[r] * pr->src_item;
			uint64_t dof = pr->dst_base +
				       (uint64_t)dst_rows[r] * pr->dst_item;

			if (row_outside(pr, so, dof))
				return kvw_errf(err, errlen, KVW_ERANGE,
						"state component %u: row %u "
						"(source) or %u (destination) "
						"outside its %llu/%llu rows",
						comp, src_rows[r], dst_rows[r],
						(unsigned long long)((pr->src_end - pr->src_base) / pr->src_item),
						(unsigned long long)((pr->dst_end - pr->dst_base) / pr->dst_item));
			out[k++] = (struct plan_copy){
				so + pr->row_src_off, dof + pr->row_dst_off,
				pr->row_len, pr->src_pool, pr->dst_pool };
		}
	}
	*n = k;
	return 0;
}
