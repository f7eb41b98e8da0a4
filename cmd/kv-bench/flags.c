/*
 * flags.c - kv-bench's group and workload flags; see flags.h. The shape
 * flags are only checked here: they are applied after the group's own
 * shape line is read (and passed on to kv-up with --spawn).
 */
#include "flags.h"

#include <stdio.h>
#include <string.h>

#include "modes.h"
#include "base/kvw.h"
#include "base/log.h"
#include "plan/shape.h"
#include "xport/xport.h"

void kvb_flags_usage(FILE *f)
{
	fprintf(f,
		"usage: kv-bench [demo|rooms] (--run-dir DIR | --spawn) "
		"[options] [shape flags]\n"
		"       kv-bench copy [options]\n"
		"       kv-bench tcp [options]   (the tcp transport against a raw "
		"stream)\n"
		"       kv-bench history [FILE] [--plot PNG]   (the ratios --record "
		"kept)\n"
		"Simulated prefill and decode engines moving patterned KV "
		"through a kvwire group.\n"
		"  --run-dir DIR        use the group of DIR/endpoints (its "
		"shape= line is the\n"
		"                       default shape; shape flags given here "
		"override it)\n"
		"  --spawn              start a group with kv-up in a temp dir "
		"($TMPDIR, else /tmp),\n"
		"                       stop it at the end (a group that fails "
		"to start keeps its logs there)\n"
		"  --kv-up PATH         kv-up to run (default: kv-up beside "
		"this program)\n"
		"  --up-arg ARG         extra argument for kv-up (repeatable)\n"
		"  --rooms N            rooms to run (default 100)\n"
		"  --pages-per-room N   pages of each room (default 16)\n"
		"  --chunk-pages N      pages per SEND_CHUNK (default 4)\n"
		"  --zero-last          when pages-per-room is a multiple of "
		"chunk-pages, end\n"
		"                       with an empty last chunk\n"
		"  --concurrency N      rooms in flight (default 8)\n"
		"  --verify             check every destination byte (K, V, "
		"aux)\n"
		"  --no-fill            the prefill engines do not write their "
		"pages before\n"
		"                       sending them (the engine's work, not "
		"kvwire's, as in\n"
		"                       rooms mode: on a GPU engine the host CPU "
		"never does it);\n"
		"                       not with --verify\n"
		"  --seed N             room ids from N (default: random)\n"
		"  --room-timeout S     per-room deadline in seconds (default "
		"60)\n"
		"  --prefill-tp N --prefill-pp N --decode-tp N --decode-pp N\n"
		"                       topology (--prefill-ranks, "
		"--decode-ranks: the TP\n"
		"                       sizes): given to kv-up with --spawn; "
		"checked with --run-dir\n"
		"  --abort-frac F       abort that fraction of rooms (0..1) at "
		"random moments\n"
		"                       (before SEND_BEGIN, between chunks, "
		"copies in flight);\n"
		"                       once releasable their pages get a "
		"canary, checked\n"
		"                       before reuse and at the end (changed: "
		"corrupt)\n"
		"  --transport T        shm (default), tcp or cuda (given to "
		"kv-up); cuda:\n"
		"                       the engines keep KV on a GPU "
		"(registered pools);\n"
		"                       one this machine lacks exits 77 with "
		"kv-probe's text\n"
		"  --gpu-pools          the engines keep KV on a GPU with any "
		"transport (tcp:\n"
		"                       staged through the host pools; rdma: "
		"the device\n"
		"                       memory is registered with the HCA); "
		"without CUDA: 77\n"
		"  --decode-gpu N       GPU pools: the decode engines' device "
		"(default 0)\n"
		"  --engine-memory      the engines keep KV in host memory of "
		"their own, one\n"
		"                       allocation per buffer (kvw_alloc), "
		"registered in place\n"
		"  --role prefill|decode  drive only this host's side of a "
		"group split across\n"
		"                       two hosts (kv-up --role); the other "
		"side's kv-bench runs\n"
		"                       on its host with the same workload "
		"flags; the decode\n"
		"                       side draws the rooms and verifies, "
		"both print its summary\n"
		"  --peer tcp://HOST:PORT  with --role: the link between the "
		"two (prefill binds\n"
		"                       it, decode dials it), under --keys "
		"DIR or --insecure\n"
		"  --keys DIR, --insecure  the tcp:// policy of --peer "
		"(default: $KVW_KEYS)\n"
		"  --peers DIR[,DIR]    xPyD: more groups on this host (kv-up "
		"--cluster with\n"
		"                       --run-dir's), each a prefill and/or "
		"decode instance;\n"
		"                       a room runs from one instance's "
		"prefill ranks to one's\n"
		"                       decode ranks, the decode naming that "
		"prefill's bootstrap\n"
		"  --route rr|random    how a room's (prefill, decode) pair "
		"is chosen: in turn\n"
		"                       over every pair (default) or at "
		"random\n"
		"  --log-level LEVEL    error|warn|info|debug\n"
		"  --help               this text\n"
		"  %s\n"
		"Output: rooms= success= failed= aborted= stuck= corrupt= "
		"bytes= seconds=\n"
		"rooms_per_s= gib_per_s= (bytes: payload landed in decode "
		"pools by rooms that\nsucceeded). Exit: 0 every room succeeded "
		"(and verified), 1 some did not,\n100 usage (a shape flag "
		"other than the group's included), 102 the group\nwent away "
		"(a member's table removed, or no process owning it for 10 s), "
		"77 (--spawn)\na transport this machine lacks, 111 system "
		"error.\n",
		shape_usage());
	kvb_usage(f);
}

