/*
 * sender.c - kv-sender's control process: building its state in the order
 * docs/ARCHITECTURE.md asks for (layout, room table, pool, the workers with
 * their channels, then the peer and engine sockets), the one poll loop (wpoll)
 * over the peer, engine and bootstrap sockets and one channel per worker
 * (lib/wire/chan.h), whose timeout
 * is the nearest of the deadline sweep, a pending worker restart and the
 * bootstrap ping, and the teardown.
 * What each message does lives in sender_xfer.c, sender_peer.c and
 * sender_supervise.c; see sender.h for the contract.
 */
#include "sender_impl.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/proc.h"
#include "mem/pool.h"
#include "plan/rankmap.h"
#include "roles/authz.h"
#include "roles/forget_cleared.h"
#include "roles/malformed.h"
#include "wire/chan.h"
#include "wire/dealers.h"
#include "wire/wpoll.h"
#include "xport/xport.h"

#define ROOM_CAPACITY 65536u
#define PEER_CAPACITY 1024u
#define POLL_CAP_MS 500L
#define SWEEP_EVERY_NS 1000000000ull
#define DRAIN_BUDGET 256 /* messages per socket per poll round */

/* Socket slots, then one plain slot per worker channel. */
enum { SLOT_PEER, SLOT_ENGINE, SLOT_BOOT, SLOT_WORKER0 };

uint32_t sender_rank_of(const struct kvw_topo *t, const struct kvw_coord *c)
{
	return rankmap_unique(t, c);
}

/* strdup that tolerates NULL (gives NULL) and flags a failed copy. */
static char *dup_or(const char *v, int *oom)
{
	char *d;

	if (!v)
		return NULL;
	d = strdup(v);
	if (!d)
		*oom = 1;
	return d;
}

static int check_cfg(const struct sender_cfg *c, char *err, size_t errlen)
{
	const struct kvw_topo *t = &c->topo;
	const struct kvw_coord *x = &c->coord;
	char e2[200];
	int rc;

	if (!c->listen || !c->engine || !c->table || !c->pool || !c->exe)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"--listen, --engine, --table and --pool "
				"are required");
	if (c->workers < 1 || c->workers > SENDER_MAX_WORKERS)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"--workers must be 1..%u", SENDER_MAX_WORKERS);
	if (!t->tp || !t->pp || !t->cp || !t->dp || x->tp >= t->tp ||
	    x->pp >= t->pp || x->cp >= t->cp || x->dp >= t->dp) {
		return kvw_errf(err, errlen, KVW_EINVAL,
				"--rank outside --topo");
	}
	if (!c->transport || !xport_find(c->transport))
		return kvw_errf(err, errlen, KVW_EINVAL, "unknown transport %s",
				c->transport ? c->transport : "(none)");
	if (strlen(c->listen) >= RTAB_ENDPOINT_MAX)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"--listen endpoint too long");
	if ((rc = wire_endpoint_check(c->listen, e2, sizeof e2)) ||
	    (rc = wire_endpoint_check(c->engine, e2, sizeof e2)) ||
	    (c->bootstrap && (rc = wire_endpoint_check(c->bootstrap, e2,
						       sizeof e2))))
		return kvw_errf(err, errlen, rc, "%s", e2);
	return 0;
}

int sender_check(const struct sender_cfg *cfg, uint64_t *pool_bytes,
		 char *err, size_t errlen)
{
	char path[POOL_PATH_MAX + 1];
	struct kvw_buf *bufs;
	uint32_t n;
	int rc;

	rc = check_cfg(cfg, err, errlen);
	if (rc < 0)
		return rc;
	if (pool_path_for(cfg->pool, path, sizeof path) < 0 ||
	    !pool_name_ok(path))
		return kvw_errf(err, errlen, KVW_EINVAL,
				"--pool %.120s: a name, or an absolute path to "
				"a file named kvwire.<name>.pool",
				cfg->pool);
	bufs = calloc(SENDER_MAX_LAYOUT, sizeof *bufs);
	if (!bufs)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	rc = shape_layout(&cfg->shape, &cfg->topo, &cfg->coord, 0, bufs,
			  SENDER_MAX_LAYOUT, &n, pool_bytes, err, errlen);
	free(bufs);
	if (rc < 0)
		return rc == KVW_ENOMEM ? KVW_EINVAL : rc;
	/* Before anything is made: a transport this machine lacks is a
	 * clean 77 now, not a worker restarted every second. */
	return xport_probe(cfg->transport, err, errlen);
}

