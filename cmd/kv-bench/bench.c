/*
 * bench.c - kv-bench's event loop (see bench.h). One simulated engine per
 * prefill and decode member (a struct kvw_engine each); page indices are
 * allocated per instance (every rank of an instance uses the same indices,
 * as an engine's scheduler does). Each room in flight walks: RECV_BEGIN to
 * every decode rank, SEND_BEGIN to every prefill rank, SEND_CHUNKs from each
 * prefill rank once its room is WaitingForInput (or further), then waits for
 * every decode rank to report Success (or one to report Failed, or the
 * room's deadline), verifies, CLEARs both sides and frees its pages. Pages of
 * a room that did not succeed are never reused in this run: a late copy
 * could still land in them. Commands that meet a full queue (KVW_EAGAIN) are
 * retried on the next pass; the loop only naps when a pass made no
 * progress.
 */
#include "bench_impl.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/proc.h"

static uint64_t next_id(struct run *r)
{
	uint64_t z;

	do {
		r->rng += 0x9e3779b97f4a7c15ULL;
		z = r->rng;
		z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
		z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
		z = (z ^ (z >> 31)) & 0x7fffffffffffffffULL;
	} while (z == 0);
	return z;
}

/* Takes pages and aux slots for a room and fills its source pages.
 * Returns 1 when started, 0 when the pools are exhausted. */
int bench_start_room(struct run *r, struct room *x, uint64_t now, uint64_t id)
{
	uint32_t n = r->c->pages_per_room;

	bench_route(r, x);
	if (x->di->da.n < n || x->di->daux.n < 1)
		bench_canary_flush(r); /* checks released pages, then reuses them */
	if (x->pi->pa.n < n || x->di->da.n < n || x->pi->paux.n < 1 || x->di->daux.n < 1)
		return 0;
	bench_alloc_take(&x->pi->pa, n, x->src);
	bench_alloc_take(&x->di->da, n, x->dst);
	bench_alloc_take(&x->pi->paux, 1, &x->src_aux);
	bench_alloc_take(&x->di->daux, 1, &x->dst_aux);
	x->id = id ? id : next_id(r);
	r->pairs[(x->pi - r->in) * r->ninst + (x->di - r->in)]++;
	r->routed++;
	x->phase = R_RUN;
	x->outcome = O_NONE;
	x->peer_sent = 0;
	x->src_kept = 0;
	x->t_done = 0;
	x->deadline = now + (uint64_t)(r->c->room_timeout_s * 1e9);
	memset(x->pf, 0, x->pi->np);
	memset(x->df, 0, x->di->nd);
	memset(x->cur, 0, x->pi->np * sizeof *x->cur);
	bench_plan_abort(r, x);
	for (uint32_t k = 0; k < x->pi->np && (r->c->verify || !r->c->no_fill); k++)
		bench_fill(kvw_pool_base(x->pi->p[k].e), &x->pi->p[k].g, x->id, x->src,
			   n, x->src_aux);
	return 1;
}


/* Maps a send result: 1 accepted, 0 retry later, < 0 fatal. */
int bench_sent(struct run *r, struct eng *x, int rc)
{
	if (rc == 0)
		return 1;
	if (rc == KVW_EAGAIN)
		return 0;
	snprintf(r->err, r->errlen, "%s: %s", x->m->name,
		 kvw_engine_error(x->e));
	return rc;
}

/* Sends what prefill rank k of room x can send now. Returns progress
 * (> 0), 0, or a fatal error. */