enum { O_RUN = 256, O_SPAWN, O_KVUP, O_UPARG, O_ROOMS, O_PPR, O_CHUNK,
       O_ZERO, O_CONC, O_VERIFY, O_SEED, O_TIMEOUT, O_PRANKS, O_DRANKS,
       O_PPP, O_DPP, O_ABORT, O_XPORT, O_DGPU, O_GPUPOOLS, O_ENGMEM, O_ROLE, O_PEER,
       O_PEERS, O_ROUTE, O_NOFILL };

/* --transport NAME: known, available here (else kv-probe's line and 77),
 * and handed to kv-up. -1 to go on, or the exit code. */
static int flags_transport(struct kvb_flags *f, struct bench_config *cfg,
			   char *name)
{
	static char flag[] = "--transport";
	char why[256] = "";

	if (xport_find(name) == NULL)
		return cli_bad(&f->cl, "--transport: shm, tcp or cuda, not %s",
			       name);
	if (xport_probe(name, why, sizeof why) != 0) {
		fprintf(stderr, "kv-bench: %s\n", why);
		return KVW_EXIT_SKIP;
	}
	if (f->nup + 2 > KVB_MAX_ARGS)
		return cli_bad(&f->cl, "too many --up-arg");
	f->transport = name;
	f->up_args[f->nup++] = flag;
	f->up_args[f->nup++] = name;
	if (strcmp(name, "cuda") == 0)
		cfg->cuda = 1;
	return -1;
}

/* --peers DIR[,DIR...] (repeatable; arg is argv's own string, cut in
 * place at the commas) and --route rr|random. -1 to go on, or the exit
 * code after a fatal line. */
static int flags_xpyd(const struct cli *cl, struct bench_config *cfg, int opt,
		      char *arg)
{
	if (opt == O_ROUTE) {
		if (!strcmp(arg, "rr"))
			cfg->route = BENCH_ROUTE_RR;
		else if (!strcmp(arg, "random"))
			cfg->route = BENCH_ROUTE_RANDOM;
		else
			return cli_bad(cl, "--route: rr or random, not %s", arg);
		return -1;
	}
	for (char *save = NULL, *d = strtok_r(arg, ",", &save); d;
	     d = strtok_r(NULL, ",", &save)) {
		if (cfg->npeers == BENCH_MAX_PEERS)
			return cli_bad(cl, "--peers: at most %u groups",
				       BENCH_MAX_PEERS);
		cfg->peers[cfg->npeers++] = d;
	}
	return -1;
}