/* Own layout, model and layer range from the shape. */
static int build_layout(struct sender *s, char *err, size_t errlen)
{
	s->bufs = calloc(SENDER_MAX_LAYOUT, sizeof *s->bufs);
	if (!s->bufs)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	shape_model(&s->shape, &s->topo, &s->coord, &s->model);
	shape_layers(&s->shape, &s->topo, &s->coord, &s->layer_first,
		     &s->layer_count);
	return shape_layout(&s->shape, &s->topo, &s->coord, 0, s->bufs,
			    SENDER_MAX_LAYOUT, &s->nbufs, &s->pool_bytes, err,
			    errlen);
}

static int open_files(struct sender *s, char *err, size_t errlen)
{
	int existed = 0, rc, n;

	rc = rtab_create(s->table_path, proc_test_room_capacity(ROOM_CAPACITY),
			 PEER_CAPACITY, s->epoch, &s->t, &existed, err, errlen);
	if (rc < 0)
		return rc;
	s->made_files |= existed ? 0 : 1;
	authz_mark(s->t);
	if (existed) {
		n = rtab_fail_stale_owner(s->t, s->epoch, NULL, NULL);
		LOG(LOG_WARN, "reopened table %s: failed %d rooms of the previous "
		    "incarnation", s->table_path, n);
	}
	/* The pool is the engine's memory: a restarted control keeps the
	 * one its engine still maps (same size) instead of replacing it. */
	rc = pool_adopt(s->pool_path, s->pool_bytes, &s->pool, &n, err, errlen);
	if (rc == 0 && n)
		LOG(LOG_INFO, "reusing pool %s", s->pool_path);
	if (rc == 0 && !n)
		s->made_files |= 2;
	return rc;
}

/* A ROUTER bound at ep. */
static void *router(struct sender *s, const char *ep, unsigned mode,
		    char *err, size_t errlen)
{
	void *r = wire_socket(s->ctx, ZMQ_ROUTER, 0, err, errlen);

	if (!r)
		return NULL;
	if (wire_bind(r, ep, mode, err, errlen) < 0)
		wire_close(&r);
	return r;
}

int sender_open(const struct sender_cfg *cfg, struct sender **out, char *err,
		size_t errlen)
{
	struct sender *s;
	char path[POOL_PATH_MAX + 1];
	uint64_t pool_bytes;
	int oom = 0, rc;

	*out = NULL;
	rc = sender_check(cfg, &pool_bytes, err, errlen);
	if (rc < 0)
		return rc;
	(void)pool_path_for(cfg->pool, path, sizeof path);
	s = calloc(1, sizeof *s);
	if (!s)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	for (uint32_t k = 0; k < SENDER_MAX_WORKERS; k++)
		chan_init(&s->w[k].ch, -1); /* before any failure path closes */
	s->listen = dup_or(cfg->listen, &oom);
	s->engine_ep = dup_or(cfg->engine, &oom);
	s->bootstrap = dup_or(cfg->bootstrap, &oom);
	s->table_path = dup_or(cfg->table, &oom);
	s->pool_path = dup_or(path, &oom);
	s->transport = dup_or(cfg->transport, &oom);
	s->exe = dup_or(cfg->exe, &oom);
	s->name = dup_or(cfg->name, &oom);
	s->log_level = dup_or(cfg->log_level, &oom);
	s->nworkers = cfg->workers;
	s->topo = cfg->topo;
	s->coord = cfg->coord;
	s->shape = cfg->shape;
	s->room_timeout_ns = cfg->bootstrap_timeout_ns;
	s->worker_stall_ns = cfg->worker_stall_ns ? cfg->worker_stall_ns
						  : 30000000000ull;
	s->rank = sender_rank_of(&s->topo, &s->coord);
	s->epoch = proc_epoch();
	s->ready_fd = -1;
	rl_init(&s->rl_register, SENDER_REGISTER_RATE, SENDER_REGISTER_BURST);
	rl_init(&s->rl_xfer, SENDER_XFER_INFO_RATE, SENDER_XFER_INFO_BURST);
	if (oom || sender_rooms_init(&s->rooms, 1024) < 0 ||
	    sender_given_up_init(&s->given_up) < 0) {
		kvw_seterr(err, errlen, "out of memory");
		rc = KVW_ENOMEM;
		goto fail;
	}
	rc = build_layout(s, err, errlen);
	if (rc < 0)
		goto fail;
	rc = open_files(s, err, errlen);
	if (rc < 0)
		goto fail;
	rc = KVW_ESYS;
	s->ctx = zmq_ctx_new();
	if (!s->ctx) {
		kvw_seterr(err, errlen, "zmq_ctx_new: %s", zmq_strerror(errno));
		goto fail;
	}
	rc = dealers_open(s->ctx, 0, &s->dealers);
	if (rc < 0) {
		kvw_seterr(err, errlen, "out of memory");
		goto fail;
	}
	rc = sender_workers_start(s, err, errlen);
	if (rc < 0)
		goto fail;
	rc = KVW_ESYS;
	s->peer_sock = router(s, s->listen, 0, err, errlen);
	if (!s->peer_sock)
		goto fail;
	s->eng_sock = router(s, s->engine_ep, 0600, err, errlen);
	if (!s->eng_sock)
		goto fail;
	*out = s;
	return 0;
fail:
	if (s->made_files & 1)
		rtab_unlink(s->table_path);
	if (s->made_files & 2)
		pool_unlink(s->pool_path);
	sender_close(&s);
	return rc;
}

