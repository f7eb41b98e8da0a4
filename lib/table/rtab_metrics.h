/*
 * rtab_metrics.h - the measures a control process keeps in its room table's
 * header (struct rtab_metrics, 896 bytes after the first 128): rooms that
 * entered each state, failures by reason and three fixed-bucket latency
 * histograms (transfer, bootstrap, abort drain). The table's own calls
 * record them (rtab.c: the state CAS, the flag changes, rtab_bytes_add), so
 * callers in roles/ need at most one rtab_counter_add for what only they
 * see. Writers use relaxed atomic adds; readers (kv-stat) take a snapshot
 * with rtab_metrics_get without stopping anyone.
 *
 * What is measured, from the per-room timestamps of struct rtab_entry:
 *   transfer:    entering Waiting (the sender got XFER_INFO; the receiver
 *                sent it) to entering Success;
 *   bootstrap:   insertion (Bootstrapping) to entering Waiting;
 *   abort drain: RTAB_F_ARMED set to RTAB_F_RELEASABLE set.
 * Buckets are upper bounds in ns (rtab_hist_bound_ns); the last is +Inf.
 * Also here, never turned off: the security counters (enum rtab_sec) and
 * whether the owner runs --insecure.
 *
 * A non-zero `off` word stops the table's own measuring (not the plain
 * counters of struct rtab_hdr except RTAB_C_BYTES): kv-bench sets it to
 * price the measures. Included by rtab.h; do not include it alone.
 */
#ifndef KVW_RTAB_METRICS_H
#define KVW_RTAB_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/kvw.h"

#define RTAB_METRICS_SIZE 896u
#define RTAB_HIST_BOUNDS 16u               /* finite upper bounds */
#define RTAB_HIST_BUCKETS (RTAB_HIST_BOUNDS + 1u) /* and +Inf */
#define RTAB_MAX_STATES 8u                 /* >= KVW_NSTATES */
#define RTAB_MAX_REASONS 32u               /* >= KVW_NREASONS */

enum rtab_hist_id {
	RTAB_H_TRANSFER = 0,
	RTAB_H_BOOTSTRAP = 1,
	RTAB_H_ABORT_DRAIN = 2,
	RTAB_NHISTS = 3,
};

/* Security counters (issue 14), kept whether or not the table measures:
 * what a refusal is worth knowing does not depend on kv-bench's pricing. */
#define RTAB_MAX_SEC 8u
enum rtab_sec {
	RTAB_S_UNAUTHORISED = 0, /* authenticated, but not allowed: an ABORT
				  * from a non-destination, a REGISTER naming
				  * a pool not the decode's own, ... */
	RTAB_S_RATE_LIMITED = 1, /* dropped by a per-source token bucket */
	RTAB_S_AUTH_FAILED = 2,  /* ZAP refusals and failed data-port
				  * handshakes */
	RTAB_S_RECLAIMED = 3,    /* peer slots of dead or never completed
				  * registrations freed for new peers */
	RTAB_S_INTEGRITY_FAILED = 4, /* tcp batches or ACKs with a wrong tag
				      * or sequence number (issue 29) */
	RTAB_S_REDIALS = 5,      /* tcp data connections re-dialled */
	RTAB_S_RESENT = 6,       /* tcp batches sent again on them */
	RTAB_S_DEST_REFUSED = 7, /* tcp batches refused by a sink for a copy
				  * outside their room's granted pages */
	RTAB_NSEC = 8,
};

/* Non-cumulative bucket counts; the count is their sum. */
struct rtab_hist {
	_Atomic uint64_t bucket[RTAB_HIST_BUCKETS];
	_Atomic uint64_t sum_ns;
};

