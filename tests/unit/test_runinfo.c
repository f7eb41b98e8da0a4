/*
 * test_runinfo.c - the endpoints-file parser: a full kv-up style file
 * parses into members with their roles, ranks, topologies and paths, the
 * bootstrap endpoint and the verbatim shape line; comments, blank lines,
 * CRLF endings and unknown keys are accepted; every malformed line (no
 * member, token without '=', empty key or value, duplicate key or member,
 * bad role, rank outside topo, missing engine/table/pool, over-long value
 * or line, second shape line, NUL byte) is refused with its line number;
 * runinfo_load reads DIR/endpoints and reports a missing file as ENOENT;
 * runinfo_shape_apply applies flags in both spellings and refuses unknown
 * options and bad values.
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

#include "plan/runinfo.h"
#include "plan/shape.h"

static char err[512];

static const char full[] =
	"# written by kv-up\n"
	"member=bootstrap listen=ipc:///tmp/r/boot.sock\n"
	"member=p0 role=prefill rank=0,0 topo=2,1 listen=ipc:///tmp/r/p0.peer "
	"engine=ipc:///tmp/r/p0.eng table=/dev/shm/kvwire.X.p0.rooms "
	"pool=/dev/shm/kvwire.X.p0.pool\n"
	"member=p1 role=prefill rank=1,0 topo=2,1 listen=ipc:///tmp/r/p1.peer "
	"engine=ipc:///tmp/r/p1.eng table=/dev/shm/kvwire.X.p1.rooms "
	"pool=/dev/shm/kvwire.X.p1.pool\r\n"
	"\n"
	"   \t\n"
	"member=d0 role=decode rank=0,0 topo=1,1 listen=ipc:///tmp/r/d0.peer "
	"engine=ipc:///tmp/r/d0.eng table=/dev/shm/kvwire.X.d0.rooms "
	"pool=/dev/shm/kvwire.X.d0.pool future=1\n"
	"member=hb0 role=heartbeat table=/dev/shm/kvwire.X.d0.rooms\n"
	"shape=--layers 4 --page-tokens 8 --mla  \n";

static struct runinfo *parse_ok(const char *text)
{
	struct runinfo *ri = NULL;

	err[0] = '\0';
	assert_int_equal(runinfo_parse(text, strlen(text), &ri, err,
				       sizeof err), 0);
	assert_non_null(ri);
	return ri;
}

/* Parses text, expects EINVAL mentioning "line N:" and `what`. */
static void parse_bad(const char *text, unsigned line, const char *what)
{
	struct runinfo *ri = (struct runinfo *)1;
	char want[32];

	err[0] = '\0';
	assert_int_equal(runinfo_parse(text, strlen(text), &ri, err,
				       sizeof err), KVW_EINVAL);
	assert_null(ri);
	snprintf(want, sizeof want, "line %u:", line);
	if (strncmp(err, want, strlen(want)) != 0 || !strstr(err, what))
		fail_msg("for %s: got '%s', want '%s ...%s'", text, err, want,
			 what);
}

static void full_file_parses_every_member_and_the_shape(void **state)
{
	struct runinfo *ri = parse_ok(full);
	const struct runinfo_member *m;

	(void)state;
	assert_int_equal(runinfo_count(ri), 5);
	assert_string_equal(runinfo_bootstrap(ri), "ipc:///tmp/r/boot.sock");
	assert_int_equal(runinfo_nrole(ri, RUNINFO_PREFILL), 2);
	assert_int_equal(runinfo_nrole(ri, RUNINFO_DECODE), 1);
	assert_int_equal(runinfo_nrole(ri, RUNINFO_HEARTBEAT), 1);
	m = runinfo_nth(ri, RUNINFO_PREFILL, 1);
	assert_non_null(m);
	assert_string_equal(m->name, "p1");
	assert_int_equal(m->rank.tp, 1);
	assert_int_equal(m->topo.tp, 2);
	assert_int_equal(m->topo.pp, 1);
	assert_int_equal(m->topo.cp, 1);
	assert_int_equal(m->topo.dp, 1);
	/* CRLF: the \r is not part of the value. */
	assert_string_equal(m->pool, "/dev/shm/kvwire.X.p1.pool");
	m = runinfo_find(ri, "d0");
	assert_non_null(m);
	assert_int_equal(m->role, RUNINFO_DECODE);
	assert_string_equal(m->engine, "ipc:///tmp/r/d0.eng");
	assert_string_equal(m->table, "/dev/shm/kvwire.X.d0.rooms");
	m = runinfo_find(ri, "hb0");
	assert_non_null(m);
	assert_string_equal(m->engine, "");
	assert_int_equal(m->role, RUNINFO_HEARTBEAT);
	assert_null(runinfo_find(ri, "nope"));
	assert_null(runinfo_nth(ri, RUNINFO_DECODE, 1));
	assert_null(runinfo_member(ri, 5));
	assert_string_equal(runinfo_member(ri, 0)->name, "bootstrap");
	assert_int_equal(runinfo_member(ri, 0)->role, RUNINFO_BOOTSTRAP);
	assert_string_equal(runinfo_shape(ri), "--layers 4 --page-tokens 8 --mla");
	runinfo_free(&ri);
	assert_null(ri);
	runinfo_free(&ri);
	runinfo_free(NULL);
}

