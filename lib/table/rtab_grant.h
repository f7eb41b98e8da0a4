/*
 * rtab_grant.h - the decode's destination grants (tcp transport, issue 29
 * item 3): which pool pages kv-receiver gave each room incarnation, so its
 * sink processes write a batch only into pages of the room the batch names,
 * never anywhere else in the pool.
 *
 * One file beside the room table ("<table>.grant"), made by kv-receiver
 * before its sinks start and mapped by each sink. It holds the decode's
 * layout (buffers: offset, item length, pages, AUX or not; written once),
 * one record per room-table slot (the granted incarnation's rtab_ref and
 * its XFER_INFO token) and two page-owner maps: per pool page (the page
 * index every K/V/KV/STATE buffer shares) and per aux slot, the packed
 * rtab_ref of the incarnation that owns it, 0 for none.
 *
 * Why an owner map and not a page list per room: its size is fixed by the
 * pool (8 bytes a page), however many pages a room has (thousands) and
 * however many rooms the table holds (65,536), with nothing to allocate in
 * shared memory; a copy is checked with one binary search over the buffers
 * and one load per page it touches. A page given to a new room simply gets
 * the new owner (the engine reuses a page only after the old room released
 * it); the old incarnation's withdrawal clears only words it still owns,
 * and an owner word left behind names an incarnation (slot and generation)
 * that no later room shares, so a reused slot never inherits it.
 *
 * Protocol (one writer, kv-receiver; readers lock-free):
 *   receiver: rtab_grant_give(ref, token, pages) BEFORE the XFER_INFO that
 *             lets a prefill rank write; rtab_grant_withdraw at CLEAR and
 *             when the room becomes releasable.
 *   sink:     rtab_grant_begin(ref from rtab_lookup, batch incarnation);
 *             rtab_grant_covers() for every copy; rtab_grant_still() -
 *             a seqlock read: a record being rewritten (odd sequence) or
 *             rewritten during the check is "not live", so a reader never
 *             acts on half of a grant.
 * Layer table: includes only base/ and rtab.h (for struct rtab_ref).
 */
#ifndef KVW_RTAB_GRANT_H
#define KVW_RTAB_GRANT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"
#include "rtab.h"

#define RTAB_GRANT_MAGIC 0x544e524757564b00ull /* "\0KVWGRNT" */
#define RTAB_GRANT_VERSION 1u
#define RTAB_GRANT_HDR 64u
#define RTAB_GRANT_NO_AUX UINT32_MAX /* rtab_grant_give: no aux slot */

/* File layout: header, nbufs buffers (sorted by offset), nslots room
 * records, npages page-owner words, naux aux-owner words. */
struct rtab_grant_hdr {
	uint64_t magic;     /* RTAB_GRANT_MAGIC */
	uint32_t version;   /* RTAB_GRANT_VERSION */
	uint32_t nbufs;
	uint32_t nslots;    /* room-table slots */
	uint32_t npages;    /* page-owner words */
	uint32_t naux;      /* aux-owner words */
	uint32_t reserved0;
	uint8_t pad[RTAB_GRANT_HDR - 32];
};

/* One buffer of the decode layout; written before the file appears. */
struct rtab_grant_buf {
	uint64_t offset;
	uint64_t end;       /* offset + item_len * pages */
	uint32_t item_len;
	uint32_t pages;
	uint32_t aux;       /* 1: indexed by aux slot, 0: by pool page */
	uint32_t reserved0;
};

/* One room-table slot's grant. seq is odd while the receiver rewrites it;
 * ref is the packed rtab_ref (gen << 32 | slot) granted, 0 for none. */
struct rtab_grant_room {
	_Atomic uint64_t seq;
	_Atomic uint64_t ref;
	_Atomic uint64_t token;
	_Atomic uint64_t reserved0;
};

_Static_assert(sizeof(struct rtab_grant_hdr) == RTAB_GRANT_HDR, "grant hdr");
_Static_assert(offsetof(struct rtab_grant_hdr, nslots) == 16, "nslots");
_Static_assert(sizeof(struct rtab_grant_buf) == 32, "grant buf");
_Static_assert(sizeof(struct rtab_grant_room) == 32, "grant room");
_Static_assert(offsetof(struct rtab_grant_room, token) == 16, "token");

