/*
 * test_frame.c - truth tables for the frame codec: every type (with a
 * typical and a boundary variant) round-trips field for field; the wire
 * form of the header and of a body is pinned byte for byte; every
 * truncation and one-byte extension of every part, every missing or extra
 * part, every bad header and every out-of-range value is refused by
 * frame_decode, and the same values are refused by frame_encode. Received
 * parts are copied into exact-size heap buffers at an odd address, so
 * ASan catches any read past a part and UBSan any aligned load.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "wire/frame.h"
#include "frame_testkit.h"
#include "frame_fixture.h"

/* ---- fixtures ---- */

static uint32_t big_pages[KVW_MAX_PAGES + 1];
static struct frame_copy big_copies[KVW_MAX_COPIES + 1];
static struct kvw_buf big_bufs[KVW_MAX_BUFFERS + 1];
static uint8_t big_desc[KVW_MAX_DESC + 1];

/* Asserts that w is refused and that the reason mentions `want`. */
static void assert_refused(const struct wire *w, int want_rc, const char *want)
{
	struct frame_msg m;
	char err[160];
	int rc = decode(w, &m, err, sizeof err);

	if (rc != want_rc)
		fail_msg("decode returned %d (%s), want %d (%s)", rc, err, want_rc, want);
	if (want && !strstr(err, want))
		fail_msg("reason \"%s\" does not mention \"%s\"", err, want);
	assert_null(strchr(err, '\n'));
}

/* ---- round trips and wire form ---- */

static void test_every_type_and_variant_round_trips_field_for_field(void **state)
{
	(void)state;
	for (unsigned t = 1; t <= FRAME_TYPE_MAX; t++) {
		for (int v = 0; v < NVARIANTS; v++) {
			struct frame_msg in, got;
			struct frame_out out;
			struct wire w;
			char err[128];

			fixture(t, v, &in);
			encode_ok(&in, &out);
			assert_int_equal(out.nparts, frame_nparts(t));
			wire_copy(&w, out.parts, out.nparts, -1, 0, 0);
			if (decode(&w, &got, err, sizeof err) != 0)
				fail_msg("%s/%d: %s", frame_type_str(t), v, err);
			assert_msg_eq(&in, &got);
			wire_free(&w);
		}
	}
}

static void test_part_counts_are_one_for_header_only_types_three_for_array_types(void **state)
{
	static const unsigned want[FRAME_TYPE_MAX + 1] = {
		0, 2, 2, 2, 1, 1, 2, 3, 2, 2, 2, 2, 3, 3, 1, 1, 3, 2,
	};

	(void)state;
	for (unsigned t = 0; t <= 255; t++)
		assert_int_equal(frame_nparts(t), t <= FRAME_TYPE_MAX ? want[t] : 0);
}

static void test_type_names_cover_every_type_and_unknown_is_question_mark(void **state)
{
	(void)state;
	assert_string_equal(frame_type_str(FRAME_BOOT_REGISTER), "BOOT_REGISTER");
	assert_string_equal(frame_type_str(FRAME_XFER_INFO), "XFER_INFO");
	assert_string_equal(frame_type_str(FRAME_JOB_DONE), "JOB_DONE");
	for (unsigned t = 1; t <= FRAME_TYPE_MAX; t++)
		assert_string_not_equal(frame_type_str(t), "?");
	assert_string_equal(frame_type_str(0), "?");
	assert_string_equal(frame_type_str(18), "?");
	assert_string_equal(frame_type_str(255), "?");
}

static void test_header_and_body_bytes_are_little_endian_field_by_field(void **state)
{
	static const uint8_t hdr[FRAME_HDR_LEN] = {
		'K', 'V', 'W', '1', 1, FRAME_JOB_DONE, 0, 0,     /* magic version type flags */
		3, 0, 0, 0, 0, 0, 0, 0,                          /* src_rank, reserved */
		0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01,  /* room */
		0x18, 0x07, 0xF6, 0xE5, 0xD4, 0xC3, 0xB2, 0xA1,  /* epoch */
	};
	static const uint8_t body[] = {
		17, 0, 0, 0, 2, 0, 0, 0,        /* slot, generation */
		0xF4, 0xFF, 0xFF, 0xFF,         /* result -12 (KVW_ERANGE) */
		5, 0, 0, 0,                     /* reason KVW_R_TRANSFER */
		0, 0x20, 0, 0, 0, 0, 0, 0,      /* bytes 8192 */
		1, 0, 0, 0,                     /* count 1 */
	};
	struct frame_msg m;
	struct frame_out out;

	(void)state;
	assert_int_equal(FRAME_MAGIC, 0x3157564Bu);
	fixture(FRAME_JOB_DONE, 0, &m);
	m.u.job_done.result = KVW_ERANGE;
	m.u.job_done.reason = KVW_R_TRANSFER;
	m.u.job_done.count = 1;
	encode_ok(&m, &out);
	assert_int_equal(out.parts[0].len, sizeof hdr);
	assert_memory_equal(out.parts[0].data, hdr, sizeof hdr);
	assert_int_equal(out.parts[1].len, sizeof body);
	assert_memory_equal(out.parts[1].data, body, sizeof body);
}

/* REGISTER's buffers are 24 bytes each with role, pool and a zero
 * reserved u16 between layer_id and offset. */
