/*
 * tcp_sink_impl.h - what the two halves of the tcp sink share (not for
 * callers outside lib/xport): tcp_sink.c accepts connections, keeps the
 * caps and runs the poll loop; tcp_sink_conn.c walks one connection
 * through its handshake and its batches.
 */
#ifndef KVW_TCP_SINK_IMPL_H
#define KVW_TCP_SINK_IMPL_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#include "tcp_mac.h"
#include "tcp_proto.h"
#include "tcp_sink.h"

#define SINK_IOV 512u
/* Payload bytes asked of one readv: what lands is hashed next, and at
 * this size it is still in the cache (a readv that took all the socket
 * held, megabytes, left the hash to read memory again; measured). */
#define SINK_READ (1u << 20)
#define SINK_DISCARD 65536u
/* Inside a payload the loop is woken once this much waits (or the rest
 * of the batch, if less): fewer wake-ups, polls and readv calls per byte.
 * kv-bench tcp at 64 KiB and 1 MiB copies: 0.46-0.49 CPU s/GB and 12-13 %
 * more GiB/s than when woken by each segment (0.51-0.54; bench/README.md,
 * the A/B of 2026-12-07). */
#define SINK_LOWAT (256u << 10)
/* Bytes a refused connection may still send before it is cut. */
#define SINK_LINGER_BYTES (64ull << 20)

/* C_CLOSING: refused, the ACK said why; see linger() in tcp_sink_conn.c */
enum { C_HELLO, C_HDR, C_COPIES, C_PAYLOAD, C_TRAILER, C_CLOSING };

#define NO_SLOT UINT32_MAX

struct conn {
	int fd;
	int state;
	uint64_t deadline_ns; /* C_HELLO: give up then */
	uint64_t last_ns;     /* the last byte read */
	uint8_t head[TCP_HELLO_LEN]; /* the hello, a header or a body tag */
	size_t have;          /* bytes of the current unit read so far */
	uint32_t ncopies;
	uint64_t batch, room, inc, total, left;
	uint8_t *copies;      /* ncopies x (dst_off, len), then the head
			       * tag; owned */
	uint32_t ci;          /* payload: current copy ... */
	uint64_t coff;        /* ... and offset in it */
	int discard;          /* payload read and dropped: the ACK status */
	int dev_fail;         /* landed, but not copied on to the GPU */
	int keyed;            /* the macs are set up (handshake done) */
	int shut;             /* C_CLOSING: our side is shut ... */
	uint64_t dropped;     /* ... and bytes read and dropped since */
	int encrypt;          /* HELLO asked for ENCRYPT */
	int lowat;            /* the socket's SO_RCVLOWAT (0: the default) */
	struct tcp_mac in;    /* client -> sink: checks batch tags */
	struct tcp_mac out;   /* sink -> client: tags ACKs */
	uint64_t seq_in;      /* the next batch's seq */
	uint64_t seq_out;     /* the next ACK's seq */
	int held;             /* room_begin said yes: room_end owed */
	uint32_t slot;        /* from the handshake on; NO_SLOT before */
	uint8_t src[16];      /* the peer's address (IPv4 mapped), for the
			       * per-source cap */
	char peer[64];        /* the peer's address and port, for the log */
	uint8_t ack[TCP_WELCOME_LEN]; /* the ACK, or the challenge, or the
				       * welcome */
	size_t ack_len;       /* bytes in ack */
	size_t ack_left;      /* of them not yet sent (POLLOUT) */
	uint8_t nonce[TCP_NONCE_LEN]; /* this connection's challenge */
};

struct sink {
	const struct tcp_sink_cfg *cfg;
	struct tcp_sink_stats *st;
	struct conn *c;
	uint32_t n, cap;
	struct pollfd *pfd;
	uint32_t *free_slot;  /* stack of unused connection slots */
	uint32_t nfree;
	uint32_t pending;     /* connections in C_HELLO */
	uint8_t scratch[SINK_DISCARD];
};

/* CLOCK_MONOTONIC in ns. */
uint64_t tcp_sink_now_ns(void);
/* Tells cfg->event of a refusal; _cevent names the connection's peer. */
void tcp_sink_event(struct sink *s, const char *what);
void tcp_sink_cevent(struct sink *s, const struct conn *c, const char *what);
/* A connection that failed the handshake: refused, told as an event and
 * as an authentication failure. */
void tcp_sink_handshake_failed(struct sink *s, const struct conn *c,
			       const char *what);
/* Authenticated connections open from src (the per-source cap). */
uint32_t tcp_sink_from_source(const struct sink *s, const uint8_t src[16]);

/* The connection's write is over: its room is no longer held. */
void tcp_sink_release(struct sink *s, struct conn *c);
/* Sends what is left of the connection's ACK: 0 done, 1 still pending
 * (wait for POLLOUT), -1 the connection is gone. */
int tcp_sink_flush_ack(struct conn *c);
/* Serves one readable connection until it would block: 0 to keep it, -1
 * to close it. */
int tcp_sink_serve(struct sink *s, struct conn *c);
/* Sets the connection's SO_RCVLOWAT to v bytes (unchanged: no call). */
void tcp_sink_lowat(struct conn *c, int v);

#endif
