/*
 * prom.h - kv-stat's Prometheus text exposition (format 0.0.4) of a set of
 * room tables mapped read-only: one family per measure, one sample per
 * table labelled table="<member>". What --prom prints and --serve answers.
 */
#ifndef KVSTAT_PROM_H
#define KVSTAT_PROM_H

#include <stdio.h>

#include "render.h"

/* Writes every family for tb[0..n) to f. A table that could not be opened
 * shows only as kvwire_table_up 0. Returns 0, or -1 when f reports a write
 * error. */
int prom_write(FILE *f, const struct render_table *tb, unsigned n);

/* The same text in a malloc'd, NUL-terminated buffer (caller frees) and
 * its length in *len; NULL when out of memory. */
char *prom_text(const struct render_table *tb, unsigned n, size_t *len);

#endif
