/*
 * kv-stat - shows what is in kvwire room tables: for each table its owner
 * and counters, its rooms (id, state, reason, age, peer, pages, bytes,
 * flags) and its peers (id, endpoint, epoch, liveness, misses, last seen).
 * Tables come from a run directory's endpoints file (--run-dir, every
 * distinct table listed) or from --table. Tables are mapped read-only, so it
 * is safe to run while the owners run. --prom prints the measures in the
 * Prometheus text format (prom.c), --serve answers GET /metrics over HTTP
 * (serve.c), --watch refreshes a top-like view (watch.c).
 * Exit: 0, 1 when --room was given and
 * no table holds that room, 100 usage, 111 a table or the endpoints file
 * could not be read (the others are still shown).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "prom.h"
#include "render.h"
#include "serve.h"
#include "tables.h"
#include "watch.h"
#include "base/kvw.h"
#include "common/cli.h"
#include "plan/runinfo.h"
#include "table/rtab.h"

#define PROG "kv-stat"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kv-stat (--run-dir DIR | --table PATH...) [--json | --prom |\n"
		"               --serve ADDR | --watch SECS [--count N]] "
		"[--room ID] [--all]\n"
		"Shows the rooms, peers and counters of kvwire room tables "
		"(read-only).\n"
		"  --run-dir DIR  every table listed in DIR/endpoints\n"
		"  --table PATH   one table (may be repeated)\n"
		"  --json         one JSON document: {\"tables\":[{\"name\","
		"\"path\",\"owner_epoch\",\n"
		"                 \"counters\":{...},\"rooms\":[...],"
		"\"peers\":[...]}]};\n"
		"                 room ids are decimal strings (64-bit safe)\n"
		"  --prom         the measures in the Prometheus text format\n"
		"  --serve ADDR   answer GET /metrics over HTTP on ADDR "
		"(PORT, :PORT or\n"
		"                 IPV4:PORT; loopback unless a host is given) "
		"until SIGTERM\n"
		"  --watch SECS   refresh a top-like view every SECS seconds "
		"until ^C\n"
		"  --count N      with --watch: stop after N refreshes\n"
		"  --room ID      only that room (decimal or 0x hex), "
		"Cleared included;\n"
		"                 exit 1 when no table has it\n"
		"  --all          include Cleared rooms\n"
		"  --help         this text\n"
		"Exit: 0 ok, 1 room not found, 100 usage, 111 a table or the "
		"endpoints file\ncould not be read.\n");
}

/* After a usage error's fatal line: the usage on stderr. Returns
 * KVW_EXIT_USAGE. */
static int usage_error(void)
{
	usage(stderr);
	return KVW_EXIT_USAGE;
}

enum mode { M_TEXT, M_JSON, M_PROM, M_SERVE, M_WATCH };

/* One look at the tables: text, JSON or Prometheus. */
static int show_once(struct tables *ts, enum mode mode,
		     const struct render_opts *ro)
{
	unsigned shown = 0;
	int rc = KVW_EXIT_OK, r = tables_load(ts);

	if (r < 0)
		return cli_fatal(PROG, cli_exit_code(r),
				 "unable to read endpoints: %s", ts->err);
	for (unsigned i = 0; i < ts->n; i++) {
		if (ts->tb[i].t)
			continue;
		fprintf(stderr, "kv-stat: unable to open table %s: %s\n",
			ts->tb[i].path, ts->tb[i].error);
		rc = KVW_EXIT_SYS;
	}
	if (mode == M_PROM)
		prom_write(stdout, ts->tb, ts->n);
	else
		shown = mode == M_JSON ? render_json(stdout, ts->tb, ts->n, ro)
				       : render_text(stdout, ts->tb, ts->n, ro);
	if (fflush(stdout) != 0)
		rc = cli_fatal(PROG, KVW_EXIT_SYS, "unable to write output: %s",
			       strerror(errno));
	if (rc == KVW_EXIT_OK && ro->have_room && shown == 0)
		rc = 1;
	tables_unload(ts);
	return rc;
}

