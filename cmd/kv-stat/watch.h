/*
 * watch.h - kv-stat --watch: a top-like view of a live group, refreshed
 * every period: per table the rooms by state, success / failure / byte
 * rates since the last refresh, transfer latency quantiles from the
 * histogram, and peers by liveness.
 */
#ifndef KVSTAT_WATCH_H
#define KVSTAT_WATCH_H

#include <stdint.h>
#include <stdio.h>

#include "tables.h"

/* Refreshes every period_ns until SIGINT/SIGTERM, or after `count`
 * refreshes when count != 0. On a terminal each refresh clears the screen
 * first; otherwise refreshes follow each other, separated by a blank line.
 * Returns 0, or a negative KVW_E* with text in ts->err when the endpoints
 * file cannot be read. */
int watch_run(struct tables *ts, uint64_t period_ns, unsigned count, FILE *f);

#endif
