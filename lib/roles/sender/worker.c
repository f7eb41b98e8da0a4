/*
 * worker.c - a kv-sender worker; see worker.h. State is built before the
 * hello goes to the control: the room table (writable: the worker moves the
 * outstanding count, bytes and, on a transport error, the state), this
 * rank's pool (read-only, registered as the copies' source) and the
 * transport. Decode pools are connected on first use and cached by their
 * descriptor bytes (least recently used one dropped when the cache is
 * full), so a steady stream of jobs costs no open or mmap per job. The
 * room's final job (FRAME_JOB_FINAL) ends the room here: Success in the
 * table and STATUS(Success) straight to its decode over a DEALER cached
 * per endpoint, one hop fewer than through the control. Where the
 * transport answers per job (tcp) up to WORKER_PIPE jobs are in flight at
 * once and land in order; elsewhere each job lands before the next.
 */
#include "worker.h"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "base/log.h"
#include "base/proc.h"
#include "mem/pool.h"
#include "roles/malformed.h"
#include "table/rtab.h"
#include "wire/chan.h"
#include "wire/dealers.h"
#include "wire/wire.h"
#include "wire/wire_auth.h"
#include "xport/xport.h"

#define WORKER_CONNS 64u
#define WORKER_REPLIES 16u
#define POLL_CAP_MS 500L
/* Answers held back while a burst runs stay under this many bytes of
 * copies (~200 us at memcpy speed): big jobs are answered one by one. */
#define WORKER_DONE_BYTES (1u << 20)
/* Jobs in flight at once where the transport answers for each job
 * (xport_pipelines: tcp), so a burst of small jobs costs one round trip
 * to the decode instead of one each. Bounded so the sink's ACKs for all
 * of it fit the socket buffers (the sink never blocks on an ACK nobody
 * reads yet) and a room's outstanding count drops soon after its bytes
 * land. Other transports land each job before the next is written. */
#define WORKER_PIPE 64u
#define WORKER_PIPE_BATCHES 1024u
#define WORKER_PIPE_BYTES (16u << 20)
#define NO_DST UINT32_MAX

struct worker_conn {
	uint8_t *desc; /* owned copy; NULL: free entry */
	uint32_t len;
	uint32_t id; /* xport remote id */
	uint64_t used;
	int broken;  /* a batch failed: dropped once nothing is in flight */
};

/* A job whose batches are written and whose outcome is not known yet. */
struct inflight {
	struct frame_msg m; /* the JOB, desc and copies cleared: they point
			     * into a frame the channel has reused since */
	struct rtab_ref ref;
	uint32_t dst;    /* the remote written to; NO_DST: none */
	uint64_t lo, hi; /* the transport's marks around its batches */
	uint64_t bytes;  /* written */
	uint32_t batches;
	int rc;          /* a failure while connecting or writing */
	int ended;       /* the room ended first: the rest was not written */
	char why[256];
};

struct worker {
	uint32_t id;
	uint64_t epoch;
	struct rtab *t;
	struct pool *pool;
	struct xport *x;
	uint32_t src; /* registered id of the own pool */
	void *ctx;      /* for the DEALERs to decode endpoints only */
	struct dealers *replies; /* to decodes' return endpoints (STATUS of
				  * final jobs), least recently used dropped */
	struct chan ch; /* to the control: JOBs in, hello and JOB_DONEs out */
	struct worker_conn conns[WORKER_CONNS];
	uint64_t tick;
	/* Jobs that succeeded and are not answered yet: one JOB_DONE answers
	 * them all (frame_job_done) when the input runs dry, at
	 * FRAME_JOB_DONE_MAX jobs or at WORKER_DONE_BYTES bytes. */
	struct {
		uint32_t n, slot, gen;
		uint64_t room, bytes;
	} done;
	struct xport_copy batch[WORKER_BATCH];
	/* Jobs in flight, oldest at head; landed in order, so they are
	 * answered in order. */
	struct inflight pipe[WORKER_PIPE];
	uint32_t pipe_head, pipe_n, pipe_depth;
	uint64_t pipe_batches, pipe_bytes;
	uint64_t delay_us; /* TEST ONLY: KVW_TEST_COPY_DELAY_US */
	uint64_t status_delay_us; /* TEST ONLY: KVW_TEST_STATUS_DELAY_US */
	uint64_t counts_seen[3]; /* redials, resent, integrity counted */
};