static void test_register_buffer_wire_form_is_24_bytes_with_zero_reserved(void **state)
{
	static const uint8_t last[FRAME_BUF_LEN] = {
		61, 0, 0, 0, KVW_ROLE_AUX, 255, 0, 0,
		12, 0, 0, 0, 0, 0, 0, 0,
		64, 0, 0, 0, 7, 0, 0, 0,
	};
	struct frame_msg m;
	struct frame_out out;
	const uint8_t *b;

	(void)state;
	fixture(FRAME_REGISTER, 0, &m);
	encode_ok(&m, &out);
	b = out.parts[1].data;
	assert_memory_equal(b + out.parts[1].len - FRAME_BUF_LEN, last, FRAME_BUF_LEN);
	/* nbufs u32 sits just before the three buffers */
	assert_int_equal(frame_le32(b + out.parts[1].len - 3 * FRAME_BUF_LEN - 4), 3);
}

static void test_encoded_array_part_is_the_callers_array_zero_copy(void **state)
{
	struct frame_msg m, got;
	struct frame_out out;
	char err[128];

	(void)state;
	fixture(FRAME_JOB, 0, &m);
	encode_ok(&m, &out);
	assert_ptr_equal(out.parts[2].data, copies3);
	assert_int_equal(out.parts[2].len, sizeof copies3);
	fixture(FRAME_XFER_INFO, 0, &m);
	encode_ok(&m, &out);
	assert_ptr_equal(out.parts[2].data, pages4);
	assert_int_equal(out.parts[2].len, sizeof pages4);
	/* decoded views point into the received parts, no copy either */
	assert_int_equal(frame_decode(out.parts, out.nparts, &got, err, sizeof err), 0);
	assert_ptr_equal(got.u.xfer_info.pages.p, pages4);
}

/* ---- truncation, extension, part count ---- */

/* Every cut of part 0 or 1 is refused. A cut of part 2 is refused unless
 * it drops whole elements, which leaves a valid shorter array. */
static void test_every_truncation_of_every_part_of_every_type_is_refused(void **state)
{
	(void)state;
	for (unsigned t = 1; t <= FRAME_TYPE_MAX; t++) {
		for (int v = 0; v < NVARIANTS; v++) {
			struct frame_msg in, got;
			struct frame_out out;
			size_t elem = t == FRAME_JOB ? FRAME_COPY_LEN : 4;

			fixture(t, v, &in);
			encode_ok(&in, &out);
			for (size_t p = 0; p < out.nparts; p++) {
				for (size_t len = 0; len < out.parts[p].len; len++) {
					struct wire w;
					char err[160];
					int rc;

					wire_copy(&w, out.parts, out.nparts, (int)p, len, 0);
					rc = decode(&w, &got, err, sizeof err);
					if (p == 2 && len % elem == 0) {
						if (rc != 0)
							fail_msg("%s part 2 cut to %zu: %s",
								 frame_type_str(t), len, err);
					} else if (rc == 0) {
						fail_msg("%s/%d part %zu cut to %zu accepted",
							 frame_type_str(t), v, p, len);
					}
					wire_free(&w);
				}
			}
		}
	}
}

static void test_every_part_of_every_type_extended_by_one_byte_is_refused(void **state)
{
	static const uint8_t fills[] = { 0x00, 0x01, 0xFF };

	(void)state;
	for (unsigned t = 1; t <= FRAME_TYPE_MAX; t++) {
		for (int v = 0; v < NVARIANTS; v++) {
			struct frame_msg in;
			struct frame_out out;

			fixture(t, v, &in);
			encode_ok(&in, &out);
			for (size_t p = 0; p < out.nparts; p++) {
				for (size_t f = 0; f < sizeof fills; f++) {
					struct wire w;

					wire_copy(&w, out.parts, out.nparts, (int)p,
						  out.parts[p].len + 1, fills[f]);
					assert_refused(&w, KVW_EINVAL, p == 0 ? "header:" : NULL);
					wire_free(&w);
				}
			}
		}
	}
}

static void test_missing_or_extra_part_is_refused_for_every_type(void **state)
{
	static const uint8_t junk[4] = { 1, 2, 3, 4 };

	(void)state;
	for (unsigned t = 1; t <= FRAME_TYPE_MAX; t++) {
		struct frame_msg in;
		struct frame_out out;
		struct frame_part more[KVW_MAX_FRAMES + 1];
		struct wire w;

		fixture(t, 0, &in);
		encode_ok(&in, &out);
		/* one part short (header-only types: no part at all) */
		wire_copy(&w, out.parts, out.nparts - 1, -1, 0, 0);
		assert_refused(&w, KVW_EINVAL, out.nparts > 1 ? "parts, want" : "empty");
		wire_free(&w);
		/* one extra part, empty or not */
		memcpy(more, out.parts, out.nparts * sizeof more[0]);
		more[out.nparts] = (struct frame_part){ junk, 0 };
		wire_copy(&w, more, out.nparts + 1, -1, 0, 0);
		assert_refused(&w, KVW_EINVAL, "parts, want");
		wire_free(&w);
		/* (the three types with an optional state part read a
		 * non-empty one as state lists: a count of 0x04030201 rows
		 * is over the cap) */
		more[out.nparts] = (struct frame_part){ junk, sizeof junk };
		wire_copy(&w, more, out.nparts + 1, -1, 0, 0);
		assert_refused(&w, KVW_EINVAL,
			       t == FRAME_XFER_INFO || t == FRAME_SEND_CHUNK ||
					       t == FRAME_RECV_BEGIN
				       ? "over KVW_MAX_STATE_IDX"
				       : "parts, want");
		wire_free(&w);
	}
	assert_int_equal(frame_decode(NULL, 0, NULL, NULL, 0), KVW_EINVAL);
}

