/*
 * rdma_gpu.h - an engine's GPU buffers registered with the HCA, so RDMA
 * WRITEs go straight to and from device memory. The pool's region (mem.h)
 * is mapped as the other transports map it, and each allocation its GPU
 * buffers lie in is registered once:
 *
 *   1. dmabuf: a dmabuf fd of the allocation from the CUDA driver
 *      (cuMemGetHandleForAddressRange, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
 *      found through the runtime's cudaGetDriverEntryPoint so that only
 *      libcudart is dlopened) and ibv_reg_dmabuf_mr (optional in
 *      libibverbs); the fd is closed once the region holds it;
 *   2. else peer memory: ibv_reg_mr on the device address, which works
 *      where nvidia-peermem (or nv_peer_mem) is loaded;
 *   3. else refused: KVW_ESYS with "rdma: GPU pool RECORD: unable to
 *      register device memory on DEV: dmabuf: WHY; peer memory: WHY".
 *
 * Every allocation of one record goes the same way (the first decides),
 * so a descriptor can say which (RDMA_DESC_DMABUF). A record is an engine
 * epoch: rgpu_stale tells, with one stat, that the registration no longer
 * matches the file (a new record, or the record gone), and rgpu_load
 * deregisters the old regions and registers the new ones. The caller
 * first waits until no WR uses the old regions.
 */
#ifndef KVW_RDMA_GPU_H
#define KVW_RDMA_GPU_H

#include <stddef.h>
#include <stdint.h>

/* Only pointers to these cross this header: declared, not included, so
 * the transport's include chain stays shallow (issue 31). */
struct rdma_dev;  /* rdma_qp.h */
struct rdma_pseg; /* rdma_pmap.h */

struct rgpu; /* opaque */

/* For the host pool at pool_path (size bytes); loads nothing. 0,
 * KVW_EINVAL (not a pool path) or KVW_ENOMEM; *out is the caller's
 * (rgpu_close). */
int rgpu_open(struct rgpu **out, const char *pool_path, uint64_t size,
	      char *err, size_t errlen);

/* 1: what is registered is not the record on disk (a new record, or the
 * record went away while one was registered); 0: it is. One stat. */
int rgpu_stale(const struct rgpu *g);

/* Deregisters what was registered, then registers the record on disk
 * with `access` (IBV_ACCESS_*) on dev: 0 with no segments when there is
 * no record (a host pool), 0 with rgpu_nseg segments, or the error (CUDA
 * not available, a malformed record, a handle that does not open, the
 * refusal above) with nothing registered. */
int rgpu_load(struct rgpu *g, const struct rdma_dev *dev, int access,
	      char *err, size_t errlen);

/* The registered buffers, in pool order (0 and NULL: none), each region
 * keyed by its lkey; rgpu_rkey is buffer i's rkey. */
uint32_t rgpu_nseg(const struct rgpu *g);
const struct rdma_pseg *rgpu_segs(const struct rgpu *g);
uint32_t rgpu_rkey(const struct rgpu *g, uint32_t i);
/* 1 when the regions came from dmabuf fds, 0 peer memory. */
int rgpu_dmabuf(const struct rgpu *g);

/* Deregisters, closes, frees; *g = NULL. Accepts NULL and *g == NULL. */
void rgpu_close(struct rgpu **g);

#endif
