/*
 * plan.c - the KV layout planner's build step. plan_build pairs source and
 * destination buffers once per (layouts, head slice) by (layer id, role)
 * through a sorted index of each side, checks item lengths, head-slice fit
 * and pool bounds, and keeps one flat array of pairs plus the smallest
 * paired buffer on each side, so plan_chunk (plan_chunk.c) only has to
 * range-check page lists and emit copies.
 */
#include "plan_impl.h"

#include "layout.h"

#include <stdlib.h>

const char *plan_role_str(unsigned role)
{
	static const char *const names[KVW_NROLES] = {"K", "V", "KV", "AUX",
						      "STATE", "KVB"};

	return role < KVW_NROLES ? names[role] : "?";
}

/* Checks that every buffer of a side lies inside its pool. */
static int side_check(const struct plan_side *s, const char *name, char *err,
		      size_t errlen)
{
	if (s == NULL || s->model == NULL || (s->nbufs && s->bufs == NULL) ||
	    s->pool_size == NULL || s->npools == 0) {
		kvw_seterr(err, errlen, "%s layout incomplete", name);
		return KVW_EINVAL;
	}
	if (s->nbufs > KVW_MAX_BUFFERS) {
		kvw_seterr(err, errlen, "%s layout has %u buffers (max %u)",
			   name, s->nbufs, KVW_MAX_BUFFERS);
		return KVW_EINVAL;
	}
	for (uint32_t i = 0; i < s->nbufs; i++) {
		const struct kvw_buf *b = &s->bufs[i];
		uint64_t len, end;

		if (b->role >= KVW_NROLES || b->pool >= s->npools ||
		    b->item_len == 0) {
			kvw_seterr(err, errlen,
				   "%s buffer %u (layer %u): bad role %u, "
				   "pool %u or item length %u",
				   name, i, b->layer_id, b->role, b->pool,
				   b->item_len);
			return KVW_EINVAL;
		}
		len = (uint64_t)b->item_len * b->pages; /* < 2^64: two u32 */
		if (__builtin_add_overflow(b->offset, len, &end) ||
		    end > s->pool_size[b->pool]) {
			kvw_seterr(err, errlen,
				   "%s layer %u role %s: bytes %llu+%llu "
				   "outside pool %u (%llu bytes)",
				   name, b->layer_id, plan_role_str(b->role),
				   (unsigned long long)b->offset,
				   (unsigned long long)len, b->pool,
				   (unsigned long long)s->pool_size[b->pool]);
			return KVW_EINVAL;
		}
	}
	return 0;
}

/* (layer, role) key of a buffer and where it sits in its side's array. */
struct keyed {
	uint64_t key;
	uint32_t idx;
};

static int keyed_cmp(const void *a, const void *b)
{
	uint64_t x = ((const struct keyed *)a)->key;
	uint64_t y = ((const struct keyed *)b)->key;

	return (x > y) - (x < y);
}

static uint64_t buf_key(const struct kvw_buf *b)
{
	return (uint64_t)b->layer_id << 8 | b->role;
}

/* Fills tab with side s's non-AUX buffers sorted by (layer, role); a key
 * present twice is an error. */
static int side_index(const struct plan_side *s, const char *name,
		      struct keyed *tab, uint32_t *n, char *err, size_t errlen)
{
	uint32_t k = 0;

	for (uint32_t i = 0; i < s->nbufs; i++)
		if (s->bufs[i].role != KVW_ROLE_AUX)
			tab[k++] = (struct keyed){buf_key(&s->bufs[i]), i};
	qsort(tab, k, sizeof *tab, keyed_cmp);
	for (uint32_t i = 1; i < k; i++) {
		if (tab[i].key == tab[i - 1].key) {
			const struct kvw_buf *b = &s->bufs[tab[i].idx];

			kvw_seterr(err, errlen,
				   "%s layout has layer %u role %s twice", name,
				   b->layer_id, plan_role_str(b->role));
			return KVW_EINVAL;
		}
	}
	*n = k;
	return 0;
}