/* TEST ONLY: sleeps the configured delay between a batch's liveness check
 * and its write, so tests can land an ABORT on a copy in flight. */
static void test_delay(const struct worker *w, uint64_t room, uint32_t left)
{
	if (!w->delay_us)
		return;
	LOG_ROOM(LOG_DEBUG, room, "test delay before a batch, %u copies left",
		 left);
	proc_test_sleep_us(w->delay_us);
}

/* 1 while the incarnation may still receive bytes. */
static int room_live(const struct worker *w, struct rtab_ref ref)
{
	int st = rtab_state(w->t, ref);

	return st >= 0 &&
	       rtab_accepts(RTAB_ROLE_WORKER, (unsigned)st, RTAB_MSG_JOB);
}

static void conn_drop(struct worker *w, struct worker_conn *c)
{
	int shared = 0;

	for (uint32_t i = 0; i < WORKER_CONNS; i++)
		if (&w->conns[i] != c && w->conns[i].desc && w->conns[i].id == c->id)
			shared = 1;
	if (!shared)
		xport_disconnect(w->x, c->id);
	free(c->desc);
	memset(c, 0, sizeof *c);
}

/* The remote id for a descriptor, connecting it on first use. */
static int conn_get(struct worker *w, struct frame_bytes d, uint32_t *id,
		    char *err, size_t errlen)
{
	struct worker_conn *slot = NULL;
	int rc;

	for (uint32_t i = 0; i < WORKER_CONNS; i++) {
		struct worker_conn *c = &w->conns[i];

		if (c->desc && c->len == d.len && memcmp(c->desc, d.p, d.len) == 0) {
			c->used = ++w->tick;
			*id = c->id;
			return 0;
		}
		if (!slot || !c->desc || (slot->desc && c->used < slot->used))
			slot = c;
	}
	if (slot->desc)
		conn_drop(w, slot);
	slot->desc = malloc(d.len ? d.len : 1);
	if (!slot->desc)
		return KVW_ENOMEM;
	rc = xport_connect(w->x, d.p, d.len, id, err, errlen);
	if (rc < 0) {
		free(slot->desc);
		slot->desc = NULL;
		return rc;
	}
	memcpy(slot->desc, d.p, d.len);
	slot->len = d.len;
	slot->id = *id;
	slot->used = ++w->tick;
	return 0;
}

/* The cache entry of a connected descriptor, or NULL. */
static struct worker_conn *conn_find(struct worker *w, struct frame_bytes d)
{
	for (uint32_t i = 0; i < WORKER_CONNS; i++) {
		struct worker_conn *c = &w->conns[i];

		if (c->desc && c->len == d.len && memcmp(c->desc, d.p, d.len) == 0)
			return c;
	}
	return NULL;
}

/* A batch to remote id failed: its entries are dropped (a pool that
 * shrank or was removed is connected afresh, and checked again, by a
 * later job) once no job in flight still waits on them. */
static void conn_broken(struct worker *w, uint32_t id)
{
	for (uint32_t i = 0; i < WORKER_CONNS; i++)
		if (w->conns[i].desc && w->conns[i].id == id)
			w->conns[i].broken = 1;
}

static void conns_sweep(struct worker *w)
{
	for (uint32_t i = 0; i < WORKER_CONNS; i++)
		if (w->conns[i].desc && w->conns[i].broken)
			conn_drop(w, &w->conns[i]);
}

/* Writes the job's batches to e->dst, checking before each batch after
 * the first that the room is still live. A failure goes to e->rc; a room
 * that ended first sets e->ended. */
static void job_write(struct worker *w, const struct frame_msg *m,
		      struct inflight *e)
{
	const struct frame_job *j = &m->u.job;