/* Reads up to DRAIN_BUDGET messages from one socket slot. KVW_ESYS: the
 * socket or context is gone. */
static int drain(struct sender *s, int slot)
{
	void *sock = slot == SLOT_PEER ? s->peer_sock
		     : slot == SLOT_BOOT ? s->boot_sock : s->eng_sock;
	struct wire_in in;
	struct frame_msg m;
	char why[256];

	if (slot >= SLOT_WORKER0) {
		sender_worker_drain(s, (uint32_t)(slot - SLOT_WORKER0));
		wpoll_drained(s->wp, (uint32_t)slot);
		return 0;
	}
	for (int i = 0; i < DRAIN_BUDGET; i++) {
		int rc = wire_recv(sock, slot != SLOT_BOOT, &in, &m, why,
				   sizeof why);

		if (rc == KVW_EAGAIN) {
			wpoll_drained(s->wp, (uint32_t)slot);
			return 0;
		}
		if (rc == KVW_ESYS) {
			LOG(LOG_ERROR, "socket gone: %s", why);
			return rc;
		}
		if (rc < 0) {
			MALFORMED(s->t, "malformed frame on the %s socket: %s",
				  slot == SLOT_PEER ? "peer"
				  : slot == SLOT_BOOT ? "bootstrap" : "engine", why);
			continue;
		}
		if (slot == SLOT_PEER)
			sender_on_peer(s, &in, &m);
		else if (slot == SLOT_BOOT)
			sender_boot_on_reply(s, &m);
		else
			sender_on_engine(s, &m);
		wire_in_release(&in);
	}
	return 0;
}

static uint64_t earliest(uint64_t a, uint64_t b)
{
	return !a ? b : !b ? a : a < b ? a : b;
}

void sender_sent_on(struct sender *s, void *sock)
{
	if (s->wp)
		wpoll_touch_sock(s->wp, sock);
}

/* Worker channels come and go with their workers, and want POLLOUT only
 * while they hold unsent bytes: their slots are refreshed before each
 * wait. */
static void watch_workers(struct sender *s)
{
	for (uint32_t k = 0; k < s->nworkers; k++) {
		const struct chan *c = &s->w[k].ch;

		wpoll_set_fd(s->wp, SLOT_WORKER0 + k, c->fd,
			     (short)(POLLIN | (chan_pending(c) ? POLLOUT : 0)));
	}
}

/* The loop's socket set: slot k holds the socket drain(s, k) reads. */
static int watch(struct sender *s, char *err, size_t errlen)
{
	s->wp = wpoll_new();
	if (!s->wp ||
	    wpoll_set_fd(s->wp, SLOT_WORKER0 + s->nworkers - 1, -1, 0) < 0 ||
	    wpoll_set(s->wp, SLOT_PEER, s->peer_sock) < 0 ||
	    wpoll_set(s->wp, SLOT_ENGINE, s->eng_sock) < 0 ||
	    (s->boot_sock && wpoll_set(s->wp, SLOT_BOOT, s->boot_sock) < 0)) {
		return kvw_errf(err, errlen, KVW_ESYS,
				"cannot watch the sockets");
	}
	return 0;
}

