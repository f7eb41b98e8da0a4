/*
 * receiver.c - kv-receiver's setup, poll loop and peer message handlers (see
 * receiver.h). One zmq_poll loop serves the engine ROUTER, the peer ROUTER,
 * one DEALER per bootstrap and one per prefill peer; its timeout is the
 * nearest of the room deadlines, the abort-ack deadlines and the bootstrap
 * retry timers. Handlers get already-decoded frames; anything malformed is
 * counted and warned about at a bounded rate and changes nothing.
 */
#include "receiver_impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/proc.h"
#include "mem/pool.h"
#include "roles/authz.h"
#include "roles/forget_cleared.h"
#include "roles/malformed.h"
#include "wire/dealers.h"
#include "wire/wire.h"
#include "wire/wpoll.h"
#include "xport/xport.h"

#define ROOM_CAPACITY 65536u
#define PEER_CAPACITY 1024u
#define ROOM_BUCKETS 16384u
#define POLL_CAP_MS 1000
#define DRAIN_MAX 256 /* messages taken from one socket per wakeup */

static void bad_config(char *err, size_t errlen, const char *what)
{
	kvw_seterr(err, errlen, "%s", what);
}

static int open_state(struct receiver *r, const struct receiver_cfg *cfg,
		      char *err, size_t errlen)
{
	char path[POOL_PATH_MAX + 1], e2[200];
	const struct xport_ops *ops;
	uint64_t pool_bytes = 0;
	uint32_t id;
	int existed = 0, rc;

	rc = rtab_create(cfg->table, proc_test_room_capacity(ROOM_CAPACITY),
			 PEER_CAPACITY, r->epoch,
			 &r->tab, &existed, e2, sizeof e2);
	if (rc)
		return kvw_errf(err, errlen, rc, "table %s: %s", cfg->table,
				e2);
	r->made_files |= existed ? 0 : 1;
	authz_mark(r->tab);
	if (existed) {
		rc = rtab_fail_stale_owner(r->tab, r->epoch, NULL, NULL);
		if (rc > 0)
			LOG(LOG_WARN, "table %s: failed %d rooms of the previous owner",
			    cfg->table, rc);
	}
	r->model = (struct kvw_model){ 0 };
	shape_model(&r->shape, &r->topo, &r->rank, &r->model);
	r->bufs = calloc(KVW_MAX_BUFFERS, sizeof *r->bufs);
	r->page_seen = calloc((size_t)r->shape.pages / 64 + 1,
			      sizeof *r->page_seen);
	if (!r->bufs || !r->page_seen) {
		bad_config(err, errlen, "out of memory");
		return KVW_ENOMEM;
	}
	rc = shape_layout(&r->shape, &r->topo, &r->rank, 1, r->bufs,
			  KVW_MAX_BUFFERS, &r->nbufs, &pool_bytes, e2, sizeof e2);
	if (rc) {
		kvw_seterr(err, errlen, "layout: %s", e2);
		return rc == KVW_ENOMEM ? KVW_EINVAL : rc;
	}
	rc = pool_path_for(cfg->pool, path, sizeof path);
	if (rc)
		return kvw_errf(err, errlen, rc, "pool name %s is not usable",
				cfg->pool);
	/* A restarted receiver keeps the pool its engine still maps and its
	 * prefill peers' workers map by name (same size); else a fresh one. */
	rc = pool_adopt(path, pool_bytes, &r->pool, &existed, e2, sizeof e2);
	if (rc == 0 && existed)
		LOG(LOG_INFO, "reusing pool %s", path);
	if (rc)
		return kvw_errf(err, errlen, rc, "pool %s: %s", path, e2);
	r->made_files |= existed ? 0 : 2;
	ops = xport_find(r->transport);
	if (!ops)
		return kvw_errf(err, errlen, KVW_EINVAL, "unknown transport %s",
				r->transport);
	rc = xport_open(ops, &r->xp, e2, sizeof e2);
	/* A transport that serves the decode side listens on --data-addr,
	 * and the registration's descriptor names the listener. Where the
	 * decode's own processes write the bytes (sink_info: tcp's sinks),
	 * --sinks of them serve it; elsewhere the writes need nobody here
	 * (rdma: a thread of the transport hands each prefill worker a
	 * queue pair). */
	if (rc == 0 && ops->listen) {
		rc = xport_listen(r->xp, cfg->data_addr ? cfg->data_addr
							: "127.0.0.1:0",
				  e2, sizeof e2);
		if (ops->sink_info)
			r->nsinks = cfg->sinks ? cfg->sinks : 1;
	}
	if (rc == 0)
		rc = xport_register(r->xp, r->pool, &id, r->desc, sizeof r->desc,
				    &r->desclen, e2, sizeof e2);
	r->pool_id = id;
	if (rc)
		return kvw_errf(err, errlen, rc, "transport %s: %s",
				r->transport, e2);
	if (xport_address(r->xp, e2, sizeof e2) == 0)
		LOG(LOG_INFO, "%s %s (%s)", ops->listen_what, e2, ops->name);
	LOG(LOG_INFO, "pool %s: %llu bytes, %u buffers", path,
	    (unsigned long long)pool_bytes, r->nbufs);
	return 0;
}

