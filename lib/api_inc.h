/*
 * api_inc.h - which incarnation of a room id an engine's kvw_poll may
 * report (issue 29, item 4). BEGIN and CLEAR are queued to the control
 * process, which changes the table later: right after CLEAR (and a new
 * BEGIN) under the same id the table still holds the previous incarnation
 * (Success or Failed, then its Cleared tombstone). So the engine keeps a
 * record per room id it cleared or began:
 *  - CLEAR records the incarnation the table shows for the id then (the
 *    one the engine is done with);
 *  - BEGIN records the one the table shows then if it is over (terminal)
 *    and an engine began it (RTAB_F_BEGUN), else keeps what CLEAR
 *    recorded: a live incarnation found at BEGIN is the room's own (on
 *    prefill a decode's XFER_INFO opens it before SEND_BEGIN; the Python
 *    KVSender polls it before init()), and so is one over that no engine
 *    began (the decode opened it and aborted it before SEND_BEGIN came:
 *    kv-sender ignores that SEND_BEGIN, and the engine must see the
 *    Failed, not wait for its own timeout).
 * kvw_poll never reports the recorded incarnation nor a Cleared tombstone
 * of a recorded id: "not in the table yet" (KVW_ENOENT) instead. Records
 * of ids cleared and not begun again are dropped in a sweep once the table
 * shows their CLEAR done (a sweep once API_INC_SWEEP of them, or twice
 * what the last sweep left, piled up).
 *
 * Thread-safe: kvw_poll may run in any thread while another sends.
 */
#ifndef KVW_API_INC_H
#define KVW_API_INC_H

#include <pthread.h>
#include <stdint.h>

#include "base/idmap.h"
#include "table/rtab.h"

#define API_INC_SWEEP 1024u

struct api_inc {
	pthread_mutex_t lock;
	struct idmap map;  /* room -> struct api_inc_rec */
	uint32_t idle;     /* records of ids cleared and not begun again */
	uint32_t sweep_at; /* idle count that starts the next sweep */
	int ready;
};

/* 0 or KVW_ENOMEM. */
int api_inc_init(struct api_inc *a);
/* Frees every record; accepts a zeroed or failed one. */
void api_inc_fini(struct api_inc *a);

/* Before a BEGIN of room is queued: 0; KVW_EAGAIN when the table could not
 * be read right now (a slot being rewritten: queue nothing, retry);
 * KVW_ENOMEM. */
int api_inc_begin(struct api_inc *a, const struct rtab *t, uint64_t room);

/* Before a CLEAR of room is queued: 0, KVW_EAGAIN or KVW_ENOMEM as above. */
int api_inc_clear(struct api_inc *a, const struct rtab *t, uint64_t room);

/* Whether v (the table's incarnation of its room now) is one the engine
 * must not see. */
int api_inc_hidden(struct api_inc *a, const struct rtab_view *v);

#endif