static const struct keyed *side_find(const struct keyed *tab, uint32_t n,
				     uint64_t key)
{
	uint32_t lo = 0, hi = n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (tab[mid].key < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && tab[lo].key == key ? &tab[lo] : NULL;
}

/* Fills *pr for source buffer s and destination buffer d, deciding whether
 * the pair is head-sliced and checking that its item lengths agree. */
static int pair_make(const struct plan *p, const struct kvw_buf *s,
		     const struct kvw_buf *d, const struct plan_heads *h,
		     struct pair *pr, char *err, size_t errlen)
{
	/* A KVB page has twice the token slots of a K or V page, each
	 * sliced the same way (a slot count over 32 bits divides no item
	 * length). */
	uint64_t pt = layout_page_slots(s->role, p->page_tokens);
	int sliceable = h != NULL && (s->role == KVW_ROLE_K ||
				      s->role == KVW_ROLE_V ||
				      s->role == KVW_ROLE_KVB);

	*pr = (struct pair){
	    .src_base = s->offset,
	    .dst_base = d->offset,
	    .src_end = s->offset + (uint64_t)s->item_len * s->pages,
	    .dst_end = d->offset + (uint64_t)d->item_len * d->pages,
	    .src_item = s->item_len,
	    .dst_item = d->item_len,
	    .layer_id = s->layer_id,
	    .slots = (uint32_t)pt, /* used only when sliced: pt <= item */
	    .role = s->role,
	    .src_pool = s->pool,
	    .dst_pool = d->pool,
	};
	if (sliceable) {
		uint64_t src_slot = s->item_len / pt,
			 dst_slot = d->item_len / pt;
		uint64_t width = (uint64_t)h->n_heads * h->head_bytes;

		if (s->item_len % pt || d->item_len % pt) {
			kvw_seterr(err, errlen,
				   "layer %u role %s: item lengths %u/%u are "
				   "not whole token slots of %llu tokens",
				   s->layer_id, plan_role_str(s->role),
				   s->item_len, d->item_len,
				   (unsigned long long)pt);
			return KVW_EINVAL;
		}
		if ((h->src_head_start + (uint64_t)h->n_heads) * h->head_bytes >
			src_slot ||
		    (h->dst_head_start + (uint64_t)h->n_heads) * h->head_bytes >
			dst_slot) {
			kvw_seterr(err, errlen,
				   "layer %u role %s: head slice of %u heads "
				   "at src %u/dst %u (%u bytes each) does not "
				   "fit token slots of %llu/%llu bytes",
				   s->layer_id, plan_role_str(s->role),
				   h->n_heads, h->src_head_start,
				   h->dst_head_start, h->head_bytes,
				   (unsigned long long)src_slot,
				   (unsigned long long)dst_slot);
			return KVW_EINVAL;
		}
		/* A slice that is the whole of two equal slots is a page copy.
		 */
		pr->sliced =
		    !(h->src_head_start == 0 && h->dst_head_start == 0 &&
		      width == src_slot && width == dst_slot);
	}
	/* (STATE rows of two sizes are one row split over TP: state_pairs.) */
	if (!pr->sliced && s->item_len != d->item_len &&
	    s->role != KVW_ROLE_STATE) {
		kvw_seterr(err, errlen,
			   "layer %u role %s: item length %u on source, %u on "
			   "destination",
			   s->layer_id, plan_role_str(s->role), s->item_len,
			   d->item_len);
		return KVW_EINVAL;
	}
	return 0;
}

static int heads_check(const struct plan_side *src, const struct plan_heads *h,
		       char *err, size_t errlen)
{
	if (h == NULL)
		return 0;
	if (h->n_heads == 0 || h->head_bytes == 0) {
		kvw_seterr(err, errlen, "head slice of %u heads of %u bytes",
			   h->n_heads, h->head_bytes);
		return KVW_EINVAL;
	}
	if (src->model->head_bytes && src->model->head_bytes != h->head_bytes) {
		kvw_seterr(err, errlen,
			   "head slice says %u bytes per head, model %u",
			   h->head_bytes, src->model->head_bytes);
		return KVW_EINVAL;
	}
	return 0;
}

/* The part of a row a sharded state component's pair copies under a TP
 * mismatch (SGLang slices Mamba rows so, by the sharded dim, outermost in
 * a row): rank r of tp holds part r of every row. With more prefill ranks
 * (k = ptp / dtp of them per decode rank) a prefill rank's whole row is
 * part (prank % k) of the decode's; with more decode ranks a decode rank's
 * whole row is part (drank % k) of the prefill's. Rows that do not split
 * so are an error. */
static int state_row_part(struct pair *pr, const struct plan_heads *h,
			  char *err, size_t errlen)
{
	uint32_t s = pr->src_item, d = pr->dst_item, k;

	if (h == NULL || h->src_tp == 0 || h->dst_tp == 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"state component %u: rows of %u bytes on "
				"source, %u on destination, and no TP sizes "
				"to split them by", KVW_STATE_OF(pr->layer_id),
				s, d);
	if (h->src_tp > h->dst_tp && h->src_tp % h->dst_tp == 0 &&
	    (uint64_t)s * (k = h->src_tp / h->dst_tp) == d) {
		pr->row_dst_off = h->src_rank % k * s;
		pr->row_len = s;
		return 0;
	}
	if (h->dst_tp > h->src_tp && h->dst_tp % h->src_tp == 0 &&
	    (uint64_t)d * (k = h->dst_tp / h->src_tp) == s) {
		pr->row_src_off = h->dst_rank % k * d;
		pr->row_len = d;
		return 0;
	}
	return kvw_errf(err, errlen, KVW_EINVAL,
			"state component %u: rows of %u bytes on source "
			"(tp %u), %u on destination (tp %u) are not one row "
			"split over TP", KVW_STATE_OF(pr->layer_id), s,
			h->src_tp, d, h->dst_tp);
}

/* Pairs STATE buffers by (layer id, role) like K and V, never head-sliced,
 * after the page-indexed pairs (p->npairs grows by p->nstate): a state
 * component's rows are indexed by the room's state lists, not its pages.
 * Rows of different sizes are a TP mismatch of a sharded component (each
 * rank holds 1/tp of a row): the pair copies this rank pair's part of a
 * row (state_row_part). */
static int state_pairs(struct plan *p, const struct plan_side *src,
		       const struct plan_side *dst, const struct keyed *dtab,
		       uint32_t nd, const struct plan_heads *h, char *err,
		       size_t errlen)
{
	for (uint32_t i = 0; i < src->nbufs; i++) {
		const struct kvw_buf *s = &src->bufs[i];
		const struct keyed *f;
		struct pair *pr;
		int rc;

		if (s->role != KVW_ROLE_STATE)
			continue;
		f = side_find(dtab, nd, buf_key(s));
		if (f == NULL)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"state component %u layer %u has no "
					"destination", KVW_STATE_OF(s->layer_id),
					s->layer_id & 0xFFFFu);
		pr = &p->pairs[p->npairs];
		if ((rc = pair_make(p, s, &dst->bufs[f->idx], NULL, pr, err,
				    errlen)) < 0)
			return rc;
		pr->row_len = s->item_len;
		if (s->item_len != dst->bufs[f->idx].item_len &&
		    (rc = state_row_part(pr, h, err, errlen)) < 0)
			return rc;
		p->npairs++;
		p->nstate++;
	}
	return 0;
}

