/*
 * bench_inst.c - the instances kv-bench drives (bench_impl.h): each
 * group's engines opened and closed, the rooms' slots, which pair of
 * instances a room runs between (--peers, --route), whether every member
 * is still there, and how many rooms each pair carried.
 */
#include "bench_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_gpu.h"

/* --engine-memory: the engine's KV in host memory of its own, one
 * allocation per buffer as SGLang's per-layer tensors are, registered in
 * place; the pattern is then written and checked through kvw_pool_base,
 * which shows that memory, so every byte checked went through it. */
static int own_memory(struct run *r, struct eng *x, uint32_t n)
{
	struct kvw_host_buf *hb = calloc(n ? n : 1, sizeof *hb);
	uint32_t k = 0;
	int rc = 0;

	if (hb == NULL)
		return KVW_ENOMEM;
	for (uint32_t i = 0; rc == 0 && i < n; i++) {
		uint64_t len = (uint64_t)x->bufs[i].pages * x->bufs[i].item_len;
		void *p;

		if (x->bufs[i].role == KVW_ROLE_AUX)
			continue; /* metadata rows stay in the pool */
		rc = kvw_alloc(x->e, len, &p, r->err, r->errlen);
		hb[k++] = (struct kvw_host_buf){ (uint64_t)(uintptr_t)p, len,
			x->bufs[i].item_len, x->bufs[i].layer_id,
			x->bufs[i].role };
	}
	if (rc == 0)
		rc = kvw_register_host(x->e, x->bufs, n, hb, k, r->err,
				       r->errlen);
	free(hb);
	return rc;
}

static int open_side(struct run *r, struct eng *x, const struct shape *s,
		     int decode)
{
	const struct runinfo_member *m = x->m;
	uint64_t need;
	uint32_t n;
	int rc;

	x->bufs = calloc(MAX_BUFS, sizeof *x->bufs);
	if (x->bufs == NULL)
		return KVW_ENOMEM;
	rc = shape_layout(s, &m->topo, &m->rank, decode, x->bufs, MAX_BUFS, &n,
			  &need, r->err, r->errlen);
	if (rc < 0)
		return rc;
	bench_geom_init(&x->g, s, &m->topo, &m->rank, x->bufs, n);
	rc = kvw_engine_open(m->engine, m->table, m->pool, &x->e, r->err,
			     r->errlen);
	if (rc == 0 && r->c->hop_ns)
		rc = rtab_open(m->table, 0, &x->tab, r->err, r->errlen);
	if (rc < 0)
		return rc;
	if (kvw_pool_size(x->e) < need) {
		snprintf(r->err, r->errlen, "%s: pool %s has %llu bytes, the "
			 "shape needs %llu: give kv-bench the group's shape "
			 "flags", m->name, m->pool,
			 (unsigned long long)kvw_pool_size(x->e),
			 (unsigned long long)need);
		return KVW_EINVAL;
	}
	if (r->c->engine_memory)
		return own_memory(r, x, n);
	return !r->c->cuda ? 0 : bgpu_attach(&x->g.gpu, x->e, x->bufs, n,
		decode ? r->c->decode_gpu : 0, r->err, r->errlen);
}

/* Opens one instance: the engines of its prefill and decode members
 * (--role: this host's side only) and its pools' page allocators. */
static int setup_inst(struct run *r, struct inst *in, const struct runinfo *ri)
{
	const struct bench_config *c = r->c;
	uint32_t np = runinfo_nrole(ri, RUNINFO_PREFILL);
	uint32_t nd = runinfo_nrole(ri, RUNINFO_DECODE), k;
	int rc;

	in->boot = runinfo_bootstrap(ri);
	/* --role: this host's side only (the other is the peer's). */
	np = c->role == BENCH_ROLE_DECODE ? 0 : np;
	nd = c->role == BENCH_ROLE_PREFILL ? 0 : nd;
	if ((c->prefill_ranks && np && c->prefill_ranks != np) ||
	    (c->decode_ranks && nd && c->decode_ranks != nd)) {
		snprintf(r->err, r->errlen, "the group%s%s has %u prefill and "
			 "%u decode members, not %u and %u",
			 r->ninst > 1 ? " of " : "", r->ninst > 1 ? in->dir : "",
			 np, nd, c->prefill_ranks ? c->prefill_ranks : np,
			 c->decode_ranks ? c->decode_ranks : nd);
		return KVW_EINVAL;
	}
	if (np > MAX_RANKS || nd > MAX_RANKS || (np && !in->boot)) {
		snprintf(r->err, r->errlen, "endpoints need a bootstrap and "
			 "1..%u prefill and decode members (have %s, %u, %u)",
			 MAX_RANKS, in->boot ? "bootstrap" : "no bootstrap", np,
			 nd);
		return KVW_EINVAL;
	}
	for (k = 0; k < np; k++) {
		in->p[k].m = runinfo_nth(ri, RUNINFO_PREFILL, k);
		in->np = k + 1;
		if ((rc = open_side(r, &in->p[k], &c->shape, 0)) < 0)
			return rc;
	}
	for (k = 0; k < nd; k++) {
		in->d[k].m = runinfo_nth(ri, RUNINFO_DECODE, k);
		in->nd = k + 1;
		if ((rc = open_side(r, &in->d[k], &c->shape, 1)) < 0)
			return rc;
		in->room_bytes += bench_room_bytes(&in->d[k].g,
						   c->pages_per_room);
	}
	if (bench_alloc_init(&in->pa, c->shape.pages) ||
	    bench_alloc_init(&in->da, c->shape.pages) ||
	    bench_alloc_init(&in->paux, c->shape.aux_slots) ||
	    bench_alloc_init(&in->daux, c->shape.aux_slots))
		return KVW_ENOMEM;
	return 0;
}