	/* The decode's writer (tcp) checks this room's incarnation before
	 * each batch. */
	xport_set_room(w->x, m->hdr.room);
	xport_set_incarnation(w->x, j->token);
	e->lo = xport_mark(w->x, e->dst);
	/* The engine's own host memory, when it registered some, is what
	 * the job reads (one load when nothing changed). */
	e->rc = pool_refresh(w->pool, e->why, sizeof e->why);
	if (e->rc == 0 && pool_overlaid(w->pool) &&
	    xport_ops_of(w->x)->pins_pages)
		e->rc = kvw_errf(e->why, sizeof e->why, KVW_EINVAL,
				 "%s: the engine's host memory "
				 "(kvw_register_host) is not registered with "
				 "the transport; use the pool or GPU memory",
				 xport_ops_of(w->x)->name);
	for (uint32_t i = 0; e->rc == 0 && i < j->copies.n; i += WORKER_BATCH) {
		uint32_t k = j->copies.n - i < WORKER_BATCH ? j->copies.n - i
							     : WORKER_BATCH;
		uint64_t b = 0;
		int rc;

		if (i > 0 && !room_live(w, e->ref)) {
			e->ended = 1;
			break;
		}
		test_delay(w, m->hdr.room, j->copies.n - i);
		for (uint32_t c = 0; c < k; c++) {
			struct frame_copy fc = frame_copies_get(j->copies, i + c);

			w->batch[c] = (struct xport_copy){ fc.src_off, fc.dst_off,
							   fc.len, w->src, e->dst };
			b += fc.len;
		}
		rc = xport_write_batch(w->x, w->batch, k, e->why, sizeof e->why);
		if (rc < 0) {
			e->rc = rc;
			break;
		}
		e->bytes += b;
		e->batches++;
	}
	e->hi = xport_mark(w->x, e->dst);
}

/* The room's final job succeeded: Success in the table (the one point
 * that decides between it and any failure of the room), then
 * STATUS(Success) to the job's destination in the control's name (its
 * src_rank and epoch from the JOB header, the destination's incarnation
 * token from the JOB). KVW_ESTALE when the room ended
 * first (nothing sent). */
static int finish_room(struct worker *w, const struct frame_msg *m,
		       struct rtab_ref ref)
{
	struct frame_msg st;
	char why[256];
	void *sock;

	if (rtab_transition_if(w->t, ref, RTAB_M(KVW_TRANSFERRING), KVW_SUCCESS,
			       0, NULL) != 0)
		return KVW_ESTALE;
	if (w->status_delay_us) { /* TEST ONLY: a death lands here */
		LOG_ROOM(LOG_DEBUG, m->hdr.room, "test delay between its "
			 "Success and its STATUS");
		proc_test_sleep_us(w->status_delay_us);
	}
	snprintf(why, sizeof why, "no reply endpoint");
	sock = m->u.job.reply[0] ? dealers_get(w->replies, m->u.job.reply, why,
						sizeof why)
				  : NULL;
	if (!sock) {
		LOG_RL(LOG_ERROR, "room %llu: no way to tell decode %s of its "
		       "success: %s", (unsigned long long)m->hdr.room,
		       m->u.job.reply, why);
		return 0;
	}
	frame_msg_init(&st, FRAME_STATUS, m->hdr.src_rank, m->hdr.room,
		       m->hdr.epoch);
	st.u.status.state = KVW_SUCCESS;
	st.u.status.reason = KVW_R_NONE;
	st.u.status.token = m->u.job.token;
	if (wire_send(sock, &st, NULL, 0, why, sizeof why) < 0)
		LOG_RL(LOG_WARN, "room %llu: STATUS to decode %s: %s",
		       (unsigned long long)m->hdr.room, m->u.job.reply, why);
	return 0;
}

/* One JOB_DONE for `count` jobs ending with (room, slot, gen). */
static void answer(struct worker *w, uint64_t room, uint32_t slot,
		   uint32_t gen, int rc, uint64_t bytes, uint32_t count)
{
	struct frame_msg done;
	char why[256];

	frame_msg_init(&done, FRAME_JOB_DONE, w->id, room, w->epoch);
	done.u.job_done.slot = slot;
	done.u.job_done.generation = gen;
	done.u.job_done.result = rc;
	done.u.job_done.reason = rc == 0 || rc == KVW_ESTALE ? KVW_R_NONE
				 : rc == KVW_ECORRUPT ? KVW_R_INTEGRITY
						      : KVW_R_TRANSFER;
	done.u.job_done.bytes = bytes;
	done.u.job_done.count = count;
	if (chan_send(&w->ch, &done, why, sizeof why) < 0)
		LOG_RL(LOG_ERROR, "JOB_DONE: %s", why);
}