/* ---- patched wire bytes: a truth table of refusals ---- */

struct patch {
	const char *what;
	unsigned type;
	int variant;
	unsigned part;
	long off;      /* from the start, or from the end when negative */
	uint8_t val[4];
	size_t n;
	int rc;
	const char *reason; /* substring of the error line */
};

/* Offsets into the variant-0 fixtures' bodies. */
#define BOOT_REG_EP 32 /* BOOT_REGISTER: endpoint length */
#define STATUS_TEXT 13 /* STATUS: text length (text "done") */
#define LAST_BUF (-(long)FRAME_BUF_LEN)

static const struct patch patches[] = {
	{ "magic", FRAME_PING, 0, 0, 0, { 'K', 'V', 'W', '2' }, 4, KVW_EVERSION, "bad magic" },
	{ "magic zero", FRAME_JOB, 0, 0, 0, { 0, 0, 0, 0 }, 4, KVW_EVERSION, "bad magic" },
	{ "version 0", FRAME_PING, 0, 0, 4, { 0 }, 1, KVW_EVERSION, "version 0" },
	{ "version 2", FRAME_STATUS, 0, 0, 4, { 2 }, 1, KVW_EVERSION, "version 2" },
	{ "type 0", FRAME_PING, 0, 0, 5, { 0 }, 1, KVW_EINVAL, "unknown type 0" },
	{ "type 18", FRAME_PING, 0, 0, 5, { 18 }, 1, KVW_EINVAL, "unknown type 18" },
	{ "type 255", FRAME_PING, 0, 0, 5, { 255 }, 1, KVW_EINVAL, "unknown type 255" },
	{ "header flags", FRAME_PONG, 0, 0, 6, { 1, 0 }, 2, KVW_EINVAL, "flags" },
	{ "header flags high", FRAME_PONG, 0, 0, 7, { 0x80 }, 1, KVW_EINVAL, "flags" },
	{ "header reserved", FRAME_CLEAR, 0, 0, 12, { 0, 0, 0, 1 }, 4, KVW_EINVAL, "reserved" },
	{ "string over cap", FRAME_BOOT_REGISTER, 0, 1, BOOT_REG_EP, { 0x00, 0x01 }, 2, KVW_EINVAL, "over KVW_MAX_STR" },
	{ "string u16 max", FRAME_BOOT_REGISTER, 0, 1, BOOT_REG_EP, { 0xFF, 0xFF }, 2, KVW_EINVAL, "over KVW_MAX_STR" },
	{ "NUL first", FRAME_BOOT_REGISTER, 0, 1, BOOT_REG_EP + 2, { 0 }, 1, KVW_EINVAL, "NUL inside string at endpoint" },
	{ "NUL middle", FRAME_STATUS, 0, 1, STATUS_TEXT + 2 + 2, { 0 }, 1, KVW_EINVAL, "NUL inside string at text" },
	{ "NUL last", FRAME_STATUS, 0, 1, -1, { 0 }, 1, KVW_EINVAL, "NUL inside string at text" },
	{ "NUL bootstrap", FRAME_RECV_BEGIN, 0, 1, 3, { 0 }, 1, KVW_EINVAL, "NUL inside string at bootstrap" },
	{ "coord outside topo", FRAME_BOOT_REGISTER, 0, 1, 16, { 2 }, 1, KVW_EINVAL, "coord outside topo" },
	{ "topo zero", FRAME_REGISTER, 0, 1, 16, { 0 }, 1, KVW_EINVAL, "coord outside topo" },
	{ "layer overflow", FRAME_BOOT_REGISTER, 0, 1, -4, { 0xFF, 0xFF, 0xFF, 0xFF }, 4, KVW_EINVAL, "layer range" },
	{ "lookup mixed", FRAME_BOOT_LOOKUP, 0, 1, 0, { 0xFF, 0xFF, 0xFF, 0xFF }, 4, KVW_EINVAL, "mixes" },
	{ "boot status 4", FRAME_BOOT_REPLY, 0, 1, 0, { 4 }, 1, KVW_EINVAL, "status 4" },
	{ "boot status max", FRAME_BOOT_REPLY, 0, 1, 0, { 0xFF, 0xFF, 0xFF, 0xFF }, 4, KVW_EINVAL, "status" },
	{ "role KVW_NROLES", FRAME_REGISTER, 0, 1, LAST_BUF + 4, { KVW_NROLES }, 1, KVW_EINVAL, "role" },
	{ "role 255", FRAME_REGISTER, 0, 1, LAST_BUF + 4, { 255 }, 1, KVW_EINVAL, "role" },
	{ "reserved low", FRAME_REGISTER, 0, 1, LAST_BUF + 6, { 1 }, 1, KVW_EINVAL, "reserved" },
	{ "reserved high", FRAME_REGISTER, 0, 1, LAST_BUF + 7, { 0x80 }, 1, KVW_EINVAL, "reserved" },
	{ "required 0", FRAME_XFER_INFO, 0, 1, 4, { 0 }, 1, KVW_EINVAL, "required_dst_info_num" },
	{ "dummy 2", FRAME_XFER_INFO, 0, 1, 8, { 2 }, 1, KVW_EINVAL, "dummy" },
	{ "dummy 255", FRAME_XFER_INFO, 0, 1, 8, { 255 }, 1, KVW_EINVAL, "dummy" },
	{ "abort reason", FRAME_ABORT, 0, 1, 0, { KVW_NREASONS }, 1, KVW_EINVAL, "reason 15" },
	{ "abort reason max", FRAME_ABORT, 0, 1, 3, { 0x80 }, 1, KVW_EINVAL, "reason" },
	{ "abort token 0", FRAME_ABORT, 0, 1, 4, { 0 }, 1, KVW_EINVAL, "token 0" },
	{ "ack token 0", FRAME_ABORT_ACK, 0, 1, 0, { 0 }, 1, KVW_EINVAL, "token 0" },
	{ "status reason", FRAME_STATUS, 0, 1, 1, { KVW_NREASONS }, 1, KVW_EINVAL, "reason 15" },
	{ "status token 0", FRAME_STATUS, 0, 1, 5, { 0 }, 1, KVW_EINVAL, "token 0" },
	{ "xfer_info token 0", FRAME_XFER_INFO, 0, 1, 9, { 0 }, 1, KVW_EINVAL, "token 0" },
	{ "job token 0", FRAME_JOB, 0, 1, 36, { 0 }, 1, KVW_EINVAL, "token 0" },
	{ "is_last 2", FRAME_SEND_CHUNK, 0, 1, 0, { 2 }, 1, KVW_EINVAL, "is_last" },
	{ "is_last 255", FRAME_SEND_CHUNK, 0, 1, 0, { 255 }, 1, KVW_EINVAL, "is_last" },
	{ "job flag 2 (FINAL without LAST)", FRAME_JOB, 0, 1, 12, { 2 }, 1, KVW_EINVAL, "FINAL without LAST" },
	{ "job flag 4", FRAME_JOB, 0, 1, 12, { 4 }, 1, KVW_EINVAL, "flags" },
	{ "job flag high", FRAME_JOB, 0, 1, 15, { 0x80 }, 1, KVW_EINVAL, "flags" },
	{ "result positive", FRAME_JOB_DONE, 0, 1, 8, { 1 }, 1, KVW_EINVAL, "positive" },
	{ "result INT32_MAX", FRAME_JOB_DONE, 0, 1, 8, { 0xFF, 0xFF, 0xFF, 0x7F }, 4, KVW_EINVAL, "positive" },
	{ "done reason", FRAME_JOB_DONE, 0, 1, 12, { KVW_NREASONS }, 1, KVW_EINVAL, "reason" },
	{ "done count 0", FRAME_JOB_DONE, 0, 1, 24, { 0, 0 }, 2, KVW_EINVAL, "count 0" },
	{ "done count over cap", FRAME_JOB_DONE, 0, 1, 24, { 1, 4 }, 2, KVW_EINVAL, "count 1025" },
	{ "done count max", FRAME_JOB_DONE, 0, 1, 24, { 0xFF, 0xFF, 0xFF, 0xFF }, 4, KVW_EINVAL, "outside" },
	{ "done count 2 failed", FRAME_JOB_DONE, 1, 1, 24, { 2 }, 1, KVW_EINVAL, "count 2 for a failed job" },
	{ "pages odd length", FRAME_XFER_INFO, 0, 2, -1, { 0 }, 0, KVW_EINVAL, "not a multiple of 4" },
};

