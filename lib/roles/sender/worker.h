/*
 * worker.h - one kv-sender worker process: a channel (lib/wire/chan.h, a
 * socketpair inherited from the control) to the control; it says hello
 * (PONG, src_rank K), then runs
 * one JOB at a time: re-check the room (same generation, Waiting or
 * Transferring) before and between batches of copies, connect the decode
 * pool named by the JOB's descriptor once and keep it mapped, write the
 * copies through the transport, count bytes, give back the outstanding
 * count (always, even for a dropped job) and answer JOB_DONE.
 */
#ifndef KVW_WORKER_H
#define KVW_WORKER_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

struct worker_cfg {
	uint32_t id;           /* K: the hello's src_rank */
	int job_fd;            /* its end of the channel to the control */
	const char *table;     /* the control's room table */
	const char *pool;      /* this rank's KV pool (source of copies) */
	const char *transport; /* xport_find's name */
};

/* Copies per batch between two room re-checks. */
#define WORKER_BATCH 256u

/* TEST ONLY: the environment variable KVW_TEST_COPY_DELAY_US=N (read by
 * each worker at start) makes every batch wait N microseconds between its
 * room re-check and its write, so tests can abort copies in flight;
 * KVW_TEST_STATUS_DELAY_US=N, a room's final job between its Success in
 * the table and its STATUS to the decode, so tests can kill it there
 * (either may be "stop": lib/base/proc.h). */

/* Runs the worker until SIGTERM (proc_stopping) or the channel ends.
 * Returns 0 on a clean stop; KVW_ENOENT / KVW_EVERSION / KVW_ESYS /
 * KVW_ENODEV when its state cannot be built (table, pool, transport,
 * socket), with err saying why. */
int worker_run(const struct worker_cfg *cfg, char *err, size_t errlen);

#endif
