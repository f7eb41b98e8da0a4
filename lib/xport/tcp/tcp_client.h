/*
 * tcp_client.h - the prefill side of one tcp connection to a decode sink
 * (protocol: tcp_proto.h): dial and hello, batches sent straight from the
 * source pool, their ACKs read in order, and the batches not acked yet
 * kept, so a broken connection is re-dialled and those batches sent again
 * (writes are idempotent) before anything fails. Private to xport_tcp.c,
 * which checks every copy against both regions before it calls in here.
 */
#ifndef KVW_TCP_CLIENT_H
#define KVW_TCP_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "tcp_proto.h"

struct tcp_client;

/* One copy, already checked: `len` bytes at `src` (inside the local pool,
 * which outlives the client) to dst_off of the decode pool. */
struct tcp_span {
	const uint8_t *src;
	uint64_t dst_off;
	uint64_t len;
};

/* How long a broken connection is re-dialled before its unacked batches
 * fail: KVW_TCP_RESEND_MS from the environment, else this. */
#define TCP_RESEND_MS_DEFAULT 10000u

/* Dials host:port (numeric) and answers the sink's challenge with the
 * registration's secret and the group's data key (group: 32 bytes, or NULL
 * without group keys; tcp_auth.h); encrypt asks for ENCRYPT (needs group).
 * A refused or timed-out connect is retried with backoff within the
 * resend window; keys or a version that differ are not. 0, or KVW_ESYS /
 * KVW_ENOMEM / KVW_EINVAL with the real cause in err (refused, timed out,
 * handshake refused: keys differ with both fingerprints, version); *out
 * is the caller's to close. */
int tcp_client_open(struct tcp_client **out, const char *host, uint16_t port,
		    const uint8_t secret[TCP_SECRET_LEN], const uint8_t *group,
		    int encrypt, char *err, size_t errlen);

/* Closes the connection and forgets every unacked batch. Accepts NULL and
 * *c == NULL; sets *c = NULL. */
void tcp_client_close(struct tcp_client **c);

/* Sends one batch of n (1..TCP_MAX_COPIES) spans for room's incarnation
 * inc (the decode room's XFER_INFO token), and keeps it
 * until acked. A broken connection is re-dialled and every unacked batch
 * sent again first. 0, or KVW_ESYS (the connection could not be made
 * whole within the resend window: every unacked batch is lost, and
 * wait_for answers KVW_ESYS for each; wait does not report them again) or
 * KVW_ENOMEM, with the reason in err. */
int tcp_client_send(struct tcp_client *c, uint64_t room, uint64_t inc,
		    const struct tcp_span *s, size_t n, char *err,
		    size_t errlen);

/* Reads ACKs until no batch is unacked, re-dialling and resending as
 * send does. Returns 0 when every batch landed intact; else the first
 * refusal: KVW_ECORRUPT (integrity: the batch failed its tags on
 * TCP_STRIKES connections, or a copy outside the room's pages), KVW_ENOENT (the room is not
 * live at the decode), KVW_EINVAL (the sink refused the batch) or
 * KVW_ESYS (connection lost for good), with the reason in err. */
int tcp_client_wait(struct tcp_client *c, char *err, size_t errlen);

/* Marks for a wait that answers for some batches only (several jobs
 * in flight on one connection): the mark after the batches sent so far. */
uint64_t tcp_client_mark(const struct tcp_client *c);

/* Reads ACKs until every batch sent before mark hi is answered, and
 * answers for those sent from mark lo on only: 0 when each of them landed
 * intact, else the first refusal as for wait, or KVW_ESYS for one lost
 * with its connection (also when a send or an earlier wait already said
 * so). Batches before lo that are still unanswered are read, and their
 * outcome dropped: call in the order of the marks. */
int tcp_client_wait_for(struct tcp_client *c, uint64_t lo, uint64_t hi,
			char *err, size_t errlen);

/* Batches sent and not acked yet (lost ones not counted); times the
 * connection was re-dialled (or a first dial retried); batches sent again
 * on a new connection; ACKs or WELCOMEs with a wrong tag, seq or batch and
 * batches the sink refused for integrity. The counters only grow. */
uint32_t tcp_client_unacked(const struct tcp_client *c);
uint64_t tcp_client_redials(const struct tcp_client *c);
uint64_t tcp_client_resent(const struct tcp_client *c);
uint64_t tcp_client_integrity(const struct tcp_client *c);

#endif
