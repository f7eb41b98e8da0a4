/*
 * rdma_chain.c - copy list check and WR chain building (rdma_chain.h).
 */
#include "rdma_chain.h"

#include <arpa/inet.h>
#include <string.h>

int rdma_chain_check(const struct xport_copy *c, size_t n,
		     const struct rdma_region *src, uint32_t nsrc, uint32_t dst,
		     uint64_t dst_size, char *err, size_t errlen)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t se, de;

		if (c[i].dst != dst)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"rdma: copy %zu: remote %u in a batch "
					"to remote %u",
					i, c[i].dst, dst);
		if (c[i].src >= nsrc || src[c[i].src].size == 0)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"rdma: copy %zu: unknown local region %u",
					i, c[i].src);
		if (__builtin_add_overflow(c[i].src_off, c[i].len, &se) ||
		    __builtin_add_overflow(c[i].dst_off, c[i].len, &de) ||
		    se > src[c[i].src].size || de > dst_size)
			return kvw_errf(err, errlen, KVW_ERANGE,
					"rdma: copy %zu outside its region", i);
	}
	return 0;
}

/* Moves the cursor past a finished copy and any empty ones after it. */
static void skip_done(const struct xport_copy *c, size_t n,
		      struct rdma_cursor *cur)
{
	while (cur->i < n && cur->off >= c[cur->i].len) {
		cur->i++;
		cur->off = 0;
	}
}

/* Fills one WR's scatter list from the cursor on: copies whose remote
 * bytes follow each other, within max_sge entries (room: at most `room`)
 * and max_msg bytes. Returns the entries used (>= 1), *len the bytes. */
static uint32_t fill_wr(const struct rdma_chain_cfg *cfg,
			const struct xport_copy *c, size_t n,
			const struct rdma_region *src,
			struct rdma_cursor *cur, struct ibv_sge *sg,
			uint32_t room, uint64_t *len)
{
	uint32_t k = 0, max_sge = cfg->max_sge ? cfg->max_sge : 1;
	uint64_t max_msg = cfg->max_msg ? cfg->max_msg : 1;
	uint64_t wlen = 0, rnext = c[cur->i].dst_off + cur->off;

	for (;;) {
		const struct xport_copy *x = &c[cur->i];
		const struct rdma_region *r = &src[x->src];
		uint64_t take = x->len - cur->off;
		uint64_t la = r->addr + x->src_off + cur->off;

		if (take > max_msg - wlen)
			take = max_msg - wlen;
		if (k > 0 && sg[k - 1].lkey == r->key &&
		    sg[k - 1].addr + sg[k - 1].length == la)
			sg[k - 1].length += (uint32_t)take;
		else if (k < max_sge && k < room)
			sg[k++] = (struct ibv_sge){ la, (uint32_t)take, r->key };
		else
			break; /* never for the first piece: k == 0 */
		wlen += take;
		rnext += take;
		cur->off += take;
		skip_done(c, n, cur);
		/* Mid-copy: the WR is full (max_msg). Else join the next copy
		 * only where its remote bytes follow on. */
		if (cur->off != 0 || cur->i == n || wlen == max_msg ||
		    c[cur->i].dst != x->dst || c[cur->i].dst_off != rnext)
			break;
	}
	*len = wlen;
	return k;
}

uint32_t rdma_chain_build(const struct rdma_chain_cfg *cfg,
			  const struct xport_copy *c, size_t n,
			  const struct rdma_region *src,
			  const struct rdma_region *dst,
			  struct rdma_cursor *cur, uint32_t max_wr,
			  uint64_t first_id, uint32_t imm,
			  struct rdma_chain *ch)
{
	uint32_t every = cfg->signal_every ? cfg->signal_every : 1;
	uint32_t lim = max_wr < ch->cap_wr ? max_wr : ch->cap_wr;
	uint32_t nwr = 0, nsge = 0;

	ch->nwr = 0;
	skip_done(c, n, cur);
	while (cur->i < n && nwr < lim && nsge < ch->cap_sge) {
		struct ibv_send_wr *w = &ch->wr[nwr];
		uint64_t wlen;
		uint32_t k;

		const struct rdma_region *d = &dst[c[cur->i].dst];

		memset(w, 0, sizeof *w);
		w->wr.rdma.remote_addr = d->addr + c[cur->i].dst_off + cur->off;
		w->wr.rdma.rkey = d->key;
		k = fill_wr(cfg, c, n, src, cur, &ch->sge[nsge],
			    ch->cap_sge - nsge, &wlen);
		w->wr_id = first_id + nwr;
		w->sg_list = &ch->sge[nsge];
		w->num_sge = (int)k;
		w->opcode = IBV_WR_RDMA_WRITE;
		if (wlen <= cfg->max_inline)
			w->send_flags |= IBV_SEND_INLINE;
		if (++ch->since_signal >= every) {
			w->send_flags |= IBV_SEND_SIGNALED;
			ch->since_signal = 0;
		}
		if (nwr > 0)
			ch->wr[nwr - 1].next = w;
		nsge += k;
		nwr++;
	}
	if (nwr > 0) {
		struct ibv_send_wr *last = &ch->wr[nwr - 1];

		last->next = NULL;
		last->send_flags |= IBV_SEND_SIGNALED;
		ch->since_signal = 0;
		if (cur->i == n) {
			last->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
			last->imm_data = htonl(imm);
		}
	}
	ch->nwr = nwr;
	return nwr;
}
