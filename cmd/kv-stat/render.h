/*
 * render.h - kv-stat's two output forms (a human table and one JSON
 * document) of a set of room tables mapped read-only.
 */
#ifndef KVSTAT_RENDER_H
#define KVSTAT_RENDER_H

#include <stdint.h>
#include <stdio.h>

#include "table/rtab.h"

/* One table to show: t is NULL when it could not be opened (error says
 * why). */
struct render_table {
	const char *name;
	const char *path;
	struct rtab *t;
	char error[320];
};

struct render_opts {
	int all;          /* include Cleared rooms */
	int have_room;    /* show only room `room` */
	uint64_t room;
};

/* Writes the tables as text. Returns how many rooms were shown. */
unsigned render_text(FILE *f, const struct render_table *tb, unsigned n,
		     const struct render_opts *o);

/* Writes {"tables":[...]} and a newline. Returns how many rooms were
 * shown. */
unsigned render_json(FILE *f, const struct render_table *tb, unsigned n,
		     const struct render_opts *o);

#endif
