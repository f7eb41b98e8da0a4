/*
 * kv-plan - prints the plan of a kvwire group (lib/plan/group.h) as the
 * run directory's endpoints file: one line per member in start order, then
 * the shape line. kv-up writes it to DIR/endpoints and starts what it
 * lists; it is also how to see what a kv-up command would start, without
 * starting anything. Makes nothing, opens nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvw.h"
#include "common/cli.h"
#include "plan/group.h"
#include "plan/runinfo.h"
#include "plan/shape.h"

#define PROG "kv-plan"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kv-plan --run-dir DIR [options] [shape flags]\n"
		"Prints the members of the kvwire group that kv-up would start in\n"
		"DIR (bootstrap, p<i> kv-senders, d<i> kv-receivers, hb<i> and\n"
		"hbp<i> heartbeats) as DIR/endpoints holds them, then the shape\n"
		"line. Checks the topology first; makes nothing.\n"
		"  --run-dir DIR        the run directory, absolute (A-Z a-z 0-9\n"
		"                       . _ + - and / only)\n"
		"  --runid ID           names the /dev/shm tables and pools:\n"
		"                       kvwire.ID.<member>.{rooms,pool} (default:\n"
		"                       DIR's last part); CLUSTER+ID in a cluster\n"
		"  --pool-dir PDIR      the pools in PDIR instead of /dev/shm (an\n"
		"                       absolute path; the tables stay)\n"
		"  --role R             prefill, decode or both (default)\n"
		"  --prefill-tp N       prefill TP size, 1..64 (default 1)\n"
		"  --prefill-pp N       prefill PP stages, 1..64 (default 1)\n"
		"  --decode-tp N        decode TP size, 1..64 (default 1)\n"
		"  --decode-pp N        decode PP stages: 1 or the prefill's\n"
		"  --advertise ADDR     control sockets on tcp://ADDR (default:\n"
		"                       ipc:// in DIR; 127.0.0.1 for a split group)\n"
		"  --port-base N        with ADDR: bootstrap N, prefill rank i\n"
		"                       N+1+i, decode rank i N+512+i (default 17000)\n"
		"  --bootstrap EP       --role decode: a prefill instance's\n"
		"                       kv-bootstrap, tcp://HOST:PORT (repeat for\n"
		"                       several, lines bootstrap, bootstrap1, ...;\n"
		"                       none: rooms name their instance)\n"
		"  %s\n"
		"Exit: 0 printed, 100 a usage error or a group that cannot be\n"
		"planned (the reason on stderr).\n",
		shape_usage());
}

enum { O_DIR = 1, O_RUNID, O_ROLE, O_PTP, O_PPP, O_DTP, O_DPP, O_ADV,
       O_PORT, O_BOOT, O_POOLDIR };

/* The run directory's last part as a run id: [A-Za-z0-9_-], 24 bytes. */
static void default_runid(const char *dir, char *out, size_t cap)
{
	const char *base = strrchr(dir, '/');
	size_t k = 0;

	for (base = base ? base + 1 : dir; *base && k + 1 < cap && k < 24;
	     base++, k++)
		out[k] = strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstu"
				"vwxyz0123456789_-", *base) ? *base : '_';
	out[k] = '\0';
	if (k == 0)
		snprintf(out, cap, "group");
}

