/*
 * rdma_serve.h - the decode side of the queue pair exchange (rdma_cm.h):
 * one thread, started with the decode's rdma instance (xport_rdma_listen),
 * that listens on a TCP port and gives every prefill connection that says
 * the secret a queue pair of its own on the instance's device and
 * protection domain (remote write allowed, so the peer can write the pools
 * this instance registers), with a ring of receives posted for the
 * immediates that end each batch. It counts the batches that land, reposts
 * each receive as it is used, and destroys a connection's queue pair when
 * the connection closes (the worker disconnected, exited or died) or sends
 * anything, or when the queue pair fails.
 *
 * Hostile input (a wrong secret, a malformed hello, a peer that does not
 * finish its hello in 5 s, more connections than the cap) closes that
 * connection, is counted and logged at a bounded rate; the thread keeps
 * serving the others. Nothing of the data path goes through it: the
 * prefill's RDMA WRITEs land in the pool without it.
 */
#ifndef KVW_RDMA_SERVE_H
#define KVW_RDMA_SERVE_H

#include <stddef.h>
#include <stdint.h>

#include "rdma_qp.h"

#define RDMA_SERVE_MAX_CONNS 1024u
#define RDMA_SERVE_RECV_DEPTH 512u /* receives posted per queue pair */

struct rdma_serve;

/* What the thread saw so far (each counter only grows). */
struct rdma_serve_counts {
	uint64_t conns;   /* exchanges answered with a queue pair */
	uint64_t refused; /* connections closed for a wrong secret, a bad or
			   * late hello, the cap, or no queue pair to spare */
	uint64_t batches; /* immediates received: batches landed */
	uint64_t errors;  /* queue pairs ended by a failed completion */
	uint64_t live;    /* queue pairs now */
};

/* Listens on hostport ("HOST[:PORT]", numeric host; port 0 or none: a free
 * one) with a fresh random secret and starts the thread on d (borrowed: it
 * must outlive the server). 0, KVW_EINVAL (bad address), KVW_ESYS or
 * KVW_ENOMEM. */
int rdma_serve_start(struct rdma_dev *d, const char *hostport,
		     struct rdma_serve **out, char *err, size_t errlen);

/* Stops the thread (within 200 ms), destroys every queue pair it made and
 * closes every connection; sets *s to NULL. Accepts NULL. */
void rdma_serve_stop(struct rdma_serve **s);

/* The numeric host, the port bound, the secret (16 bytes). */
const char *rdma_serve_host(const struct rdma_serve *s);
uint16_t rdma_serve_port(const struct rdma_serve *s);
const uint8_t *rdma_serve_secret(const struct rdma_serve *s);

void rdma_serve_counts(const struct rdma_serve *s,
		       struct rdma_serve_counts *out);

#endif
