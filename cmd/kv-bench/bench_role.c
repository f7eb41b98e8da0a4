/*
 * bench_role.c - kv-bench --role prefill|decode: one kv-bench per host of
 * a group split across two hosts, each driving only its own side's engines
 * (through their ipc:// sockets on its own host), the two joined by a
 * tcp:// link of their own (a ZMQ DEALER pair under the process's
 * wire_auth policy: CURVE with the group's keys, or --insecure). The
 * decode side leads: it draws the room ids, begins each room at its
 * ranks, tells the prefill side to send it, judges it (Success, verify,
 * deadline) and tells the prefill side how it ended; at the end it sends
 * its summary, which both print. Nothing but room ids and outcomes
 * crosses: the fill pattern depends only on the room id and the shape, so
 * the decode side verifies byte by byte without the bytes being sent.
 * The two page allocators stay in step because both take pages when a
 * room begins and give them back on the same outcomes.
 *
 * Every message is a kvwire frame (lib/wire/frame.h), decoded and checked
 * by the codec before it is looked at; the link reuses frame types whose
 * fields fit:
 *   PING  (room = workload digest)  both ways: the hello, then once a
 *                                   second to show the sender is alive
 *   PONG  (room = workload digest)  prefill: the answer to the hello
 *   SEND_BEGIN (room, num_pages)    decode: send this room
 *   STATUS (room, state, text)      decode: the room ended (text: its
 *                                   outcome); room 0: the run ended (text:
 *                                   the summary); prefill: a room it could
 *                                   not start (Failed); room 0 from either
 *                                   side: it stopped on an error (text:
 *                                   "error: why")
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_impl.h"
#include "base/log.h"
#include "base/proc.h"
#include "wire/frame.h"
#include "wire/wire.h"

#define PEER_PING_NS 1000000000ull     /* a PING a second */
#define PEER_SILENT_NS 30000000000ull  /* silent this long: gone */
#define PEER_HELLO_NS 120000000000ull  /* the other side may start late */
#define PEER_LINGER_MS 3000            /* the summary gets out at close */

struct bpeer {
	void *ctx, *sock;
	uint64_t digest;          /* of this side's workload flags */
	uint64_t heard, pinged;   /* last message in, last PING out (ns) */
	uint64_t held;            /* prefill: a room to begin once a slot
				   * frees (0: none) */
	int ended;                /* prefill: the summary came */
	uint64_t malformed;       /* messages the codec refused */
	struct bench_result sum;  /* prefill: the decode side's summary */
};

/* Outcome names on the link, indexed by O_*. */
static const char *const outcome_name[] = {
	"none", "success", "failed", "stuck", "corrupt", "aborted",
	"abort-stuck",
};
#define NOUTCOMES (sizeof outcome_name / sizeof outcome_name[0])

static uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	h = (h ^ (h >> 31)) * 0xbf58476d1ce4e5b9ULL;
	return h ^ (h >> 29);
}

/* What both sides must agree on: the rooms and how they are sent. */
static uint64_t workload_digest(const struct bench_config *c)
{
	uint64_t h = 0x6b762d62656e6368ULL; /* "kv-bench" */

	h = mix(h, c->rooms);
	h = mix(h, c->pages_per_room);
	h = mix(h, c->chunk_pages);
	h = mix(h, c->concurrency);
	h = mix(h, (uint64_t)c->verify << 2 | (uint64_t)c->zero_last << 1 |
			   (uint64_t)c->eager);
	h = mix(h, c->shape.pages);
	h = mix(h, c->shape.aux_slots);
	return h ? h : 1;
}

/* Sends a header-only or simple message: 1 sent, 0 queue full, < 0. */
static int say(struct run *r, unsigned type, uint64_t room,
	       const struct frame_msg *body)
{
	struct frame_msg m;
	int rc;

	if (body)
		m = *body;
	else
		frame_msg_init(&m, type, 0, room, proc_epoch());
	rc = wire_send(r->peer->sock, &m, NULL, 0, r->err, r->errlen);
	return rc == 0 ? 1 : rc == KVW_EAGAIN ? 0 : rc;
}

static int say_status(struct run *r, uint64_t room, int ok, const char *text)
{
	struct frame_msg m;

	frame_msg_init(&m, FRAME_STATUS, 0, room, proc_epoch());
	m.u.status.state = ok ? KVW_SUCCESS : KVW_FAILED;
	m.u.status.reason = KVW_R_NONE;
	m.u.status.token = 1; /* the codec wants one; nothing echoes it */
	snprintf(m.u.status.text, sizeof m.u.status.text, "%s", text);
	return say(r, FRAME_STATUS, room, &m);
}

/* Next message from the peer: 1 with *m (release in), 0 none, < 0 the
 * socket is gone. A message the codec refuses is counted and warned about
 * (rate-limited), never acted on. */