static int open_sockets(struct receiver *r, char *err, size_t errlen)
{
	r->ctx = zmq_ctx_new();
	if (!r->ctx)
		return kvw_errf(err, errlen, KVW_ESYS, "zmq_ctx_new: %s",
				zmq_strerror(errno));
	if (dealers_open(r->ctx, 0, &r->dealers) != 0)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	r->engine_sock = wire_socket(r->ctx, ZMQ_ROUTER, 0, err, errlen);
	if (!r->engine_sock || wire_bind(r->engine_sock, r->engine, 0600, err,
					 errlen) != 0)
		return KVW_ESYS;
	r->peer_sock = wire_socket(r->ctx, ZMQ_ROUTER, 0, err, errlen);
	if (!r->peer_sock || wire_bind(r->peer_sock, r->listen, 0, err,
				       errlen) != 0)
		return KVW_ESYS;
	return 0;
}

int receiver_check(const struct receiver_cfg *cfg, uint64_t *pool_bytes,
		   char *err, size_t errlen)
{
	char path[POOL_PATH_MAX + 1], e2[200];
	struct kvw_buf *bufs;
	uint32_t n;
	int rc;

	if (!cfg->listen || !cfg->engine || !cfg->table || !cfg->pool)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"listen, engine, table and pool are required");
	if ((rc = wire_endpoint_check(cfg->listen, e2, sizeof e2)) ||
	    (rc = wire_endpoint_check(cfg->engine, e2, sizeof e2)))
		return kvw_errf(err, errlen, rc, "%s", e2);
	if (strlen(cfg->listen) >= RTAB_ENDPOINT_MAX)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"listen endpoint too long");
	if (!cfg->topo.tp || !cfg->topo.pp || !cfg->topo.cp || !cfg->topo.dp ||
	    cfg->rank.tp >= cfg->topo.tp || cfg->rank.pp >= cfg->topo.pp ||
	    cfg->rank.cp >= cfg->topo.cp || cfg->rank.dp >= cfg->topo.dp)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"rank outside the topology");
	if (pool_path_for(cfg->pool, path, sizeof path) < 0 ||
	    !pool_name_ok(path))
		return kvw_errf(err, errlen, KVW_EINVAL,
				"pool %.120s: a name, or an absolute path to a "
				"file named kvwire.<name>.pool",
				cfg->pool);
	bufs = calloc(KVW_MAX_BUFFERS, sizeof *bufs);
	if (!bufs)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	rc = shape_layout(&cfg->shape, &cfg->topo, &cfg->rank, 1, bufs,
			  KVW_MAX_BUFFERS, &n, pool_bytes, e2, sizeof e2);
	free(bufs);
	if (rc)
		return kvw_errf(err, errlen, rc == KVW_ENOMEM ? KVW_EINVAL : rc,
				"layout: %s", e2);
	/* Before anything is made: a missing transport is a clean 77 with
	 * no table or pool left behind. */
	return xport_probe(cfg->transport ? cfg->transport : XPORT_DEFAULT,
			   err, errlen);
}

