/*
 * sender_xfer.c - what kv-sender's control does with a room once it exists:
 * the engine's SEND_BEGIN / SEND_CHUNK / CLEAR, dispatching queued chunks
 * as JOBs (each real destination gets its slice of pages, planned against
 * its layout, split so one JOB stays under KVW_MAX_COPIES), JOB_DONE
 * bookkeeping, and the endings: Success once every real destination's last
 * job is done, Failed with one STATUS to every real destination, ABORT
 * acks once nothing is outstanding, and the deadline sweep.
 */
#include "sender_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/proc.h"
#include "roles/malformed.h"

struct sender_room *sender_room_open(struct sender *s, uint64_t id)
{
	struct sender_room *r = sender_rooms_get(&s->rooms, id);
	struct rtab_ref ref;
	uint64_t deadline;
	int rc;

	if (r && r->cleared && sender_room_gone(s, r)) {
		/* Only its JOB_DONEs were awaited: nothing of it is left in
		 * flight, so the id is free. What it held for a later
		 * incarnation may open the room already. */
		sender_room_retire(s, r);
		r = sender_rooms_get(&s->rooms, id);
	}
	if (r && r->cleared) {
		/* Cleared but still owing ABORT acks or with jobs in flight:
		 * the old incarnation's jobs must drain before the id can be
		 * used again. */
		LOG_RL(LOG_WARN, "room %llu: reused before its previous "
		       "incarnation drained; dropped", (unsigned long long)id);
		return NULL;
	}
	if (r)
		return r;
	deadline = proc_now_ns() + s->room_timeout_ns;
	rc = rtab_insert(s->t, id, 0, deadline, &ref);
	if (rc == KVW_EEXIST) {
		/* An incarnation without private state: one the previous
		 * owner left (failed at start). Nothing more happens to it. */
		LOG_ROOM(LOG_DEBUG, id, "left by a previous incarnation; ignored");
		return NULL;
	}
	if (rc < 0) {
		LOG_RL(LOG_WARN, "room %llu: cannot insert: %s",
		       (unsigned long long)id, kvw_strerror(rc));
		return NULL;
	}
	if (sender_rooms_add(&s->rooms, id, &r) < 0) {
		LOG_ROOM(LOG_ERROR, id, "out of memory");
		rtab_fail(s->t, ref, KVW_R_TRANSFER);
		return NULL;
	}
	r->ref = ref;
	r->worker = SENDER_NO_WORKER;
	if (deadline < s->next_sweep_ns)
		s->next_sweep_ns = deadline;
	return r;
}

/* STATUS(state, reason, text) to destination i of r. */
static void status_to(struct sender *s, const struct sender_room *r,
		      uint32_t i, unsigned state, unsigned reason,
		      const char *text)
{
	struct frame_msg m;

	frame_msg_init(&m, FRAME_STATUS, s->rank, r->id, s->epoch);
	m.u.status.state = (uint8_t)state;
	m.u.status.reason = reason;
	m.u.status.token = r->dst[i].token;
	snprintf(m.u.status.text, FRAME_STR_SIZE, "%s", text ? text : "");
	sender_peer_send(s, r->dst[i].peer, &m);
}

/* STATUS(state, reason, text) to every real destination but the one
 * whose index is skip - 1 (skip 0: none skipped). */
static void send_status(struct sender *s, struct sender_room *r,
			unsigned state, unsigned reason, const char *text,
			uint32_t skip)
{
	for (uint32_t i = 0; i < r->ndst; i++)
		if (!r->dst[i].dummy && i + 1 != skip)
			status_to(s, r, i, state, reason, text);
}

/* When the worker of the room's final job has moved it to Success (and
 * told that job's destination): STATUS(Success) to the other real
 * destinations, once. Every job of a room runs on one worker in order, so
 * that final job's success means every destination's bytes are in.
 * Returns 1 when the room is so finished, else 0. */
