/*
 * bench_hops.h - where a room's time goes, hop by hop (kv-bench --hops).
 * The decode's and the prefill's control processes record in their room
 * tables when each room entered each state (rtab_times); on one host every
 * process reads the same CLOCK_MONOTONIC, so with kv-bench's own moments
 * (RECV_BEGIN sent, the decode's Success seen) they split a room's latency
 * into the hops of its critical path. Read for rank 0 of each side when the
 * bench sees the room succeed, before it clears it.
 */
#ifndef KVBENCH_HOPS_H
#define KVBENCH_HOPS_H

#include <stdint.h>
#include <stdio.h>

#include "table/rtab.h"

/* The hops, in the order a room crosses them; their sum is the room's
 * latency (RECV_BEGIN sent to the decode's Success seen). */
enum bench_hop {
	HOP_RECV_BEGIN,  /* engine -> kv-receiver: RECV_BEGIN taken */
	HOP_RECEIVER,    /* kv-receiver: the prefill's ranks found, XFER_INFO
			  * sent (the decode room is Waiting) */
	HOP_XFER_INFO,   /* XFER_INFO -> kv-sender: the prefill room is
			  * Waiting (it had SEND_BEGIN already, or then) */
	HOP_DISPATCH,    /* the prefill engine sees WaitingForInput, sends
			  * its chunk; kv-sender hands the JOB to a worker
			  * (Transferring) */
	HOP_WORKER,      /* the worker: JOB in, copies (or batches through
			  * the sink and their ACKs), the room Success */
	HOP_STATUS,      /* STATUS(Success) worker -> kv-receiver */
	HOP_SEEN,        /* the decode engine sees Success in the table */
	BENCH_NHOPS
};

/* "recv-begin", "receiver", ... (names for output). */
const char *bench_hop_name(unsigned h);

/* The hops of room `room` (kv-bench's t_begin and t_done) from the decode
 * table dt and the prefill table pt into out[0..BENCH_NHOPS) in ns.
 * Returns 0, or -1 when a table no longer holds the room or a moment is
 * missing or out of order (not counted). */
int bench_hops_take(const struct rtab *dt, const struct rtab *pt,
		    uint64_t room, uint64_t t_begin, uint64_t t_done,
		    uint64_t out[BENCH_NHOPS]);

/* Prints p50 and p99 of each hop over the n samples in hop_ns (n rows of
 * BENCH_NHOPS) of the `of` rooms that succeeded (a room one of whose
 * moments was not written yet when the bench saw it succeed is not
 * counted), as lines of text, or as a JSON object member ("hops":{...})
 * when json. */
void bench_hops_print(FILE *f, const uint64_t *hop_ns, uint32_t n,
		      uint32_t of, int json);

#endif
