/*
 * sink.h - one kv-receiver sink process (tcp transport): it serves the
 * listening socket its receiver opened (inherited) and writes every batch
 * a prefill worker sends straight into this decode rank's pool
 * (xport/tcp_sink.h). A batch is written only while its room is live in
 * the receiver's room table: a room that is missing, terminal or armed
 * for an abort gets its batches read and discarded. Refusals are counted
 * as malformed in the table and logged at a bounded rate.
 */
#ifndef KVW_SINK_H
#define KVW_SINK_H

#include <stddef.h>
#include <stdint.h>

struct sink_cfg {
	uint32_t id;          /* K, for the log tag */
	int listen_fd;        /* inherited from kv-receiver */
	const char *table;    /* the receiver's room table */
	const char *pool;     /* this rank's KV pool (written) */
	uint8_t secret[16];   /* the registration's, from the environment */
};

/* Opens the table and the pool, then serves until SIGTERM or until its
 * receiver is gone (the parent dies: PR_SET_PDEATHSIG kills it). 0, or a
 * KVW_E* with the reason in err. */
int sink_run(const struct sink_cfg *cfg, char *err, size_t errlen);

#endif
