/*
 * test_boot.c - the bootstrap's rules, driven through lib/boot directly:
 * distinct-slot counting (a re-registration counts once and overwrites),
 * NOT_READY until every slot is in, coordinate lookups (OK / NOT_FOUND),
 * first-writer-wins topology and model with refusals that change nothing,
 * the asker's page size / dtype check with its exact text, PING, and
 * types the bootstrap does not serve. Every request goes through
 * frame_encode + frame_decode first (so it is what the codec would hand
 * over) and every reply must survive the same round trip.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "base/proc.h"
#include "roles/bootstrap/boot.h"
#include "wire/frame.h"

#define EPOCH 0x1122334455667788ull

static const struct kvw_model model16 = { 16, 3, 8, 4, 256, 0 };
static struct frame_out wire_buf;
static char err[256];

/* Encodes then decodes m into *out, failing the test if either refuses. */
static void via_wire(const struct frame_msg *m, struct frame_msg *out)
{
	assert_int_equal(frame_encode(m, &wire_buf, err, sizeof err), 0);
	assert_int_equal(frame_decode(wire_buf.parts, wire_buf.nparts, out,
				      err, sizeof err), 0);
}

/* Handles m and returns the reply after a wire round trip. */
static struct frame_msg handle(struct boot *b, const struct frame_msg *m)
{
	struct frame_msg req, reply, back;

	via_wire(m, &req);
	assert_int_equal(boot_handle(b, &req, &reply, err, sizeof err), 0);
	assert_int_equal(reply.hdr.room, m->hdr.room);
	assert_int_equal(reply.hdr.epoch, EPOCH);
	assert_int_equal(reply.hdr.src_rank, 0);
	via_wire(&reply, &back);
	return back;
}

/* The header epoch of the next reg(): the registering process. */
static uint64_t reg_epoch = 99;

static struct frame_boot_reply reg(struct boot *b, struct kvw_topo t,
				   struct kvw_coord c, const char *ep,
				   struct kvw_model model, uint32_t lf,
				   uint32_t lc)
{
	struct frame_msg m;

	frame_msg_init(&m, FRAME_BOOT_REGISTER, 7, 42, reg_epoch);
	m.u.boot_register.topo = t;
	m.u.boot_register.coord = c;
	snprintf(m.u.boot_register.endpoint, FRAME_STR_SIZE, "%s", ep);
	m.u.boot_register.model = model;
	m.u.boot_register.layer_first = lf;
	m.u.boot_register.layer_count = lc;
	m = handle(b, &m);
	assert_int_equal(m.hdr.type, FRAME_BOOT_REPLY);
	return m.u.boot_reply;
}

static struct frame_boot_reply lookup(struct boot *b, struct kvw_coord want,
				      uint32_t page_tokens, uint32_t dtype)
{
	struct frame_msg m;

	frame_msg_init(&m, FRAME_BOOT_LOOKUP, 0, 1234, 5);
	m.u.boot_lookup.want = want;
	m.u.boot_lookup.model.page_tokens = page_tokens;
	m.u.boot_lookup.model.dtype = dtype;
	m = handle(b, &m);
	assert_int_equal(m.hdr.type, FRAME_BOOT_REPLY);
	return m.u.boot_reply;
}

static const struct kvw_topo T2x2 = { .tp = 2, .pp = 2, .cp = 1, .dp = 1 };
static const struct kvw_coord TOPO_ONLY = { FRAME_LOOKUP_TOPO_ONLY,
	FRAME_LOOKUP_TOPO_ONLY, FRAME_LOOKUP_TOPO_ONLY, FRAME_LOOKUP_TOPO_ONLY };

static struct kvw_coord at(uint32_t tp, uint32_t pp)
{
	struct kvw_coord c = { .tp = tp, .pp = pp };
	return c;
}

static int setup(void **state)
{
	reg_epoch = 99;
	*state = boot_open(EPOCH, err, sizeof err);
	return *state ? 0 : -1;
}

