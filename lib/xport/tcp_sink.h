/*
 * tcp_sink.h - the decode side of the tcp transport: one poll loop that
 * accepts connections on the listening socket xport_tcp_listen opened,
 * checks each connection's secret, and writes every batch straight into
 * the pool (readv into the destination pages: no staging copy) after
 * checking its whole copy list against the pool. A batch for a room the
 * caller says is not live is read and discarded, never written. Hostile
 * input (a wrong secret, garbage, a copy outside the pool, a copy count
 * over the cap, a peer that stops half way through a hello) closes that
 * connection and is counted; the loop keeps serving the others.
 */
#ifndef KVW_TCP_SINK_H
#define KVW_TCP_SINK_H

#include <stddef.h>
#include <stdint.h>

/* What the sink saw; the counters only grow. Atomic, so another thread
 * (a test, a reporter) may read them while the loop runs. */
struct tcp_sink_stats {
	_Atomic uint64_t conns;      /* connections accepted with the right secret */
	_Atomic uint64_t refused;    /* connections closed for a wrong secret, a
			      * bad hello, a stalled handshake or the cap */
	_Atomic uint64_t batches;    /* batches written and acked OK */
	_Atomic uint64_t bytes;      /* payload bytes written into the pool */
	_Atomic uint64_t bad;        /* batches refused: malformed or out of the pool */
	_Atomic uint64_t checksum;   /* batches whose bytes did not match */
	_Atomic uint64_t not_live;   /* batches discarded: room not live */
	_Atomic uint64_t device;     /* batches whose copy to the GPU failed */
	_Atomic uint64_t dest;       /* batches discarded: a copy outside the
				      * room's granted pages */
};

/* What room_begin answers. */
enum {
	TCP_ROOM_NOT_LIVE = 0, /* read and discard the payload; ACK NOT_LIVE */
	TCP_ROOM_OK = 1,       /* held: room_end owed */
	TCP_ROOM_DEST = 2,     /* a copy outside the pages granted to this
				* incarnation: discard; ACK DEST */
};

struct tcp_sink_cfg {
	int listen_fd;             /* borrowed; made non-blocking here */
	uint8_t *base;             /* the pool, mapped read-write */
	uint64_t size;
	/* The pool's GPU staging (cuda_stage.h), or NULL: where the decode
	 * engine registered a GPU pool, a batch's device pages land in the
	 * host pool and are copied on to the GPU before the ACK. */
	struct cstage *stage;
	const uint8_t *secret;     /* 16 bytes */
	const uint8_t *group_key;  /* the group's data key (32 bytes), or
				    * NULL without group keys (tcp_auth.h) */
	uint32_t max_conns;        /* open connections at most (0: 1024) */
	uint32_t max_per_source;   /* of them from one address (0: 64) */
	uint32_t handshake_ms;     /* a hello must arrive within (0: 5000) */
	uint32_t stall_ms;         /* a batch begun must make progress within
				    * (0: 10000), or its connection closes:
				    * a half-open link or a slow loris never
				    * holds a room in the fence for long */
	/* A batch's copy list checked against the pool, before its payload
	 * is read: may the batch for incarnation `incarnation` (0: not
	 * carried) of `room` write its ncopies copies (`copies`, as on the
	 * wire: dst_off u64 | len u64 each) now? `slot` (< max_conns) names
	 * the connection; TCP_ROOM_OK holds the room for that slot until
	 * room_end(slot) once its last byte is written (or the connection
	 * dropped); TCP_ROOM_NOT_LIVE and TCP_ROOM_DEST discard the payload.
	 * NULL: every room may, and room_end is not called. */
	int (*room_begin)(void *arg, uint32_t slot, uint64_t room,
			  uint64_t incarnation, const uint8_t *copies,
			  uint32_t ncopies);
	void (*room_end)(void *arg, uint32_t slot);
	/* Told of every refusal (what happened, for a rate-limited log);
	 * may be NULL. */
	void (*event)(void *arg, const char *what);
	/* Told, besides event, of each connection that failed the handshake
	 * (a wrong secret or group key, a bad hello, none in time): what
	 * kv-stat counts as auth_failed. May be NULL. */
	void (*auth_failed)(void *arg);
	void *arg;
	/* Polled between wakeups: nonzero ends the loop. */
	int (*stop)(void);
};

/* Serves until cfg->stop() says so: 0, or KVW_ESYS with the reason in err
 * when the listening socket fails. Every connection is closed on return.
 * st may be NULL. */
int tcp_sink_run(const struct tcp_sink_cfg *cfg, struct tcp_sink_stats *st,
		 char *err, size_t errlen);

#endif
