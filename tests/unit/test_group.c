/*
 * test_group.c - the group plan (lib/plan/group.h), its endpoints lines
 * (runinfo_format) and what the library hands engines from them
 * (kvw_group_read, kvw_pool_layout): a one-host TP 2 -> TP 4 group planned
 * member by member in start order, every line read back by runinfo_parse
 * to the member it was written from; a split group's tcp ports on both
 * sides and the decode side's lines for the prefill instances' bootstraps
 * (none, one or several: xPyD); every spec
 * kv-up must refuse, refused with the operator's message; a cap too small;
 * a line runinfo_parse would refuse is never written; shape flags read
 * back to the same shape; and an engine's view of a run directory and of
 * a rank's pool equal the plan's and shape_layout's.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api.h"
#include "plan/group.h"
#include "plan/runinfo.h"
#include "plan/shape.h"

#define CAP 300u

static char err[512];
static struct runinfo_member plan[CAP];

static struct group_spec spec(void)
{
	struct group_spec g = { .side = GROUP_BOTH, .ptp = 1, .ppp = 1,
				.dtp = 1, .dpp = 1, .dir = "/tmp/g",
				.runid = "g-1", .port_base = 17000 };

	shape_default(&g.shape);
	return g;
}

/* Plans g, writes every member's line and returns the text (static). */
static const char *plan_text(const struct group_spec *g, uint32_t *n)
{
	static char text[CAP * 512];
	size_t at = 0;

	err[0] = '\0';
	if (group_plan(g, plan, CAP, n, err, sizeof err) != 0)
		fail_msg("group_plan: %s", err);
	assert_int_equal(*n, group_size(g));
	for (uint32_t i = 0; i < *n; i++) {
		int len = runinfo_format(&plan[i], text + at, sizeof text - at);

		assert_true(len > 0);
		at += (size_t)len;
		text[at++] = '\n';
	}
	text[at] = '\0';
	return text;
}

static void refused(const struct group_spec *g, const char *what);

static void one_host_group_is_planned_in_start_order(void **state)
{
	struct group_spec g = spec();
	struct runinfo *ri = NULL;
	const char *text;
	uint32_t n;

	(void)state;
	g.ptp = 2;
	g.dtp = 4;
	text = plan_text(&g, &n);
	assert_string_equal(text,
		"member=bootstrap listen=ipc:///tmp/g/boot.sock\n"
		"member=p0 role=prefill rank=0,0 topo=2,1 "
		"listen=ipc:///tmp/g/p0.peer engine=ipc:///tmp/g/p0.eng "
		"table=/dev/shm/kvwire.g-1.p0.rooms "
		"pool=/dev/shm/kvwire.g-1.p0.pool\n"
		"member=p1 role=prefill rank=1,0 topo=2,1 "
		"listen=ipc:///tmp/g/p1.peer engine=ipc:///tmp/g/p1.eng "
		"table=/dev/shm/kvwire.g-1.p1.rooms "
		"pool=/dev/shm/kvwire.g-1.p1.pool\n"
		"member=d0 role=decode rank=0,0 topo=4,1 "
		"listen=ipc:///tmp/g/d0.peer engine=ipc:///tmp/g/d0.eng "
		"table=/dev/shm/kvwire.g-1.d0.rooms "
		"pool=/dev/shm/kvwire.g-1.d0.pool\n"
		"member=d1 role=decode rank=1,0 topo=4,1 "
		"listen=ipc:///tmp/g/d1.peer engine=ipc:///tmp/g/d1.eng "
		"table=/dev/shm/kvwire.g-1.d1.rooms "
		"pool=/dev/shm/kvwire.g-1.d1.pool\n"
		"member=d2 role=decode rank=2,0 topo=4,1 "
		"listen=ipc:///tmp/g/d2.peer engine=ipc:///tmp/g/d2.eng "
		"table=/dev/shm/kvwire.g-1.d2.rooms "
		"pool=/dev/shm/kvwire.g-1.d2.pool\n"
		"member=d3 role=decode rank=3,0 topo=4,1 "
		"listen=ipc:///tmp/g/d3.peer engine=ipc:///tmp/g/d3.eng "
		"table=/dev/shm/kvwire.g-1.d3.rooms "
		"pool=/dev/shm/kvwire.g-1.d3.pool\n"
		"member=hb0 role=heartbeat table=/dev/shm/kvwire.g-1.d0.rooms\n"
		"member=hb1 role=heartbeat table=/dev/shm/kvwire.g-1.d1.rooms\n"
		"member=hb2 role=heartbeat table=/dev/shm/kvwire.g-1.d2.rooms\n"
		"member=hb3 role=heartbeat table=/dev/shm/kvwire.g-1.d3.rooms\n"
		"member=hbp0 role=heartbeat table=/dev/shm/kvwire.g-1.p0.rooms\n"
		"member=hbp1 role=heartbeat table=/dev/shm/kvwire.g-1.p1.rooms\n");
	/* Read back, each line is the member it was written from. */
	assert_int_equal(runinfo_parse(text, strlen(text), &ri, err,
				       sizeof err), 0);
	assert_int_equal(runinfo_count(ri), n);
	for (uint32_t i = 0; i < n; i++)
		assert_memory_equal(runinfo_member(ri, i), &plan[i],
				    sizeof plan[i]);
	runinfo_free(&ri);
}