static int hear(struct run *r, struct wire_in *in, struct frame_msg *m)
{
	char why[256];

	for (;;) {
		int rc = wire_recv(r->peer->sock, 0, in, m, why, sizeof why);

		if (rc == 0) {
			r->peer->heard = proc_now_ns();
			return 1;
		}
		if (rc == KVW_EAGAIN)
			return 0;
		if (rc == KVW_ESYS)
			return kvw_errf(r->err, r->errlen, KVW_EPEER,
					"the link to the other kv-bench: %s",
					why);
		r->peer->malformed++;
		LOG_RL(LOG_WARN, "peer %s: refused a message (%llu so far): %s",
		       r->c->peer, (unsigned long long)r->peer->malformed, why);
	}
}

/* A PING a second; the peer silent for PEER_SILENT_NS ends the run. */
static int keepalive(struct run *r, uint64_t now)
{
	struct bpeer *p = r->peer;

	if (now > p->pinged && now - p->pinged >= PEER_PING_NS) {
		p->pinged = now;
		if (say(r, FRAME_PING, p->digest, NULL) < 0)
			return KVW_EPEER;
	}
	/* heard may be later than now: hear() stamps it mid-pass. */
	if (now > p->heard && now - p->heard >= PEER_SILENT_NS)
		return kvw_errf(r->err, r->errlen, KVW_EPEER,
				"the other kv-bench (%s) has been silent for "
				"%llu s", r->c->peer,
				(unsigned long long)(PEER_SILENT_NS / 1000000000ull));
	return 0;
}

/* The hello: decode PINGs until the prefill side PONGs; the prefill side
 * waits for a PING and PONGs. Both carry the workload digest: runs with
 * different flags would count rooms the other never began. */
static int hello(struct run *r)
{
	struct bpeer *p = r->peer;
	int decode = r->c->role == BENCH_ROLE_DECODE;
	uint64_t t0 = proc_now_ns(), last = 0;

	for (;;) {
		uint64_t now = proc_now_ns();
		struct wire_in in;
		struct frame_msg m;
		int rc, done = 0;

		if (decode && now - last >= 200000000ull) {
			last = now;
			if (say(r, FRAME_PING, p->digest, NULL) < 0)
				return KVW_EPEER;
		}
		/* done first: a hear() after the hello would take the
		 * next message (the decode's first SEND_BEGIN, once the PONG
		 * has reached it) and drop it, leaving that room stuck. */
		while (!done && (rc = hear(r, &in, &m)) > 0) {
			unsigned want = decode ? FRAME_PONG : FRAME_PING;
			uint64_t theirs = m.hdr.room;

			wire_in_release(&in);
			if (m.hdr.type == FRAME_STATUS && m.hdr.room == 0)
				return kvw_errf(r->err, r->errlen, KVW_EPEER,
						"the other kv-bench ended: %s",
						m.u.status.text);
			if (m.hdr.type != want)
				continue;
			if (!decode && say(r, FRAME_PONG, p->digest, NULL) < 0)
				return KVW_EPEER;
			if (theirs != p->digest)
				return kvw_errf(r->err, r->errlen, KVW_EINVAL,
						"the other kv-bench (%s) runs "
						"another workload: give both "
						"the same --rooms, "
						"--pages-per-room, --chunk-pages,"
						" --concurrency, --verify and "
						"shape", r->c->peer);
			done = 1;
		}
		if (rc < 0)
			return rc;
		if (done)
			return 0;
		if (proc_stopping())
			return kvw_errf(r->err, r->errlen, KVW_EAGAIN,
					"stopped by a signal");
		if (now - t0 >= PEER_HELLO_NS)
			return kvw_errf(r->err, r->errlen, KVW_EPEER,
					"no kv-bench --role %s answered at %s "
					"within %llu s",
					decode ? "prefill" : "decode",
					r->c->peer,
					(unsigned long long)(PEER_HELLO_NS /
							     1000000000ull));
		bench_nap(10000000);
	}
}

int bench_peer_open(struct run *r)
{
	int decode = r->c->role == BENCH_ROLE_DECODE;
	struct bpeer *p;
	int rc;

	if (r->c->abort_frac > 0)
		return kvw_errf(r->err, r->errlen, KVW_EINVAL,
				"--abort-frac needs one kv-bench driving both "
				"sides (no --role)");
	if ((p = r->peer = calloc(1, sizeof *p)) == NULL ||
	    (p->ctx = zmq_ctx_new()) == NULL)
		return kvw_errf(r->err, r->errlen, KVW_ENOMEM, "out of memory");
	p->digest = workload_digest(r->c);
	p->sock = wire_socket(p->ctx, ZMQ_DEALER, PEER_LINGER_MS, r->err,
			      r->errlen);
	if (p->sock == NULL)
		return KVW_ESYS;
	rc = decode ? wire_connect(p->sock, r->c->peer, r->err, r->errlen)
		    : wire_bind(p->sock, r->c->peer, 0600, r->err, r->errlen);
	if (rc < 0)
		return rc;
	if ((rc = hello(r)) < 0)
		return rc;
	p->heard = p->pinged = proc_now_ns();
	return 0;
}

