/*
 * rtab_grant.h - the decode's destination grants (tcp transport, issue 29
 * item 3): which pool pages kv-receiver gave each room incarnation, so its
 * sink processes write a batch only into pages of the room the batch names,
 * never anywhere else in the pool.
 *
 * One file beside the room table ("<table>.grant"), made by kv-receiver
 * before its sinks start and mapped by each sink. It holds the decode's
 * layout (buffers: offset, item length, pages, layer, role, AUX or not;
 * written once), a key for the target tokens, one record per room-table
 * slot (the granted incarnation's rtab_ref, its base token, how many
 * targets and where their slices are), a table of target slices and two
 * page-owner maps: per pool page (the page index every K/V/KV/STATE
 * buffer shares) and per aux slot, the packed rtab_ref of the incarnation
 * that owns it, 0 for none.
 *
 * Per target (issue 29 item 3): every prefill rank of a room gets its own
 * XFER_INFO token, rtab_grant_token(base, i) - a keyed hash of the room's
 * base token and the target index, the index in its low byte - so a batch
 * names the one target that may have sent it, and a rank that knows only
 * its own token cannot compute another's. Each target's slice says what
 * it may write: the layers of its PP stage (draft layers: no prefill rank
 * sends them), the room's aux slot, and under a TP head slice only its
 * byte range of each token slot of a K or V page. Slices depend on the
 * topologies, not on the room, so rooms of one prefill topology share one
 * run of the slice table (appended once, never rewritten); a record names
 * its run.
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
#define RTAB_GRANT_VERSION 5u /* 3: state-row maps; 4: state row parts;
				* 5: state components of their own layers */
#define RTAB_GRANT_HDR 64u
#define RTAB_GRANT_NO_AUX UINT32_MAX /* rtab_grant_give: no aux slot */
#define RTAB_GRANT_MAX_TARGETS 256u  /* targets of one room (index: 8 bits) */
#define RTAB_GRANT_SLICES 4096u      /* slice table entries (all runs) */

/* File layout: header, nbufs buffers (sorted by offset), nslots room
 * records, RTAB_GRANT_SLICES target slices, npages page-owner words, naux
 * aux-owner words. */
struct rtab_grant_hdr {
	uint64_t magic;     /* RTAB_GRANT_MAGIC */
	uint32_t version;   /* RTAB_GRANT_VERSION */
	uint32_t nbufs;
	uint32_t nslots;    /* room-table slots */
	uint32_t npages;    /* page-owner words */
	uint32_t naux;      /* aux-owner words */
	uint32_t reserved0;
	uint8_t key[16];    /* rtab_grant_token's key (random at create) */
	/* Component c's own layers (kvw_state_spec.layers), 0 for a buffer
	 * per model layer: a target's share of them is its PP stage's
	 * (shape_state_layers' split). */
	uint16_t state_layers[KVW_MAX_STATE];
};

/* One buffer of the decode layout; written before the file appears. */
struct rtab_grant_buf {
	uint64_t offset;
	uint64_t end;       /* offset + item_len * pages */
	uint32_t item_len;
	uint32_t pages;
	uint32_t layer_id;
	uint8_t aux;        /* 1: indexed by aux slot, 0: by pool page,
			     * RTAB_GRANT_STATE: by the rows of its state
			     * component */
	uint8_t role;       /* enum kvw_role */
	uint16_t reserved0; /* RTAB_GRANT_STATE: its component; else 0 */
};
#define RTAB_GRANT_STATE 2u

/* What one target (prefill rank) of a room may write, besides the room's
 * pages: buffers of layers [layer_first, layer_first + layer_count), the
 * aux slot when RTAB_GRANT_T_AUX is set, and in K and V buffers, when
 * slice_len != 0, only bytes [slice_off, slice_off + slice_len) of each
 * token slot of slot_len bytes (a slice that is the whole slot is no
 * slice); in the rows of the state components whose bit is set in
 * state_sharded, when state_parts > 1, only part state_part of state_parts
 * equal parts of each row (a sharded component under a TP mismatch: each
 * prefill rank writes its part of the decode's row). A state component
 * of its own layers (the header's state_layers) is its PP stage's share
 * of them instead of [layer_first, + layer_count). Anything else in the
 * room's pages is another target's. */
struct rtab_grant_target {
	uint32_t layer_first;
	uint32_t layer_count;
	uint32_t slot_len;
	uint32_t slice_off;
	uint32_t slice_len;
	uint32_t flags;
	uint32_t state_sharded; /* bit c: component c's rows are split */
	uint32_t state_part;
	uint32_t state_parts;   /* 0 or 1: whole rows */
	uint32_t stage;         /* pp << 16 | its PP stage; 0: none, no
				 * share of own layers (targets compare
				 * whole: slices_find) */
};
#define RTAB_GRANT_T_AUX 1u

/* One room-table slot's grant. seq is odd while the receiver rewrites it;
 * ref is the packed rtab_ref (gen << 32 | slot) granted, 0 for none; token
 * the room's base token (never sent: targets get rtab_grant_token of it);
 * targets = first slice << 32 | number of targets. */
struct rtab_grant_room {
	_Atomic uint64_t seq;
	_Atomic uint64_t ref;
	_Atomic uint64_t token;
	_Atomic uint64_t targets;
};