/* The instances: --run-dir's group, then each of --peers. */
static int setup_instances(struct run *r, const struct runinfo *ri)
{
	const struct bench_config *c = r->c;
	int rc;

	r->ninst = 1 + c->npeers;
	r->in[0].dir = c->run_dir ? c->run_dir : "the group";
	for (uint32_t i = 0; i < c->npeers; i++) {
		r->in[1 + i].dir = c->peers[i];
		struct shape sh;

		rc = runinfo_load(c->peers[i], &r->in[1 + i].own, r->err,
				  r->errlen);
		if (rc < 0)
			return rc;
		/* One pattern for every pool: the same shape everywhere. */
		shape_default(&sh);
		if (runinfo_shape_apply(runinfo_shape(r->in[1 + i].own), &sh,
					r->err, r->errlen) < 0 ||
		    memcmp(&sh, &c->shape, sizeof sh) != 0)
			return kvw_errf(r->err, r->errlen, KVW_EINVAL,
					"--peers %s: its group's shape is not "
					"--run-dir's: the groups of one xPyD "
					"deployment share one shape",
					c->peers[i]);
	}
	for (uint32_t i = 0; i < r->ninst; i++) {
		struct inst *in = &r->in[i];

		rc = setup_inst(r, in, i ? in->own : ri);
		if (rc < 0)
			return rc;
		if (in->np)
			r->pin[r->npin++] = i;
		if (in->nd)
			r->din[r->ndin++] = i;
		r->maxp = in->np > r->maxp ? in->np : r->maxp;
		r->maxd = in->nd > r->maxd ? in->nd : r->maxd;
	}
	/* --role decode: the rooms name the bootstrap its endpoints list. */
	if ((r->npin == 0 && c->role != BENCH_ROLE_DECODE) ||
	    (r->ndin == 0 && c->role != BENCH_ROLE_PREFILL) ||
	    (r->npin == 0 && !r->in[0].boot)) {
		snprintf(r->err, r->errlen, "endpoints need a bootstrap and "
			 "1..%u prefill and decode members (have %s, %u, %u)",
			 MAX_RANKS, r->in[0].boot ? "bootstrap" : "no bootstrap",
			 r->maxp, r->maxd);
		return KVW_EINVAL;
	}
	r->pairs = calloc((size_t)r->ninst * r->ninst, sizeof *r->pairs);
	r->pairs_ok = calloc((size_t)r->ninst * r->ninst, sizeof *r->pairs_ok);
	return r->pairs && r->pairs_ok ? 0 : KVW_ENOMEM;
}

int bench_setup(struct run *r, const struct runinfo *ri)
{
	const struct bench_config *c = r->c;
	uint32_t k, np, nd;
	int rc;

	if (c->pages_per_room == 0 || c->pages_per_room > c->shape.pages ||
	    c->pages_per_room > KVW_MAX_PAGES || c->chunk_pages == 0 ||
	    c->concurrency == 0 || c->rooms == 0) {
		snprintf(r->err, r->errlen, "need 1 <= pages-per-room <= %u "
			 "(--pages), chunk-pages, concurrency and rooms >= 1",
			 c->shape.pages);
		return KVW_EINVAL;
	}
	if ((rc = setup_instances(r, ri)) < 0)
		return rc;
	np = r->maxp;
	nd = r->maxd;
	r->nslots = c->concurrency * (c->role == BENCH_ROLE_PREFILL ? 2 : 1);
	r->rooms = calloc(r->nslots, sizeof *r->rooms);
	if (r->rooms == NULL)
		return KVW_ENOMEM;
	for (k = 0; k < r->nslots; k++) {
		struct room *x = &r->rooms[k];

		x->src = calloc(c->pages_per_room, sizeof *x->src);
		x->dst = calloc(c->pages_per_room, sizeof *x->dst);
		x->cur = calloc(np + 1, sizeof *x->cur); /* + 1: one side */
		x->pf = calloc(np + 1, 1);               /* may have none */
		x->df = calloc(nd + 1, 1);
		x->pe = calloc(np + 1, sizeof *x->pe);
		x->de = calloc(nd + 1, sizeof *x->de);
		if (!x->src || !x->dst || !x->cur || !x->pf || !x->df ||
		    !x->pe || !x->de)
			return KVW_ENOMEM;
		x->pi = x->di = &r->in[0];
	}
	return 0;
}