static void pipeline_stages_number_ranks_stage_by_stage(void **state)
{
	struct group_spec g = spec();
	uint32_t n;

	(void)state;
	g.ptp = 2;
	g.ppp = 3;
	g.dpp = 3;
	plan_text(&g, &n);
	/* i = pp * tp_size + tp: p5 is tp 1 of stage 2. */
	assert_string_equal(plan[6].name, "p5");
	assert_int_equal(plan[6].rank.tp, 1);
	assert_int_equal(plan[6].rank.pp, 2);
	assert_int_equal(plan[6].topo.pp, 3);
	assert_string_equal(plan[9].name, "d2");
	assert_int_equal(plan[9].rank.pp, 2);
}

static void split_group_has_tcp_ports_on_both_sides(void **state)
{
	struct group_spec g = spec();
	uint32_t n;

	(void)state;
	g.side = GROUP_PREFILL;
	g.ptp = 2;
	g.port_base = 27000;
	plan_text(&g, &n);
	assert_int_equal(n, 5); /* bootstrap, p0, p1, hbp0, hbp1 */
	/* A split group talks tcp on loopback unless told an address. */
	assert_string_equal(plan[0].listen, "tcp://127.0.0.1:27000");
	assert_string_equal(plan[2].listen, "tcp://127.0.0.1:27002");
	assert_string_equal(plan[2].engine, "ipc:///tmp/g/p1.eng");
	assert_string_equal(plan[4].name, "hbp1");

	g = spec();
	g.side = GROUP_DECODE;
	g.dtp = 2;
	g.advertise = "10.9.0.2";
	g.bootstraps = (const char *const[]){ "tcp://10.9.0.1:27000" };
	g.nboot = 1;
	plan_text(&g, &n);
	assert_int_equal(n, 5); /* the remote bootstrap, d0, d1, hb0, hb1 */
	assert_int_equal(plan[0].role, RUNINFO_BOOTSTRAP);
	assert_string_equal(plan[0].listen, "tcp://10.9.0.1:27000");
	assert_string_equal(plan[2].listen, "tcp://10.9.0.2:17513");
	assert_string_equal(plan[3].name, "hb0");
	assert_string_equal(plan[4].table, "/dev/shm/kvwire.g-1.d1.rooms");
}

static void decode_side_names_any_number_of_prefill_instances(void **state)
{
	struct group_spec g = spec();
	struct runinfo *ri = NULL;
	const char *text;
	uint32_t n;

	(void)state;
	g.side = GROUP_DECODE;
	/* None: every room names its prefill instance (xPyD routers). */
	text = plan_text(&g, &n);
	assert_int_equal(n, 2); /* d0, hb0 */
	assert_string_equal(plan[0].name, "d0");
	/* Two instances: lines bootstrap and bootstrap1, read back as
	 * bootstraps; runinfo_bootstrap is the first. */
	g.bootstraps = (const char *const[]){ "tcp://10.9.0.1:27000",
					      "tcp://10.9.0.3:27000" };
	g.nboot = 2;
	text = plan_text(&g, &n);
	assert_int_equal(n, 4);
	assert_non_null(strstr(text, "member=bootstrap listen=tcp://10.9.0.1:"
				     "27000\nmember=bootstrap1 role=bootstrap "
				     "listen=tcp://10.9.0.3:27000\n"));
	assert_int_equal(runinfo_parse(text, strlen(text), &ri, err,
				       sizeof err), 0);
	assert_int_equal(runinfo_nrole(ri, RUNINFO_BOOTSTRAP), 2);
	assert_string_equal(runinfo_bootstrap(ri), "tcp://10.9.0.1:27000");
	runinfo_free(&ri);
	/* The same instance twice is a mistake. */
	g.bootstraps = (const char *const[]){ "tcp://10.9.0.1:27000",
					      "tcp://10.9.0.1:27000" };
	refused(&g, "--bootstrap tcp://10.9.0.1:27000 given twice");
}

