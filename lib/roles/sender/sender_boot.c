/*
 * sender_boot.c - kv-sender's registration at the bootstrap: one
 * BOOT_REGISTER (topology, this rank's coordinates, its peer endpoint, model
 * and layer range) sent with the synchronous bootc client, retried with a
 * jittered 200 ms - 1 s pause until the bootstrap answers OK. REFUSED is
 * final. SIGTERM ends the wait at once (bootc_call and the pause both
 * watch proc_stopping()).
 *
 * Staying registered: a restarted kv-bootstrap has lost every
 * registration, so once the poll loop runs the sender PINGs its bootstrap
 * about every second on a DEALER of its own (ZMQ_IMMEDIATE: nothing queues
 * up while the bootstrap is down) and compares the PONG's epoch with the
 * epoch of the bootstrap that accepted the registration. A different epoch
 * is a new bootstrap: BOOT_REGISTER goes again (asynchronously, answered in
 * the same loop) until a BOOT_REPLY OK records the new epoch.
 */
#include "sender_impl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/log.h"
#include "base/proc.h"
#include "roles/bootstrap/bootc.h"

#define BOOT_CHECK_NS 1000000000ull /* PING the bootstrap about this often */

/* Pauses 200 .. 1000 ms in 50 ms steps; returns early on SIGTERM. */
static void boot_pause(void)
{
	uint32_t r = 0;
	long ms;

	if (getrandom(&r, sizeof r, GRND_NONBLOCK) != sizeof r)
		r = (uint32_t)proc_now_ns();
	for (ms = 200 + (long)(r % 801); ms > 0 && !proc_stopping(); ms -= 50) {
		struct timespec ts = { 0, (ms < 50 ? ms : 50) * 1000000L };

		nanosleep(&ts, NULL);
	}
}

static void boot_request(struct frame_msg *req, const struct sender *s)
{
	frame_msg_init(req, FRAME_BOOT_REGISTER, s->rank, 0, s->epoch);
	req->u.boot_register.topo = s->topo;
	req->u.boot_register.coord = s->coord;
	snprintf(req->u.boot_register.endpoint, FRAME_STR_SIZE, "%s", s->listen);
	req->u.boot_register.model = s->model;
	req->u.boot_register.layer_first = s->layer_first;
	req->u.boot_register.layer_count = s->layer_count;
}

int sender_boot_register(struct sender *s, char *err, size_t errlen)
{
	struct frame_msg req, rep;
	struct wire_in in;
	char why[256];
	unsigned tries = 0;
	int rc;

	if (!s->bootstrap)
		return 0;
	boot_request(&req, s);
	while (!proc_stopping()) {
		req.hdr.room = ++tries;
		why[0] = '\0';
		rc = bootc_call(s->ctx, s->bootstrap, &req, &rep, &in, 1000, why,
				sizeof why);
		if (rc == 0) {
			uint32_t st = rep.u.boot_reply.status;
			char text[FRAME_STR_SIZE];

			snprintf(text, sizeof text, "%s", rep.u.boot_reply.text);
			wire_in_release(&in);
			if (st == FRAME_BOOT_OK) {
				s->boot_epoch = rep.hdr.epoch;
				LOG(LOG_INFO, "registered at bootstrap %s as rank %u "
				    "(tp %u pp %u)", s->bootstrap, s->rank,
				    s->coord.tp, s->coord.pp);
				return 0;
			}
			if (st == FRAME_BOOT_REFUSED)
				return kvw_errf(err, errlen, KVW_EINVAL,
						"bootstrap %s refused "
						"registration: %s",
						s->bootstrap, text);
			LOG_RL(LOG_WARN, "bootstrap %s answered status %u: %s",
			       s->bootstrap, st, text);
		} else if (rc == KVW_EINVAL) {
			return kvw_errf(err, errlen, KVW_EINVAL,
					"bootstrap %s: %s", s->bootstrap, why);
		} else if (rc == KVW_ESYS && proc_stopping()) {
			break;
		} else if (tries == 1 || tries % 10 == 0) {
			LOG(LOG_WARN, "bootstrap %s: no answer yet (try %u): %s",
			    s->bootstrap, tries, why);
		}
		boot_pause();
	}
	kvw_seterr(err, errlen, "stopped before the bootstrap answered");
	errno = EINTR;
	return KVW_ESYS;
}