int bench_peer_begin(struct run *r, struct room *x)
{
	struct frame_msg m;
	int rc;

	frame_msg_init(&m, FRAME_SEND_BEGIN, 0, x->id, proc_epoch());
	m.u.send_begin.num_pages = r->c->pages_per_room;
	rc = say(r, FRAME_SEND_BEGIN, x->id, &m);
	x->peer_sent = rc > 0;
	return rc;
}

int bench_peer_end(struct run *r, struct room *x)
{
	if (!r->peer)
		return 1;
	return say_status(r, x->id, x->outcome == O_SUCCESS,
			  outcome_name[x->outcome]);
}

/* The room in flight with this id, or NULL. */
static struct room *room_of(struct run *r, uint64_t id)
{
	for (uint32_t i = 0; i < r->nslots; i++)
		if (r->rooms[i].phase == R_RUN && r->rooms[i].id == id)
			return &r->rooms[i];
	return NULL;
}

int bench_peer_poll(struct run *r, uint64_t now)
{
	struct wire_in in;
	struct frame_msg m;
	int rc;

	while ((rc = hear(r, &in, &m)) > 0) {
		struct room *x = NULL;

		/* The prefill side stopped on an error. */
		if (m.hdr.type == FRAME_STATUS && m.hdr.room == 0)
			rc = kvw_errf(r->err, r->errlen, KVW_EPEER,
				      "the prefill side's kv-bench ended: %s",
				      m.u.status.text);
		/* The prefill side could not begin this room. */
		if (m.hdr.type == FRAME_STATUS && m.hdr.room &&
		    (x = room_of(r, m.hdr.room)) != NULL &&
		    x->outcome == O_NONE)
			x->outcome = O_FAILED;
		wire_in_release(&in);
		if (rc < 0)
			return rc;
	}
	return rc < 0 ? rc : keepalive(r, now);
}

void bench_peer_close(struct run *r, const struct bench_result *res)
{
	struct bpeer *p = r->peer;
	char text[FRAME_STR_SIZE];

	if (p == NULL)
		return;
	if (p->sock && (r->c->role == BENCH_ROLE_DECODE || !res)) {
		/* Decode: the summary, or why it stopped; prefill: why it
		 * stopped, so the other side need not wait out the silence. */
		if (res)
			snprintf(text, sizeof text, "rooms=%u success=%u "
				 "failed=%u aborted=%u stuck=%u corrupt=%u "
				 "inflight=%u bytes=%llu", res->rooms,
				 res->success, res->failed, res->aborted,
				 res->stuck, res->corrupt, res->inflight,
				 (unsigned long long)res->bytes);
		else
			snprintf(text, sizeof text, "error: %s", r->err);
		say_status(r, 0, res && res->success == r->c->rooms, text);
	}
	wire_close(&p->sock); /* lingers PEER_LINGER_MS for the summary */
	if (p->ctx)
		zmq_ctx_term(p->ctx);
	free(p);
	r->peer = NULL;
}

/* ---- the prefill side --------------------------------------------- */

/* Begins the held room in a free slot: 1 begun (or refused to the decode
 * side), 0 no slot yet, < 0. */
static int begin_held(struct run *r, struct bench_result *res, uint64_t now)
{
	struct bpeer *p = r->peer;
	struct room *x = NULL;
	int rc;

	for (uint32_t i = 0; i < r->nslots && !x; i++)
		if (r->rooms[i].phase == R_IDLE)
			x = &r->rooms[i];
	if (x == NULL)
		return 0;
	if (bench_start_room(r, x, now, p->held)) {
		res->inflight++;
	} else if ((rc = say_status(r, p->held, 0, "no source pages")) <= 0) {
		return rc < 0 ? rc : 0; /* told on a later pass */
	}
	p->held = 0;
	return 1;
}

/* The decode side's summary into p->sum (strictly: every field). */
static int take_summary(struct run *r, const char *text)
{
	struct bench_result *s = &r->peer->sum;
	unsigned long long bytes;
	int used = -1;

	if (sscanf(text, "rooms=%u success=%u failed=%u aborted=%u stuck=%u "
		   "corrupt=%u inflight=%u bytes=%llu%n", &s->rooms,
		   &s->success, &s->failed, &s->aborted, &s->stuck, &s->corrupt,
		   &s->inflight, &bytes, &used) != 8 || text[used] != '\0')
		return kvw_errf(r->err, r->errlen, KVW_EPEER,
				"the decode side's kv-bench ended: %s", text);
	s->bytes = bytes;
	r->peer->ended = 1;
	return 0;
}

