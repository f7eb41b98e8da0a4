/*
 * frame_testkit.h - what the frame codec's tests share
 * (tests/unit/test_frame.c, tests/unit/test_frame_golden.c): received
 * messages copied into exact-size heap buffers, encode that must succeed,
 * and field-for-field equality of two messages (views compare by content,
 * never by pointer: a decoded view points into received parts). Include
 * after cmocka.h; static functions, once per program.
 */
#ifndef KVW_FRAME_TESTKIT_H
#define KVW_FRAME_TESTKIT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wire/frame.h"

/* A received message: each part in its own exact-size heap buffer that
 * starts at an odd address. */
struct wire {
	struct frame_part parts[KVW_MAX_FRAMES + 1];
	uint8_t *mem[KVW_MAX_FRAMES + 1];
	size_t n;
};

/* Copies src[0..n) into w, giving part `which` the length newlen (cut,
 * or padded with `fill`); which = -1 keeps every length. */
static void wire_copy(struct wire *w, const struct frame_part *src, size_t n,
		      int which, size_t newlen, uint8_t fill)
{
	assert_true(n <= KVW_MAX_FRAMES + 1);
	w->n = n;
	for (size_t i = 0; i < n; i++) {
		size_t len = (int)i == which ? newlen : src[i].len;
		size_t have = len < src[i].len ? len : src[i].len;

		w->mem[i] = malloc(len + 1);
		assert_non_null(w->mem[i]);
		if (have)
			memcpy(w->mem[i] + 1, src[i].data, have);
		if (len > have)
			memset(w->mem[i] + 1 + have, fill, len - have);
		w->parts[i].data = w->mem[i] + 1;
		w->parts[i].len = len;
	}
}

static void wire_free(struct wire *w)
{
	for (size_t i = 0; i < w->n; i++)
		free(w->mem[i]);
	w->n = 0;
}

static void encode_ok(const struct frame_msg *m, struct frame_out *out)
{
	char err[128] = "";
	int rc = frame_encode(m, out, err, sizeof err);

	if (rc != 0)
		fail_msg("encode %s: %s", frame_type_str(m->hdr.type), err);
}

/* Decodes w and returns rc; err receives the reason. */
static int decode(const struct wire *w, struct frame_msg *m, char *err, size_t errlen)
{
	err[0] = '\0';
	return frame_decode(w->parts, w->n, m, err, errlen);
}

/* ---- equality ---- */

static void assert_str_eq(const char *a, const char *b)
{
	assert_string_equal(a, b);
}

static void assert_pages_eq(struct frame_u32s a, struct frame_u32s b)
{
	assert_int_equal(a.n, b.n);
	for (uint32_t i = 0; i < a.n; i++)
		assert_int_equal(frame_u32s_get(a, i), frame_u32s_get(b, i));
}