int receiver_open(const struct receiver_cfg *cfg, struct receiver **out,
		  char *err, size_t errlen)
{
	struct receiver *r;
	uint64_t pool_bytes;
	int rc;

	*out = NULL;
	rc = receiver_check(cfg, &pool_bytes, err, errlen);
	if (rc)
		return rc;
	r = calloc(1, sizeof *r);
	if (!r) {
		bad_config(err, errlen, "out of memory");
		return KVW_ENOMEM;
	}
	snprintf(r->listen, sizeof r->listen, "%s", cfg->listen);
	snprintf(r->engine, sizeof r->engine, "%s", cfg->engine);
	snprintf(r->transport, sizeof r->transport, "%s",
		 cfg->transport ? cfg->transport : XPORT_DEFAULT);
	r->table_path = strdup(cfg->table);
	r->pool_path = strdup(cfg->pool);
	r->topo = cfg->topo;
	r->rank = cfg->rank;
	r->shape = cfg->shape;
	r->timeout_ns = cfg->waiting_timeout_ns;
	r->forget_ns = cfg->forget_after_ns ? cfg->forget_after_ns
					    : RX_FORGET_NS;
	r->epoch = proc_epoch();
	r->rnd = (uint32_t)(r->epoch | 1);
	receiver_token_init(r);
	r->my_rank = cfg->rank.tp;
	r->all_cp_ranks = cfg->all_cp_ranks;
	receiver_limit_init(r);
	rc = KVW_ENOMEM;
	if (!r->table_path || !r->pool_path ||
	    receiver_rooms_init(&r->rooms, ROOM_BUCKETS) != 0) {
		bad_config(err, errlen, "out of memory");
		goto fail;
	}
	r->exe = strdup(cfg->exe ? cfg->exe : "/proc/self/exe");
	if (!r->exe) {
		rc = kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
		goto fail;
	}
	rc = open_state(r, cfg, err, errlen);
	if (rc)
		goto fail;
	if (r->nsinks) {
		if (r->nsinks > RX_MAX_SINKS) {
			rc = kvw_errf(err, errlen, KVW_EINVAL,
				      "at most %u sinks", RX_MAX_SINKS);
			goto fail;
		}
		rc = receiver_sinks_start(r, err, errlen);
		if (rc)
			goto fail;
	}
	rc = open_sockets(r, err, errlen);
	if (rc)
		goto fail;
	*out = r;
	return 0;
fail:
	/* Remove what this open made, nothing else (a table or pool reused
	 * from a previous incarnation stays). */
	if (r->made_files & 1)
		rtab_unlink(r->table_path);
	if (r->made_files & 2) {
		char path[POOL_PATH_MAX + 1];

		if (pool_path_for(r->pool_path, path, sizeof path) == 0)
			pool_unlink(path);
	}
	receiver_close(&r);
	return rc;
}

void receiver_close(struct receiver **rp)
{
	struct receiver *r = rp ? *rp : NULL;

	if (!r)
		return;
	receiver_sinks_stop(r);
	free(r->exe);
	for (uint32_t i = 0; i < r->nboots; i++)
		receiver_boot_free(r->boots[i]);
	for (uint32_t i = 0; i < r->npeers; i++)
		free(r->peers[i]);
	free(r->boots);
	free(r->peers);
	wire_close(&r->engine_sock);
	wire_close(&r->peer_sock);
	dealers_close(&r->dealers);
	if (r->ctx)
		zmq_ctx_term(r->ctx);
	receiver_rooms_free(&r->rooms);
	if (r->xp) {
		char note[300];

		/* What the transport's own listener saw, where it has one. */
		if (xport_summary(r->xp, note, sizeof note) == 0)
			LOG(LOG_INFO, "%s", note);
	}
	xport_close(&r->xp);
	pool_close(&r->pool);
	rtab_close(&r->tab);
	free(r->bufs);
	free(r->page_seen);
	free(r->table_path);
	free(r->pool_path);
	free(r);
	*rp = NULL;
}

/* ---- peer messages -------------------------------------------------------- */

