/*
 * xport_rdma.c - the RDMA transport: one-sided RDMA WRITE into the decode
 * pool over reliable-connected queue pairs. libibverbs is loaded at run
 * time (rdma_lib.h), so kvwire binaries start on machines without it.
 *
 * Decode side: open (device, port, GID: rdma_qp.h) -> xport_rdma_listen
 * (the queue pair exchange thread, rdma_serve.h) -> register the pool for
 * remote writes; the descriptor (rdma_desc.h) names the region (addr, size,
 * rkey), the device's address and the exchange listener with its secret.
 * GPU pools (xrdma_reg.c, rdma_gpu.h): where the engine keeps the pool on
 * a GPU, its device memory is registered too (dmabuf, else peer memory,
 * else refused) and the descriptor carries its segments (flag GPU); a
 * batch is cut where a region ends on either side (rdma_pmap.h), so WRs
 * scatter from and write to device addresses directly.
 * Prefill side: register the own pool (local reads only), then connect:
 * a queue pair and CQ of its own per decode pool, numbers swapped over the
 * exchange (rdma_cm.h), RTR, RTS. A batch is checked whole
 * (rdma_chain_check), then posted as chains of WRs (rdma_chain.h: one
 * scatter entry per copy, WRs joined where the remote bytes follow on,
 * small ones inline, signalled every few, the batch's last one WRITE WITH
 * IMMEDIATE carrying its id), never more outstanding on a queue pair than
 * its send queue holds: a full queue is reaped first. wait polls the CQs
 * until every posted WR has completed (rdma_cq.h counts them by room and
 * batch).
 *
 * Failure: a failed completion (or post) leaves the queue pair in the
 * error state; the rest of its WRs complete flushed and are drained (up to
 * 2 s) before the call returns the first failure, so when write_batch or
 * wait returns no WR of the batch is still in flight. A queue pair that
 * completes nothing for 30 s (the decode stopped, or stopped reposting
 * receives) is moved to the error state and drained the same way. The
 * remote is then broken: its batches are refused until disconnect, which
 * destroys the queue pair and closes the exchange connection (so the
 * decode destroys its end too).
 */
#include "xrdma.h"
#include "xport_rdma.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rdma_cm.h"
#include "base/log.h"

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int xrdma_probe(char *err, size_t errlen)
{
	struct rdma_dev d;
	int rc = rdma_dev_open(&d, err, errlen);

	if (rc == 0)
		rdma_dev_close(&d);
	return rc;
}

/* ---- completions ---------------------------------------------------- */

/* Takes what r's CQ holds: the number of completions, or -1 when polling
 * failed. A failed completion breaks r (the queue pair is in error). */
static int reap(struct xrdma_remote *r)
{
	struct ibv_wc wc[32];
	int k = ibv_poll_cq(r->cq, 32, wc);

	for (int i = 0; i < k; i++)
		if (rdma_track_complete(&r->tr, wc[i].wr_id, (int)wc[i].status,
					wc[i].vendor_err) == KVW_ESYS &&
		    !r->broken) {
			r->broken = 1;
			snprintf(r->why, sizeof r->why, "%s", r->tr.why);
		}
	return k;
}

/* Breaks r for `why` (unless broken already) and moves its queue pair to
 * the error state, so every WR still queued completes flushed. */
static void fail_remote(struct xrdma_xport *x, struct xrdma_remote *r,
			const char *why)
{
	if (!r->broken) {
		r->broken = 1;
		snprintf(r->why, sizeof r->why, "%s", why);
	}
	(void)rdma_qp_error(&x->dev, r->qp);
	r->progress_ns = now_ns(); /* the drain's clock starts here */
}

/* Polls r until fewer than `left` WRs are outstanding (0: none). Returns
 * 0, or KVW_ETIMEDOUT once deadline (0: none) passes while r is healthy.
 * A stall fails r; a broken r is drained for at most XRDMA_DRAIN_NS, then
 * what is left is given up (logged). */