static int loop(struct sender *s, char *err, size_t errlen);

int sender_run(struct sender *s, int ready_fd, char *err, size_t errlen)
{
	int rc;

	s->ready_fd = ready_fd;
	rc = sender_boot_register(s, err, errlen);
	if (rc < 0)
		return proc_stopping() ? 0 : rc;
	rc = sender_boot_open(s, err, errlen);
	if (rc < 0)
		return rc;
	rc = watch(s, err, errlen);
	if (rc == 0)
		rc = loop(s, err, errlen);
	wpoll_free(&s->wp);
	return rc;
}

/* The poll loop: timers, then a wait on the sockets (wpoll: one poll(2)
 * per wakeup), then every socket that can have input is read. */
static int loop(struct sender *s, char *err, size_t errlen)
{
	int ready = 0, rc;

	s->next_sweep_ns = proc_now_ns();
	while (!proc_stopping()) {
		uint64_t now, next;

		if (proc_take_sigchld()) {
			/* JOB_DONEs a worker sent before dying count first. */
			for (uint32_t k = 0; k < s->nworkers; k++)
				sender_worker_drain(s, k);
			sender_workers_reap(s);
		}
		now = proc_now_ns();
		if (now >= s->next_sweep_ns) {
			authz_publish(s->t, &s->zap_seen);
			s->next_sweep_ns = earliest(now + SWEEP_EVERY_NS,
						    sender_sweep(s, now));
		}
		if (now >= s->next_notice_ns) {
			sender_notice(s);
			s->next_notice_ns = now + SENDER_NOTICE_NS;
		}
		if (now >= s->next_orphan_ns) {
			sender_orphan_sweep(s, now);
			s->next_orphan_ns = now + SENDER_ORPHAN_EVERY_NS;
		}
		forget_cleared(s->t, now);
		next = s->rooms.m.n ? earliest(s->next_sweep_ns,
					       s->next_notice_ns)
				    : s->next_sweep_ns;
		next = earliest(next, sender_workers_tick(s, now));
		next = earliest(next, sender_boot_tick(s, now));
		if (!ready && sender_workers_all_up(s)) {
			ready = 1;
			if (proc_ready(s->ready_fd) < 0)
				LOG(LOG_WARN, "cannot write READY to fd %d",
				    s->ready_fd);
			s->ready_fd = -1;
			LOG(LOG_INFO, "ready: rank %u, peers on %s, engine on %s, "
			    "%u workers", s->rank, s->listen, s->engine_ep,
			    s->nworkers);
		}
		/* No bootstrap: its slot stays empty (fd -1). */
		watch_workers(s);
		rc = wpoll_wait(s->wp, proc_poll_ms(next, now, POLL_CAP_MS));
		if (rc < 0) {
			if (errno == EINTR)
				continue;
			return kvw_errf(err, errlen, KVW_ESYS, "poll: %s",
					strerror(errno));
		}
		for (int k = 0; k < SLOT_WORKER0 + (int)s->nworkers; k++)
			if (wpoll_due(s->wp, (uint32_t)k) && drain(s, k) < 0)
				goto dead;
	}
	return 0;
dead:
	return kvw_errf(err, errlen, KVW_ESYS,
			"a socket or the zmq context is gone");
}

void sender_close(struct sender **sp)
{
	struct sender *s;

	if (!sp || !*sp)
		return;
	s = *sp;
	sender_workers_stop(s);
	for (uint32_t k = 0; k < SENDER_MAX_WORKERS; k++) {
		sender_jobq_free(&s->w[k].q);
		chan_close(&s->w[k].ch);
	}
	wire_close(&s->peer_sock);
	wire_close(&s->eng_sock);
	wire_close(&s->boot_sock);
	sender_peers_free(s);
	dealers_close(&s->dealers);
	if (s->ctx)
		zmq_ctx_term(s->ctx);
	sender_rooms_free(&s->rooms);
	sender_given_up_fini(&s->given_up);
	pool_close(&s->pool);
	rtab_close(&s->t);
	free(s->listen);
	free(s->engine_ep);
	free(s->bootstrap);
	free(s->table_path);
	free(s->pool_path);
	free(s->transport);
	free(s->exe);
	free(s->name);
	free(s->log_level);
	free(s->bufs);
	free(s->pc);
	free(s->fc);
	free(s);
	*sp = NULL;
}
