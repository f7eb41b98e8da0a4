/*
 * api_inc.h - which incarnation of a room id an engine's kvw_poll may
 * report (issue 29, item 4). BEGIN and CLEAR are queued to the control
 * process, which changes the table later: right after CLEAR and a new
 * BEGIN under the same id the table still holds the previous incarnation
 * (Success, Failed, then its Cleared tombstone). So each BEGIN records the
 * incarnation the table showed for the id when the BEGIN was queued, if
 * that one was over (terminal); until CLEAR, kvw_poll reports neither that
 * incarnation nor any Cleared tombstone of the id (the room's own
 * incarnation is Cleared only by this engine's CLEAR, which drops the
 * record), only "not in the table yet". A non-terminal incarnation found
 * at BEGIN is taken as the room's own: on prefill a decode's XFER_INFO may
 * open it before SEND_BEGIN.
 *
 * Thread-safe: kvw_poll may run in any thread while another sends.
 */
#ifndef KVW_API_INC_H
#define KVW_API_INC_H

#include <pthread.h>
#include <stdint.h>

#include "base/idmap.h"
#include "table/rtab.h"

struct api_inc {
	pthread_mutex_t lock;
	struct idmap map; /* room -> struct api_inc_rec */
	int ready;
};

/* 0 or KVW_ENOMEM. */
int api_inc_init(struct api_inc *a);
/* Frees every record; accepts a zeroed or failed one. */
void api_inc_fini(struct api_inc *a);

/* Before a BEGIN of room is queued: records what the table shows for it.
 * 0; KVW_EAGAIN when the table could not be read right now (a slot being
 * rewritten: queue nothing, retry); KVW_ENOMEM. */
int api_inc_begin(struct api_inc *a, const struct rtab *t, uint64_t room);

/* After a CLEAR of room was queued: the engine is done with it. */
void api_inc_clear(struct api_inc *a, uint64_t room);

/* Whether v (the table's incarnation of its room now) is one the engine
 * must not see: an incarnation older than its last BEGIN. */
int api_inc_hidden(struct api_inc *a, const struct rtab_view *v);

#endif
