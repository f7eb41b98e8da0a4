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
#include "base/proc.h"

/* A rank's epoch is gone once nothing carrying it (its BOOT_REGISTER, the
 * PINGs kv-sender sends every 0.8 - 1.2 s) came for this long: longer
 * than a PING gap, short enough that a restarted rank (whose start waits
 * on this) is back within about a heartbeat or two. */
#define BOOT_GONE_NS 1500000000ull

struct boot_rank {
	int used;
	char endpoint[FRAME_STR_SIZE];
	struct kvw_model model;
	uint32_t layer_first, layer_count;
	uint64_t epoch; /* of the rank's last BOOT_REGISTER */
	uint64_t heard_ns; /* last BOOT_REGISTER or PING carrying that epoch */
};

struct boot {
	uint64_t epoch;
	int have_topo;          /* set by the first accepted registration */
	struct kvw_topo topo;
	struct kvw_model model; /* instance model, of that registration */
	uint32_t expected;      /* tp*pp*cp*dp once have_topo */
	uint32_t registered;    /* distinct used slots */
	uint64_t gone_ns;       /* BOOT_GONE_NS, or what a test set */
	uint64_t unauthorised;  /* registrations refused for a live rank */
	struct boot_rank *ranks; /* BOOT_MAX_RANKS entries */
};

struct boot *boot_open(uint64_t epoch, char *err, size_t errlen)
{
	struct boot *b = calloc(1, sizeof *b);

	if (!b)
		goto fail;
	b->epoch = epoch;
	b->gone_ns = BOOT_GONE_NS;
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

uint64_t boot_unauthorised(const struct boot *b)
{
	return b->unauthorised;
}

void boot_set_gone_ns(struct boot *b, uint64_t ns)
{
	b->gone_ns = ns;
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

/* Whether BOOT_REGISTER req may take the used slot e (issue 14; the rule
 * and why in docs/SECURITY.md). The same epoch is the same process: only
 * an identical retry (its first reply may have been lost) is accepted,
 * as a process never changes its endpoint, model or layers. Another epoch
 * takes the slot only once e's epoch is gone (nothing carrying it for
 * gone_ns); until then NOT_READY, so a restarted rank retries and gets in
 * while a second process claiming a live rank never does. Refusals are
 * counted. */
static int may_replace(struct boot *b, struct boot_rank *e,
		       const struct frame_msg *req, struct frame_boot_reply *o)
{
	const struct frame_boot_register *r = &req->u.boot_register;
	uint64_t now = proc_now_ns();

	if (req->hdr.epoch == e->epoch) {
		if (strcmp(e->endpoint, r->endpoint) == 0 &&
		    memcmp(&e->model, &r->model, sizeof e->model) == 0 &&
		    e->layer_first == r->layer_first &&
		    e->layer_count == r->layer_count)
			return 1;
		b->unauthorised++;
		snprintf(o->text, sizeof o->text, "rank tp=%u pp=%u cp=%u "
			 "dp=%u registered %.80s under this epoch: a process "
			 "keeps its endpoint", r->coord.tp, r->coord.pp,
			 r->coord.cp, r->coord.dp, e->endpoint);
		return 0;
	}
	if (now - e->heard_ns >= b->gone_ns)
		return 1;
	b->unauthorised++;
	o->status = FRAME_BOOT_NOT_READY;
	snprintf(o->text, sizeof o->text, "rank tp=%u pp=%u cp=%u dp=%u is "
		 "live under epoch %016llx: retry once it is gone",
		 r->coord.tp, r->coord.pp, r->coord.cp, r->coord.dp,
		 (unsigned long long)e->epoch);
	return 0;
}

/* A PING from a prefill rank (kv-sender's src_rank is rankmap_unique():
 * (cp * pp_size + pp) * tp_size + tp, the same for every dp) keeps its
 * epoch from going. Other pingers match no slot's epoch. */
static void on_ping(struct boot *b, const struct frame_msg *req)
{
	const struct kvw_topo *t = &b->topo;
	uint32_t u = req->hdr.src_rank;
	struct kvw_coord c;

	if (!b->have_topo || u / t->tp / t->pp >= t->cp)
		return;
	c.tp = u % t->tp;
	c.pp = u / t->tp % t->pp;
	c.cp = u / t->tp / t->pp;
	for (c.dp = 0; c.dp < t->dp; c.dp++) {
		struct boot_rank *e = &b->ranks[slot_of(t, &c)];

		if (e->used && e->epoch == req->hdr.epoch) {
			e->heard_ns = proc_now_ns();
			return;
		}
	}
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
	if (e->used && !may_replace(b, e, req, o))
		return;
	if (!e->used)
		b->registered++;
	e->used = 1;
	memcpy(e->endpoint, r->endpoint, sizeof e->endpoint);
	e->model = r->model;
	e->layer_first = r->layer_first;
	e->layer_count = r->layer_count;
	e->epoch = req->hdr.epoch;
	e->heard_ns = proc_now_ns();
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
		on_ping(b, req);
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
