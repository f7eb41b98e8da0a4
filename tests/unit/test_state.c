/*
 * test_state.c - state components (issue 32 item 3) below the roles: the
 * shape option and the per-rank layout it implies, the planner's rows of
 * a component (plan_state: the right rows of the right buffers, nothing
 * else, every row bounds-checked; a sharded component's part of a row
 * under a TP mismatch), the codec's optional state part (round trip, and
 * every malformed part refused) and the tcp grant's state rows (given
 * rows only; a prefill rank's part of a sharded row only).
 */
/* cmocka.h needs these first, in this order */
/* clang-format off */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
/* clang-format on */

#include <string.h>

#include <stdio.h>
#include <unistd.h>

#include "plan/plan.h"
#include "plan/shape.h"
#include "table/rtab_grant.h"
#include "wire/frame.h"

#define MAXB 64

static int opt(struct shape *s, const char *v)
{
	char err[256];

	return shape_option(s, "state", v, err, sizeof err);
}

static void test_state_option_parses_and_round_trips(void **st)
{
	struct shape s, back;
	char flags[1024];

	(void)st;
	shape_default(&s);
	assert_int_equal(opt(&s, "slot:16:4096,paged:512:2048:rep,exact:8:64"),
			 1);
	assert_int_equal(s.nstate, 3);
	assert_int_equal(s.state[0].kind, KVW_STATE_SLOT);
	assert_int_equal(s.state[1].kind, KVW_STATE_PAGED);
	assert_int_equal(s.state[1].replicated, 1);
	assert_int_equal(s.state[2].rows, 8);
	assert_int_equal(s.state[2].bytes, 64);
	/* shape_flags writes what shape_option reads back */
	assert_true(shape_flags(&s, flags, sizeof flags) > 0);
	assert_non_null(strstr(flags, "--state slot:16:4096,paged:512:2048:rep,"
				      "exact:8:64"));
	shape_default(&back);
	/* the value ends at the next space in the flags line */
	{
		char v[256];
		const char *at = strstr(flags, "--state ") + 8;

		memcpy(v, at, strcspn(at, " "));
		v[strcspn(at, " ")] = '\0';
		assert_int_equal(opt(&back, v), 1);
		assert_memory_equal(back.state, s.state, sizeof s.state);
	}
	/* none: no component, and no --state in the flags */
	assert_int_equal(opt(&s, "none"), 1);
	assert_int_equal(s.nstate, 0);
	assert_true(shape_flags(&s, flags, sizeof flags) > 0);
	assert_null(strstr(flags, "--state"));
	/* refused, and the shape stays as it was */
	opt(&s, "slot:4:64");
	assert_int_equal(opt(&s, "ring:4:64"), KVW_EINVAL);
	assert_int_equal(opt(&s, "slot:0:64"), KVW_EINVAL);
	assert_int_equal(opt(&s, "slot:4:0"), KVW_EINVAL);
	assert_int_equal(opt(&s, "slot:4:64:replicated"), KVW_EINVAL);
	assert_int_equal(opt(&s, "slot:4"), KVW_EINVAL);
	assert_int_equal(opt(&s, ""), KVW_EINVAL);
	assert_int_equal(opt(&s, "slot:4:64,"), KVW_EINVAL);
	assert_int_equal(opt(&s, "slot:1:1,slot:1:1,slot:1:1,slot:1:1,slot:1:1,"
				 "slot:1:1,slot:1:1,slot:1:1,slot:1:1"),
			 KVW_EINVAL);
	assert_int_equal(s.nstate, 1);
	assert_int_equal(s.state[0].rows, 4);
}

/* ":layers=N": a component of N buffers of its own, with or without
 * ":rep", read back from the flags as written; bad counts refused. */
