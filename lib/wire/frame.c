/*
 * frame.c - the frame codec of frame.h. Every body is described once, in
 * frame_bodies.def; this file builds from it the type table, the body
 * reader and the body writer. Decoding reads each body with a bounded
 * cursor (rd_*) whose first failure (short input, a string too long or
 * holding a NUL, a count over its cap) sticks and is reported by rd_end(),
 * which also refuses trailing bytes; the decoded struct then goes through
 * the same value checks (frame_msg_check, frame_check.c, built from the
 * same rows) that frame_encode() applies before it writes anything with
 * the mirror cursor (wr_*). Nothing here allocates: decoded arrays are
 * views into the caller's parts, encoded arrays are the caller's own
 * memory.
 */
#include "frame_impl.h"

#include <string.h>

/* Per type: name, part count (header included), and for types with a
 * part 2 its element size and cap. */
static const struct {
	const char *name;
	uint8_t nparts;
	uint8_t elem;
	uint8_t state; /* 1: an optional state part after part 2 */
	uint32_t cap;
} types[FRAME_TYPE_MAX + 1] = {
#define FRAME_EMPTY(T) [FRAME_##T] = { .name = #T, .nparts = 1 },
#define FRAME_BODY(T, member, tag) [FRAME_##T] = { .name = #T, .nparts = 2
#define FRAME_PAGES(f) + 1, .elem = 4, .cap = KVW_MAX_PAGES
#define FRAME_COPIES(f) + 1, .elem = FRAME_COPY_LEN, .cap = KVW_MAX_COPIES
#define FRAME_STATE(f) , .state = 1
#define FRAME_END(T) },
#include "frame_bodies.def"
};

/* One FRAME_EMPTY or FRAME_BODY row per type of enum frame_type (a type
 * named twice is a duplicate enumerator). */
enum {
#define FRAME_EMPTY(T) FRAME_ROW_##T,
#define FRAME_BODY(T, member, tag) FRAME_ROW_##T,
#include "frame_bodies.def"
	FRAME_NROWS
};
_Static_assert((int)FRAME_NROWS == (int)FRAME_TYPE_MAX, "frame_bodies.def: a row per type");

_Static_assert(KVW_MAX_FRAMES >= 3, "the largest type has 3 parts");
_Static_assert(KVW_MAX_STR <= UINT16_MAX, "string lengths are u16 on the wire");

const char *frame_type_str(unsigned type)
{
	return type >= 1 && type <= FRAME_TYPE_MAX ? types[type].name : "?";
}

unsigned frame_nparts(unsigned type)
{
	return type >= 1 && type <= FRAME_TYPE_MAX ? types[type].nparts : 0;
}

/* ---- reading cursor: the first failure sticks, later reads yield 0 ---- */

struct rd {
	const uint8_t *p;
	size_t len, off;
	const char *why, *what; /* first failure and the field it hit */
};

static void rd_fail(struct rd *c, const char *why, const char *what)
{
	if (!c->why) {
		c->why = why;
		c->what = what;
	}
}

/* Returns n bytes at the cursor and advances, or NULL when fewer are left
 * (or an earlier read failed). */
static const uint8_t *rd_bytes(struct rd *c, size_t n, const char *what)
{
	static const uint8_t none[1]; /* what an empty read points at */
	const uint8_t *q;

	if (c->why)
		return NULL;
	if (n == 0)
		return none;
	if (c->len - c->off < n) {
		rd_fail(c, "truncated", what);
		return NULL;
	}
	q = c->p + c->off;
	c->off += n;
	return q;
}

static uint8_t rd_u8(struct rd *c, const char *what)
{
	const uint8_t *q = rd_bytes(c, 1, what);

	return q ? q[0] : 0;
}

static uint16_t rd_u16(struct rd *c, const char *what)
{
	const uint8_t *q = rd_bytes(c, 2, what);

	return q ? (uint16_t)(q[0] | q[1] << 8) : 0;
}

static uint32_t rd_u32(struct rd *c, const char *what)
{
	const uint8_t *q = rd_bytes(c, 4, what);

	return q ? frame_le32(q) : 0;
}

static uint64_t rd_u64(struct rd *c, const char *what)
{
	const uint8_t *q = rd_bytes(c, 8, what);

	return q ? frame_le64(q) : 0;
}

/* A u16 length (<= KVW_MAX_STR) then that many bytes, none of them NUL,
 * copied into s and terminated. s is "" on failure. */