/* Expects group_plan to refuse g with EINVAL and `what` in err. */
static void refused(const struct group_spec *g, const char *what)
{
	uint32_t n = 99;

	err[0] = '\0';
	assert_int_equal(group_plan(g, plan, CAP, &n, err, sizeof err),
			 KVW_EINVAL);
	assert_int_equal(n, 0);
	if (!strstr(err, what))
		fail_msg("got '%s', want '%s'", err, what);
}

/* kv-up --huge-pages: the pools in the pool directory, the tables (the
 * lock-free room tables, small) still in /dev/shm. */
static void pools_go_to_the_pool_directory_tables_stay(void **state)
{
	struct group_spec g = spec();
	uint32_t n;

	(void)state;
	g.pool_dir = "/tmp/g/pools";
	(void)plan_text(&g, &n);
	for (uint32_t i = 0; i < n; i++) {
		if (!plan[i].pool[0])
			continue;
		assert_true(!strncmp(plan[i].pool, "/tmp/g/pools/kvwire.g-1.",
				     24));
		assert_true(!strncmp(plan[i].table, "/dev/shm/kvwire.g-1.", 20));
	}
	assert_string_equal(plan[1].pool, "/tmp/g/pools/kvwire.g-1.p0.pool");
}

static void every_bad_spec_is_refused_with_its_reason(void **state)
{
	char longdir[128];
	struct group_spec g;

	(void)state;
	g = spec(), g.ptp = 0;
	refused(&g, "rank and stage counts must be integers in 1..64");
	g = spec(), g.dpp = 65;
	refused(&g, "rank and stage counts");
	g = spec(), g.ppp = 2, g.dpp = 3;
	refused(&g, "--decode-pp must be 1 or the prefill PP (2), got 3");
	g = spec(), g.ptp = 2, g.dtp = 3;
	refused(&g, "prefill TP 2 and decode TP 3 do not divide one another");
	g = spec(), g.shape.kv_heads = 7, g.dtp = 2;
	refused(&g, "7 kv heads do not split over TP 2");
	g = spec(), g.dir = "tmp/g";
	refused(&g, "run directory 'tmp/g'");
	g = spec(), g.dir = "/tmp/a b";
	refused(&g, "use only A-Z a-z 0-9");
	g = spec(), g.runid = "a.b";
	refused(&g, "run id 'a.b'");
	g = spec(), g.pool_dir = "pools";
	refused(&g, "pool directory 'pools': want an absolute path");
	g = spec(), g.pool_dir = "/mnt/a b";
	refused(&g, "pool directory '/mnt/a b'");
	g = spec(), g.advertise = "host.example";
	refused(&g, "--advertise: want a numeric IP address, got "
		    "'host.example'");
	g = spec(), g.advertise = "127.0.0.1", g.port_base = 65100;
	refused(&g, "--port-base: want an integer in 1..64000");
	g = spec(), g.advertise = "127.0.0.1", g.port_base = 64000,
	g.ppp = 32, g.dtp = 64, g.dpp = 32; /* decode ports past 65535 */
	refused(&g, "do not fit");
	g = spec(), g.advertise = "127.0.0.1", g.ptp = 64, g.ppp = 8;
	refused(&g, "do not fit"); /* prefill ports into the decode's */
	g = spec(), g.side = GROUP_DECODE, g.nboot = 1,
	g.bootstraps = (const char *const[]){ "ipc:///tmp/b" };
	refused(&g, "--bootstrap: want the prefill side's tcp://HOST:PORT, "
		    "got 'ipc:///tmp/b'");
	g = spec(), g.nboot = 1,
	g.bootstraps = (const char *const[]){ "tcp://10.0.0.1:1" };
	refused(&g, "--bootstrap is for --role decode");
	memset(longdir, 'a', sizeof longdir - 1);
	longdir[0] = '/';
	longdir[sizeof longdir - 1] = '\0';
	g = spec(), g.dir = longdir;
	refused(&g, "over the limit of 107 (sun_path)");
	g = spec(), g.ptp = 64, g.ppp = 2, g.dpp = 2;
	refused(&g, "over the 256 an endpoints file holds");
	/* MLA: one latent head, whatever --heads says. */
	g = spec(), g.shape.kv_heads = 7, g.shape.mla = 1, g.dtp = 2;
	assert_int_equal(group_plan(&g, plan, CAP, &(uint32_t){ 0 }, err,
				    sizeof err), 0);
}