static void test_state_of_its_own_layers_parses_and_round_trips(void **st)
{
	struct shape s, back;
	char flags[1024], v[256];
	const char *at;

	(void)st;
	shape_default(&s);
	assert_int_equal(opt(&s, "slot:16:4096:layers=36,paged:64:512:rep:"
				 "layers=7,exact:8:64"),
			 1);
	assert_int_equal(s.state[0].layers, 36);
	assert_int_equal(s.state[0].replicated, 0);
	assert_int_equal(s.state[1].layers, 7);
	assert_int_equal(s.state[1].replicated, 1);
	assert_int_equal(s.state[2].layers, 0);
	assert_true(shape_flags(&s, flags, sizeof flags) > 0);
	assert_non_null(strstr(flags, "--state slot:16:4096:layers=36,"
				      "paged:64:512:rep:layers=7,exact:8:64"));
	at = strstr(flags, "--state ") + 8;
	memcpy(v, at, strcspn(at, " "));
	v[strcspn(at, " ")] = '\0';
	shape_default(&back);
	assert_int_equal(opt(&back, v), 1);
	assert_memory_equal(back.state, s.state, sizeof s.state);
	assert_int_equal(opt(&s, "slot:4:64:layers=0"), KVW_EINVAL);
	assert_int_equal(opt(&s, "slot:4:64:layers=65536"), KVW_EINVAL);
	assert_int_equal(opt(&s, "slot:4:64:layers="), KVW_EINVAL);
	assert_int_equal(opt(&s, "slot:4:64:layers=-1"), KVW_EINVAL);
	assert_int_equal(opt(&s, "slot:4:64:layers=3x"), KVW_EINVAL);
	assert_int_equal(opt(&s, "slot:4:64:layers=3:rep"), KVW_EINVAL);
	assert_int_equal(opt(&s, "slot:4:64:lay=3"), KVW_EINVAL);
	assert_int_equal(s.state[0].layers, 36); /* unchanged */
}

/* A component of its own layers is split over PP by the layers' rule,
 * whatever the model's layers: 5 over 2 stages are 0-2 and 3-4, with 2
 * model layers (1 a stage); one of none keeps a buffer per stage layer. */
static void test_layout_splits_a_components_own_layers_over_pp(void **st)
{
	struct shape s;
	struct kvw_topo t = { 1, 2, 1, 1 };
	struct kvw_buf b[MAXB];
	uint32_t n, first, count;
	uint64_t pool;
	char err[256];

	(void)st;
	shape_default(&s);
	s.layers = 2;
	s.pages = 8;
	assert_int_equal(opt(&s, "slot:3:16:layers=5,paged:8:64"), 1);
	for (uint32_t stage = 0; stage < 2; stage++) {
		struct kvw_coord c = { 0, stage, 0, 0 };
		uint32_t own = 0, per_layer = 0;

		shape_state_layers(&s, 0, &t, &c, &first, &count);
		assert_int_equal(first, stage ? 3 : 0);
		assert_int_equal(count, stage ? 2 : 3);
		shape_state_layers(&s, 1, &t, &c, &first, &count);
		assert_int_equal(first, stage);
		assert_int_equal(count, 1);
		assert_int_equal(shape_layout(&s, &t, &c, 0, b, MAXB, &n, &pool,
					      err, sizeof err),
				 0);
		for (uint32_t i = 0; i < n; i++) {
			uint32_t l = b[i].layer_id & 0xFFFFu;

			if (b[i].role != KVW_ROLE_STATE)
				continue;
			if (KVW_STATE_OF(b[i].layer_id) == 0) {
				assert_in_range(l, stage ? 3 : 0,
						stage ? 4 : 2);
				own++;
			} else {
				assert_int_equal(l, stage);
				per_layer++;
			}
		}
		assert_int_equal(own, stage ? 2 : 3);
		assert_int_equal(per_layer, 1);
	}
}

/* The layout of rank c of tp: state buffers after the K/V buffers, one
 * per layer of the stage and component, sharded rows split over tp. */