static void rd_str(struct rd *c, char s[FRAME_STR_SIZE], const char *what)
{
	uint16_t n = rd_u16(c, what);
	const uint8_t *q;

	s[0] = '\0';
	if (n > KVW_MAX_STR) {
		rd_fail(c, "string over KVW_MAX_STR", what);
		return;
	}
	q = rd_bytes(c, n, what);
	if (!q)
		return;
	if (memchr(q, 0, n)) {
		rd_fail(c, "NUL inside string", what);
		return;
	}
	memcpy(s, q, n);
	s[n] = '\0';
}

/* Reports the first failure, or trailing bytes, as "<TYPE> body: ...". */
static int rd_end(const struct rd *c, unsigned type, char *err, size_t errlen)
{
	if (c->why)
		return kvw_errf(err, errlen, KVW_EINVAL, "%s body: %s at %s",
				frame_type_str(type), c->why, c->what);
	if (c->off != c->len)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"%s body: %zu trailing bytes",
				frame_type_str(type), c->len - c->off);
	return 0;
}

/* A u32 count, refused (`why` at `capwhat`) over cap, then count elements
 * of elem bytes; *n is the count as read. */
static const uint8_t *rd_counted(struct rd *c, uint32_t *n, size_t elem,
				 uint32_t cap, const char *why,
				 const char *nwhat, const char *capwhat,
				 const char *what)
{
	*n = rd_u32(c, nwhat);
	if (*n > cap)
		rd_fail(c, why, capwhat);
	return rd_bytes(c, (size_t)*n * elem, what);
}

/* REGISTER's buffer list: checks each record's reserved bytes, which the
 * decoded struct does not carry (its view reads the other fields). */
static void rd_bufs_reserved(struct rd *c, struct frame_bufs v)
{
	for (uint32_t i = 0; v.p && i < v.n; i++) {
		const uint8_t *q = v.p + (size_t)i * FRAME_BUF_LEN + FRAME_BUF_RESERVED_AT;

		for (unsigned k = 0; k < FRAME_BUF_RESERVED; k++)
			if (q[k])
				rd_fail(c, "reserved field not zero", "bufs[].reserved");
	}
}

/* Reads the body of a type that has one into m->u, row by row. */
static void rd_body(struct rd *c, struct frame_msg *m)
{
	switch (m->hdr.type) {
#define FRAME_BODY(T, member, tag) case FRAME_##T: { struct tag *b = &m->u.member;
#define FRAME_U8(f, check, arg) b->f = rd_u8(c, #f);
#define FRAME_U32(f, check, arg) b->f = rd_u32(c, #f);
#define FRAME_I32(f, check, arg) b->f = (int32_t)rd_u32(c, #f);
#define FRAME_U64(f, check, arg) b->f = rd_u64(c, #f);
#define RD_U32(path, what) b->path = rd_u32(c, what);
#define FRAME_TOPO(f) FRAME_TOPO_U32S(RD_U32, f)
#define FRAME_COORD(f) FRAME_COORD_U32S(RD_U32, f)
#define FRAME_MODEL(f) FRAME_MODEL_U32S(RD_U32, f)
#define FRAME_STR(f) rd_str(c, b->f, #f);
#define FRAME_BYTES(f, cap)                                               \
	b->f.p = rd_counted(c, &b->f.len, 1, cap, "length over " #cap,    \
			    #f ".len", #f, #f);
#define FRAME_BUFS(f, cap)                                                \
	b->f.native = NULL;                                               \
	b->f.p = rd_counted(c, &b->f.n, FRAME_BUF_LEN, cap,               \
			    "count over " #cap, "n" #f, "n" #f, #f);      \
	rd_bufs_reserved(c, b->f);
#define FRAME_END(T) break; }
#include "frame_bodies.def"
#undef RD_U32
	}
}

/* ---- writing cursor: bounded by the buffer, the first overflow sticks ---- */

struct wr {
	uint8_t *p;
	size_t cap, off;
	const char *bad; /* first field that did not fit or was malformed */
};

static void wr_bytes(struct wr *c, const void *src, size_t n, const char *what)
{
	if (c->bad)
		return;
	if (c->cap - c->off < n) {
		c->bad = what;
		return;
	}
	if (n)
		memcpy(c->p + c->off, src, n);
	c->off += n;
}

/* v as `bytes` little-endian bytes at p. */
static void wr_le(uint8_t *p, uint64_t v, unsigned bytes)
{
	for (unsigned i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> 8 * i);
}

static void wr_uint(struct wr *c, uint64_t v, unsigned bytes, const char *what)
{
	uint8_t b[8];

	wr_le(b, v, bytes);
	wr_bytes(c, b, bytes, what);
}

static void wr_u8(struct wr *c, uint8_t v, const char *what) { wr_uint(c, v, 1, what); }
static void wr_u16(struct wr *c, uint16_t v, const char *what) { wr_uint(c, v, 2, what); }
static void wr_u32(struct wr *c, uint32_t v, const char *what) { wr_uint(c, v, 4, what); }
static void wr_u64(struct wr *c, uint64_t v, const char *what) { wr_uint(c, v, 8, what); }

/* s must be NUL-terminated within FRAME_STR_SIZE bytes. */
static void wr_str(struct wr *c, const char s[FRAME_STR_SIZE], const char *what)
{
	size_t n = strnlen(s, FRAME_STR_SIZE);

	if (n > KVW_MAX_STR) {
		if (!c->bad)
			c->bad = what;
		return;
	}
	wr_u16(c, (uint16_t)n, what);
	wr_bytes(c, s, n, what);
}

static uint64_t rd_le(const uint8_t *p, unsigned bytes)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < bytes; i++)
		v |= (uint64_t)p[i] << 8 * i;
	return v;
}

