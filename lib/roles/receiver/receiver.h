/*
 * receiver.h - kv-receiver, the decode rank's control process. It owns the
 * decode room table and peer table and the rank's KV pool (registered with
 * a transport), takes RECV_BEGIN / RECV_ABORT / CLEAR from the decode
 * engine, resolves the prefill ranks of each room through the prefill
 * bootstrap without ever blocking on it (lookups are asynchronous requests
 * inside the one poll loop), REGISTERs once per prefill peer epoch, sends
 * XFER_INFO per room and turns the prefill ranks' STATUS / ABORT_ACK into
 * room states. docs/ARCHITECTURE.md is the contract; the state is
 * private to receiver*.c.
 */
#ifndef KVW_RECEIVER_H
#define KVW_RECEIVER_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"
#include "plan/shape.h"

/* Everything kv-receiver's flags say. Strings are copied by receiver_open. */
struct receiver_cfg {
	const char *listen;    /* peer ROUTER endpoint (STATUS, ABORT_ACK, PING) */
	const char *engine;    /* engine ROUTER endpoint, ipc://, bound 0600 */
	const char *table;     /* room table path */
	const char *pool;      /* pool name or path (pool_path_for) */
	const char *transport; /* xport_find's name; NULL: XPORT_DEFAULT */
	struct kvw_topo topo;  /* decode topology */
	struct kvw_coord rank; /* this decode rank */
	struct shape shape;
	uint64_t waiting_timeout_ns; /* room deadline after RECV_BEGIN */
	uint64_t forget_after_ns; /* a dead prefill peer no room names is
				   * forgotten after it (0: 60 s) */
	int all_cp_ranks; /* prefill CP > 1: pull each CP rank's page share
			   * from every CP rank (default: CP rank 0 only) */
	/* tcp transport: the data port's HOST[:PORT] (NULL: 127.0.0.1 and a
	 * free port), the sink processes serving it (0: 1) and the program
	 * exec'd in sink mode (NULL: /proc/self/exe). rdma transport: where
	 * the queue pair exchange listens (same default). */
	const char *data_addr;
	uint32_t sinks;
	const char *exe;
};

#define RECEIVER_MAX_SINKS 16u

struct receiver; /* opaque */

/* Everything receiver_open would refuse, decided without making anything:
 * endpoints (ipc path lengths), rank inside topology, the pool's name, the
 * shape's layout and the transport's availability. 0 and *pool_bytes,
 * KVW_EINVAL or KVW_ENODEV with the reason in err. */
int receiver_check(const struct receiver_cfg *cfg, uint64_t *pool_bytes,
		   char *err, size_t errlen);

/* Builds every piece of state in the contract's order: room table
 * (rtab_create, 65536 rooms, 1024 peers; a table left by a previous owner
 * has its non-terminal rooms failed), pool (a stale file is unlinked, then
 * pool_create sized by shape_layout with draft layers), transport
 * registration (descriptor kept for REGISTER), and only then the ZMQ
 * context and the two bound ROUTER sockets. Returns 0 and *out (free with
 * receiver_close), or a negative KVW_E* with the reason in err and *out
 * NULL: KVW_EINVAL for a config that cannot work (bad topology or rank,
 * unknown transport, shape error), KVW_ENODEV for an unavailable transport,
 * KVW_ESYS / KVW_ENOMEM / KVW_EVERSION for system failures. */
int receiver_open(const struct receiver_cfg *cfg, struct receiver **out,
		  char *err, size_t errlen);

/* Runs the poll loop until proc_stopping() (SIGTERM/SIGINT) or the ZMQ
 * context or a socket is gone. Returns 0 on a requested stop, KVW_ESYS
 * with the reason in err when a socket failed. */
int receiver_run(struct receiver *r, char *err, size_t errlen);

/* Closes sockets (LINGER 0), the context, the transport, the pool mapping
 * and the table mapping; frees everything. The table and pool files stay.
 * Accepts NULL, *r == NULL and a half-built receiver; sets *r = NULL. */
void receiver_close(struct receiver **r);

#endif