static void empty_file_has_no_members_and_no_shape(void **state)
{
	struct runinfo *ri = parse_ok("# nothing yet\n\n");

	(void)state;
	assert_int_equal(runinfo_count(ri), 0);
	assert_null(runinfo_bootstrap(ri));
	assert_null(runinfo_shape(ri));
	runinfo_free(&ri);
}

static void malformed_lines_are_refused_with_their_line_number(void **state)
{
	char longval[600], longline[RUNINFO_LINE_MAX + 64];

	(void)state;
	parse_bad("role=prefill\n", 1, "no member");
	parse_bad("#c\nmember=bootstrap listen\n", 2, "not key=value");
	parse_bad("member=bootstrap =x listen=a\n", 1, "not key=value");
	parse_bad("member=bootstrap listen=\n", 1, "not key=value");
	parse_bad("member=bootstrap listen=a listen=b\n", 1, "twice");
	parse_bad("member=bootstrap listen=a\nmember=bootstrap listen=b\n", 2,
		  "listed twice");
	parse_bad("member=x role=middle\n", 1, "unknown role");
	parse_bad("member=x listen=a\n", 1, "no role");
	parse_bad("member=p0 role=prefill rank=2,0 topo=2,1 listen=a engine=b "
		  "table=c pool=d\n", 1, "rank outside");
	parse_bad("member=p0 role=prefill rank=x listen=a engine=b table=c "
		  "pool=d\n", 1, "bad rank");
	parse_bad("member=p0 role=prefill topo=0,1 listen=a engine=b table=c "
		  "pool=d\n", 1, "bad topo");
	parse_bad("member=p0 role=prefill listen=a table=c pool=d\n", 1,
		  "needs listen, engine");
	parse_bad("member=d0 role=decode listen=a engine=b table=c\n", 1,
		  "needs listen, engine");
	parse_bad("member=hb role=heartbeat\n", 1, "needs table");
	parse_bad("member=b role=bootstrap\n", 1, "needs listen");
	parse_bad("shape=--layers 2\nshape=--layers 3\n", 2, "second shape");
	memset(longval, 'a', sizeof longval - 1);
	longval[sizeof longval - 1] = '\0';
	snprintf(longline, sizeof longline, "member=bootstrap listen=%s\n",
		 longval);
	parse_bad(longline, 1, "longer than");
	memset(longline, ' ', sizeof longline - 1);
	longline[sizeof longline - 1] = '\0';
	parse_bad(longline, 1, "longer than 4096");
}

static void nul_byte_inside_a_line_is_refused(void **state)
{
	static const char text[] = "member=bootstrap listen=a\0b\n";
	struct runinfo *ri = NULL;

	(void)state;
	assert_int_equal(runinfo_parse(text, sizeof text - 1, &ri, err,
				       sizeof err), KVW_EINVAL);
	assert_null(ri);
	assert_non_null(strstr(err, "line 1: NUL"));
}

static void last_line_without_newline_is_parsed(void **state)
{
	struct runinfo *ri = parse_ok("member=bootstrap listen=ipc://x");

	(void)state;
	assert_string_equal(runinfo_bootstrap(ri), "ipc://x");
	runinfo_free(&ri);
}

