/*
 * fuzz_runinfo.c - libFuzzer target for the endpoints-file parser and the
 * shape-flag applier. The input is copied into an exact-size heap buffer
 * (not NUL-terminated) so ASan sees any read past it. A parse that succeeds
 * must hold members whose strings are NUL-terminated within their fields,
 * whose roles are in range and whose ranks lie inside their topologies;
 * otherwise the target aborts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan/runinfo.h"
#include "plan/shape.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size ? size : 1), err[256];
	struct runinfo *ri = NULL;
	struct shape s;

	if (buf == NULL)
		return 0;
	memcpy(buf, data, size);
	if (runinfo_parse(buf, size, &ri, err, sizeof err) == 0) {
		for (uint32_t i = 0; i < runinfo_count(ri); i++) {
			const struct runinfo_member *m = runinfo_member(ri, i);

			if (m->role > RUNINFO_HEARTBEAT || m->name[0] == '\0' ||
			    memchr(m->listen, 0, sizeof m->listen) == NULL ||
			    memchr(m->pool, 0, sizeof m->pool) == NULL ||
			    m->rank.tp >= m->topo.tp || m->rank.pp >= m->topo.pp)
				abort();
		}
		shape_default(&s);
		runinfo_shape_apply(runinfo_shape(ri), &s, err, sizeof err);
		runinfo_free(&ri);
	} else if (ri != NULL) {
		abort();
	}
	free(buf);
	return 0;
}