static void test_layout_has_a_state_buffer_per_layer_and_component(void **st)
{
	struct shape s;
	struct kvw_topo t = { 2, 2, 1, 1 };
	struct kvw_coord c = { 1, 1, 0, 0 };
	struct kvw_buf b[MAXB];
	uint32_t n, nstate = 0;
	uint64_t pool;
	char err[256];

	(void)st;
	shape_default(&s);
	s.layers = 4;
	s.pages = 8;
	assert_int_equal(opt(&s, "slot:3:1000,paged:8:64:rep"), 1);
	assert_int_equal(shape_layout(&s, &t, &c, 0, b, MAXB, &n, &pool, err,
				      sizeof err),
			 0);
	for (uint32_t i = 0; i < n; i++) {
		if (b[i].role != KVW_ROLE_STATE)
			continue;
		/* stage 1 of 2 holds layers 2 and 3 */
		assert_in_range(b[i].layer_id & 0xFFFFu, 2, 3);
		if (KVW_STATE_OF(b[i].layer_id) == 0) {
			assert_int_equal(b[i].item_len, 500); /* 1000 / tp */
			assert_int_equal(b[i].pages, 3);
		} else {
			assert_int_equal(KVW_STATE_OF(b[i].layer_id), 1);
			assert_int_equal(b[i].item_len, 64); /* replicated */
			assert_int_equal(b[i].pages, 8);
		}
		/* before every AUX buffer */
		assert_int_equal(b[n - 1].role, KVW_ROLE_AUX);
		nstate++;
	}
	assert_int_equal(nstate, 4);
	assert_int_equal(b[n - 1].offset + b[n - 1].item_len * b[n - 1].pages,
			 pool);
	/* sharded rows that do not split over tp are refused */
	assert_int_equal(opt(&s, "slot:3:999"), 1);
	assert_int_equal(shape_layout(&s, &t, &c, 0, b, MAXB, &n, &pool, err,
				      sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "do not split over tp 2"));
}

struct side {
	struct kvw_model m;
	struct kvw_buf b[MAXB];
	uint32_t n;
	uint64_t size[1];
	struct plan_side ps;
};

static void side_of(struct side *sd, const char *state, uint32_t tp)
{
	struct shape s;
	struct kvw_topo t = { tp, 1, 1, 1 };
	struct kvw_coord c = { 0, 0, 0, 0 };
	char err[256];

	shape_default(&s);
	s.layers = 2;
	s.pages = 16;
	s.kv_heads = 2;
	s.head_dim = 8;
	assert_int_equal(opt(&s, state), 1);
	assert_int_equal(shape_layout(&s, &t, &c, 0, sd->b, MAXB, &sd->n,
				      &sd->size[0], err, sizeof err),
			 0);
	shape_model(&s, &t, &c, &sd->m);
	sd->ps = (struct plan_side){ &sd->m, sd->b, sd->n, sd->size, 1 };
}

static const struct kvw_buf *find(const struct side *sd, uint32_t id)
{
	for (uint32_t i = 0; i < sd->n; i++)
		if (sd->b[i].role == KVW_ROLE_STATE && sd->b[i].layer_id == id)
			return &sd->b[i];
	fail();
	return NULL;
}