static int tell_rest(struct sender *s, struct sender_room *r)
{
	if (r->final_sent || !r->told || rtab_state(s->t, r->ref) != KVW_SUCCESS)
		return 0;
	r->final_sent = 1;
	LOG_ROOM(LOG_DEBUG, r->id, "success (%u pages, %u destinations)",
		 r->cursor, sender_room_nreal(r));
	send_status(s, r, KVW_SUCCESS, KVW_R_NONE, "", r->told);
	return 1;
}

void sender_room_retell(struct sender *s, struct sender_room *r)
{
	if (!r->told || r->told > r->ndst ||
	    rtab_state(s->t, r->ref) != KVW_SUCCESS)
		return;
	status_to(s, r, r->told - 1, KVW_SUCCESS, KVW_R_NONE, "");
	LOG_ROOM(LOG_DEBUG, r->id, "its worker died before its JOB_DONE: "
		 "the final job's destination told again");
}

void sender_room_fail(struct sender *s, struct sender_room *r,
		      unsigned reason, const char *why)
{
	struct rtab_view v;
	int rc = rtab_fail(s->t, r->ref, reason), got;

	sender_room_drop_chunks(r);
	if (rc == 0)
		LOG_ROOM(LOG_INFO, r->id, "failed: %s: %s",
			 kvw_reason_str(reason), why ? why : "");
	if (r->final_sent)
		return;
	got = rtab_get(s->t, r->ref, &v) == 0;
	if (got && v.state == KVW_FAILED) {
		reason = v.reason; /* whoever failed it first tells why */
	} else if (rc != 0) {
		/* Not ours to report (stale), or Success: a worker finished
		 * the room's final job (every job of the room was done in
		 * order before it), so the other destinations hear Success
		 * (that job's own, if its worker died, heard it again from
		 * sender_room_retell). */
		if (got && v.state == KVW_SUCCESS)
			tell_rest(s, r);
		return;
	}
	r->final_sent = 1;
	send_status(s, r, KVW_FAILED, reason, why ? why : kvw_reason_str(reason),
		    0);
}

/* Success from Transferring once every real destination is done. */
static void room_finish(struct sender *s, struct sender_room *r)
{
	if (r->final_sent || !r->last_sent)
		return;
	if (sender_room_nreal(r) && !sender_room_all_done(r))
		return;
	if (tell_rest(s, r))
		return; /* the final job's worker ended the room */
	if (rtab_state(s->t, r->ref) == KVW_WAITING)
		rtab_transition_if(s->t, r->ref, RTAB_M(KVW_WAITING),
				   KVW_TRANSFERRING, 0, NULL);
	if (rtab_transition_if(s->t, r->ref, RTAB_M(KVW_TRANSFERRING),
			       KVW_SUCCESS, 0, NULL) != 0)
		return;
	r->final_sent = 1;
	LOG_ROOM(LOG_DEBUG, r->id, "success (%u pages, %u destinations)",
		 r->cursor, sender_room_nreal(r));
	send_status(s, r, KVW_SUCCESS, KVW_R_NONE, "", 0);
}

int sender_room_gone(struct sender *s, const struct sender_room *r)
{
	struct rtab_view v;

	if (!r->cleared || r->nacks)
		return 0;
	/* A gone incarnation (ESTALE) has nothing outstanding. */
	return r->inflight == 0 || rtab_get(s->t, r->ref, &v) != 0 ||
	       v.outstanding == 0;
}

void sender_room_retire(struct sender *s, struct sender_room *r)
{
	uint64_t id = r->id;
	uint32_t n = r->nheld, required = r->held_required;
	struct sender_dst *held = r->held;

	r->held = NULL;
	r->nheld = r->capheld = 0;
	sender_rooms_del(&s->rooms, id);
	for (uint32_t i = 0; i < n; i++) {
		sender_peer_take_held(s, id, &held[i], required);
		sender_dst_free(&held[i]);
	}
	free(held);
}

