/*
 * hbeat.c - the heartbeat loop of hbeat.h. One ROUTER dials every peer:
 * each connection is named, before its connect, by a routing id that holds
 * the peer's slot and a generation, so a PONG is matched to its peer by the
 * name it comes in under, and a connection of a peer since forgotten is
 * told apart from its successor's. Sockets, threads and monitors stay the
 * same whatever the number of peers (a DEALER per peer, with its mailbox
 * and, with keys, its handshake monitor thread, put a thousand peers past
 * ZMQ's socket cap and the process's open files: issue 34); each peer costs
 * one connection, and connections stay within the open files the process
 * may have: a peer beyond them is not watched, with an error naming the
 * limit, never declared dead for it.
 *
 * A ROUTER drops what it cannot route, so a PING is handed to its
 * connection only once that is up (ZMQ_ROUTER_MANDATORY says when not):
 * until then it is tried again (HB_RETRY_MS), and at its timeout it is
 * a miss like a PING that got no PONG. The zmq_poll timeout is the nearer
 * of the next tick, the earliest outstanding PING's timeout and, while a
 * PING waits for its connection, the next try; the process sleeps in
 * zmq_poll and wakes when something is due.
 */
#include "hbeat.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/resource.h>

#include "base/le.h"
#include "base/log.h"
#include "base/proc.h"
#include "roles/malformed.h"
#include "table/rtab.h"
#include "wire/frame.h"
#include "wire/wire.h"

