/*
 * api_group.c - kvw_group_read and kvw_pool_layout (api.h): the run
 * directory's endpoints file and the pool layout rules of lib/plan, handed
 * to engines through the public structs.
 */
#include "api.h"

#include <stdio.h>
#include <string.h>

#include "plan/runinfo.h"
#include "plan/shape.h"

/* The public mirror of struct shape, field for field. */
static void shape_in(const struct kvw_shape *in, struct shape *s)
{
	*s = (struct shape){
		.layers = in->layers, .draft_layers = in->draft_layers,
		.page_tokens = in->page_tokens, .kv_heads = in->kv_heads,
		.head_dim = in->head_dim, .dtype_bytes = in->dtype_bytes,
		.pages = in->pages, .aux_slots = in->aux_slots,
		.naux = in->naux, .mla = in->mla != 0,
		.kv_layout = in->kv_layout,
	};
	memcpy(s->aux_bytes, in->aux_bytes, sizeof s->aux_bytes);
	s->nstate = in->nstate;
	memcpy(s->state, in->state, sizeof s->state);
}

static void shape_out(const struct shape *s, struct kvw_shape *out)
{
	*out = (struct kvw_shape){
		.layers = s->layers, .draft_layers = s->draft_layers,
		.page_tokens = s->page_tokens, .kv_heads = s->kv_heads,
		.head_dim = s->head_dim, .dtype_bytes = s->dtype_bytes,
		.pages = s->pages, .aux_slots = s->aux_slots,
		.naux = s->naux, .mla = s->mla != 0,
		.kv_layout = s->kv_layout,
	};
	memcpy(out->aux_bytes, s->aux_bytes, sizeof out->aux_bytes);
	out->nstate = s->nstate;
	memcpy(out->state, s->state, sizeof out->state);
}
_Static_assert(sizeof(((struct kvw_shape *)0)->state) ==
		       sizeof(((struct shape *)0)->state),
	       "the public shape holds every state component");
_Static_assert(sizeof(((struct kvw_shape *)0)->aux_bytes) ==
		       sizeof(((struct shape *)0)->aux_bytes),
	       "the public shape holds every metadata buffer");

static void member_out(const struct runinfo_member *m, struct kvw_member *o)
{
	memset(o, 0, sizeof *o);
	snprintf(o->name, sizeof o->name, "%s", m->name);
	o->role = m->role; /* enum runinfo_role has KVW_MEMBER_*'s values */
	o->topo = m->topo;
	o->rank = m->rank;
	snprintf(o->listen, sizeof o->listen, "%s", m->listen);
	snprintf(o->engine, sizeof o->engine, "%s", m->engine);
	snprintf(o->table, sizeof o->table, "%s", m->table);
	snprintf(o->pool, sizeof o->pool, "%s", m->pool);
}

_Static_assert(RUNINFO_PREFILL == KVW_MEMBER_PREFILL &&
		       RUNINFO_DECODE == KVW_MEMBER_DECODE &&
		       RUNINFO_HEARTBEAT == KVW_MEMBER_HEARTBEAT &&
		       RUNINFO_BOOTSTRAP == KVW_MEMBER_BOOTSTRAP,
	       "member roles are runinfo's");
_Static_assert(RUNINFO_NAME_MAX < sizeof(((struct kvw_member *)0)->name) &&
		       KVW_MAX_STR < sizeof(((struct kvw_member *)0)->pool),
	       "a member's strings fit");

int kvw_group_read(const char *run_dir, struct kvw_member *out, uint32_t cap,
		   uint32_t *n, struct kvw_shape *shape, char *err,
		   size_t errlen)
{
	struct runinfo *ri = NULL;
	struct shape s;
	uint32_t count;
	int rc;

	if (!run_dir || !n || (cap && !out))
		return kvw_errf(err, errlen, KVW_EINVAL, "NULL argument");
	*n = 0;
	rc = runinfo_load(run_dir, &ri, err, errlen);
	if (rc < 0)
		return rc;
	count = runinfo_count(ri);
	shape_default(&s);
	rc = runinfo_shape_apply(runinfo_shape(ri), &s, err, errlen);
	if (rc == 0 && count > cap)
		rc = kvw_errf(err, errlen, KVW_ENOMEM, "%u members, room for %u",
			      count, cap);
	if (rc == 0)
		for (uint32_t i = 0; i < count; i++)
			member_out(runinfo_member(ri, i), &out[i]);
	if (rc == 0 && shape)
		shape_out(&s, shape);
	if (rc == 0 || rc == KVW_ENOMEM)
		*n = count;
	runinfo_free(&ri);
	return rc;
}

int kvw_pool_layout(const struct kvw_shape *shape, const struct kvw_topo *topo,
		    const struct kvw_coord *rank, int decode,
		    struct kvw_buf *bufs, uint32_t cap,
		    struct kvw_rank_layout *out, char *err, size_t errlen)
{
	struct kvw_model model;
	struct shape s;
	int rc;

	if (!shape || !topo || !rank || !out || (cap && !bufs))
		return kvw_errf(err, errlen, KVW_EINVAL, "NULL argument");
	memset(out, 0, sizeof *out);
	if (!topo->tp || !topo->pp || rank->tp >= topo->tp ||
	    rank->pp >= topo->pp)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"rank %u,%u outside topology %u,%u", rank->tp,
				rank->pp, topo->tp, topo->pp);
	shape_in(shape, &s);
	rc = shape_layout(&s, topo, rank, decode != 0, bufs, cap, &out->nbufs,
			  &out->pool_bytes, err, errlen);
	if (rc < 0 && rc != KVW_ENOMEM)
		return rc;
	shape_layers(&s, topo, rank, &out->first_layer, &out->layers);
	shape_model(&s, topo, rank, &model);
	out->rank_kv_heads = model.rank_kv_heads;
	return rc;
}
