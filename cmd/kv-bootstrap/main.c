/*
 * kv-bootstrap - the rendezvous point of one prefill instance. Prefill
 * ranks register (BOOT_REGISTER) their topology, coordinates, control
 * endpoint and model; decode ranks look them up (BOOT_LOOKUP); anyone may
 * PING it. One ROUTER socket on --listen, one zmq_poll loop; the state and
 * every reply come from lib/boot. Exit 0 on SIGTERM/SIGINT, 100 on a usage
 * error, 111 when it cannot start.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/kvw.h"
#include "base/log.h"
#include "base/proc.h"
#include "cli/cli.h"
#include "roles/boot.h"
#include "wire/wire.h"

/* Messages handled per wakeup before signals are looked at again. */
#define BATCH 256

#define PROG "kv-bootstrap"

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

/* After a usage error's fatal line: the usage on stderr. Returns
 * KVW_EXIT_USAGE. */
static int usage_error(void)
{
	usage(stderr);
	return KVW_EXIT_USAGE;
}

/* Sets *ep from --listen and returns 0; or returns an exit code to leave
 * with, messages written (--help: 0 with *ep left NULL). */
static int parse(int argc, char **argv, struct cli *cl, const char **ep)
{
	static const struct option longs[] = {
		{ "listen", required_argument, NULL, 'l' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	cli_init(cl, PROG, CLI_READY_FD | CLI_LOG_LEVEL | CLI_NAME, LOG_INFO,
		 NULL);
	while ((c = cli_next(cl, argc, argv, longs)) != CLI_END) {
		if (c == CLI_HELP) {
			usage(stdout);
			return KVW_EXIT_OK;
		}
		if (c != 'l')
			return usage_error();
		*ep = cl->arg;
	}
	if (!*ep || !(*ep)[0]) {
		cli_bad(cl, "--listen is required");
		return usage_error();
	}
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
	const char *ep = NULL;
	struct boot *b = NULL;
	struct cli cl;
	void *ctx = NULL, *sock = NULL;
	uint64_t malformed = 0;
	char err[256];
	int rc, code = KVW_EXIT_SYS;

	rc = parse(argc, argv, &cl, &ep);
	if (rc || !ep)
		return rc;
	cli_log_init(&cl, "bootstrap", -1);
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
	if (!sock || wire_bind(sock, ep, 0, err, sizeof err))
		goto fail;
	if (proc_ready(cl.ready_fd)) {
		snprintf(err, sizeof err, "write READY to fd %d: %s", cl.ready_fd,
			 strerror(errno));
		goto fail;
	}
	LOG(LOG_INFO, "listening on %s", ep);
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
