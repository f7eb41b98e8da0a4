/*
 * kv-bootstrap - the rendezvous point of one prefill instance. Prefill
 * ranks register (BOOT_REGISTER) their topology, coordinates, control
 * endpoint and model; decode ranks look them up (BOOT_LOOKUP); anyone may
 * PING it. This file parses flags and maps results to exit codes; the
 * loop is lib/roles/bootstrap/boot_serve.c. Exit 0 on SIGTERM/SIGINT, 100 on a usage
 * error, 111 when it cannot start.
 */
#include <stdio.h>

#include "base/kvw.h"
#include "base/log.h"
#include "base/proc.h"
#include "common/cli.h"
#include "common/notify.h"
#include "roles/bootstrap/boot_serve.h"
#include "wire/wire.h"

#define PROG "kv-bootstrap"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kv-bootstrap --listen EP [--ready-fd N] [--log-level LVL]\n"
		"                    [--name NAME] [--check] [--help]\n"
		"Rendezvous server of one prefill instance: prefill ranks register,\n"
		"decode ranks look them up, PING gets PONG.\n"
		"  --listen EP      ROUTER endpoint to bind (tcp://... or ipc://...)\n"
		"  --ready-fd N     write READY to fd N once bound\n"
		"  --log-level LVL  error|warn|info|debug (default info)\n"
		"  --name NAME      log tag suffix\n"
		"  --check          validate the flags, start nothing\n"
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

	cli_init(cl, PROG, CLI_READY_FD | CLI_LOG_LEVEL | CLI_NAME | CLI_CHECK | CLI_AUTH,
		 LOG_INFO, NULL);
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

int main(int argc, char **argv)
{
	const char *ep = NULL;
	struct boot_serve *s = NULL;
	struct cli cl;
	char err[256];
	int rc;

	rc = parse(argc, argv, &cl, &ep);
	if (rc || !ep)
		return rc;
	if (wire_endpoint_check(ep, err, sizeof err) != 0)
		return cli_bad(&cl, "--listen: %s", err);
	if (cl.check)
		return KVW_EXIT_OK;
	cli_log_init(&cl, "bootstrap", -1);
	(void)proc_raise_nofile(); /* sockets grow with the peers */
	cli_notify_init(); /* READY=1 to systemd too */
	if (proc_signals_init())
		return cli_fatal(PROG, KVW_EXIT_SYS, "unable to install signal handlers");
	rc = boot_serve_open(ep, &s, err, sizeof err);
	if (rc)
		return cli_fatal(PROG, cli_exit_code(rc), "unable to start: %s", err);
	if (proc_ready(cl.ready_fd)) {
		boot_serve_close(&s);
		return cli_fatal(PROG, KVW_EXIT_SYS, "unable to write to --ready-fd");
	}
	rc = boot_serve_run(s, err, sizeof err);
	boot_serve_close(&s);
	if (rc)
		return cli_fatal(PROG, cli_exit_code(rc), "%s", err);
	return KVW_EXIT_OK;
}