static int teardown(void **state)
{
	struct boot *b = *state;

	boot_close(&b);
	assert_null(b);
	return 0;
}

/* A PING from the prefill rank at (tp, pp) of T2x2 with epoch e. */
static void ping(struct boot *b, uint32_t tp, uint32_t pp, uint64_t e)
{
	struct frame_msg m;

	frame_msg_init(&m, FRAME_PING, pp * T2x2.tp + tp, 1, e);
	m = handle(b, &m);
	assert_int_equal(m.hdr.type, FRAME_PONG);
}

/* Issue 14: a slot counts once. Under its epoch only an identical retry
 * is accepted (another endpoint: refused, counted); another epoch waits
 * (NOT_READY, counted) while the registered one is live - its PINGs keep
 * it so - and takes the slot, overwriting it, once that epoch is gone. */
static void test_duplicate_registration_counts_once_and_overwrites(void **state)
{
	struct boot *b = *state;
	struct frame_boot_reply r;
	uint64_t until, start;
	unsigned judged;

	assert_int_equal(boot_expected(b), 0);
	r = reg(b, T2x2, at(1, 0), "ipc://a", model16, 0, 30);
	assert_int_equal(r.status, FRAME_BOOT_OK);
	assert_int_equal(boot_expected(b), 4);
	assert_int_equal(boot_registered(b), 1);
	r = reg(b, T2x2, at(1, 0), "ipc://a", model16, 0, 30);
	assert_int_equal(r.status, FRAME_BOOT_OK);
	r = reg(b, T2x2, at(1, 0), "ipc://b", model16, 0, 30);
	assert_int_equal(r.status, FRAME_BOOT_REFUSED);
	assert_int_equal(boot_unauthorised(b), 1);
	reg_epoch = 100;
	r = reg(b, T2x2, at(1, 0), "ipc://b", model16, 0, 30);
	assert_int_equal(r.status, FRAME_BOOT_NOT_READY);
	assert_non_null(strstr(r.text, "live"));
	assert_int_equal(boot_unauthorised(b), 2);
	r = lookup(b, at(1, 0), 0, 0);
	assert_string_equal(r.endpoint, "ipc://a");
	/* Pinged, the old epoch stays live past the (shortened) window of
	 * 100 ms: for three times the window (300 ms) of pings and
	 * registrations, each registration refused while its ping is within
	 * the window. The clock is read before the ping, so a registration
	 * that returned within 50 ms of it was checked within 50 ms of the
	 * ping's refresh; one that came later (a stall of this process)
	 * proves nothing and is not judged, and the loop goes on until 30
	 * were judged, so the verdict does not depend on the machine's
	 * speed. */
	boot_set_gone_ns(b, 100000000ull);
	judged = 0;
	start = proc_now_ns();
	until = start + 60000000000ull; /* a bound, not a verdict */
	while ((judged < 30 || proc_now_ns() - start < 300000000ull) &&
	       proc_now_ns() < until) {
		uint64_t before = proc_now_ns();

		ping(b, 1, 0, 99);
		r = reg(b, T2x2, at(1, 0), "ipc://b", model16, 0, 30);
		if (proc_now_ns() - before >= 50000000ull)
			continue;
		assert_int_equal(r.status, FRAME_BOOT_NOT_READY);
		judged++;
	}
	assert_true(judged >= 30);
	/* Silent, it is gone within the window: the new epoch gets in. */
	until = proc_now_ns() + 5000000000ull;
	do
		r = reg(b, T2x2, at(1, 0), "ipc://b", model16, 0, 30);
	while (r.status == FRAME_BOOT_NOT_READY && proc_now_ns() < until);
	assert_int_equal(r.status, FRAME_BOOT_OK);
	assert_int_equal(boot_registered(b), 1);
	assert_false(boot_ready(b));
	r = lookup(b, at(1, 0), 0, 0);
	assert_int_equal(r.status, FRAME_BOOT_OK);
	assert_string_equal(r.endpoint, "ipc://b");
}

