/*
 * rdma_desc.c - encode and fully checked decode of the rdma descriptor
 * (layout in rdma_desc.h). Both run one check, so nothing is encoded that
 * the decoder would refuse.
 */
#include "rdma_desc.h"

#include <string.h>

#include "base/kvw.h"
#include "base/le.h"

/* The flags and the segment table: NULL or what is wrong. */
static const char *segs_bad(const struct rdma_desc *d)
{
	uint64_t sum = 0, end;

	if (d->flags & ~RDMA_DESC_FLAGS)
		return "unknown flags";
	if (!(d->flags & RDMA_DESC_GPU))
		return d->flags || d->nseg ? "DMABUF or segments without GPU"
					   : NULL;
	if (d->nseg == 0 || d->nseg > RDMA_DESC_SEG_MAX)
		return "GPU segment count not 1..188";
	for (uint16_t i = 0; i < d->nseg; i++) {
		const struct rdma_desc_seg *g = &d->seg[i];

		if (g->len == 0 || g->addr == 0 ||
		    __builtin_add_overflow(g->addr, g->len, &end))
			return "GPU segment empty, at 0 or past the end of the "
			       "address space";
		if (__builtin_add_overflow(sum, g->len, &sum) || sum > d->size)
			return "GPU segments longer than the pool";
	}
	return NULL;
}

/* The fields' rules, for both directions: NULL or what is wrong. */
static const char *fields_bad(const struct rdma_desc *d, size_t hl)
{
	uint64_t end;

	if (d->ib_port == 0)
		return "ib port 0";
	if (d->mtu < 1 || d->mtu > 5)
		return "mtu not 1..5 (256..4096 bytes)";
	if (d->link != 1 && d->link != 2)
		return "link layer neither InfiniBand (1) nor Ethernet (2)";
	if (d->size == 0)
		return "empty region";
	if (d->addr == 0 || __builtin_add_overflow(d->addr, d->size, &end))
		return "region address 0 or past the end of the address space";
	if (hl == 0 || hl > RDMA_HOST_MAX)
		return "host length not 1..255";
	if (memchr(d->host, '\0', hl))
		return "NUL in the host";
	return segs_bad(d);
}

/* Bytes of d encoded with a host of hl bytes. */
static size_t desc_len(const struct rdma_desc *d, size_t hl)
{
	size_t n = RDMA_DESC_FIXED + hl;

	return d->flags & RDMA_DESC_GPU ? n + 2 + d->nseg * RDMA_DESC_SEG_LEN
					: n;
}

int rdma_desc_encode(const struct rdma_desc *d, uint8_t *out, size_t cap,
		     size_t *len, char *err, size_t errlen)
{
	size_t hl = strnlen(d->host, sizeof d->host);
	const char *bad = fields_bad(d, hl);

	if (bad)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"rdma: descriptor: %s", bad);
	if (cap < desc_len(d, hl))
		return kvw_errf(err, errlen, KVW_EINVAL,
				"rdma: descriptor needs %zu bytes, room for %zu",
				desc_len(d, hl), cap);
	le_put(out, RDMA_DESC_MAGIC, 4);
	le_put(out + 4, RDMA_DESC_VERSION, 2);
	out[6] = d->ib_port;
	out[7] = d->mtu;
	le_put(out + 8, d->lid, 2);
	out[10] = d->link;
	out[11] = d->flags;
	memcpy(out + 12, d->gid, 16);
	le_put(out + 28, d->rkey, 4);
	le_put(out + 32, d->addr, 8);
	le_put(out + 40, d->size, 8);
	memcpy(out + 48, d->secret, RDMA_SECRET_LEN);
	le_put(out + 64, d->port, 2);
	le_put(out + 66, hl, 2);
	memcpy(out + RDMA_DESC_FIXED, d->host, hl);
	if (d->flags & RDMA_DESC_GPU) {
		uint8_t *q = out + RDMA_DESC_FIXED + hl;

		le_put(q, d->nseg, 2);
		for (uint16_t i = 0; i < d->nseg; i++, q += RDMA_DESC_SEG_LEN) {
			le_put(q + 2, d->seg[i].len, 8);
			le_put(q + 10, d->seg[i].addr, 8);
			le_put(q + 18, d->seg[i].rkey, 4);
		}
	}
	*len = desc_len(d, hl);
	return 0;
}

int rdma_desc_decode(const uint8_t *p, size_t len, struct rdma_desc *d,
		     char *err, size_t errlen)
{
	const char *bad;
	size_t hl;

	if (len < 6 || le_get(p, 4) != RDMA_DESC_MAGIC ||
	    le_get(p + 4, 2) != RDMA_DESC_VERSION)
		return kvw_errf(err, errlen, KVW_EVERSION,
				"rdma: not an rdma descriptor of version %u "
				"(%zu bytes)",
				RDMA_DESC_VERSION, len);
	if (len < RDMA_DESC_FIXED)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"rdma: descriptor truncated (%zu bytes)", len);
	hl = (size_t)le_get(p + 66, 2);
	if (p[11] & ~RDMA_DESC_FLAGS)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"rdma: descriptor flags 0x%02x (known: 0x%02x)",
				p[11], RDMA_DESC_FLAGS);
	memset(d, 0, sizeof *d);
	d->flags = p[11];
	if ((d->flags & RDMA_DESC_GPU) && len >= RDMA_DESC_FIXED + hl + 2) {
		const uint8_t *q = p + RDMA_DESC_FIXED + hl;
		size_t n = (size_t)le_get(q, 2);

		d->nseg = (uint16_t)(n <= RDMA_DESC_SEG_MAX ? n : 0);
		if (n > RDMA_DESC_SEG_MAX || len != desc_len(d, hl))
			return kvw_errf(err, errlen, KVW_EINVAL,
					"rdma: descriptor of %zu bytes says a "
					"host of %zu and %zu GPU segments",
					len, hl, n);
		for (size_t i = 0; i < n; i++, q += RDMA_DESC_SEG_LEN)
			d->seg[i] = (struct rdma_desc_seg){
				le_get(q + 2, 8), le_get(q + 10, 8),
				(uint32_t)le_get(q + 18, 4) };
	} else if (len != desc_len(d, hl)) {
		return kvw_errf(err, errlen, KVW_EINVAL,
				"rdma: descriptor of %zu bytes says a host of "
				"%zu%s",
				len, hl,
				d->flags & RDMA_DESC_GPU ? " and GPU segments"
							 : "");
	}
	d->ib_port = p[6];
	d->mtu = p[7];
	d->lid = (uint16_t)le_get(p + 8, 2);
	d->link = p[10];
	memcpy(d->gid, p + 12, 16);
	d->rkey = (uint32_t)le_get(p + 28, 4);
	d->addr = le_get(p + 32, 8);
	d->size = le_get(p + 40, 8);
	memcpy(d->secret, p + 48, RDMA_SECRET_LEN);
	d->port = (uint16_t)le_get(p + 64, 2);
	if (hl <= RDMA_HOST_MAX)
		memcpy(d->host, p + RDMA_DESC_FIXED, hl);
	bad = fields_bad(d, hl);
	if (bad)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"rdma: descriptor: %s", bad);
	return 0;
}