/* One buffer record (FRAME_BUF_FIELDS), reserved bytes zero. */
static void wr_buf(struct wr *c, struct kvw_buf b, const char *what)
{
	uint8_t r[FRAME_BUF_LEN] = { 0 };

#define WR_FIELD(bits, f, at) wr_le(r + (at), b.f, (bits) / 8);
	FRAME_BUF_FIELDS(WR_FIELD)
#undef WR_FIELD
	wr_bytes(c, r, sizeof r, what);
}

/* frame.h; a wire record is read field by field (FRAME_BUF_FIELDS). */
struct kvw_buf frame_bufs_get(struct frame_bufs v, uint32_t i)
{
	const uint8_t *q;
	struct kvw_buf b = { 0 };

	if (v.native)
		return v.native[i];
	q = v.p + FRAME_BUF_LEN * (size_t)i;
#define RD_FIELD(bits, f, at) b.f = rd_le(q + (at), (bits) / 8);
	FRAME_BUF_FIELDS(RD_FIELD)
#undef RD_FIELD
	return b;
}

/* Writes the body of a type that has one, row by row; m has passed
 * frame_msg_check(). */
static void wr_body(struct wr *c, const struct frame_msg *m)
{
	switch (m->hdr.type) {
#define FRAME_BODY(T, member, tag) case FRAME_##T: { const struct tag *b = &m->u.member;
#define FRAME_U8(f, check, arg) wr_u8(c, b->f, #f);
#define FRAME_U32(f, check, arg) wr_u32(c, b->f, #f);
#define FRAME_I32(f, check, arg) wr_u32(c, (uint32_t)b->f, #f);
#define FRAME_U64(f, check, arg) wr_u64(c, b->f, #f);
#define WR_U32(path, what) wr_u32(c, b->path, what);
#define FRAME_TOPO(f) FRAME_TOPO_U32S(WR_U32, f)
#define FRAME_COORD(f) FRAME_COORD_U32S(WR_U32, f)
#define FRAME_MODEL(f) FRAME_MODEL_U32S(WR_U32, f)
#define FRAME_STR(f) wr_str(c, b->f, #f);
#define FRAME_BYTES(f, cap)                       \
	wr_u32(c, b->f.len, #f ".len");           \
	wr_bytes(c, b->f.p, b->f.len, #f);
#define FRAME_BUFS(f, cap)                                \
	wr_u32(c, b->f.n, "n" #f);                        \
	for (uint32_t i = 0; i < b->f.n; i++)             \
		wr_buf(c, frame_bufs_get(b->f, i), #f);
#define FRAME_END(T) break; }
#include "frame_bodies.def"
#undef WR_U32
	}
}

/* Points m's part-2 view at p (n elements), for a type that has one. */
static void part2_set(struct frame_msg *m, const uint8_t *p, uint32_t n)
{
	switch (m->hdr.type) {
#define FRAME_BODY(T, member, tag) case FRAME_##T: { struct tag *b = &m->u.member; (void)b;
#define FRAME_PAGES(f) b->f.p = p; b->f.n = n;
#define FRAME_COPIES(f) b->f.p = p; b->f.n = n;
#define FRAME_END(T) break; }
#include "frame_bodies.def"
	}
}

/* m's part-2 array as a part (its elements: types[].elem bytes each). */
static struct frame_part part2_get(const struct frame_msg *m)
{
	struct frame_part part = { NULL, 0 };

	switch (m->hdr.type) {
#define FRAME_BODY(T, member, tag) case FRAME_##T: { const struct tag *b = &m->u.member; (void)b;
#define FRAME_PAGES(f) part.data = b->f.p; part.len = b->f.n;
#define FRAME_COPIES(f) part.data = b->f.p; part.len = b->f.n;
#define FRAME_END(T) break; }
#include "frame_bodies.def"
	}
	part.len *= types[m->hdr.type].elem;
	return part;
}

/* Points m's state view at p (len bytes), for a type that has one. */
static void state_set(struct frame_msg *m, const uint8_t *p, uint32_t len)
{
	switch (m->hdr.type) {
#define FRAME_BODY(T, member, tag) case FRAME_##T: { struct tag *b = &m->u.member; (void)b;
#define FRAME_STATE(f) b->f.p = p; b->f.len = len;
#define FRAME_END(T) break; }
#include "frame_bodies.def"
	}
}

/* m's state part (len 0: none, or a type without one). */
static struct frame_part state_get(const struct frame_msg *m)
{
	struct frame_part part = { NULL, 0 };

	switch (m->hdr.type) {
#define FRAME_BODY(T, member, tag) case FRAME_##T: { const struct tag *b = &m->u.member; (void)b;
#define FRAME_STATE(f) part.data = b->f.p; part.len = b->f.len;
#define FRAME_END(T) break; }
#include "frame_bodies.def"
	}
	return part;
}

uint32_t frame_state_lists(struct frame_bytes s)
{
	uint32_t k = 0;

	for (size_t at = 0; at + 4 <= s.len; k++)
		at += 4 + 4 * (size_t)frame_le32(s.p + at);
	return k;
}

uint32_t frame_state_get(struct frame_bytes s, uint32_t comp, uint32_t *rows)
{
	size_t at = 0;

	for (uint32_t k = 0; at + 4 <= s.len; k++) {
		uint32_t n = frame_le32(s.p + at);

		if (k == comp) {
			for (uint32_t i = 0; i < n; i++)
				rows[i] = frame_le32(s.p + at + 4 + 4 * (size_t)i);
			return n;
		}
		at += 4 + 4 * (size_t)n;
	}
	return 0;
}

size_t frame_state_pack(uint8_t *buf, size_t cap, uint32_t nlists,
			const uint32_t *n, const uint32_t *const *lists)
{
	size_t at = 0;

	if (nlists > KVW_MAX_STATE)
		return 0;
	for (uint32_t k = 0; k < nlists; k++) {
		if (n[k] > KVW_MAX_STATE_IDX || at + 4 + 4 * (size_t)n[k] > cap)
			return 0;
		for (uint32_t i = 0; i <= n[k]; i++) {
			uint32_t v = i ? lists[k][i - 1] : n[k];

			buf[at++] = (uint8_t)v;
			buf[at++] = (uint8_t)(v >> 8);
			buf[at++] = (uint8_t)(v >> 16);
			buf[at++] = (uint8_t)(v >> 24);
		}
	}
	return at;
}

/* ---- public entry points ---- */

void frame_msg_init(struct frame_msg *m, unsigned type, uint32_t src_rank,
		    uint64_t room, uint64_t epoch)
{
	memset(m, 0, sizeof *m);
	m->hdr.magic = FRAME_MAGIC;
	m->hdr.version = FRAME_VERSION;
	m->hdr.type = (uint8_t)type;
	m->hdr.src_rank = src_rank;
	m->hdr.room = room;
	m->hdr.epoch = epoch;
}

/* Checks the header fields every message shares. */
static int hdr_check(const struct frame_hdr *h, char *err, size_t errlen)
{
	if (h->magic != FRAME_MAGIC)
		return kvw_errf(err, errlen, KVW_EVERSION,
				"header: bad magic 0x%08x", h->magic);
	if (h->version != FRAME_VERSION)
		return kvw_errf(err, errlen, KVW_EVERSION,
				"header: version %u, want %u", h->version,
				FRAME_VERSION);
	if (h->type < 1 || h->type > FRAME_TYPE_MAX)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"header: unknown type %u", h->type);
	if (h->flags)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"header: unknown flags 0x%x", h->flags);
	/* Epoch 0 would skip every restart and stale check keyed on the
	 * sender's incarnation (issue 14); proc_epoch() never makes it, so
	 * only a forged or broken sender does: refused in both directions. */
	if (h->epoch == 0)
		return kvw_errf(err, errlen, KVW_EINVAL, "header: epoch 0");
	return 0;
}

int frame_hdr_decode(const struct frame_part *part0, struct frame_hdr *out,
		     char *err, size_t errlen)
{
	struct rd c = { part0 ? part0->data : NULL, part0 ? part0->len : 0, 0, NULL, NULL };
	uint32_t reserved;
	int rc;

	if (!part0 || part0->len != FRAME_HDR_LEN || !part0->data)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"header: %zu bytes, want %u",
				part0 ? part0->len : 0, FRAME_HDR_LEN);
	out->magic = rd_u32(&c, "magic");
	out->version = rd_u8(&c, "version");
	out->type = rd_u8(&c, "type");
	out->flags = rd_u16(&c, "flags");
	out->src_rank = rd_u32(&c, "src_rank");
	reserved = rd_u32(&c, "reserved");
	out->room = rd_u64(&c, "room");
	out->epoch = rd_u64(&c, "epoch");
	rc = hdr_check(out, err, errlen);
	if (rc == 0 && reserved)
		rc = kvw_errf(err, errlen, KVW_EINVAL,
			      "header: reserved word not zero");
	return rc;
}

int frame_decode(const struct frame_part *parts, size_t nparts,
		 struct frame_msg *out, char *err, size_t errlen)
{
	unsigned type, want;
	int rc;

	if (!parts || nparts < 1)
		return kvw_errf(err, errlen, KVW_EINVAL, "empty message");
	rc = frame_hdr_decode(&parts[0], &out->hdr, err, errlen);
	if (rc < 0)
		return rc;
	type = out->hdr.type;
	want = types[type].nparts;
	/* A state part is sent only when it holds something. */
	if (nparts != want && !(types[type].state && nparts == want + 1u &&
				parts[want].len))
		return kvw_errf(err, errlen, KVW_EINVAL,
				"%s: %zu parts, want %u", types[type].name,
				nparts, want);
	for (size_t i = 1; i < nparts; i++)
		if (parts[i].len && !parts[i].data)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"%s: part %zu has no data",
					types[type].name, i);
	if (want >= 2) {
		struct rd c = { parts[1].data, parts[1].len, 0, NULL, NULL };

		rd_body(&c, out);
		rc = rd_end(&c, type, err, errlen);
		if (rc < 0)
			return rc;
	}
	if (want >= 3) {
		size_t len = parts[2].len, elem = types[type].elem;

		if (len % elem)
			return kvw_errf(
			    err, errlen, KVW_EINVAL,
			    "%s: array of %zu bytes not a multiple of %zu",
			    types[type].name, len, elem);
		if (len / elem > types[type].cap)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"%s: %zu elements over cap %u",
					types[type].name, len / elem,
					types[type].cap);
		part2_set(out, parts[2].data, (uint32_t)(len / elem));
	}
	if (types[type].state) {
		if (nparts > want && parts[want].len > FRAME_STATE_MAX_BYTES)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"%s: state of %zu bytes over %u",
					types[type].name, parts[want].len,
					FRAME_STATE_MAX_BYTES);
		state_set(out, nparts > want ? parts[want].data : NULL,
			  nparts > want ? (uint32_t)parts[want].len : 0);
	}
	return frame_msg_check(out, err, errlen);
}

