/*
 * hbeat.h - kv-heartbeat: watches the prefill peers in a control process's
 * peer table. Every interval it sends PING to each peer (one ROUTER
 * dials them all, a connection per endpoint made on first use, within the
 * open-file limit: a peer beyond it is not watched, with an error naming
 * the limit, never declared dead for it); a PONG within the ping
 * timeout marks the peer seen (rtab_peer_seen); a PONG with a new epoch
 * for a peer whose epoch was known means it restarted, and its non-terminal
 * rooms fail (KVW_R_PEER_RESTART); an unanswered PING is a miss
 * (rtab_peer_miss), counted at its timeout or at the latest when the next
 * PING goes out, and max_failures consecutive misses mark the peer DEAD
 * and fail its non-terminal rooms (KVW_R_PEER_DEAD), matched by peer id:
 * within interval x (max_failures + 1) of its last answer. A DEAD peer is
 * still pinged (a PONG revives it) but its misses stop counting.
 * The heartbeat never inserts or clears rooms.
 */
#ifndef KVW_HBEAT_H
#define KVW_HBEAT_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

struct hbeat_cfg {
	const char *table;        /* the owner's room table, opened writable */
	uint64_t interval_ns;     /* >= 50 ms */
	uint32_t max_failures;    /* >= 1 */
	uint64_t ping_timeout_ns; /* 0 or more than interval: the interval */
};

struct hbeat; /* opaque */

/* The config checks of hbeat_open, without opening anything: 0, or
 * KVW_EINVAL with the reason in err. */
int hbeat_check(const struct hbeat_cfg *cfg, char *err, size_t errlen);

/* Maps the table (rtab_open writable), makes the ZMQ context and the
 * one socket that dials the peers (they come and go with the table), and
 * plans the peer connections the open-file limit leaves room for. Returns 0 and *out (free with
 * hbeat_close), KVW_EINVAL for a bad config, or the rtab_open error
 * (KVW_ENOENT: no table at that path) with the reason in err. */
int hbeat_open(const struct hbeat_cfg *cfg, struct hbeat **out, char *err,
	       size_t errlen);

/* Pings until proc_stopping() (SIGTERM/SIGINT). Returns 0 on a requested
 * stop, KVW_ESYS with the reason in err if ZMQ failed. */
int hbeat_run(struct hbeat *h, char *err, size_t errlen);

/* Closes every socket (LINGER 0) and the context, unmaps the table, frees;
 * accepts NULL, *h == NULL and a half-built object; sets *h = NULL. */
void hbeat_close(struct hbeat **h);

#endif