int xrdma_settle(struct xrdma_xport *x, struct xrdma_remote *r,
		  uint64_t left, uint64_t deadline)
{
	uint32_t idle = 0;
	uint64_t now;

	while (rdma_track_outstanding(&r->tr) > left) {
		int k = reap(r);

		now = now_ns();
		if (k > 0) {
			r->progress_ns = now;
			idle = 0;
			continue;
		}
		if (k < 0 && !r->broken)
			fail_remote(x, r, "polling the completion queue failed");
		if (r->broken && now - r->progress_ns > XRDMA_DRAIN_NS) {
			LOG_RL(LOG_WARN, "rdma: %llu WRs never completed after "
			       "a failure; queue pair given up",
			       (unsigned long long)rdma_track_outstanding(&r->tr));
			rdma_track_abandon(&r->tr);
			break;
		}
		if (!r->broken && now - r->progress_ns > XRDMA_STALL_NS) {
			fail_remote(x, r, "no completion for 30 s (the decode "
					  "is gone or not taking immediates)");
			continue;
		}
		if (deadline && now >= deadline && !r->broken)
			return KVW_ETIMEDOUT;
		if (++idle > 2000) {
			struct timespec ts = { 0, 20000 };

			nanosleep(&ts, NULL);
		}
	}
	return 0;
}

/* r's failure, once: KVW_ESYS with its text, then 0. */
static int told(struct xrdma_remote *r, char *err, size_t errlen)
{
	if (!r->broken || r->told)
		return 0;
	r->told = 1;
	return kvw_errf(err, errlen, KVW_ESYS, "rdma: %s", r->why);
}

/* ---- instance, registration ------------------------------------------ */

static void remote_drop(struct xrdma_xport *x, struct xrdma_remote *r)
{
	if (!r->used)
		return;
	if (rdma_track_outstanding(&r->tr) > 0) {
		fail_remote(x, r, "disconnected with WRs in flight");
		(void)xrdma_settle(x, r, 0, 0);
	}
	x->dev.lib->destroy_qp(r->qp);
	x->dev.lib->destroy_cq(r->cq);
	if (r->fd >= 0)
		close(r->fd);
	rdma_track_free(&r->tr);
	free(r->desc);
	free(r->seg);
	free(r->flat);
	memset(r, 0, sizeof *r);
	r->fd = -1;
}

static void xrdma_close(struct xport **xp)
{
	struct xrdma_xport *x;

	if (xp == NULL || *xp == NULL)
		return;
	x = XPORT_SELF(struct xrdma_xport, *xp);
	for (uint32_t i = 0; i < x->nrmt; i++)
		remote_drop(x, &x->rmt[i]);
	free(x->rmt);
	/* The exchange's queue pairs go before the regions they write. */
	rdma_serve_stop(&x->srv);
	for (uint32_t i = 0; i < x->nmr; i++) {
		rgpu_close(&x->gpu[i]);
		if (x->mr[i])
			x->dev.lib->dereg_mr(x->mr[i]);
	}
	free(x->lflat);
	free(x->piece);
	if (x->dev.ctx)
		rdma_dev_close(&x->dev);
	free(x);
	*xp = NULL;
}

static int xrdma_open(struct xport **out, char *err, size_t errlen)
{
	struct xrdma_xport *x = calloc(1, sizeof *x);
	int rc;

	*out = NULL;
	if (!x)
		return kvw_errf(err, errlen, KVW_ENOMEM, "rdma: out of memory");
	x->base.ops = &xport_rdma_ops;
	rc = rdma_dev_open(&x->dev, err, errlen);
	if (rc) {
		free(x);
		return rc;
	}
	*out = &x->base;
	return 0;
}

struct xrdma_xport *xrdma_of(const struct xport *x)
{
	if (!x || x->ops != &xport_rdma_ops)
		return NULL;
	return (struct xrdma_xport *)(void *)((char *)(uintptr_t)x -
					       offsetof(struct xrdma_xport, base));
}

int xport_rdma_listen(struct xport *xp, const char *hostport, char *err,
		      size_t errlen)
{
	struct xrdma_xport *x = xrdma_of(xp);

	if (!x)
		return kvw_errf(err, errlen, KVW_EINVAL, "not an rdma transport");
	if (x->srv)
		return kvw_errf(err, errlen, KVW_EEXIST, "rdma: listening already");
	return rdma_serve_start(&x->dev, hostport, &x->srv, err, errlen);
}