static void test_topology_lookup_is_not_ready_until_every_slot_registered(void **state)
{
	struct boot *b = *state;
	struct frame_boot_reply r;
	struct kvw_model rank0 = model16;

	r = lookup(b, TOPO_ONLY, 16, 3);
	assert_int_equal(r.status, FRAME_BOOT_NOT_READY);
	assert_string_equal(r.text, "no rank registered yet");
	rank0.rank_kv_heads = 2;
	reg(b, T2x2, at(0, 0), "ipc://r0", rank0, 0, 30);
	reg(b, T2x2, at(1, 0), "ipc://r1", model16, 0, 30);
	reg(b, T2x2, at(0, 1), "ipc://r2", model16, 30, 31);
	reg(b, T2x2, at(0, 1), "ipc://r2", model16, 30, 31);
	r = lookup(b, TOPO_ONLY, 16, 3);
	assert_int_equal(r.status, FRAME_BOOT_NOT_READY);
	assert_string_equal(r.text, "3 of 4 ranks registered");
	assert_int_equal(r.topo.tp, 2);
	assert_int_equal(r.topo.pp, 2);
	assert_false(boot_ready(b));
	reg(b, T2x2, at(1, 1), "ipc://r3", model16, 30, 31);
	assert_true(boot_ready(b));
	r = lookup(b, TOPO_ONLY, 16, 3);
	assert_int_equal(r.status, FRAME_BOOT_OK);
	assert_memory_equal(&r.topo, &T2x2, sizeof T2x2);
	assert_int_equal(r.coord.tp + r.coord.pp + r.coord.cp + r.coord.dp, 0);
	assert_memory_equal(&r.model, &rank0, sizeof rank0);
	assert_int_equal(r.layer_first, 0);
	assert_int_equal(r.layer_count, 30);
	assert_string_equal(r.endpoint, "");
}

static void test_coord_lookup_gives_endpoint_model_layers_or_not_found(void **state)
{
	struct boot *b = *state;
	struct frame_boot_reply r;
	struct kvw_model m = model16;
	struct kvw_coord outside = { .tp = 0, .pp = 0, .cp = 0, .dp = 1 };

	r = lookup(b, at(0, 1), 0, 0);
	assert_int_equal(r.status, FRAME_BOOT_NOT_READY);
	m.rank_kv_heads = 1;
	reg(b, T2x2, at(0, 1), "tcp://10.0.0.2:7000", m, 30, 31);
	r = lookup(b, at(0, 1), 16, 0);
	assert_int_equal(r.status, FRAME_BOOT_OK);
	assert_string_equal(r.endpoint, "tcp://10.0.0.2:7000");
	assert_int_equal(r.coord.pp, 1);
	assert_int_equal(r.model.rank_kv_heads, 1);
	assert_int_equal(r.layer_first, 30);
	assert_int_equal(r.layer_count, 31);
	r = lookup(b, at(1, 1), 16, 0);
	assert_int_equal(r.status, FRAME_BOOT_NOT_FOUND);
	assert_string_equal(r.text, "rank tp=1 pp=1 cp=0 dp=0 not registered");
	r = lookup(b, outside, 16, 0);
	assert_int_equal(r.status, FRAME_BOOT_NOT_FOUND);
	assert_string_equal(r.text, "no rank tp=0 pp=0 cp=0 dp=1 in the topology");
}

static void test_conflicting_topology_is_refused_and_changes_nothing(void **state)
{
	struct boot *b = *state;
	struct kvw_topo t4 = { .tp = 4, .pp = 1, .cp = 1, .dp = 1 };
	struct frame_boot_reply r;

	reg(b, T2x2, at(0, 0), "ipc://r0", model16, 0, 30);
	r = reg(b, t4, at(3, 0), "ipc://x", model16, 0, 61);
	assert_int_equal(r.status, FRAME_BOOT_REFUSED);
	assert_string_equal(r.text, "topology mismatch: instance tp=2 pp=2 cp=1 dp=1, "
			    "rank says tp=4 pp=1 cp=1 dp=1");
	assert_int_equal(boot_expected(b), 4);
	assert_int_equal(boot_registered(b), 1);
	/* Same slot number under the wrong topo must not have been written. */
	r = lookup(b, at(0, 0), 0, 0);
	assert_string_equal(r.endpoint, "ipc://r0");
}

