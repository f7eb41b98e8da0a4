/*
 * xport_shm.h - what the shm transport (xport_shm.c) offers beyond its ops
 * table, for the transports built on it (xport_cuda.c) and its tests.
 * Roles never include it: they reach the same through the ops table
 * (desc_file, writer_setup in xport.h).
 */
#ifndef KVW_XPORT_SHM_H
#define KVW_XPORT_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "xport/xport.h"

/* ops->desc_file of shm: the pool file an shm descriptor names. */
int xport_shm_desc_parse(const uint8_t *desc, size_t len,
			 struct xport_desc_file *out, char *err,
			 size_t errlen);

/* ops->writer_setup of shm and cuda: installs a process-wide SIGBUS
 * handler that turns a fault on a connected remote's mapping during
 * xport_write_batch into KVW_ERANGE for that batch; any other SIGBUS
 * still kills the process. Call once, before any batch. Returns 0 or
 * KVW_ESYS. */
int xport_shm_catch_sigbus(void);

#endif
