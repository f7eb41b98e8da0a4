/*
 * frame.h - kvwire's one frame codec. A message is a list of parts (ZMQ
 * frames): part 0 is the fixed 32-byte header, part 1 (when the type has
 * one) the body, part 2 (when the type has one) a packed array that can be
 * big and is therefore never copied by the codec: encode points part 2 at
 * the caller's array, decode hands out views into the received part (the
 * one copy left on the way out is zmq_send's into its message; the worker
 * channel's sendmsg makes none). Everything is packed field by field
 * in little-endian order; no struct is ever put on the wire raw.
 * frame_decode() validates a whole received message (magic, version, type,
 * part count, exact lengths, caps, enum ranges) before anything acts on it;
 * frame_encode() refuses exactly what frame_decode() would refuse, so a
 * round trip is an identity. The codec is pure: no zmq, no allocation, no
 * logging; arrays in a decoded message are views into the received parts.
 *
 * Layer wire (lib/wire/): frames and how they travel: this codec, ZMQ
 * sockets (wire) and the outbound DEALER cache (dealers), the worker
 * channel (chan) and the poll set (wpoll). It includes only base/; table,
 * plan and xport never include it, nor it them.
 */
#ifndef KVW_FRAME_H
#define KVW_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

/* The array views below (frame_u32s_of, frame_copies_of) hand the caller's
 * native arrays to ZMQ as the wire bytes, which is only true when the host
 * stores integers little-endian. A big-endian port must pack instead. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "kvwire frame views assume a little-endian host (native array == wire form)"
#endif

/* Part 0, 32 bytes, little-endian:
 *   0 magic u32 ("KVW1")  4 version u8  5 type u8  6 flags u16
 *   8 src_rank u32  12 reserved u32 (must be 0)  16 room u64  24 epoch u64
 * The listed fields add up to 28 bytes; the reserved word makes the fixed
 * 32 and puts room and epoch on 8-byte offsets. */
#define FRAME_MAGIC 0x3157564Bu /* the bytes "KVW1" read as LE u32 */
#define FRAME_VERSION 1u
#define FRAME_HDR_LEN 32u

enum frame_type {
	FRAME_BOOT_REGISTER = 1,
	FRAME_BOOT_LOOKUP = 2,
	FRAME_BOOT_REPLY = 3,
	FRAME_PING = 4,
	FRAME_PONG = 5,
	FRAME_REGISTER = 6,
	FRAME_XFER_INFO = 7,
	FRAME_ABORT = 8,
	FRAME_STATUS = 9,
	FRAME_ABORT_ACK = 10,
	FRAME_SEND_BEGIN = 11,
	FRAME_SEND_CHUNK = 12,
	FRAME_RECV_BEGIN = 13,
	FRAME_RECV_ABORT = 14,
	FRAME_CLEAR = 15,
	FRAME_JOB = 16,
	FRAME_JOB_DONE = 17,
	FRAME_TYPE_MAX = 17, /* highest valid type */
};

/* Returns "BOOT_REGISTER", "PING", ... or "?" for an unknown type. */
const char *frame_type_str(unsigned type);

/* Returns how many parts (header included: 1, 2 or 3) a message of `type`
 * has, or 0 for an unknown type. */
unsigned frame_nparts(unsigned type);

/* BOOT_REPLY status codes. */
enum frame_boot_status {
	FRAME_BOOT_OK = 0,
	FRAME_BOOT_NOT_READY = 1, /* not every rank has registered yet */
	FRAME_BOOT_NOT_FOUND = 2, /* no rank at the wanted coordinates */
	FRAME_BOOT_REFUSED = 3,   /* model mismatch, auth, ...; see text */
	FRAME_BOOT_NSTATUS = 4,
};

/* BOOT_LOOKUP: a want coordinate with all four fields set to this asks for
 * the topology only. */
#define FRAME_LOOKUP_TOPO_ONLY 0xFFFFFFFFu

/* JOB flags. */
#define FRAME_JOB_LAST 0x1u /* the destination's last job */
/* With FRAME_JOB_LAST: the room's final job (the last job of its last real
 * destination; every other job of the room went to the same worker
 * before it). Once its copies are in and the room is still live, the
 * worker moves the room Transferring -> Success in the table itself and
 * sends STATUS(Success) to `reply` (that destination's return endpoint)
 * with the JOB header's src_rank and epoch; the control tells the other
 * real destinations on JOB_DONE. Never without FRAME_JOB_LAST. */
#define FRAME_JOB_FINAL 0x2u

