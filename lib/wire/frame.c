/*
 * frame.c - the frame codec of frame.h. Decoding reads each body with a
 * bounded cursor (rd_*) whose first failure (short input, a string too
 * long or holding a NUL, a count over its cap) sticks and is reported by
 * rd_end(), which also refuses trailing bytes; the decoded struct then goes
 * through the same value checks (frame_msg_check, frame_check.c) that
 * frame_encode() applies before it writes anything with the mirror cursor
 * (wr_*). Nothing here allocates: decoded arrays are views into the
 * caller's parts, encoded arrays are the caller's own memory.
 */
#include "frame_impl.h"

#include <string.h>

/* Per type: name, part count (header included), and for types with a
 * part 2 its element size and cap. */
static const struct {
	const char *name;
	uint8_t nparts;
	uint8_t elem;
	uint32_t cap;
} types[FRAME_TYPE_MAX + 1] = {
	[FRAME_BOOT_REGISTER] = { "BOOT_REGISTER", 2, 0, 0 },
	[FRAME_BOOT_LOOKUP] = { "BOOT_LOOKUP", 2, 0, 0 },
	[FRAME_BOOT_REPLY] = { "BOOT_REPLY", 2, 0, 0 },
	[FRAME_PING] = { "PING", 1, 0, 0 },
	[FRAME_PONG] = { "PONG", 1, 0, 0 },
	[FRAME_REGISTER] = { "REGISTER", 2, 0, 0 },
	[FRAME_XFER_INFO] = { "XFER_INFO", 3, 4, KVW_MAX_PAGES },
	[FRAME_ABORT] = { "ABORT", 2, 0, 0 },
	[FRAME_STATUS] = { "STATUS", 2, 0, 0 },
	[FRAME_ABORT_ACK] = { "ABORT_ACK", 2, 0, 0 },
	[FRAME_SEND_BEGIN] = { "SEND_BEGIN", 2, 0, 0 },
	[FRAME_SEND_CHUNK] = { "SEND_CHUNK", 3, 4, KVW_MAX_PAGES },
	[FRAME_RECV_BEGIN] = { "RECV_BEGIN", 3, 4, KVW_MAX_PAGES },
	[FRAME_RECV_ABORT] = { "RECV_ABORT", 1, 0, 0 },
	[FRAME_CLEAR] = { "CLEAR", 1, 0, 0 },
	[FRAME_JOB] = { "JOB", 3, FRAME_COPY_LEN, KVW_MAX_COPIES },
	[FRAME_JOB_DONE] = { "JOB_DONE", 2, 0, 0 },
};

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

static void rd_topo(struct rd *c, struct kvw_topo *t)
{
	t->tp = rd_u32(c, "topo.tp");
	t->pp = rd_u32(c, "topo.pp");
	t->cp = rd_u32(c, "topo.cp");
	t->dp = rd_u32(c, "topo.dp");
}

static void rd_coord(struct rd *c, struct kvw_coord *x)
{
	x->tp = rd_u32(c, "coord.tp");
	x->pp = rd_u32(c, "coord.pp");
	x->cp = rd_u32(c, "coord.cp");
	x->dp = rd_u32(c, "coord.dp");
}

static void rd_model(struct rd *c, struct kvw_model *m)
{
	m->page_tokens = rd_u32(c, "model.page_tokens");
	m->dtype = rd_u32(c, "model.dtype");
	m->total_kv_heads = rd_u32(c, "model.total_kv_heads");
	m->rank_kv_heads = rd_u32(c, "model.rank_kv_heads");
	m->head_bytes = rd_u32(c, "model.head_bytes");
	m->flags = rd_u32(c, "model.flags");
}

/* REGISTER's tail: descriptor, model, buffer list. Checks each count
 * against its cap before taking the bytes it announces, and each buffer's
 * reserved field (which the decoded struct does not carry). */