static void test_plan_state_copies_the_rows_of_one_component(void **st)
{
	struct side src, dst;
	struct plan *p = NULL;
	struct plan_heads h;
	struct plan_copy out[16];
	size_t n;
	char err[256];
	const uint32_t sr[2] = { 1, 5 }, dr[2] = { 3, 0 };

	(void)st;
	side_of(&src, "slot:4:96,paged:16:32", 1);
	side_of(&dst, "slot:4:96,paged:16:32", 1);
	assert_int_equal(plan_build(&src.ps, &dst.ps, NULL, &p, err,
				    sizeof err),
			 0);
	assert_int_equal(plan_nstate(p), 4);
	/* a KV chunk never touches a state buffer */
	{
		struct plan_copy kv[64];
		const uint32_t pg[1] = { 3 };

		assert_int_equal(plan_chunk(p, pg, pg, 1, 0, 0, 0, kv, 64, &n,
					    err, sizeof err),
				 0);
		for (size_t i = 0; i < n; i++)
			assert_true(kv[i].src_off < find(&src, KVW_STATE_LAYER(0, 0))->offset);
	}
	/* component 1 (paged): rows 1 -> 3 and 5 -> 0 of each layer */
	assert_int_equal(plan_state(p, 1, sr, dr, 2, out, 16, &n, err,
				    sizeof err),
			 0);
	assert_int_equal(n, 4);
	for (uint32_t l = 0; l < 2; l++)
		for (uint32_t r = 0; r < 2; r++) {
			const struct plan_copy *c = &out[l * 2 + r];
			const struct kvw_buf *s = find(&src, KVW_STATE_LAYER(1, l));
			const struct kvw_buf *d = find(&dst, KVW_STATE_LAYER(1, l));

			assert_int_equal(c->src_off, s->offset + sr[r] * 32);
			assert_int_equal(c->dst_off, d->offset + dr[r] * 32);
			assert_int_equal(c->len, 32);
		}
	assert_int_equal(plan_state_max(p, 1, 2), 4);
	/* component 0 (slot) has 4 rows: row 5 is outside */
	assert_int_equal(plan_state(p, 0, sr, dr, 2, out, 16, &n, err,
				    sizeof err),
			 KVW_ERANGE);
	assert_non_null(strstr(err, "state component 0: row 5"));
	assert_int_equal(n, 0);
	/* too small an output: the count needed */
	assert_int_equal(plan_state(p, 1, sr, dr, 2, out, 3, &n, err,
				    sizeof err),
			 KVW_ENOMEM);
	assert_int_equal(n, 4);
	/* a component the plan lacks: nothing */
	assert_int_equal(plan_state(p, 5, sr, dr, 2, out, 16, &n, err,
				    sizeof err),
			 0);
	assert_int_equal(n, 0);
	plan_free(&p);
	/* TP 2 -> 1 of a sharded component (rows of 48 and 96 bytes):
	 * prefill rank 1's whole row is the second half of the decode's;
	 * TP 1 -> 2: decode rank 1's row is the second half of the
	 * prefill's. */
	for (int way = 0; way < 2; way++) {
		/* way 0: TP 2 (rank 1) -> 1; way 1: TP 1 -> 2 (rank 1) */
		side_of(&src, "slot:4:96", way ? 1 : 2);
		side_of(&dst, "slot:4:96", way ? 2 : 1);
		assert_int_equal(plan_heads_compute(way ? &dst.m : &src.m,
						    way ? 1 : 2, way ? 0 : 1,
						    way ? 2 : 1, way ? 1 : 0,
						    &h, err, sizeof err),
				 0);
		assert_int_equal(plan_build(&src.ps, &dst.ps, &h, &p, err,
					    sizeof err),
				 0);
		assert_int_equal(plan_state(p, 0, sr, dr, 1, out, 16, &n, err,
					    sizeof err),
				 0);
		assert_int_equal(n, 2); /* a row of each layer */
		for (uint32_t l = 0; l < 2; l++) {
			const struct kvw_buf *sb = find(&src, KVW_STATE_LAYER(0, l));
			const struct kvw_buf *db = find(&dst, KVW_STATE_LAYER(0, l));

			assert_int_equal(out[l].src_off,
					 sb->offset + 1 * sb->item_len +
					     (way ? 48 : 0));
			assert_int_equal(out[l].dst_off,
					 db->offset + 3 * db->item_len +
					     (way ? 0 : 48));
			assert_int_equal(out[l].len, 48);
		}
		plan_free(&p);
	}
	/* rows that are not one row split over the TP sizes */
	side_of(&src, "slot:4:96", 2);
	side_of(&dst, "slot:4:64", 1);
	assert_int_equal(plan_heads_compute(&src.m, 2, 0, 1, 0, &h, err,
					    sizeof err),
			 0);
	assert_int_equal(plan_build(&src.ps, &dst.ps, &h, &p, err,
				    sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "not one row split over TP"));
	/* a replicated one pairs */
	side_of(&src, "slot:4:96:rep", 2);
	side_of(&dst, "slot:4:96:rep", 1);
	assert_int_equal(plan_build(&src.ps, &dst.ps, &h, &p, err,
				    sizeof err),
			 0);
	plan_free(&p);
	/* a destination without the component */
	side_of(&src, "slot:4:96", 1);
	side_of(&dst, "none", 1);
	assert_int_equal(plan_build(&src.ps, &dst.ps, NULL, &p, err,
				    sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "state component 0 layer 0 has no destination"));
}