static void load_reads_dir_endpoints_and_reports_missing_file(void **state)
{
	char dir[] = "/tmp/kvw-test-runinfo.XXXXXX", file[128];
	struct runinfo *ri = NULL;
	FILE *f;

	(void)state;
	assert_non_null(mkdtemp(dir));
	assert_int_equal(runinfo_load(dir, &ri, err, sizeof err), KVW_ENOENT);
	assert_null(ri);
	assert_non_null(strstr(err, "endpoints"));
	snprintf(file, sizeof file, "%s/endpoints", dir);
	f = fopen(file, "w");
	assert_non_null(f);
	fputs(full, f);
	fclose(f);
	assert_int_equal(runinfo_load(dir, &ri, err, sizeof err), 0);
	assert_int_equal(runinfo_count(ri), 5);
	runinfo_free(&ri);
	assert_int_equal(runinfo_load(file, &ri, err, sizeof err), 0);
	assert_int_equal(runinfo_count(ri), 5);
	runinfo_free(&ri);
	f = fopen(file, "w");
	assert_non_null(f);
	fputs("member=bootstrap\n", f);
	fclose(f);
	assert_int_equal(runinfo_load(dir, &ri, err, sizeof err), KVW_EINVAL);
	/* The message names the file and the line. */
	assert_non_null(strstr(err, "endpoints: line 1:"));
	unlink(file);
	rmdir(dir);
}

static void shape_flags_apply_in_both_spellings(void **state)
{
	struct shape s;

	(void)state;
	shape_default(&s);
	assert_int_equal(runinfo_shape_apply("--layers 4 --page-tokens=8 --mla "
					     "\t--heads 2", &s, err,
					     sizeof err), 0);
	assert_int_equal(s.layers, 4);
	assert_int_equal(s.page_tokens, 8);
	assert_int_equal(s.kv_heads, 2);
	assert_int_equal(s.mla, 1);
	assert_int_equal(runinfo_shape_apply("--aux-bytes 4,2,16", &s, err,
					     sizeof err), 0);
	assert_int_equal(s.naux, 3);
	assert_int_equal(s.aux_bytes[2], 16);
	/* A shorter list leaves nothing of the longer one behind. */
	assert_int_equal(runinfo_shape_apply("--aux-bytes=8", &s, err,
					     sizeof err), 0);
	assert_int_equal(s.naux, 1);
	assert_int_equal(s.aux_bytes[0], 8);
	assert_int_equal(s.aux_bytes[1], 0);
	assert_int_equal(runinfo_shape_apply(NULL, &s, err, sizeof err), 0);
	assert_int_equal(runinfo_shape_apply("", &s, err, sizeof err), 0);
}

static void bad_shape_flags_are_refused(void **state)
{
	struct shape s;

	(void)state;
	shape_default(&s);
	assert_int_equal(runinfo_shape_apply("--colour 3", &s, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "unknown option --colour"));
	assert_int_equal(runinfo_shape_apply("--layers", &s, err, sizeof err),
			 KVW_EINVAL);
	assert_int_equal(runinfo_shape_apply("--layers 0", &s, err, sizeof err),
			 KVW_EINVAL);
	assert_int_equal(runinfo_shape_apply("layers 3", &s, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "not an option"));
	assert_int_equal(s.layers, 32);
	/* Metadata buffers: an empty item, a zero, a trailing comma, a
	 * number too large, 33 buffers; the shape keeps its one buffer. */
	static const char *const bad_aux[] = {
		"--aux-bytes 4,,8", "--aux-bytes 0", "--aux-bytes 4,",
		"--aux-bytes 1048577", "--aux-bytes -4",
		"--aux-bytes 1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,"
		"1,1,1,1,1,1,1,1,1",
	};
	for (size_t i = 0; i < sizeof bad_aux / sizeof bad_aux[0]; i++) {
		assert_int_equal(runinfo_shape_apply(bad_aux[i], &s, err,
						     sizeof err), KVW_EINVAL);
		assert_non_null(strstr(err, "one per metadata buffer"));
	}
	assert_int_equal(s.naux, 1);
	assert_int_equal(s.aux_bytes[0], 64);
	assert_int_equal(runinfo_shape_apply("--kv-layout flash", &s, err,
					     sizeof err), KVW_EINVAL);
	assert_non_null(strstr(err, "want sglang"));
	assert_int_equal(runinfo_shape_apply("--kv-layout=vllm", &s, err,
					     sizeof err), 0);
	assert_int_equal(s.kv_layout, SHAPE_KV_VLLM);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(full_file_parses_every_member_and_the_shape),
		cmocka_unit_test(empty_file_has_no_members_and_no_shape),
		cmocka_unit_test(malformed_lines_are_refused_with_their_line_number),
		cmocka_unit_test(nul_byte_inside_a_line_is_refused),
		cmocka_unit_test(last_line_without_newline_is_parsed),
		cmocka_unit_test(load_reads_dir_endpoints_and_reports_missing_file),
		cmocka_unit_test(shape_flags_apply_in_both_spellings),
		cmocka_unit_test(bad_shape_flags_are_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