int bench_step_prefill(struct run *r, struct room *x, uint32_t k)
{
	const struct bench_config *c = r->c;
	struct eng *p = &x->pi->p[k];
	struct kvw_room_status st;
	uint32_t n = c->pages_per_room;
	int rc, prog = 0;

	if (x->aborted)
		return 0; /* the engine stops sending once it aborted */
	if (!(x->pf[k] & F_SENT)) {
		rc = bench_sent(r, p, kvw_send_begin(p->e, x->id, n, x->src_aux));
		if (rc <= 0)
			return rc;
		x->pf[k] |= F_SENT;
		x->pe[k] = kvw_control_epoch(p->e);
		prog = 1;
	}
	if (c->eager)
		x->pf[k] |= F_READY; /* the sender queues early chunks */
	if (!(x->pf[k] & F_READY)) {
		rc = kvw_poll(p->e, x->id, &st);
		if (rc == KVW_ENOENT && kvw_control_epoch(p->e) != x->pe[k]) {
			/* The BEGIN died with a kv-sender that restarted. */
			x->pf[k] |= F_FAILED | F_DONE;
			return 1;
		}
		if (rc < 0)
			return prog;
		if (st.state == KVW_FAILED || st.state == KVW_CLEARED) {
			x->pf[k] |= F_FAILED | F_DONE;
			return 1;
		}
		if (st.state == KVW_BOOTSTRAPPING)
			return prog;
		x->pf[k] |= F_READY;
		prog = 1;
	}
	while (!(x->pf[k] & F_DONE)) {
		uint32_t left = n - x->cur[k];
		uint32_t len = left < c->chunk_pages ? left : c->chunk_pages;
		int last = len == left &&
			   !(c->zero_last && n % c->chunk_pages == 0 && len);

		if (x->abort_at == AB_BETWEEN && x->cur[k] >= x->abort_pages)
			break; /* the abort comes first */
		rc = bench_sent(r, p, kvw_send_chunk(p->e, x->id, x->src + x->cur[k],
					       len, last));
		if (rc <= 0)
			return rc < 0 ? rc : prog;
		x->cur[k] += len;
		if (last)
			x->pf[k] |= F_DONE;
		prog = 1;
	}
	return prog;
}

/* Checks every decode rank's copy of a finished room. */
static int intact(struct run *r, const struct room *x)
{
	for (uint32_t k = 0; k < x->di->nd; k++)
		if (bench_verify(kvw_pool_base(x->di->d[k].e), &x->di->d[k].g, x->id,
				 x->dst, r->c->pages_per_room, x->dst_aux))
			return 0;
	return 1;
}

/* Reads decode rank k's room: Success -> F_DONE; Failed, Cleared, or
 * missing from a table whose owner restarted since it took the RECV_BEGIN
 * (the command died with it) -> F_FAILED. */
static void poll_decode(struct room *x, uint32_t k)
{
	struct kvw_room_status st;
	int rc = kvw_poll(x->di->d[k].e, x->id, &st);

	if (rc == KVW_ENOENT && kvw_control_epoch(x->di->d[k].e) != x->de[k])
		x->df[k] |= F_FAILED;
	else if (rc == 0 && st.state == KVW_SUCCESS)
		x->df[k] |= F_DONE;
	else if (rc == 0 && (st.state == KVW_FAILED || st.state == KVW_CLEARED))
		x->df[k] |= F_FAILED;
}

/* A room that missed its deadline: what each engine's table shows of it,
 * on stderr (the first STUCK_TOLD of a run), so that a stuck room says
 * where it stopped (a run that found one once could not say). */
#define STUCK_TOLD 8
static void tell_stuck(struct run *r, const struct room *x, uint64_t now)
{
	struct kvw_room_status st;
	char line[1024];
	int n;

	if (r->stuck_told++ >= STUCK_TOLD)
		return;
	n = snprintf(line, sizeof line, "room %llu: stuck: no outcome %.1f s "
		     "after it began;", (unsigned long long)x->id,
		     x->t_begin ? (double)(now - x->t_begin) / 1e9 : 0.0);
	for (uint32_t k = 0; k < x->di->nd + x->pi->np && n > 0 &&
			     (size_t)n < sizeof line; k++) {
		struct eng *e = k < x->di->nd ? &x->di->d[k] : &x->pi->p[k - x->di->nd];
		char side = k < x->di->nd ? 'd' : 'p';
		uint32_t i = k < x->di->nd ? k : k - x->di->nd;

		if (kvw_poll(e->e, x->id, &st) == 0)
			n += snprintf(line + n, sizeof line - (size_t)n,
				      " %c%u %s%s%s (pages %u/%u, flags 0x%x)",
				      side, i, kvw_state_str(st.state),
				      st.state == KVW_FAILED ? ": " : "",
				      st.state == KVW_FAILED ?
				      kvw_reason_str(st.reason) : "",
				      st.pages_done, st.pages_expected,
				      st.flags);
		else
			n += snprintf(line + n, sizeof line - (size_t)n,
				      " %c%u not in its table", side, i);
	}
	if (r->peer)
		fprintf(stderr, "kv-bench: %s; the prefill side was %s\n",
			line, x->peer_sent ? "told to send it" : "not told yet");
	else
		fprintf(stderr, "kv-bench: %s\n", line);
}