/* Applies p to a copy of its fixture; n == 0 with part 2 means "drop the
 * last byte" (an odd array length). */
static void patch_apply(const struct patch *p, struct wire *w)
{
	struct frame_msg m;
	struct frame_out out;
	size_t len;

	fixture(p->type, p->variant, &m);
	encode_ok(&m, &out);
	len = out.parts[p->part].len;
	wire_copy(w, out.parts, out.nparts, (int)p->part, p->n ? len : len - 1, 0);
	if (p->n) {
		size_t off = p->off < 0 ? len - (size_t)-p->off : (size_t)p->off;

		assert_true(off + p->n <= len);
		memcpy(w->mem[p->part] + 1 + off, p->val, p->n);
	}
}

static void test_patched_fields_are_refused_with_their_reason(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof patches / sizeof patches[0]; i++) {
		const struct patch *p = &patches[i];
		struct frame_msg m;
		struct wire w;
		char err[160];
		int rc;

		patch_apply(p, &w);
		rc = decode(&w, &m, err, sizeof err);
		if (rc != p->rc || !strstr(err, p->reason))
			fail_msg("%s: rc %d \"%s\", want %d \"%s\"", p->what, rc, err,
				 p->rc, p->reason);
		wire_free(&w);
	}
}

/* The unpatched fixtures decode, so each refusal above is the patch's. */
static void test_patch_table_fixtures_decode_unpatched(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof patches / sizeof patches[0]; i++) {
		struct frame_msg m;
		struct frame_out out;
		struct wire w;
		char err[160];

		fixture(patches[i].type, patches[i].variant, &m);
		encode_ok(&m, &out);
		wire_copy(&w, out.parts, out.nparts, -1, 0, 0);
		if (decode(&w, &m, err, sizeof err) != 0)
			fail_msg("%s: %s", patches[i].what, err);
		wire_free(&w);
	}
}