/* Acts on what the decode side said: 1 progress, 0 none, < 0. */
static int prefill_read(struct run *r, struct bench_result *res,
			uint64_t now)
{
	struct bpeer *p = r->peer;
	struct wire_in in;
	struct frame_msg m;
	int rc = 0, prog = 0;

	while (!(p->held && (rc = begin_held(r, res, now)) == 0)) {
		if (rc < 0)
			return rc;
		if ((rc = hear(r, &in, &m)) <= 0)
			return rc < 0 ? rc : prog;
		prog = 1;
		if (m.hdr.type == FRAME_SEND_BEGIN && m.hdr.room &&
		    m.u.send_begin.num_pages == r->c->pages_per_room) {
			p->held = m.hdr.room;
		} else if (m.hdr.type == FRAME_STATUS && m.hdr.room == 0) {
			rc = take_summary(r, m.u.status.text);
		} else if (m.hdr.type == FRAME_STATUS) {
			struct room *x = room_of(r, m.hdr.room);

			for (uint32_t o = 1; x && o < NOUTCOMES; o++)
				if (!strcmp(m.u.status.text, outcome_name[o]))
					x->outcome = (int)o;
			if (x) /* unknown text: failed, pages kept out */
				x->outcome = x->outcome ? x->outcome : O_FAILED;
			if (x && x->outcome != O_SUCCESS)
				x->phase = R_CLEAR; /* a Success: ranks_ended */
		}
		wire_in_release(&in);
		rc = rc < 0 ? rc : 0;
		if (rc < 0 || p->ended)
			return rc < 0 ? rc : 1;
	}
	return prog;
}

/* 1 when the decode side's Success of room x may clear it here: every
 * prefill rank of this side ended it too (bench.c: a prefill engine frees a
 * request's KV only once every rank's sender shows it done, and an MLA
 * dummy rank ends its room only after its transfer info came, which on a
 * busy host can come after decode's Success), or its deadline passed (a
 * rank that never ends it; the run's count is the decode side's). */
static int ranks_ended(struct room *x, uint64_t now)
{
	for (uint32_t k = 0; k < x->pi->np; k++)
		if (!bench_prefill_ended(x, k)) {
			if (now < x->deadline)
				return 0;
			fprintf(stderr, "kv-bench: room %llu: decode's Success, "
				"prefill rank %u has not ended it by its "
				"deadline: cleared anyway\n",
				(unsigned long long)x->id, k);
			return 1;
		}
	return 1;
}

/* 1 when no room is begun or clearing. */
static int all_idle(const struct run *r)
{
	for (uint32_t i = 0; i < r->nslots; i++)
		if (r->rooms[i].phase != R_IDLE)
			return 0;
	return 1;
}

int bench_role_prefill(struct run *r, struct bench_result *res)
{
	uint64_t t0 = proc_now_ns(), last_prog = t0, last_check = t0;
	int rc = 0;

	while (rc >= 0 && !(r->peer->ended && all_idle(r))) {
		uint64_t now = proc_now_ns();
		int prog;

		rc = prefill_read(r, res, now);
		prog = rc > 0;
		for (uint32_t i = 0; i < r->nslots && rc >= 0; i++) {
			struct room *x = &r->rooms[i];

			for (uint32_t k = 0; x->phase == R_RUN && k < x->pi->np &&
					     rc >= 0; k++)
				prog |= (rc = bench_step_prefill(r, x, k)) > 0;
			if (rc >= 0 && x->phase == R_RUN &&
			    x->outcome == O_SUCCESS && ranks_ended(x, now)) {
				x->phase = R_CLEAR;
				prog = 1;
			}
			if (rc >= 0 && x->phase == R_CLEAR &&
			    (rc = bench_step_clear(r, x)) > 0) {
				bench_finish(r, x, res);
				prog = 1;
			}
		}
		if (rc >= 0 && !r->peer->ended)
			rc = keepalive(r, now);
		if (rc >= 0 && now - last_check >= GROUP_CHECK_NS) {
			last_check = now;
			rc = bench_group_check(r, now);
		}
		if (rc >= 0 && proc_stopping())
			rc = kvw_errf(r->err, r->errlen, KVW_EAGAIN,
				      "stopped by a signal");
		if (prog)
			last_prog = now;
		else
			bench_nap(now - last_prog);
	}
	for (uint32_t i = 0; rc < 0 && i < r->nslots; i++)
		if (r->rooms[i].phase != R_IDLE) /* once, best effort */
			(void)bench_step_clear(r, &r->rooms[i]);
	if (rc >= 0) /* the decode side's count is the run's */
		*res = r->peer->sum;
	res->seconds = (double)(proc_now_ns() - t0) / 1e9;
	return rc < 0 ? rc : 0;
}