/* 1 once no worker of prefill rank k reads room x's source pages: the
 * room terminal there and KVW_ROOM_F_SENDING clear, never begun there, or
 * gone with a kv-sender that restarted since it took the BEGIN. On tcp the decode may show an aborted room releasable before that
 * (nothing more lands in its pages), and a source page refilled under a
 * batch in flight failed that batch's MAC at the sink: integrity_failed
 * counted on a clean loopback. */
static int source_quiet(struct room *x, uint32_t k)
{
	struct kvw_room_status st;
	int rc;

	if (x->pf[k] & F_QUIET)
		return 1;
	rc = kvw_poll(x->pi->p[k].e, x->id, &st);
	if (rc == KVW_ENOENT && !(x->pf[k] & F_SENT))
		rc = 1; /* no SEND_BEGIN went there: no job */
	else if (rc == KVW_ENOENT && kvw_control_epoch(x->pi->p[k].e) != x->pe[k])
		rc = 1; /* gone with a kv-sender that restarted: its workers too */
	else if (rc == 0)
		rc = !(st.flags & KVW_ROOM_F_SENDING) &&
		     (st.state == KVW_SUCCESS || st.state == KVW_FAILED ||
		      st.state == KVW_CLEARED);
	else
		rc = 0; /* its SEND_BEGIN not taken yet, or a slot rewritten */
	if (rc)
		x->pf[k] |= F_QUIET;
	return rc;
}

/* 1 once prefill rank k has ended room x (Success, or Failed, or gone
 * with a kv-sender that restarted) and no worker reads its source pages.
 * A prefill engine frees a request's KV only once every rank's sender
 * shows it done (SGLang polls all of them), and an MLA dummy rank ends
 * its room only after its transfer info came: a room cleared on decode's
 * Success alone could reach a busy dummy before that info did. */
int bench_prefill_ended(struct room *x, uint32_t k)
{
	return (x->pf[k] & F_FAILED) || source_quiet(x, k);
}

/* Advances a running room; returns progress (> 0), 0, or a fatal error. */
static int step_run(struct run *r, struct room *x, uint64_t now)
{
	uint32_t k, ok = 0;
	uint64_t at;
	int rc, prog = 0;

	for (k = 0; k < x->di->nd; k++) {
		struct eng *d = &x->di->d[k];

		if (x->df[k] & F_SENT)
			continue;
		rc = bench_sent(r, d, kvw_recv_begin(d->e, x->id, x->pi->boot, 0, x->dst,
					       r->c->pages_per_room,
					       x->dst_aux, 0));
		if (rc < 0)
			return rc;
		x->df[k] |= rc ? F_SENT : 0;
		if (rc)
			x->de[k] = kvw_control_epoch(d->e);
		if (rc && k == 0)
			x->t_begin = proc_now_ns();
		prog |= rc;
	}
	for (k = 0; k < x->di->nd; k++)
		if (!(x->df[k] & F_SENT))
			return prog; /* prefill begins after every RECV_BEGIN */
	if (r->peer && !x->peer_sent) { /* --role decode: the peer sends */
		if ((rc = bench_peer_begin(r, x)) <= 0)
			return rc < 0 ? rc : prog;
		prog = 1;
	}
	if (x->abort_at == AB_BEFORE)
		x->aborted = 1;
	for (k = 0; k < x->pi->np; k++) {
		rc = bench_step_prefill(r, x, k);
		if (rc < 0)
			return rc;
		prog |= rc;
	}
	if (x->abort_at && !x->aborted && bench_abort_due(x))
		x->aborted = 1;
	if (x->aborted) {
		rc = bench_step_aborted(r, x, now);
		return rc < 0 ? rc : (prog | rc);
	}
	for (k = 0; k < x->di->nd; k++) {
		if (!(x->df[k] & (F_DONE | F_FAILED)))
			poll_decode(x, k);
		if (x->df[k] & F_FAILED)
			x->outcome = O_FAILED;
		ok += (x->df[k] & F_DONE) != 0;
	}
	/* The deadline first: a room seen done only after its deadline
	 * passed missed it (stuck), however the machine's load ordered the
	 * steps; --room-timeout means the same on a fast and a busy machine
	 * (issue 30: a 1 us deadline once let both rooms of a run succeed).
	 * A room seen done is judged on the clock read now, not the pass's:
	 * a pass that began before the deadline and was preempted until the
	 * group had done the room let one of two succeed under load. */
	at = now;
	if (x->outcome == O_NONE && ok == x->di->nd && now < x->deadline)
		at = proc_now_ns();
	if (x->outcome == O_NONE && at >= x->deadline) {
		x->outcome = O_STUCK;
		tell_stuck(r, x, at);
	}
	if (x->outcome == O_NONE && ok == x->di->nd && !x->t_done)
		x->t_done = at; /* the latency ends at decode (read above) */
	for (k = 0; k < x->pi->np && ok == x->di->nd; k++)
		if (!bench_prefill_ended(x, k))
			ok = 0;
	if (x->outcome == O_NONE && ok == x->di->nd) {
		x->outcome = !r->c->verify || intact(r, x) ? O_SUCCESS
							   : O_CORRUPT;
	}
	if (x->outcome != O_NONE) {
		x->phase = R_CLEAR;
		prog = 1;
	}
	return prog;
}

