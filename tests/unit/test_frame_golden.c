/*
 * test_frame_golden.c - the frame codec's wire form pinned against a
 * golden taken from the hand-written codec before frame bodies were
 * described once (lib/wire/frame_bodies.def, issue 31): for every type,
 * three messages (the two fixtures of frame_fixture.h and one with every
 * field set to a distinct non-zero value) encode to parts whose lengths
 * and FNV-1a hashes are the golden's, decode back field for field, and
 * every neighbour of their bytes (each part cut to every length or
 * extended by one byte; each header and body byte set to 0x00, 0xFF or
 * flipped in its low or high bit) is accepted or refused with the same
 * return code as before, in the same order (one hash per message over
 * the sequence of codes).
 *
 * The table below (golden[]) was printed by this test's print mode
 * (KVW_GOLDEN_PRINT=1) built on the old codec at commit d8be77e. Never
 * reprint it to make a failure go away: a difference is a change of the
 * wire format or of what is refused. The print mode also gives a hash of
 * the refusal texts (a comment per row), to compare two builds by hand;
 * KVW_GOLDEN_PRINT=2 prints every neighbour's return code and text too.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wire/frame.h"
#include "frame_testkit.h"
#include "frame_fixture.h"

#define NGOLDEN 3 /* messages per type: fixtures 0 and 1, then "full" */

static const struct kvw_model model_full = { 7, 2, 9, 3, 192, KVW_MODEL_MLA };

/* Every field of `type` set, each to a value no other field has, so a
 * field written at another offset or width changes the bytes. */
static void full(unsigned type, struct frame_msg *m)
{
	static const struct kvw_topo topo = { 5, 6, 7, 8 };
	static const struct kvw_coord coord = { 1, 2, 3, 4 };

	fixture(type, 0, m);
	m->hdr.src_rank = 0x0A0B0C0Du;
	switch (type) {
	case FRAME_BOOT_REGISTER:
		m->u.boot_register.topo = topo;
		m->u.boot_register.coord = coord;
		m->u.boot_register.model = model_full;
		m->u.boot_register.layer_first = 0x31;
		m->u.boot_register.layer_count = 0x3200;
		break;
	case FRAME_BOOT_LOOKUP:
		m->u.boot_lookup.want = coord;
		m->u.boot_lookup.model = model_full;
		break;
	case FRAME_BOOT_REPLY:
		m->u.boot_reply.topo = topo;
		m->u.boot_reply.coord = coord;
		m->u.boot_reply.model = model_full;
		m->u.boot_reply.layer_first = 0x41;
		m->u.boot_reply.layer_count = 0x4200;
		strcpy(m->u.boot_reply.text, "note: fully populated");
		break;
	case FRAME_REGISTER:
		m->u.reg.coord = coord;
		m->u.reg.topo = topo;
		m->u.reg.model = model_full;
		break;
	case FRAME_XFER_INFO:
		m->u.xfer_info.aux_slot = 0x01020304u;
		m->u.xfer_info.required_dst_info_num = 0x0506u;
		m->u.xfer_info.dummy = 1;
		m->u.xfer_info.token = 0x1112131415161718ull;
		m->u.xfer_info.prefix_tokens = 0x191a1b1cu;
		break;
	case FRAME_ABORT:
		m->u.abort.reason = KVW_R_PAGES; /* 12: pinned, as when golden */
		m->u.abort.token = 0x2122232425262728ull;
		break;
	case FRAME_ABORT_ACK:
		m->u.abort_ack.token = 0x3132333435363738ull;
		break;
	case FRAME_STATUS:
		m->u.status.state = KVW_FAILED;
		m->u.status.reason = KVW_R_CLEARED; /* 11 */
		m->u.status.token = 0x4142434445464748ull;
		break;
	case FRAME_SEND_BEGIN:
		m->u.send_begin.num_pages = 0x51525354u;
		m->u.send_begin.aux_slot = 0x55565758u;
		break;
	case FRAME_SEND_CHUNK:
		m->u.send_chunk.is_last = 1;
		break;
	case FRAME_RECV_BEGIN:
		m->u.recv_begin.aux_slot = 0x61626364u;
		m->u.recv_begin.prefill_dp_rank = 0x65666768u;
		m->u.recv_begin.prefix_tokens = 0x696a6b6cu;
		m->u.recv_begin.pages = frame_u32s_of(pages4, 4);
		break;
	case FRAME_JOB:
		m->u.job.slot = 0x71u;
		m->u.job.generation = 0x7200u;
		m->u.job.peer = 0x730000u;
		m->u.job.flags = FRAME_JOB_LAST | FRAME_JOB_FINAL;
		m->u.job.dst_index = 0x74u;
		m->u.job.pages = 0x75000000u;
		m->u.job.token = 0x7677787980818283ull;
		strcpy(m->u.job.reply, "tcp://10.0.0.3:7300");
		break;
	case FRAME_JOB_DONE:
		m->u.job_done.slot = 0x91u;
		m->u.job_done.generation = 0x9200u;
		m->u.job_done.reason = KVW_R_BOOTSTRAP; /* 10 */
		m->u.job_done.bytes = 0x93949596979899AAull;
		m->u.job_done.count = 0x3FFu;
		break;
	}
}

