/*
 * ratelimit.h - token buckets per message source (issue 14): what one peer
 * may send of a kind of message per second. A source is the ZMQ routing
 * identity a ROUTER saw the message come from (one per connection). The
 * table is fixed (RL_SLOTS buckets, no allocation) and a lookup is O(1):
 * the identity's hash picks RL_WAYS slots; an identity not among them
 * takes the one refilled longest ago and starts with a full bucket, so a
 * flood from ever new identities mostly evicts its own buckets. The caller counts
 * drops (RTAB_S_RATE_LIMITED) and changes nothing.
 */
#ifndef KVW_RATELIMIT_H
#define KVW_RATELIMIT_H

#include <stddef.h>
#include <stdint.h>

#define RL_SLOTS 256u
#define RL_WAYS 4u
#define RL_ID_MAX 32u /* bytes of an identity that tell sources apart */

struct rl_bucket {
	uint8_t id[RL_ID_MAX];
	uint8_t idlen;
	uint8_t used;
	uint64_t t_ns;  /* last refill */
	double tokens;
};

struct ratelimit {
	double rate;  /* tokens per second */
	double burst; /* bucket size */
	struct rl_bucket b[RL_SLOTS];
};

/* An empty table: every source starts with a full bucket of `burst`. */
void rl_init(struct ratelimit *rl, double rate, double burst);

/* Takes one token from the bucket of source id[len] at now_ns: 1 when the
 * message may go on, 0 when the source is over its rate. */
int rl_take(struct ratelimit *rl, const uint8_t *id, size_t len,
	    uint64_t now_ns);

#endif