/* How long past its deadline an aborted room waits for a prefill rank's
 * workers to let go of its source pages before they are kept out of use. */
#define SOURCE_QUIET_GRACE_NS 10000000000ull

/* CLEARs every rank; returns 1 when all were sent, 0 to retry, < 0. */
int bench_step_clear(struct run *r, struct room *x)
{
	int rc, all = 1;

	for (uint32_t k = 0; k < x->di->nd + x->pi->np; k++) {
		struct eng *e = k < x->di->nd ? &x->di->d[k] : &x->pi->p[k - x->di->nd];
		uint8_t *f = k < x->di->nd ? &x->df[k] : &x->pf[k - x->di->nd];

		if (*f & F_CLEAR)
			continue;
		/* An aborted room is cleared at a prefill rank once its
		 * workers are done with the source pages (a CLEAR would hide
		 * the count), or kept out of use after the grace. */
		if (k >= x->di->nd && x->outcome == O_ABORTED &&
		    !source_quiet(x, k - x->di->nd)) {
			if (proc_now_ns() < x->deadline + SOURCE_QUIET_GRACE_NS) {
				all = 0;
				continue;
			}
			x->src_kept = 1;
		}
		rc = bench_sent(r, e, kvw_clear(e->e, x->id));
		if (rc < 0)
			return rc;
		*f |= rc ? F_CLEAR : 0;
		all &= rc;
	}
	return all;
}

void bench_finish(struct run *r, struct room *x, struct bench_result *res)
{
	uint32_t n = r->c->pages_per_room;

	res->rooms++;
	res->inflight--;
	switch (x->outcome) {
	case O_SUCCESS:
		res->success++;
		r->pairs_ok[(x->pi - r->in) * r->ninst + (x->di - r->in)]++;
		res->bytes += x->di->room_bytes;
		if (res->nlat < r->c->lat_cap && r->c->hop_ns &&
		    bench_hops_take(x->di->d[0].tab, x->pi->p[0].tab, x->id,
				    x->t_begin, x->t_done,
				    &r->c->hop_ns[(size_t)res->nhops *
						  BENCH_NHOPS]) == 0)
			res->nhops++;
		if (res->nlat < r->c->lat_cap)
			r->c->lat_ns[res->nlat++] = x->t_done - x->t_begin;
		break;
	case O_CORRUPT:
		res->corrupt++;
		break;
	case O_STUCK:
		res->stuck++;
		break;
	case O_ABORT_STUCK:
		res->stuck++;
		/* fall through */
	case O_ABORTED:
		res->aborted++;
		break;
	default:
		res->failed++;
		break;
	}
	/* Pages of a room that did not complete stay out of use. */
	if (x->outcome == O_ABORTED && !x->src_kept) {
		/* No prefill worker reads its source pages any more
		 * (bench_step_clear waited for it). The destination pages
		 * wait, under their canary, in the canary list
		 * (bench_abort.c). */
		bench_alloc_put(&x->pi->pa, n, x->src);
		bench_alloc_put(&x->pi->paux, 1, &x->src_aux);
	}
	if (x->outcome == O_SUCCESS || x->outcome == O_CORRUPT) {
		bench_alloc_put(&x->pi->pa, n, x->src);
		bench_alloc_put(&x->di->da, n, x->dst);
		bench_alloc_put(&x->pi->paux, 1, &x->src_aux);
		bench_alloc_put(&x->di->daux, 1, &x->dst_aux);
	}
	x->phase = R_IDLE;
}