int kvb_flags_parse(int argc, char **argv, struct kvb_flags *f,
		    struct bench_config *cfg)
{
	static const struct option opts[] = {
		{ "run-dir", 1, NULL, O_RUN }, { "spawn", 0, NULL, O_SPAWN },
		{ "kv-up", 1, NULL, O_KVUP }, { "up-arg", 1, NULL, O_UPARG },
		{ "rooms", 1, NULL, O_ROOMS },
		{ "pages-per-room", 1, NULL, O_PPR },
		{ "chunk-pages", 1, NULL, O_CHUNK },
		{ "zero-last", 0, NULL, O_ZERO },
		{ "concurrency", 1, NULL, O_CONC },
		{ "verify", 0, NULL, O_VERIFY }, { "seed", 1, NULL, O_SEED },
		{ "no-fill", 0, NULL, O_NOFILL },
		{ "room-timeout", 1, NULL, O_TIMEOUT },
		{ "prefill-ranks", 1, NULL, O_PRANKS }, { "prefill-pp", 1, NULL, O_PPP },
		{ "decode-ranks", 1, NULL, O_DRANKS }, { "decode-pp", 1, NULL, O_DPP },
		{ "prefill-tp", 1, NULL, O_PRANKS }, { "decode-tp", 1, NULL, O_DRANKS },
		{ "abort-frac", 1, NULL, O_ABORT },
		{ "transport", 1, NULL, O_XPORT },
		{ "decode-gpu", 1, NULL, O_DGPU },
		{ "gpu-pools", 0, NULL, O_GPUPOOLS },
		{ "engine-memory", 0, NULL, O_ENGMEM },
		{ "role", 1, NULL, O_ROLE }, { "peer", 1, NULL, O_PEER },
		{ "peers", 1, NULL, O_PEERS }, { "route", 1, NULL, O_ROUTE },
		{ NULL, 0, NULL, 0 },
	};
	struct cli *cl = &f->cl;
	int c, no_fill = 0;