/* Truth table over all 256 values of a u8 field at body offset `off`. */
static void u8_truth_table(unsigned type, long off, int (*ok)(unsigned))
{
	struct frame_msg m;
	struct frame_out out;

	fixture(type, 0, &m);
	encode_ok(&m, &out);
	for (unsigned v = 0; v <= 255; v++) {
		struct wire w;
		char err[160];
		size_t len = out.parts[1].len;

		wire_copy(&w, out.parts, out.nparts, -1, 0, 0);
		w.mem[1][1 + (off < 0 ? len - (size_t)-off : (size_t)off)] = (uint8_t)v;
		if ((decode(&w, &m, err, sizeof err) == 0) != ok(v))
			fail_msg("%s value %u: got \"%s\"", frame_type_str(type), v, err);
		wire_free(&w);
	}
}

static int is_success_or_failed(unsigned v) { return v == KVW_SUCCESS || v == KVW_FAILED; }
static int is_role(unsigned v) { return v < KVW_NROLES; }
static int is_bool(unsigned v) { return v <= 1; }

static void test_status_state_accepts_only_success_and_failed_of_256(void **state)
{
	(void)state;
	u8_truth_table(FRAME_STATUS, 0, is_success_or_failed);
}

static void test_buffer_role_accepts_only_known_roles_of_256(void **state)
{
	(void)state;
	u8_truth_table(FRAME_REGISTER, LAST_BUF + 4, is_role);
}

static void test_is_last_and_dummy_accept_only_0_and_1_of_256(void **state)
{
	(void)state;
	u8_truth_table(FRAME_SEND_CHUNK, 0, is_bool);
	u8_truth_table(FRAME_XFER_INFO, 8, is_bool);
}

static void test_every_reason_below_nreasons_is_accepted_and_none_above(void **state)
{
	(void)state;
	for (uint32_t r = 0; r <= KVW_NREASONS; r++) {
		struct frame_msg m, got;
		struct frame_out out;
		struct wire w;
		char err[160];

		fixture(FRAME_ABORT, 0, &m);
		encode_ok(&m, &out);
		wire_copy(&w, out.parts, out.nparts, -1, 0, 0);
		w.mem[1][1] = (uint8_t)r;
		assert_int_equal(decode(&w, &got, err, sizeof err) == 0, r < KVW_NREASONS);
		wire_free(&w);
	}
}

/* ---- caps: counts over a cap are refused before their bytes are taken ---- */

static void test_nbufs_over_cap_with_short_body_is_refused_as_over_cap(void **state)
{
	static const uint32_t counts[] = { KVW_MAX_BUFFERS + 1, UINT32_MAX };

	(void)state;
	for (size_t i = 0; i < 2; i++) {
		struct frame_msg m;
		struct frame_out out;
		struct wire w;

		fixture(FRAME_REGISTER, 1, &m); /* no buffers: nbufs is the last u32 */
		encode_ok(&m, &out);
		wire_copy(&w, out.parts, out.nparts, -1, 0, 0);
		memcpy(w.mem[1] + 1 + out.parts[1].len - 4, &counts[i], 4);
		assert_refused(&w, KVW_EINVAL, "over KVW_MAX_BUFFERS at nbufs");
		wire_free(&w);
	}
}

static void test_nbufs_at_cap_round_trips_and_one_over_is_refused_by_encode(void **state)
{
	struct frame_msg m, got;
	struct frame_out out;
	struct wire w;
	char err[160];

	(void)state;
	for (uint32_t i = 0; i <= KVW_MAX_BUFFERS; i++)
		big_bufs[i] = (struct kvw_buf){ i, (uint8_t)(i % KVW_NROLES), 1, i * 4096ull, 64, i };
	fixture(FRAME_REGISTER, 1, &m);
	m.u.reg.bufs = frame_bufs_of(big_bufs, KVW_MAX_BUFFERS);
	m.u.reg.desc = (struct frame_bytes){ big_desc, KVW_MAX_DESC };
	encode_ok(&m, &out); /* every cap at once: the largest body fits */
	assert_int_equal(out.parts[1].len, FRAME_BODY_MAX);
	wire_copy(&w, out.parts, out.nparts, -1, 0, 0);
	assert_int_equal(decode(&w, &got, err, sizeof err), 0);
	assert_msg_eq(&m, &got);
	wire_free(&w);
	m.u.reg.bufs.n = KVW_MAX_BUFFERS + 1;
	assert_int_equal(frame_encode(&m, &out, err, sizeof err), KVW_EINVAL);
	assert_non_null(strstr(err, "KVW_MAX_BUFFERS"));
}