/* Answers the successful jobs held back, if any. */
static void answer_done(struct worker *w)
{
	if (w->done.n == 0)
		return;
	answer(w, w->done.room, w->done.slot, w->done.gen, 0, w->done.bytes,
	       w->done.n);
	memset(&w->done, 0, sizeof w->done);
}

/* The job's outcome is known: bytes and pages to the room, the room's
 * Success after its final job, the outstanding count down, the answer to
 * the control (successes held back for one JOB_DONE). rc: 0, KVW_ESTALE
 * (the room ended under the job) or a failure (the room failed). */
static void job_end(struct worker *w, const struct frame_msg *m,
		    struct rtab_ref ref, int rc, uint64_t bytes)
{
	const struct frame_job *j = &m->u.job;

	if (bytes)
		rtab_bytes_add(w->t, ref, bytes);
	if (rc == 0 && j->pages)
		rtab_pages_done_add(w->t, ref, j->pages);
	if (rc == 0 && (j->flags & FRAME_JOB_FINAL)) {
		rc = finish_room(w, m, ref);
		if (rc == KVW_ESTALE)
			LOG_ROOM(LOG_DEBUG, m->hdr.room, "room ended before "
				 "its final job finished");
	}
	/* Always: the control's ABORT acks and slot reuse wait on it. */
	if (rtab_outstanding_add(w->t, ref, -1) < 0)
		LOG_RL(LOG_WARN, "room %llu: outstanding count already gone",
		       (unsigned long long)m->hdr.room);
	if (rc == 0) {
		w->done.n++;
		w->done.room = m->hdr.room;
		w->done.slot = j->slot;
		w->done.gen = j->generation;
		w->done.bytes += bytes;
		if (w->done.n == FRAME_JOB_DONE_MAX ||
		    w->done.bytes >= WORKER_DONE_BYTES)
			answer_done(w);
		return;
	}
	answer_done(w); /* in order: the successes before this one first */
	answer(w, m->hdr.room, j->slot, j->generation, rc, bytes, 1);
}

/* The transport's redials, resends and integrity failures since the
 * last look (ops->counts: tcp), into the table's counters (kv-stat,
 * Prometheus). */
static void take_counts(struct worker *w)
{
	uint64_t now[3];

	xport_counts(w->x, &now[0], &now[1], &now[2]);
	rtab_sec_add(w->t, RTAB_S_REDIALS, now[0] - w->counts_seen[0]);
	rtab_sec_add(w->t, RTAB_S_RESENT, now[1] - w->counts_seen[1]);
	rtab_sec_add(w->t, RTAB_S_INTEGRITY_FAILED, now[2] - w->counts_seen[2]);
	memcpy(w->counts_seen, now, sizeof now);
}

/* Lands the oldest job in flight: waits for its batches (what was written
 * lands or fails before the room's outstanding count drops: tcp and rdma
 * write ahead), decides its outcome and ends it. A failure fails the room
 * (never KVW_ESTALE, so the control always tells the destinations). */
static void land_oldest(struct worker *w)
{
	struct inflight *e = &w->pipe[w->pipe_head];
	char why[256];
	int rc = e->rc, r = 0;

	/* After a failed write only a transport with marks has batches of
	 * this job to read back (it answers for them again). */
	if (e->dst != NO_DST && (rc == 0 || xport_pipelines(w->x)))
		r = xport_wait_for(w->x, e->dst, e->lo, e->hi, why, sizeof why);
	if (rc == 0 && r < 0) {
		rc = r;
		snprintf(e->why, sizeof e->why, "%s", why);
	}
	take_counts(w);
	if (e->dst != NO_DST && rc < 0)
		conn_broken(w, e->dst);
	if (e->ended) {
		LOG_ROOM(LOG_DEBUG, e->m.hdr.room, "job stopped: room ended");
		rc = KVW_ESTALE;
	} else if (rc < 0) {
		LOG_RL(LOG_WARN, "room %llu: transfer failed: %s",
		       (unsigned long long)e->m.hdr.room, e->why);
		rtab_fail(w->t, e->ref, rc == KVW_ECORRUPT ? KVW_R_INTEGRITY
							   : KVW_R_TRANSFER);
		/* A transport's KVW_ESTALE (pool replaced) is a failed
		 * transfer, not a room that ended under the job. */
		if (rc == KVW_ESTALE)
			rc = KVW_ENOENT;
	} else if (!room_live(w, e->ref)) {
		rc = KVW_ESTALE;
	}
	job_end(w, &e->m, e->ref, rc, e->bytes);
	w->pipe_batches -= e->batches;
	w->pipe_bytes -= e->bytes;
	w->pipe_head = (w->pipe_head + 1) % WORKER_PIPE;
	if (--w->pipe_n == 0)
		conns_sweep(w);
}

