/*
 * rtab_fence.h - the decode's writer-side fence (tcp transport): which room
 * each sink is writing right now, so kv-receiver can declare a room
 * releasable without waiting for a prefill that may be dead or cut off.
 *
 * On tcp the bytes are written by the decode's own sink processes, so the
 * promise "no byte lands after releasable" is kept at the writer. The rule
 * (a store-buffering pair, Dekker's shape):
 *
 *   sink:      rtab_fence_enter(room)  ; then read the room's state/flags;
 *              write only if live and not armed; rtab_fence_leave()
 *   receiver:  set RTAB_F_ARMED        ; then rtab_fence_busy(room);
 *              not busy -> releasable
 *
 * Both sides put a sequentially consistent fence between their store and
 * their load, so in the single total order of those fences either the
 * sink's enter comes first (the receiver sees it busy and waits for the
 * leave) or the receiver's fence comes first (the sink then reads ARMED
 * and discards the batch). No third outcome exists, so once the receiver
 * saw "not busy" after arming, no sink writes the room again.
 *
 * The fence lives in its own file beside the room table (a row of slots per
 * sink, a slot per connection). A sink that dies leaves its slots set; its
 * receiver clears the row only after reaping it (a reaped process writes
 * nothing), so a crash can delay a release but never allow a late byte.
 */
#ifndef KVW_RTAB_FENCE_H
#define KVW_RTAB_FENCE_H

#include <stddef.h>
#include <stdint.h>

#include "rtab.h"

struct rtab_fence;

#define RTAB_FENCE_MAX_SINKS 64u
#define RTAB_FENCE_MAX_SLOTS 4096u

/* Receiver: creates a fresh, zeroed fence at path (mode 0600; made in a
 * private file, then renamed over any old one, so a sink of an earlier
 * incarnation never shares it) for nsinks rows of nslots. 0, KVW_EINVAL
 * (a size out of range) or KVW_ESYS, with text in err. *out is the
 * caller's to rtab_fence_close. */
int rtab_fence_create(const char *path, uint32_t nsinks, uint32_t nslots,
		      struct rtab_fence **out, char *err, size_t errlen);

/* Sink: maps the fence at path read-write. 0, KVW_ENOENT, KVW_EVERSION
 * (not a fence, or a size that does not match its header) or KVW_ESYS. */
int rtab_fence_open(const char *path, struct rtab_fence **out, char *err,
		    size_t errlen);

/* Unmaps; accepts NULL and *f == NULL; sets *f = NULL. The file stays. */
void rtab_fence_close(struct rtab_fence **f);

/* Rows and slots per row, as created. */
uint32_t rtab_fence_sinks(const struct rtab_fence *f);
uint32_t rtab_fence_slots(const struct rtab_fence *f);

/* Sink: marks (sink, slot) as writing incarnation ref, then a full fence;
 * only after this may the sink read the room's state. Out-of-range
 * indices are ignored (and then the caller must not write: the return is
 * 0 for them, 1 when marked). */
int rtab_fence_enter(struct rtab_fence *f, uint32_t sink, uint32_t slot,
		     struct rtab_ref ref);

/* Sink: the write of (sink, slot) is over (release). */
void rtab_fence_leave(struct rtab_fence *f, uint32_t sink, uint32_t slot);

/* Receiver, after arming the room: a full fence, then 1 if any slot holds
 * ref, else 0. */
int rtab_fence_busy(const struct rtab_fence *f, struct rtab_ref ref);

/* Receiver, after reaping sink `sink`: clears its row. */
void rtab_fence_reset(struct rtab_fence *f, uint32_t sink);

#endif