int sender_boot_open(struct sender *s, char *err, size_t errlen)
{
	int one = 1;

	if (!s->bootstrap)
		return 0;
	s->boot_sock = wire_socket(s->ctx, ZMQ_DEALER, 0, err, errlen);
	if (!s->boot_sock)
		return KVW_ESYS;
	if (zmq_setsockopt(s->boot_sock, ZMQ_IMMEDIATE, &one, sizeof one)) {
		kvw_seterr(err, errlen, "bootstrap %s: %s", s->bootstrap,
			   zmq_strerror(zmq_errno()));
		wire_close(&s->boot_sock);
		return KVW_ESYS;
	}
	if (wire_connect(s->boot_sock, s->bootstrap, err, errlen) != 0) {
		wire_close(&s->boot_sock);
		return KVW_ESYS;
	}
	s->boot_next_ns = proc_now_ns() + BOOT_CHECK_NS;
	return 0;
}

uint64_t sender_boot_tick(struct sender *s, uint64_t now)
{
	struct frame_msg m;

	if (!s->boot_sock)
		return 0;
	if (now < s->boot_next_ns)
		return s->boot_next_ns;
	frame_msg_init(&m, FRAME_PING, s->rank, 0, s->epoch);
	/* EAGAIN: the bootstrap is down; the next check tries again. */
	(void)wire_send(s->boot_sock, &m, NULL, 0, NULL, 0);
	sender_sent_on(s, s->boot_sock);
	s->boot_next_ns = now + BOOT_CHECK_NS * 4 / 5 +
			  (uint64_t)(s->epoch ^ now) % (BOOT_CHECK_NS * 2 / 5);
	return s->boot_next_ns;
}

void sender_boot_on_reply(struct sender *s, const struct frame_msg *m)
{
	struct frame_msg req;
	uint64_t now = proc_now_ns();

	if (m->hdr.type == FRAME_PONG) {
		if (m->hdr.epoch == s->boot_epoch)
			return;
		/* One request per second at most while the answer is due. */
		if (m->hdr.epoch == s->boot_asked_epoch &&
		    now < s->boot_asked_ns + BOOT_CHECK_NS)
			return;
		LOG(LOG_WARN, "bootstrap %s has a new epoch %016llx (was "
		    "%016llx): registering again", s->bootstrap,
		    (unsigned long long)m->hdr.epoch,
		    (unsigned long long)s->boot_epoch);
		boot_request(&req, s);
		int sent = wire_send(s->boot_sock, &req, NULL, 0, NULL, 0);

		sender_sent_on(s, s->boot_sock);
		if (sent == 0) {
			s->boot_asked_epoch = m->hdr.epoch;
			s->boot_asked_ns = now;
		}
		return;
	}
	if (m->hdr.type != FRAME_BOOT_REPLY) {
		LOG_RL(LOG_WARN, "bootstrap %s sent %s: dropped", s->bootstrap,
		       frame_type_str(m->hdr.type));
		return;
	}
	if (m->u.boot_reply.status == FRAME_BOOT_OK) {
		if (m->hdr.epoch != s->boot_epoch)
			LOG(LOG_INFO, "registered again at bootstrap %s (epoch "
			    "%016llx)", s->bootstrap,
			    (unsigned long long)m->hdr.epoch);
		s->boot_epoch = m->hdr.epoch;
	} else {
		LOG_RL(LOG_ERROR, "bootstrap %s answered the registration with "
		       "status %u: %s", s->bootstrap, m->u.boot_reply.status,
		       m->u.boot_reply.text);
	}
}