int xport_rdma_address(const struct xport *xp, char *buf, size_t len)
{
	const struct xrdma_xport *x = xrdma_of(xp);

	if (!x || !x->srv)
		return KVW_ENOENT;
	snprintf(buf, len, "%s:%u (device %s port %u, GID index %d)",
		 rdma_serve_host(x->srv), rdma_serve_port(x->srv), x->dev.name,
		 x->dev.port, x->dev.gid_index);
	return 0;
}

int xport_rdma_stats(const struct xport *xp, struct xport_rdma_stats *st)
{
	const struct xrdma_xport *x = xrdma_of(xp);
	struct rdma_serve_counts c;

	if (!x)
		return KVW_EINVAL;
	if (!x->srv)
		return KVW_ENOENT;
	rdma_serve_counts(x->srv, &c);
	*st = (struct xport_rdma_stats){ c.conns, c.refused, c.batches,
					 c.errors, c.live };
	return 0;
}

/* ops->summary: the decode's closing line, when it listened. */
static int xrdma_summary(const struct xport *xp, char *buf, size_t len)
{
	struct xport_rdma_stats rs;

	if (xport_rdma_stats(xp, &rs) != 0)
		return KVW_ENOENT;
	snprintf(buf, len, "rdma: stopping: %llu queue pairs, %llu batches "
		 "landed; %llu exchanges refused, %llu queue pairs failed",
		 (unsigned long long)rs.conns, (unsigned long long)rs.batches,
		 (unsigned long long)rs.refused, (unsigned long long)rs.errors);
	return 0;
}

uint64_t xport_rdma_room_busy(const struct xport *xp, uint64_t room)
{
	const struct xrdma_xport *x = xrdma_of(xp);
	uint64_t n = 0;

	for (uint32_t i = 0; x && i < x->nrmt; i++)
		if (x->rmt[i].used)
			n += rdma_track_room_left(&x->rmt[i].tr, room);
	return n;
}
/* ---- connect --------------------------------------------------------- */

/* Brings r up toward the pool of d: CQ, queue pair, exchange, RTR, RTS.
 * 0 or KVW_E*; on error r holds nothing. */
static int remote_up(struct xrdma_xport *x, struct xrdma_remote *r,
		     const struct rdma_desc *d, char *err, size_t errlen)
{
	const struct rdma_lib *l = x->dev.lib;
	struct rdma_qp_cfg cfg = { .send_wr = XRDMA_SQ_DEPTH, .recv_wr = 1,
				   .max_sge = XRDMA_MAX_SGE,
				   .max_inline = XRDMA_INLINE };
	struct rdma_peer me, peer = { .lid = d->lid, .mtu = d->mtu,
				      .link = d->link };
	struct ibv_qp_cap got;
	uint32_t psn = rdma_psn();
	int rc;

	r->fd = -1;
	memcpy(peer.gid, d->gid, 16);
	r->cq = l->create_cq(x->dev.ctx, XRDMA_SQ_DEPTH + 1, NULL, NULL, 0);
	if (!r->cq)
		return kvw_errf(err, errlen, KVW_ESYS,
				"rdma: unable to create a CQ on %s: %s",
				x->dev.name, strerror(errno));
	cfg.send_cq = cfg.recv_cq = r->cq;
	rc = rdma_qp_create(&x->dev, &cfg, &r->qp, &got, err, errlen);
	if (rc)
		goto fail_cq;
	r->depth = got.max_send_wr < XRDMA_SQ_DEPTH ? got.max_send_wr
						    : XRDMA_SQ_DEPTH;
	if (r->depth == 0 || rdma_track_init(&r->tr, r->depth, l) != 0) {
		rc = kvw_errf(err, errlen, KVW_ENOMEM,
			      "rdma: out of memory (or a send queue of 0)");
		goto fail_qp;
	}
	rdma_qp_self(&x->dev, r->qp, psn, &me);
	rc = rcm_exchange(d->host, d->port, d->secret, &me, XRDMA_EXCHANGE_MS,
			  &r->fd, &peer, err, errlen);
	if (rc)
		goto fail_track;
	rc = rdma_qp_connect(&x->dev, r->qp, psn, &peer, err, errlen);
	if (rc)
		goto fail_fd;
	r->cfg = (struct rdma_chain_cfg){
		.max_sge = got.max_send_sge < XRDMA_MAX_SGE
				   ? (got.max_send_sge ? got.max_send_sge : 1)
				   : XRDMA_MAX_SGE,
		.max_inline = got.max_inline_data,
		.signal_every = r->depth / 2 < XRDMA_SIGNAL_EVERY
					? (r->depth / 2 ? r->depth / 2 : 1)
					: XRDMA_SIGNAL_EVERY,
		.max_msg = x->dev.max_msg < XRDMA_WR_BYTES ? x->dev.max_msg
							   : XRDMA_WR_BYTES,
	};
	return 0;

fail_fd:
	close(r->fd);
	r->fd = -1;
fail_track:
	rdma_track_free(&r->tr);
fail_qp:
	l->destroy_qp(r->qp);
	r->qp = NULL;
fail_cq:
	l->destroy_cq(r->cq);
	r->cq = NULL;
	return rc;
}