/* The decoded header. frame_msg_init() fills magic and version. */
struct frame_hdr {
	uint32_t magic;
	uint8_t version;
	uint8_t type; /* enum frame_type */
	uint16_t flags; /* none defined yet: must be 0, others are refused */
	uint32_t src_rank;
	uint64_t room;
	uint64_t epoch; /* the sender process's incarnation; never 0 (refused) */
};

/* A view of one received or to-be-sent part. */
struct frame_part {
	const void *data;
	size_t len;
};

/* Little-endian loads with no alignment assumption. */
static inline uint32_t frame_le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}
static inline uint64_t frame_le64(const uint8_t *p)
{
	return (uint64_t)frame_le32(p) | (uint64_t)frame_le32(p + 4) << 32;
}

/* A packed little-endian u32 array (page indices): n elements at p. */
struct frame_u32s {
	const uint8_t *p;
	uint32_t n;
};
static inline uint32_t frame_u32s_get(struct frame_u32s v, uint32_t i)
{
	return frame_le32(v.p + 4 * (size_t)i);
}
/* Views a native array as its wire form (see the endianness note above);
 * the array must outlive the encoded message. */
static inline struct frame_u32s frame_u32s_of(const uint32_t *a, uint32_t n)
{
	struct frame_u32s v = { (const uint8_t *)a, n };
	return v;
}

/* One planned copy of a JOB: three u64, 24 bytes, no padding, so a native
 * array of them is the wire form on a little-endian host. */
struct frame_copy {
	uint64_t src_off;
	uint64_t dst_off;
	uint64_t len;
};
_Static_assert(sizeof(struct frame_copy) == 24, "frame_copy must have no padding");
#define FRAME_COPY_LEN 24u

struct frame_copies {
	const uint8_t *p;
	uint32_t n;
};
static inline struct frame_copy frame_copies_get(struct frame_copies v, uint32_t i)
{
	const uint8_t *q = v.p + FRAME_COPY_LEN * (size_t)i;
	struct frame_copy c = { frame_le64(q), frame_le64(q + 8), frame_le64(q + 16) };
	return c;
}
static inline struct frame_copies frame_copies_of(const struct frame_copy *a, uint32_t n)
{
	struct frame_copies v = { (const uint8_t *)a, n };
	return v;
}

/* REGISTER's buffer list. On the wire each buffer is 24 bytes: layer_id
 * u32, role u8, pool u8, reserved u16 (0), offset u64, item_len u32,
 * pages u32 (FRAME_BUF_FIELDS in frame_bodies.def). struct kvw_buf has
 * padding, so it is never the wire form: a decoded view points at wire
 * bytes (p), a view built for encoding points at native structs (native);
 * frame_bufs_get() reads either. */
#define FRAME_BUF_LEN 24u
struct frame_bufs {
	const uint8_t *p;              /* wire bytes, or NULL */
	const struct kvw_buf *native;  /* native array, or NULL */
	uint32_t n;
};
/* Buffer i of v (i < v.n), read from either form. */
struct kvw_buf frame_bufs_get(struct frame_bufs v, uint32_t i);
static inline struct frame_bufs frame_bufs_of(const struct kvw_buf *a, uint32_t n)
{
	struct frame_bufs v = { NULL, a, n };
	return v;
}

/* Opaque bytes (REGISTER's transport descriptor). */
struct frame_bytes {
	const uint8_t *p;
	uint32_t len;
};

/* A room's state index lists (issue 32 item 3): the `state` part of
 * RECV_BEGIN and XFER_INFO (the decode's rows) and of a last SEND_CHUNK
 * (the prefill's). Packed, per state component in the layout's order: a
 * u32 count n, then n u32 row indices, little-endian; a component the
 * room does not name is a count of 0. The codec refuses bytes that are
 * not whole lists, more than KVW_MAX_STATE lists or a list of more than
 * KVW_MAX_STATE_IDX rows. */
#define FRAME_STATE_MAX_BYTES (KVW_MAX_STATE * 4u * (1u + KVW_MAX_STATE_IDX))

/* The number of lists in a checked state part (0 for none). */
uint32_t frame_state_lists(struct frame_bytes s);

/* List `comp` of a checked state part: its count, its rows copied to
 * rows[0..count) (room for KVW_MAX_STATE_IDX); 0 past the last list. */
uint32_t frame_state_get(struct frame_bytes s, uint32_t comp, uint32_t *rows);

/* Packs lists[0..nlists) (n[i] rows each) into buf[cap]: the byte count,
 * or 0 when it does not fit or breaks a cap (nothing to send is 0 too). */
size_t frame_state_pack(uint8_t *buf, size_t cap, uint32_t nlists,
			const uint32_t *n, const uint32_t *const *lists);

/* Strings are NUL-terminated in the message and carry no NUL on the wire. */
#define FRAME_STR_SIZE (KVW_MAX_STR + 1)

