/*
 * malformed.h - the one way a role drops a message from outside that is
 * malformed or unexpected: it is counted (the room table's
 * RTAB_C_MALFORMED counter, which kv-stat shows; or, for the bootstrap,
 * which has no table, a process-wide count) and warned about at a bounded
 * rate per call site (LOG_RL), and nothing else changes.
 */
#ifndef KVW_MALFORMED_H
#define KVW_MALFORMED_H

#include <stdint.h>

#include "base/log.h"

struct rtab;

/* Counts one dropped message in t's RTAB_C_MALFORMED, or in the
 * process-wide count when t is NULL. */
void malformed_count(struct rtab *t);

/* The process-wide count (messages counted with t == NULL). */
uint64_t malformed_local(void);

/* Counts the message (malformed_count(t)) and logs one rate-limited
 * warning: MALFORMED(s->t, "peer %u sent %s", id, name). */
#define MALFORMED(t, fmt, ...)                                    \
	do {                                                      \
		malformed_count(t);                               \
		LOG_RL(LOG_WARN, fmt, ##__VA_ARGS__);             \
	} while (0)

#endif
