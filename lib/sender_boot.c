/*
 * sender_boot.c - kv-sender's registration at the bootstrap: one
 * BOOT_REGISTER (topology, this rank's coordinates, its peer endpoint, model
 * and layer range) sent with the synchronous bootc client, retried with a
 * jittered 200 ms - 1 s pause until the bootstrap answers OK. REFUSED is
 * final. SIGTERM ends the wait at once (bootc_call and the pause both
 * watch proc_stopping()).
 */
#include "sender_impl.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "bootc.h"
#include "log.h"
#include "proc.h"

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

int sender_boot_register(struct sender *s, char *err, size_t errlen)
{
	struct frame_msg req, rep;
	struct wire_in in;
	char why[256];
	unsigned tries = 0;
	int rc;

	if (!s->bootstrap)
		return 0;
	frame_msg_init(&req, FRAME_BOOT_REGISTER, s->rank, 0, s->epoch);
	req.u.boot_register.topo = s->topo;
	req.u.boot_register.coord = s->coord;
	snprintf(req.u.boot_register.endpoint, FRAME_STR_SIZE, "%s", s->listen);
	req.u.boot_register.model = s->model;
	req.u.boot_register.layer_first = s->layer_first;
	req.u.boot_register.layer_count = s->layer_count;
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
				LOG(LOG_INFO, "registered at bootstrap %s as rank %u "
				    "(tp %u pp %u)", s->bootstrap, s->rank,
				    s->coord.tp, s->coord.pp);
				return 0;
			}
			if (st == FRAME_BOOT_REFUSED) {
				snprintf(err, errlen, "bootstrap %s refused "
					 "registration: %s", s->bootstrap, text);
				return KVW_EINVAL;
			}
			LOG_RL(LOG_WARN, "bootstrap %s answered status %u: %s",
			       s->bootstrap, st, text);
		} else if (rc == KVW_EINVAL) {
			snprintf(err, errlen, "bootstrap %s: %s", s->bootstrap, why);
			return KVW_EINVAL;
		} else if (rc == KVW_ESYS && proc_stopping()) {
			break;
		} else if (tries == 1 || tries % 10 == 0) {
			LOG(LOG_WARN, "bootstrap %s: no answer yet (try %u): %s",
			    s->bootstrap, tries, why);
		}
		boot_pause();
	}
	snprintf(err, errlen, "stopped before the bootstrap answered");
	errno = EINTR;
	return KVW_ESYS;
}