/* What a reader's check found. */
enum {
	RTAB_GRANT_OK = 0,       /* granted: go on with rtab_grant_covers */
	RTAB_GRANT_NOT_LIVE = 1, /* no grant for this incarnation (none yet,
				  * withdrawn, another token, or being
				  * rewritten): read and discard */
};

/* A reader's snapshot between rtab_grant_begin and rtab_grant_still. */
struct rtab_grant_read {
	uint64_t seq;
	uint64_t want; /* the packed ref every page must be owned by */
	uint32_t slot;
};

struct rtab_grant;

/* Receiver: creates a fresh grant file at path (mode 0600, written in a
 * private file and renamed over any old one, so no sink of an earlier
 * receiver shares it) for a table of nslots slots and the decode layout
 * bufs[nbufs] (AUX buffers are indexed by aux slot, the others by page).
 * Nothing is granted. 0, KVW_EINVAL (sizes out of range, overlapping
 * buffers) or KVW_ESYS, with text in err; *out is the caller's to close. */
int rtab_grant_create(const char *path, uint32_t nslots,
		      const struct kvw_buf *bufs, uint32_t nbufs,
		      struct rtab_grant **out, char *err, size_t errlen);

/* Sink: maps the grant file at path read-only. 0, KVW_ENOENT,
 * KVW_EVERSION (not a grant file, or its size does not match) or
 * KVW_ESYS. */
int rtab_grant_open(const char *path, struct rtab_grant **out, char *err,
		    size_t errlen);

/* Unmaps; accepts NULL and *g == NULL; sets *g = NULL. The file stays. */
void rtab_grant_close(struct rtab_grant **g);

/* Receiver (the one writer): grants incarnation ref (token != 0) the pool
 * pages pages[npages] and aux slot aux (RTAB_GRANT_NO_AUX: none), replacing
 * whatever the slot granted before. Every argument is checked first: 0, or
 * KVW_EINVAL (read-only map, zero ref or token, slot out of range) /
 * KVW_ERANGE (a page or aux slot outside the maps) with nothing changed. */
int rtab_grant_give(struct rtab_grant *g, struct rtab_ref ref, uint64_t token,
		    const uint32_t *pages, uint32_t npages, uint32_t aux);

/* Receiver: withdraws ref's grant, if the slot still grants ref: the
 * record is emptied first, then every page and the aux slot still owned
 * by ref is freed (a page another room owns now is left alone). Returns 1
 * when withdrawn, 0 when the slot granted something else (or nothing). */
int rtab_grant_withdraw(struct rtab_grant *g, struct rtab_ref ref,
			const uint32_t *pages, uint32_t npages, uint32_t aux);

/* Sink: starts a check of a batch for incarnation ref carrying
 * `incarnation` (0: not carried, the token is not compared).
 * RTAB_GRANT_OK and *rd, or RTAB_GRANT_NOT_LIVE. */
int rtab_grant_begin(const struct rtab_grant *g, struct rtab_ref ref,
		     uint64_t incarnation, struct rtab_grant_read *rd);

/* Sink: 1 when every byte of [off, off + len) lies in one buffer, in
 * pages (or the aux slot) owned by rd's incarnation; 0 otherwise (also for
 * an overflow; a zero length is checked as its first byte). */
int rtab_grant_covers(const struct rtab_grant *g,
		      const struct rtab_grant_read *rd, uint64_t off,
		      uint64_t len);

/* Sink: 1 when the record did not change since rtab_grant_begin (the
 * covers answers stand), 0 when it was rewritten meanwhile (treat the
 * batch as not live). */
int rtab_grant_still(const struct rtab_grant *g,
		     const struct rtab_grant_read *rd);

/* Geometry as created. */
uint32_t rtab_grant_slots(const struct rtab_grant *g);
uint32_t rtab_grant_pages(const struct rtab_grant *g);

#endif
