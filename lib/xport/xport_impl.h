/*
 * xport_impl.h - private to the xport layer's files: the base every
 * transport's instance struct starts with, the ops tables the registry
 * lists, and the little-endian field helpers of descriptors and records.
 * Callers of xport.h never include it.
 */
#ifndef KVW_XPORT_IMPL_H
#define KVW_XPORT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "xport.h"
#include "base/le.h"

/* First member of every transport's instance struct; the transport sets ops
 * in its open and gets its own struct back with XPORT_SELF. */
struct xport {
	const struct xport_ops *ops;
};

#define XPORT_SELF(type, x) ((type *)(void *)((char *)(x) - offsetof(type, base)))

extern const struct xport_ops xport_shm_ops;
extern const struct xport_ops xport_tcp_ops;
extern const struct xport_ops xport_rdma_ops;
extern const struct xport_ops xport_cuda_ops;

#endif