_Static_assert(sizeof(struct rtab_grant_hdr) == RTAB_GRANT_HDR, "grant hdr");
_Static_assert(offsetof(struct rtab_grant_hdr, nslots) == 16, "nslots");
_Static_assert(sizeof(struct rtab_grant_buf) == 32, "grant buf");
_Static_assert(sizeof(struct rtab_grant_target) == 40, "grant target");
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
	uint32_t target; /* the target whose token the batch carries */
	struct rtab_grant_target t; /* its slice (a private copy) */
};

struct rtab_grant;

/* Receiver: creates a fresh grant file at path (mode 0600, written in a
 * private file and renamed over any old one, so no sink of an earlier
 * receiver shares it) for a table of nslots slots and the decode layout
 * bufs[nbufs] (AUX buffers are indexed by aux slot, the others by page)
 * whose state component c has state_layers[c] layers of its own (0: one
 * buffer per model layer; state_layers NULL: none has). Nothing is
 * granted. 0, KVW_EINVAL (sizes out of range, overlapping buffers) or
 * KVW_ESYS, with text in err; *out is the caller's to close. */
int rtab_grant_create(const char *path, uint32_t nslots,
		      const struct kvw_buf *bufs, uint32_t nbufs,
		      const uint32_t *state_layers,
		      struct rtab_grant **out, char *err, size_t errlen);

/* Sink: maps the grant file at path read-only. 0, KVW_ENOENT,
 * KVW_EVERSION (not a grant file, or its size does not match) or
 * KVW_ESYS. */
int rtab_grant_open(const char *path, struct rtab_grant **out, char *err,
		    size_t errlen);

/* Unmaps; accepts NULL and *g == NULL; sets *g = NULL. The file stays. */
void rtab_grant_close(struct rtab_grant **g);

/* The token target i (< RTAB_GRANT_MAX_TARGETS) of a room with base
 * token `base` carries: a keyed hash (SipHash-2-4 under key) of both, its
 * low byte replaced by i; never 0. rtab_grant_token uses g's key. */
uint64_t rtab_grant_token_of(const uint8_t key[16], uint64_t base,
			     uint32_t i);
uint64_t rtab_grant_token(const struct rtab_grant *g, uint64_t base,
			  uint32_t i);
/* Copies g's token key to key[16] (the receiver derives its targets'
 * tokens with it). */
void rtab_grant_key(const struct rtab_grant *g, uint8_t key[16]);

/* Receiver (the one writer): grants incarnation ref (base token != 0) the
 * pool pages pages[npages] and aux slot aux (RTAB_GRANT_NO_AUX: none) for
 * targets tg[0..ntg) (1..RTAB_GRANT_MAX_TARGETS; target i's batches carry
 * rtab_grant_token(base, i)), replacing whatever the slot granted before.
 * The slices go to the slice table once (a run equal to tg already there
 * is reused). Every argument is checked first: 0, or KVW_EINVAL
 * (read-only map, zero ref or token, slot out of range, no or too many
 * targets) / KVW_ERANGE (a page or aux slot outside the maps, the slice
 * table full) with nothing changed. */
int rtab_grant_give_targets(struct rtab_grant *g, struct rtab_ref ref,
			    uint64_t token, const struct rtab_grant_target *tg,
			    uint32_t ntg, const uint32_t *pages,
			    uint32_t npages, uint32_t aux);
/* The same for one target that may write every byte of the room's pages
 * and aux slot (rtab_grant_whole): for tests and single-rank setups. */
int rtab_grant_give(struct rtab_grant *g, struct rtab_ref ref, uint64_t token,
		    const uint32_t *pages, uint32_t npages, uint32_t aux);
/* A slice of every layer, the aux slot and whole token slots. */
struct rtab_grant_target rtab_grant_whole(void);

/* Receiver: grants incarnation ref rows[0..n) of state component comp
 * (after rtab_grant_give_targets, before the XFER_INFO that lets a
 * prefill rank write them; a target may write the rows of its layers).
 * 0, KVW_EINVAL (read-only, zero ref, comp of KVW_MAX_STATE or more) or
 * KVW_ERANGE (a row outside the component) with nothing changed. */
int rtab_grant_give_rows(struct rtab_grant *g, struct rtab_ref ref,
			 uint32_t comp, const uint32_t *rows, uint32_t n);
/* Frees the rows ref still owns (after rtab_grant_withdraw). */
void rtab_grant_withdraw_rows(struct rtab_grant *g, struct rtab_ref ref,
			      uint32_t comp, const uint32_t *rows, uint32_t n);

/* Receiver: withdraws ref's grant, if the slot still grants ref: the
 * record is emptied first, then every page and the aux slot still owned
 * by ref is freed (a page another room owns now is left alone). Returns 1
 * when withdrawn, 0 when the slot granted something else (or nothing). */
int rtab_grant_withdraw(struct rtab_grant *g, struct rtab_ref ref,
			const uint32_t *pages, uint32_t npages, uint32_t aux);

/* Sink: starts a check of a batch for incarnation ref carrying
 * `incarnation`, the token of one target of the grant (its index is the
 * token's low byte): RTAB_GRANT_OK and *rd (that target's slice), or
 * RTAB_GRANT_NOT_LIVE (no grant, or a token of no target: 0 included). */
int rtab_grant_begin(const struct rtab_grant *g, struct rtab_ref ref,
		     uint64_t incarnation, struct rtab_grant_read *rd);

/* Sink: 1 when every byte of [off, off + len) lies in one buffer, in
 * pages (or the aux slot) owned by rd's incarnation, and in rd's target's
 * slice (its layers, the aux slot if it may, its bytes of one token slot
 * under a head slice); 0 otherwise (also for an overflow; a zero length
 * is checked as its first byte). */
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