void sender_room_acks(struct sender *s, struct sender_room *r)
{
	struct rtab_view v;
	struct frame_msg m;
	uint32_t outstanding = 0;

	if (r->nacks == 0) {
		if (sender_room_gone(s, r))
			sender_room_retire(s, r);
		return;
	}
	/* A gone incarnation (ESTALE) has nothing outstanding: the table
	 * reuses a slot only once its count is zero. */
	if (rtab_get(s->t, r->ref, &v) == 0)
		outstanding = v.outstanding;
	if (!sender_room_ack_due(r, outstanding))
		return;
	for (uint32_t i = 0; i < r->nacks; i++) {
		frame_msg_init(&m, FRAME_ABORT_ACK, s->rank, r->id, s->epoch);
		m.u.abort_ack.token = r->acks[i].token;
		sender_peer_send(s, r->acks[i].peer, &m);
	}
	LOG_ROOM(LOG_DEBUG, r->id, "abort acked to %u targets", r->nacks);
	r->nacks = 0;
	r->ack_deadline_ns = 0;
	if (sender_room_gone(s, r))
		sender_room_retire(s, r);
}

/* Makes sure the scratch holds n copies; 0 or KVW_ENOMEM. */
int sender_scratch(struct sender *s, size_t n)
{
	struct plan_copy *pc;
	struct frame_copy *fc;

	if (n <= s->cap_copies)
		return 0;
	pc = realloc(s->pc, n * sizeof *pc);
	if (!pc)
		return KVW_ENOMEM;
	s->pc = pc;
	fc = realloc(s->fc, n * sizeof *fc);
	if (!fc)
		return KVW_ENOMEM;
	s->fc = fc;
	s->cap_copies = n;
	return 0;
}

/* Index of the room's last real destination (r->ndst when none). */
static uint32_t last_real(const struct sender_room *r)
{
	for (uint32_t i = r->ndst; i-- > 0;)
		if (!r->dst[i].dummy)
			return i;
	return r->ndst;
}

static uint64_t copy_bytes(const struct frame_copy *c, size_t n)
{
	uint64_t b = 0;

	for (size_t i = 0; i < n; i++)
		b += c[i].len;
	return b;
}

/* Adds destination di's state copies to the nc copies of its final job,
 * before its metadata rows (the AUX copies plan_chunk put last), as
 * SGLang sends them: KV, then state, then metadata. */
static int state_join(struct sender *s, struct sender_room *r, uint32_t di,
		      size_t *nc, char *why, size_t whylen)
{
	uint32_t naux = plan_naux(r->dst[di].peer->plan);
	struct plan_copy aux[KVW_MAX_AUX];
	size_t before = *nc, base = *nc - naux;
	int rc;

	if (naux > KVW_MAX_AUX || naux > *nc)
		return KVW_EINVAL;
	rc = sender_state_copies(s, r, di, nc, why, whylen);
	if (rc < 0 || *nc == before)
		return rc;
	memcpy(aux, s->pc + base, naux * sizeof aux[0]);
	memmove(s->pc + base, s->pc + before,
		(*nc - before) * sizeof s->pc[0]);
	memcpy(s->pc + *nc - naux, aux, naux * sizeof aux[0]);
	return 0;
}

/* Plans and sends the jobs for `n` pages of chunk c (from page `off` of
 * it) to destination di. Returns 0, or fails the room and returns < 0. */
