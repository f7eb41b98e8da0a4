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

/* The ops table a transport file exports. Every function reports detail into
 * the caller's err[errlen] (NUL-ended, truncated to fit) and returns 0 or a
 * negative KVW_E*. Callers normally go through the xport_* wrappers below;
 * the table is public so tools can list names and probe. An entry may be
 * NULL for a transport that is not implemented; the wrappers then answer
 * KVW_ENODEV. */
struct xport_ops {
	const char *name; /* "shm", "tcp", "rdma", "cuda" */

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

/* shm only: what a descriptor names, read and checked (magic, version,
 * lengths, a kvwire pool path) without opening anything, so a control
 * process can decide whether the decode may name that file (issue 14)
 * before a worker maps it. 0, or KVW_EINVAL / KVW_EVERSION with err. */
struct xport_shm_desc {
	char path[1024]; /* POOL_PATH_MAX + 1 */
	uint64_t size, dev, ino;
};
int xport_shm_desc_parse(const uint8_t *desc, size_t len,
			 struct xport_shm_desc *out, char *err, size_t errlen);

/* tcp only, decode side, before xport_register: listen on HOST[:PORT]
 * (numeric host; port 0 or none: a free one) with a fresh random secret;
 * the registration's descriptor then names them. 0, KVW_EINVAL (bad
 * address or not a tcp instance), KVW_EEXIST or KVW_ESYS. */
int xport_tcp_listen(struct xport *x, const char *hostport, char *err,
		     size_t errlen);
/* tcp only: the listening socket (still owned by x) and the secret, for
 * the sink processes that serve it. 0, KVW_EINVAL or KVW_ENOENT (not
 * listening). */
int xport_tcp_sink_info(const struct xport *x, int *listen_fd,
			uint8_t secret[16]);
/* tcp only: the group's 32-byte data key (base/keys.h), which every data
 * connection this instance dials proves it holds (tcp_auth.h). Without
 * it the registration's secret alone does. 0, or KVW_EINVAL (not tcp). */
int xport_tcp_set_group_key(struct xport *x, const uint8_t key[32]);

/* tcp only: "HOST:PORT" the registration listens on, into buf[len]; 0 or
 * KVW_ENOENT (not listening). */
int xport_tcp_address(const struct xport *x, char *buf, size_t len);

/* tcp only: batches sent again over re-dialled connections, summed over
 * the connections open now (0 for another transport). */
uint64_t xport_tcp_resent(const struct xport *x);

/* rdma only, decode side, before xport_register: starts the queue pair
 * exchange (lib/xport/rdma_serve.h) on HOST[:PORT] (numeric host; port 0
 * or none: a free one) with a fresh random secret; the registration then
 * allows remote writes and its descriptor names the listener. 0,
 * KVW_EINVAL (bad address or not an rdma instance), KVW_EEXIST or
 * KVW_ESYS. */
int xport_rdma_listen(struct xport *x, const char *hostport, char *err,
		      size_t errlen);
/* rdma only, decode side: makes registration id current with its pool's
 * GPU record (one stat; rdma_gpu.h). When the engine registered a GPU
 * pool, registered it again or went away since, the old regions are
 * deregistered, the new ones registered and the new descriptor (new rkeys,
 * flag GPU or none) written to desc[desccap] (*desclen): *changed 1, and
 * the caller sends it to every prefill peer again (REGISTER); a prefill
 * worker then connects a new queue pair for it. Else *changed 0 and desc
 * is untouched. An error (*changed 1) leaves no GPU region registered
 * until a later call succeeds: the pool must not be written meanwhile. */
int xport_rdma_refresh(struct xport *x, uint32_t id, uint8_t *desc,
		       size_t desccap, size_t *desclen, int *changed,
		       char *err, size_t errlen);
/* rdma only: "HOST:PORT (device D port P, GID index G)" of the exchange,
 * into buf[len]; 0 or KVW_ENOENT (not listening, or not rdma). */
int xport_rdma_address(const struct xport *x, char *buf, size_t len);
/* rdma only, decode side: what the exchange saw (each only grows, but
 * live). */
struct xport_rdma_stats {
	uint64_t conns;   /* queue pairs handed out */
	uint64_t refused; /* exchanges refused (secret, malformed, late, cap) */
	uint64_t batches; /* batch immediates received: batches landed */
	uint64_t errors;  /* queue pairs ended by a failed completion */
	uint64_t live;    /* queue pairs now */
};
/* 0, KVW_EINVAL (not rdma) or KVW_ENOENT (not listening). */
int xport_rdma_stats(const struct xport *x, struct xport_rdma_stats *st);
/* rdma only, prefill side: WRs of room still in flight on any queue pair
 * (0 for another transport: its copies land within write_batch or are
 * answered by wait). A room is quiescent on this instance at 0. */
uint64_t xport_rdma_room_busy(const struct xport *x, uint64_t room);

/* For a process that writes into peer pools over shm and must outlive a
 * peer truncating its pool mid-copy (the kv-sender worker): installs a
 * process-wide SIGBUS handler that turns a fault on a connected remote's
 * mapping during xport_write_batch into KVW_ERANGE for that batch; any
 * other SIGBUS still kills the process. Call once, before any batch.
 * Returns 0 or KVW_ESYS. */
int xport_shm_catch_sigbus(void);

#endif
