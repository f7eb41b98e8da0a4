/*
 * boot.c - kv-bootstrap's rank table and request handlers; see boot.h.
 * The table is a flat array indexed by ((dp*cp + cp_i)*tp + tp_i)*pp + pp_i
 * under the fixed topology. Unlike the original HTTP server, which counted
 * every PUT and so let a restarted rank make an instance look complete,
 * readiness here is the number of distinct slots with an entry.
 */
#include "boot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvw.h"

struct boot_rank {
	int used;
	char endpoint[FRAME_STR_SIZE];
	struct kvw_model model;
	uint32_t layer_first, layer_count;
	uint64_t epoch; /* of the rank's last BOOT_REGISTER */
};

struct boot {
	uint64_t epoch;
	int have_topo;          /* set by the first accepted registration */
	struct kvw_topo topo;
	struct kvw_model model; /* instance model, of that registration */
	uint32_t expected;      /* tp*pp*cp*dp once have_topo */
	uint32_t registered;    /* distinct used slots */
	struct boot_rank *ranks; /* BOOT_MAX_RANKS entries */
};

struct boot *boot_open(uint64_t epoch, char *err, size_t errlen)
{
	struct boot *b = calloc(1, sizeof *b);

	if (!b)
		goto fail;
	b->epoch = epoch;
	b->ranks = calloc(BOOT_MAX_RANKS, sizeof *b->ranks);
	if (!b->ranks)
		goto fail;
	return b;
fail:
	kvw_seterr(err, errlen, "boot_open: out of memory");
	boot_close(&b);
	return NULL;
}

void boot_close(struct boot **b)
{
	if (!b || !*b)
		return;
	free((*b)->ranks);
	free(*b);
	*b = NULL;
}

uint32_t boot_registered(const struct boot *b)
{
	return b->registered;
}

uint32_t boot_expected(const struct boot *b)
{
	return b->have_topo ? b->expected : 0;
}

int boot_ready(const struct boot *b)
{
	return b->have_topo && b->registered == b->expected;
}

/* tp*pp*cp*dp, or 0 when it exceeds BOOT_MAX_RANKS (sizes are >= 1: the
 * codec refuses a zero size). */
static uint32_t topo_slots(const struct kvw_topo *t)
{
	uint64_t n = (uint64_t)t->tp * t->pp;

	if (n > BOOT_MAX_RANKS)
		return 0;
	n *= t->cp;
	if (n > BOOT_MAX_RANKS)
		return 0;
	n *= t->dp;
	return n > BOOT_MAX_RANKS ? 0 : (uint32_t)n;
}

static int coord_inside(const struct kvw_topo *t, const struct kvw_coord *c)
{
	return c->tp < t->tp && c->pp < t->pp && c->cp < t->cp && c->dp < t->dp;
}

static uint32_t slot_of(const struct kvw_topo *t, const struct kvw_coord *c)
{
	return ((c->dp * t->cp + c->cp) * t->tp + c->tp) * t->pp + c->pp;
}

static int topo_eq(const struct kvw_topo *a, const struct kvw_topo *b)
{
	return a->tp == b->tp && a->pp == b->pp && a->cp == b->cp &&
	       a->dp == b->dp;
}

/* Checks a registering rank's model against the instance model. Returns 0
 * or -1 with the refusal text in text. */
static int model_conflict(const struct kvw_model *inst,
			  const struct kvw_model *m, char *text, size_t len)
{
	if (m->page_tokens != inst->page_tokens)
		snprintf(text, len, "page size mismatch: instance %u tokens, "
			 "rank %u", inst->page_tokens, m->page_tokens);
	else if (m->dtype != inst->dtype)
		snprintf(text, len, "dtype mismatch: instance %u, rank %u",
			 inst->dtype, m->dtype);
	else if (m->total_kv_heads != inst->total_kv_heads)
		snprintf(text, len, "kv heads mismatch: instance %u, rank %u",
			 inst->total_kv_heads, m->total_kv_heads);
	else if (m->head_bytes != inst->head_bytes)
		snprintf(text, len, "head bytes mismatch: instance %u, rank %u",
			 inst->head_bytes, m->head_bytes);
	else if (m->flags != inst->flags)
		snprintf(text, len, "model flags mismatch: instance 0x%x, "
			 "rank 0x%x", inst->flags, m->flags);
	else
		return 0;
	return -1;
}

static void reply_init(const struct boot *b, const struct frame_msg *req,
		       struct frame_msg *reply, uint32_t status)
{
	frame_msg_init(reply, FRAME_BOOT_REPLY, 0, req->hdr.room, b->epoch);
	reply->u.boot_reply.status = status;
	if (b->have_topo)
		reply->u.boot_reply.topo = b->topo;
}

static void on_register(struct boot *b, const struct frame_msg *req,
			struct frame_msg *reply)
{
	const struct frame_boot_register *r = &req->u.boot_register;
	struct frame_boot_reply *o = &reply->u.boot_reply;
	struct boot_rank *e;
	uint32_t n;

