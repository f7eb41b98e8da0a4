/*
 * boot_serve.c - kv-bootstrap's loop (boot_serve.h). Each wakeup drains up
 * to BATCH requests before the stop flag is looked at again, so a flood
 * cannot keep SIGTERM waiting; the poll itself wakes at least once a
 * second for the same reason.
 */
#include "boot_serve.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "boot.h"
#include "base/kvw.h"
#include "base/log.h"
#include "base/proc.h"
#include "roles/malformed.h"
#include "roles/ratelimit.h"
#include "wire/wire.h"

/* Messages handled per wakeup before signals are looked at again. */
#define BATCH 256

/* Per source (ROUTER identity: one connection): BOOT_REGISTER and
 * BOOT_LOOKUP per second and burst. A decode rank looks up about once per
 * room, so the rate is far above any room rate; a flood from one source
 * is what it stops (issue 14). */
#define BOOT_RATE 100000.0
#define BOOT_BURST 20000.0

struct boot_serve {
	struct boot *b;
	void *ctx, *sock;
	char *ipc_path; /* the socket file this process bound, removed at
			 * close; NULL for tcp or before the bind */
	struct frame_msg req, reply; /* big: kept off the stack */
	struct ratelimit rl;         /* per source (ratelimit.h) */
	uint64_t rate_limited;       /* requests it dropped */
};

int boot_serve_open(const char *listen, struct boot_serve **out, char *err,
		    size_t errlen)
{
	struct boot_serve *s = calloc(1, sizeof *s);
	int rc = KVW_ESYS;

	*out = NULL;
	if (!s)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	rl_init(&s->rl, BOOT_RATE, BOOT_BURST);
	s->b = boot_open(proc_epoch(), err, errlen);
	if (!s->b) {
		rc = KVW_ENOMEM;
		goto fail;
	}
	s->ctx = zmq_ctx_new();
	if (!s->ctx) {
		kvw_seterr(err, errlen, "zmq_ctx_new: %s", zmq_strerror(errno));
		goto fail;
	}
	s->sock = wire_socket(s->ctx, ZMQ_ROUTER, 0, err, errlen);
	if (!s->sock)
		goto fail;
	/* KVW_EINVAL: tcp:// without the group's keys or --insecure. */
	if ((rc = wire_bind(s->sock, listen, 0, err, errlen)) != 0)
		goto fail;
	rc = KVW_ESYS;
	if (strncmp(listen, "ipc://", 6) == 0 &&
	    !(s->ipc_path = strdup(listen + 6))) {
		rc = kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
		goto fail;
	}
	LOG(LOG_INFO, "listening on %s", listen);
	*out = s;
	return 0;
fail:
	boot_serve_close(&s);
	return rc;
}

/* Answers one decoded request; a request the bootstrap does not serve is
 * counted and dropped. Returns -1 when the context is gone. */
static int answer(struct boot_serve *s, const struct wire_in *in)
{
	uint64_t unauth = boot_unauthorised(s->b);
	unsigned t = s->req.hdr.type;
	char err[256];
	int rc;

	if ((t == FRAME_BOOT_REGISTER || t == FRAME_BOOT_LOOKUP) &&
	    !rl_take(&s->rl, in->id, in->idlen, proc_now_ns())) {
		s->rate_limited++;
		LOG_RL(LOG_WARN, "rate limited: %s from a source over %g/s",
		       frame_type_str(t), BOOT_RATE);
		return 0;
	}

	if (boot_handle(s->b, &s->req, &s->reply, err, sizeof err)) {
		MALFORMED(NULL, "message dropped: %s", err);
		return 0;
	}
	LOG(LOG_DEBUG, "%s -> %s status %u (%u/%u registered)",
	    frame_type_str(s->req.hdr.type), frame_type_str(s->reply.hdr.type),
	    s->reply.hdr.type == FRAME_BOOT_REPLY ? s->reply.u.boot_reply.status
						  : 0,
	    boot_registered(s->b), boot_expected(s->b));
	if (boot_unauthorised(s->b) != unauth)
		LOG_RL(LOG_WARN, "unauthorised: BOOT_REGISTER for a live rank "
		       "refused: %s", s->reply.u.boot_reply.text);
	else if (s->reply.hdr.type == FRAME_BOOT_REPLY &&
		 s->reply.u.boot_reply.status == FRAME_BOOT_REFUSED)
		LOG_RL(LOG_WARN, "%s refused: %s", frame_type_str(s->req.hdr.type),
		       s->reply.u.boot_reply.text);
	rc = wire_send(s->sock, &s->reply, in->id, in->idlen, err, sizeof err);
	if (rc == KVW_ESYS && errno == ETERM)
		return -1;
	if (rc)
		LOG_RL(LOG_WARN, "reply dropped: %s", err);
	return 0;
}

/* Drains up to BATCH messages: 0, or KVW_ESYS when the socket or context
 * is gone (err says why). */
static int drain(struct boot_serve *s, char *err, size_t errlen)
{
	struct wire_in in;
	int rc;

	for (int i = 0; i < BATCH; i++) {
		rc = wire_recv(s->sock, 1, &in, &s->req, err, errlen);
		if (rc == KVW_EAGAIN)
			return 0;
		if (rc == KVW_ESYS)
			return rc;
		if (rc) {
			MALFORMED(NULL, "malformed message dropped: %s", err);
			continue;
		}
		rc = answer(s, &in);
		wire_in_release(&in);
		if (rc)
			return kvw_errf(err, errlen, KVW_ESYS,
					"context terminated");
	}
	return 0;
}

int boot_serve_run(struct boot_serve *s, char *err, size_t errlen)
{
	int rc = 0;

	while (!proc_stopping()) {
		zmq_pollitem_t it = { s->sock, 0, ZMQ_POLLIN, 0 };

		rc = zmq_poll(&it, 1, 1000);
		if (rc < 0 && errno != EINTR) {
			rc = kvw_errf(err, errlen, KVW_ESYS, "zmq_poll: %s",
				      zmq_strerror(errno));
			break;
		}
		if (rc > 0 && (rc = drain(s, err, errlen)) != 0)
			break;
		rc = 0;
	}
	/* The malformed count stays last: tools read it off the line's end. */
	LOG(LOG_INFO, "stopping: %u of %u ranks registered, %llu unauthorised, "
	    "%llu rate limited, %llu malformed", boot_registered(s->b),
	    boot_expected(s->b), (unsigned long long)boot_unauthorised(s->b),
	    (unsigned long long)s->rate_limited,
	    (unsigned long long)malformed_local());
	return rc;
}

void boot_serve_close(struct boot_serve **sp)
{
	struct boot_serve *s = sp ? *sp : NULL;

	if (!s)
		return;
	wire_close(&s->sock);
	if (s->ctx)
		zmq_ctx_term(s->ctx);
	/* Only a file this process bound: never one a peer bound later. */
	if (s->ipc_path)
		unlink(s->ipc_path);
	free(s->ipc_path);
	boot_close(&s->b);
	free(s);
	*sp = NULL;
}
