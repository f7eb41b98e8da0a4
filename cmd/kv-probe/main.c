/*
 * kv-probe - says which kvwire transports this machine can use. For each
 * TRANSPORT named it prints one line, "shm: available" or "rdma: not
 * available: <why>", and exits 0 when all are available, 77 when any is not
 * (the "skipped" code scripts and bats tests act on), 100 on a usage error.
 * With no TRANSPORT it lists every known one and exits 0.
 */
#include <stdio.h>

#include "base/kvw.h"
#include "common/cli.h"
#include "xport/xport.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kv-probe [--help] [TRANSPORT...]\n"
		"Probes kvwire transports (shm, tcp, rdma, cuda) and prints one\n"
		"line each. Exit: 0 all available, 77 any not available,\n"
		"100 usage error. No TRANSPORT: list all, exit 0.\n");
}

int main(int argc, char **argv)
{
	static const struct option none[] = { { NULL, 0, NULL, 0 } };
	struct xport_avail av[16];
	struct cli cl;
	char msg[256];
	int i, c, first, skip = 0;
	size_t n, k;

	cli_init(&cl, "kv-probe", CLI_OPERANDS, 0, NULL);
	while ((c = cli_next(&cl, argc, argv, none)) != CLI_END) {
		if (c == CLI_HELP) {
			usage(stdout);
			return KVW_EXIT_OK;
		}
		usage(stderr); /* CLI_BAD: after its fatal line */
		return KVW_EXIT_USAGE;
	}
	first = optind;
	/* Check every name before probing any: a typo is a usage error. */
	for (i = first; i < argc; i++)
		if (xport_find(argv[i]) == NULL)
			return cli_bad(&cl, "unknown transport: %s (known: shm, "
				       "tcp, rdma, cuda)", argv[i]);
	if (first >= argc) {
		n = xport_probe_all(av, sizeof av / sizeof av[0]);
		for (k = 0; k < n && k < sizeof av / sizeof av[0]; k++)
			printf("%s\n", av[k].msg);
		return KVW_EXIT_OK;
	}
	for (i = first; i < argc; i++) {
		const struct xport_ops *ops = xport_find(argv[i]);

		msg[0] = '\0';
		if (ops->probe(msg, sizeof msg) == 0) {
			printf("%s: available\n", ops->name);
		} else {
			printf("%s\n", msg[0] ? msg : "not available");
			skip = 1;
		}
	}
	return skip ? KVW_EXIT_SKIP : KVW_EXIT_OK;
}