static void test_state_part_round_trips_and_bad_ones_are_refused(void **st)
{
	static const uint32_t a[1] = { 9 }, b[3] = { 4, 5, 6 };
	const uint32_t *lists[3] = { a, NULL, b };
	const uint32_t n[3] = { 1, 0, 3 };
	uint8_t buf[64];
	uint32_t rows[KVW_MAX_STATE_IDX];
	struct frame_msg m, back;
	struct frame_out out;
	size_t len;
	char err[256];

	(void)st;
	len = frame_state_pack(buf, sizeof buf, 3, n, lists);
	assert_int_equal(len, 4 * (3 + 4));
	frame_msg_init(&m, FRAME_SEND_CHUNK, 0, 7, 1);
	m.u.send_chunk.is_last = 1;
	m.u.send_chunk.state = (struct frame_bytes){ buf, (uint32_t)len };
	assert_int_equal(frame_encode(&m, &out, err, sizeof err), 0);
	assert_int_equal(out.nparts, 4);
	assert_int_equal(frame_decode(out.parts, out.nparts, &back, err,
				      sizeof err),
			 0);
	assert_int_equal(frame_state_lists(back.u.send_chunk.state), 3);
	assert_int_equal(frame_state_get(back.u.send_chunk.state, 0, rows), 1);
	assert_int_equal(rows[0], 9);
	assert_int_equal(frame_state_get(back.u.send_chunk.state, 1, rows), 0);
	assert_int_equal(frame_state_get(back.u.send_chunk.state, 2, rows), 3);
	assert_int_equal(rows[2], 6);
	assert_int_equal(frame_state_get(back.u.send_chunk.state, 3, rows), 0);
	/* no state: three parts, as before state existed */
	m.u.send_chunk.state = (struct frame_bytes){ NULL, 0 };
	assert_int_equal(frame_encode(&m, &out, err, sizeof err), 0);
	assert_int_equal(out.nparts, 3);
	assert_int_equal(frame_decode(out.parts, out.nparts, &back, err,
				      sizeof err),
			 0);
	assert_int_equal(back.u.send_chunk.state.len, 0);
	/* refused: a cut count, a list past the end, over the row cap,
	 * more than KVW_MAX_STATE lists; encode refuses them too */
	{
		static const struct {
			uint32_t len;
			const char *why;
		} bad[] = { { 2, "a cut count" }, { 8, "past the part's end" },
			    { 4, "over KVW_MAX_STATE_IDX" },
			    { 36, "more than the KVW_MAX_STATE lists" } };
		uint8_t raw[64];

		for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
			memset(raw, 0, sizeof raw);
			if (i == 1)
				raw[0] = 3; /* 3 rows, 1 there */
			if (i == 2)
				raw[1] = 0x20; /* 8192 rows */
			m.u.send_chunk.state = (struct frame_bytes){ raw, bad[i].len };
			assert_int_equal(frame_encode(&m, &out, err, sizeof err),
					 KVW_EINVAL);
			assert_non_null(strstr(err, bad[i].why));
			out.parts[3] = (struct frame_part){ raw, bad[i].len };
			out.nparts = 4;
			assert_int_equal(frame_decode(out.parts, 4, &back, err,
						      sizeof err),
					 KVW_EINVAL);
			assert_non_null(strstr(err, bad[i].why));
		}
	}
	/* a type without a state part takes no fourth part */
	frame_msg_init(&m, FRAME_SEND_BEGIN, 0, 7, 1);
	m.u.send_begin.num_pages = 1;
	assert_int_equal(frame_encode(&m, &out, err, sizeof err), 0);
	out.parts[out.nparts] = (struct frame_part){ buf, len };
	assert_int_equal(frame_decode(out.parts, out.nparts + 1, &back, err,
				      sizeof err),
			 KVW_EINVAL);
	/* packing refuses what the codec would */
	{
		const uint32_t big[1] = { KVW_MAX_STATE_IDX + 1 };

		assert_int_equal(frame_state_pack(buf, sizeof buf, 1, big, lists), 0);
		assert_int_equal(frame_state_pack(buf, 8, 3, n, lists), 0);
		assert_int_equal(frame_state_pack(buf, sizeof buf, KVW_MAX_STATE + 1,
						  n, lists),
				 0);
	}
}

/* A decode layout with two components (slot:4:96, paged:16:32) in *d and
 * a grant of 8 slots made for it at path (/dev/shm/kvwire.TAG-PID.grant). */
static struct rtab_grant *grant_of(struct side *d, char *path, size_t len,
				   const char *tag)
{
	struct rtab_grant *g = NULL;
	char err[256];

	side_of(d, "slot:4:96,paged:16:32", 1);
	snprintf(path, len, "/dev/shm/kvwire.%s-%d.grant", tag, (int)getpid());
	assert_int_equal(rtab_grant_create(path, 8, d->b, d->n, NULL, &g, err,
					   sizeof err),
			 0);
	return g;
}

