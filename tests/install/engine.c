/*
 * engine.c - the smallest engine built against an installed kvwire
 * (tests/bats/install.bats): `cc engine.c $(pkg-config --cflags --libs
 * kvwire)`. With ENGINE_EP TABLE POOL it opens the engine connection of a
 * running member and prints the pool size; with no argument it prints the
 * name of the Success state. Exit 0, or 1 with the library's error.
 */
#include <stdio.h>

#include <kvwire/api.h>

int main(int argc, char **argv)
{
	struct kvw_engine *e = NULL;
	char err[256];
	int rc;

	if (argc != 4) {
		printf("%s\n", kvw_state_str(KVW_SUCCESS));
		return 0;
	}
	rc = kvw_engine_open(argv[1], argv[2], argv[3], &e, err, sizeof err);
	if (rc < 0) {
		fprintf(stderr, "engine: %s: %s\n", kvw_strerror(rc), err);
		return 1;
	}
	printf("pool_bytes=%llu\n", (unsigned long long)kvw_pool_size(e));
	kvw_engine_close(&e);
	return 0;
}