static void rd_register_tail(struct rd *c, struct frame_register *r)
{
	uint32_t n = rd_u32(c, "desc.len");

	if (n > KVW_MAX_DESC)
		rd_fail(c, "length over KVW_MAX_DESC", "desc");
	r->desc.len = n;
	r->desc.p = rd_bytes(c, n, "desc");
	rd_model(c, &r->model);
	n = rd_u32(c, "nbufs");
	if (n > KVW_MAX_BUFFERS)
		rd_fail(c, "count over KVW_MAX_BUFFERS", "nbufs");
	r->bufs.native = NULL;
	r->bufs.n = n;
	r->bufs.p = rd_bytes(c, (size_t)n * FRAME_BUF_LEN, "bufs");
	for (uint32_t i = 0; r->bufs.p && i < n; i++) {
		const uint8_t *q = r->bufs.p + (size_t)i * FRAME_BUF_LEN;

		if (q[6] || q[7])
			rd_fail(c, "reserved field not zero", "bufs[].reserved");
	}
}

/* Reads the body of a type that has one into m->u. */
static void rd_body(struct rd *c, struct frame_msg *m)
{
	switch (m->hdr.type) {
	case FRAME_BOOT_REGISTER: {
		struct frame_boot_register *b = &m->u.boot_register;

		rd_topo(c, &b->topo);
		rd_coord(c, &b->coord);
		rd_str(c, b->endpoint, "endpoint");
		rd_model(c, &b->model);
		b->layer_first = rd_u32(c, "layer_first");
		b->layer_count = rd_u32(c, "layer_count");
		break;
	}
	case FRAME_BOOT_LOOKUP:
		rd_coord(c, &m->u.boot_lookup.want);
		rd_model(c, &m->u.boot_lookup.model);
		break;
	case FRAME_BOOT_REPLY: {
		struct frame_boot_reply *b = &m->u.boot_reply;

		b->status = rd_u32(c, "status");
		rd_topo(c, &b->topo);
		rd_coord(c, &b->coord);
		rd_str(c, b->endpoint, "endpoint");
		rd_model(c, &b->model);
		b->layer_first = rd_u32(c, "layer_first");
		b->layer_count = rd_u32(c, "layer_count");
		b->epoch = rd_u64(c, "epoch");
		rd_str(c, b->text, "text");
		break;
	}
	case FRAME_REGISTER:
		rd_coord(c, &m->u.reg.coord);
		rd_topo(c, &m->u.reg.topo);
		rd_str(c, m->u.reg.endpoint, "endpoint");
		rd_str(c, m->u.reg.transport, "transport");
		rd_register_tail(c, &m->u.reg);
		break;
	case FRAME_XFER_INFO:
		m->u.xfer_info.aux_slot = rd_u32(c, "aux_slot");
		m->u.xfer_info.required_dst_info_num = rd_u32(c, "required_dst_info_num");
		m->u.xfer_info.dummy = rd_u8(c, "dummy");
		m->u.xfer_info.token = rd_u64(c, "token");
		break;
	case FRAME_ABORT:
		m->u.abort.reason = rd_u32(c, "reason");
		m->u.abort.token = rd_u64(c, "token");
		break;
	case FRAME_ABORT_ACK:
		m->u.abort_ack.token = rd_u64(c, "token");
		break;
	case FRAME_STATUS:
		m->u.status.state = rd_u8(c, "state");
		m->u.status.reason = rd_u32(c, "reason");
		m->u.status.token = rd_u64(c, "token");
		rd_str(c, m->u.status.text, "text");
		break;
	case FRAME_SEND_BEGIN:
		m->u.send_begin.num_pages = rd_u32(c, "num_pages");
		m->u.send_begin.aux_slot = rd_u32(c, "aux_slot");
		break;
	case FRAME_SEND_CHUNK:
		m->u.send_chunk.is_last = rd_u8(c, "is_last");
		break;
	case FRAME_RECV_BEGIN:
		rd_str(c, m->u.recv_begin.bootstrap, "bootstrap");
		m->u.recv_begin.aux_slot = rd_u32(c, "aux_slot");
		m->u.recv_begin.prefill_dp_rank = rd_u32(c, "prefill_dp_rank");
		break;
	case FRAME_JOB:
		m->u.job.slot = rd_u32(c, "slot");
		m->u.job.generation = rd_u32(c, "generation");
		m->u.job.peer = rd_u32(c, "peer");
		m->u.job.flags = rd_u32(c, "flags");
		m->u.job.dst_index = rd_u32(c, "dst_index");
		m->u.job.desc.len = rd_u32(c, "desc.len");
		if (m->u.job.desc.len > KVW_MAX_DESC)
			rd_fail(c, "length over KVW_MAX_DESC", "desc");
		m->u.job.desc.p = rd_bytes(c, m->u.job.desc.len, "desc");
		m->u.job.pages = rd_u32(c, "pages");
		m->u.job.token = rd_u64(c, "token");
		rd_str(c, m->u.job.reply, "reply");
		break;
	case FRAME_JOB_DONE:
		m->u.job_done.slot = rd_u32(c, "slot");
		m->u.job_done.generation = rd_u32(c, "generation");
		m->u.job_done.result = (int32_t)rd_u32(c, "result");
		m->u.job_done.reason = rd_u32(c, "reason");
		m->u.job_done.bytes = rd_u64(c, "bytes");
		m->u.job_done.count = rd_u32(c, "count");
		break;
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

static void wr_u8(struct wr *c, uint8_t v, const char *what)
{
	wr_bytes(c, &v, 1, what);
}

static void wr_u16(struct wr *c, uint16_t v, const char *what)
{
	uint8_t b[2] = { (uint8_t)v, (uint8_t)(v >> 8) };

	wr_bytes(c, b, 2, what);
}

static void wr_u32(struct wr *c, uint32_t v, const char *what)
{
	uint8_t b[4] = { (uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16),
			 (uint8_t)(v >> 24) };

	wr_bytes(c, b, 4, what);
}

static void wr_u64(struct wr *c, uint64_t v, const char *what)
{
	wr_u32(c, (uint32_t)v, what);
	wr_u32(c, (uint32_t)(v >> 32), what);
}

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

static void wr_topo(struct wr *c, const struct kvw_topo *t)
{
	wr_u32(c, t->tp, "topo");
	wr_u32(c, t->pp, "topo");
	wr_u32(c, t->cp, "topo");
	wr_u32(c, t->dp, "topo");
}

static void wr_coord(struct wr *c, const struct kvw_coord *x)
{
	wr_u32(c, x->tp, "coord");
	wr_u32(c, x->pp, "coord");
	wr_u32(c, x->cp, "coord");
	wr_u32(c, x->dp, "coord");
}

static void wr_model(struct wr *c, const struct kvw_model *m)
{
	wr_u32(c, m->page_tokens, "model");
	wr_u32(c, m->dtype, "model");
	wr_u32(c, m->total_kv_heads, "model");
	wr_u32(c, m->rank_kv_heads, "model");
	wr_u32(c, m->head_bytes, "model");
	wr_u32(c, m->flags, "model");
}

/* Writes the body of a type that has one; m has passed frame_msg_check(). */
static void wr_body(struct wr *c, const struct frame_msg *m)
{
	switch (m->hdr.type) {
	case FRAME_BOOT_REGISTER: {
		const struct frame_boot_register *b = &m->u.boot_register;

		wr_topo(c, &b->topo);
		wr_coord(c, &b->coord);
		wr_str(c, b->endpoint, "endpoint");
		wr_model(c, &b->model);
		wr_u32(c, b->layer_first, "layer_first");
		wr_u32(c, b->layer_count, "layer_count");
		break;
	}
	case FRAME_BOOT_LOOKUP:
		wr_coord(c, &m->u.boot_lookup.want);
		wr_model(c, &m->u.boot_lookup.model);
		break;
	case FRAME_BOOT_REPLY: {
		const struct frame_boot_reply *b = &m->u.boot_reply;

		wr_u32(c, b->status, "status");
		wr_topo(c, &b->topo);
		wr_coord(c, &b->coord);
		wr_str(c, b->endpoint, "endpoint");
		wr_model(c, &b->model);
		wr_u32(c, b->layer_first, "layer_first");
		wr_u32(c, b->layer_count, "layer_count");
		wr_u64(c, b->epoch, "epoch");
		wr_str(c, b->text, "text");
		break;
	}
	case FRAME_REGISTER: {
		const struct frame_register *r = &m->u.reg;

		wr_coord(c, &r->coord);
		wr_topo(c, &r->topo);
		wr_str(c, r->endpoint, "endpoint");
		wr_str(c, r->transport, "transport");
		wr_u32(c, r->desc.len, "desc.len");
		wr_bytes(c, r->desc.p, r->desc.len, "desc");
		wr_model(c, &r->model);
		wr_u32(c, r->bufs.n, "nbufs");
		for (uint32_t i = 0; i < r->bufs.n; i++) {
			struct kvw_buf b = frame_bufs_get(r->bufs, i);

			wr_u32(c, b.layer_id, "bufs");
			wr_u8(c, b.role, "bufs");
			wr_u8(c, b.pool, "bufs");
			wr_u16(c, 0, "bufs");
			wr_u64(c, b.offset, "bufs");
			wr_u32(c, b.item_len, "bufs");
			wr_u32(c, b.pages, "bufs");
		}
		break;
	}
	case FRAME_XFER_INFO:
		wr_u32(c, m->u.xfer_info.aux_slot, "aux_slot");
		wr_u32(c, m->u.xfer_info.required_dst_info_num, "required_dst_info_num");
		wr_u8(c, m->u.xfer_info.dummy, "dummy");
		wr_u64(c, m->u.xfer_info.token, "token");
		break;
	case FRAME_ABORT:
		wr_u32(c, m->u.abort.reason, "reason");
		wr_u64(c, m->u.abort.token, "token");
		break;
	case FRAME_ABORT_ACK:
		wr_u64(c, m->u.abort_ack.token, "token");
		break;
	case FRAME_STATUS:
		wr_u8(c, m->u.status.state, "state");
		wr_u32(c, m->u.status.reason, "reason");
		wr_u64(c, m->u.status.token, "token");
		wr_str(c, m->u.status.text, "text");
		break;
	case FRAME_SEND_BEGIN:
		wr_u32(c, m->u.send_begin.num_pages, "num_pages");
		wr_u32(c, m->u.send_begin.aux_slot, "aux_slot");
		break;
	case FRAME_SEND_CHUNK:
		wr_u8(c, m->u.send_chunk.is_last, "is_last");
		break;
	case FRAME_RECV_BEGIN:
		wr_str(c, m->u.recv_begin.bootstrap, "bootstrap");
		wr_u32(c, m->u.recv_begin.aux_slot, "aux_slot");
		wr_u32(c, m->u.recv_begin.prefill_dp_rank, "prefill_dp_rank");
		break;
	case FRAME_JOB:
		wr_u32(c, m->u.job.slot, "slot");
		wr_u32(c, m->u.job.generation, "generation");
		wr_u32(c, m->u.job.peer, "peer");
		wr_u32(c, m->u.job.flags, "flags");
		wr_u32(c, m->u.job.dst_index, "dst_index");
		wr_u32(c, m->u.job.desc.len, "desc.len");
		wr_bytes(c, m->u.job.desc.p, m->u.job.desc.len, "desc");
		wr_u32(c, m->u.job.pages, "pages");
		wr_u64(c, m->u.job.token, "token");
		wr_str(c, m->u.job.reply, "reply");
		break;
	case FRAME_JOB_DONE:
		wr_u32(c, m->u.job_done.slot, "slot");
		wr_u32(c, m->u.job_done.generation, "generation");
		wr_u32(c, (uint32_t)m->u.job_done.result, "result");
		wr_u32(c, m->u.job_done.reason, "reason");
		wr_u64(c, m->u.job_done.bytes, "bytes");
		wr_u32(c, m->u.job_done.count, "count");
		break;
	}
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
	if (nparts != want)
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
		struct frame_u32s v;

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
		v.p = parts[2].data;
		v.n = (uint32_t)(len / elem);
		if (type == FRAME_JOB) {
			out->u.job.copies.p = v.p;
			out->u.job.copies.n = v.n;
		} else if (type == FRAME_XFER_INFO) {
			out->u.xfer_info.pages = v;
		} else if (type == FRAME_SEND_CHUNK) {
			out->u.send_chunk.pages = v;
		} else {
			out->u.recv_begin.pages = v;
		}
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
	if (n >= 3) {
		const struct frame_u32s *pages = frame_msg_pages(m);

		if (pages) {
			out->parts[2].data = pages->p;
			out->parts[2].len = (size_t)pages->n * 4;
		} else {
			out->parts[2].data = m->u.job.copies.p;
			out->parts[2].len = (size_t)m->u.job.copies.n * FRAME_COPY_LEN;
		}
	}
	out->nparts = n;
	return 0;
}