void bench_teardown(struct run *r)
{
	for (uint32_t i = 0; i < r->ninst; i++) {
		struct inst *in = &r->in[i];

		for (uint32_t k = 0; k < in->np + in->nd; k++) {
			struct eng *x = k < in->np ? &in->p[k]
						   : &in->d[k - in->np];

			kvw_engine_close(&x->e); /* withdraws the GPU pool */
			rtab_close(&x->tab);
			bgpu_close(&x->g.gpu);
			free(x->bufs);
		}
		bench_alloc_fini(&in->pa);
		bench_alloc_fini(&in->da);
		bench_alloc_fini(&in->paux);
		bench_alloc_fini(&in->daux);
		runinfo_free(&in->own);
	}
	for (uint32_t k = 0; r->rooms && k < r->nslots; k++) {
		free(r->rooms[k].src);
		free(r->rooms[k].dst);
		free(r->rooms[k].cur);
		free(r->rooms[k].pf);
		free(r->rooms[k].df);
		free(r->rooms[k].pe);
		free(r->rooms[k].de);
	}
	free(r->rooms);
	for (uint32_t i = 0; i < r->ncan; i++)
		free(r->can[i].dst);
	free(r->can);
	free(r->pairs);
	free(r->pairs_ok);
}

/* The pair of instances room x runs between: --route rr walks every
 * (prefill, decode) pair in turn, random draws one; a side with no
 * instance here (--role) is instance 0, which has no ranks of it. */
void bench_route(struct run *r, struct room *x)
{
	uint64_t k = r->routed, p = 0, d = 0;

	if (r->c->route == BENCH_ROUTE_RANDOM) {
		k = (k + 1) * 0x9e3779b97f4a7c15ULL ^ r->arng;
		k = (k ^ (k >> 31)) * 0xbf58476d1ce4e5b9ULL;
		k ^= k >> 29;
	}
	if (r->npin)
		p = r->pin[k % r->npin];
	if (r->ndin)
		d = r->din[(k / (r->npin ? r->npin : 1)) % r->ndin];
	x->pi = &r->in[p];
	x->di = &r->in[d];
}

/* One member's control process: 0 while it is there (or restarting for
 * less than GROUP_DOWN_NS), else KVW_EPEER naming the member. */
static int member_check(struct run *r, struct eng *x, uint64_t now)
{
	int rc = kvw_control_check(x->e);

	if (rc == 0)
		x->down_since = 0;
	else if (!x->down_since)
		x->down_since = now;
	if (rc == KVW_ENOENT || (rc && now - x->down_since >= GROUP_DOWN_NS))
		return kvw_errf(r->err, r->errlen, KVW_EPEER,
				"member %s is gone: %s", x->m->name,
				rc == KVW_ENOENT ? "its room table was removed"
						 : "no process has owned its "
						   "room table for 10 s");
	return 0;
}

/* Every member the bench drives: 0, or KVW_EPEER (see member_check). */
int bench_group_check(struct run *r, uint64_t now)
{
	int rc = 0;

	for (uint32_t i = 0; i < r->ninst && rc == 0; i++) {
		struct inst *in = &r->in[i];

		for (uint32_t k = 0; k < in->np + in->nd && rc == 0; k++)
			rc = member_check(r, k < in->np ? &in->p[k]
							: &in->d[k - in->np],
					  now);
	}
	return rc;
}

/* --peers: how many rooms ran over each (prefill, decode) pair and how
 * many of them succeeded, on stderr (the summary line on stdout keeps its
 * form). */
void bench_tell_routes(const struct run *r)
{
	const char *sep = "";

	fprintf(stderr, "kv-bench: rooms by route (prefill -> decode):");
	for (uint32_t p = 0; p < r->ninst; p++)
		for (uint32_t d = 0; d < r->ninst; d++)
			if (r->pairs[p * r->ninst + d]) {
				fprintf(stderr, "%s %s -> %s %u (%u ok)", sep,
					r->in[p].dir, r->in[d].dir,
					r->pairs[p * r->ninst + d],
					r->pairs_ok[p * r->ninst + d]);
				sep = ",";
			}
	fputc('\n', stderr);
}
