/*
 * receiver_forget.c - a decode forgets the prefill instances that left
 * (issue 34): in an xPyD service prefill instances come and go for weeks,
 * and each one the decode ever talked to kept a DEALER, a peer-table slot
 * (which kv-heartbeat pings for ever) and its bootstrap's DEALER.
 *
 * A prefill peer goes once kv-heartbeat has declared it dead and it has
 * stayed dead for the grace period (--forget-after), and no room names it
 * as a target: its DEALER is closed, its bootstrap's coordinate forgotten,
 * its table slot retired (kv-heartbeat stops pinging it; the slot serves
 * the next endpoint), counted as reclaimed and logged. A bootstrap goes
 * once none of its coordinates names a peer, no room waits on it, and no
 * room asked it for the grace period. A peer or bootstrap that comes back
 * later is looked up and registered again like a new one.
 *
 * Called from the loop's timers, before the sockets are set for the poll
 * (the sets shrink here, never while they are read).
 */
#include "receiver_impl.h"

#include <stdlib.h>

#include "base/log.h"
#include "wire/dealers.h"

/* Marks (busy = 1) every peer a room names as a target. */
static void mark_named(struct receiver *r)
{
	struct idmap_iter it = { 0 };
	struct idmap_node *n;

	for (uint32_t i = 0; i < r->npeers; i++)
		r->peers[i]->busy = 0;
	while ((n = idmap_next(&r->rooms.m, &it)) != NULL) {
		struct rx_room *room = idmap_entry(n, struct rx_room, node);

		for (uint32_t i = 0; i < room->ntargets; i++)
			if (room->targets[i].peer)
				room->targets[i].peer->busy = 1;
	}
}

int receiver_peer_departed(const struct rx_peer *p, uint64_t now_ns,
			   uint64_t grace_ns)
{
	/* dead_since_ns may be a little later than now_ns (stamped in the
	 * same sync pass): not yet. */
	return p->dead && !p->busy && p->dead_since_ns &&
	       now_ns >= p->dead_since_ns &&
	       now_ns - p->dead_since_ns >= grace_ns;
}

static void forget_peers(struct receiver *r, uint64_t now)
{
	uint32_t *ids, n = 0, kept = 0, k = 0;
	uint8_t *done;

	/* The rooms are walked only when some peer has been dead past the
	 * grace: this runs every 100 ms, and a decode holds up to 65,536
	 * rooms. */
	for (uint32_t i = 0; i < r->npeers; i++) {
		r->peers[i]->busy = 0;
		n += receiver_peer_departed(r->peers[i], now, r->forget_ns);
	}
	if (n == 0)
		return;
	mark_named(r);
	n = 0;
	for (uint32_t i = 0; i < r->npeers; i++)
		n += receiver_peer_departed(r->peers[i], now, r->forget_ns);
	if (n == 0)
		return;
	ids = calloc(n, sizeof *ids);
	done = calloc(n, 1);
	if (!ids || !done)
		goto out;
	n = 0;
	for (uint32_t i = 0; i < r->npeers; i++)
		if (receiver_peer_departed(r->peers[i], now, r->forget_ns))
			ids[n++] = r->peers[i]->id;
	if (rtab_peers_retire(r->tab, ids, n, done) < 0)
		goto out;
	for (uint32_t i = 0; i < r->npeers; i++) {
		struct rx_peer *p = r->peers[i];

		if (!receiver_peer_departed(p, now, r->forget_ns) || !done[k++]) {
			r->peers[kept++] = p;
			continue;
		}
		LOG(LOG_INFO, "prefill peer %s forgotten: dead for %.1f s, no "
		    "room names it (socket closed, table slot %u retired)",
		    p->ep, (double)(now - p->dead_since_ns) / 1e9, p->id);
		receiver_boot_forget(r, p);
		dealers_drop(r->dealers, p->ep);
		rtab_sec_add(r->tab, RTAB_S_RECLAIMED, 1);
		free(p);
	}
	r->npeers = kept;
out:
	free(ids);
	free(done);
}

void receiver_forget_departed(struct receiver *r, uint64_t now)
{
	forget_peers(r, now);
	receiver_boots_forget_idle(r, now);
}