/* Lands every job in flight (the burst is over, or a connection is about
 * to change). */
static void pipe_drain(struct worker *w)
{
	while (w->pipe_n > 0)
		land_oldest(w);
}

/* The remote id for a job's descriptor. Connecting, or dropping a broken
 * or least recently used entry, happens with nothing in flight: a job in
 * flight still reads its ACKs from the connection it was written to. */
static int conn_for(struct worker *w, struct frame_bytes d, uint32_t *id,
		    char *err, size_t errlen)
{
	struct worker_conn *c = conn_find(w, d);

	if (c && !c->broken) {
		c->used = ++w->tick;
		*id = c->id;
		return 0;
	}
	pipe_drain(w);
	return conn_get(w, d, id, err, errlen);
}

/* Writes a job and puts it in flight; lands the oldest while too much is
 * (every job at once where the transport has no marks). */
static void run_job(struct worker *w, const struct frame_msg *m)
{
	const struct frame_job *j = &m->u.job;
	struct rtab_ref ref = { j->slot, j->generation };
	int live = room_live(w, ref), rc = 0;
	uint32_t dst = NO_DST;
	char why[256] = "";
	struct inflight *e;

	if (live)
		rc = conn_for(w, j->desc, &dst, why, sizeof why);
	e = &w->pipe[(w->pipe_head + w->pipe_n) % WORKER_PIPE];
	memset(e, 0, offsetof(struct inflight, why));
	e->m = *m;
	e->m.u.job.desc = (struct frame_bytes){ 0 };
	e->m.u.job.copies = (struct frame_copies){ 0 };
	e->ref = ref;
	e->dst = rc < 0 ? NO_DST : dst;
	snprintf(e->why, sizeof e->why, "%s", why);
	w->pipe_n++;
	if (!live) {
		LOG_ROOM(LOG_DEBUG, m->hdr.room, "job dropped: room gone or ended");
		e->ended = 1;
	} else if (rc < 0) {
		e->rc = rc;
	} else {
		job_write(w, m, e);
		/* Later jobs for this decode connect afresh instead of
		 * writing behind a failure. */
		if (e->rc < 0)
			conn_broken(w, dst);
	}
	w->pipe_batches += e->batches;
	w->pipe_bytes += e->bytes;
	while (w->pipe_n > 0 && (w->pipe_n >= w->pipe_depth ||
				 w->pipe_batches >= WORKER_PIPE_BATCHES ||
				 w->pipe_bytes >= WORKER_PIPE_BYTES))
		land_oldest(w);
}

