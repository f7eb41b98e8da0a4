/*
 * dealers.h - the one cache of outbound DEALER sockets, keyed by the
 * endpoint they dial, that every role uses to reach its peers (kv-sender:
 * decodes' return endpoints; its workers: the same, for STATUS of final
 * jobs; kv-receiver: bootstraps and prefill ranks; kv-heartbeat dials
 * its many peers on one ROUTER instead, hbeat.c). A DEALER is made (ZMQ_LINGER 0, wire_socket) and
 * connected the first time its endpoint is asked for; connecting never
 * waits for the peer, so asking is cheap and never blocks.
 *
 * Two policies, chosen at open:
 *  - cap 0: every DEALER lives until dealers_close. A holder may keep the
 *    pointer dealers_get returned (and poll it for replies), and must not
 *    close it.
 *  - cap > 0: at most cap DEALERs; the least recently asked-for one is
 *    closed to make room. A holder asks again for every send and never
 *    keeps the pointer (for senders that never read their DEALERs).
 */
#ifndef KVW_DEALERS_H
#define KVW_DEALERS_H

#include <stddef.h>
#include <stdint.h>

struct dealers; /* opaque */

/* A cache over ctx (which must outlive it). 0 and *out (the caller's, freed
 * with dealers_close), or KVW_ENOMEM with *out NULL. */
int dealers_open(void *ctx, uint32_t cap, struct dealers **out);

/* The DEALER connected to endpoint ep (at most KVW_MAX_STR bytes), made and
 * connected now if the cache has none. NULL on failure, with the reason in
 * err (nothing is cached then, so the next call tries again). */
void *dealers_get(struct dealers *d, const char *ep, char *err,
		  size_t errlen);

/* Closes the DEALER to ep if the cache has one (its peer is forgotten:
 * kv-sender reclaiming a decode's slot); a later dealers_get of ep makes a
 * new one. A holder must not use a pointer it kept for ep after this. */
void dealers_drop(struct dealers *d, const char *ep);

/* DEALERs in the cache now. */
uint32_t dealers_count(const struct dealers *d);

/* Closes every DEALER, frees *d and sets *d = NULL. Accepts NULL and
 * *d == NULL. */
void dealers_close(struct dealers **d);

#endif
