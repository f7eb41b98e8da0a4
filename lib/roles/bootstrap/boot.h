/*
 * boot.h - the rendezvous state of kv-bootstrap: which prefill instance
 * topology is being served (first accepted registration wins), which rank
 * slots (dp, cp, tp, pp) have registered and where their control endpoints
 * are, and the instance model every later registration and every lookup is
 * checked against. boot_handle() turns one decoded request into its reply;
 * there is no zmq, no I/O (the monotonic clock aside) and no allocation
 * after boot_open(), so the program owns the socket and the tests drive
 * this module directly.
 */
#ifndef KVW_BOOT_H
#define KVW_BOOT_H

#include <stddef.h>
#include <stdint.h>

#include "wire/frame.h"

/* Most rank slots (tp*pp*cp*dp) one instance may have; a registration
 * stating a larger topology is refused. The table is preallocated. */
#define BOOT_MAX_RANKS 4096u

struct boot;

/* Makes an empty bootstrap (no topology yet) whose replies carry `epoch`
 * in their header. Allocates the whole rank table now, so boot_handle()
 * never allocates. NULL on allocation failure with the reason in err. */
struct boot *boot_open(uint64_t epoch, char *err, size_t errlen);

/* Frees *b (NULL or half-built is fine) and NULLs the pointer. */
void boot_close(struct boot **b);

/* Handles one decoded, validated request and fills *reply (which the
 * caller sends back to the requester; it holds no pointers into req).
 * Every reply has src_rank 0, the request's room and the bootstrap's
 * epoch in its header.
 *  - PING -> PONG (header only).
 *  - BOOT_REGISTER -> BOOT_REPLY OK, or REFUSED with a text when the
 *    stated topology differs from the one fixed by the first accepted
 *    registration, the model differs from the instance model (page_tokens,
 *    dtype, total_kv_heads, head_bytes, flags; rank_kv_heads is per rank),
 *    the topology has more than BOOT_MAX_RANKS slots or the endpoint is
 *    empty. A refused registration changes nothing. Registering a slot
 *    again counts once: under the same header epoch only as an identical
 *    retry (another endpoint, model or layer range: REFUSED); under another
 *    epoch it overwrites endpoint, model and layer range once the old
 *    epoch is gone (no BOOT_REGISTER or PING with it for 1.5 s), and is
 *    answered NOT_READY until then (see docs/SECURITY.md).
 *  - PING also keeps the epoch of the prefill rank it names (src_rank,
 *    rankmap_unique) from going.
 *  - BOOT_LOOKUP: no topology yet -> NOT_READY. An asker model that
 *    disagrees -> REFUSED ("page size mismatch: prefill 16 tokens, decode
 *    32"; dtype only when both sides state one; an asker page_tokens of 0
 *    means "not stated", as from kv-ctl). Topology only (want all
 *    FRAME_LOOKUP_TOPO_ONLY) -> OK with topo, coord 0, the model and layer
 *    range of rank (0,0,0,0) once every slot has registered, else
 *    NOT_READY with "N of M ranks registered" and the topo. A coordinate
 *    -> OK with that rank's endpoint, model and layer range, or NOT_FOUND
 *    (outside the topology, or not registered yet).
 * Returns 0 when *reply is to be sent; KVW_EINVAL for a type the bootstrap
 * does not serve (the caller counts it as malformed; *reply unspecified). */
int boot_handle(struct boot *b, const struct frame_msg *req,
		struct frame_msg *reply, char *err, size_t errlen);

/* Distinct rank slots registered so far. */
uint32_t boot_registered(const struct boot *b);

/* Slots the topology has (tp*pp*cp*dp), 0 while no topology is known. */
uint32_t boot_expected(const struct boot *b);

/* BOOT_REGISTERs refused for a rank that is registered and live (issue
 * 14: another endpoint under its epoch, or another epoch before its own is
 * gone). */
uint64_t boot_unauthorised(const struct boot *b);

/* Tests: how long a rank's epoch must be silent to be gone (default 1.5 s). */
void boot_set_gone_ns(struct boot *b, uint64_t ns);

/* Nonzero once a topology is known and every slot has registered. */
int boot_ready(const struct boot *b);

#endif