static int send_job(struct sender *s, struct sender_room *r, uint32_t w,
		    uint32_t di, const struct sender_chunk *c, uint32_t off,
		    uint32_t n, const uint32_t *dp, int final)
{
	struct sender_dst *d = &r->dst[di];
	int aux = c->is_last && final;
	struct sender_jobrec rec;
	struct frame_msg m;
	char why[256] = "";
	size_t nc = 0;
	int rc;

	for (;;) {
		rc = plan_chunk(d->peer->plan, c->pages + off, dp + off, n, aux,
				r->aux_slot, d->aux_slot, s->pc, s->cap_copies,
				&nc, why, sizeof why);
		if (rc != KVW_ENOMEM || nc <= s->cap_copies || sender_scratch(s, nc))
			break;
	}
	if (rc == 0 && aux && s->shape.nstate) {
		rc = state_join(s, r, di, &nc, why, sizeof why);
		if (rc == KVW_EINVAL) /* a kind's rule */
			rc = KVW_ERANGE;
	}
	if (rc == KVW_ERANGE) {
		sender_room_fail(s, r, KVW_R_BAD_INDEX, why);
		return rc;
	}
	if (rc < 0) {
		sender_room_fail(s, r, KVW_R_LAYOUT, why);
		return rc;
	}
	for (size_t i = 0; i < nc; i++) {
		if (s->pc[i].src_pool || s->pc[i].dst_pool) {
			sender_room_fail(s, r, KVW_R_LAYOUT,
					 "only pool 0 is supported");
			return KVW_EINVAL;
		}
		s->fc[i] = (struct frame_copy){ s->pc[i].src_off,
						s->pc[i].dst_off, s->pc[i].len };
	}
	frame_msg_init(&m, FRAME_JOB, s->rank, r->id, s->epoch);
	m.u.job.slot = r->ref.slot;
	m.u.job.generation = r->ref.gen;
	m.u.job.peer = d->peer->id;
	m.u.job.flags = aux ? FRAME_JOB_LAST : 0;
	if (aux && di == last_real(r)) {
		/* The room's final job: its worker ends the room. */
		m.u.job.flags |= FRAME_JOB_FINAL;
		snprintf(m.u.job.reply, sizeof m.u.job.reply, "%s",
			 d->peer->endpoint);
	}
	/* pages_done counts the first destination's pages (as before). */
	m.u.job.pages = di == 0 || r->dst[0].dummy ? n : 0;
	m.u.job.dst_index = di;
	m.u.job.token = d->token;
	m.u.job.desc.p = d->peer->desc;
	m.u.job.desc.len = d->peer->desclen;
	m.u.job.copies = frame_copies_of(s->fc, (uint32_t)nc);
	rec = (struct sender_jobrec){ r->id, r->ref, di, n, (uint8_t)aux,
				      copy_bytes(s->fc, nc) };
	rc = rtab_outstanding_add(s->t, r->ref, 1);
	if (rc < 0) {
		sender_room_fail(s, r, KVW_R_TRANSFER, "outstanding count");
		return rc;
	}
	rc = sender_worker_send(s, w, &m, &rec);
	if (rc < 0) {
		rtab_outstanding_add(s->t, r->ref, -1);
		sender_room_fail(s, r, KVW_R_WORKER_DIED, "worker unreachable");
		return rc;
	}
	r->inflight++;
	if (m.u.job.flags & FRAME_JOB_FINAL)
		r->told = di + 1;
	return 0;
}

/* Dispatches the oldest queued chunk to every real destination. Returns 0
 * or < 0 when the room failed. */
static int dispatch_one(struct sender *s, struct sender_room *r, uint32_t w)
{
	const struct sender_chunk *c = &r->q[0];
	char why[384];

	for (uint32_t i = 0; i < r->ndst; i++) {
		const struct sender_dst *d = &r->dst[i];
		const uint32_t *dp;

		if (d->dummy)
			continue;
		if (!d->peer->plan) {
			snprintf(why, sizeof why, "decode %s: %s",
				 d->peer->endpoint, d->peer->why);
			/* Refused is not a layout that fails to pair: the
			 * operator's fix is the group (--cluster), not the
			 * shape. */
			sender_room_fail(s, r, d->peer->refused
						       ? KVW_R_REFUSED
						       : KVW_R_LAYOUT, why);
			return KVW_EINVAL;
		}
		/* Each real destination names one page per source page
		 * (its share, under CP): fewer would leave pages of the room
		 * unwritten behind a Success, more would never be filled. */
		if (d->npages != r->num_pages) {
			snprintf(why, sizeof why, "decode %s gave %u destination "
				 "pages for %u source pages",
				 d->peer->endpoint, d->npages, r->num_pages);
			sender_room_fail(s, r, KVW_R_PAGES, why);
			return KVW_ERANGE;
		}
		if (sender_dst_slice(d, r->cursor, c->n, &dp) < 0) {
			snprintf(why, sizeof why, "chunk of pages %u..%u runs "
				 "past the %u pages of decode %s", r->cursor,
				 r->cursor + c->n, d->npages, d->peer->endpoint);
			sender_room_fail(s, r, KVW_R_BAD_INDEX, why);
			return KVW_ERANGE;
		}
	}
	if (rtab_transition_if(s->t, r->ref, RTAB_M(KVW_WAITING),
			       KVW_TRANSFERRING, 0, NULL) == KVW_ESTALE)
		return KVW_ESTALE;
	for (uint32_t i = 0; i < r->ndst; i++) {
		const struct sender_dst *d = &r->dst[i];
		const uint32_t *dp;
		uint32_t off = 0, k;

		if (d->dummy || (c->n == 0 && !c->is_last))
			continue;
		sender_dst_slice(d, r->cursor, c->n, &dp);
		do {
			k = sender_job_pages(d->peer->plan, c->n - off,
					     c->is_last, KVW_MAX_COPIES);
			if (send_job(s, r, w, i, c, off, k, dp,
				     off + k == c->n) < 0)
				return KVW_EINVAL;
			off += k;
		} while (off < c->n);
	}
	r->cursor += c->n;
	if (c->is_last)
		r->last_sent = 1;
	sender_room_pop_chunk(r);
	return 0;
}