static int xrdma_connect(struct xport *xp, const uint8_t *desc, size_t desclen,
			 uint32_t *id, char *err, size_t errlen)
{
	struct xrdma_xport *x = XPORT_SELF(struct xrdma_xport, xp);
	struct xrdma_remote *r;
	struct rdma_desc d;
	uint32_t i;
	int rc;

	for (i = 0; i < x->nrmt; i++)
		if (x->rmt[i].used && !x->rmt[i].broken &&
		    x->rmt[i].desclen == desclen &&
		    memcmp(x->rmt[i].desc, desc, desclen) == 0) {
			*id = i;
			return 0;
		}
	rc = rdma_desc_decode(desc, desclen, &d, err, errlen);
	if (rc)
		return rc == KVW_EVERSION ? KVW_EINVAL : rc;
	if (d.port == 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"rdma: nobody listens for this pool (a source "
				"pool's descriptor)");
	for (i = 0; i < x->nrmt && x->rmt[i].used; i++)
		;
	if (i == x->caprmt) {
		uint32_t cap = x->caprmt ? 2 * x->caprmt : 4;
		struct xrdma_remote *v = realloc(x->rmt, cap * sizeof *v);

		if (!v)
			return kvw_errf(err, errlen, KVW_ENOMEM,
					"rdma: out of memory");
		x->rmt = v;
		x->caprmt = cap;
	}
	r = &x->rmt[i];
	memset(r, 0, sizeof *r);
	r->desc = malloc(desclen);
	rc = r->desc ? xrdma_remote_map(r, &d, err, errlen)
		     : kvw_errf(err, errlen, KVW_ENOMEM, "rdma: out of memory");
	if (rc == 0)
		rc = remote_up(x, r, &d, err, errlen);
	if (rc) {
		free(r->desc);
		free(r->seg);
		free(r->flat);
		memset(r, 0, sizeof *r);
		return rc;
	}
	memcpy(r->desc, desc, desclen);
	r->desclen = desclen;
	r->used = 1;
	if (i == x->nrmt)
		x->nrmt++;
	*id = i;
	return 0;
}

static void xrdma_disconnect(struct xport *xp, uint32_t id)
{
	struct xrdma_xport *x = XPORT_SELF(struct xrdma_xport, xp);

	if (id < x->nrmt)
		remote_drop(x, &x->rmt[id]);
}

static void xrdma_set_room(struct xport *xp, uint64_t room)
{
	XPORT_SELF(struct xrdma_xport, xp)->room = room;
}

/* ---- the data path ---------------------------------------------------- */

