/*
 * kv-ctl - one command or frame to one kvwire socket, then exit: PING a
 * process, look a rank up at a bootstrap, play the engine (SEND_BEGIN,
 * SEND_CHUNK, RECV_BEGIN, RECV_ABORT, CLEAR: fire and forget), or send raw
 * frames to test how a process takes hostile input. For scripts and tests;
 * see usage() for the exit codes.
 */
#include <stdio.h>
#include <string.h>

#include "ctl.h"
#include "base/kvw.h"
#include "base/log.h"
#include "base/proc.h"
#include "common/cli.h"
#include "plan/shape.h"
#include "roles/bootstrap/bootc.h"

#define PROG "kv-ctl"

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
		"Options: --timeout SECONDS (default 2), --log-level LVL, --help,\n"
		"  --keys DIR (the group's keys, for a tcp:// EP; default $KVW_KEYS),\n"
		"  --insecure (a tcp:// EP without authentication).\n"
		"Engine commands and raw wait for a connected peer, send and exit.\n"
		"Exit: 0 done (lookup: status OK), 1 lookup answered non-OK,\n"
		"99 no answer / no peer in time, 100 usage, 111 system error.\n");
}

int ctl_bad(const char *what, const char *arg)
{
	return cli_fatal(PROG, KVW_EXIT_USAGE, "%s: %s", what, arg);
}

int ctl_failed(int rc, const char *err)
{
	return cli_fatal(PROG, cli_exit_code(rc), "%s", err);
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
		{ NULL, 0, NULL, 0 },
	};
	struct opts o = { .timeout_ms = 2000 };
	struct cli cl;
	const char *cmd;
	uint32_t q[4];
	char **a;
	double secs;
	void *ctx;
	int c, n, rc;

	cli_init(&cl, PROG, CLI_LOG_LEVEL | CLI_OPERANDS | CLI_AUTH, LOG_WARN,
		 NULL);
	while ((c = cli_next(&cl, argc, argv, longs)) != CLI_END) {
		switch (c) {
		case 't':
			if (cli_double(cl.arg, 1e-9, 86400, &secs))
				return ctl_bad("bad --timeout", cl.arg);
			o.timeout_ms = secs * 1000 < 1 ? 1 : (int)(secs * 1000);
			break;
		case 'c':
			o.have_coord = 1;
			if (shape_parse_quad(cl.arg, 0, q))
				return ctl_bad("bad --coord (tp,pp,cp,dp)", cl.arg);
			o.coord = (struct kvw_coord){ q[0], q[1], q[2], q[3] };
			break;
		case 'p':
		case 'd':
		case 'D':
			if (cli_u32(cl.arg, 0, UINT32_MAX, c == 'p' ? &o.page_tokens
					: c == 'd' ? &o.dtype : &o.dp))
				return ctl_bad("bad value", argv[optind - 1]);
			break;
		case 'x': o.last = 1; break;
		case CLI_HELP: usage(stdout); return KVW_EXIT_OK;
		default: return KVW_EXIT_USAGE; /* CLI_BAD: fatal line written */
		}
	}
	if (optind + 2 > argc) {
		usage(stderr);
		return ctl_bad("missing", optind < argc ? "EP" : "COMMAND");
	}
	cli_log_init(&cl, "ctl", -1);
	cmd = argv[optind];
	a = argv + optind + 1;
	n = argc - optind - 1;
	ctx = zmq_ctx_new();
	if (!ctx)
		return cli_fatal(PROG, KVW_EXIT_SYS,
				 "unable to create a zmq context");
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
