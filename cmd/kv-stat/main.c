/*
 * kv-stat - shows what is in kvwire room tables: for each table its owner
 * and counters, its rooms (id, state, reason, age, peer, pages, bytes,
 * flags) and its peers (id, endpoint, epoch, liveness, misses, last seen).
 * Tables come from a run directory's endpoints file (--run-dir, every
 * distinct table listed) or from --table. Tables are mapped read-only, so it
 * is safe to run while the owners run. Exit: 0, 1 when --room was given and
 * no table holds that room, 100 usage, 111 a table or the endpoints file
 * could not be read (the others are still shown).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "render.h"
#include "base/kvw.h"
#include "cli/cli.h"
#include "cli/runinfo.h"
#include "table/rtab.h"

#define MAX_TABLES RUNINFO_MAX_MEMBERS
#define PROG "kv-stat"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kv-stat (--run-dir DIR | --table PATH...) [--json] "
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

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');

	return s ? s + 1 : p;
}

/* Adds a table unless its path is already listed. */
static void add_table(struct render_table *tb, unsigned *n, const char *name,
		      const char *path)
{
	for (unsigned i = 0; i < *n; i++)
		if (strcmp(tb[i].path, path) == 0)
			return;
	if (*n == MAX_TABLES)
		return;
	memset(&tb[*n], 0, sizeof tb[*n]);
	tb[*n].name = name;
	tb[*n].path = path;
	(*n)++;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "run-dir", required_argument, NULL, 'd' },
		{ "table", required_argument, NULL, 't' },
		{ "json", no_argument, NULL, 'j' },
		{ "room", required_argument, NULL, 'r' },
		{ "all", no_argument, NULL, 'a' },
		{ NULL, 0, NULL, 0 },
	};
	static struct render_table tb[MAX_TABLES];
	struct render_opts ro = { 0 };
	struct runinfo *ri = NULL;
	const char *run_dir = NULL;
	struct cli cl;
	char err[512];
	unsigned n = 0, shown;
	int json = 0, c, rc = KVW_EXIT_OK;

	cli_init(&cl, PROG, 0, 0, NULL);
	while ((c = cli_next(&cl, argc, argv, opts)) != CLI_END) {
		switch (c) {
		case 'd':
			run_dir = cl.arg;
			break;
		case 't':
			add_table(tb, &n, base_name(cl.arg), cl.arg);
			break;
		case 'j':
			json = 1;
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
	if (!run_dir && n == 0) {
		cli_bad(&cl, "give --run-dir DIR or --table PATH");
		return usage_error();
	}
	if (run_dir) {
		int r = runinfo_load(run_dir, &ri, err, sizeof err);

		if (r < 0)
			return cli_fatal(PROG, cli_exit_code(r),
					 "unable to read endpoints: %s", err);
		for (uint32_t i = 0; i < runinfo_count(ri); i++) {
			const struct runinfo_member *m = runinfo_member(ri, i);

			if (m->table[0])
				add_table(tb, &n, m->name, m->table);
		}
	}
	for (unsigned i = 0; i < n; i++) {
		if (rtab_open(tb[i].path, 0, &tb[i].t, tb[i].error,
			      sizeof tb[i].error) < 0) {
			fprintf(stderr, "kv-stat: unable to open table %s: "
				"%s\n", tb[i].path, tb[i].error);
			rc = KVW_EXIT_SYS;
		}
	}
	shown = json ? render_json(stdout, tb, n, &ro)
		     : render_text(stdout, tb, n, &ro);
	if (fflush(stdout) != 0)
		rc = cli_fatal(PROG, KVW_EXIT_SYS, "unable to write output: %s",
			       strerror(errno));
	if (rc == KVW_EXIT_OK && ro.have_room && shown == 0)
		rc = 1;
	for (unsigned i = 0; i < n; i++)
		rtab_close(&tb[i].t);
	runinfo_free(&ri);
	return rc;
}