static void test_desc_over_cap_is_refused_by_decode_and_encode(void **state)
{
	struct frame_msg m;
	struct frame_out out;
	struct wire w;
	char err[160];
	uint32_t n = KVW_MAX_DESC + 1;
	size_t off;

	(void)state;
	fixture(FRAME_REGISTER, 0, &m);
	m.u.reg.desc = (struct frame_bytes){ big_desc, KVW_MAX_DESC };
	encode_ok(&m, &out);
	/* desc.len follows coord, topo and the two strings */
	off = 32 + 2 + strlen(m.u.reg.endpoint) + 2 + strlen(m.u.reg.transport);
	assert_int_equal(frame_le32((const uint8_t *)out.parts[1].data + off), KVW_MAX_DESC);
	wire_copy(&w, out.parts, out.nparts, 1, out.parts[1].len + 1, 0);
	memcpy(w.mem[1] + 1 + off, &n, 4);
	assert_refused(&w, KVW_EINVAL, "over KVW_MAX_DESC at desc");
	wire_free(&w);
	m.u.reg.desc.len = KVW_MAX_DESC + 1;
	assert_int_equal(frame_encode(&m, &out, err, sizeof err), KVW_EINVAL);
	assert_non_null(strstr(err, "KVW_MAX_DESC"));
}

static void test_string_of_255_round_trips_and_256_is_refused_by_decode_and_encode(void **state)
{
	struct frame_msg m, got;
	struct frame_out out;
	struct wire w;
	char err[160];
	uint16_t n = KVW_MAX_STR + 1;

	(void)state;
	fixture(FRAME_STATUS, 1, &m); /* text is 255 bytes, the last field */
	encode_ok(&m, &out);
	wire_copy(&w, out.parts, out.nparts, -1, 0, 0);
	assert_int_equal(decode(&w, &got, err, sizeof err), 0);
	assert_int_equal(strlen(got.u.status.text), KVW_MAX_STR);
	wire_free(&w);
	wire_copy(&w, out.parts, out.nparts, 1, out.parts[1].len + 1, 'y');
	memcpy(w.mem[1] + 1 + STATUS_TEXT, &n, 2); /* 256 bytes really follow */
	assert_refused(&w, KVW_EINVAL, "over KVW_MAX_STR at text");
	wire_free(&w);
	/* an unterminated string cannot be encoded */
	memset(m.u.status.text, 'z', sizeof m.u.status.text);
	assert_int_equal(frame_encode(&m, &out, err, sizeof err), KVW_EINVAL);
	assert_non_null(strstr(err, "text"));
}

/* Part 2 at exactly its cap decodes; one element more is refused, by
 * decode and by encode alike. */
static void array_cap_case(unsigned type, const void *arr, size_t elem, uint32_t cap)
{
	struct frame_msg m, got;
	struct frame_out out;
	struct frame_part parts[3];
	char err[160];

	fixture(type, 0, &m);
	encode_ok(&m, &out);
	memcpy(parts, out.parts, sizeof parts);
	parts[2] = (struct frame_part){ arr, (size_t)cap * elem };
	assert_int_equal(frame_decode(parts, 3, &got, err, sizeof err), 0);
	parts[2].len += elem;
	assert_int_equal(frame_decode(parts, 3, &got, err, sizeof err), KVW_EINVAL);
	assert_non_null(strstr(err, "over cap"));
	parts[2].len -= 1;
	assert_int_equal(frame_decode(parts, 3, &got, err, sizeof err), KVW_EINVAL);
	assert_non_null(strstr(err, "not a multiple"));
	if (type == FRAME_JOB)
		m.u.job.copies = frame_copies_of(arr, cap + 1);
	else if (type == FRAME_XFER_INFO)
		m.u.xfer_info.pages = frame_u32s_of(arr, cap + 1);
	else if (type == FRAME_SEND_CHUNK)
		m.u.send_chunk.pages = frame_u32s_of(arr, cap + 1);
	else
		m.u.recv_begin.pages = frame_u32s_of(arr, cap + 1);
	assert_int_equal(frame_encode(&m, &out, err, sizeof err), KVW_EINVAL);
	assert_non_null(strstr(err, "over KVW_MAX_"));
}

static void test_page_arrays_over_cap_or_odd_length_are_refused(void **state)
{
	(void)state;
	array_cap_case(FRAME_XFER_INFO, big_pages, 4, KVW_MAX_PAGES);
	array_cap_case(FRAME_SEND_CHUNK, big_pages, 4, KVW_MAX_PAGES);
	array_cap_case(FRAME_RECV_BEGIN, big_pages, 4, KVW_MAX_PAGES);
}

static void test_copy_array_over_cap_or_not_multiple_of_24_is_refused(void **state)
{
	(void)state;
	array_cap_case(FRAME_JOB, big_copies, FRAME_COPY_LEN, KVW_MAX_COPIES);
}

/* ---- encode refuses what decode refuses ---- */

struct bad_msg {
	const char *what;
	unsigned type;
	void (*spoil)(struct frame_msg *m);
	int rc;
};