	cli_init(cl, "kv-bench", CLI_LOG_LEVEL | CLI_SHAPE | CLI_AUTH, LOG_WARN,
		 NULL);
	while ((c = cli_next(cl, argc, argv, opts)) != CLI_END) {
		const char *v = cl->arg;
		uint32_t *u32 = NULL, u;
		char why[256];

		switch (c) {
		case O_RUN: f->run_dir = v; break;
		case O_SPAWN: f->spawn = 1; break;
		case O_KVUP: snprintf(f->kv_up, sizeof f->kv_up, "%s", v); break;
		case O_UPARG:
			if (f->nup == KVB_MAX_ARGS)
				return cli_bad(cl, "too many --up-arg");
			f->up_args[f->nup++] = optarg; /* == v, not const */
			break;
		case O_ROOMS: u32 = &cfg->rooms; break;
		case O_PPR: u32 = &cfg->pages_per_room; break;
		case O_CHUNK: u32 = &cfg->chunk_pages; break;
		case O_CONC: u32 = &cfg->concurrency; break;
		case O_PRANKS: u32 = &f->topo[0]; break;
		case O_PPP: u32 = &f->topo[1]; break;
		case O_DRANKS: u32 = &f->topo[2]; break;
		case O_DPP: u32 = &f->topo[3]; break;
		case O_ZERO: cfg->zero_last = 1; break;
		case O_VERIFY: cfg->verify = 1; break;
		case O_NOFILL: cfg->no_fill = no_fill = 1; break;
		case O_SEED:
			if (cli_u64(v, 0, UINT64_MAX, &cfg->seed))
				return cli_bad(cl, "bad --seed: %s", v);
			cfg->seeded = 1;
			break;
		case O_TIMEOUT:
			if (cli_double(v, 1e-9, 1e6, &cfg->room_timeout_s))
				return cli_bad(cl, "bad --room-timeout: %s", v);
			break;
		case O_XPORT:
			if ((c = flags_transport(f, cfg, optarg)) >= 0)
				return c;
			break;
		case O_DGPU:
			if (cli_u32(v, 0, 1023, &u))
				return cli_bad(cl, "bad --decode-gpu: %s", v);
			cfg->decode_gpu = (int)u;
			break;
		case O_GPUPOOLS:
			if (xport_probe("cuda", why, sizeof why) != 0) {
				fprintf(stderr, "kv-bench: %s\n", why);
				return KVW_EXIT_SKIP;
			}
			cfg->cuda = 1;
			break;
		case O_ENGMEM:
			cfg->engine_memory = 1;
			break;
		case O_ROLE:
			if (!strcmp(v, "prefill"))
				cfg->role = BENCH_ROLE_PREFILL;
			else if (!strcmp(v, "decode"))
				cfg->role = BENCH_ROLE_DECODE;
			else
				return cli_bad(cl, "--role: prefill or decode, "
					       "not %s", v);
			break;
		case O_PEER: cfg->peer = v; break;
		case O_PEERS:
		case O_ROUTE:
			if ((c = flags_xpyd(cl, cfg, c, optarg)) >= 0)
				return c;
			break;
		case O_ABORT:
			if (cli_double(v, 0, 1, &cfg->abort_frac))
				return cli_bad(cl, "bad --abort-frac (0..1): %s", v);
			break;
		case CLI_SHAPE_OPT:
			if (f->nshape == KVB_MAX_ARGS)
				return cli_bad(cl, "too many shape flags");
			f->shape_name[f->nshape] = cl->opt;
			f->shape_val[f->nshape++] = optarg;
			break;
		case CLI_HELP: kvb_flags_usage(stdout); return KVW_EXIT_OK;
		default: /* CLI_BAD: the fatal line is written */
			return KVW_EXIT_USAGE;
		}
		if (u32 && cli_u32(v, 1, UINT32_MAX, u32))
			return cli_bad(cl, "want a positive integer: %s", v);
	}
	if (!!f->run_dir + f->spawn != 1)
		return cli_bad(cl, "give exactly one of --run-dir and --spawn");
	if (no_fill && cfg->verify)
		return cli_bad(cl, "--no-fill leaves the pages unwritten: there "
			       "is nothing to --verify");
	if (!cfg->role != !cfg->peer)
		return cli_bad(cl, "--role and --peer go together");
	if (cfg->role && f->spawn)
		return cli_bad(cl, "--role drives one side of a running group: "
			       "--run-dir, not --spawn");
	if (cfg->role && cfg->abort_frac > 0)
		return cli_bad(cl, "--abort-frac needs one kv-bench driving "
			       "both sides (no --role)");
	if (cfg->npeers && (f->spawn || cfg->role))
		return cli_bad(cl, "--peers adds running groups to --run-dir's "
			       "(one host): not with --spawn or --role");
	return -1;
}

char **kvb_flags_up_args(struct kvb_flags *f)
{
	static char topo_flag[4][16] = { "--prefill-tp", "--prefill-pp",
					 "--decode-tp", "--decode-pp" };

	for (int k = 0; k < 4; k++) {
		if (!f->topo[k])
			continue;
		snprintf(f->up_num[k], sizeof f->up_num[k], "%u", f->topo[k]);
		f->up_args[f->nup++] = topo_flag[k];
		f->up_args[f->nup++] = f->up_num[k];
	}
	for (unsigned i = 0; i < f->nshape; i++) {
		snprintf(f->up_flag[i], sizeof f->up_flag[i], "--%s",
			 f->shape_name[i]);
		f->up_args[f->nup++] = f->up_flag[i];
		if (f->shape_val[i])
			f->up_args[f->nup++] = f->shape_val[i];
	}
	f->up_args[f->nup] = NULL;
	return f->up_args;
}

int kvb_flags_shape(const struct kvb_flags *f, struct shape *s,
		    const char *group, char *err, size_t errlen)
{
	for (unsigned i = 0; i < f->nshape; i++) {
		struct shape t = *s;

		if (shape_option(&t, f->shape_name[i], f->shape_val[i], err,
				 errlen) < 0)
			return KVW_EINVAL;
		/* A pattern for another shape than the group's would report
		 * corruption that is not there: refuse up front. */
		if (group && memcmp(&t, s, sizeof t) != 0)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"--%s%s%s differs from the group's shape "
					"(%s): drop the flag",
					f->shape_name[i], f->shape_val[i] ? " " : "",
					f->shape_val[i] ? f->shape_val[i] : "",
					group[0] ? group : "the defaults");
		*s = t;
	}
	return 0;
}
