/*
 * xport.h - transports: how a prefill worker moves planned copies into a
 * decode rank's KV pool. Each transport is an ops table in its own file
 * (xport_shm.c, xport_tcp.c, xport_rdma.c, xport_cuda.c) and is
 * found by name with xport_find. The life of a transport instance:
 *
 *   decode side:  xport_open -> xport_register(pool) -> descriptor bytes,
 *                 sent to the prefill side in REGISTER
 *   prefill side: xport_open -> xport_register(local pool) -> src id
 *                 xport_connect(descriptor) -> dst id (once per peer pool)
 *                 xport_write_batch(copies naming src and dst ids)
 *                 xport_wait -> every posted copy has landed
 *                 xport_close
 *
 * What only some transports need (a decode-side listener, a refresh on a
 * new engine epoch, a group key, counters, writer setup) is an optional
 * entry of the same table with a wrapper below that answers for the
 * others, so that nothing above this layer names a transport; the few
 * calls for tests and kv-bench that exist for one transport only are in
 * xport_shm.h, xport_tcp.h and xport_rdma.h.
 *
 * Registered regions and connected remotes are named by small ids, not
 * pointers, so a copy list can be checked entirely (every id, offset and
 * length against its region) before the first byte moves. A transport whose
 * hardware or runtime is missing answers KVW_ENODEV with a message holding
 * "not available" from probe and open; it never fails the build.
 * An instance is used by one thread at a time.
 *
 * Layer xport (lib/xport/): KV pools (pool) and the transports that copy
 * into them (xport*). It includes only base/; wire, table and plan never
 * include it, nor it them.
 */
#ifndef KVW_XPORT_H
#define KVW_XPORT_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

struct pool;
struct xport; /* opaque: one opened transport instance */

/* One copy of a batch: `len` bytes from offset src_off of the local region
 * registered as `src` to offset dst_off of the remote connected as `dst`.
 * The planner has already coalesced runs of pages; copies of one batch must
 * not overlap each other on the destination side. */
struct xport_copy {
	uint64_t src_off;
	uint64_t dst_off;
	uint64_t len;
	uint32_t src; /* id from xport_register */
	uint32_t dst; /* id from xport_connect */
};

/* A file of the peer's that a descriptor names (ops->desc_file). */
struct xport_desc_file {
	char path[1024]; /* POOL_PATH_MAX + 1 */
	uint64_t size, dev, ino;
};

/* The ops table a transport file exports. Every function reports detail into
 * the caller's err[errlen] (NUL-ended, truncated to fit) and returns 0 or a
 * negative KVW_E*. Callers normally go through the xport_* wrappers below;
 * the table is public so tools can list names and probe. An entry may be
 * NULL for a transport that is not implemented; the wrappers then answer
 * KVW_ENODEV. */
struct xport_ops {
	const char *name; /* "shm", "tcp", "rdma", "cuda" */
	/* 1: a registration holds the pool's own physical pages (rdma's
	 * memory region), so engine host memory laid over the pool later
	 * (pool.h's pool_refresh) is not what the transport reaches: a
	 * member refuses rooms while the engine has registered some. */
	int pins_pages;

	/* Says whether this transport can be used on this machine: 0, or
	 * KVW_ENODEV with "<name>: not available: <why>" in err. Cheap, no
	 * state kept; safe to call at any time. */
	int (*probe)(char *err, size_t errlen);

	/* Builds an instance. On success *out is the caller's; free with
	 * close. On failure *out is NULL. */
	int (*open)(struct xport **out, char *err, size_t errlen);

	/* Registers a local pool: the caller keeps owning `p`, which must stay
	 * open until close. Writes the region's id to *id and its descriptor
	 * (bytes a peer passes to connect, at most KVW_MAX_DESC) into
	 * desc[desccap], its length to *desclen. Nothing changes on error. */
	int (*reg)(struct xport *x, const struct pool *p, uint32_t *id,
		   uint8_t *desc, size_t desccap, size_t *desclen, char *err,
		   size_t errlen);

	/* Connects to a peer's region from its descriptor (untrusted bytes,
	 * fully checked; the transport copies what it keeps). Writes the
	 * remote's id to *id; the instance owns the mapping or connection
	 * until disconnect or close. A descriptor naming a region that is
	 * already connected gets the same id back (shm: same file), and one
	 * disconnect drops it. Nothing changes on error. */
	int (*connect)(struct xport *x, const uint8_t *desc, size_t desclen,
		       uint32_t *id, char *err, size_t errlen);

	/* Drops a remote (unmaps / disconnects); its id may be reused by a
	 * later connect. Unknown ids are ignored. */
	void (*disconnect)(struct xport *x, uint32_t id);

	/* Checks every copy (ids known; off + len without overflow and inside
	 * the registered source and the remote region) and only then starts
	 * them. Any bad copy: KVW_ERANGE (or KVW_EINVAL for an unknown id)
	 * and no byte moved. The copy array is only read during the call. */
	int (*write_batch)(struct xport *x, const struct xport_copy *c,
			   size_t n, char *err, size_t errlen);

