/*
 * hbeat.c - the heartbeat loop of hbeat.h. One zmq_poll loop over one
 * DEALER per peer; its timeout is the nearer of the next tick and the
 * earliest outstanding PING's timeout, so the process sleeps in zmq_poll
 * and wakes exactly when something is due. A PONG is matched to its peer
 * by the socket it came on (each peer has its own DEALER); a PING is
 * answered when any PONG arrives on that socket before its timeout.
 */
#include "hbeat.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/proc.h"
#include "roles/malformed.h"
#include "table/rtab.h"
#include "wire/dealers.h"
#include "wire/frame.h"
#include "wire/wire.h"

#define POLL_CAP_MS 1000
#define DRAIN_MAX 256 /* messages taken from one peer per wakeup */

#define HB_RETIRED 4u /* earlier epochs remembered per peer */
#define HB_PINGS 64u  /* send times of the last PINGs (by sequence) */

struct hb_peer {
	void *sock;       /* from h->dealers (not ours to close) */
	uint64_t sent_ns; /* an unanswered PING went out then; 0 = none */
	char ep[RTAB_ENDPOINT_MAX];
	uint64_t epoch;                /* last epoch this process heard */
	uint64_t retired[HB_RETIRED];  /* epochs it had before */
	uint32_t nretired;
};

struct hbeat {
	struct rtab *tab;
	void *ctx;
	struct dealers *dealers; /* one DEALER per peer endpoint */
	uint64_t interval_ns, timeout_ns;
	uint32_t max_failures;
	uint64_t epoch, seq;
	uint64_t ping_ns[HB_PINGS]; /* when PING seq went out: [seq % HB_PINGS] */
	struct hb_peer *peers; /* index = peer id - 1 */
	uint32_t cap;
};

int hbeat_check(const struct hbeat_cfg *cfg, char *err, size_t errlen)
{
	if (!cfg->table || cfg->interval_ns < 50000000ull ||
	    cfg->max_failures < 1)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"need a table, interval >= 0.05 s, "
				"max failures >= 1");
	return 0;
}

int hbeat_open(const struct hbeat_cfg *cfg, struct hbeat **out, char *err,
	       size_t errlen)
{
	struct hbeat *h;
	int rc;

	*out = NULL;
	if ((rc = hbeat_check(cfg, err, errlen)) != 0)
		return rc;
	h = calloc(1, sizeof *h);
	if (!h)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	h->interval_ns = cfg->interval_ns;
	h->timeout_ns = cfg->ping_timeout_ns && cfg->ping_timeout_ns < cfg->interval_ns
		      ? cfg->ping_timeout_ns : cfg->interval_ns;
	h->max_failures = cfg->max_failures;
	h->epoch = proc_epoch();
	rc = rtab_open(cfg->table, 1, &h->tab, err, errlen);
	if (rc)
		goto fail;
	h->cap = rtab_peer_capacity(h->tab);
	h->peers = calloc(h->cap, sizeof *h->peers);
	rc = KVW_ENOMEM;
	if (!h->peers) {
		kvw_seterr(err, errlen, "out of memory");
		goto fail;
	}
	h->ctx = zmq_ctx_new();
	rc = KVW_ESYS;
	if (!h->ctx) {
		kvw_seterr(err, errlen, "zmq_ctx_new: %s", zmq_strerror(errno));
		goto fail;
	}
	rc = dealers_open(h->ctx, 0, &h->dealers);
	if (rc) {
		kvw_seterr(err, errlen, "out of memory");
		goto fail;
	}
	*out = h;
	return 0;
fail:
	hbeat_close(&h);
	return rc;
}

void hbeat_close(struct hbeat **hp)
{
	struct hbeat *h = hp ? *hp : NULL;

	if (!h)
		return;
	dealers_close(&h->dealers);
	if (h->ctx)
		zmq_ctx_term(h->ctx);
	rtab_close(&h->tab);
	free(h->peers);
	free(h);
	*hp = NULL;
}

/* Forgets what this process knew of the peer in slot p: its table owner
 * retired the slot (rtab_peer_retire), which may now hold another
 * endpoint under the same id. Its DEALER goes too. */
static void forget(struct hbeat *h, struct hb_peer *p)
{
	if (p->sock)
		dealers_drop(h->dealers, p->ep);
	memset(p, 0, sizeof *p);
}

/* Whether slot id still holds the endpoint this process pings there
 * (filled in *v); if not, the old peer is forgotten. */
static int same_peer(struct hbeat *h, uint32_t id, struct rtab_peer_view *v)
{
	struct hb_peer *p = &h->peers[id - 1];

	if (rtab_peer_get(h->tab, id, v) == 0 &&
	    strncmp(v->endpoint, p->ep, sizeof p->ep) == 0)
		return 1;
	forget(h, p);
	return 0;
}

/* The PING to peer id went unanswered. A miss is counted only while the
 * slot holds the endpoint that was pinged (a retired slot's new peer owes
 * nothing); the owner retires only dead or never-registered peers with no
 * live room, so the instant between the check and the count can at worst
 * give a new peer one miss. */
