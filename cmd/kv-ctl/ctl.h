/*
 * ctl.h - what kv-ctl's two files share: the parsed options, the argument
 * parsers and the error-to-exit-code mapping (main.c), and the one-way
 * senders (send.c).
 */
#ifndef KV_CTL_H
#define KV_CTL_H

#include <stdint.h>

#include "kvw.h"

struct opts {
	int timeout_ms, last, have_coord;
	uint32_t page_tokens, dtype, dp;
	struct kvw_coord coord;
};

/* Prints "kv-ctl: fatal: WHAT: ARG" and returns KVW_EXIT_USAGE. */
int ctl_bad(const char *what, const char *arg);

/* Parses a decimal or 0x number <= max (u32: max UINT32_MAX). 0 or -1. */
int ctl_num(const char *s, uint64_t max, uint64_t *out);
int ctl_u32(const char *s, uint32_t *out);

/* Prints err and maps a bootc KVW_E* to an exit code (99, 100, 111). */
int ctl_failed(int rc, const char *err);

/* Engine commands (send-begin .. clear): a[0] is EP, n counts a[].
 * Returns the exit code. */
int ctl_engine(void *ctx, const char *cmd, char **a, int n,
	       const struct opts *o);

/* raw EP HEXFRAME...: returns the exit code. */
int ctl_raw(void *ctx, char **a, int n, const struct opts *o);

#endif