static void small_cap_says_how_many(void **state)
{
	struct group_spec g = spec();
	uint32_t n = 0;

	(void)state;
	g.dtp = 2;
	assert_int_equal(group_plan(&g, plan, 3, &n, err, sizeof err),
			 KVW_ENOMEM);
	assert_int_equal(n, 7);
}

static void a_line_the_parser_would_refuse_is_never_written(void **state)
{
	struct group_spec g = spec();
	struct runinfo_member m;
	char line[512];
	uint32_t n;

	(void)state;
	plan_text(&g, &n);
	m = plan[1];
	strcpy(m.table, "/dev/shm/a b");
	assert_int_equal(runinfo_format(&m, line, sizeof line), KVW_EINVAL);
	m = plan[1];
	m.topo.cp = 2;
	assert_int_equal(runinfo_format(&m, line, sizeof line), KVW_EINVAL);
	m = plan[1];
	m.rank.tp = 1; /* outside topo 1 */
	assert_int_equal(runinfo_format(&m, line, sizeof line), KVW_EINVAL);
	m = plan[0];
	strcpy(m.name, "boot=1");
	assert_int_equal(runinfo_format(&m, line, sizeof line), KVW_EINVAL);
	/* Another bootstrap's name says its role. */
	strcpy(m.name, "boot");
	assert_true(runinfo_format(&m, line, sizeof line) > 0);
	assert_string_equal(line, "member=boot role=bootstrap "
				  "listen=ipc:///tmp/g/boot.sock");
	assert_int_equal(runinfo_format(&plan[1], line, 20), KVW_ERANGE);
}

static void shape_flags_read_back_to_the_same_shape(void **state)
{
	struct shape s, back;
	char flags[512];

	(void)state;
	shape_default(&s);
	s.layers = 61;
	s.draft_layers = 3;
	s.kv_heads = 1;
	s.head_dim = 576;
	s.pages = 4096;
	s.mla = 1;
	s.naux = 3; /* SGLang-like metadata: ids, a logprob, a hidden row */
	s.aux_bytes[0] = 64;
	s.aux_bytes[1] = 4;
	s.aux_bytes[2] = 8192;
	s.kv_layout = SHAPE_KV_VLLM;
	assert_true(shape_flags(&s, flags, sizeof flags) > 0);
	assert_non_null(strstr(flags, "--layers 61 --draft-layers 3"));
	assert_non_null(strstr(flags,
			       "--aux-bytes 64,4,8192 --kv-layout vllm --mla"));
	shape_default(&back);
	assert_int_equal(runinfo_shape_apply(flags, &back, err, sizeof err), 0);
	assert_memory_equal(&s, &back, sizeof s);
	assert_int_equal(shape_flags(&s, flags, 10), KVW_ERANGE);
}

