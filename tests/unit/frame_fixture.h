/*
 * frame_fixture.h - one valid message of every frame type in two variants
 * (typical, and on the boundaries), shared by tests/unit/test_frame.c,
 * which round-trips them, and tests/fuzz/mkseeds.c, which encodes them
 * into the fuzz seeds. Include once per program (static data).
 */
#ifndef KVW_FRAME_FIXTURE_H
#define KVW_FRAME_FIXTURE_H

#include <stdint.h>
#include <string.h>

#include "wire/frame.h"

static const uint32_t pages4[] = { 5, 9, 0xFFFFFFFEu, 100000 };
static const struct frame_copy copies3[] = {
	{ 0, 4096, 4096 }, { 1ull << 40, 7, 1 }, { UINT64_MAX - 1, 0, 24 },
};
static const struct kvw_buf bufs3[] = {
	{ .layer_id = 0, .role = KVW_ROLE_K, .pool = 0, .offset = 0, .item_len = 4096, .pages = 1000 },
	{ .layer_id = 0, .role = KVW_ROLE_V, .pool = 1, .offset = 1ull << 33, .item_len = 4096, .pages = 1000 },
	{ .layer_id = 61, .role = KVW_ROLE_AUX, .pool = 255, .offset = 12, .item_len = 64, .pages = 7 },
};
static const uint8_t desc7[] = { 'r', 'k', 0, 0xFF, 1, 2, 3 }; /* opaque: NUL allowed */

static const struct kvw_model model1 = { 16, 3, 8, 4, 256, KVW_MODEL_MLA };

/* A 255-byte string, the longest allowed. */
static void str_max(char s[FRAME_STR_SIZE])
{
	memset(s, 'x', KVW_MAX_STR);
	s[KVW_MAX_STR] = '\0';
}

#define NVARIANTS 2

/* Builds a valid message of `type`: variant 0 is typical, variant 1 sits
 * on the boundaries (max strings, empty or full arrays, other enums). */
