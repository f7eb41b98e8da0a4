/*
 * kvw.h - the few constants every kvwire module shares: error codes,
 * process exit codes, room states and the caps that bound untrusted input.
 * Nothing here allocates or does I/O; it is included by every lib/ header.
 *
 * Layer base (lib/base/): what every layer needs and nothing kvwire-specific
 * beyond codes: the shared codes (kvw), the logger (log), process helpers
 * (proc) and the id map (idmap). It includes no other layer; every other
 * layer may include it.
 */
#ifndef KVW_H
#define KVW_H

#include <stddef.h>
#include <stdint.h>

/* What libkvwire.so exports (it is built -fvisibility=hidden): the engine
 * API of lib/api.h and the three names of codes below. The exported set is
 * pinned by tests/api.exports. */
#define KVW_API __attribute__((visibility("default")))

/* Library errors: functions return 0 (or a count) on success and a negative
 * KVW_E* on failure; detail goes into a caller-owned buffer. */
enum kvw_err {
	KVW_OK = 0,
	KVW_EINVAL = -1,   /* bad argument or malformed input */
	KVW_ENOMEM = -2,   /* allocation or table capacity exhausted */
	KVW_ESYS = -3,     /* a system call failed; errno is kept */
	KVW_ENOENT = -4,   /* no such room / peer / key */
	KVW_EEXIST = -5,   /* already present */
	KVW_ESTALE = -6,   /* generation or epoch no longer current */
	KVW_ESTATE = -7,   /* transition not in the legal table */
	KVW_EVERSION = -8, /* magic or version mismatch */
	KVW_ETIMEDOUT = -9,
	KVW_EAGAIN = -10,  /* try again later (not ready yet) */
	KVW_ENODEV = -11,  /* hardware or runtime for a transport is missing */
	KVW_ERANGE = -12,  /* index or length outside the registered region */
	KVW_EPEER = -13,   /* a peer or the whole group went away */
	KVW_ECORRUPT = -14, /* bytes arrived but do not match their checksum */
};

/* Returns a static string naming a KVW_E* code ("EINVAL", ...). */
KVW_API const char *kvw_strerror(int err);

/* kvwire-internal: begin. `make install` leaves the lines up to the end
 * mark out of the installed header: the library uses them but does not
 * export them (install.bats checks that the installed headers declare
 * only what libkvwire.so exports). */

/* The library's way to say why something failed: a one-line reason
 * formatted into err[errlen] when err is given (NULL or errlen 0: nothing
 * is written). kvw_errf returns rc, so a failure reads
 * `return kvw_errf(err, errlen, KVW_EINVAL, "...", ...);`. */
__attribute__((format(printf, 3, 4)))
void kvw_seterr(char *err, size_t errlen, const char *fmt, ...);
__attribute__((format(printf, 4, 5)))
int kvw_errf(char *err, size_t errlen, int rc, const char *fmt, ...);

/* kvwire-internal: end */

/* Process exit codes (s6 convention; the table is in README.md). */
enum kvw_exit {
	KVW_EXIT_OK = 0,
	KVW_EXIT_SKIP = 77,    /* no such device: transport unavailable */
	KVW_EXIT_TIMEOUT = 99,
	KVW_EXIT_USAGE = 100,
	KVW_EXIT_SYS = 111,
	KVW_EXIT_PEER = 102,   /* peer or supervisor gone */
};

/* Room states. The numbering of the first five is SGLang's KVPoll, so
 * engines map them 1:1; CLEARED is kvwire's tombstone. */
enum kvw_state {
	KVW_FAILED = 0,
	KVW_BOOTSTRAPPING = 1,
	KVW_WAITING = 2,       /* WaitingForInput */
	KVW_TRANSFERRING = 3,
	KVW_SUCCESS = 4,
	KVW_CLEARED = 5,
	KVW_NSTATES = 6,
};

/* Returns "Failed", "Bootstrapping", ... or "?" for an out-of-range value. */
KVW_API const char *kvw_state_str(unsigned state);

/* Why a room failed: carried in the room table and in STATUS frames. */
enum kvw_reason {
	KVW_R_NONE = 0,
	KVW_R_ABORTED = 1,      /* decode or engine asked for it */
	KVW_R_TIMEOUT = 2,      /* its deadline passed */
	KVW_R_PEER_DEAD = 3,    /* heartbeat misses */
	KVW_R_PEER_RESTART = 4, /* the peer came back with a new epoch */
	KVW_R_TRANSFER = 5,     /* a transport copy failed */
	KVW_R_BAD_INDEX = 6,    /* a page index outside the registered pool */
	KVW_R_LAYOUT = 7,       /* layouts do not pair */
	KVW_R_WORKER_DIED = 8,
	KVW_R_OWNER_RESTART = 9, /* the owning process restarted */
	KVW_R_BOOTSTRAP = 10,   /* lookup at the bootstrap failed */
	KVW_R_CLEARED = 11,     /* engine cleared a room that was still active */
	KVW_R_PAGES = 12,       /* page lists disagree: a destination page given
				 * twice, or decode and prefill page counts */
	KVW_R_INTEGRITY = 13,   /* bytes landed but failed their checksum */
	KVW_R_REFUSED = 14,     /* the prefill side refused the decode's
				 * registration: its pool is not one this
				 * group (or --cluster) may write */
	KVW_NREASONS = 15,
};

/* Returns a short static text for a reason ("aborted", "timeout", ...). */
KVW_API const char *kvw_reason_str(unsigned reason);

