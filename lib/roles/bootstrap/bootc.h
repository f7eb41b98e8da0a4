/*
 * bootc.h - a small synchronous request/reply client for tools, tests and
 * one-off calls at process start (kv-ctl, kv-sender's BOOT_REGISTER,
 * bats helpers): send one frame on a fresh DEALER, wait a bounded time for
 * the matching reply, retry a bounded number of times. Also the
 * fire-and-forget send kv-ctl uses for engine commands and raw frames.
 * Blocking by design: never call it from inside a process's poll loop for
 * traffic that loop should serve.
 */
#ifndef KVW_BOOTC_H
#define KVW_BOOTC_H

#include <stddef.h>

#include "wire/frame.h"
#include "wire/wire.h"

/* Attempts per bootc_call; each waits timeout_ms / BOOTC_TRIES. */
#define BOOTC_TRIES 3

/* Sends *req to endpoint and waits for its reply: a PONG for a PING, a
 * BOOT_REPLY for BOOT_REGISTER / BOOT_LOOKUP (other request types wait for
 * any well-formed message), with the request's room in the header; any
 * other or malformed message is dropped. Each attempt uses a fresh DEALER
 * (LINGER 0), so a late reply to an earlier attempt can never be taken for
 * this one; the whole call takes at most about timeout_ms (>= 1).
 * Idempotent requests only: a retry may deliver the request twice (the
 * bootstrap's BOOT_REGISTER, BOOT_LOOKUP and PING all are).
 * Returns 0 with *reply decoded: its views point into *in, release them
 * with wire_in_release(in) when done. KVW_ETIMEDOUT when no reply came,
 * KVW_EINVAL for a bad endpoint or a request that does not encode,
 * KVW_ESYS when a zmq call failed or a SIGTERM/SIGINT arrived
 * (proc_stopping(); errno EINTR). *in holds nothing on error.
 * Usage for kv-sender's start: loop { rc = bootc_call(ctx, boot_ep, &reg,
 * &rep, &in, 1000, ...); if rc == 0 and status OK: done; if REFUSED:
 * fatal; else wait 200 ms - 1 s with jitter (proc_stopping() ends it) }. */
int bootc_call(void *ctx, const char *endpoint, const struct frame_msg *req,
	       struct frame_msg *reply, struct wire_in *in, int timeout_ms,
	       char *err, size_t errlen);

/* Most parts bootc_send_raw sends in one message (deliberately above
 * KVW_MAX_FRAMES: it exists to send what receivers must refuse). */
#define BOOTC_RAW_MAX_PARTS 256u

/* Connects a DEALER to endpoint, waits up to timeout_ms for the connection
 * to be established (ZMQ_IMMEDIATE: nothing is queued for an absent
 * peer), then sends nparts raw parts (1 .. BOOTC_RAW_MAX_PARTS, any bytes,
 * each may be empty) as one message. The socket is closed with LINGER
 * timeout_ms, so the caller's zmq_ctx_term() waits up to that long for the
 * message to leave. Returns 0 once it is queued to a connected peer,
 * KVW_ETIMEDOUT when no peer connected in time, KVW_EINVAL for bad
 * arguments or endpoint, KVW_ESYS otherwise (errno EINTR when
 * proc_stopping()). */
int bootc_send_raw(void *ctx, const char *endpoint,
		   const struct frame_part *parts, size_t nparts,
		   int timeout_ms, char *err, size_t errlen);

/* Encodes *m and sends it like bootc_send_raw (fire and forget). */
int bootc_send(void *ctx, const char *endpoint, const struct frame_msg *m,
	       int timeout_ms, char *err, size_t errlen);

#endif