static void golden_msg(unsigned type, int g, struct frame_msg *m)
{
	if (g < NVARIANTS)
		fixture(type, g, m);
	else
		full(type, m);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}
#define FNV0 0xcbf29ce484222325ull

static int print_texts; /* KVW_GOLDEN_PRINT=2: every neighbour's verdict */

/* The running hashes of one message's neighbours. */
struct outcome {
	uint64_t rcs, texts;
	unsigned n;
};

/* Decodes parts[0..n) as received (wire_copy: exact-size buffers at an
 * odd address), part `which` cut or extended to newlen (extra bytes
 * `fill`), its byte `at` (when < newlen) set to `val`. */
static void probe(struct outcome *o, const struct frame_part *src, size_t n,
		  size_t which, size_t newlen, uint8_t fill, size_t at, uint8_t val)
{
	struct frame_msg m;
	struct wire w;
	char err[200];
	int rc;

	wire_copy(&w, src, n, (int)which, newlen, fill);
	if (at < newlen)
		w.mem[which][1 + at] = val;
	rc = decode(&w, &m, err, sizeof err);
	if (print_texts)
		printf("  part %zu len %zu at %zu=%u: %d %s\n", which, newlen,
		       at, val, rc, err);
	o->rcs = fnv(o->rcs, &rc, sizeof rc);
	o->texts = fnv(o->texts, err, strlen(err) + 1);
	o->n++;
	wire_free(&w);
}

/* Every neighbour of an encoded message, in a fixed order. */
static struct outcome neighbours(const struct frame_out *out)
{
	struct outcome o = { FNV0, FNV0, 0 };

	for (size_t p = 0; p < out->nparts; p++) {
		size_t len = out->parts[p].len;
		const uint8_t *b = out->parts[p].data;

		for (size_t cut = 0; cut <= len + 1; cut++)
			probe(&o, out->parts, out->nparts, p, cut, 0xFF, SIZE_MAX, 0);
		if (p == 2)
			continue; /* array values are views: never looked at */
		for (size_t i = 0; i < len; i++) {
			const uint8_t vals[4] = { 0x00, 0xFF, (uint8_t)(b[i] ^ 0x01),
						  (uint8_t)(b[i] ^ 0x80) };

			for (size_t k = 0; k < 4; k++)
				probe(&o, out->parts, out->nparts, p, len, 0, i, vals[k]);
		}
	}
	return o;
}

struct golden {
	uint8_t type, g;
	uint32_t len[3];
	uint64_t hash[3]; /* FNV-1a of each part (FNV0: no such part) */
	uint64_t rcs;     /* the neighbours' return codes, in order */
};

static const struct golden golden[] = {
#include "frame_golden.h"
};

static void encode_golden(unsigned t, int g, struct frame_msg *m, struct frame_out *out)
{
	golden_msg(t, g, m);
	encode_ok(m, out);
}