static void spoil_magic(struct frame_msg *m) { m->hdr.magic ^= 1; }
static void spoil_version(struct frame_msg *m) { m->hdr.version = 2; }
static void spoil_type0(struct frame_msg *m) { m->hdr.type = 0; }
static void spoil_type18(struct frame_msg *m) { m->hdr.type = 18; }
static void spoil_hflags(struct frame_msg *m) { m->hdr.flags = 1; }
static void spoil_coord(struct frame_msg *m) { m->u.boot_register.coord.dp = 4; }
static void spoil_lookup(struct frame_msg *m) { m->u.boot_lookup.want.cp = FRAME_LOOKUP_TOPO_ONLY; }
static void spoil_boot_status(struct frame_msg *m) { m->u.boot_reply.status = FRAME_BOOT_NSTATUS; }
static void spoil_role(struct frame_msg *m)
{
	static struct kvw_buf b[1] = { { .role = KVW_NROLES } };

	m->u.reg.bufs = frame_bufs_of(b, 1);
}
static void spoil_bufs_null(struct frame_msg *m) { m->u.reg.bufs = frame_bufs_of(NULL, 1); }
static void spoil_desc_null(struct frame_msg *m) { m->u.reg.desc.p = NULL; }
static void spoil_required(struct frame_msg *m) { m->u.xfer_info.required_dst_info_num = 0; }
static void spoil_dummy(struct frame_msg *m) { m->u.xfer_info.dummy = 2; }
static void spoil_pages_null(struct frame_msg *m) { m->u.xfer_info.pages.p = NULL; }
static void spoil_abort(struct frame_msg *m) { m->u.abort.reason = KVW_NREASONS; }
static void spoil_atoken(struct frame_msg *m) { m->u.abort.token = 0; }
static void spoil_acktoken(struct frame_msg *m) { m->u.abort_ack.token = 0; }
static void spoil_state(struct frame_msg *m) { m->u.status.state = KVW_TRANSFERRING; }
static void spoil_sreason(struct frame_msg *m) { m->u.status.reason = UINT32_MAX; }
static void spoil_stoken(struct frame_msg *m) { m->u.status.token = 0; }
static void spoil_xtoken(struct frame_msg *m) { m->u.xfer_info.token = 0; }
static void spoil_jtoken(struct frame_msg *m) { m->u.job.token = 0; }
static void spoil_is_last(struct frame_msg *m) { m->u.send_chunk.is_last = 2; }
static void spoil_jflags(struct frame_msg *m) { m->u.job.flags = 2; }
static void spoil_copies_null(struct frame_msg *m) { m->u.job.copies.p = NULL; }
static void spoil_result(struct frame_msg *m) { m->u.job_done.result = 1; }
static void spoil_dreason(struct frame_msg *m) { m->u.job_done.reason = KVW_NREASONS; }
static void spoil_bootstrap(struct frame_msg *m)
{
	memset(m->u.recv_begin.bootstrap, 'a', FRAME_STR_SIZE);
}

static const struct bad_msg bad_msgs[] = {
	{ "magic", FRAME_PING, spoil_magic, KVW_EVERSION },
	{ "version", FRAME_PING, spoil_version, KVW_EVERSION },
	{ "type 0", FRAME_PING, spoil_type0, KVW_EINVAL },
	{ "type 18", FRAME_PING, spoil_type18, KVW_EINVAL },
	{ "header flags", FRAME_CLEAR, spoil_hflags, KVW_EINVAL },
	{ "coord outside topo", FRAME_BOOT_REGISTER, spoil_coord, KVW_EINVAL },
	{ "lookup mixed", FRAME_BOOT_LOOKUP, spoil_lookup, KVW_EINVAL },
	{ "boot status", FRAME_BOOT_REPLY, spoil_boot_status, KVW_EINVAL },
	{ "role", FRAME_REGISTER, spoil_role, KVW_EINVAL },
	{ "bufs without data", FRAME_REGISTER, spoil_bufs_null, KVW_EINVAL },
	{ "desc without data", FRAME_REGISTER, spoil_desc_null, KVW_EINVAL },
	{ "required 0", FRAME_XFER_INFO, spoil_required, KVW_EINVAL },
	{ "dummy 2", FRAME_XFER_INFO, spoil_dummy, KVW_EINVAL },
	{ "pages without data", FRAME_XFER_INFO, spoil_pages_null, KVW_EINVAL },
	{ "abort reason", FRAME_ABORT, spoil_abort, KVW_EINVAL },
	{ "abort token 0", FRAME_ABORT, spoil_atoken, KVW_EINVAL },
	{ "ack token 0", FRAME_ABORT_ACK, spoil_acktoken, KVW_EINVAL },
	{ "status state", FRAME_STATUS, spoil_state, KVW_EINVAL },
	{ "status reason", FRAME_STATUS, spoil_sreason, KVW_EINVAL },
	{ "status token 0", FRAME_STATUS, spoil_stoken, KVW_EINVAL },
	{ "xfer_info token 0", FRAME_XFER_INFO, spoil_xtoken, KVW_EINVAL },
	{ "job token 0", FRAME_JOB, spoil_jtoken, KVW_EINVAL },
	{ "is_last 2", FRAME_SEND_CHUNK, spoil_is_last, KVW_EINVAL },
	{ "job flags", FRAME_JOB, spoil_jflags, KVW_EINVAL },
	{ "copies without data", FRAME_JOB, spoil_copies_null, KVW_EINVAL },
	{ "result positive", FRAME_JOB_DONE, spoil_result, KVW_EINVAL },
	{ "done reason", FRAME_JOB_DONE, spoil_dreason, KVW_EINVAL },
	{ "unterminated string", FRAME_RECV_BEGIN, spoil_bootstrap, KVW_EINVAL },
};

static void test_encode_refuses_every_value_decode_refuses(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof bad_msgs / sizeof bad_msgs[0]; i++) {
		struct frame_msg m;
		struct frame_out out;
		char err[160] = "";
		int rc;

		fixture(bad_msgs[i].type, 0, &m);
		bad_msgs[i].spoil(&m);
		rc = frame_encode(&m, &out, err, sizeof err);
		if (rc != bad_msgs[i].rc || !err[0])
			fail_msg("%s: rc %d \"%s\"", bad_msgs[i].what, rc, err);
	}
}