void sender_dispatch(struct sender *s, struct sender_room *r)
{
	int st = rtab_state(s->t, r->ref);
	uint32_t w;

	if (st < 0 ||
	    !rtab_accepts(RTAB_ROLE_PREFILL, (unsigned)st, RTAB_MSG_SEND_CHUNK))
		return;
	/* A room's jobs run on one worker, in order, while any is in
	 * flight; between bursts it may move to where packing wants it. */
	if (r->inflight == 0)
		r->worker = sender_worker_pick(s);
	w = r->worker;
	if (w == SENDER_NO_WORKER || !s->w[w].up)
		return; /* stays queued until a worker says hello */
	while (r->nq)
		if (dispatch_one(s, r, w) < 0)
			return;
	room_finish(s, r);
}

/* The engine begins r's id (again): it will clear this room, so the room
 * is not given up (sender_orphan.c), and the row says so: an engine that
 * begins the id later tells this incarnation, over, from one its decode
 * opened and failed before the engine's BEGIN came (api_inc.h). */
static void engine_takes(struct sender *s, struct sender_room *r)
{
	(void)sender_given_up_take(&s->given_up, r->id, 0, 0);
	r->given_up = 0;
	r->begun = 1;
	(void)rtab_flags_or(s->t, r->ref, RTAB_F_BEGUN);
}

static void on_send_begin(struct sender *s, const struct frame_msg *m)
{
	const struct frame_send_begin *b = &m->u.send_begin;
	struct sender_room *r = sender_room_open(s, m->hdr.room);
	int st;

	if (!r)
		return;
	st = rtab_state(s->t, r->ref);
	if (st < 0 || rtab_terminal((unsigned)st)) {
		LOG_ROOM(LOG_DEBUG, r->id, "SEND_BEGIN for a %s room ignored",
			 kvw_state_str((unsigned)st));
		/* Begun all the same (a decode failed it first): its chunks
		 * are ignored too, not malformed, and the engine clears it. */
		if (st >= 0 && !r->begun)
			engine_takes(s, r);
		return;
	}
	if (r->begun) {
		LOG_RL(LOG_WARN, "room %llu: second SEND_BEGIN ignored",
		       (unsigned long long)r->id);
		return;
	}
	engine_takes(s, r);
	r->num_pages = b->num_pages;
	r->aux_slot = b->aux_slot;
	rtab_set_expected(s->t, r->ref, b->num_pages);
	if (b->num_pages > s->shape.pages)
		sender_room_fail(s, r, KVW_R_BAD_INDEX,
				 "more pages than the pool holds");
}