	/* Returns 0 when every copy posted so far has landed at the peer,
	 * KVW_ETIMEDOUT after timeout_ms (< 0: no limit), or the first
	 * failure seen. */
	int (*wait)(struct xport *x, int timeout_ms, char *err, size_t errlen);

	/* Frees the instance, all its remotes and registrations (the pools
	 * themselves stay the caller's), sets *x to NULL. Accepts NULL and
	 * *x == NULL. */
	void (*close)(struct xport **x);

	/* Optional: the room the next batches belong to, for a transport
	 * whose writer at the decode checks the room before it writes (tcp).
	 * NULL: the transport does not need it. */
	void (*set_room)(struct xport *x, uint64_t room);
	/* Optional, both or neither, for a transport that reports landings
	 * per remote in the order the batches were written (tcp), so a
	 * writer can keep several jobs in flight and learn each one's
	 * outcome: mark is a position after the batches written to remote
	 * dst so far; wait_for returns once every batch to dst written
	 * before mark hi has landed or failed, answering for those written
	 * from mark lo on only (0, or the first failure among them, also
	 * one that write_batch reported already). Call it in the order of
	 * the marks. NULL: wait is the only way to learn of landings. */
	uint64_t (*mark)(struct xport *x, uint32_t dst);
	int (*wait_for)(struct xport *x, uint32_t dst, uint64_t lo,
			uint64_t hi, char *err, size_t errlen);

	/* The rest is optional too: what a role needs of some transports
	 * and not of others. A role asks the table (or the xport_* wrapper
	 * below, which answers generically for NULL) and never a name. */

	/* Decode side, before reg: serve HOST[:PORT] (numeric host; port 0
	 * or none: a free one) with a fresh random secret; the
	 * registration's descriptor then names the listener (tcp: the data
	 * port its sinks serve; rdma: the queue pair exchange). 0,
	 * KVW_EINVAL (bad address or another transport's instance),
	 * KVW_EEXIST (listening already) or KVW_ESYS. NULL: the decode
	 * serves nothing (shm, cuda: the writer maps the pool). */
	int (*listen)(struct xport *x, const char *hostport, char *err,
		      size_t errlen);
	/* What the listener is called in the decode's log ("data port"):
	 * set where listen is. */
	const char *listen_what;
	/* The listener's address ("HOST:PORT", maybe more) into buf[len]:
	 * 0, or KVW_ENOENT when not listening. */
	int (*address)(const struct xport *x, char *buf, size_t len);
	/* For a transport whose decode side is written by processes of its
	 * own that serve the listener (tcp's sinks): the listening socket
	 * (still owned by x) and the registration's secret. 0, KVW_EINVAL
	 * (another transport's instance) or KVW_ENOENT (not listening).
	 * NULL: the decode runs no such processes. */
	int (*sink_info)(const struct xport *x, int *listen_fd,
			 uint8_t secret[16]);
	/* Decode side, before each room's first message: makes registration
	 * id current with the engine's memory (a GPU pool the engine
	 * registered, registered again or dropped since: a new engine
	 * epoch). When it changed, the new descriptor goes to desc[desccap]
	 * (*desclen), *changed is 1 and the caller sends it to every peer
	 * again (REGISTER); else *changed is 0 and desc untouched. An error
	 * (*changed 1) means the pool must not be written until a later
	 * call succeeds. NULL: a registration never goes stale. */
	int (*refresh)(struct xport *x, uint32_t id, uint8_t *desc,
		       size_t desccap, size_t *desclen, int *changed,
		       char *err, size_t errlen);
	/* The line the decode logs when it stops the instance: what the
	 * transport's own listener saw ("<name>: stopping: ..."), into
	 * buf[len]. 0, or KVW_ENOENT with nothing to say. NULL: nothing. */
	int (*summary)(const struct xport *x, char *buf, size_t len);
	/* Prefill side: the group's 32-byte data key (base/keys.h), which
	 * every data connection this instance dials proves it holds. 0, or
	 * KVW_EINVAL. NULL: the transport dials no connection of its own. */
	int (*set_group_key)(struct xport *x, const uint8_t key[32]);
	/* Prefill side: the incarnation (the decode room's XFER_INFO token)
	 * the next batches carry, for a decode writer that discards a batch
	 * of another; set_room resets it to 0. NULL: not needed. */
	void (*set_incarnation)(struct xport *x, uint64_t inc);
	/* Prefill side: data connections re-dialled, batches sent again on
	 * them, and ACKs or batches that failed integrity, over the
	 * instance's life (only grow). NULL: zeros. */
	void (*counts)(const struct xport *x, uint64_t *redials,
		       uint64_t *resent, uint64_t *integrity);
	/* Prefill side, control process: for a transport whose writers map
	 * a file the peer's descriptor names (shm), that file as the
	 * descriptor states it, read and checked (magic, version, lengths, a
	 * kvwire pool path) without opening anything, so the control can
	 * decide whether the peer may name it (issue 14) before a worker
	 * maps it. 0, or KVW_EINVAL / KVW_EVERSION with err. NULL: the
	 * writers map no file the peer names. */
	int (*desc_file)(const uint8_t *desc, size_t len,
			 struct xport_desc_file *out, char *err,
			 size_t errlen);
	/* Prefill side, once per writer process before any batch: process-
	 * wide setup the transport needs (shm, cuda: a SIGBUS handler that
	 * turns a fault on a connected remote's mapping during write_batch
	 * into KVW_ERANGE for that batch, so a decode truncating its pool
	 * fails a job, not the worker). 0, or KVW_ESYS with errno. NULL:
	 * none. */
	int (*writer_setup)(void);
};

