/*
 * tables.h - the set of room tables kv-stat shows: every distinct table of
 * a run directory's endpoints file and/or paths given with --table, mapped
 * read-only. --serve and --watch load the set again for every answer or
 * refresh, so a restarted member or a new group is seen as it is now.
 */
#ifndef KVSTAT_TABLES_H
#define KVSTAT_TABLES_H

#include "render.h"
#include "plan/runinfo.h"

#define TABLES_MAX RUNINFO_MAX_MEMBERS

struct tables {
	const char *run_dir;              /* NULL: only paths[] */
	const char *paths[TABLES_MAX];    /* from --table */
	unsigned npaths;
	/* Filled by tables_load: */
	struct runinfo *ri;
	struct render_table tb[TABLES_MAX];
	unsigned n;
	char err[512];
};

/* Adds a --table path (ignored past TABLES_MAX). */
void tables_add_path(struct tables *ts, const char *path);

/* Maps every table read-only. Returns 0 when all could be read, 1 when
 * some table could not be opened (its tb[i].error says why; the others are
 * mapped), or a negative KVW_E* when the endpoints file could not be read
 * (err says why; nothing is mapped). Call tables_unload after either. */
int tables_load(struct tables *ts);

/* Unmaps the tables and frees the endpoints; ts can be loaded again. */
void tables_unload(struct tables *ts);

#endif
