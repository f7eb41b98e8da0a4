/*
 * kv-keygen - makes a kvwire group's key directory (lib/base/keys.h): the
 * CURVE key pairs of its control sockets and the data port's key, in
 * DIR/group.keys (mode 0600, DIR 0700). Copy DIR to every host of the group
 * (keeping the modes) and give it to kv-up with --keys DIR. Existing keys
 * are never overwritten.
 */
#include <stdio.h>

#include "base/keys.h"
#include "base/kvw.h"
#include "common/cli.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: kv-keygen [--help] DIR\n"
		"Makes DIR (mode 0700) and DIR/group.keys (mode 0600): the CURVE\n"
		"server and client key pairs of a kvwire group's tcp:// control\n"
		"sockets and the key of its tcp data ports. Copy DIR to every host\n"
		"of the group with its modes (it is secret) and start each side\n"
		"with kv-up --keys DIR. Keys already in DIR are never replaced.\n"
		"Exit: 0 made, 100 usage, 111 DIR unsafe, keys already there, or a\n"
		"system error (the reason on stderr).\n");
}

int main(int argc, char **argv)
{
	static const struct option none[] = { { NULL, 0, NULL, 0 } };
	struct cli cl;
	char err[512];
	int c, rc;

	cli_init(&cl, "kv-keygen", CLI_OPERANDS, 0, NULL);
	while ((c = cli_next(&cl, argc, argv, none)) != CLI_END) {
		if (c == CLI_HELP) {
			usage(stdout);
			return KVW_EXIT_OK;
		}
		usage(stderr); /* CLI_BAD: after its fatal line */
		return KVW_EXIT_USAGE;
	}
	if (optind != argc - 1)
		return cli_bad(&cl, "want one DIR, got %d operands",
			       argc - optind);
	rc = keys_make(argv[optind], err, sizeof err);
	if (rc)
		return cli_fatal("kv-keygen", KVW_EXIT_SYS,
				 "unable to make keys: %s", err);
	printf("kv-keygen: keys in %s/%s\n", argv[optind], KEYS_FILE);
	return KVW_EXIT_OK;
}
