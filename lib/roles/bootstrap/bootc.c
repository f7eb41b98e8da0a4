/*
 * bootc.c - the synchronous client of bootc.h: the "lazy pirate" pattern
 * (fresh DEALER per attempt, bounded wait, bounded retries) for requests,
 * and a connected-then-send for one-way messages. Nothing here keeps state
 * between calls.
 */
#include "bootc.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/kvw.h"
#include "base/proc.h"

/* The reply type a request waits for; 0 = any. */
static unsigned reply_type(unsigned req_type)
{
	switch (req_type) {
	case FRAME_PING: return FRAME_PONG;
	case FRAME_BOOT_REGISTER:
	case FRAME_BOOT_LOOKUP: return FRAME_BOOT_REPLY;
	}
	return 0;
}

/* A DEALER with LINGER linger_ms connected to endpoint, or NULL. */
static void *dealer(void *ctx, const char *endpoint, int linger_ms,
		    int immediate, int *rc, char *err, size_t errlen)
{
	void *s = wire_socket(ctx, ZMQ_DEALER, linger_ms, err, errlen);

	*rc = KVW_ESYS;
	if (!s)
		return NULL;
	if (immediate &&
	    zmq_setsockopt(s, ZMQ_IMMEDIATE, &immediate, sizeof immediate)) {
		kvw_seterr(err, errlen, "zmq_setsockopt: %s",
			   zmq_strerror(errno));
		goto fail;
	}
	if ((*rc = wire_connect(s, endpoint, err, errlen)) != 0)
		goto fail;
	return s;
fail:
	wire_close(&s);
	return NULL;
}

/* Waits for `events` on s until deadline_ns. Returns 1 ready, 0 timed
 * out, KVW_ESYS on error or a stop signal. */
static int wait_for(void *s, short events, uint64_t deadline_ns, char *err,
		    size_t errlen)
{
	for (;;) {
		zmq_pollitem_t it = { s, 0, events, 0 };
		uint64_t now = proc_now_ns();
		int n;

		if (now >= deadline_ns)
			return 0;
		n = zmq_poll(&it, 1, proc_poll_ms(deadline_ns, now, 1000));
		if (n > 0)
			return 1;
		if (n < 0 && errno != EINTR)
			return kvw_errf(err, errlen, KVW_ESYS, "zmq_poll: %s",
					zmq_strerror(errno));
		if (proc_stopping()) {
			kvw_seterr(err, errlen, "interrupted by a stop signal");
			errno = EINTR;
			return KVW_ESYS;
		}
	}
}

/* One attempt on a fresh socket. Returns 0 (reply in *reply / *in),
 * KVW_ETIMEDOUT, or another KVW_E*. */
static int attempt(void *ctx, const char *endpoint,
		   const struct frame_msg *req, struct frame_msg *reply,
		   struct wire_in *in, uint64_t deadline_ns, char *err,
		   size_t errlen)
{
	unsigned want = reply_type(req->hdr.type);
	void *s;
	int rc;

	s = dealer(ctx, endpoint, 0, 0, &rc, err, errlen);
	if (!s)
		return rc;
	rc = wire_send(s, req, NULL, 0, err, errlen);
	if (rc == KVW_EAGAIN)
		rc = KVW_ETIMEDOUT; /* not queued: the next attempt retries */
	while (rc == 0) {
		rc = wait_for(s, ZMQ_POLLIN, deadline_ns, err, errlen);
		if (rc == 0) {
			kvw_seterr(err, errlen, "no reply from %s", endpoint);
			rc = KVW_ETIMEDOUT;
			break;
		}
		if (rc < 0)
			break;
		rc = wire_recv(s, 0, in, reply, err, errlen);
		if (rc == KVW_ESYS)
			break;
		if (rc == 0 && (want == 0 || reply->hdr.type == want) &&
		    reply->hdr.room == req->hdr.room)
			break;
		if (rc == 0)
			wire_in_release(in);
		rc = 0; /* not ours or malformed: keep waiting */
	}
	wire_close(&s);
	return rc;
}

int bootc_call(void *ctx, const char *endpoint, const struct frame_msg *req,
	       struct frame_msg *reply, struct wire_in *in, int timeout_ms,
	       char *err, size_t errlen)
{
	uint64_t step, end;
	int rc = KVW_ETIMEDOUT;

	in->n = 0;
	in->idlen = 0;
	if (timeout_ms < 1)
		timeout_ms = 1;
	step = (uint64_t)timeout_ms * 1000000u / BOOTC_TRIES;
	end = proc_now_ns() + (uint64_t)timeout_ms * 1000000u;
	for (int i = 0; i < BOOTC_TRIES; i++) {
		uint64_t dl = i + 1 == BOOTC_TRIES ? end
						   : proc_now_ns() + step;

		rc = attempt(ctx, endpoint, req, reply, in, dl > end ? end : dl,
			     err, errlen);
		if (rc != KVW_ETIMEDOUT)
			break;
	}
	if (rc == KVW_ETIMEDOUT)
		kvw_seterr(err, errlen, "no reply from %s within %d ms",
			   endpoint, timeout_ms);
	return rc;
}

int bootc_send_raw(void *ctx, const char *endpoint,
		   const struct frame_part *parts, size_t nparts,
		   int timeout_ms, char *err, size_t errlen)
{
	void *s;
	int rc;

	if (nparts < 1 || nparts > BOOTC_RAW_MAX_PARTS)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"%zu parts (1..%u allowed)", nparts,
				BOOTC_RAW_MAX_PARTS);
	if (timeout_ms < 1)
		timeout_ms = 1;
	s = dealer(ctx, endpoint, timeout_ms, 1, &rc, err, errlen);
	if (!s)
		return rc;
	rc = wait_for(s, ZMQ_POLLOUT,
		      proc_now_ns() + (uint64_t)timeout_ms * 1000000u, err,
		      errlen);
	if (rc == 0) {
		kvw_seterr(err, errlen, "no peer at %s within %d ms", endpoint,
			   timeout_ms);
		rc = KVW_ETIMEDOUT;
	}
	for (size_t i = 0; rc == 1 && i < nparts; i++) {
		int more = i + 1 < nparts ? ZMQ_SNDMORE : 0, n;

		/* POLLOUT said the pipe has room; the parts of one message go
		 * in whole. A signal is not a failure: send again. */
		do
			n = zmq_send(s, parts[i].data, parts[i].len,
				     more | ZMQ_DONTWAIT);
		while (n < 0 && errno == EINTR);
		if (n < 0) {
			kvw_seterr(err, errlen, "send: %s",
				   zmq_strerror(errno));
			rc = KVW_ESYS;
		}
	}
	wire_close(&s);
	return rc == 1 ? 0 : rc;
}

int bootc_send(void *ctx, const char *endpoint, const struct frame_msg *m,
	       int timeout_ms, char *err, size_t errlen)
{
	struct frame_out out; /* ~29 KiB, as in wire_send */
	int rc = frame_encode(m, &out, err, errlen);

	if (rc)
		return rc;
	return bootc_send_raw(ctx, endpoint, out.parts, out.nparts,
			      timeout_ms, err, errlen);
}
