/*
 * sender_supervise.c - kv-sender's worker processes seen from the control:
 * fork + exec of the program in worker mode (the child gets SIGKILL the
 * moment the control dies, so no worker of a dead control keeps copying
 * into a decode pool), the hello that marks a worker up, JOB sends with the
 * per-worker queue of jobs in flight, and supervision: a worker that dies
 * fails exactly the rooms with jobs queued on it (KVW_R_WORKER_DIED),
 * gives back their outstanding counts (a dead worker never decrements
 * them) and is restarted, at once or, if it died within a second of its
 * start, a second later. Liveness: a worker that has jobs queued and
 * answers none of them for the stall bound (--worker-stall) is taken out
 * of the picking at once and killed, which is the death above.
 */
#include "sender_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/proc.h"
#include "roles/malformed.h"

#define RESTART_HOLDOFF_NS 1000000000ull

static int worker_spawn(struct sender *s, uint32_t k, char *err, size_t errlen)
{
	char idbuf[16], fdbuf[16];
	char *argv[20];
	int n = 0, fds[2];
	pid_t pid;

	if (chan_pair(fds) < 0)
		return kvw_errf(err, errlen, KVW_ESYS,
				"worker %u: socketpair: %s", k,
				strerror(errno));
	snprintf(idbuf, sizeof idbuf, "%u", k);
	snprintf(fdbuf, sizeof fdbuf, "%d", fds[1]);
	argv[n++] = s->exe;
	argv[n++] = "--worker-id";
	argv[n++] = idbuf;
	argv[n++] = "--job-fd";
	argv[n++] = fdbuf;
	argv[n++] = "--table";
	argv[n++] = s->table_path;
	argv[n++] = "--pool";
	argv[n++] = s->pool_path;
	argv[n++] = "--transport";
	argv[n++] = s->transport;
	if (s->log_level) {
		argv[n++] = "--log-level";
		argv[n++] = s->log_level;
	}
	if (s->name) {
		argv[n++] = "--name";
		argv[n++] = s->name;
	}
	argv[n] = NULL;
	pid = proc_spawn(argv, NULL, fds[1]);
	if (pid < 0) {
		kvw_seterr(err, errlen, "fork worker %u: %s", k,
			   strerror(errno));
		close(fds[0]);
		close(fds[1]);
		return KVW_ESYS;
	}
	close(fds[1]);
	chan_close(&s->w[k].ch); /* the previous incarnation's, if any */
	chan_init(&s->w[k].ch, fds[0]);
	s->w[k].pid = pid;
	s->w[k].up = 0;
	s->w[k].started_ns = proc_now_ns();
	s->w[k].restart_at_ns = 0;
	LOG(LOG_DEBUG, "worker %u started (pid %d)", k, (int)pid);
	return 0;
}

int sender_workers_start(struct sender *s, char *err, size_t errlen)
{
	for (uint32_t k = 0; k < s->nworkers; k++) {
		int rc = worker_spawn(s, k, err, errlen);

		if (rc < 0)
			return rc;
	}
	return 0;
}

int sender_workers_all_up(const struct sender *s)
{
	for (uint32_t k = 0; k < s->nworkers; k++)
		if (!s->w[k].up)
			return 0;
	return 1;
}

/* Tiny jobs cost a worker far more in wakeups (its own and its ZMQ I/O
 * thread's) than in copying, so a room joins the busiest worker whose
 * queue holds under SENDER_PACK_BYTES: a worker that is awake anyway takes
 * many small rooms per wakeup and batches their STATUS sends (on 2 cores,
 * tiny rooms cost the four workers together ~38 us of CPU each when spread
 * and ~20 us when packed). Big jobs fill a queue past the mark at once and
 * spread over the others, least loaded first. With every queue empty the
 * worker used last is chosen: its caches and page tables are warm. */
uint32_t sender_worker_pick(struct sender *s)
{
	uint32_t busiest = SENDER_NO_WORKER, least = SENDER_NO_WORKER;
	uint32_t last = s->last_worker;

	for (uint32_t k = 0; k < s->nworkers; k++) {
		const struct sender_jobq *q = &s->w[k].q;

		if (!s->w[k].up)
			continue;
		if (q->n && q->bytes < SENDER_PACK_BYTES &&
		    (busiest == SENDER_NO_WORKER ||
		     q->bytes > s->w[busiest].q.bytes))
			busiest = k;
		if (least == SENDER_NO_WORKER || q->bytes < s->w[least].q.bytes)
			least = k;
	}
	if (busiest == SENDER_NO_WORKER && last < s->nworkers &&
	    s->w[last].up && s->w[last].q.n == 0)
		busiest = last;
	if (busiest == SENDER_NO_WORKER)
		busiest = least;
	if (busiest != SENDER_NO_WORKER)
		s->last_worker = busiest;
	return busiest;
}