struct rtab_metrics {
	_Atomic uint32_t off;   /* non-zero: the table does not measure */
	uint32_t reserved0;
	_Atomic uint64_t entered[RTAB_MAX_STATES]; /* by enum kvw_state */
	_Atomic uint64_t failed[RTAB_MAX_REASONS]; /* by enum kvw_reason */
	struct rtab_hist hist[RTAB_NHISTS];
	_Atomic uint64_t sec[RTAB_MAX_SEC]; /* enum rtab_sec */
	_Atomic uint32_t insecure; /* 1: the owner runs --insecure */
	uint32_t reserved1;
	_Atomic uint64_t key_fp; /* the owner's group keys' fingerprint (first
				  * 8 bytes, big-endian; keys.h); 0: none */
	/* Ended rooms the owner cleared because nobody else would (issue
	 * 34: a room its engine never began); kept whether or not the table
	 * measures, like sec. */
	_Atomic uint64_t rooms_reclaimed;
	uint8_t reserved[RTAB_METRICS_SIZE - 8 - 8 * RTAB_MAX_STATES -
			 8 * RTAB_MAX_REASONS - RTAB_NHISTS * 8 *
			 (RTAB_HIST_BUCKETS + 1) - 8 * RTAB_MAX_SEC - 24];
};

_Static_assert(sizeof(struct rtab_metrics) == RTAB_METRICS_SIZE,
	       "rtab_metrics size");
_Static_assert(KVW_NSTATES <= RTAB_MAX_STATES, "states fit");
_Static_assert(KVW_NREASONS <= RTAB_MAX_REASONS, "reasons fit");

/* A snapshot of the measures (plain numbers). */
struct rtab_hist_view {
	uint64_t bucket[RTAB_HIST_BUCKETS]; /* non-cumulative */
	uint64_t count;                     /* sum of the buckets */
	uint64_t sum_ns;
};
struct rtab_metrics_view {
	int off;
	uint64_t entered[KVW_NSTATES];
	uint64_t failed[KVW_NREASONS];
	struct rtab_hist_view hist[RTAB_NHISTS];
	uint64_t sec[RTAB_NSEC];
	int insecure;
	uint64_t key_fp;
	uint64_t rooms_reclaimed;
};

struct rtab;
struct rtab_entry;

/* Upper bound of bucket i in ns; UINT64_MAX for the +Inf bucket and out of
 * range. */
uint64_t rtab_hist_bound_ns(unsigned i);

/* "transfer", "bootstrap", "abort_drain"; "?" out of range. */
const char *rtab_hist_str(unsigned h);

/* Anyone: a snapshot of t's measures. */
void rtab_metrics_get(const struct rtab *t, struct rtab_metrics_view *v);

/* Turns the table's measuring off (off != 0) or on: 0, or KVW_EINVAL on a
 * read-only table. Every process writing this table sees it at its next
 * call. */
int rtab_metrics_set_off(struct rtab *t, int off);

/* The owner: counts n in security counter `which` (enum rtab_sec); a
 * read-only table or an unknown counter is ignored. */
void rtab_sec_add(struct rtab *t, unsigned which, uint64_t n);

/* The owner: counts n ended rooms it cleared because nobody else would
 * (rooms_reclaimed); a read-only table is ignored. */
void rtab_rooms_reclaimed_add(struct rtab *t, uint64_t n);

/* The owner: records whether it runs --insecure (kv-stat shows it). */
void rtab_set_insecure(struct rtab *t, int on);

/* The owner: records its group keys' fingerprint (kv-stat shows it, so
 * two sides' can be compared; 0: no keys). */
void rtab_set_key_fp(struct rtab *t, uint64_t fp);

/* "unauthorised", "rate_limited", "auth_failed", "reclaimed",
 * "integrity_failed", "redials", "resent", "dest_refused"; "?" out of
 * range. */
const char *rtab_sec_str(unsigned which);

/* ---- hooks for rtab.c (not for callers outside lib/table) ---------- */

/* A new incarnation in slot e was created at now_ns. */
void rtab_metric_insert(struct rtab *t, struct rtab_entry *e, uint64_t now_ns);
/* e moved to state `to` (with `reason` when to is Failed). */
void rtab_metric_enter(struct rtab *t, struct rtab_entry *e, unsigned to,
		       unsigned reason);
/* Flags of e went from `old` to old | bits. */
void rtab_metric_flags(struct rtab *t, struct rtab_entry *e, uint32_t old,
		       uint32_t bits);
/* n bytes were moved for a room of t. */
void rtab_metric_bytes(struct rtab *t, uint64_t n);

#endif