static void status_msg(struct receiver *r, const struct frame_msg *m)
{
	struct rx_room *room = receiver_rooms_get(&r->rooms, m->hdr.room);
	const struct frame_status *s = &m->u.status;
	struct rx_target *t = NULL;
	int st, rc;

	st = room ? rtab_state(r->tab, room->ref) : KVW_ENOENT;
	if (st < 0 ||
	    !rtab_accepts(RTAB_ROLE_DECODE, (unsigned)st, RTAB_MSG_STATUS)) {
		rtab_counter_add(r->tab, RTAB_C_REFUSED, 1);
		LOG_ROOM(LOG_DEBUG, m->hdr.room, "STATUS for a %s room: ignored",
			 st < 0 ? "unknown" : kvw_state_str((unsigned)st));
		return;
	}
	for (uint32_t i = 0; i < room->ntargets && !t; i++)
		if (room->targets[i].unique == m->hdr.src_rank &&
		    !room->targets[i].dummy && room->targets[i].peer)
			t = &room->targets[i];
	if (!t || !room->sent) {
		rtab_counter_add(r->tab, RTAB_C_STALE, 1);
		LOG_RL(LOG_WARN, "room %llu: STATUS from rank %u, not a target",
		       (unsigned long long)m->hdr.room, m->hdr.src_rank);
		return;
	}
	if (s->token == 0 || s->token != t->token) {
		/* About an earlier incarnation of this room id (a worker's
		 * late STATUS, a restarted control's answer to an old
		 * XFER_INFO), or another target's token (each has its own):
		 * it changes nothing in this one. */
		rtab_counter_add(r->tab, RTAB_C_STALE, 1);
		LOG_RL(LOG_INFO, "room %llu: STATUS(%s) from rank %u of "
		       "another incarnation: dropped",
		       (unsigned long long)room->id, kvw_state_str(s->state),
		       m->hdr.src_rank);
		return;
	}
	if (receiver_peer_seen(r, t->peer, m->hdr.epoch))
		return; /* a retired epoch, or a restart: its rooms just failed */
	if (s->state == KVW_FAILED && s->reason == KVW_R_PEER_RESTART)
		t->peer->registered = 0; /* it does not know us (any more) */
	if (s->state == KVW_FAILED) {
		/* A failure this receiver did not start: its own abort round
		 * is the drain point (receiver_drain.c). */
		receiver_drain_failed(r, room, s->reason ? s->reason
							 : KVW_R_TRANSFER,
				      s->text);
		return;
	}
	rc = receiver_room_success(room, m->hdr.src_rank);
	if (rc == RX_COMPLETE &&
	    rtab_transition_if(r->tab, room->ref, RTAB_M_ACTIVE, KVW_SUCCESS,
			       0, NULL) == 0) {
		(void)rtab_pages_done_add(r->tab, room->ref, room->npages);
		LOG_ROOM(LOG_DEBUG, room->id, "Success (%u of %u prefill ranks)",
			 room->success.n, room->required_resp);
	} else if (rc == RX_DUP) {
		LOG_ROOM(LOG_DEBUG, room->id, "Success from rank %u again: "
			 "counted once", m->hdr.src_rank);
	} else if (rc == RX_COUNTED) {
		LOG_ROOM(LOG_DEBUG, room->id, "Success from rank %u (%u of %u)",
			 m->hdr.src_rank, room->success.n, room->required_resp);
	}
}

static void ack_msg(struct receiver *r, const struct frame_msg *m)
{
	struct rx_room *room = receiver_rooms_get(&r->rooms, m->hdr.room);
	int rc;

	if (!room) {
		LOG_ROOM(LOG_DEBUG, m->hdr.room, "ABORT_ACK for an unknown room");
		return;
	}
	rc = receiver_drain_ack(r, room, m->hdr.src_rank, m->u.abort_ack.token);
	if (rc == RX_IGNORED) {
		/* Unarmed, another arming's token (an older incarnation of
		 * the room id), or not a target: it releases nothing. */
		rtab_counter_add(r->tab, RTAB_C_STALE, 1);
		LOG_ROOM(LOG_DEBUG, room->id, "ABORT_ACK from rank %u dropped: "
			 "room %s", m->hdr.src_rank, room->armed ?
			 "armed with another token" : "not armed");
		return;
	}
}

/* 0 when an ABORT_ACK carries a retired epoch of the target it names
 * (dropped, counted stale), else 1. Only an ack with the token the ABORT
 * to that target carried speaks for its epoch: anyone can write a rank
 * and an epoch into a header, and a new epoch fails every room of the
 * peer (a restart). Any other ack is left to ack_msg, which drops it. */
static int ack_epoch_ok(struct receiver *r, const struct frame_msg *m)
{
	struct rx_room *room = receiver_rooms_get(&r->rooms, m->hdr.room);

	/* An inherited room's targets have no known rank (their acks are
	 * told apart by token): nothing to match here. */
	for (uint32_t i = 0; room && !room->inherited && i < room->ntargets; i++)
		if (room->targets[i].unique == m->hdr.src_rank &&
		    room->targets[i].peer && room->armed &&
		    m->u.abort_ack.token == receiver_room_target_token(room, i))
			return receiver_peer_seen(r, room->targets[i].peer,
						  m->hdr.epoch) >= 0;
	return 1;
}

/* p: the prefill peer whose DEALER this came on, NULL for the ROUTER. */
static void peer_msg(struct receiver *r, void *sock, const struct wire_in *in,
		     struct rx_peer *p, const struct frame_msg *m)
{
	struct frame_msg pong;
	char err[160];