static void fixture(unsigned type, int variant, struct frame_msg *m)
{
	if (variant == 0)
		frame_msg_init(m, type, 3, 0x0102030405060708ull, 0xA1B2C3D4E5F60718ull);
	else
		frame_msg_init(m, type, UINT32_MAX, 0, UINT64_MAX);
	switch (type) {
	case FRAME_BOOT_REGISTER: {
		struct frame_boot_register *b = &m->u.boot_register;

		b->topo = (struct kvw_topo){ 2, 2, 1, 4 };
		b->coord = (struct kvw_coord){ 1, 0, 0, 3 };
		strcpy(b->endpoint, "tcp://10.0.0.1:7001");
		if (variant)
			str_max(b->endpoint);
		b->model = model1;
		b->layer_first = variant ? 0 : 16;
		b->layer_count = variant ? UINT32_MAX : 16;
		break;
	}
	case FRAME_BOOT_LOOKUP:
		m->u.boot_lookup.want = (struct kvw_coord){ 0, 1, 0, 2 };
		if (variant)
			m->u.boot_lookup.want = (struct kvw_coord){
				FRAME_LOOKUP_TOPO_ONLY, FRAME_LOOKUP_TOPO_ONLY,
				FRAME_LOOKUP_TOPO_ONLY, FRAME_LOOKUP_TOPO_ONLY };
		m->u.boot_lookup.model = model1;
		break;
	case FRAME_BOOT_REPLY: {
		struct frame_boot_reply *b = &m->u.boot_reply;

		if (variant) { /* an error reply: topology may be all zero */
			b->status = FRAME_BOOT_REFUSED;
			str_max(b->text);
			break;
		}
		b->status = FRAME_BOOT_OK;
		b->topo = (struct kvw_topo){ 8, 1, 1, 1 };
		b->coord = (struct kvw_coord){ 7, 0, 0, 0 };
		strcpy(b->endpoint, "ipc:///tmp/kvw.sock");
		b->model = model1;
		b->layer_first = 0;
		b->layer_count = 61;
		b->epoch = 0x0123456789abcdefull;
		break;
	}
	case FRAME_REGISTER: {
		struct frame_register *r = &m->u.reg;

		r->coord = (struct kvw_coord){ 0, 0, 0, 1 };
		r->topo = (struct kvw_topo){ 1, 1, 1, 2 };
		strcpy(r->endpoint, "tcp://10.0.0.2:7100");
		strcpy(r->transport, "shm");
		r->model = model1;
		if (variant) {
			str_max(r->endpoint);
			str_max(r->transport);
			r->desc.p = NULL;
			r->desc.len = 0;
			r->bufs = frame_bufs_of(NULL, 0);
		} else {
			r->desc.p = desc7;
			r->desc.len = sizeof desc7;
			r->bufs = frame_bufs_of(bufs3, 3);
		}
		break;
	}
	case FRAME_XFER_INFO:
		m->u.xfer_info.aux_slot = variant ? UINT32_MAX : 7;
		m->u.xfer_info.required_dst_info_num = variant ? 1 : 2;
		m->u.xfer_info.dummy = variant ? 1 : 0;
		m->u.xfer_info.token = variant ? UINT64_MAX : 0x21;
		m->u.xfer_info.pages = variant ? frame_u32s_of(NULL, 0) : frame_u32s_of(pages4, 4);
		break;
	case FRAME_ABORT:
		/* KVW_R_INTEGRITY: the last reason when test_frame_golden
		 * pinned these bytes (test_frame's truth table covers every
		 * reason since). */
		m->u.abort.reason = variant ? KVW_R_INTEGRITY : KVW_R_ABORTED;
		m->u.abort.token = variant ? UINT64_MAX : 0x11;
		break;
	case FRAME_ABORT_ACK:
		m->u.abort_ack.token = variant ? UINT64_MAX : 0x11;
		break;
	case FRAME_STATUS:
		m->u.status.state = variant ? KVW_FAILED : KVW_SUCCESS;
		m->u.status.reason = variant ? KVW_R_INTEGRITY : KVW_R_NONE;
		m->u.status.token = variant ? UINT64_MAX : 0x21;
		if (variant)
			str_max(m->u.status.text);
		else
			strcpy(m->u.status.text, "done");
		break;
	case FRAME_SEND_BEGIN:
		m->u.send_begin.num_pages = variant ? UINT32_MAX : 12;
		m->u.send_begin.aux_slot = variant ? 0 : 3;
		break;
	case FRAME_SEND_CHUNK:
		m->u.send_chunk.is_last = variant ? 1 : 0;
		m->u.send_chunk.pages = variant ? frame_u32s_of(NULL, 0) : frame_u32s_of(pages4, 4);
		break;
	case FRAME_RECV_BEGIN:
		if (variant)
			str_max(m->u.recv_begin.bootstrap);
		else
			strcpy(m->u.recv_begin.bootstrap, "10.0.0.9:8998");
		m->u.recv_begin.aux_slot = 11;
		m->u.recv_begin.prefill_dp_rank = variant ? UINT32_MAX : 1;
		m->u.recv_begin.pages = variant ? frame_u32s_of(NULL, 0) : frame_u32s_of(pages4, 3);
		break;
	case FRAME_JOB:
		m->u.job.slot = 17;
		m->u.job.generation = variant ? UINT32_MAX : 2;
		m->u.job.peer = 4;
		m->u.job.flags = variant ? FRAME_JOB_LAST | FRAME_JOB_FINAL : 0;
		m->u.job.dst_index = 1;
		m->u.job.desc.p = (const uint8_t *)"KVSHdesc";
		m->u.job.desc.len = variant ? 0 : 8;
		m->u.job.pages = variant ? UINT32_MAX : 3;
		m->u.job.token = variant ? UINT64_MAX : 0x21;
		if (variant)
			str_max(m->u.job.reply);
		m->u.job.copies = variant ? frame_copies_of(NULL, 0) : frame_copies_of(copies3, 3);
		break;
	case FRAME_JOB_DONE:
		m->u.job_done.slot = 17;
		m->u.job_done.generation = 2;
		m->u.job_done.result = variant ? INT32_MIN : 0;
		m->u.job_done.reason = variant ? KVW_R_TRANSFER : KVW_R_NONE;
		m->u.job_done.bytes = variant ? UINT64_MAX : 8192;
		m->u.job_done.count = variant ? 1 : FRAME_JOB_DONE_MAX;
		break;
	}
}

#endif