int frame_encode(const struct frame_msg *m, struct frame_out *out, char *err,
		 size_t errlen)
{
	const struct frame_hdr *h = &m->hdr;
	struct wr c = { out->hdr, FRAME_HDR_LEN, 0, NULL };
	unsigned n;
	int rc;

	rc = hdr_check(h, err, errlen);
	if (rc < 0)
		return rc;
	rc = frame_msg_check(m, err, errlen);
	if (rc < 0)
		return rc;
	wr_u32(&c, h->magic, "magic");
	wr_u8(&c, h->version, "version");
	wr_u8(&c, h->type, "type");
	wr_u16(&c, h->flags, "flags");
	wr_u32(&c, h->src_rank, "src_rank");
	wr_u32(&c, 0, "reserved");
	wr_u64(&c, h->room, "room");
	wr_u64(&c, h->epoch, "epoch");
	if (c.bad || c.off != FRAME_HDR_LEN)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"header: encoded %zu bytes", c.off);
	n = types[h->type].nparts;
	out->parts[0].data = out->hdr;
	out->parts[0].len = FRAME_HDR_LEN;
	if (n >= 2) {
		c = (struct wr){ out->body, sizeof out->body, 0, NULL };
		wr_body(&c, m);
		if (c.bad)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"%s: cannot encode %s",
					types[h->type].name, c.bad);
		out->parts[1].data = out->body;
		out->parts[1].len = c.off;
	}
	if (n >= 3)
		out->parts[2] = part2_get(m);
	if (state_get(m).len)
		out->parts[n++] = state_get(m);
	out->nparts = n;
	return 0;
}