/* KVW_GOLDEN_PRINT=1: print the table rows instead of testing. */
static int print_golden(void)
{
	for (unsigned t = 1; t <= FRAME_TYPE_MAX; t++) {
		for (int g = 0; g < NGOLDEN; g++) {
			struct frame_msg m;
			struct frame_out out;
			struct outcome o;
			uint64_t h[3];

			encode_golden(t, g, &m, &out);
			for (size_t p = 0; p < 3; p++)
				h[p] = p < out.nparts ? fnv(FNV0, out.parts[p].data, out.parts[p].len) : FNV0;
			o = neighbours(&out);
			printf("{ %u, %d, { %zu, %zu, %zu }, { 0x%016" PRIx64 "ull, 0x%016" PRIx64
			       "ull, 0x%016" PRIx64 "ull }, 0x%016" PRIx64 "ull }, /* %s: %u probes, texts 0x%016" PRIx64 " */\n",
			       t, g, out.parts[0].len, out.nparts > 1 ? out.parts[1].len : 0,
			       out.nparts > 2 ? out.parts[2].len : 0, h[0], h[1], h[2], o.rcs,
			       frame_type_str(t), o.n, o.texts);
		}
	}
	return 0;
}

static void test_golden_covers_every_type_three_times(void **state)
{
	(void)state;
	assert_int_equal(sizeof golden / sizeof golden[0], FRAME_TYPE_MAX * NGOLDEN);
	for (size_t i = 0; i < sizeof golden / sizeof golden[0]; i++) {
		assert_int_equal(golden[i].type, 1 + i / NGOLDEN);
		assert_int_equal(golden[i].g, i % NGOLDEN);
	}
}

static void test_every_golden_message_encodes_to_the_golden_bytes(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof golden / sizeof golden[0]; i++) {
		const struct golden *gd = &golden[i];
		struct frame_msg m;
		struct frame_out out;

		encode_golden(gd->type, gd->g, &m, &out);
		assert_int_equal(out.nparts, frame_nparts(gd->type));
		for (size_t p = 0; p < 3; p++) {
			size_t len = p < out.nparts ? out.parts[p].len : 0;
			uint64_t h = p < out.nparts ? fnv(FNV0, out.parts[p].data, len) : FNV0;

			if (len != gd->len[p] || h != gd->hash[p])
				fail_msg("%s/%d part %zu: %zu bytes hash 0x%016" PRIx64
					 ", golden %u bytes 0x%016" PRIx64,
					 frame_type_str(gd->type), gd->g, p, len, h,
					 gd->len[p], gd->hash[p]);
		}
	}
}

static void test_every_golden_message_decodes_field_for_field(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof golden / sizeof golden[0]; i++) {
		struct frame_msg m, got;
		struct frame_out out;
		char err[160] = "";

		encode_golden(golden[i].type, golden[i].g, &m, &out);
		if (frame_decode(out.parts, out.nparts, &got, err, sizeof err) != 0)
			fail_msg("%s/%d: %s", frame_type_str(golden[i].type), golden[i].g, err);
		assert_msg_eq(&m, &got);
	}
}

static void test_every_neighbour_of_every_golden_message_is_judged_as_before(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof golden / sizeof golden[0]; i++) {
		struct frame_msg m;
		struct frame_out out;
		struct outcome o;

		encode_golden(golden[i].type, golden[i].g, &m, &out);
		o = neighbours(&out);
		if (o.rcs != golden[i].rcs)
			fail_msg("%s/%d: %u neighbours judged otherwise than the golden",
				 frame_type_str(golden[i].type), golden[i].g, o.n);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_golden_covers_every_type_three_times),
		cmocka_unit_test(test_every_golden_message_encodes_to_the_golden_bytes),
		cmocka_unit_test(test_every_golden_message_decodes_field_for_field),
		cmocka_unit_test(test_every_neighbour_of_every_golden_message_is_judged_as_before),
	};
	const char *print = getenv("KVW_GOLDEN_PRINT");

	if (print && (print[0] == '1' || print[0] == '2')) {
		print_texts = print[0] == '2';
		return print_golden();
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