/* Returns the ops table named `name` ("shm", "tcp", "rdma", "cuda"), or NULL
 * for an unknown name. The table is static; never freed. */
const struct xport_ops *xport_find(const char *name);

/* Result of probing one transport. */
struct xport_avail {
	const char *name; /* static */
	int rc;           /* 0 usable, KVW_ENODEV not available */
	char msg[256];    /* "<name>: available" or the probe's message */
};

/* Probes the transport called name: 0 when it can be used here,
 * KVW_ENODEV with "<name>: not available: <why>" in err, KVW_EINVAL for an
 * unknown name. */
int xport_probe(const char *name, char *err, size_t errlen);

/* Probes every known transport in a fixed order, filling out[0..cap).
 * Returns how many transports are known (may exceed cap). */
size_t xport_probe_all(struct xport_avail *out, size_t cap);

/* Wrappers over the ops table, with the contracts stated there. xport_open
 * checks that `ops` is complete enough to run. */
int xport_open(const struct xport_ops *ops, struct xport **out, char *err,
	       size_t errlen);
const struct xport_ops *xport_ops_of(const struct xport *x);
int xport_register(struct xport *x, const struct pool *p, uint32_t *id,
		   uint8_t *desc, size_t desccap, size_t *desclen, char *err,
		   size_t errlen);
int xport_connect(struct xport *x, const uint8_t *desc, size_t desclen,
		  uint32_t *id, char *err, size_t errlen);
void xport_disconnect(struct xport *x, uint32_t id);
int xport_write_batch(struct xport *x, const struct xport_copy *c, size_t n,
		      char *err, size_t errlen);
int xport_wait(struct xport *x, int timeout_ms, char *err, size_t errlen);
void xport_close(struct xport **x);
/* Tags the next batches with their room (see ops->set_room); a no-op for
 * transports without one. */
void xport_set_room(struct xport *x, uint64_t room);
/* 1 when the transport answers for the batches between two marks
 * (ops->mark and ops->wait_for), else 0. */
int xport_pipelines(const struct xport *x);
/* ops->mark, or 0 for a transport without marks. */
uint64_t xport_mark(struct xport *x, uint32_t dst);
/* ops->wait_for; without marks, xport_wait with no time limit (every
 * batch of every remote). */
int xport_wait_for(struct xport *x, uint32_t dst, uint64_t lo, uint64_t hi,
		   char *err, size_t errlen);

/* The transport a member given none uses. */
#define XPORT_DEFAULT "shm"

/* 1 when the group runs --encrypt (KVW_TCP_ENCRYPT=1 in the environment,
 * set by the flag): an instance of a transport that can encrypt its
 * payloads asks every decode-side server for it from its open on, and a
 * server refuses connections without it. */
int xport_encrypt_env(void);

/* Wrappers over the optional entries of the ops table (each with the
 * contract stated there), answering for a transport without the entry as
 * its comment says, so that no caller needs to know which transport it
 * holds. */
/* ops->listen, or 0 (nothing to serve). */
int xport_listen(struct xport *x, const char *hostport, char *err,
		 size_t errlen);
/* ops->address, or KVW_ENOENT. */
int xport_address(const struct xport *x, char *buf, size_t len);
/* ops->sink_info, or KVW_EINVAL. */
int xport_sink_info(const struct xport *x, int *listen_fd,
		    uint8_t secret[16]);
/* ops->refresh, or 0 with *changed 0 (a registration never goes stale). */
int xport_refresh(struct xport *x, uint32_t id, uint8_t *desc,
		  size_t desccap, size_t *desclen, int *changed, char *err,
		  size_t errlen);
/* ops->summary, or KVW_ENOENT (nothing to say). */
int xport_summary(const struct xport *x, char *buf, size_t len);
/* ops->set_group_key, or KVW_EINVAL. */
int xport_set_group_key(struct xport *x, const uint8_t key[32]);
/* ops->set_incarnation, or nothing. */
void xport_set_incarnation(struct xport *x, uint64_t inc);
/* ops->counts, or zeros. */
void xport_counts(const struct xport *x, uint64_t *redials,
		  uint64_t *resent, uint64_t *integrity);
/* ops->writer_setup, or 0 (nothing to set up). */
int xport_writer_setup(const struct xport_ops *ops);

#endif