/* The tcp sinks' grant (rtab_grant.h): a state row is writable only
 * while the room owns it, and only the rows given; rows of two
 * components are separate maps. */
static void test_grant_covers_state_rows_given_and_no_other(void **st)
{
	struct side d;
	struct rtab_grant *g = NULL, *rg = NULL;
	struct rtab_grant_read rd;
	struct rtab_ref ref = { 3, 1 };
	const struct kvw_buf *s0, *s1;
	const uint32_t rows0[1] = { 2 }, rows1[2] = { 5, 6 };
	char path[128], err[256];

	(void)st;
	g = grant_of(&d, path, sizeof path, "tstate");
	assert_int_equal(rtab_grant_open(path, &rg, err, sizeof err), 0);
	assert_int_equal(rtab_grant_give(g, ref, 77, NULL, 0,
					 RTAB_GRANT_NO_AUX),
			 0);
	assert_int_equal(rtab_grant_give_rows(g, ref, 0, rows0, 1), 0);
	assert_int_equal(rtab_grant_give_rows(g, ref, 1, rows1, 2), 0);
	assert_int_equal(rtab_grant_give_rows(g, ref, 0, rows1, 1),
			 KVW_ERANGE); /* row 5 of 4 */
	assert_int_equal(rtab_grant_give_rows(g, ref, KVW_MAX_STATE, rows0, 1),
			 KVW_EINVAL);
	assert_int_equal(rtab_grant_begin(rg, ref, rtab_grant_token(g, 77, 0),
					  &rd),
			 RTAB_GRANT_OK);
	s0 = find(&d, KVW_STATE_LAYER(0, 1));
	s1 = find(&d, KVW_STATE_LAYER(1, 0));
	assert_true(rtab_grant_covers(rg, &rd, s0->offset + 2 * 96, 96));
	assert_false(rtab_grant_covers(rg, &rd, s0->offset + 1 * 96, 96));
	assert_false(rtab_grant_covers(rg, &rd, s0->offset + 2 * 96, 97));
	assert_true(rtab_grant_covers(rg, &rd, s1->offset + 5 * 32, 64));
	assert_false(rtab_grant_covers(rg, &rd, s1->offset + 2 * 32, 32));
	rtab_grant_withdraw_rows(g, ref, 1, rows1, 2);
	assert_false(rtab_grant_covers(rg, &rd, s1->offset + 5 * 32, 32));
	assert_true(rtab_grant_covers(rg, &rd, s0->offset + 2 * 96, 96));
	rtab_grant_close(&rg);
	rtab_grant_close(&g);
	unlink(path);
}

/* Under a TP mismatch (two prefill ranks, one decode rank) a prefill
 * rank's grant target covers only its part of each row of a sharded
 * component (component 0 here), whole rows of a replicated one
 * (component 1, not in state_sharded). */
static void test_grant_covers_a_ranks_part_of_a_sharded_row(void **st)
{
	struct side d;
	struct rtab_grant *g = NULL;
	struct rtab_grant_read rd;
	struct rtab_ref ref = { 2, 1 };
	const struct kvw_buf *s0, *s1;
	const uint32_t rows[1] = { 1 };
	struct rtab_grant_target tg = {
		.layer_count = UINT32_MAX, .state_sharded = 1u << 0,
		.state_part = 1, .state_parts = 2
	};
	char path[128];

	(void)st;
	g = grant_of(&d, path, sizeof path, "tstate2");
	assert_int_equal(rtab_grant_give_targets(g, ref, 55, &tg, 1, NULL, 0,
						 RTAB_GRANT_NO_AUX),
			 0);
	assert_int_equal(rtab_grant_give_rows(g, ref, 0, rows, 1), 0);
	assert_int_equal(rtab_grant_give_rows(g, ref, 1, rows, 1), 0);
	assert_int_equal(rtab_grant_begin(g, ref, rtab_grant_token(g, 55, 0),
					  &rd),
			 RTAB_GRANT_OK);
	s0 = find(&d, KVW_STATE_LAYER(0, 0));
	s1 = find(&d, KVW_STATE_LAYER(1, 1));
	assert_true(rtab_grant_covers(g, &rd, s0->offset + 96 + 48, 48));
	assert_false(rtab_grant_covers(g, &rd, s0->offset + 96, 48));
	assert_false(rtab_grant_covers(g, &rd, s0->offset + 96, 96));
	assert_false(rtab_grant_covers(g, &rd, s0->offset + 96 + 40, 16));
	assert_true(rtab_grant_covers(g, &rd, s1->offset + 32, 32));
	rtab_grant_close(&g);
	unlink(path);
}