static void assert_msg_eq(const struct frame_msg *a, const struct frame_msg *b)
{
	assert_int_equal(a->hdr.magic, b->hdr.magic);
	assert_int_equal(a->hdr.version, b->hdr.version);
	assert_int_equal(a->hdr.type, b->hdr.type);
	assert_int_equal(a->hdr.flags, b->hdr.flags);
	assert_int_equal(a->hdr.src_rank, b->hdr.src_rank);
	assert_true(a->hdr.room == b->hdr.room);
	assert_true(a->hdr.epoch == b->hdr.epoch);
	switch (a->hdr.type) {
	case FRAME_BOOT_REGISTER: {
		const struct frame_boot_register *x = &a->u.boot_register, *y = &b->u.boot_register;

		assert_memory_equal(&x->topo, &y->topo, sizeof x->topo);
		assert_memory_equal(&x->coord, &y->coord, sizeof x->coord);
		assert_str_eq(x->endpoint, y->endpoint);
		assert_memory_equal(&x->model, &y->model, sizeof x->model);
		assert_int_equal(x->layer_first, y->layer_first);
		assert_int_equal(x->layer_count, y->layer_count);
		break;
	}
	case FRAME_BOOT_LOOKUP:
		assert_memory_equal(&a->u.boot_lookup, &b->u.boot_lookup, sizeof a->u.boot_lookup);
		break;
	case FRAME_BOOT_REPLY: {
		const struct frame_boot_reply *x = &a->u.boot_reply, *y = &b->u.boot_reply;

		assert_int_equal(x->status, y->status);
		assert_memory_equal(&x->topo, &y->topo, sizeof x->topo);
		assert_memory_equal(&x->coord, &y->coord, sizeof x->coord);
		assert_str_eq(x->endpoint, y->endpoint);
		assert_memory_equal(&x->model, &y->model, sizeof x->model);
		assert_int_equal(x->layer_first, y->layer_first);
		assert_int_equal(x->layer_count, y->layer_count);
		assert_true(x->epoch == y->epoch);
		assert_str_eq(x->text, y->text);
		break;
	}
	case FRAME_REGISTER: {
		const struct frame_register *x = &a->u.reg, *y = &b->u.reg;

		assert_memory_equal(&x->coord, &y->coord, sizeof x->coord);
		assert_memory_equal(&x->topo, &y->topo, sizeof x->topo);
		assert_str_eq(x->endpoint, y->endpoint);
		assert_str_eq(x->transport, y->transport);
		assert_int_equal(x->desc.len, y->desc.len);
		if (x->desc.len)
			assert_memory_equal(x->desc.p, y->desc.p, x->desc.len);
		assert_memory_equal(&x->model, &y->model, sizeof x->model);
		assert_int_equal(x->bufs.n, y->bufs.n);
		for (uint32_t i = 0; i < x->bufs.n; i++) {
			struct kvw_buf p = frame_bufs_get(x->bufs, i), q = frame_bufs_get(y->bufs, i);

			assert_int_equal(p.layer_id, q.layer_id);
			assert_int_equal(p.role, q.role);
			assert_int_equal(p.pool, q.pool);
			assert_true(p.offset == q.offset);
			assert_int_equal(p.item_len, q.item_len);
			assert_int_equal(p.pages, q.pages);
		}
		break;
	}
	case FRAME_XFER_INFO:
		assert_int_equal(a->u.xfer_info.aux_slot, b->u.xfer_info.aux_slot);
		assert_int_equal(a->u.xfer_info.required_dst_info_num,
				 b->u.xfer_info.required_dst_info_num);
		assert_int_equal(a->u.xfer_info.dummy, b->u.xfer_info.dummy);
		assert_true(a->u.xfer_info.token == b->u.xfer_info.token);
		assert_pages_eq(a->u.xfer_info.pages, b->u.xfer_info.pages);
		break;
	case FRAME_ABORT:
		assert_int_equal(a->u.abort.reason, b->u.abort.reason);
		assert_true(a->u.abort.token == b->u.abort.token);
		break;
	case FRAME_ABORT_ACK:
		assert_true(a->u.abort_ack.token == b->u.abort_ack.token);
		break;
	case FRAME_STATUS:
		assert_int_equal(a->u.status.state, b->u.status.state);
		assert_int_equal(a->u.status.reason, b->u.status.reason);
		assert_true(a->u.status.token == b->u.status.token);
		assert_str_eq(a->u.status.text, b->u.status.text);
		break;
	case FRAME_SEND_BEGIN:
		assert_memory_equal(&a->u.send_begin, &b->u.send_begin, sizeof a->u.send_begin);
		break;
	case FRAME_SEND_CHUNK:
		assert_int_equal(a->u.send_chunk.is_last, b->u.send_chunk.is_last);
		assert_pages_eq(a->u.send_chunk.pages, b->u.send_chunk.pages);
		break;
	case FRAME_RECV_BEGIN:
		assert_str_eq(a->u.recv_begin.bootstrap, b->u.recv_begin.bootstrap);
		assert_int_equal(a->u.recv_begin.aux_slot, b->u.recv_begin.aux_slot);
		assert_int_equal(a->u.recv_begin.prefill_dp_rank, b->u.recv_begin.prefill_dp_rank);
		assert_pages_eq(a->u.recv_begin.pages, b->u.recv_begin.pages);
		break;
	case FRAME_JOB:
		assert_int_equal(a->u.job.slot, b->u.job.slot);
		assert_int_equal(a->u.job.generation, b->u.job.generation);
		assert_int_equal(a->u.job.peer, b->u.job.peer);
		assert_int_equal(a->u.job.flags, b->u.job.flags);
		assert_int_equal(a->u.job.dst_index, b->u.job.dst_index);
		assert_int_equal(a->u.job.desc.len, b->u.job.desc.len);
		if (a->u.job.desc.len)
			assert_memory_equal(a->u.job.desc.p, b->u.job.desc.p, a->u.job.desc.len);
		assert_int_equal(a->u.job.pages, b->u.job.pages);
		assert_true(a->u.job.token == b->u.job.token);
		assert_str_eq(a->u.job.reply, b->u.job.reply);
		assert_int_equal(a->u.job.copies.n, b->u.job.copies.n);
		for (uint32_t i = 0; i < a->u.job.copies.n; i++) {
			struct frame_copy p = frame_copies_get(a->u.job.copies, i);
			struct frame_copy q = frame_copies_get(b->u.job.copies, i);

			assert_memory_equal(&p, &q, sizeof p);
		}
		break;
	case FRAME_JOB_DONE:
		assert_int_equal(a->u.job_done.slot, b->u.job_done.slot);
		assert_int_equal(a->u.job_done.generation, b->u.job_done.generation);
		assert_int_equal(a->u.job_done.result, b->u.job_done.result);
		assert_int_equal(a->u.job_done.reason, b->u.job_done.reason);
		assert_true(a->u.job_done.bytes == b->u.job_done.bytes);
		assert_int_equal(a->u.job_done.count, b->u.job_done.count);
		break;
	}
}

#endif
