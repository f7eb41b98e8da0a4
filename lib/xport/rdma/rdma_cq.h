/*
 * rdma_cq.h - completion bookkeeping of one queue pair, with no verb called:
 * which WRs are outstanding, to which room and batch they belong, and the
 * first failure. WRs carry their sequence number as wr_id (1, 2, ...; see
 * rdma_chain.h). A reliable-connected queue pair completes its send WRs in
 * the order they were posted, and a signalled WR's completion means every
 * WR before it has completed too (unsignalled ones report nothing), so one
 * completion with id w settles every WR up to w.
 *
 * Posted WRs are kept as segments (a run of WRs of one room and batch; the
 * runs of consecutive posts of the same room and batch merge), oldest first
 * in a ring, so "is any WR of room R outstanding?" and "how many WRs of
 * batch B are left?" are answered from what is pending, and a failed
 * completion can be told with the room it hit. After a failure the queue
 * pair is in the error state and every later WR completes with a flush
 * error; the owner drains until nothing is outstanding.
 */
#ifndef KVW_RDMA_CQ_H
#define KVW_RDMA_CQ_H

#include <stddef.h>
#include <stdint.h>

#include "rdma_lib.h"

struct rdma_seg {
	uint64_t end;   /* id of its last WR */
	uint64_t room;
	uint64_t batch;
};

struct rdma_track {
	uint64_t posted; /* id of the last WR posted (0: none yet) */
	uint64_t done;   /* every WR with id <= done has completed */
	struct rdma_seg *seg; /* ring of pending segments, oldest at head */
	uint32_t cap, head, count;
	uint64_t completions; /* completions taken, failed ones included */
	int status;           /* the first failed completion's, 0: none */
	uint64_t bad_room;    /* the room of the WR that failed first */
	char why[200];        /* "remote access error (status 10) ..." */
	const struct rdma_lib *lib; /* for status texts; NULL: numbers */
};

/* Room for cap pending segments (one per posted WR at most, so the send
 * queue's depth is enough). 0 or KVW_ENOMEM. */
int rdma_track_init(struct rdma_track *t, uint32_t cap,
		    const struct rdma_lib *lib);
void rdma_track_free(struct rdma_track *t);

/* WRs posted and not completed yet. */
static inline uint64_t rdma_track_outstanding(const struct rdma_track *t)
{
	return t->posted - t->done;
}

/* The id the next posted WR gets. */
static inline uint64_t rdma_track_next_id(const struct rdma_track *t)
{
	return t->posted + 1;
}

/* Records nwr (>= 1) WRs posted with ids next_id .. next_id + nwr - 1, all
 * of room and batch. 0, KVW_EINVAL (nwr 0) or KVW_ENOMEM (the ring is
 * full: more segments than the track was made for); nothing changes on
 * error. */
int rdma_track_post(struct rdma_track *t, uint32_t nwr, uint64_t room,
		    uint64_t batch);

/* Takes one completion: wr_id, its status (IBV_WC_*; 0 success) and the
 * vendor's error code. Every WR up to wr_id is settled. Returns 0, KVW_ESYS
 * for a failed completion (the first one is kept in status, bad_room,
 * why), or KVW_EINVAL for an id that is not outstanding (changes
 * nothing). */
int rdma_track_complete(struct rdma_track *t, uint64_t wr_id, int status,
			uint32_t vendor_err);

/* Counts every outstanding WR done without a completion: the drain of a
 * queue pair that was destroyed without its last completion arriving. */
void rdma_track_abandon(struct rdma_track *t);

/* Outstanding WRs of room / of batch (0: none in flight). */
uint64_t rdma_track_room_left(const struct rdma_track *t, uint64_t room);
uint64_t rdma_track_batch_left(const struct rdma_track *t, uint64_t batch);

/* Forgets the first failure (a queue pair brought up afresh). */
void rdma_track_clear_error(struct rdma_track *t);

#endif