static void test_registration_with_other_page_size_or_dtype_is_refused(void **state)
{
	struct boot *b = *state;
	struct kvw_model m32 = model16, fp8 = model16, heads = model16;
	struct frame_boot_reply r;

	m32.page_tokens = 32;
	fp8.dtype = 9;
	heads.rank_kv_heads = 3; /* per rank: may differ */
	reg(b, T2x2, at(0, 0), "ipc://r0", model16, 0, 30);
	r = reg(b, T2x2, at(1, 0), "ipc://r1", m32, 0, 30);
	assert_int_equal(r.status, FRAME_BOOT_REFUSED);
	assert_string_equal(r.text, "page size mismatch: instance 16 tokens, rank 32");
	r = reg(b, T2x2, at(1, 0), "ipc://r1", fp8, 0, 30);
	assert_int_equal(r.status, FRAME_BOOT_REFUSED);
	assert_string_equal(r.text, "dtype mismatch: instance 3, rank 9");
	assert_int_equal(boot_registered(b), 1);
	r = reg(b, T2x2, at(1, 0), "ipc://r1", heads, 0, 30);
	assert_int_equal(r.status, FRAME_BOOT_OK);
	assert_int_equal(boot_registered(b), 2);
}

static void test_lookup_with_other_page_size_or_dtype_is_refused_with_text(void **state)
{
	struct boot *b = *state;
	struct frame_boot_reply r;

	reg(b, T2x2, at(0, 0), "ipc://r0", model16, 0, 30);
	r = lookup(b, TOPO_ONLY, 32, 3);
	assert_int_equal(r.status, FRAME_BOOT_REFUSED);
	assert_string_equal(r.text, "page size mismatch: prefill 16 tokens, decode 32");
	r = lookup(b, at(0, 0), 32, 0);
	assert_int_equal(r.status, FRAME_BOOT_REFUSED);
	r = lookup(b, at(0, 0), 16, 5);
	assert_int_equal(r.status, FRAME_BOOT_REFUSED);
	assert_string_equal(r.text, "dtype mismatch: prefill 3, decode 5");
	/* Unstated values (0) are not compared. */
	assert_int_equal(lookup(b, at(0, 0), 16, 0).status, FRAME_BOOT_OK);
	assert_int_equal(lookup(b, at(0, 0), 0, 0).status, FRAME_BOOT_OK);
}

static void test_lookup_dtype_is_ignored_when_prefill_states_none(void **state)
{
	struct boot *b = *state;
	struct kvw_model any = model16;

	any.dtype = 0;
	reg(b, T2x2, at(0, 0), "ipc://r0", any, 0, 30);
	assert_int_equal(lookup(b, at(0, 0), 16, 5).status, FRAME_BOOT_OK);
}

static void test_oversized_or_endpointless_registration_fixes_nothing(void **state)
{
	struct boot *b = *state;
	struct kvw_topo huge = { .tp = BOOT_MAX_RANKS, .pp = 2, .cp = 1, .dp = 1 };
	struct kvw_topo wide = { .tp = 65536, .pp = 65536, .cp = 65536, .dp = 65536 };
	struct frame_boot_reply r;

	r = reg(b, huge, at(0, 0), "ipc://r0", model16, 0, 30);
	assert_int_equal(r.status, FRAME_BOOT_REFUSED);
	assert_non_null(strstr(r.text, "more than 4096 ranks"));
	r = reg(b, wide, at(0, 0), "ipc://r0", model16, 0, 30);
	assert_int_equal(r.status, FRAME_BOOT_REFUSED);
	r = reg(b, T2x2, at(0, 0), "", model16, 0, 30);
	assert_int_equal(r.status, FRAME_BOOT_REFUSED);
	assert_string_equal(r.text, "empty endpoint");
	assert_int_equal(boot_expected(b), 0);
	assert_int_equal(boot_registered(b), 0);
	r = reg(b, T2x2, at(0, 0), "ipc://r0", model16, 0, 30);
	assert_int_equal(r.status, FRAME_BOOT_OK);
	assert_int_equal(boot_expected(b), 4);
}