/* A component of its own layers (the grant's state_layers): a target
 * may write the buffers of its PP stage's share of them (t.stage), not
 * those of the model layers its stage holds, nor another stage's. */
static void test_grant_gives_a_stage_its_share_of_own_layers(void **st)
{
	struct shape s;
	struct kvw_topo t = { 1, 1, 1, 1 };
	struct kvw_coord c = { 0, 0, 0, 0 };
	struct kvw_buf b[MAXB];
	struct rtab_grant *g = NULL;
	struct rtab_grant_read rd;
	struct rtab_ref ref = { 4, 1 };
	const uint32_t own[KVW_MAX_STATE] = { 5 }, rows[1] = { 1 };
	/* stage 1 of 2: model layer 1, own layers 3 and 4 of 5 */
	struct rtab_grant_target tg = { .layer_first = 1, .layer_count = 1,
					.stage = 2u << 16 | 1 };
	uint32_t n;
	uint64_t pool;
	char path[128], err[256];

	(void)st;
	shape_default(&s);
	s.layers = 2;
	s.pages = 8;
	assert_int_equal(opt(&s, "slot:3:16:layers=5"), 1);
	assert_int_equal(shape_layout(&s, &t, &c, 0, b, MAXB, &n, &pool, err,
				      sizeof err),
			 0);
	snprintf(path, sizeof path, "/dev/shm/kvwire.town-%d.grant",
		 (int)getpid());
	assert_int_equal(rtab_grant_create(path, 8, b, n, own, &g, err,
					   sizeof err),
			 0);
	assert_int_equal(rtab_grant_give_targets(g, ref, 66, &tg, 1, NULL, 0,
						 RTAB_GRANT_NO_AUX),
			 0);
	assert_int_equal(rtab_grant_give_rows(g, ref, 0, rows, 1), 0);
	assert_int_equal(rtab_grant_begin(g, ref, rtab_grant_token(g, 66, 0),
					  &rd),
			 RTAB_GRANT_OK);
	for (uint32_t i = 0; i < n; i++) {
		uint32_t l = b[i].layer_id & 0xFFFFu;

		if (b[i].role != KVW_ROLE_STATE)
			continue;
		assert_int_equal(rtab_grant_covers(g, &rd, b[i].offset + 16,
						   16),
				 l == 3 || l == 4);
	}
	/* A target of no stage (a dummy: nothing of the decode's to write)
	 * gets no share of them. */
	tg = (struct rtab_grant_target){ .layer_first = 0,
					 .layer_count = UINT32_MAX };
	ref.gen++;
	assert_int_equal(rtab_grant_give_targets(g, ref, 67, &tg, 1, NULL, 0,
						 RTAB_GRANT_NO_AUX),
			 0);
	assert_int_equal(rtab_grant_give_rows(g, ref, 0, rows, 1), 0);
	assert_int_equal(rtab_grant_begin(g, ref, rtab_grant_token(g, 67, 0),
					  &rd),
			 RTAB_GRANT_OK);
	for (uint32_t i = 0; i < n; i++)
		if (b[i].role == KVW_ROLE_STATE)
			assert_false(rtab_grant_covers(g, &rd,
						       b[i].offset + 16, 16));
	rtab_grant_close(&g);
	unlink(path);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_state_option_parses_and_round_trips),
		cmocka_unit_test(test_layout_has_a_state_buffer_per_layer_and_component),
		cmocka_unit_test(test_plan_state_copies_the_rows_of_one_component),
		cmocka_unit_test(test_state_part_round_trips_and_bad_ones_are_refused),
		cmocka_unit_test(test_grant_covers_state_rows_given_and_no_other),
		cmocka_unit_test(test_grant_covers_a_ranks_part_of_a_sharded_row),
		cmocka_unit_test(test_state_of_its_own_layers_parses_and_round_trips),
		cmocka_unit_test(test_layout_splits_a_components_own_layers_over_pp),
		cmocka_unit_test(test_grant_gives_a_stage_its_share_of_own_layers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