	switch (m->hdr.type) {
	case FRAME_PING:
		frame_msg_init(&pong, FRAME_PONG, r->my_rank, m->hdr.room, r->epoch);
		if (wire_send(sock, &pong, p ? NULL : in->id, p ? 0 : in->idlen,
			      err, sizeof err) != 0)
			LOG_RL(LOG_WARN, "PONG: %s", err);
		receiver_sent_on(r, sock);
		return;
	case FRAME_PONG:
		if (!p)
			break; /* nobody is pinged through the ROUTER */
		(void)receiver_peer_seen(r, p, m->hdr.epoch);
		return;
	case FRAME_STATUS:
		status_msg(r, m);
		return;
	case FRAME_ABORT_ACK:
		if (ack_epoch_ok(r, m))
			ack_msg(r, m);
		return;
	default:
		break;
	}
	MALFORMED(r->tab, "peer sent %s: dropped", frame_type_str(m->hdr.type));
}

void receiver_dispatch(struct receiver *r, int engine, const struct frame_msg *m)
{
	struct wire_in in = { 0 };

	if (engine)
		receiver_engine_msg(r, m);
	else
		peer_msg(r, r->peer_sock, &in, NULL, m);
}

void receiver_peer_in(struct receiver *r, const struct wire_in *in,
		      const struct frame_msg *m, uint64_t now_ns)
{
	if (receiver_limit_admit(r, in->id, in->idlen, m->hdr.type, now_ns))
		peer_msg(r, r->peer_sock, in, NULL, m);
}

/* ---- timers ---------------------------------------------------------------- */

static void on_expired(void *arg, const struct rtab_view *v)
{
	struct receiver *r = arg;
	struct rx_room *room = receiver_rooms_get(&r->rooms, v->room);

	LOG_ROOM(LOG_WARN, v->room, "timed out");
	if (room && room->ref.slot == v->ref.slot && room->ref.gen == v->ref.gen)
		receiver_room_abort(r, room, KVW_R_TIMEOUT);
}

static void ack_timers(struct receiver *r, uint64_t now)
{
	struct idmap_iter it = { 0 };
	struct rx_room *q;
	uint64_t next = 0;

	while ((q = receiver_rooms_next(&r->rooms, &it))) {
		if (!q->ack_deadline_ns)
			continue;
		if (q->ack_deadline_ns <= now) {
			q->ack_deadline_ns = 0;
			LOG_ROOM(LOG_WARN, q->id, "releasing with %u of %u abort "
				 "acks", q->acked.n, q->ack_needed);
			receiver_room_release(r, q, "release deadline");
		} else if (next == 0 || q->ack_deadline_ns < next) {
			next = q->ack_deadline_ns;
		}
	}
	r->next_ack_deadline = next;
}

/* Runs due timers; returns the poll timeout in ms. */
static long timers(struct receiver *r)
{
	uint64_t now = rtab_now_ns(), next;

	authz_publish(r->tab, &r->zap_seen);
	if (r->next_deadline && now >= r->next_deadline) {
		(void)rtab_expire(r->tab, now, on_expired, r);
		r->next_deadline = rtab_next_deadline(r->tab);
	}
	if (r->next_ack_deadline && now >= r->next_ack_deadline)
		ack_timers(r, now);
	forget_cleared(r->tab, now);
	if ((r->npeers || r->nboots) && now >= r->next_sync_ns) {
		receiver_peers_sync(r);
		receiver_drain_scan(r);
		receiver_forget_departed(r, now);
		r->next_sync_ns = now + RX_SYNC_NS;
	}
	next = receiver_boot_tick(r, now);
	/* An armed room waits for a sink's batch to end: a batch is at most
	 * a few MiB, so poll it closely. */
	if (r->fence_waiting && receiver_fence_tick(r) &&
	    (next == 0 || now + RX_FENCE_POLL_NS < next))
		next = now + RX_FENCE_POLL_NS;
	if (r->next_deadline && (next == 0 || r->next_deadline < next))
		next = r->next_deadline;
	if (r->next_ack_deadline && (next == 0 || r->next_ack_deadline < next))
		next = r->next_ack_deadline;
	if ((r->npeers || r->nboots) && (next == 0 || r->next_sync_ns < next))
		next = r->next_sync_ns;
	return proc_poll_ms(next, now, POLL_CAP_MS);
}

/* ---- the loop ---------------------------------------------------------------- */