/* Parallel topology of one engine instance (sizes) and one rank's place in
 * it (coordinates). */
struct kvw_topo {
	uint32_t tp, pp, cp, dp;
};
struct kvw_coord {
	uint32_t tp, pp, cp, dp;
};

/* What a buffer of a KV layout holds. */
enum kvw_role {
	KVW_ROLE_K = 0,
	KVW_ROLE_V = 1,
	KVW_ROLE_KV = 2,    /* MLA: one latent buffer per layer */
	KVW_ROLE_AUX = 3,   /* per-request metadata, indexed by aux slot */
	KVW_ROLE_STATE = 4, /* a state component's rows (struct kvw_state_spec) */
	/* A block's K then its V in one page (vLLM's block-major per-layer
	 * tensor [blocks, 2, block_size, heads, head_dim]): a page holds
	 * 2 x page_tokens token slots, the K slots then the V slots. */
	KVW_ROLE_KVB = 5,
	KVW_NROLES = 6,
};

/* How a room names the rows of a state component (SGLang's state types:
 * the Mamba conv and SSM states, the SWA and DSA/NSA indexer pools). A
 * room's state index list per component goes with its last chunk, after
 * its KV and before its metadata rows. */
enum kvw_state_kind {
	KVW_STATE_SLOT = 0,  /* a row per request (Mamba): one index a side */
	KVW_STATE_PAGED = 1, /* rows by page (SWA, DSA/NSA indexer): the two
			      * lists may differ (a page of drift): the
			      * longer one is cut to the shorter, warned */
	KVW_STATE_EXACT = 2, /* rows by position (a ring): equal lists */
	KVW_NSTATE_KINDS = 3,
};

/* One state component: `rows` rows of `bytes` bytes in each of its
 * buffers: one per layer of a rank's PP stage, or, when `layers` is not 0,
 * `layers` buffers of its own split over the PP stages as the layers are
 * (an engine's state lives in layers of their own: SGLang's Mamba conv and
 * SSM tensors per Mamba layer, SWA K and V per SWA layer; shape_layers'
 * rule). Buffer i of it has role KVW_ROLE_STATE, layer id
 * KVW_STATE_LAYER(component, i). TP-sharded (a shape's bytes are the
 * whole row, each rank holds bytes / tp of it and sends its part rank to
 * rank) unless `replicated` (every rank of a TP group holds the whole
 * row: one prefill rank sends it to each decode rank). */
struct kvw_state_spec {
	uint32_t kind; /* enum kvw_state_kind */
	uint32_t rows;
	uint32_t bytes;
	uint32_t replicated; /* 0 or 1 */
	uint32_t layers;     /* 0: a buffer per model layer; else its own */
};
#define KVW_STATE_LAYER(c, layer) ((uint32_t)(c) << 16 | (uint32_t)(layer))
#define KVW_STATE_OF(layer_id) ((uint32_t)(layer_id) >> 16)

/* kvwire-internal: begin (not exported: see the first such mark). */

/* The share [*first, *first + *count) of n layers that PP stage r of pp
 * holds: an even split, the first (n % pp) stages one more (every side's
 * rule: a stage's layers, a state component's own layers). */
static inline void kvw_pp_share(uint32_t n, uint32_t pp, uint32_t r,
				uint32_t *first, uint32_t *count)
{
	uint32_t base, rem;

	pp = pp ? pp : 1;
	r = r < pp ? r : pp - 1;
	base = n / pp;
	rem = n % pp;
	*first = r * base + (r < rem ? r : rem);
	*count = base + (r < rem);
}

/* kvwire-internal: end */

#define KVW_MODEL_MLA 0x1u

/* Model shape that both sides must agree on or slice between. */
struct kvw_model {
	uint32_t page_tokens;    /* tokens per page */
	uint32_t dtype;          /* element type code; 0 = unspecified */
	uint32_t total_kv_heads; /* KV heads of the whole model */
	uint32_t rank_kv_heads;  /* KV heads held by this rank */
	uint32_t head_bytes;     /* bytes of one head of one token */
	uint32_t flags;          /* KVW_MODEL_* */
};

/* One buffer of a KV layout: `pages` items of `item_len` bytes each,
 * starting at `offset` in pool number `pool`. item_len is the bytes of one
 * page (for AUX: of one slot). Draft layers carry their own layer ids. */
struct kvw_buf {
	uint32_t layer_id;
	uint8_t role; /* enum kvw_role */
	uint8_t pool;
	uint64_t offset;
	uint32_t item_len;
	uint32_t pages;
};

/* Caps on anything an untrusted peer can state. Decoders reject larger
 * counts before touching memory. */
#define KVW_MAX_PAGES 65536u     /* page indices in one XFER_INFO / chunk */
#define KVW_MAX_BUFFERS 1024u    /* buffers in one layout */
#define KVW_MAX_AUX 32u          /* metadata (AUX) buffers in one layout */
#define KVW_MAX_STATE 8u         /* state components in one layout */
#define KVW_MAX_STATE_IDX 4096u  /* indices of one component in one room */
#define KVW_MAX_STR 255u         /* endpoint, name and text strings */
#define KVW_MAX_DESC 4096u       /* opaque transport descriptor bytes */
#define KVW_MAX_COPIES 262144u   /* planned copies in one JOB */
#define KVW_MAX_FRAMES 8u        /* frames in one message, header included */

#endif