static int xrdma_write_batch(struct xport *xp, const struct xport_copy *c,
			     size_t n, char *err, size_t errlen)
{
	struct xrdma_xport *x = XPORT_SELF(struct xrdma_xport, xp);
	struct rdma_chain ch = { x->wr, XRDMA_CHAIN, x->sge,
				 XRDMA_CHAIN * XRDMA_MAX_SGE, 0, 0 };
	struct rdma_cursor cur = { 0, 0 };
	struct xrdma_remote *r;
	uint64_t batch;
	size_t np = 0;
	int rc;

	if (n == 0)
		return 0;
	if (c[0].dst >= x->nrmt || !x->rmt[c[0].dst].used)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"rdma: unknown remote %u", c[0].dst);
	r = &x->rmt[c[0].dst];
	if (r->broken)
		return kvw_errf(err, errlen, KVW_ESYS,
				"rdma: remote %u failed earlier (%s); "
				"disconnect it", c[0].dst, r->why);
	rc = rdma_chain_check(c, n, x->loc, x->nmr, c[0].dst, r->reg.size,
			      err, errlen);
	if (rc == 0)
		rc = xrdma_fresh_locals(x, err, errlen);
	if (rc == 0)
		rc = xrdma_cut(x, r, c, n, &np, err, errlen);
	if (rc)
		return rc;
	batch = ++x->next_batch;
	while (cur.i < np) {
		struct ibv_send_wr *bad = NULL;
		uint64_t out = rdma_track_outstanding(&r->tr);
		uint32_t room, built, posted;

		if (out == 0)
			r->progress_ns = now_ns();
		if (out >= r->depth) {
			/* Full: reap down to half, so chains stay long. */
			(void)xrdma_settle(x, r, r->depth / 2, 0);
			if (r->broken)
				break;
			out = rdma_track_outstanding(&r->tr);
		}
		room = (uint32_t)(r->depth - out);
		ch.since_signal = r->since_signal;
		built = rdma_chain_build(&r->cfg, x->piece, np, x->lflat, r->flat,
					 &cur,
					 room, rdma_track_next_id(&r->tr),
					 (uint32_t)batch, &ch);
		if (built == 0)
			break; /* only empty copies were left */
		rc = ibv_post_send(r->qp, x->wr, &bad);
		posted = rc == 0 ? built
		       : bad ? (uint32_t)(bad - x->wr) : 0;
		if (posted)
			(void)rdma_track_post(&r->tr, posted, x->room, batch);
		r->since_signal = ch.since_signal;
		if (rc) {
			char why[120];

			snprintf(why, sizeof why, "post_send: %s", strerror(rc));
			fail_remote(x, r, why);
			break;
		}
	}
	if (r->broken) {
		/* Nothing of this batch may stay in flight. */
		(void)xrdma_settle(x, r, 0, 0);
		r->told = 1;
		return kvw_errf(err, errlen, KVW_ESYS, "rdma: %s", r->why);
	}
	return 0;
}

static int xrdma_wait(struct xport *xp, int timeout_ms, char *err,
		      size_t errlen)
{
	struct xrdma_xport *x = XPORT_SELF(struct xrdma_xport, xp);
	uint64_t deadline = timeout_ms >= 0
				    ? now_ns() + (uint64_t)timeout_ms * 1000000ull
				    : 0;
	int first = 0;

	for (uint32_t i = 0; i < x->nrmt; i++) {
		struct xrdma_remote *r = &x->rmt[i];
		int rc;

		if (!r->used)
			continue;
		if (xrdma_settle(x, r, 0, deadline) == KVW_ETIMEDOUT)
			return kvw_errf(err, errlen, KVW_ETIMEDOUT,
					"rdma: %llu WRs still in flight after "
					"%d ms",
					(unsigned long long)
						rdma_track_outstanding(&r->tr),
					timeout_ms);
		rc = first ? told(r, NULL, 0) : told(r, err, errlen);
		if (rc && !first)
			first = rc;
	}
	return first;
}

const struct xport_ops xport_rdma_ops = {
	.name = "rdma",
	.pins_pages = 1,
	.probe = xrdma_probe,
	.open = xrdma_open,
	.reg = xrdma_reg,
	.connect = xrdma_connect,
	.disconnect = xrdma_disconnect,
	.write_batch = xrdma_write_batch,
	.wait = xrdma_wait,
	.close = xrdma_close,
	.set_room = xrdma_set_room,
	.listen = xport_rdma_listen,
	.listen_what = "queue pair exchange",
	.address = xport_rdma_address,
	.refresh = xport_rdma_refresh,
	.summary = xrdma_summary,
};