static void on_send_chunk(struct sender *s, const struct frame_msg *m)
{
	const struct frame_send_chunk *c = &m->u.send_chunk;
	struct sender_room *r = sender_rooms_get(&s->rooms, m->hdr.room);
	int st;

	if (!r || !r->begun || r->cleared) {
		MALFORMED(s->t, "room %llu: SEND_CHUNK without SEND_BEGIN",
			  (unsigned long long)m->hdr.room);
		return;
	}
	st = rtab_state(s->t, r->ref);
	if (st < 0 || rtab_terminal((unsigned)st)) {
		LOG_ROOM(LOG_DEBUG, r->id, "SEND_CHUNK for a %s room ignored",
			 kvw_state_str((unsigned)st));
		return;
	}
	if (c->state.len && (!c->is_last || !s->shape.nstate)) {
		sender_room_fail(s, r, KVW_R_BAD_INDEX,
				 s->shape.nstate ? "state rows on a chunk that "
						   "is not the last"
						 : "state rows, and the layout "
						   "has no state component");
		return;
	}
	if (c->is_last && sender_room_set_src_state(r, c->state) < 0) {
		sender_room_fail(s, r, KVW_R_TRANSFER, "out of memory");
		return;
	}
	switch (sender_room_push_chunk(r, c->pages, c->is_last)) {
	case 0:
		break;
	case KVW_ERANGE:
		sender_room_fail(s, r, KVW_R_BAD_INDEX,
				 r->last_queued ? "chunk after the last one"
						: "chunk runs past num_pages");
		return;
	default:
		sender_room_fail(s, r, KVW_R_TRANSFER, "out of memory");
		return;
	}
	sender_dispatch(s, r);
}

static void on_clear(struct sender *s, const struct frame_msg *m)
{
	struct sender_room *r = sender_rooms_get(&s->rooms, m->hdr.room);
	struct rtab_ref ref;

	if (!r) {
		/* A room only the table knows (left by a previous owner). */
		if (rtab_lookup(s->t, m->hdr.room, &ref) == 0)
			rtab_clear(s->t, ref, KVW_R_CLEARED);
		else /* or none: a decode's XFER_INFO may still come */
			sender_given_up_add(&s->given_up, m->hdr.room,
					    proc_now_ns());
		return;
	}
	if (r->cleared)
		return;
	/* The engine may clear as soon as the worker set Success, before
	 * its JOB_DONE is here: the other destinations still hear it. A room
	 * another process failed (a worker, kv-heartbeat) and nobody reported
	 * yet is reported now, with the table's reason: CLEAR is the last
	 * chance this control has to tell its decodes. */
	tell_rest(s, r);
	if (!r->final_sent)
		sender_room_fail(s, r, KVW_R_CLEARED, "engine cleared the room");
	rtab_clear(s->t, r->ref, KVW_R_CLEARED);
	sender_room_drop_chunks(r);
	r->cleared = 1;
	sender_room_acks(s, r); /* frees r unless acks are owed */
}

void sender_on_engine(struct sender *s, const struct frame_msg *m)
{
	switch (m->hdr.type) {
	case FRAME_SEND_BEGIN:
		on_send_begin(s, m);
		break;
	case FRAME_SEND_CHUNK:
		on_send_chunk(s, m);
		break;
	case FRAME_CLEAR:
		on_clear(s, m);
		break;
	default:
		MALFORMED(s->t, "engine socket: unexpected %s",
			  frame_type_str(m->hdr.type));
	}
}

/* Worker w answered its oldest job (rec) with result/reason. */
static void job_answered(struct sender *s, const struct sender_jobrec *rec,
			 int result, uint32_t reason)
{
	struct sender_room *r = sender_rooms_get(&s->rooms, rec->room);

	if (!r || r->ref.slot != rec->ref.slot || r->ref.gen != rec->ref.gen)
		return; /* that incarnation's private state is gone */
	if (r->inflight)
		r->inflight--;
	if (result == 0 && rec->dst < r->ndst) {
		/* pages_done was moved by the worker (JOB pages). */
		if (rec->last)
			r->dst[rec->dst].done = 1;
		room_finish(s, r);
	} else if (result != KVW_ESTALE && result != 0) {
		sender_room_fail(s, r, reason ? reason : KVW_R_TRANSFER,
				 "transfer failed");
	}
	sender_room_acks(s, r); /* may free r */
}