struct redispatch_arg {
	struct sender *s;
	uint32_t w;
};

static void redispatch(void *arg, struct sender_room *r)
{
	struct redispatch_arg *a = arg;

	if (r->nq && !r->cleared &&
	    (r->worker == a->w || r->worker == SENDER_NO_WORKER))
		sender_dispatch(a->s, r);
}

static void on_worker(struct sender *s, uint32_t k, const struct frame_msg *m)
{
	if (m->hdr.type == FRAME_PONG) {
		struct redispatch_arg a = { s, k };

		if (!s->w[k].up)
			LOG(LOG_INFO, "worker %u up (pid %d)", k, (int)s->w[k].pid);
		s->w[k].up = 1;
		sender_rooms_foreach(&s->rooms, redispatch, &a);
	} else if (m->hdr.type == FRAME_JOB_DONE) {
		s->w[k].progress_ns = proc_now_ns();
		sender_on_job_done(s, k, m);
	} else {
		MALFORMED(s->t, "worker %u: unexpected %s", k,
			  frame_type_str(m->hdr.type));
	}
}

void sender_worker_drain(struct sender *s, uint32_t k)
{
	struct sender_worker *w = &s->w[k];
	struct frame_msg m;
	char why[256];
	int rc;

	if (w->ch.fd < 0)
		return;
	if (chan_flush(&w->ch) == KVW_ESYS) {
		rc = KVW_ESYS;
		snprintf(why, sizeof why, "peer gone");
	} else {
		while ((rc = chan_recv(&w->ch, &m, why, sizeof why)) != KVW_EAGAIN &&
		       rc != KVW_ESYS) {
			if (rc == 0) {
				on_worker(s, k, &m);
				continue;
			}
			MALFORMED(s->t, "worker %u: malformed frame: %s", k, why);
		}
	}
	if (rc != KVW_ESYS)
		return;
	/* The worker exited (its SIGCHLD does the rest) or wrote something
	 * that is not a record: no job can reach it any more. Not reaped
	 * yet, its pid cannot have been reused. */
	LOG(LOG_WARN, "worker %u: channel: %s", k, why);
	if (w->pid > 0)
		kill(w->pid, SIGKILL);
	w->up = 0;
	chan_close(&w->ch);
}

int sender_worker_send(struct sender *s, uint32_t w, struct frame_msg *m,
		       const struct sender_jobrec *rec)
{
	char why[256];
	int rc;

	if (s->w[w].q.n == 0)
		s->w[w].progress_ns = proc_now_ns(); /* its clock starts now */
	if (sender_jobq_push(&s->w[w].q, rec) < 0)
		return KVW_ENOMEM;
	rc = chan_send(&s->w[w].ch, m, why, sizeof why);
	if (rc < 0) {
		sender_jobq_unpush(&s->w[w].q);
		LOG_RL(LOG_WARN, "worker %u: %s", w, why);
	}
	return rc;
}

/* Fails the rooms with jobs on dead worker k and gives back their
 * outstanding counts, then schedules the restart. */
