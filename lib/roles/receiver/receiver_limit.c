/*
 * receiver_limit.c - per-source token buckets on kv-receiver's peer ROUTER
 * (issue 14). Anyone who can reach that socket (prefill controls and their
 * workers, kv-heartbeat, kv-ctl; on tcp:// only holders of the group's
 * keys) may send STATUS, ABORT_ACK and PING; each kind has its own bucket
 * per source (ratelimit.h), so a flood from one connection costs the loop
 * a bounded amount of work (and a PING flood no unbounded PONGs) while a
 * real prefill, far below the rates of receiver_impl.h, never hits them.
 * What goes over is counted and dropped before any handler sees it.
 */
#include "receiver_impl.h"

#include "roles/authz.h"

void receiver_limit_init(struct receiver *r)
{
	rl_init(&r->rl_status, RX_STATUS_RATE, RX_STATUS_BURST);
	rl_init(&r->rl_ack, RX_ACK_RATE, RX_ACK_BURST);
	rl_init(&r->rl_ping, RX_PING_RATE, RX_PING_BURST);
}

int receiver_limit_admit(struct receiver *r, const uint8_t *id, size_t idlen,
			 unsigned type, uint64_t now_ns)
{
	struct ratelimit *rl;

	switch (type) {
	case FRAME_STATUS:
		rl = &r->rl_status;
		break;
	case FRAME_ABORT_ACK:
		rl = &r->rl_ack;
		break;
	case FRAME_PING:
		rl = &r->rl_ping;
		break;
	default:
		return 1;
	}
	if (rl_take(rl, id, idlen, now_ns))
		return 1;
	RATE_LIMITED(r->tab, "%s from a source over %g/s on the peer socket",
		     frame_type_str(type), rl->rate);
	return 0;
}