static int sizes(struct cli *cl, int c, struct group_spec *g)
{
	uint32_t *at = c == O_PTP ? &g->ptp : c == O_PPP ? &g->ppp
		       : c == O_DTP ? &g->dtp : &g->dpp;

	if (cli_u32(cl->arg, 1, GROUP_MAX_SIZE, at))
		return cli_bad(cl, "--%s: want an integer in 1..%u, got '%s'",
			       cl->opt, GROUP_MAX_SIZE, cl->arg);
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option own[] = {
		{ "run-dir", required_argument, NULL, O_DIR },
		{ "runid", required_argument, NULL, O_RUNID },
		{ "role", required_argument, NULL, O_ROLE },
		{ "prefill-tp", required_argument, NULL, O_PTP },
		{ "prefill-pp", required_argument, NULL, O_PPP },
		{ "decode-tp", required_argument, NULL, O_DTP },
		{ "decode-pp", required_argument, NULL, O_DPP },
		{ "advertise", required_argument, NULL, O_ADV },
		{ "port-base", required_argument, NULL, O_PORT },
		{ "bootstrap", required_argument, NULL, O_BOOT },
		{ "pool-dir", required_argument, NULL, O_POOLDIR },
		{ NULL, 0, NULL, 0 },
	};
	struct group_spec g = { .side = GROUP_BOTH, .ptp = 1, .ppp = 1,
				.dtp = 1, .dpp = 1, .port_base = 17000 };
	struct runinfo_member *m;
	char err[512], line[RUNINFO_LINE_MAX], runid[GROUP_RUNID_MAX + 1];
	const char *boots[GROUP_MAX_BOOTSTRAPS];
	struct cli cl;
	uint32_t n;
	int c, rc;

	shape_default(&g.shape);
	cli_init(&cl, PROG, CLI_SHAPE, 0, &g.shape);
	while ((c = cli_next(&cl, argc, argv, own)) != CLI_END) {
		switch (c) {
		case CLI_HELP:
			usage(stdout);
			return KVW_EXIT_OK;
		case O_DIR:
			g.dir = cl.arg;
			break;
		case O_RUNID:
			g.runid = cl.arg;
			break;
		case O_POOLDIR:
			g.pool_dir = cl.arg;
			break;
		case O_ROLE:
			if (group_side_parse(cl.arg, &g.side))
				return cli_bad(&cl, "--role: want prefill, "
					       "decode or both, got '%s'",
					       cl.arg);
			break;
		case O_PTP:
		case O_PPP:
		case O_DTP:
		case O_DPP:
			if (sizes(&cl, c, &g))
				return KVW_EXIT_USAGE;
			break;
		case O_ADV:
			g.advertise = cl.arg;
			break;
		case O_PORT:
			if (cli_u32(cl.arg, 1, 64000, &g.port_base))
				return cli_bad(&cl, "--port-base: want an "
					       "integer in 1..64000, got '%s'",
					       cl.arg);
			break;
		case O_BOOT:
			if (g.nboot == GROUP_MAX_BOOTSTRAPS)
				return cli_bad(&cl, "more than %u --bootstrap",
					       GROUP_MAX_BOOTSTRAPS);
			boots[g.nboot++] = cl.arg;
			break;
		default:
			usage(stderr); /* CLI_BAD: after its fatal line */
			return KVW_EXIT_USAGE;
		}
	}
	if (!g.dir)
		return cli_bad(&cl, "--run-dir is required");
	g.bootstraps = boots;
	if (!g.runid) {
		default_runid(g.dir, runid, sizeof runid);
		g.runid = runid;
	}
	n = group_size(&g);
	m = calloc(n ? n : 1, sizeof *m);
	if (!m)
		return cli_fatal(PROG, KVW_EXIT_SYS, "out of memory");
	rc = group_plan(&g, m, n, &n, err, sizeof err);
	for (uint32_t i = 0; rc == 0 && i < n; i++) {
		rc = runinfo_format(&m[i], line, sizeof line);
		if (rc >= 0) {
			puts(line);
			rc = 0;
		} else {
			snprintf(err, sizeof err, "member %s: no line for it",
				 m[i].name);
		}
	}
	free(m);
	if (rc == 0 && shape_flags(&g.shape, line, sizeof line) < 0)
		rc = kvw_errf(err, sizeof err, KVW_ERANGE, "shape line too long");
	if (rc < 0)
		return cli_fatal(PROG, cli_exit_code(rc), "%s", err);
	printf("shape=%s\n", line);
	return fflush(stdout) == 0 ? KVW_EXIT_OK
				   : cli_fatal(PROG, KVW_EXIT_SYS,
					       "unable to write the plan");
}
