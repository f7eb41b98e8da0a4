/*
 * rdma_cq.c - completion bookkeeping (rdma_cq.h).
 */
#include "rdma_cq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvw.h"

int rdma_track_init(struct rdma_track *t, uint32_t cap,
		    const struct rdma_lib *lib)
{
	memset(t, 0, sizeof *t);
	t->seg = calloc(cap ? cap : 1, sizeof *t->seg);
	if (!t->seg)
		return KVW_ENOMEM;
	t->cap = cap ? cap : 1;
	t->lib = lib;
	return 0;
}

void rdma_track_free(struct rdma_track *t)
{
	free(t->seg);
	t->seg = NULL;
	t->cap = t->count = t->head = 0;
}

static struct rdma_seg *at(const struct rdma_track *t, uint32_t k)
{
	return &t->seg[(t->head + k) % t->cap];
}

int rdma_track_post(struct rdma_track *t, uint32_t nwr, uint64_t room,
		    uint64_t batch)
{
	struct rdma_seg *last = t->count ? at(t, t->count - 1) : NULL;

	if (nwr == 0)
		return KVW_EINVAL;
	if (last && last->room == room && last->batch == batch) {
		last->end += nwr;
	} else {
		if (t->count == t->cap)
			return KVW_ENOMEM;
		*at(t, t->count) = (struct rdma_seg){ t->posted + nwr, room,
						      batch };
		t->count++;
	}
	t->posted += nwr;
	return 0;
}

/* Settles every WR up to id: segments ending there or before leave. */
static void settle(struct rdma_track *t, uint64_t id)
{
	while (t->count && at(t, 0)->end <= id) {
		t->head = (t->head + 1) % t->cap;
		t->count--;
	}
	t->done = id;
}

/* The room of the segment holding WR id (pending). */
static uint64_t room_of(const struct rdma_track *t, uint64_t id)
{
	for (uint32_t k = 0; k < t->count; k++)
		if (id <= at(t, k)->end)
			return at(t, k)->room;
	return 0;
}

int rdma_track_complete(struct rdma_track *t, uint64_t wr_id, int status,
			uint32_t vendor_err)
{
	char st[96];

	if (wr_id <= t->done || wr_id > t->posted)
		return KVW_EINVAL;
	t->completions++;
	if (status != 0 && t->status == 0) {
		t->status = status;
		t->bad_room = room_of(t, wr_id);
		snprintf(t->why, sizeof t->why,
			 "%s, vendor error 0x%x, on WR %llu of room %llu",
			 rdma_status_text(t->lib, status, st, sizeof st),
			 vendor_err, (unsigned long long)wr_id,
			 (unsigned long long)t->bad_room);
	}
	settle(t, wr_id);
	return status ? KVW_ESYS : 0;
}

void rdma_track_abandon(struct rdma_track *t)
{
	settle(t, t->posted);
}

/* Outstanding WRs of pending segment k: from the one before it (or the
 * settled point) to its end. */
static uint64_t left_of(const struct rdma_track *t, uint32_t k)
{
	uint64_t from = k ? at(t, k - 1)->end : t->done;

	return at(t, k)->end - from;
}

/* Outstanding WRs of the pending segments whose room (by_room) or batch
 * is v. */
static uint64_t left_if(const struct rdma_track *t, int by_room, uint64_t v)
{
	uint64_t n = 0;

	for (uint32_t k = 0; k < t->count; k++)
		if ((by_room ? at(t, k)->room : at(t, k)->batch) == v)
			n += left_of(t, k);
	return n;
}

uint64_t rdma_track_room_left(const struct rdma_track *t, uint64_t room)
{
	return left_if(t, 1, room);
}

uint64_t rdma_track_batch_left(const struct rdma_track *t, uint64_t batch)
{
	return left_if(t, 0, batch);
}

void rdma_track_clear_error(struct rdma_track *t)
{
	t->status = 0;
	t->bad_room = 0;
	t->why[0] = '\0';
}