enum { SRC_ENGINE, SRC_PEER, SRC_BOOT, SRC_PREFILL };

/* Reads what the socket in loop slot `slot` has; reaching its end marks
 * the slot drained. Returns 0, or KVW_ESYS when it is gone. */
static int drain(struct receiver *r, int kind, uint32_t idx, uint32_t slot,
		 void *sock, char *err, size_t errlen)
{
	int router = kind == SRC_ENGINE || kind == SRC_PEER;

	for (int n = 0; n < DRAIN_MAX; n++) {
		struct wire_in in;
		struct frame_msg m;
		char why[200];
		int rc = wire_recv(sock, router, &in, &m, why, sizeof why);

		if (rc == KVW_EAGAIN) {
			wpoll_drained(r->wp, slot);
			return 0;
		}
		if (rc == KVW_ESYS)
			return kvw_errf(err, errlen, KVW_ESYS, "%s", why);
		if (rc) {
			MALFORMED(r->tab, "malformed message dropped: %s", why);
			continue;
		}
		if (kind == SRC_ENGINE)
			receiver_engine_msg(r, &m);
		else if (kind == SRC_BOOT)
			receiver_boot_reply(r, r->boots[idx], &m);
		else if (kind == SRC_PEER)
			receiver_peer_in(r, &in, &m, proc_now_ns());
		else
			peer_msg(r, sock, &in, r->peers[idx], &m);
		wire_in_release(&in);
	}
	return 0;
}

void receiver_sent_on(struct receiver *r, void *sock)
{
	if (r->wp)
		wpoll_touch_sock(r->wp, sock);
}

/* Slots: engine, peer ROUTER, each bootstrap DEALER, each prefill DEALER
 * (sockets only ever get added while running, never replaced). */
static int watch(struct receiver *r, uint32_t *n, uint32_t *nb)
{
	uint32_t k = 0;

	*nb = r->nboots;
	*n = 2 + r->nboots + r->npeers;
	if (*n > WPOLL_MAX)
		return KVW_ERANGE;
	if (wpoll_set(r->wp, k++, r->engine_sock) < 0 ||
	    wpoll_set(r->wp, k++, r->peer_sock) < 0)
		return KVW_ESYS;
	for (uint32_t i = 0; i < r->nboots; i++)
		if (wpoll_set(r->wp, k++, receiver_boot_sock(r->boots[i])) < 0)
			return KVW_ESYS;
	for (uint32_t i = 0; i < r->npeers; i++)
		if (wpoll_set(r->wp, k++, r->peers[i]->sock) < 0)
			return KVW_ESYS;
	wpoll_truncate(r->wp, k);
	return 0;
}

int receiver_run(struct receiver *r, char *err, size_t errlen)
{
	int rc = 0;

	LOG(LOG_INFO, "serving: listen %s, engine %s, epoch %016llx", r->listen,
	    r->engine, (unsigned long long)r->epoch);
	r->wp = wpoll_new();
	if (!r->wp)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	while (!proc_stopping()) {
		long timeout = timers(r);
		uint32_t n, nb;

		if (r->nsinks)
			receiver_sinks_tick(r);
		if (watch(r, &n, &nb) < 0) {
			kvw_seterr(err, errlen, "cannot watch %u sockets", n);
			rc = KVW_ESYS;
			break;
		}
		if (wpoll_wait(r->wp, timeout) < 0) {
			if (errno == EINTR)
				continue;
			kvw_seterr(err, errlen, "poll: %s", strerror(errno));
			rc = KVW_ESYS;
			break;
		}
		for (uint32_t i = 0; i < n && rc == 0; i++) {
			int kind = i == 0 ? SRC_ENGINE : i == 1 ? SRC_PEER
				 : i < 2 + nb ? SRC_BOOT : SRC_PREFILL;
			uint32_t idx = kind == SRC_BOOT ? i - 2 : i - 2 - nb;
			void *sock = i == 0 ? r->engine_sock : i == 1 ? r->peer_sock
				   : kind == SRC_BOOT ? receiver_boot_sock(r->boots[idx])
				   : r->peers[idx]->sock;

			if (wpoll_due(r->wp, i))
				rc = drain(r, kind, idx, i, sock, err, errlen);
		}
		if (rc)
			break;
	}
	wpoll_free(&r->wp);
	LOG(LOG_INFO, "stopping: %u rooms held",
	    receiver_rooms_count(&r->rooms));
	return rc;
}