	reply_init(b, req, reply, FRAME_BOOT_REFUSED);
	if (r->endpoint[0] == '\0') {
		snprintf(o->text, sizeof o->text, "empty endpoint");
		return;
	}
	if (b->have_topo && !topo_eq(&b->topo, &r->topo)) {
		snprintf(o->text, sizeof o->text,
			 "topology mismatch: instance tp=%u pp=%u cp=%u dp=%u, "
			 "rank says tp=%u pp=%u cp=%u dp=%u", b->topo.tp,
			 b->topo.pp, b->topo.cp, b->topo.dp, r->topo.tp,
			 r->topo.pp, r->topo.cp, r->topo.dp);
		return;
	}
	if (b->have_topo &&
	    model_conflict(&b->model, &r->model, o->text, sizeof o->text))
		return;
	if (!b->have_topo) {
		n = topo_slots(&r->topo);
		if (n == 0) {
			snprintf(o->text, sizeof o->text,
				 "topology tp=%u pp=%u cp=%u dp=%u has more "
				 "than %u ranks", r->topo.tp, r->topo.pp,
				 r->topo.cp, r->topo.dp, BOOT_MAX_RANKS);
			return;
		}
		b->have_topo = 1;
		b->topo = r->topo;
		b->model = r->model;
		b->expected = n;
		o->topo = b->topo;
	}
	/* The codec already refused a coordinate outside the stated topo,
	 * which now equals the instance topo. */
	e = &b->ranks[slot_of(&b->topo, &r->coord)];
	if (!e->used)
		b->registered++;
	e->used = 1;
	memcpy(e->endpoint, r->endpoint, sizeof e->endpoint);
	e->model = r->model;
	e->layer_first = r->layer_first;
	e->layer_count = r->layer_count;
	e->epoch = req->hdr.epoch;
	o->status = FRAME_BOOT_OK;
	o->coord = r->coord;
}

/* The asker's model against the instance's; see boot.h. */
static int lookup_conflict(const struct kvw_model *inst,
			   const struct kvw_model *ask, char *text, size_t len)
{
	if (ask->page_tokens && ask->page_tokens != inst->page_tokens) {
		snprintf(text, len, "page size mismatch: prefill %u tokens, "
			 "decode %u", inst->page_tokens, ask->page_tokens);
		return -1;
	}
	if (ask->dtype && inst->dtype && ask->dtype != inst->dtype) {
		snprintf(text, len, "dtype mismatch: prefill %u, decode %u",
			 inst->dtype, ask->dtype);
		return -1;
	}
	return 0;
}

static void fill_rank(struct frame_boot_reply *o, const struct boot_rank *e)
{
	o->model = e->model;
	o->layer_first = e->layer_first;
	o->layer_count = e->layer_count;
}

static void on_lookup(struct boot *b, const struct frame_msg *req,
		      struct frame_msg *reply)
{
	const struct frame_boot_lookup *l = &req->u.boot_lookup;
	struct frame_boot_reply *o = &reply->u.boot_reply;
	const struct boot_rank *e;

	reply_init(b, req, reply, FRAME_BOOT_NOT_READY);
	if (!b->have_topo) {
		snprintf(o->text, sizeof o->text, "no rank registered yet");
		return;
	}
	if (lookup_conflict(&b->model, &l->model, o->text, sizeof o->text)) {
		o->status = FRAME_BOOT_REFUSED;
		return;
	}
	if (l->want.tp == FRAME_LOOKUP_TOPO_ONLY) {
		/* The codec guarantees all four are TOPO_ONLY together. */
		if (!boot_ready(b)) {
			snprintf(o->text, sizeof o->text,
				 "%u of %u ranks registered", b->registered,
				 b->expected);
			return;
		}
		o->status = FRAME_BOOT_OK;
		fill_rank(o, &b->ranks[0]);
		return;
	}
	o->status = FRAME_BOOT_NOT_FOUND;
	if (!coord_inside(&b->topo, &l->want)) {
		snprintf(o->text, sizeof o->text,
			 "no rank tp=%u pp=%u cp=%u dp=%u in the topology",
			 l->want.tp, l->want.pp, l->want.cp, l->want.dp);
		return;
	}
	e = &b->ranks[slot_of(&b->topo, &l->want)];
	if (!e->used) {
		snprintf(o->text, sizeof o->text,
			 "rank tp=%u pp=%u cp=%u dp=%u not registered",
			 l->want.tp, l->want.pp, l->want.cp, l->want.dp);
		return;
	}
	o->status = FRAME_BOOT_OK;
	o->coord = l->want;
	memcpy(o->endpoint, e->endpoint, sizeof o->endpoint);
	o->epoch = e->epoch;
	fill_rank(o, e);
}

int boot_handle(struct boot *b, const struct frame_msg *req,
		struct frame_msg *reply, char *err, size_t errlen)
{
	switch (req->hdr.type) {
	case FRAME_PING:
		frame_msg_init(reply, FRAME_PONG, 0, req->hdr.room, b->epoch);
		return 0;
	case FRAME_BOOT_REGISTER:
		on_register(b, req, reply);
		return 0;
	case FRAME_BOOT_LOOKUP:
		on_lookup(b, req, reply);
		return 0;
	}
	return kvw_errf(err, errlen, KVW_EINVAL,
			"%s is not a bootstrap request",
			frame_type_str(req->hdr.type));
}
