/*
 * ratelimit.c - the token buckets of ratelimit.h.
 */
#include "ratelimit.h"

#include <string.h>

void rl_init(struct ratelimit *rl, double rate, double burst)
{
	memset(rl, 0, sizeof *rl);
	rl->rate = rate;
	rl->burst = burst;
}

/* FNV-1a over the identity bytes. */
static uint32_t rl_hash(const uint8_t *id, size_t len)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < len; i++)
		h = (h ^ id[i]) * 16777619u;
	return h;
}

int rl_take(struct ratelimit *rl, const uint8_t *id, size_t len,
	    uint64_t now_ns)
{
	uint32_t base = rl_hash(id, len < RL_ID_MAX ? len : RL_ID_MAX);
	struct rl_bucket *b = NULL, *old = NULL;

	if (len > RL_ID_MAX)
		len = RL_ID_MAX;
	for (uint32_t w = 0; w < RL_WAYS; w++) {
		struct rl_bucket *c = &rl->b[(base + w) % RL_SLOTS];

		if (c->used && c->idlen == len && memcmp(c->id, id, len) == 0) {
			b = c;
			break;
		}
		if (!old || !c->used || (old->used && c->t_ns < old->t_ns))
			old = c;
	}
	if (!b) {
		b = old;
		memcpy(b->id, id, len);
		b->idlen = (uint8_t)len;
		b->used = 1;
		b->tokens = rl->burst;
		b->t_ns = now_ns;
	}
	if (now_ns > b->t_ns) {
		b->tokens += (double)(now_ns - b->t_ns) * rl->rate / 1e9;
		if (b->tokens > rl->burst)
			b->tokens = rl->burst;
		b->t_ns = now_ns;
	}
	if (b->tokens < 1.0)
		return 0;
	b->tokens -= 1.0;
	return 1;
}
