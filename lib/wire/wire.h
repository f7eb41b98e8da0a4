/*
 * wire.h - frames over ZMQ. Sends a struct frame_msg as one multipart
 * message and receives one into a bounded set of parts, then hands it to
 * the codec: nothing outside frame_decode() ever reads a peer's bytes.
 * Sockets made here always have ZMQ_LINGER set, so a process never hangs
 * at exit on an unreachable peer.
 */
#ifndef KVW_WIRE_H
#define KVW_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#include "frame.h"

/* An ipc:// path's most bytes (struct sockaddr_un's sun_path, less NUL). */
#define WIRE_IPC_PATH_MAX 107u

/* ROUTER identities are at most 255 bytes (libzmq's limit). */
#define WIRE_ID_MAX 255u

/* One received message. Holds the zmq parts the decoded views point into:
 * keep it alive while using the frame_msg, then wire_in_release(). */
struct wire_in {
	zmq_msg_t parts[KVW_MAX_FRAMES];
	size_t n;                 /* parts held (identity excluded) */
	uint8_t id[WIRE_ID_MAX];  /* ROUTER sockets: the sender's identity */
	size_t idlen;
};

/* Makes a socket of `type` with ZMQ_LINGER = linger_ms (0 for peers:
 * never wait on an unreachable one), and ZMQ_ROUTER_MANDATORY on ROUTERs
 * (a reply to a vanished peer fails instead of vanishing). With the
 * group's keys in use, ctx gets its ZAP handler first (wire_auth.h).
 * NULL on error with the reason in err. */
void *wire_socket(void *ctx, int type, int linger_ms, char *err,
		  size_t errlen);

/* A ROUTER that dials many peers (kv-heartbeat: one socket for all of
 * them, each connection named by ZMQ_CONNECT_ROUTING_ID before its
 * wire_connect, so that sockets and threads do not grow with the peers):
 * wire_socket's ROUTER, its handshakes watched as a client's. */
void *wire_router_dialer(void *ctx, int linger_ms, char *err, size_t errlen);

/* Whether ep can be bound or dialled: ipc://PATH with a PATH of 1..107
 * bytes (a socket address holds 108 with its NUL), tcp://HOST:PORT or
 * inproc://NAME, at most KVW_MAX_STR bytes in all. 0, or KVW_EINVAL with
 * the reason in err. */
int wire_endpoint_check(const char *ep, char *err, size_t errlen);

/* Binds sock to endpoint. For ipc:// endpoints a stale socket file from a
 * dead process is removed first and the new one gets `mode` (0600 for
 * engine sockets); a tcp:// one follows the process's wire_auth policy
 * (CURVE server, --insecure, or refused). Returns 0, KVW_EINVAL (tcp://
 * without a policy) or KVW_ESYS. */
int wire_bind(void *sock, const char *endpoint, unsigned mode, char *err,
	      size_t errlen);

/* Connects sock to endpoint; a tcp:// one follows the wire_auth policy
 * (CURVE client, --insecure, or refused). Never waits for the peer.
 * Returns 0, KVW_EINVAL (a bad endpoint, or tcp:// without a policy) or
 * KVW_ESYS. */
int wire_connect(void *sock, const char *endpoint, char *err, size_t errlen);

/* Closes the socket (LINGER was set at creation) and NULLs *sock. */
void wire_close(void **sock);

/* One part of a message, non-blocking (ZMQ_DONTWAIT, retried on EINTR);
 * more: ZMQ_SNDMORE or 0. zmq_send's return (errno kept). libzmq takes a
 * whole multipart message or none of it: once the first part is queued
 * the rest cannot be refused. */
int wire_send_part(void *sock, const void *p, size_t len, int more);

/* Encodes m and sends it; id/idlen address a ROUTER peer (NULL for other
 * socket types). Non-blocking: KVW_EAGAIN when the peer's queue is full
 * or it is unreachable, KVW_EINVAL if m does not encode, KVW_ESYS
 * otherwise (errno kept: ETERM means the context is gone). */
int wire_send(void *sock, const struct frame_msg *m, const void *id,
	      size_t idlen, char *err, size_t errlen);

/* Receives one whole message without blocking (ROUTER: router != 0, the
 * identity goes to in->id) and decodes it into *m.
 * Returns 0: *m valid until wire_in_release(in);
 *   KVW_EAGAIN: nothing to read;
 *   KVW_EINVAL / KVW_EVERSION: malformed (too many parts, codec refused);
 *     the message has been consumed whole and in is already released;
 *   KVW_ESYS: the socket or context is gone (errno ETERM/ENOTSOCK): the
 *     caller's loop must end. */
int wire_recv(void *sock, int router, struct wire_in *in,
	      struct frame_msg *m, char *err, size_t errlen);

/* Releases the parts of a received message; safe to call twice. */
void wire_in_release(struct wire_in *in);

#endif
