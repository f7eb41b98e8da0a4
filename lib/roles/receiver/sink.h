/*
 * sink.h - one kv-receiver sink process (tcp transport): it serves the
 * listening socket its receiver opened (inherited) and writes every batch
 * a prefill worker sends straight into this decode rank's pool
 * (xport/tcp/tcp_sink.h). A batch is written only while its room is live in
 * the receiver's room table: a room that is missing, terminal or armed
 * for an abort gets its batches read and discarded. While it writes a
 * batch, the room is held in the receiver's fence (table/rtab_fence.h),
 * which is how the receiver knows when no byte of an armed room can land
 * any more. A batch is written only into the pages the receiver granted
 * the room's current incarnation (table/rtab_grant.h); one that names
 * another page is discarded, counted (dest_refused) and fails its room
 * with `integrity`. Refusals are counted as malformed in the table and logged at a
 * bounded rate.
 */
#ifndef KVW_SINK_H
#define KVW_SINK_H

#include <stddef.h>
#include <stdint.h>

/* Connections one sink serves at once: also its row of fence slots. */
#define SINK_MAX_CONNS 1024u

struct sink_cfg {
	uint32_t id;          /* K, for the log tag */
	int listen_fd;        /* inherited from kv-receiver */
	const char *table;    /* the receiver's room table */
	const char *pool;     /* this rank's KV pool (written) */
	uint8_t secret[16];   /* the registration's, from the environment */
};

struct rtab;
struct rtab_fence;
struct rtab_grant;

/* What the room hook reads: the receiver's table (writable: a refused
 * batch fails its room), its fence (row `id` is this sink's) and its
 * grants. */
struct sink_hook {
	struct rtab *t;
	struct rtab_fence *f;
	struct rtab_grant *g;
	uint32_t id;
	uint64_t delay_us; /* TEST ONLY: KVW_TEST_SINK_DELAY_US (proc.h) */
};

/* The tcp sink's room_begin (xport/tcp/tcp_sink.h; arg is a struct
 * sink_hook): TCP_ROOM_OK with the room held in fence slot `slot` (room
 * end owed), TCP_ROOM_NOT_LIVE (not in the table, terminal, armed, no
 * grant for this incarnation, another incarnation token), or
 * TCP_ROOM_DEST (a copy outside the pages granted to the room: counted as
 * dest_refused, warned, and the room failed with `integrity`). Nothing is
 * held unless TCP_ROOM_OK. */
int sink_room_begin(void *arg, uint32_t slot, uint64_t room,
		    uint64_t incarnation, const uint8_t *copies,
		    uint32_t ncopies);
/* The batch held by slot is written (or dropped): the room is let go. */
void sink_room_end(void *arg, uint32_t slot);

/* The receiver's fence file beside its table: "<table>.fence" into
 * buf[len]. 0, or KVW_EINVAL when it does not fit. */
int sink_fence_path(const char *table, char *buf, size_t len);

/* The receiver's destination grants beside its table: "<table>.grant"
 * (table/rtab_grant.h). 0, or KVW_EINVAL when it does not fit. */
int sink_grant_path(const char *table, char *buf, size_t len);

/* Opens the table, its fence (row cfg->id is this sink's) and the pool, then serves until SIGTERM or until its
 * receiver is gone (the parent dies: PR_SET_PDEATHSIG kills it). 0, or a
 * KVW_E* with the reason in err. */
int sink_run(const struct sink_cfg *cfg, char *err, size_t errlen);

#endif