static void worker_died(struct sender *s, uint32_t k, int status)
{
	struct sender_worker *w = &s->w[k];
	const struct sender_jobrec *h;
	uint64_t now = proc_now_ns();
	uint32_t rooms = 0;

	if (WIFSIGNALED(status))
		LOG(LOG_ERROR, "worker %u (pid %d) killed by signal %d", k,
		    (int)w->pid, WTERMSIG(status));
	else
		LOG(LOG_ERROR, "worker %u (pid %d) exited %d", k, (int)w->pid,
		    WEXITSTATUS(status));
	w->pid = 0;
	w->up = 0;
	chan_close(&w->ch); /* its JOB_DONEs were read before the reap */
	while ((h = sender_jobq_head(&w->q)) != NULL) {
		struct sender_jobrec rec = *h;
		struct sender_room *r = sender_rooms_get(&s->rooms, rec.room);
		struct rtab_view v;

		sender_jobq_pop(&w->q);
		if (r && (r->ref.slot != rec.ref.slot || r->ref.gen != rec.ref.gen))
			r = NULL;
		if (r) {
			r->inflight = 0;
			if (rec.last && rec.dst + 1 == r->told) /* its final */
				sender_room_retell(s, r);
			sender_room_fail(s, r, KVW_R_WORKER_DIED, "worker died");
		}
		/* Every job of a room goes to one worker: whatever is still
		 * outstanding was this dead worker's. */
		if (rtab_get(s->t, rec.ref, &v) == 0 && v.outstanding)
			rtab_outstanding_add(s->t, rec.ref, -(int)v.outstanding);
		if (r) {
			rooms++;
			sender_room_acks(s, r); /* may free r */
		}
	}
	if (rooms)
		LOG(LOG_WARN, "worker %u: %u jobs were on it; their rooms failed",
		    k, rooms);
	if (proc_stopping())
		return;
	w->restart_at_ns = now - w->started_ns < RESTART_HOLDOFF_NS
				   ? w->started_ns + RESTART_HOLDOFF_NS
				   : now;
}

void sender_workers_reap(struct sender *s)
{
	int status;
	pid_t pid;

	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		for (uint32_t k = 0; k < s->nworkers; k++)
			if (s->w[k].pid == pid) {
				worker_died(s, k, status);
				break;
			}
	}
	sender_workers_tick(s, proc_now_ns());
}

/* Worker k has jobs queued: kills it when it answered none of them for
 * the stall bound; returns when it is due next (0: killed). */
static uint64_t liveness(struct sender *s, uint32_t k, uint64_t now)
{
	struct sender_worker *w = &s->w[k];
	uint64_t due = w->progress_ns + s->worker_stall_ns;

	if (now < due)
		return due;
	LOG(LOG_ERROR, "worker %u (pid %d): %u jobs queued and none answered "
	    "for %llu ms: killed, to be replaced", k, (int)w->pid, w->q.n,
	    (unsigned long long)((now - w->progress_ns) / 1000000));
	w->up = 0; /* no new room from now on */
	kill(w->pid, SIGKILL); /* the reap fails its rooms and restarts it */
	return 0;
}

uint64_t sender_workers_tick(struct sender *s, uint64_t now)
{
	uint64_t next = 0;
	char why[256];

	for (uint32_t k = 0; k < s->nworkers; k++) {
		struct sender_worker *w = &s->w[k];

		if (w->pid > 0 && w->up && w->q.n) {
			uint64_t due = liveness(s, k, now);

			if (due && (!next || due < next))
				next = due;
		}
		if (w->pid || !w->restart_at_ns || proc_stopping())
			continue;
		if (w->restart_at_ns <= now) {
			if (worker_spawn(s, k, why, sizeof why) < 0) {
				LOG_RL(LOG_ERROR, "%s", why);
				w->restart_at_ns = now + RESTART_HOLDOFF_NS;
			} else {
				rtab_counter_add(s->t, RTAB_C_WORKER_RESTART, 1);
				continue;
			}
		}
		if (!next || w->restart_at_ns < next)
			next = w->restart_at_ns;
	}
	return next;
}

void sender_workers_stop(struct sender *s)
{
	uint64_t until = proc_now_ns() + RESTART_HOLDOFF_NS;
	int left, status;

	for (uint32_t k = 0; k < s->nworkers; k++)
		if (s->w[k].pid > 0)
			kill(s->w[k].pid, SIGTERM);
	do {
		left = 0;
		for (uint32_t k = 0; k < s->nworkers; k++) {
			if (s->w[k].pid <= 0)
				continue;
			pid_t r = waitpid(s->w[k].pid, &status, WNOHANG);

			if (r == s->w[k].pid || (r < 0 && errno == ECHILD))
				s->w[k].pid = 0;
			else
				left++;
		}
		if (left) {
			struct timespec ts = { 0, 10 * 1000000L };

			nanosleep(&ts, NULL);
		}
	} while (left && proc_now_ns() < until);
	for (uint32_t k = 0; k < s->nworkers; k++) {
		if (s->w[k].pid > 0) {
			kill(s->w[k].pid, SIGKILL);
			waitpid(s->w[k].pid, &status, 0);
			s->w[k].pid = 0;
		}
		chan_close(&s->w[k].ch);
	}
}