static int worker_open(struct worker *w, const struct worker_cfg *cfg,
			char *err, size_t errlen)
{
	uint8_t desc[KVW_MAX_DESC];
	size_t desclen;
	int rc;
	const struct xport_ops *ops = xport_find(cfg->transport);

	if (!ops)
		return kvw_errf(err, errlen, KVW_EINVAL, "unknown transport %s",
				cfg->transport);
	rc = rtab_open(cfg->table, 1, &w->t, err, errlen);
	if (rc < 0)
		return rc;
	rc = pool_open(cfg->pool, 0, &w->pool, err, errlen);
	if (rc < 0)
		return rc;
	rc = xport_open(ops, &w->x, err, errlen);
	if (rc < 0)
		return rc;
	/* A transport that dials data connections of its own (tcp): every
	 * one proves the group's data key. */
	if (ops->set_group_key) {
		uint8_t key[KEYS_DATA];

		if (wire_auth_data_key(key))
			(void)xport_set_group_key(w->x, key);
		memset(key, 0, sizeof key);
	}
	/* Process-wide setup of the transport (shm, cuda: a decode pool
	 * truncated under a copy fails that job, not us). */
	if (xport_writer_setup(ops) < 0)
		return kvw_errf(err, errlen, KVW_ESYS, "SIGBUS handler: %s",
				strerror(errno));
	rc = xport_register(w->x, w->pool, &w->src, desc, sizeof desc, &desclen,
			    err, errlen);
	if (rc < 0)
		return rc;
	w->pipe_depth = xport_pipelines(w->x) ? WORKER_PIPE : 1;
	w->ctx = zmq_ctx_new();
	if (!w->ctx)
		return kvw_errf(err, errlen, KVW_ESYS, "zmq_ctx_new: %s",
				zmq_strerror(errno));
	if (dealers_open(w->ctx, WORKER_REPLIES, &w->replies) != 0)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	return 0;
}

static void worker_close(struct worker *w)
{
	for (uint32_t i = 0; i < WORKER_CONNS; i++)
		free(w->conns[i].desc);
	dealers_close(&w->replies);
	chan_close(&w->ch);
	if (w->ctx)
		zmq_ctx_term(w->ctx);
	xport_close(&w->x);
	pool_close(&w->pool);
	rtab_close(&w->t);
}

/* Reads and runs every whole JOB the control has sent, then lands what
 * is in flight and answers the burst. 0, or KVW_ESYS when the channel is
 * finished (err says why). */
static int take_jobs(struct worker *w, char *err, size_t errlen)
{
	struct frame_msg m;
	char why[256];
	int rc;

	while (!proc_stopping()) {
		rc = chan_recv(&w->ch, &m, why, sizeof why);
		if (rc == KVW_EAGAIN)
			break;
		if (rc == KVW_ESYS) {
			pipe_drain(w); /* their rooms' counts still drop */
			answer_done(w);
			return kvw_errf(err, errlen, rc, "control channel: %s",
					why);
		}
		if (rc < 0) {
			MALFORMED(w->t, "malformed frame from the control: %s",
				  why);
			continue;
		}
		if (m.hdr.type == FRAME_JOB) {
			run_job(w, &m);
		} else {
			MALFORMED(w->t, "unexpected %s from the control",
				  frame_type_str(m.hdr.type));
		}
	}
	pipe_drain(w); /* the burst is over */
	answer_done(w);
	return 0;
}

int worker_run(const struct worker_cfg *cfg, char *err, size_t errlen)
{
	struct worker *w = calloc(1, sizeof *w);
	struct frame_msg m;
	int rc;

	if (!w)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	chan_init(&w->ch, cfg->job_fd);
	w->id = cfg->id;
	w->epoch = proc_epoch();
	w->delay_us = proc_test_delay_us("KVW_TEST_COPY_DELAY_US");
	w->status_delay_us = proc_test_delay_us("KVW_TEST_STATUS_DELAY_US");
	rc = worker_open(w, cfg, err, errlen);
	if (rc < 0)
		goto out;
	frame_msg_init(&m, FRAME_PONG, w->id, 0, w->epoch);
	rc = chan_send(&w->ch, &m, err, errlen);
	if (rc < 0)
		goto out;
	while (!proc_stopping()) {
		struct pollfd p = { w->ch.fd, POLLIN, 0 };

		if (chan_pending(&w->ch))
			p.events |= POLLOUT;
		if (poll(&p, 1, (int)POLL_CAP_MS) < 0) {
			if (errno == EINTR)
				continue;
			kvw_seterr(err, errlen, "poll: %s", strerror(errno));
			rc = KVW_ESYS;
			goto out;
		}
		if (chan_pending(&w->ch) && chan_flush(&w->ch) == KVW_ESYS) {
			kvw_seterr(err, errlen, "control channel: peer gone");
			rc = KVW_ESYS;
			goto out;
		}
		if (p.revents) {
			rc = take_jobs(w, err, errlen);
			if (rc < 0)
				goto out;
		}
	}
	rc = 0;
out:
	worker_close(w);
	free(w);
	return rc;
}
