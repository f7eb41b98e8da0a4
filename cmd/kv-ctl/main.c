/*
 * kv-ctl - one command or frame to one kvwire socket, then exit: PING a
 * process, look a rank up at a bootstrap, play the engine (SEND_BEGIN,
 * SEND_CHUNK, RECV_BEGIN, RECV_ABORT, CLEAR: fire and forget), or send raw
 * frames to test how a process takes hostile input. For scripts and tests;
 * see usage() for the exit codes.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootc.h"
#include "ctl.h"
#include "kvw.h"
#include "log.h"
#include "proc.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kv-ctl [OPTIONS] COMMAND EP ARGS...\n"
		"  ping EP                          PING, wait for PONG, print epoch and rtt\n"
		"  lookup EP [--coord tp,pp,cp,dp]  BOOT_LOOKUP (topology only without\n"
		"        [--page-tokens N] [--dtype N]  --coord); prints key=value lines\n"
		"  send-begin EP ROOM NPAGES AUX    engine SEND_BEGIN\n"
		"  send-chunk EP ROOM [--last] PAGES  engine SEND_CHUNK (PAGES: 1,2,3)\n"
		"  recv-begin EP ROOM BOOTSTRAP_EP AUX PAGES [--dp N]  engine RECV_BEGIN\n"
		"  abort EP ROOM                    engine RECV_ABORT\n"
		"  clear EP ROOM                    engine CLEAR\n"
		"  raw EP HEXFRAME...               one message, one part per argument\n"
		"                                   (hex bytes; \"\" is an empty part)\n"
		"Options: --timeout SECONDS (default 2), --log-level LVL, --help.\n"
		"Engine commands and raw wait for a connected peer, send and exit.\n"
		"Exit: 0 done (lookup: status OK), 1 lookup answered non-OK,\n"
		"99 no answer / no peer in time, 100 usage, 111 system error.\n");
}

int ctl_bad(const char *what, const char *arg)
{
	fprintf(stderr, "kv-ctl: fatal: %s: %s\n", what, arg);
	return KVW_EXIT_USAGE;
}

int ctl_num(const char *s, uint64_t max, uint64_t *out)
{
	char *end;

	errno = 0;
	*out = strtoull(s, &end, 0);
	return errno || end == s || *end || *s == '-' || *out > max ? -1 : 0;
}

int ctl_u32(const char *s, uint32_t *out)
{
	uint64_t v;

	if (ctl_num(s, UINT32_MAX, &v))
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/* Maps a KVW_E* of bootc to an exit code, printing err. */
int ctl_failed(int rc, const char *err)
{
	fprintf(stderr, "kv-ctl: fatal: %s\n", err);
	if (rc == KVW_ETIMEDOUT)
		return KVW_EXIT_TIMEOUT;
	return rc == KVW_EINVAL ? KVW_EXIT_USAGE : KVW_EXIT_SYS;
}

static int do_ping(void *ctx, const char *ep, const struct opts *o)
{
	struct frame_msg req, rep;
	struct wire_in in;
	char err[256];
	uint64_t t0 = proc_now_ns();
	int rc;

	frame_msg_init(&req, FRAME_PING, 0, 0, proc_epoch());
	rc = bootc_call(ctx, ep, &req, &rep, &in, o->timeout_ms, err, sizeof err);
	if (rc)
		return ctl_failed(rc, err);
	printf("pong from %s epoch 0x%016llx rtt %.3f ms\n", ep,
	       (unsigned long long)rep.hdr.epoch,
	       (double)(proc_now_ns() - t0) / 1e6);
	wire_in_release(&in);
	return KVW_EXIT_OK;
}

