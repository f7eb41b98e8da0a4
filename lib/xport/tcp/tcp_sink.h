/*
 * tcp_sink.h - the decode side of the tcp transport: one poll loop that
 * accepts connections on the listening socket xport_tcp_listen opened,
 * checks each connection's handshake and every batch's tags and sequence
 * number (tcp_proto.h), and writes every batch straight into the pool
 * (readv into the destination pages: no staging copy) after checking its
 * head tag and its whole copy list against the pool. A batch for a room the
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
	_Atomic uint64_t not_live;   /* batches discarded: room not live */
	_Atomic uint64_t device;     /* batches whose copy to the GPU failed */
	_Atomic uint64_t integrity;  /* batches with a wrong tag or seq (or a
				      * wrong ACK flow): connection dropped */
	_Atomic uint64_t dest;       /* batches refused by room_begin's
				      * destination check (TCP_ROOM_DEST) */
	_Atomic uint64_t evicted;    /* connections still in the handshake
				      * closed for a newer one (slots full) */
};

/* room_begin's answers. */
enum tcp_room {
	TCP_ROOM_OK = 0,       /* may write; the room is held: room_end owed */
	TCP_ROOM_NOT_LIVE = 1, /* read and discard the payload, ACK NOT_LIVE */
	TCP_ROOM_DEST = 2,     /* a copy outside the pages the decode granted
				* this incarnation: discard, ACK DEST */
};

struct mem_region; /* mem/mem.h */
struct pool;       /* mem/pool.h */

struct tcp_sink_cfg {
	int listen_fd;             /* borrowed; made non-blocking here */
	uint8_t *base;             /* the pool, mapped read-write */
	uint64_t size;
	/* The decode engine's memory behind the pool (mem.h, opened with
	 * MEM_STAGE), or NULL: where the engine keeps its KV on a GPU, a
	 * batch's device pages land in the pool and are copied on to the
	 * GPU before the ACK. */
	struct mem_region *mem;
	/* The pool base maps, or NULL: a decode engine that registered its
	 * own host memory (api.h's kvw_register_host) has it laid over the
	 * mapping before each batch (pool.h's pool_refresh). */
	struct pool *pool;
	const uint8_t *secret;     /* 16 bytes */
	const uint8_t *group_key;  /* the group's data key (32 bytes), or
				    * NULL without group keys (tcp_auth.h) */
	uint32_t max_conns;        /* authenticated connections at most
				    * (0: 1024) */
	uint32_t max_per_source;   /* of them from one address (0: 64) */
	uint32_t max_pending;      /* connections still in the handshake, in
				    * slots of their own (0: 64): when full,
				    * the oldest is closed for the newest, so
				    * idle keyless connections never keep a
				    * peer with the keys out */
	uint32_t handshake_ms;     /* a hello must arrive within (0: 2000) */
	int require_encrypt;       /* refuse a HELLO without ENCRYPT */
	uint32_t stall_ms;         /* a batch begun must make progress within
				    * (0: 10000), or its connection closes:
				    * a half-open link or a slow loris never
				    * holds a room in the fence for long */
	/* A batch's head tag verified and its copy list checked against the
	 * pool, before its payload is read: may the batch for this room's
	 * incarnation be written, with these copies (ncopies x (dst_off u64
	 * | len u64), little-endian, as on the wire)? `slot` (< max_conns)
	 * names the connection; TCP_ROOM_OK holds the room for that slot
	 * until room_end(slot) once its last byte is written and checked
	 * (or the connection dropped). NULL: every room may, and room_end is
	 * not called. */
	int (*room_begin)(void *arg, uint32_t slot, uint64_t room,
			  uint64_t incarnation, const uint8_t *copies,
			  uint32_t ncopies);
	void (*room_end)(void *arg, uint32_t slot);
	/* Told of every refusal (what happened, for a rate-limited log);
	 * may be NULL. */
	void (*event)(void *arg, const char *what);
	/* Told, instead of event, of each batch discarded because its room
	 * is not live (an ended, aborted or cleared incarnation's late
	 * batch: what a prefill sends in flight when its decode aborts, so
	 * no refusal of anything malformed): kv-stat's stale. May be NULL
	 * (then event). */
	void (*stale)(void *arg, uint64_t room);
	/* Told, besides event, of each connection that failed the handshake
	 * (a wrong secret or group key, a bad hello, none in time): what
	 * kv-stat counts as auth_failed. May be NULL. */
	void (*auth_failed)(void *arg);
	/* Told, besides event, of each batch refused for a wrong tag or
	 * sequence number: kv-stat's integrity_failed. May be NULL. */
	void (*integrity_failed)(void *arg);
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