struct frame_boot_register {
	struct kvw_topo topo;
	struct kvw_coord coord;
	char endpoint[FRAME_STR_SIZE]; /* the rank's control endpoint */
	struct kvw_model model;
	uint32_t layer_first, layer_count;
};

struct frame_boot_lookup {
	struct kvw_coord want; /* all FRAME_LOOKUP_TOPO_ONLY: topology only */
	struct kvw_model model; /* of the asking side */
};

struct frame_boot_reply {
	uint32_t status; /* enum frame_boot_status */
	struct kvw_topo topo;
	struct kvw_coord coord;
	char endpoint[FRAME_STR_SIZE];
	struct kvw_model model;
	uint32_t layer_first, layer_count;
	uint64_t epoch; /* the rank's epoch from its BOOT_REGISTER header: a
			 * decode learns a prefill rank's incarnation before
			 * it ever hears from it (0 when not a rank reply) */
	char text[FRAME_STR_SIZE]; /* error text, may be empty */
};

struct frame_register {
	struct kvw_coord coord; /* decode rank coordinates */
	struct kvw_topo topo;   /* decode topology */
	char endpoint[FRAME_STR_SIZE];  /* where STATUS / ABORT_ACK go */
	char transport[FRAME_STR_SIZE]; /* transport name */
	struct frame_bytes desc;        /* <= KVW_MAX_DESC, opaque */
	struct kvw_model model;
	struct frame_bufs bufs;         /* <= KVW_MAX_BUFFERS */
};

/* Incarnation tokens. A decode room draws a fresh non-zero token when the
 * engine begins it (RECV_BEGIN); its XFER_INFO carries it, the prefill keeps
 * it per destination and every message about that destination that can
 * outlive the room echoes it: the JOB that ends the room (its worker's
 * STATUS), and every STATUS. The decode acts on a STATUS only when the
 * token is its room's, so a late STATUS of an earlier incarnation of the
 * same room id (from a worker's socket, or a restarted control) changes
 * nothing in the next one. */
struct frame_xfer_info {
	uint32_t aux_slot;
	uint32_t required_dst_info_num; /* >= 1 */
	uint8_t dummy;                  /* 0 or 1 */
	uint64_t token;                 /* != 0: the decode room incarnation */
	/* Tokens the decode holds already (its prefix cache): the prefill
	 * engine sends only the pages after them (SGLang's
	 * decode_prefix_len; a whole number of pages, 0 = none). */
	uint32_t prefix_tokens;
	struct frame_u32s pages;        /* part 2: destination pages */
	struct frame_bytes state;       /* part 3: destination state rows */
};

/* ABORT: body reason u32, token u64 (12 bytes). The token names the
 * decode room incarnation that aborted (never 0; a fresh one per arming):
 * the prefill echoes it in ABORT_ACK, and the decode counts an ack only
 * when the token is the armed room's, so an ack of an older incarnation
 * of the same room id can never release a later one. */
struct frame_abort {
	uint32_t reason; /* enum kvw_reason */
	uint64_t token;  /* != 0 */
};

/* ABORT_ACK: body token u64 (8 bytes), the token of the ABORT it answers. */
struct frame_abort_ack {
	uint64_t token; /* != 0 */
};

/* STATUS: body state u8, reason u32, token u64, text. */
struct frame_status {
	uint8_t state;   /* KVW_SUCCESS or KVW_FAILED only */
	uint32_t reason; /* enum kvw_reason */
	uint64_t token;  /* != 0: the token of the XFER_INFO it answers */
	char text[FRAME_STR_SIZE];
};

struct frame_send_begin {
	uint32_t num_pages;
	uint32_t aux_slot;
};

struct frame_send_chunk {
	uint8_t is_last;         /* 0 or 1 */
	struct frame_u32s pages; /* part 2: source pages */
	struct frame_bytes state; /* part 3: source state rows (last chunk) */
};

struct frame_recv_begin {
	char bootstrap[FRAME_STR_SIZE]; /* bootstrap address */
	uint32_t aux_slot;
	uint32_t prefill_dp_rank;
	uint32_t prefix_tokens;  /* the decode's prefix (frame_xfer_info) */
	struct frame_u32s pages; /* part 2: destination pages */
	struct frame_bytes state; /* part 3: destination state rows */
};

