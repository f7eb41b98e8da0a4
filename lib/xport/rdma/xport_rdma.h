/*
 * xport_rdma.h - the rdma transport's calls (xport_rdma.c, xrdma_reg.c)
 * beyond its ops table, for tests and kv-bench that drive one rdma
 * instance by hand. Roles never include it: the ops table's optional
 * entries (xport.h) carry the same to them without the name.
 */
#ifndef KVW_XPORT_RDMA_H
#define KVW_XPORT_RDMA_H

#include <stddef.h>
#include <stdint.h>

#include "xport/xport.h"

/* ops->listen: decode side, before xport_register: starts the queue pair
 * exchange (rdma_serve.h) on HOST[:PORT] (numeric host; port 0 or none: a
 * free one) with a fresh random secret; the registration then allows
 * remote writes and its descriptor names the listener. 0, KVW_EINVAL (bad
 * address or not an rdma instance), KVW_EEXIST or KVW_ESYS. */
int xport_rdma_listen(struct xport *x, const char *hostport, char *err,
		      size_t errlen);
/* ops->refresh: decode side: makes registration id current with its
 * pool's GPU record (one stat; rdma_gpu.h). When the engine registered a
 * GPU pool, registered it again or went away since, the old regions are
 * deregistered, the new ones registered and the new descriptor (new rkeys,
 * flag GPU or none) written to desc[desccap] (*desclen): *changed 1, and
 * the caller sends it to every prefill peer again (REGISTER); a prefill
 * worker then connects a new queue pair for it. Else *changed 0 and desc
 * is untouched. An error (*changed 1) leaves no GPU region registered
 * until a later call succeeds: the pool must not be written meanwhile. */
int xport_rdma_refresh(struct xport *x, uint32_t id, uint8_t *desc,
		       size_t desccap, size_t *desclen, int *changed,
		       char *err, size_t errlen);
/* ops->address: "HOST:PORT (device D port P, GID index G)" of the
 * exchange, into buf[len]; 0 or KVW_ENOENT (not listening, or not rdma). */
int xport_rdma_address(const struct xport *x, char *buf, size_t len);
/* Decode side: what the exchange saw (each only grows, but live). */
struct xport_rdma_stats {
	uint64_t conns;   /* queue pairs handed out */
	uint64_t refused; /* exchanges refused (secret, malformed, late, cap) */
	uint64_t batches; /* batch immediates received: batches landed */
	uint64_t errors;  /* queue pairs ended by a failed completion */
	uint64_t live;    /* queue pairs now */
};
/* 0, KVW_EINVAL (not rdma) or KVW_ENOENT (not listening). ops->summary
 * is the decode's closing line made of them. */
int xport_rdma_stats(const struct xport *x, struct xport_rdma_stats *st);
/* Prefill side: WRs of room still in flight on any queue pair (0 for
 * another transport: its copies land within write_batch or are answered
 * by wait). A room is quiescent on this instance at 0. */
uint64_t xport_rdma_room_busy(const struct xport *x, uint64_t room);

#endif
