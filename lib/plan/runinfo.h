/*
 * runinfo.h - the run directory's `endpoints` file, which bin/kv-up writes
 * (from kv-plan: lib/plan/group.h) so tools (kv-stat, kv-bench) and engines
 * (kvw_group_read, python/kvwire) can find every member of a running group:
 * one line per member of whitespace-separated key=value pairs, e.g.
 *   member=bootstrap listen=ipc://DIR/boot.sock
 *   member=p0 role=prefill rank=0,0 topo=1,1 listen=... engine=... table=...
 *       pool=...
 *   member=hb0 role=heartbeat table=...
 * plus one line `shape=--layers 32 --page-tokens 16 ...` (the shape flags
 * the group was started with, verbatim to the end of the line). Blank lines
 * and lines starting with '#' are ignored; unknown keys are ignored (newer
 * writers may add some). Parsing is strict otherwise: every error names the
 * line. Pure: no sockets, no tables are opened here.
 */
#ifndef KVW_RUNINFO_H
#define KVW_RUNINFO_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

struct shape;

#define RUNINFO_MAX_MEMBERS 256u
#define RUNINFO_NAME_MAX 63u  /* member name bytes, without the NUL */
#define RUNINFO_LINE_MAX 4096u
#define RUNINFO_FILE_MAX (1u << 20)

enum runinfo_role {
	RUNINFO_BOOTSTRAP = 0, /* member=bootstrap, or role=bootstrap */
	RUNINFO_PREFILL = 1,
	RUNINFO_DECODE = 2,
	RUNINFO_HEARTBEAT = 3,
};

/* One member. Strings are NUL-terminated, "" when the key was absent. */
struct runinfo_member {
	char name[RUNINFO_NAME_MAX + 1];
	unsigned role;           /* enum runinfo_role */
	struct kvw_topo topo;    /* sizes; 1,1,1,1 when absent */
	struct kvw_coord rank;   /* coordinates; 0,0,0,0 when absent */
	char listen[KVW_MAX_STR + 1];
	char engine[KVW_MAX_STR + 1];
	char table[KVW_MAX_STR + 1];
	char pool[KVW_MAX_STR + 1];
};

struct runinfo; /* opaque: a parsed endpoints file */

/* Parses text[0..len) (need not be NUL-terminated). Rules: every token of a
 * member line is key=value with a non-empty key and value; `member` is
 * required and unique in the file; a key may appear once per line; role is
 * prefill, decode, heartbeat or bootstrap (member=bootstrap implies it);
 * rank and topo are "tp,pp" or "tp,pp,cp,dp" (topo sizes >= 1, each rank
 * coordinate below its size); prefill and decode members need engine,
 * table, pool and listen; heartbeat needs table; bootstrap needs listen;
 * values are at most KVW_MAX_STR bytes. At most one shape= line.
 * Returns 0 and *out (free with runinfo_free), or KVW_EINVAL with
 * "line N: ..." in err, or KVW_ENOMEM; *out is NULL on error. */
int runinfo_parse(const char *text, size_t len, struct runinfo **out,
		  char *err, size_t errlen);

/* Reads and parses `path`; a directory means path/endpoints. Returns as
 * runinfo_parse, plus KVW_ENOENT (missing file) and KVW_ESYS; err is
 * prefixed with the file name. */
int runinfo_load(const char *path, struct runinfo **out, char *err,
		 size_t errlen);

/* Frees *ri and sets it NULL; accepts NULL and *ri == NULL. */
void runinfo_free(struct runinfo **ri);

/* Members in file order: count, and member i (NULL when i >= count). The
 * struct belongs to ri. */
uint32_t runinfo_count(const struct runinfo *ri);
const struct runinfo_member *runinfo_member(const struct runinfo *ri,
					    uint32_t i);

/* The member called `name`, or NULL. */
const struct runinfo_member *runinfo_find(const struct runinfo *ri,
					  const char *name);

/* The k-th member (file order) of `role`, or NULL; runinfo_nrole counts
 * them. */
const struct runinfo_member *runinfo_nth(const struct runinfo *ri,
					 unsigned role, uint32_t k);
uint32_t runinfo_nrole(const struct runinfo *ri, unsigned role);

/* The bootstrap member's listen endpoint, or NULL when there is none. */
const char *runinfo_bootstrap(const struct runinfo *ri);

/* The text after `shape=` (trimmed), or NULL when the file had no shape
 * line. Belongs to ri. */
const char *runinfo_shape(const struct runinfo *ri);

/* Applies shape flags written as on a command line ("--layers 32 --mla
 * --page-tokens=16") to *s through shape_option(). Returns 0, or
 * KVW_EINVAL with err (unknown option, missing or bad value, a token that
 * is not an option); *s may be partly changed on error. */
int runinfo_shape_apply(const char *flags, struct shape *s, char *err,
			size_t errlen);

/* Checks that every member of `role` has TP size tp and PP size pp (0: not
 * checked). Returns 0, or KVW_EINVAL with the first member that differs
 * named in err. */
int runinfo_check_topo(const struct runinfo *ri, unsigned role, uint32_t tp,
		       uint32_t pp, char *err, size_t errlen);

/* Writes member *m as its line of the endpoints file (no newline), the
 * keys its role needs in the order above: "member=bootstrap listen=EP"
 * (another bootstrap: "member=N role=bootstrap listen=EP");
 * "member=N role=prefill|decode rank=tp,pp topo=tp,pp listen= engine=
 * table= pool=" (cp and dp are not written: kv-up's groups have 1 of
 * each); "member=N role=heartbeat table=". The one writer of the format
 * runinfo_parse reads (lib/plan/group.c plans the members). Returns the
 * length (NUL excluded), KVW_ERANGE when buf[len] is too small, or
 * KVW_EINVAL for a member runinfo_parse would refuse or that has cp or dp
 * > 1. */
int runinfo_format(const struct runinfo_member *m, char *buf, size_t len);

/* Name of a role ("prefill", ...). */
const char *runinfo_role_str(unsigned role);

#endif
