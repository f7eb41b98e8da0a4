/*
 * authz.h - authorisation after authentication (issue 14): what a peer
 * that got through CURVE (or any peer, under --insecure) may still not do.
 * A refusal is counted in the room table's RTAB_S_UNAUTHORISED (kv-stat's
 * "security:" line, kvwire_security_refusals_total) and warned about at a
 * bounded rate per call site; nothing else changes. Also here: the marks a
 * control process leaves in its table so kv-stat can show how it runs
 * (--insecure) and what its ZAP handler refused.
 */
#ifndef KVW_AUTHZ_H
#define KVW_AUTHZ_H

#include <stdint.h>

#include "base/log.h"
#include "table/rtab.h"

/* Counts one unauthorised message in t and logs one rate-limited warning:
 * UNAUTHORISED(s->t, "ABORT of room %llu from %s", ...). */
#define UNAUTHORISED(t, fmt, ...)                                   \
	do {                                                        \
		rtab_sec_add((t), RTAB_S_UNAUTHORISED, 1);          \
		LOG_RL(LOG_WARN, "unauthorised: " fmt, ##__VA_ARGS__); \
	} while (0)

/* Counts one message dropped by a rate limit (ratelimit.h) in t and logs
 * one rate-limited warning. */
#define RATE_LIMITED(t, fmt, ...)                                   \
	do {                                                        \
		rtab_sec_add((t), RTAB_S_RATE_LIMITED, 1);          \
		LOG_RL(LOG_WARN, "rate limited: " fmt, ##__VA_ARGS__); \
	} while (0)

/* Records in t whether this process runs --insecure (wire_auth_mode) and
 * its group keys' fingerprint (keys.h; kv-stat shows both). */
void authz_mark(struct rtab *t);

/* Adds to t's RTAB_S_AUTH_FAILED the handshakes this process's ZAP
 * handlers refused since the last call (*seen keeps the count already
 * added; start it at 0). Cheap: one atomic load. */
void authz_publish(struct rtab *t, uint64_t *seen);

#endif