/* Stopping early: one CLEAR per rank for every room in flight. */
static void abandon(struct run *r)
{
	for (uint32_t i = 0; i < r->nslots; i++) {
		struct room *x = &r->rooms[i];

		if (x->phase != R_IDLE)
			bench_step_clear(r, x);
	}
}

/* Waits before the next pass over the tables, idle_ns after the last
 * progress. Just after progress the next event is a ZMQ hop away (tens of
 * microseconds): yield the CPU to the group's processes rather than sleep
 * through it (a timer sleep costs a wakeup and, by default, 50 us of
 * slack); a long idle stretch sleeps, growing up to 1 ms, so a bench
 * waiting on slow rooms does not take a core the group needs. */
void bench_nap(uint64_t idle_ns)
{
	struct timespec ts = {
		0, (long)(idle_ns / 8 < 1000000 ? idle_ns / 8 : 1000000) };

	if (idle_ns < 200000)
		sched_yield();
	else
		nanosleep(&ts, NULL);
}

static int loop(struct run *r, bench_progress_fn *progress, void *arg,
		struct bench_result *res)
{
	const struct bench_config *c = r->c;
	uint64_t t0 = proc_now_ns(), last_cb = t0, last_prog = t0;
	uint64_t last_check = t0;
	uint32_t launched = 0;
	int rc = 0;

	while (res->rooms < c->rooms && rc >= 0) {
		uint64_t now = proc_now_ns();
		int prog = 0;

		for (uint32_t i = 0; i < c->concurrency && rc >= 0; i++) {
			struct room *x = &r->rooms[i];

			if (x->phase == R_IDLE && launched < c->rooms &&
			    bench_start_room(r, x, now, 0)) {
				launched++;
				res->inflight++;
				prog = 1;
			}
			if (x->phase == R_RUN)
				rc = step_run(r, x, now);
			if (rc >= 0 && x->phase == R_CLEAR &&
			    (rc = bench_step_clear(r, x)) > 0 &&
			    (rc = bench_peer_end(r, x)) > 0)
				bench_finish(r, x, res);
			prog |= rc > 0;
		}
		if (rc < 0)
			break;
		if (res->inflight == 0 && launched < c->rooms) {
			/* Every slot is idle: either a slot freed late in this
			 * pass, or quarantined pages left too few for a room. */
			if (bench_start_room(r, &r->rooms[0], now, 0)) {
				launched++;
				res->inflight++;
				prog = 1;
			} else {
				res->failed += c->rooms - launched;
				res->rooms += c->rooms - launched;
				launched = c->rooms;
			}
		}
		if (now - last_check >= GROUP_CHECK_NS) {
			last_check = now;
			if ((rc = bench_group_check(r, now)) < 0)
				break;
		}
		if (r->peer && (rc = bench_peer_poll(r, now)) < 0)
			break;
		if (progress && now - last_cb >= 100000000ULL) {
			res->seconds = (double)(now - t0) / 1e9;
			last_cb = now;
			if (progress(arg, res, c->rooms)) {
				abandon(r);
				break;
			}
		}
		if (prog)
			last_prog = now;
		else
			bench_nap(now - last_prog);
	}
	bench_canary_flush(r); /* the last look at every released page */
	res->seconds = (double)(proc_now_ns() - t0) / 1e9;
	return rc < 0 ? rc : 0;
}

int bench_run(const struct runinfo *ri, const struct bench_config *cfg,
	      bench_progress_fn *progress, void *arg,
	      struct bench_result *res, char *err, size_t errlen)
{
	struct run *r = calloc(1, sizeof *r);
	int rc;

	memset(res, 0, sizeof *res);
	if (r == NULL)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	r->c = cfg;
	r->err = err;
	r->errlen = errlen;
	r->rng = cfg->seeded ? cfg->seed : proc_epoch();
	r->arng = r->rng ^ 0x61626f7274212121ULL;
	r->res = res;
	rc = bench_setup(r, ri);
	if (rc == KVW_ENOMEM)
		kvw_seterr(err, errlen, "out of memory");
	if (rc == 0 && cfg->role)
		rc = bench_peer_open(r);
	if (rc == 0 && cfg->role == BENCH_ROLE_PREFILL)
		rc = bench_role_prefill(r, res);
	else if (rc == 0)
		rc = loop(r, progress, arg, res);
	bench_peer_close(r, rc == 0 ? res : NULL);
	if (r->ninst > 1 && r->pairs && r->pairs_ok && r->routed)
		bench_tell_routes(r);
	bench_teardown(r);
	free(r);
	return rc;
}
