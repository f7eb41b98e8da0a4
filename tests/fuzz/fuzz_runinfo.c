/*
 * fuzz_runinfo.c - libFuzzer target for the endpoints-file parser and the
 * shape-flag applier. The input is copied into an exact-size heap buffer
 * (not NUL-terminated) so ASan sees any read past it. A parse that succeeds
 * must hold members whose strings are NUL-terminated within their fields,
 * whose roles are in range and whose ranks lie inside their topologies;
 * every member runinfo_format writes must parse back to the same member
 * (the fields its role has), and shape flags applied must write out
 * (shape_flags) as flags that apply to the same shape; otherwise the
 * target aborts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan/runinfo.h"
#include "plan/shape.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The writer's line for m, parsed again, is m (what its role writes). */
static void round_trip(const struct runinfo_member *m)
{
	char line[RUNINFO_LINE_MAX], err[256];
	const struct runinfo_member *b;
	struct runinfo *back = NULL;
	int n = runinfo_format(m, line, sizeof line);

	if (n < 0)
		return; /* a member the writer refuses (cp, dp, ...) */
	if (runinfo_parse(line, (size_t)n, &back, err, sizeof err) != 0 ||
	    runinfo_count(back) != 1)
		abort();
	b = runinfo_member(back, 0);
	if (strcmp(b->name, m->name) || b->role != m->role ||
	    strcmp(b->listen, m->role == RUNINFO_HEARTBEAT ? "" : m->listen) ||
	    strcmp(b->table, m->role == RUNINFO_BOOTSTRAP ? "" : m->table))
		abort();
	if ((m->role == RUNINFO_PREFILL || m->role == RUNINFO_DECODE) &&
	    (strcmp(b->engine, m->engine) || strcmp(b->pool, m->pool) ||
	     memcmp(&b->rank, &m->rank, sizeof b->rank) ||
	     memcmp(&b->topo, &m->topo, sizeof b->topo)))
		abort();
	runinfo_free(&back);
}

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
			round_trip(m);
		}
		shape_default(&s);
		if (runinfo_shape_apply(runinfo_shape(ri), &s, err,
					sizeof err) == 0) {
			char flags[512];
			struct shape back;

			shape_default(&back);
			if (shape_flags(&s, flags, sizeof flags) < 0 ||
			    runinfo_shape_apply(flags, &back, err,
						sizeof err) != 0 ||
			    memcmp(&s, &back, sizeof s) != 0)
				abort();
		}
		runinfo_free(&ri);
	} else if (ri != NULL) {
		abort();
	}
	free(buf);
	return 0;
}
