/*
 * tables.c - gathers and maps the room tables kv-stat shows (see
 * tables.h): a run directory's tables in endpoints order, then --table
 * paths, each path once.
 */
#include "tables.h"

#include <string.h>

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');

	return s ? s + 1 : p;
}

void tables_add_path(struct tables *ts, const char *path)
{
	if (ts->npaths < TABLES_MAX)
		ts->paths[ts->npaths++] = path;
}

/* Adds a table unless its path is already listed. */
static void add(struct tables *ts, const char *name, const char *path)
{
	for (unsigned i = 0; i < ts->n; i++)
		if (strcmp(ts->tb[i].path, path) == 0)
			return;
	if (ts->n == TABLES_MAX)
		return;
	memset(&ts->tb[ts->n], 0, sizeof ts->tb[ts->n]);
	ts->tb[ts->n].name = name;
	ts->tb[ts->n].path = path;
	ts->n++;
}

int tables_load(struct tables *ts)
{
	int rc = 0;

	ts->n = 0;
	ts->ri = NULL;
	ts->err[0] = '\0';
	if (ts->run_dir) {
		int r = runinfo_load(ts->run_dir, &ts->ri, ts->err,
				     sizeof ts->err);

		if (r < 0)
			return r;
		for (uint32_t i = 0; i < runinfo_count(ts->ri); i++) {
			const struct runinfo_member *m =
				runinfo_member(ts->ri, i);

			if (m->table[0])
				add(ts, m->name, m->table);
		}
	}
	for (unsigned i = 0; i < ts->npaths; i++)
		add(ts, base_name(ts->paths[i]), ts->paths[i]);
	for (unsigned i = 0; i < ts->n; i++)
		if (rtab_open(ts->tb[i].path, 0, &ts->tb[i].t,
			      ts->tb[i].error, sizeof ts->tb[i].error) < 0)
			rc = 1;
	return rc;
}

void tables_unload(struct tables *ts)
{
	for (unsigned i = 0; i < ts->n; i++)
		rtab_close(&ts->tb[i].t);
	ts->n = 0;
	runinfo_free(&ts->ri);
}
