/*
 * ctl.h - what kv-ctl's two files share: the parsed options, its two
 * fatal-line helpers (main.c), and the one-way senders (send.c).
 */
#ifndef KV_CTL_H
#define KV_CTL_H

#include <stdint.h>

#include "base/kvw.h"

struct opts {
	int timeout_ms, last, have_coord;
	uint32_t page_tokens, dtype, dp;
	struct kvw_coord coord;
};

/* Prints "kv-ctl: fatal: WHAT: ARG" and returns KVW_EXIT_USAGE. */
int ctl_bad(const char *what, const char *arg);

/* Prints err and maps a bootc KVW_E* to an exit code (99, 100, 111). */
int ctl_failed(int rc, const char *err);

/* Engine commands (send-begin .. clear): a[0] is EP, n counts a[].
 * Returns the exit code. */
int ctl_engine(void *ctx, const char *cmd, char **a, int n,
	       const struct opts *o);

/* raw EP HEXFRAME...: returns the exit code. */
int ctl_raw(void *ctx, char **a, int n, const struct opts *o);

#endif