struct frame_job {
	uint32_t slot;
	uint32_t generation;
	uint32_t peer;
	uint32_t flags;     /* FRAME_JOB_*; unknown bits are refused */
	uint32_t dst_index; /* which destination of the room */
	struct frame_bytes desc;    /* the destination's transport descriptor
				     * (from its REGISTER), <= KVW_MAX_DESC:
				     * makes the job self-contained */
	uint32_t pages;             /* added to the room's pages_done by the
				     * worker when the job succeeds (0: none) */
	uint64_t token;             /* != 0: the destination's XFER_INFO
				     * token (its STATUS echoes it) */
	char reply[FRAME_STR_SIZE]; /* FRAME_JOB_FINAL: where STATUS(Success)
				     * goes (the decode's endpoint); else "" */
	struct frame_copies copies; /* part 2, <= KVW_MAX_COPIES */
};

/* A worker answers its jobs in order. One JOB_DONE answers `count` of
 * them, the oldest unanswered first, ending with the job named by the
 * header's room and slot/generation here; count > 1 only when every one
 * of them succeeded (result 0), so a worker that ran a burst of jobs
 * wakes its control once for all of them. */
#define FRAME_JOB_DONE_MAX 1024u

struct frame_job_done {
	uint32_t slot;
	uint32_t generation;
	int32_t result;  /* 0 or a negative KVW_E* */
	uint32_t reason; /* enum kvw_reason */
	uint64_t bytes;  /* moved by all `count` jobs */
	uint32_t count;  /* 1..FRAME_JOB_DONE_MAX; 1 unless result is 0 */
};

/* One message, header plus the payload selected by hdr.type. Header-only
 * types (PING, PONG, RECV_ABORT, CLEAR) use no member. */
struct frame_msg {
	struct frame_hdr hdr;
	union {
		struct frame_boot_register boot_register;
		struct frame_boot_lookup boot_lookup;
		struct frame_boot_reply boot_reply;
		struct frame_register reg;
		struct frame_xfer_info xfer_info;
		struct frame_abort abort;
		struct frame_abort_ack abort_ack;
		struct frame_status status;
		struct frame_send_begin send_begin;
		struct frame_send_chunk send_chunk;
		struct frame_recv_begin recv_begin;
		struct frame_job job;
		struct frame_job_done job_done;
	} u;
};

/* Zeroes *m and fills its header (magic, version, type, src_rank, room,
 * epoch; flags 0). The caller then fills m->u for the type. */
void frame_msg_init(struct frame_msg *m, unsigned type, uint32_t src_rank,
		    uint64_t room, uint64_t epoch);

/* Decodes only part 0 (the header), checking its length, magic, version
 * and that the type is known; the rest of the message is not looked at.
 * For logging or routing a message before (or after) frame_decode refused
 * it. Returns 0, KVW_EVERSION (magic/version) or KVW_EINVAL; *out is
 * unspecified on error. */
int frame_hdr_decode(const struct frame_part *part0, struct frame_hdr *out,
		     char *err, size_t errlen);

/* Decodes and fully validates a received message of nparts parts: header
 * (length, magic, version, known type), exact part count for the type,
 * exact body length (short or trailing bytes fail), string lengths and
 * no NUL inside, caps (KVW_MAX_*), enum ranges, reserved fields zero,
 * array lengths a multiple of the element size. Returns 0 with *out
 * filled; its views point into parts[] and stay valid while the parts
 * live. Returns KVW_EVERSION for a wrong magic or version, KVW_EINVAL for
 * anything else, with a one-line reason in err (err may be NULL); *out is
 * then unspecified. Never allocates. */
int frame_decode(const struct frame_part *parts, size_t nparts,
		 struct frame_msg *out, char *err, size_t errlen);

/* The largest body any type can have (REGISTER with every cap reached). */
#define FRAME_BODY_MAX                                                      \
	(16u + 16u + 2u * (2u + KVW_MAX_STR) + 4u + KVW_MAX_DESC + 24u + 4u + \
	 KVW_MAX_BUFFERS * FRAME_BUF_LEN)

/* Caller-owned encoding space (about 29 KiB). After frame_encode() the
 * first nparts entries of parts[] are the message: part 0 points at hdr,
 * part 1 at body, part 2 straight at the caller's array (zero copy), so
 * neither *out nor that array may move or die until the parts are sent. */
struct frame_out {
	uint8_t hdr[FRAME_HDR_LEN];
	uint8_t body[FRAME_BODY_MAX];
	struct frame_part parts[KVW_MAX_FRAMES];
	size_t nparts;
};

/* Encodes *m into *out. Refuses (KVW_EVERSION for a wrong magic/version
 * in m->hdr, KVW_EINVAL otherwise, with a reason in err) everything that
 * frame_decode() would refuse, so decode(encode(m)) == m. *out is
 * unspecified on error. Never allocates. */
int frame_encode(const struct frame_msg *m, struct frame_out *out, char *err,
		 size_t errlen);

#endif