static int set_mode(const struct cli *cl, enum mode *mode, enum mode m)
{
	if (*mode != M_TEXT && *mode != m) {
		cli_bad(cl, "give one of --json, --prom, --serve, --watch");
		return -1;
	}
	*mode = m;
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "run-dir", required_argument, NULL, 'd' },
		{ "table", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 'j' },
		{ "prom", no_argument, NULL, 'p' },
		{ "serve", required_argument, NULL, 's' },
		{ "watch", required_argument, NULL, 'w' },
		{ "count", required_argument, NULL, 'n' },
		{ "room", required_argument, NULL, 'r' },
		{ "all", no_argument, NULL, 'a' },
		{ NULL, 0, NULL, 0 },
	};
	static struct tables ts;
	struct render_opts ro = { 0 };
	enum mode mode = M_TEXT;
	const char *serve_addr = NULL;
	uint64_t period_ns = 0;
	uint32_t count = 0;
	struct cli cl;
	char err[512], host[64];
	unsigned port = 0;
	int c, rc;

	cli_init(&cl, PROG, 0, 0, NULL);
	while ((c = cli_next(&cl, argc, argv, opts)) != CLI_END) {
		switch (c) {
		case 'd':
			ts.run_dir = cl.arg;
			break;
		case 't':
			tables_add_path(&ts, cl.arg);
			break;
		case 'j':
			if (set_mode(&cl, &mode, M_JSON) < 0)
				return usage_error();
			break;
		case 'p':
			if (set_mode(&cl, &mode, M_PROM) < 0)
				return usage_error();
			break;
		case 's':
			if (set_mode(&cl, &mode, M_SERVE) < 0)
				return usage_error();
			serve_addr = cl.arg;
			break;
		case 'w':
			if (set_mode(&cl, &mode, M_WATCH) < 0)
				return usage_error();
			if (cli_seconds(cl.arg, 0.05, 3600, &period_ns)) {
				cli_bad(&cl, "bad --watch seconds: %s", cl.arg);
				return usage_error();
			}
			break;
		case 'n':
			if (cli_u32(cl.arg, 1, UINT32_MAX, &count)) {
				cli_bad(&cl, "bad --count: %s", cl.arg);
				return usage_error();
			}
			break;
		case 'a':
			ro.all = 1;
			break;
		case 'r':
			if (cli_u64(cl.arg, 0, UINT64_MAX, &ro.room)) {
				cli_bad(&cl, "bad room id: %s", cl.arg);
				return usage_error();
			}
			ro.have_room = 1;
			break;
		case CLI_HELP:
			usage(stdout);
			return KVW_EXIT_OK;
		default: /* CLI_BAD: the fatal line is written */
			return usage_error();
		}
	}
	if (!ts.run_dir && ts.npaths == 0) {
		cli_bad(&cl, "give --run-dir DIR or --table PATH");
		return usage_error();
	}
	if (count && mode != M_WATCH) {
		cli_bad(&cl, "--count goes with --watch");
		return usage_error();
	}
	if (mode == M_SERVE) {
		if (serve_parse_addr(serve_addr, host, sizeof host, &port, err,
				     sizeof err) < 0) {
			cli_bad(&cl, "--serve: %s", err);
			return usage_error();
		}
		rc = serve_run(&ts, host, port, err, sizeof err);
		return rc < 0 ? cli_fatal(PROG, cli_exit_code(rc), "%s", err)
			      : KVW_EXIT_OK;
	}
	if (mode == M_WATCH) {
		rc = watch_run(&ts, period_ns, count, stdout);
		return rc < 0 ? cli_fatal(PROG, cli_exit_code(rc),
					  "unable to read endpoints: %s", ts.err)
			      : KVW_EXIT_OK;
	}
	return show_once(&ts, mode, &ro);
}
