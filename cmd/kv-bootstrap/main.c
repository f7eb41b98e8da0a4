/*
 * kv-bootstrap - the rendezvous point of one prefill instance. Prefill
 * ranks register (BOOT_REGISTER) their topology, coordinates, control
 * endpoint and model; decode ranks look them up (BOOT_LOOKUP); anyone may
 * PING it. One ROUTER socket on --listen, one zmq_poll loop; the state and
 * every reply come from lib/boot. Exit 0 on SIGTERM/SIGINT, 100 on a usage
 * error, 111 when it cannot start.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "boot.h"
#include "kvw.h"
#include "log.h"
#include "proc.h"
#include "wire.h"

/* Messages handled per wakeup before signals are looked at again. */
#define BATCH 256

struct opts {
	const char *listen;
	const char *name;
	int ready_fd;
	int level;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kv-bootstrap --listen EP [--ready-fd N] [--log-level LVL]\n"
		"                    [--name NAME] [--help]\n"
		"Rendezvous server of one prefill instance: prefill ranks register,\n"
		"decode ranks look them up, PING gets PONG.\n"
		"  --listen EP      ROUTER endpoint to bind (tcp://... or ipc://...)\n"
		"  --ready-fd N     write READY to fd N once bound\n"
		"  --log-level LVL  error|warn|info|debug (default info)\n"
		"  --name NAME      log tag suffix\n"
		"Exit: 0 stopped by SIGTERM/SIGINT, 100 usage, 111 system error.\n");
}

static int fatal_usage(const char *fmt, const char *arg)
{
	fprintf(stderr, "kv-bootstrap: fatal: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\n");
	usage(stderr);
	return KVW_EXIT_USAGE;
}

/* Returns 0, or an exit code (with the message written) to leave with; -1
 * for --help. */
static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option longs[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ "ready-fd", required_argument, NULL, 'r' },
		{ "log-level", required_argument, NULL, 'L' },
		{ "name", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char *end;
	long v;
	int c;

	o->ready_fd = -1;
	o->level = LOG_INFO;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":", longs, NULL)) != -1) {
		switch (c) {
		case 'l': o->listen = optarg; break;
		case 'n': o->name = optarg; break;
		case 'h': return -1;
		case 'r':
			errno = 0;
			v = strtol(optarg, &end, 10);
			if (errno || *end || end == optarg || v < 0 || v > 65535)
				return fatal_usage("bad --ready-fd: %s", optarg);
			o->ready_fd = (int)v;
			break;
		case 'L':
			o->level = log_level_parse(optarg);
			if (o->level < 0)
				return fatal_usage("bad --log-level: %s", optarg);
			break;
		case ':':
			return fatal_usage("option needs a value: %s",
					   argv[optind - 1]);
		default:
			return fatal_usage("unknown option: %s", argv[optind - 1]);
		}
	}
	if (optind < argc)
		return fatal_usage("unexpected argument: %s", argv[optind]);
	if (!o->listen || !o->listen[0])
		return fatal_usage("%s is required", "--listen");
	return 0;
}

/* Drains up to BATCH messages. Returns 0, or -1 when the socket or context
 * is gone and the loop must end. */
static int serve(void *sock, struct boot *b, uint64_t *malformed)
{
	static struct frame_msg req, reply;
	struct wire_in in;
	char err[256];
	int rc;

	for (int i = 0; i < BATCH; i++) {
		rc = wire_recv(sock, 1, &in, &req, err, sizeof err);
		if (rc == KVW_EAGAIN)
			return 0;
		if (rc == KVW_ESYS) {
			LOG(LOG_ERROR, "%s", err);
			return -1;
		}
		if (rc) {
			(*malformed)++;
			LOG_RL(LOG_WARN, "malformed message dropped: %s", err);
			continue;
		}
		if (boot_handle(b, &req, &reply, err, sizeof err)) {
			(*malformed)++;
			LOG_RL(LOG_WARN, "message dropped: %s", err);
			wire_in_release(&in);
			continue;
		}
		LOG(LOG_DEBUG, "%s -> %s status %u (%u/%u registered)",
		    frame_type_str(req.hdr.type), frame_type_str(reply.hdr.type),
		    reply.hdr.type == FRAME_BOOT_REPLY ? reply.u.boot_reply.status : 0,
		    boot_registered(b), boot_expected(b));
		if (reply.hdr.type == FRAME_BOOT_REPLY &&
		    reply.u.boot_reply.status == FRAME_BOOT_REFUSED)
			LOG_RL(LOG_WARN, "%s refused: %s",
			       frame_type_str(req.hdr.type),
			       reply.u.boot_reply.text);
		rc = wire_send(sock, &reply, in.id, in.idlen, err, sizeof err);
		wire_in_release(&in);
		if (rc == KVW_ESYS && errno == ETERM)
			return -1;
		if (rc)
			LOG_RL(LOG_WARN, "reply dropped: %s", err);
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = { 0 };
	struct boot *b = NULL;
	void *ctx = NULL, *sock = NULL;
	uint64_t malformed = 0;
	char err[256], tag[48];
	int rc, code = KVW_EXIT_SYS;

	rc = parse(argc, argv, &o);
	if (rc < 0) {
		usage(stdout);
		return KVW_EXIT_OK;
	}
	if (rc)
		return rc;
	snprintf(tag, sizeof tag, "bootstrap%s%.20s", o.name ? "." : "",
		 o.name ? o.name : "");
	log_init(tag, -1, (enum log_level)o.level);
	if (proc_signals_init()) {
		LOG(LOG_ERROR, "unable to install signal handlers");
		return KVW_EXIT_SYS;
	}
	b = boot_open(proc_epoch(), err, sizeof err);
	if (!b)
		goto fail;
	ctx = zmq_ctx_new();
	if (!ctx) {
		snprintf(err, sizeof err, "zmq_ctx_new: %s", zmq_strerror(errno));
		goto fail;
	}
	sock = wire_socket(ctx, ZMQ_ROUTER, 0, err, sizeof err);
	if (!sock || wire_bind(sock, o.listen, 0, err, sizeof err))
		goto fail;
	if (proc_ready(o.ready_fd)) {
		snprintf(err, sizeof err, "write READY to fd %d: %s", o.ready_fd,
			 strerror(errno));
		goto fail;
	}
	LOG(LOG_INFO, "listening on %s", o.listen);
	while (!proc_stopping()) {
		zmq_pollitem_t it = { sock, 0, ZMQ_POLLIN, 0 };

		rc = zmq_poll(&it, 1, 1000);
		if (rc < 0 && errno != EINTR) {
			LOG(LOG_ERROR, "zmq_poll: %s", zmq_strerror(errno));
			break;
		}
		if (rc > 0 && serve(sock, b, &malformed))
			break;
	}
	LOG(LOG_INFO, "stopping: %u of %u ranks registered, %llu malformed",
	    boot_registered(b), boot_expected(b),
	    (unsigned long long)malformed);
	code = proc_stopping() ? KVW_EXIT_OK : KVW_EXIT_SYS;
	goto out;
fail:
	LOG(LOG_ERROR, "fatal: unable to start: %s", err);
out:
	wire_close(&sock);
	if (ctx)
		zmq_ctx_term(ctx);
	boot_close(&b);
	return code;
}