static void engines_read_the_plan_and_the_layout_through_the_api(void **state)
{
	char dir[] = "/tmp/kvw-group-XXXXXX", path[64], flags[512];
	struct kvw_member got[CAP];
	struct kvw_buf bufs[256], want[256];
	struct kvw_rank_layout rl;
	struct kvw_shape ks;
	struct group_spec g = spec();
	uint32_t n, k, nwant;
	uint64_t want_bytes;
	const char *text;
	FILE *f;

	(void)state;
	g.ptp = 2;
	g.ppp = 2;
	g.dpp = 2;
	g.shape.layers = 5;
	g.shape.draft_layers = 1;
	text = plan_text(&g, &n);
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof path, "%s/endpoints", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_true(shape_flags(&g.shape, flags, sizeof flags) > 0);
	fprintf(f, "%sshape=%s\n", text, flags);
	assert_int_equal(fclose(f), 0);

	assert_int_equal(kvw_group_read(dir, got, 2, &k, &ks, err, sizeof err),
			 KVW_ENOMEM);
	assert_int_equal(k, n);
	assert_int_equal(kvw_group_read(dir, got, CAP, &k, &ks, err,
					sizeof err), 0);
	assert_int_equal(k, n);
	for (uint32_t i = 0; i < n; i++) {
		assert_string_equal(got[i].name, plan[i].name);
		assert_int_equal(got[i].role, plan[i].role);
		assert_memory_equal(&got[i].rank, &plan[i].rank,
				    sizeof got[i].rank);
		assert_memory_equal(&got[i].topo, &plan[i].topo,
				    sizeof got[i].topo);
		assert_string_equal(got[i].pool, plan[i].pool);
		assert_string_equal(got[i].engine, plan[i].engine);
	}
	assert_int_equal(ks.layers, 5);
	assert_int_equal(ks.draft_layers, 1);

	/* Decode rank d3 (tp 1 of stage 1 of 2): layers 3 and 4, draft. */
	assert_int_equal(kvw_pool_layout(&ks, &got[6].topo, &got[6].rank, 1,
					 bufs, 256, &rl, err, sizeof err), 0);
	assert_int_equal(shape_layout(&g.shape, &plan[6].topo, &plan[6].rank,
				      1, want, 256, &nwant, &want_bytes, err,
				      sizeof err), 0);
	assert_int_equal(rl.nbufs, nwant);
	assert_memory_equal(bufs, want, nwant * sizeof *want);
	assert_int_equal(rl.pool_bytes, want_bytes);
	assert_int_equal(rl.first_layer, 3);
	assert_int_equal(rl.layers, 2);
	assert_int_equal(rl.rank_kv_heads, 8);
	/* Too small a cap says how many; a rank outside is refused. */
	assert_int_equal(kvw_pool_layout(&ks, &got[6].topo, &got[6].rank, 1,
					 bufs, 2, &rl, err, sizeof err),
			 KVW_ENOMEM);
	assert_int_equal(rl.nbufs, nwant);
	assert_int_equal(kvw_pool_layout(&ks, &(struct kvw_topo){ 2, 1, 1, 1 },
					 &(struct kvw_coord){ 0, 1, 0, 0 }, 0,
					 bufs, 256, &rl, err, sizeof err),
			 KVW_EINVAL);
	/* 8 heads over TP 16: one replicated head a rank. */
	assert_int_equal(kvw_pool_layout(&ks, &(struct kvw_topo){ 16, 1, 1, 1 },
					 &(struct kvw_coord){ 9, 0, 0, 0 }, 0,
					 bufs, 256, &rl, err, sizeof err), 0);
	assert_int_equal(rl.rank_kv_heads, 1);

	assert_int_equal(unlink(path), 0);
	assert_int_equal(kvw_group_read(dir, got, CAP, &k, NULL, err,
					sizeof err), KVW_ENOENT);
	assert_int_equal(rmdir(dir), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(one_host_group_is_planned_in_start_order),
		cmocka_unit_test(pipeline_stages_number_ranks_stage_by_stage),
		cmocka_unit_test(split_group_has_tcp_ports_on_both_sides),
		cmocka_unit_test(decode_side_names_any_number_of_prefill_instances),
		cmocka_unit_test(pools_go_to_the_pool_directory_tables_stay),
		cmocka_unit_test(every_bad_spec_is_refused_with_its_reason),
		cmocka_unit_test(small_cap_says_how_many),
		cmocka_unit_test(a_line_the_parser_would_refuse_is_never_written),
		cmocka_unit_test(shape_flags_read_back_to_the_same_shape),
		cmocka_unit_test(engines_read_the_plan_and_the_layout_through_the_api),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