/* ---- header-only decode ---- */

static void test_header_decode_reads_fields_and_refuses_wrong_length(void **state)
{
	struct frame_msg m;
	struct frame_out out;
	struct frame_hdr h;
	struct frame_part p;
	char err[160];

	(void)state;
	fixture(FRAME_XFER_INFO, 0, &m);
	encode_ok(&m, &out);
	assert_int_equal(frame_hdr_decode(&out.parts[0], &h, err, sizeof err), 0);
	assert_int_equal(h.type, FRAME_XFER_INFO);
	assert_int_equal(h.src_rank, 3);
	assert_true(h.room == 0x0102030405060708ull);
	assert_true(h.epoch == 0xA1B2C3D4E5F60718ull);
	p = (struct frame_part){ out.hdr, FRAME_HDR_LEN - 1 };
	assert_int_equal(frame_hdr_decode(&p, &h, err, sizeof err), KVW_EINVAL);
	p.len = FRAME_HDR_LEN + 1;
	assert_int_equal(frame_hdr_decode(&p, &h, NULL, 0), KVW_EINVAL);
	p = (struct frame_part){ NULL, FRAME_HDR_LEN };
	assert_int_equal(frame_hdr_decode(&p, &h, err, sizeof err), KVW_EINVAL);
}

/* Issue 14: a header epoch of 0 would skip the restart and stale checks,
 * so every type refuses it on decode (bytes from outside, epoch word
 * zeroed) and on encode. */
static void test_epoch_zero_is_refused_for_every_type_both_ways(void **state)
{
	(void)state;
	for (unsigned t = 1; t <= FRAME_TYPE_MAX; t++) {
		struct frame_msg m;
		struct frame_out out;
		struct wire w;
		char err[160];

		fixture(t, 0, &m);
		encode_ok(&m, &out);
		wire_copy(&w, out.parts, out.nparts, -1, 0, 0);
		memset(w.mem[0] + 1 + 24, 0, 8); /* the epoch u64 at offset 24 */
		assert_refused(&w, KVW_EINVAL, "epoch 0");
		wire_free(&w);
		m.hdr.epoch = 0;
		assert_int_equal(frame_encode(&m, &out, err, sizeof err), KVW_EINVAL);
		assert_non_null(strstr(err, "epoch 0"));
	}
}

/* A one-byte error buffer still gets a terminated (empty) line. */
static void test_error_text_is_truncated_to_the_callers_buffer(void **state)
{
	struct frame_part p = { "x", 1 };
	struct frame_msg m;
	char err[8];

	(void)state;
	memset(err, 'q', sizeof err);
	assert_int_equal(frame_decode(&p, 1, &m, err, 1), KVW_EINVAL);
	assert_int_equal(err[0], '\0');
	assert_int_equal(err[1], 'q');
	assert_int_equal(frame_decode(&p, 1, &m, err, sizeof err), KVW_EINVAL);
	assert_int_equal(strlen(err), sizeof err - 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_type_and_variant_round_trips_field_for_field),
		cmocka_unit_test(test_part_counts_are_one_for_header_only_types_three_for_array_types),
		cmocka_unit_test(test_type_names_cover_every_type_and_unknown_is_question_mark),
		cmocka_unit_test(test_header_and_body_bytes_are_little_endian_field_by_field),
		cmocka_unit_test(test_register_buffer_wire_form_is_24_bytes_with_zero_reserved),
		cmocka_unit_test(test_encoded_array_part_is_the_callers_array_zero_copy),
		cmocka_unit_test(test_every_truncation_of_every_part_of_every_type_is_refused),
		cmocka_unit_test(test_every_part_of_every_type_extended_by_one_byte_is_refused),
		cmocka_unit_test(test_missing_or_extra_part_is_refused_for_every_type),
		cmocka_unit_test(test_patch_table_fixtures_decode_unpatched),
		cmocka_unit_test(test_patched_fields_are_refused_with_their_reason),
		cmocka_unit_test(test_status_state_accepts_only_success_and_failed_of_256),
		cmocka_unit_test(test_buffer_role_accepts_only_known_roles_of_256),
		cmocka_unit_test(test_is_last_and_dummy_accept_only_0_and_1_of_256),
		cmocka_unit_test(test_every_reason_below_nreasons_is_accepted_and_none_above),
		cmocka_unit_test(test_nbufs_over_cap_with_short_body_is_refused_as_over_cap),
		cmocka_unit_test(test_nbufs_at_cap_round_trips_and_one_over_is_refused_by_encode),
		cmocka_unit_test(test_desc_over_cap_is_refused_by_decode_and_encode),
		cmocka_unit_test(test_string_of_255_round_trips_and_256_is_refused_by_decode_and_encode),
		cmocka_unit_test(test_page_arrays_over_cap_or_odd_length_are_refused),
		cmocka_unit_test(test_copy_array_over_cap_or_not_multiple_of_24_is_refused),
		cmocka_unit_test(test_encode_refuses_every_value_decode_refuses),
		cmocka_unit_test(test_header_decode_reads_fields_and_refuses_wrong_length),
		cmocka_unit_test(test_epoch_zero_is_refused_for_every_type_both_ways),
		cmocka_unit_test(test_error_text_is_truncated_to_the_callers_buffer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