static int do_lookup(void *ctx, const char *ep, const struct opts *o)
{
	static const char *const names[] = { "OK", "NOT_READY", "NOT_FOUND",
					     "REFUSED" };
	struct frame_msg req, rep;
	const struct frame_boot_reply *r = &rep.u.boot_reply;
	struct wire_in in;
	char err[256];
	int rc;

	frame_msg_init(&req, FRAME_BOOT_LOOKUP, 0, 0, proc_epoch());
	if (o->have_coord) {
		req.u.boot_lookup.want = o->coord;
	} else {
		struct kvw_coord all = { FRAME_LOOKUP_TOPO_ONLY,
			FRAME_LOOKUP_TOPO_ONLY, FRAME_LOOKUP_TOPO_ONLY,
			FRAME_LOOKUP_TOPO_ONLY };
		req.u.boot_lookup.want = all;
	}
	req.u.boot_lookup.model.page_tokens = o->page_tokens;
	req.u.boot_lookup.model.dtype = o->dtype;
	rc = bootc_call(ctx, ep, &req, &rep, &in, o->timeout_ms, err, sizeof err);
	if (rc)
		return ctl_failed(rc, err);
	printf("status=%s\nepoch=0x%016llx\ntopo=%u,%u,%u,%u\ncoord=%u,%u,%u,%u\n"
	       "endpoint=%s\npage_tokens=%u\ndtype=%u\ntotal_kv_heads=%u\n"
	       "rank_kv_heads=%u\nhead_bytes=%u\nmodel_flags=0x%x\n"
	       "layer_first=%u\nlayer_count=%u\ntext=%s\n",
	       names[r->status], (unsigned long long)rep.hdr.epoch,
	       r->topo.tp, r->topo.pp, r->topo.cp, r->topo.dp, r->coord.tp,
	       r->coord.pp, r->coord.cp, r->coord.dp, r->endpoint,
	       r->model.page_tokens, r->model.dtype, r->model.total_kv_heads,
	       r->model.rank_kv_heads, r->model.head_bytes, r->model.flags,
	       r->layer_first, r->layer_count, r->text);
	rc = r->status == FRAME_BOOT_OK ? KVW_EXIT_OK : 1;
	wire_in_release(&in);
	return rc;
}

int main(int argc, char **argv)
{
	static const struct option longs[] = {
		{ "timeout", required_argument, NULL, 't' },
		{ "coord", required_argument, NULL, 'c' },
		{ "page-tokens", required_argument, NULL, 'p' },
		{ "dtype", required_argument, NULL, 'd' },
		{ "dp", required_argument, NULL, 'D' },
		{ "last", no_argument, NULL, 'x' },
		{ "log-level", required_argument, NULL, 'L' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { .timeout_ms = 2000 };
	const char *cmd;
	char **a;
	double secs;
	char *end;
	void *ctx;
	int c, n, lvl = LOG_WARN, rc;

	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", longs, NULL)) != -1) {
		switch (c) {
		case 't':
			secs = strtod(optarg, &end);
			if (*end || end == optarg || !(secs > 0 && secs < 86400))
				return ctl_bad("bad --timeout", optarg);
			o.timeout_ms = secs * 1000 < 1 ? 1 : (int)(secs * 1000);
			break;
		case 'c':
			o.have_coord = 1;
			if (sscanf(optarg, "%u,%u,%u,%u%n", &o.coord.tp, &o.coord.pp,
				   &o.coord.cp, &o.coord.dp, &n) != 4 || optarg[n])
				return ctl_bad("bad --coord (tp,pp,cp,dp)", optarg);
			break;
		case 'p':
		case 'd':
		case 'D':
			if (ctl_u32(optarg, c == 'p' ? &o.page_tokens
					   : c == 'd' ? &o.dtype : &o.dp))
				return ctl_bad("bad value", argv[optind - 1]);
			break;
		case 'x': o.last = 1; break;
		case 'L':
			lvl = log_level_parse(optarg);
			if (lvl < 0)
				return ctl_bad("bad --log-level", optarg);
			break;
		case 'h': usage(stdout); return KVW_EXIT_OK;
		case ':': return ctl_bad("option needs a value", argv[optind - 1]);
		default: return ctl_bad("unknown option", argv[optind - 1]);
		}
	}
	if (optind + 2 > argc) {
		usage(stderr);
		return ctl_bad("missing", optind < argc ? "EP" : "COMMAND");
	}
	log_init("ctl", -1, (enum log_level)lvl);
	cmd = argv[optind];
	a = argv + optind + 1;
	n = argc - optind - 1;
	ctx = zmq_ctx_new();
	if (!ctx) {
		fprintf(stderr, "kv-ctl: fatal: unable to create a zmq context\n");
		return KVW_EXIT_SYS;
	}
	if (strcmp(cmd, "ping") == 0)
		rc = n == 1 ? do_ping(ctx, a[0], &o) : ctl_bad("ping takes", "EP");
	else if (strcmp(cmd, "lookup") == 0)
		rc = n == 1 ? do_lookup(ctx, a[0], &o) : ctl_bad("lookup takes", "EP");
	else if (strcmp(cmd, "raw") == 0)
		rc = ctl_raw(ctx, a, n, &o);
	else
		rc = ctl_engine(ctx, cmd, a, n, &o);
	zmq_ctx_term(ctx);
	return rc;
}