/* Pairs AUX buffers by their order among AUX buffers, after the npairs
 * page-indexed and state pairs already in p. */
static int aux_pairs(struct plan *p, const struct plan_side *src,
		     const struct plan_side *dst, char *err, size_t errlen)
{
	uint32_t j = 0, k = 0, want = 0, have = 0;

	for (uint32_t i = 0; i < src->nbufs; i++)
		want += src->bufs[i].role == KVW_ROLE_AUX;
	for (uint32_t i = 0; i < dst->nbufs; i++)
		have += dst->bufs[i].role == KVW_ROLE_AUX;
	if (want > have) {
		kvw_seterr(err, errlen,
			   "source has %u AUX buffers, destination %u", want,
			   have);
		return KVW_EINVAL;
	}
	for (uint32_t i = 0; i < src->nbufs; i++) {
		const struct kvw_buf *s = &src->bufs[i], *d;
		int rc;

		if (s->role != KVW_ROLE_AUX)
			continue;
		while (dst->bufs[j].role != KVW_ROLE_AUX)
			j++;
		d = &dst->bufs[j++];
		rc = pair_make(p, s, d, NULL, &p->pairs[p->npairs + k], err,
			       errlen);
		if (rc < 0)
			return rc;
		if (s->pages < p->src_aux_min)
			p->src_aux_min = s->pages;
		if (d->pages < p->dst_aux_min)
			p->dst_aux_min = d->pages;
		k++;
	}
	p->naux = k;
	return 0;
}