void sender_on_job_done(struct sender *s, uint32_t w, const struct frame_msg *m)
{
	const struct frame_job_done *d = &m->u.job_done;
	const struct sender_jobrec *h;
	struct sender_jobrec rec;

	/* The codec allows count > 1 only with result 0. The job it ends
	 * with must be the count-th oldest: anything else is a worker out of
	 * step, and nothing is popped. */
	h = sender_jobq_at(&s->w[w].q, d->count - 1);
	if (!h || h->ref.slot != d->slot || h->ref.gen != d->generation ||
	    h->room != m->hdr.room) {
		MALFORMED(s->t, "worker %u: JOB_DONE for room %llu (%u jobs) "
			  "does not match the jobs it was given", w,
			  (unsigned long long)m->hdr.room, d->count);
		return;
	}
	for (uint32_t i = 0; i < d->count; i++) {
		rec = *sender_jobq_head(&s->w[w].q);
		sender_jobq_pop(&s->w[w].q);
		job_answered(s, &rec, d->result, d->reason);
	}
}

/* rtab_expire callback: tell decode about each room that timed out. */
static void on_expired(void *arg, const struct rtab_view *v)
{
	struct sender *s = arg;
	struct sender_room *r = sender_rooms_get(&s->rooms, v->room);

	if (!r || r->ref.slot != v->ref.slot || r->ref.gen != v->ref.gen)
		return;
	LOG_ROOM(LOG_INFO, r->id, "timed out in state %s",
		 r->begun ? "begun" : "not begun");
	sender_room_fail(s, r, KVW_R_TIMEOUT, "timed out");
}

struct ack_sweep {
	struct sender *s;
	uint64_t now, next;
	struct sender_room *gone; /* to retire once the walk is over (a
				   * retire may open rooms: not during it) */
};

/* Drops the ack targets of a room that never drained by its deadline (a
 * worker that hangs): the decode then releases on its own deadline. */
static void ack_expire(void *arg, struct sender_room *r)
{
	struct ack_sweep *a = arg;

	if (!r->nacks)
		return;
	if (r->ack_deadline_ns > a->now) {
		if (!a->next || r->ack_deadline_ns < a->next)
			a->next = r->ack_deadline_ns;
		return;
	}
	LOG_ROOM(LOG_WARN, r->id, "abort not drained in time: %u ack targets "
		 "dropped", r->nacks);
	r->nacks = 0;
	r->ack_deadline_ns = 0;
	/* Jobs still in flight keep the room (and its id) until they are
	 * answered: a later ABORT of the id then waits for them too, instead
	 * of being acked at once as for a room this control never had. */
	if (sender_room_gone(a->s, r)) {
		r->gone_next = a->gone;
		a->gone = r;
	}
}

/* A room that another process ended in the table and nobody reported:
 * a worker's transport error, kv-heartbeat declaring the decode dead (it
 * fails rooms by peer id), a worker's Success whose JOB_DONE is not here. */
static void notice_one(void *arg, struct sender_room *r)
{
	struct sender *s = arg;
	int st;

	if (r->final_sent)
		return;
	st = rtab_state(s->t, r->ref);
	if (st == KVW_FAILED) {
		LOG_ROOM(LOG_INFO, r->id, "failed in the table by another "
			 "process: its decodes are told");
		sender_room_fail(s, r, KVW_R_TRANSFER, NULL);
	} else if (st == KVW_SUCCESS) {
		tell_rest(s, r);
	}
}

void sender_notice(struct sender *s)
{
	sender_rooms_foreach(&s->rooms, notice_one, s);
}

uint64_t sender_sweep(struct sender *s, uint64_t now)
{
	uint64_t next;

	rtab_expire(s->t, now, on_expired, s);
	if (s->ack_expiry_ns && now >= s->ack_expiry_ns) {
		struct ack_sweep a = { s, now, 0, NULL };

		sender_rooms_foreach(&s->rooms, ack_expire, &a);
		s->ack_expiry_ns = a.next;
		while (a.gone) {
			struct sender_room *r = a.gone;

			a.gone = r->gone_next;
			sender_room_retire(s, r);
		}
	}
	next = rtab_next_deadline(s->t);
	if (s->ack_expiry_ns && (!next || s->ack_expiry_ns < next))
		next = s->ack_expiry_ns;
	return next;
}