#define POLL_CAP_MS 1000
#define DRAIN_MAX 1024 /* messages taken per wakeup: ticks are never starved */
#define HB_RETRY_MS 20 /* a PING waiting for its connection is tried again
			* this often, or every eighth of its timeout if
			* longer (a dead peer's costs no more than 8 tries) */
#define HB_FD_RESERVE 64 /* open files kept for all but peer connections */

#define HB_RETIRED 4u /* earlier epochs remembered per peer */
#define HB_PINGS 64u  /* send times of the last PINGs (by sequence) */

/* A connection's routing id: 'H', the peer's slot id, the generation. */
#define HB_RID_LEN 9u

struct hb_peer {
	uint32_t gen;     /* of its connection; 0 = not connected */
	uint64_t sent_ns; /* an unanswered PING went out then; 0 = none */
	uint64_t sent_seq; /* its sequence number */
	uint64_t missed_seq; /* the newest PING whose miss was counted */
	int waiting;      /* that PING is not yet taken by the connection */
	char ep[RTAB_ENDPOINT_MAX];
	uint64_t epoch;                /* last epoch this process heard */
	uint64_t retired[HB_RETIRED];  /* epochs it had before */
	uint32_t nretired;
};

struct hbeat {
	struct rtab *tab;
	void *ctx;
	void *sock; /* the ROUTER that dials every peer */
	uint64_t interval_ns, timeout_ns;
	uint32_t max_failures;
	uint64_t epoch, seq;
	uint64_t ping_ns[HB_PINGS]; /* when PING seq went out: [seq % HB_PINGS] */
	struct hb_peer *peers; /* index = peer id - 1 */
	uint32_t cap;
	uint32_t gen;   /* the last connection generation given out */
	uint32_t nconn; /* peers connected now */
	uint64_t fd_limit, fd_budget; /* RLIMIT_NOFILE; connections it allows */
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

/* Open files now (the fds of /proc/self/fd, less the directory's own). */
static uint64_t fds_open(void)
{
	DIR *d = opendir("/proc/self/fd");
	uint64_t n = 0;

	if (!d)
		return 0;
	while (readdir(d))
		n++;
	closedir(d);
	return n > 3 ? n - 3 : 0; /* ".", "..", the directory's fd */
}

/* How many peer connections the open-file limit leaves room for: each is
 * one fd; what the process holds now and a reserve are kept out. */
static void fd_plan(struct hbeat *h)
{
	struct rlimit rl;
	uint64_t held = fds_open() + HB_FD_RESERVE;

	h->fd_limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 &&
			      rl.rlim_cur != RLIM_INFINITY
		      ? (uint64_t)rl.rlim_cur : UINT64_MAX;
	h->fd_budget = h->fd_limit > held ? h->fd_limit - held : 0;
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
	h->sock = wire_router_dialer(h->ctx, 0, err, errlen);
	if (!h->sock)
		goto fail;
	fd_plan(h);
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
	wire_close(&h->sock);
	if (h->ctx)
		zmq_ctx_term(h->ctx);
	rtab_close(&h->tab);
	free(h->peers);
	free(h);
	*hp = NULL;
}

static void rid_make(uint8_t rid[HB_RID_LEN], uint32_t id, uint32_t gen)
{
	rid[0] = 'H';
	le_put(rid + 1, id, 4);
	le_put(rid + 5, gen, 4);
}

/* The peer a routing id names, or 0 (not one of ours, or a connection of
 * a peer since forgotten: its slot has another generation now). */
static uint32_t rid_peer(const struct hbeat *h, const uint8_t *rid,
			 size_t len)
{
	uint32_t id, gen;

	if (len != HB_RID_LEN || rid[0] != 'H')
		return 0;
	id = (uint32_t)le_get(rid + 1, 4);
	gen = (uint32_t)le_get(rid + 5, 4);
	return id >= 1 && id <= h->cap && gen != 0 &&
			       h->peers[id - 1].gen == gen
		       ? id
		       : 0;
}

/* Dials peer id at ep, its connection named by a new generation. 0, or -1
 * (logged, rate-limited): the open-file limit leaves no room for another
 * connection, or the endpoint is refused. The peer is then not watched:
 * no PING, so no miss. */
static int dial(struct hbeat *h, uint32_t id, const char *ep)
{
	struct hb_peer *p = &h->peers[id - 1];
	uint8_t rid[HB_RID_LEN];
	char err[200];

	if (h->nconn >= h->fd_budget) {
		LOG_RL(LOG_ERROR, "peer %u %s: not watched: the open-file "
		       "limit (RLIMIT_NOFILE %llu) leaves room for %llu peer "
		       "connections, all in use; raise it (LimitNOFILE=, "
		       "ulimit -n)", id, ep, (unsigned long long)h->fd_limit,
		       (unsigned long long)h->fd_budget);
		return -1;
	}
	if (++h->gen == 0)
		h->gen = 1;
	rid_make(rid, id, h->gen);
	if (zmq_setsockopt(h->sock, ZMQ_CONNECT_ROUTING_ID, rid, sizeof rid)) {
		LOG_RL(LOG_ERROR, "peer %s: zmq_setsockopt: %s", ep,
		       zmq_strerror(errno));
		return -1;
	}
	if (wire_connect(h->sock, ep, err, sizeof err) != 0) {
		LOG_RL(LOG_ERROR, "peer %s: %s", ep, err);
		return -1;
	}
	p->gen = h->gen;
	snprintf(p->ep, sizeof p->ep, "%s", ep);
	h->nconn++;
	LOG(LOG_INFO, "watching peer %u %s", id, ep);
	return 0;
}

/* Forgets what this process knew of the peer in slot p: its table owner
 * retired the slot (rtab_peer_retire), which may now hold another
 * endpoint under the same id. Its connection goes too. */
static void forget(struct hbeat *h, struct hb_peer *p)
{
	if (p->gen) {
		(void)zmq_disconnect(h->sock, p->ep);
		h->nconn--;
	}
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
	h->peers[id - 1].waiting = 0;
	h->peers[id - 1].missed_seq = h->peers[id - 1].sent_seq;
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

/* Hands peer id's outstanding PING to its connection. 1 when taken; 0
 * when the connection is not up yet (or its queue is full): tried again
 * until the PING's timeout. */
static int ping_out(struct hbeat *h, uint32_t id)
{
	struct hb_peer *p = &h->peers[id - 1];
	uint8_t rid[HB_RID_LEN];
	struct frame_msg m;
	char err[200];
	int rc;

	rid_make(rid, id, p->gen);
	frame_msg_init(&m, FRAME_PING, 0, p->sent_seq, h->epoch);
	rc = wire_send(h->sock, &m, rid, sizeof rid, err, sizeof err);
	if (rc != 0 && rc != KVW_EAGAIN)
		LOG_RL(LOG_WARN, "peer %s: %s", p->ep, err);
	p->waiting = rc != 0;
	return rc == 0;
}

/* Counts misses of every PING whose timeout passed and tries again the
 * ones still waiting for their connection. Returns the earliest moment
 * something is due (0 = nothing). */
static uint64_t check_misses(struct hbeat *h, uint64_t now)
{
	uint64_t step = h->timeout_ns / 8 > HB_RETRY_MS * 1000000ull
				? h->timeout_ns / 8 : HB_RETRY_MS * 1000000ull;
	uint64_t next = 0, retry = now + step;

	for (uint32_t i = 0; i < h->cap; i++) {
		struct hb_peer *p = &h->peers[i];
		uint64_t due;

		if (!p->sent_ns)
			continue;
		due = p->sent_ns + h->timeout_ns;
		if (now >= due) {
			miss(h, i + 1);
			continue;
		}
		if (p->waiting && !ping_out(h, i + 1) && retry < due)
			due = retry;
		if (next == 0 || due < next)
			next = due;
	}
	return next;
}

/* Sends one PING to every peer of the table. */
static void tick(struct hbeat *h, uint64_t now)
{
	struct rtab_peer_view v;
	uint32_t cursor = 0;

	h->seq++;
	h->ping_ns[h->seq % HB_PINGS] = now;
	while (rtab_peer_next(h->tab, &cursor, &v) == 0) {
		struct hb_peer *p;

		/* DEAD peers are pinged too (their misses no longer count):
		 * the PONG of one that came back revives it. */
		if (v.id == 0 || v.id > h->cap)
			continue;
		p = &h->peers[v.id - 1];
		if (p->gen && strncmp(v.endpoint, p->ep, sizeof p->ep) != 0)
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
		if (!p->gen && dial(h, v.id, v.endpoint) != 0)
			continue;
		p->sent_ns = now;
		p->sent_seq = h->seq;
		(void)ping_out(h, v.id);
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
	/* A PONG older than a PING whose miss is already counted says
	 * nothing of that PING: it neither settles it nor clears the count
	 * (a peer that stopped right after answering would take an extra
	 * interval to die, or never, with a late reply arriving each time).
	 * Only the PONG of the outstanding PING settles that one. */
	if (m->hdr.room < h->peers[id - 1].missed_seq) {
		rtab_counter_add(h->tab, RTAB_C_STALE, 1);
		LOG_RL(LOG_INFO, "peer %u: PONG to PING %llu came after PING "
		       "%llu was counted missed: dropped", id,
		       (unsigned long long)m->hdr.room,
		       (unsigned long long)h->peers[id - 1].missed_seq);
		return;
	}
	if (m->hdr.room == h->peers[id - 1].sent_seq) {
		h->peers[id - 1].sent_ns = 0;
		h->peers[id - 1].waiting = 0;
	}
	changed = rtab_peer_seen(h->tab, id, m->hdr.epoch, proc_now_ns());
	if (changed == 1) {
		int n = rtab_fail_peer(h->tab, id, KVW_R_PEER_RESTART, NULL, NULL);

		LOG(LOG_WARN, "peer %u %s restarted (epoch %016llx); %d rooms failed",
		    id, h->peers[id - 1].ep, (unsigned long long)m->hdr.epoch,
		    n < 0 ? 0 : n);
	}
}

/* Reads up to DRAIN_MAX messages waiting on the socket (peers that flood
 * it cannot starve the ticks); KVW_ESYS if the socket died. */
static int drain(struct hbeat *h, char *err, size_t errlen)
{
	for (int k = 0; k < DRAIN_MAX; k++) {
		struct wire_in in;
		struct frame_msg m;
		char why[200];
		uint32_t id;
		int rc = wire_recv(h->sock, 1, &in, &m, why, sizeof why);

		if (rc == KVW_EAGAIN)
			return 0;
		if (rc == KVW_ESYS)
			return kvw_errf(err, errlen, rc, "%s", why);
		if (rc) {
			MALFORMED(h->tab, "a peer sent a malformed message: %s",
				  why);
			continue;
		}
		id = rid_peer(h, in.id, in.idlen);
		if (id == 0) {
			/* A connection of a peer since forgotten. */
			rtab_counter_add(h->tab, RTAB_C_STALE, 1);
		} else {
			pong(h, id, &m);
		}
		wire_in_release(&in);
	}
	return 0;
}

int hbeat_run(struct hbeat *h, char *err, size_t errlen)
{
	uint64_t next_tick = proc_now_ns();
	int rc = 0;

	LOG(LOG_INFO, "interval %.3f s, %u misses make a peer dead; room for "
	    "%llu peer connections (open files: %llu)",
	    (double)h->interval_ns / 1e9, h->max_failures,
	    (unsigned long long)h->fd_budget, (unsigned long long)h->fd_limit);
	while (!proc_stopping() && rc == 0) {
		uint64_t now, due;
		zmq_pollitem_t item = { .socket = h->sock, .events = ZMQ_POLLIN };

		/* Replies already here are read before any PING's timeout is
		 * judged: a PONG that came in time while this process waited
		 * for the CPU (a busy machine) is an answer, not a miss. */
		if ((rc = drain(h, err, errlen)) != 0)
			break;
		now = proc_now_ns();
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
		if (zmq_poll(&item, 1, proc_poll_ms(due, now, POLL_CAP_MS)) < 0) {
			if (errno == EINTR)
				continue;
			kvw_seterr(err, errlen, "zmq_poll: %s",
				   zmq_strerror(errno));
			rc = KVW_ESYS;
			break;
		}
		/* What came in is drained at the top of the next round. */
	}
	return rc;
}
