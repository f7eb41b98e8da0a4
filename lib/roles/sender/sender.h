/*
 * sender.h - kv-sender's control process, the prefill side of kvwire. One
 * instance per prefill rank: it owns the rank's room table and KV pool,
 * registers the rank at the bootstrap, takes REGISTER / XFER_INFO / ABORT /
 * PING from decode peers and SEND_BEGIN / SEND_CHUNK / CLEAR from the
 * engine, plans each chunk against every destination's layout, hands the
 * copies to its worker processes (worker.h) as JOBs and reports STATUS to
 * decode when a room ends. Workers are forked and exec'd from cfg->exe in
 * worker mode; a dead worker fails exactly the rooms that had jobs on it and
 * is restarted. The semantics are in docs/ARCHITECTURE.md.
 *
 * Layer roles (lib/roles/): each process's loop and handlers: the bootstrap
 * (boot, boot_serve, and bootc its client), kv-sender's control (sender*),
 * its worker process (worker), kv-receiver (receiver*) and kv-heartbeat
 * (hbeat). Roles may include every layer below (base, wire, table, plan,
 * xport), never the engine API or the programs' cli/.
 */
#ifndef KVW_SENDER_H
#define KVW_SENDER_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"
#include "plan/shape.h"

#define SENDER_MAX_WORKERS 64u

struct sender_cfg {
	const char *listen;    /* peer ROUTER endpoint (decode connects here) */
	const char *engine;    /* engine ROUTER endpoint (ipc://, mode 0600) */
	const char *bootstrap; /* bootstrap endpoint; NULL: do not register */
	const char *table;     /* room table path */
	const char *pool;      /* KV pool (a name or a path, see pool.h) */
	const char *transport; /* xport_find's name */
	const char *exe;       /* program exec'd in worker mode ("/proc/self/exe") */
	const char *name;      /* --name passed on to workers; may be NULL */
	const char *log_level; /* --log-level passed on to workers; may be NULL */
	uint32_t workers;      /* 1 .. SENDER_MAX_WORKERS */
	struct kvw_topo topo;  /* prefill sizes */
	struct kvw_coord coord; /* this rank */
	struct shape shape;
	uint64_t bootstrap_timeout_ns; /* room deadline after insertion */
	uint64_t worker_stall_ns; /* a worker with jobs queued that answers
				   * none for this long is killed and
				   * replaced, its rooms failed (0: 30 s) */
};

struct sender; /* opaque */

/* Everything sender_open would refuse, decided without making anything:
 * flags, endpoints (ipc path lengths), the pool's name, the shape's layout
 * and the transport's availability on this machine. 0 and *pool_bytes (the
 * size of the pool it would make), KVW_EINVAL (bad config) or KVW_ENODEV
 * (transport not available), with the reason in err. */
int sender_check(const struct sender_cfg *cfg, uint64_t *pool_bytes,
		 char *err, size_t errlen);

/* Builds every piece of state in the order docs/ARCHITECTURE.md asks for:
 * layout, room table (a table left by a previous incarnation is reopened and its
 * live rooms failed), pool (a stale pool file is unlinked first), the
 * worker processes (each with its channel), then the peer and engine
 * sockets. cfg's strings are copied. Returns 0 with *out the caller's (free
 * with sender_close), or KVW_EINVAL (bad cfg), KVW_ESYS / KVW_ENOMEM /
 * KVW_EVERSION with the reason in err; *out is NULL on failure and
 * anything already built is undone (workers stopped, files kept). */
int sender_open(const struct sender_cfg *cfg, struct sender **out, char *err,
		size_t errlen);

/* Runs the poll loop until SIGTERM/SIGINT (proc_stopping) or a fatal
 * event. Writes READY to ready_fd (< 0: none) once every worker has said
 * hello. Returns 0 on a clean stop, KVW_EINVAL when the bootstrap refused
 * the registration (the program exits 100), KVW_ESYS when a socket or the
 * context died; err says why. */
int sender_run(struct sender *s, int ready_fd, char *err, size_t errlen);

/* Stops the workers (SIGTERM, then SIGKILL after about a second), closes
 * the sockets, the pool and the table (files stay). Accepts NULL, *s ==
 * NULL and half-built objects; sets *s = NULL. */
void sender_close(struct sender **s);

/* The unique rank of coordinate c in topology t (rankmap_unique):
 * (cp * pp_size + pp) * tp_size + tp. */
uint32_t sender_rank_of(const struct kvw_topo *t, const struct kvw_coord *c);

#endif
