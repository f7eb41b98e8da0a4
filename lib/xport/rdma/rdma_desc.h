/*
 * rdma_desc.h - the rdma transport's REGISTER descriptor: what a prefill
 * worker needs to write into a decode pool. Packed field by field,
 * little-endian (nothing is sent as a struct):
 *
 *    0 magic "KVRD" u32 | 4 version u16 (2) | 6 ib port u8 | 7 mtu u8
 *    8 lid u16 | 10 link layer u8 | 11 flags u8
 *   12 gid 16 bytes
 *   28 rkey u32 | 32 addr u64 | 40 size u64
 *   48 secret 16 bytes
 *   64 exchange port u16 | 66 host length u16 | 68 host bytes
 *   with flag GPU, after the host: segment count u16 (1..RDMA_DESC_SEG_MAX),
 *   then per segment len u64 | addr u64 | rkey u32 (20 bytes)
 *
 * flags says which memory the pool's regions are in: 0, host memory only
 * (the region below is all of it); RDMA_DESC_GPU, the pool is an engine's
 * GPU pool (gpool.h): segment i stands for pool bytes [sum of the lens
 * before it, + len) and lies in device memory at addr under rkey, and the
 * host region serves the bytes past the last segment (the AUX slots);
 * RDMA_DESC_DMABUF (only with GPU), the segments were registered through
 * a dmabuf (else through peer memory, nvidia-peermem). Any other bit is
 * refused: a descriptor of a newer kind is not half understood.
 *
 * addr, size and rkey name the decode pool's (host) memory region; ib port, lid,
 * gid, mtu and link layer its device's address; host:port the decode's QP
 * exchange listener (rdma_cm.h), which answers only a hello carrying the
 * secret. A descriptor of a pool that nobody listens for (a prefill
 * worker's own source pool) says port 0. The decoder trusts nothing: every
 * field is range-checked and the length must be exact.
 */
#ifndef KVW_RDMA_DESC_H
#define KVW_RDMA_DESC_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

#define RDMA_DESC_MAGIC 0x4452564Bu /* "KVRD" as bytes K V R D */
#define RDMA_DESC_VERSION 2u
#define RDMA_DESC_FIXED 68u /* bytes before the host */
#define RDMA_HOST_MAX 255u
#define RDMA_SECRET_LEN 16u
#define RDMA_DESC_GPU 0x01u    /* segments in device memory follow */
#define RDMA_DESC_DMABUF 0x02u /* ... registered through a dmabuf */
#define RDMA_DESC_FLAGS (RDMA_DESC_GPU | RDMA_DESC_DMABUF) /* known bits */
#define RDMA_DESC_SEG_LEN 20u
/* As many segments as fit KVW_MAX_DESC beside the longest host: 188. */
#define RDMA_DESC_SEG_MAX                                                   \
	((KVW_MAX_DESC - RDMA_DESC_FIXED - RDMA_HOST_MAX - 2u) /             \
	 RDMA_DESC_SEG_LEN)

/* One device-memory segment of a GPU pool (flag GPU). */
struct rdma_desc_seg {
	uint64_t len;  /* > 0 */
	uint64_t addr; /* != 0; addr + len does not overflow */
	uint32_t rkey;
};

struct rdma_desc {
	uint8_t ib_port;   /* 1.. */
	uint8_t mtu;       /* enum ibv_mtu: 1 (256) .. 5 (4096) */
	uint8_t link;      /* IBV_LINK_LAYER_INFINIBAND 1 or _ETHERNET 2 */
	uint16_t lid;
	uint8_t gid[16];
	uint32_t rkey;
	uint64_t addr;     /* the region's first byte, as registered */
	uint64_t size;     /* > 0; addr + size does not overflow */
	uint8_t secret[RDMA_SECRET_LEN];
	uint16_t port;     /* exchange listener; 0: none */
	char host[RDMA_HOST_MAX + 1]; /* numeric host, NUL-ended, 1..255 */
	uint8_t flags;     /* RDMA_DESC_GPU, RDMA_DESC_DMABUF */
	uint16_t nseg;     /* flag GPU: 1..RDMA_DESC_SEG_MAX, else 0; their
			    * lens add up to at most size */
	struct rdma_desc_seg seg[RDMA_DESC_SEG_MAX];
};

/* Writes d into out[cap], its length to *len. 0, or KVW_EINVAL (a field
 * out of range, a host that is empty, too long or holds a NUL... as the
 * decoder would refuse, or cap too small) with nothing written. */
int rdma_desc_encode(const struct rdma_desc *d, uint8_t *out, size_t cap,
		     size_t *len, char *err, size_t errlen);

/* Decodes untrusted bytes into *d. 0, KVW_EVERSION (not a version 2 rdma
 * descriptor) or KVW_EINVAL (truncated, extended, a field out of range, an
 * unknown flag, DMABUF without GPU, a segment table that is malformed),
 * err saying which; *d is unspecified on error. */
int rdma_desc_decode(const uint8_t *p, size_t len, struct rdma_desc *d,
		     char *err, size_t errlen);

#endif