int plan_build(const struct plan_side *src, const struct plan_side *dst,
	       const struct plan_heads *heads, struct plan **out, char *err,
	       size_t errlen)
{
	struct keyed *stab = NULL, *dtab = NULL;
	struct plan *p = NULL;
	uint32_t ns = 0, nd = 0;
	int rc;

	if (out == NULL) {
		kvw_seterr(err, errlen, "no output for the plan");
		return KVW_EINVAL;
	}
	*out = NULL;
	if ((rc = side_check(src, "source", err, errlen)) < 0 ||
	    (rc = side_check(dst, "destination", err, errlen)) < 0 ||
	    (rc = plan_models_compat(src->model, dst->model, err, errlen)) <
		0 ||
	    (rc = heads_check(src, heads, err, errlen)) < 0)
		return rc;

	rc = KVW_ENOMEM;
	p = calloc(1, sizeof *p + (size_t)src->nbufs * sizeof p->pairs[0]);
	stab = malloc((src->nbufs + 1) * sizeof *stab);
	dtab = malloc((dst->nbufs + 1) * sizeof *dtab);
	if (p == NULL || stab == NULL || dtab == NULL) {
		kvw_seterr(err, errlen, "out of memory building a plan");
		goto fail;
	}
	p->page_tokens = src->model->page_tokens;
	if (heads != NULL)
		p->heads = *heads;
	p->src_min_pages = p->dst_min_pages = UINT32_MAX;
	p->src_aux_min = p->dst_aux_min = UINT32_MAX;
	if ((rc = side_index(src, "source", stab, &ns, err, errlen)) < 0 ||
	    (rc = side_index(dst, "destination", dtab, &nd, err, errlen)) < 0)
		goto fail;

	for (uint32_t i = 0; i < src->nbufs; i++) {
		const struct kvw_buf *s = &src->bufs[i], *d;
		const struct keyed *f;
		struct pair *pr = &p->pairs[p->npairs];

		if (s->role == KVW_ROLE_AUX || s->role == KVW_ROLE_STATE)
			continue;
		f = side_find(dtab, nd, buf_key(s));
		if (f == NULL) {
			/* Pages pair by role: a block-major side (K and V
			 * of a block in one page) with a split one would
			 * need every page cut in two. */
			kvw_seterr(err, errlen,
				   "layer %u role %s has no destination%s",
				   s->layer_id, plan_role_str(s->role),
				   s->role == KVW_ROLE_KVB ||
					   side_find(dtab, nd,
						     (uint64_t)s->layer_id << 8 |
							 KVW_ROLE_KVB)
				       ? " (vLLM's block-major layout pairs "
					 "only with itself: both sides need "
					 "--kv-layout vllm-blocks)"
				       : "");
			rc = KVW_EINVAL;
			goto fail;
		}
		d = &dst->bufs[f->idx];
		if ((rc = pair_make(p, s, d, heads, pr, err, errlen)) < 0)
			goto fail;
		p->nsliced += pr->sliced;
		p->sliced_slots += pr->sliced ? pr->slots : 0;
		if (s->pages < p->src_min_pages) {
			p->src_min_pages = s->pages;
			p->src_min_at = p->npairs;
		}
		if (d->pages < p->dst_min_pages) {
			p->dst_min_pages = d->pages;
			p->dst_min_at = p->npairs;
		}
		p->npairs++;
	}
	if ((rc = state_pairs(p, src, dst, dtab, nd, heads, err, errlen)) <
		0 ||
	    (rc = aux_pairs(p, src, dst, err, errlen)) < 0)
		goto fail;
	p->npairs += p->naux;
	free(stab);
	free(dtab);
	*out = p;
	return 0;
fail:
	free(stab);
	free(dtab);
	free(p);
	return rc;
}

void plan_free(struct plan **p)
{
	if (p == NULL)
		return;
	free(*p);
	*p = NULL;
}

uint32_t plan_npairs(const struct plan *p)
{
	return p ? p->npairs : 0;
}

uint32_t plan_naux(const struct plan *p)
{
	return p ? p->naux : 0;
}

uint32_t plan_nstate(const struct plan *p)
{
	return p ? p->nstate : 0;
}