static void miss(struct hbeat *h, uint32_t id)
{
	struct rtab_peer_view v;
	int n;

	h->peers[id - 1].sent_ns = 0;
	/* A DEAD peer's misses no longer count (tick pings it only so that
	 * a PONG can revive it): its count stays the one that killed it. */
	if (!same_peer(h, id, &v) || v.liveness == RTAB_PEER_DEAD)
		return;
	n = rtab_peer_miss(h->tab, id);
	if (n < 0 || (uint32_t)n < h->max_failures)
		return;
	if (rtab_peer_get(h->tab, id, &v) != 0 || v.liveness == RTAB_PEER_DEAD)
		return;
	(void)rtab_peer_set_liveness(h->tab, id, RTAB_PEER_DEAD);
	n = rtab_fail_peer(h->tab, id, KVW_R_PEER_DEAD, NULL, NULL);
	LOG(LOG_WARN, "peer %u %s: dead after %u missed pings; %d rooms failed",
	    id, v.endpoint, h->max_failures, n < 0 ? 0 : n);
}

/* Counts misses of every PING whose timeout passed. Returns the earliest
 * timeout still pending (0 = none). */
static uint64_t check_misses(struct hbeat *h, uint64_t now)
{
	uint64_t next = 0;

	for (uint32_t i = 0; i < h->cap; i++) {
		uint64_t due;

		if (!h->peers[i].sent_ns)
			continue;
		due = h->peers[i].sent_ns + h->timeout_ns;
		if (now >= due)
			miss(h, i + 1);
		else if (next == 0 || due < next)
			next = due;
	}
	return next;
}

/* Sends one PING to every peer of the table that is not DEAD. */
static void tick(struct hbeat *h, uint64_t now)
{
	struct rtab_peer_view v;
	uint32_t cursor = 0;
	char err[200];

	h->seq++;
	h->ping_ns[h->seq % HB_PINGS] = now;
	while (rtab_peer_next(h->tab, &cursor, &v) == 0) {
		struct hb_peer *p;
		struct frame_msg m;

		/* DEAD peers are pinged too (their misses no longer count):
		 * the PONG of one that came back revives it. */
		if (v.id == 0 || v.id > h->cap)
			continue;
		p = &h->peers[v.id - 1];
		if (p->sock && strncmp(v.endpoint, p->ep, sizeof p->ep) != 0)
			forget(h, p); /* the slot changed hands */
		/* The previous PING is still unanswered: a miss, counted now
		 * and never overwritten by this one. Its timeout (at most the
		 * interval) has passed unless that PING went out late, after
		 * its tick, by the lag of a wakeup or a busy machine: the
		 * ticks keep their schedule, so the next one can come before
		 * that timeout. Left for check_misses, it was lost to the
		 * overwrite below, and a dead peer took extra intervals to be
		 * declared (issue 34: 2.1-4.6 s at interval 1 s, 2 misses). */
		if (p->sent_ns)
			miss(h, v.id);
		if (!p->sock) {
			p->sock = dealers_get(h->dealers, v.endpoint, err,
					      sizeof err);
			if (!p->sock) {
				LOG_RL(LOG_ERROR, "peer %s: %s", v.endpoint, err);
				continue;
			}
			snprintf(p->ep, sizeof p->ep, "%s", v.endpoint);
			LOG(LOG_INFO, "watching peer %u %s", v.id, v.endpoint);
		}
		frame_msg_init(&m, FRAME_PING, 0, h->seq, h->epoch);
		/* A full queue (peer gone) is simply a PING that gets no PONG. */
		if (wire_send(p->sock, &m, NULL, 0, err, sizeof err) != 0)
			LOG(LOG_DEBUG, "peer %s: %s", p->ep, err);
		p->sent_ns = now;
	}
}

/* 1 when epoch is one peer p had before (then the message is stale);
 * otherwise records it as p's current epoch, retiring the previous one. */
static int retired(struct hb_peer *p, uint64_t epoch)
{
	if (epoch == 0 || epoch == p->epoch)
		return 0;
	for (uint32_t i = 0; i < HB_RETIRED; i++)
		if (p->retired[i] == epoch)
			return 1;
	if (p->epoch)
		p->retired[p->nretired++ % HB_RETIRED] = p->epoch;
	p->epoch = epoch;
	return 0;
}

/* 1 when a PONG names another epoch than the peer table's and answers a
 * PING that went out before the table's epoch was last heard (by this
 * process or another: kv-receiver learns epochs from STATUS and the
 * bootstrap): a delayed reply of the incarnation the table already moved
 * past. One owner per table at a time (the owner lock) means an
 * incarnation that answered a PING sent after the current one was heard
 * must be newer. A PONG whose PING is too old to be in the ring is stale
 * too; the next PING asks again. */
