/*
 * rdma_pmap.c - pool offsets to registered regions (rdma_pmap.h).
 */
#include "rdma_pmap.h"

uint32_t rdma_pmap_at(const struct rdma_pmap *m, uint64_t off, uint64_t *rel,
		     uint64_t *run)
{
	uint32_t lo = 0, hi = m->nseg;
	const struct rdma_pseg *last = m->nseg ? &m->seg[m->nseg - 1] : NULL;

	if (!last || off >= last->start + last->r.size) {
		*rel = off;
		*run = m->host.size - off;
		return m->base;
	}
	/* The last segment starting at or before off (segment 0 starts at 0). */
	while (hi - lo > 1) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (m->seg[mid].start <= off)
			lo = mid;
		else
			hi = mid;
	}
	*rel = off - m->seg[lo].start;
	*run = m->seg[lo].r.size - *rel;
	return m->base + 1 + lo;
}

size_t rdma_pmap_split(const struct xport_copy *c, size_t n,
		      const struct rdma_pmap *src, const struct rdma_pmap *dst,
		      struct xport_copy *out, size_t cap)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++) {
		const struct rdma_pmap *sm = &src[c[i].src];

		for (uint64_t done = 0; done < c[i].len;) {
			uint64_t srel, srun, drel, drun, len = c[i].len - done;
			uint32_t si = rdma_pmap_at(sm, c[i].src_off + done, &srel,
						  &srun);
			uint32_t di = rdma_pmap_at(dst, c[i].dst_off + done, &drel,
						  &drun);

			len = len < srun ? len : srun;
			len = len < drun ? len : drun;
			if (len == 0)
				break; /* unchecked input: never loop */
			if (k < cap)
				out[k] = (struct xport_copy){ srel, drel, len,
							      si, di };
			k++;
			done += len;
		}
	}
	return k;
}