static void test_topology_of_exactly_max_ranks_is_ready_when_all_register(void **state)
{
	struct boot *b = *state;
	struct kvw_topo t = { .tp = 8, .pp = 4, .cp = 2, .dp = BOOT_MAX_RANKS / 64 };
	struct kvw_coord c;

	for (c.dp = 0; c.dp < t.dp; c.dp++)
		for (c.cp = 0; c.cp < t.cp; c.cp++)
			for (c.tp = 0; c.tp < t.tp; c.tp++)
				for (c.pp = 0; c.pp < t.pp; c.pp++)
					assert_int_equal(reg(b, t, c, "ipc://r", model16,
							     0, 1).status, FRAME_BOOT_OK);
	assert_int_equal(boot_expected(b), BOOT_MAX_RANKS);
	assert_int_equal(boot_registered(b), BOOT_MAX_RANKS);
	assert_true(boot_ready(b));
}

static void test_ping_gets_header_only_pong_with_room_and_own_epoch(void **state)
{
	struct boot *b = *state;
	struct frame_msg m;

	frame_msg_init(&m, FRAME_PING, 3, 77, 1);
	m = handle(b, &m);
	assert_int_equal(m.hdr.type, FRAME_PONG);
	assert_int_equal(m.hdr.room, 77);
}

static void test_types_the_bootstrap_does_not_serve_are_einval(void **state)
{
	static const unsigned types[] = { FRAME_PONG, FRAME_BOOT_REPLY,
		FRAME_SEND_BEGIN, FRAME_CLEAR, FRAME_ABORT };
	struct boot *b = *state;
	struct frame_msg req, reply;

	for (size_t i = 0; i < sizeof types / sizeof types[0]; i++) {
		frame_msg_init(&req, types[i], 0, 1, 1);
		err[0] = '\0';
		assert_int_equal(boot_handle(b, &req, &reply, err, sizeof err),
				 KVW_EINVAL);
		assert_non_null(strstr(err, "not a bootstrap request"));
	}
	assert_int_equal(boot_registered(b), 0);
	assert_int_equal(boot_expected(b), 0);
}

static void test_close_accepts_null_and_null_pointer(void **state)
{
	struct boot *none = NULL, *b;

	(void)state;
	boot_close(NULL);
	boot_close(&none);
	b = boot_open(EPOCH, err, sizeof err);
	assert_non_null(b);
	boot_close(&b);
	assert_null(b);
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	const struct CMUnitTest tests[] = {
		T(test_duplicate_registration_counts_once_and_overwrites),
		T(test_topology_lookup_is_not_ready_until_every_slot_registered),
		T(test_coord_lookup_gives_endpoint_model_layers_or_not_found),
		T(test_conflicting_topology_is_refused_and_changes_nothing),
		T(test_registration_with_other_page_size_or_dtype_is_refused),
		T(test_lookup_with_other_page_size_or_dtype_is_refused_with_text),
		T(test_lookup_dtype_is_ignored_when_prefill_states_none),
		T(test_oversized_or_endpointless_registration_fixes_nothing),
		T(test_topology_of_exactly_max_ranks_is_ready_when_all_register),
		T(test_ping_gets_header_only_pong_with_room_and_own_epoch),
		T(test_types_the_bootstrap_does_not_serve_are_einval),
		cmocka_unit_test(test_close_accepts_null_and_null_pointer),
	};
#undef T
	return cmocka_run_group_tests(tests, NULL, NULL);
}