static int overtaken(struct hbeat *h, uint32_t id, const struct frame_msg *m)
{
	struct rtab_peer_view v;
	uint64_t seq = m->hdr.room, sent;

	if (rtab_peer_get(h->tab, id, &v) != 0 || v.epoch == 0 ||
	    m->hdr.epoch == 0 || m->hdr.epoch == v.epoch)
		return 0;
	sent = seq && seq <= h->seq && h->seq - seq < HB_PINGS
		       ? h->ping_ns[seq % HB_PINGS] : 0;
	return sent == 0 || sent < v.last_seen_ns;
}

static void pong(struct hbeat *h, uint32_t id, const struct frame_msg *m)
{
	struct rtab_peer_view v;
	int changed;

	if (m->hdr.type != FRAME_PONG) {
		MALFORMED(h->tab, "peer %u sent %s: dropped", id,
			  frame_type_str(m->hdr.type));
		return;
	}
	h->peers[id - 1].sent_ns = 0;
	if (!same_peer(h, id, &v)) {
		rtab_counter_add(h->tab, RTAB_C_STALE, 1);
		LOG_RL(LOG_INFO, "peer %u: PONG from an endpoint whose slot was "
		       "retired: dropped", id);
		return;
	}
	if (overtaken(h, id, m)) {
		rtab_counter_add(h->tab, RTAB_C_STALE, 1);
		LOG_RL(LOG_INFO, "peer %u: PONG of epoch %016llx to a PING sent "
		       "before the table's epoch was heard: dropped", id,
		       (unsigned long long)m->hdr.epoch);
		return;
	}
	if (retired(&h->peers[id - 1], m->hdr.epoch)) {
		/* A reply of an earlier incarnation (epochs are random:
		 * "older" means one this peer had before): dropped. */
		rtab_counter_add(h->tab, RTAB_C_STALE, 1);
		LOG_RL(LOG_INFO, "peer %u: PONG of retired epoch %016llx dropped",
		       id, (unsigned long long)m->hdr.epoch);
		return;
	}
	changed = rtab_peer_seen(h->tab, id, m->hdr.epoch, proc_now_ns());
	if (changed == 1) {
		int n = rtab_fail_peer(h->tab, id, KVW_R_PEER_RESTART, NULL, NULL);

		LOG(LOG_WARN, "peer %u %s restarted (epoch %016llx); %d rooms failed",
		    id, h->peers[id - 1].ep, (unsigned long long)m->hdr.epoch,
		    n < 0 ? 0 : n);
	}
}

/* Reads up to DRAIN_MAX messages waiting on peer id's socket (a peer that
 * floods it cannot starve the ticks); KVW_ESYS if the socket died. */
static int drain(struct hbeat *h, uint32_t id, char *err, size_t errlen)
{
	for (int k = 0; k < DRAIN_MAX && h->peers[id - 1].sock; k++) {
		struct wire_in in;
		struct frame_msg m;
		char why[200];
		int rc = wire_recv(h->peers[id - 1].sock, 0, &in, &m, why,
				   sizeof why);

		if (rc == KVW_EAGAIN)
			return 0;
		if (rc == KVW_ESYS)
			return kvw_errf(err, errlen, rc, "%s", why);
		if (rc) {
			MALFORMED(h->tab, "peer %u: malformed message: %s", id, why);
			continue;
		}
		pong(h, id, &m);
		wire_in_release(&in);
	}
	return 0;
}

int hbeat_run(struct hbeat *h, char *err, size_t errlen)
{
	zmq_pollitem_t *items = calloc(h->cap, sizeof *items);
	uint32_t *ids = calloc(h->cap, sizeof *ids);
	uint64_t next_tick = proc_now_ns();
	int rc = 0;

	if (!items || !ids) {
		kvw_seterr(err, errlen, "out of memory");
		rc = KVW_ENOMEM;
		goto out;
	}
	LOG(LOG_INFO, "interval %.3f s, %u misses make a peer dead",
	    (double)h->interval_ns / 1e9, h->max_failures);
	while (!proc_stopping() && rc == 0) {
		uint64_t now = proc_now_ns(), due;
		int n = 0;

		due = check_misses(h, now);
		if (now >= next_tick) {
			tick(h, now);
			next_tick += h->interval_ns;
			if (next_tick <= now) /* we fell behind: do not burst */
				next_tick = now + h->interval_ns;
			due = check_misses(h, now);
		}
		if (due == 0 || next_tick < due)
			due = next_tick;
		for (uint32_t i = 0; i < h->cap; i++)
			if (h->peers[i].sock) {
				items[n] = (zmq_pollitem_t){ .socket = h->peers[i].sock,
							     .events = ZMQ_POLLIN };
				ids[n++] = i + 1;
			}
		if (zmq_poll(items, n, proc_poll_ms(due, now, POLL_CAP_MS)) < 0) {
			if (errno == EINTR)
				continue;
			kvw_seterr(err, errlen, "zmq_poll: %s",
				   zmq_strerror(errno));
			rc = KVW_ESYS;
			break;
		}
		for (int i = 0; i < n && rc == 0; i++)
			if (items[i].revents & ZMQ_POLLIN)
				rc = drain(h, ids[i], err, errlen);
	}
out:
	free(items);
	free(ids);
	return rc;
}
