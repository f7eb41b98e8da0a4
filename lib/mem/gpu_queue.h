/*
 * gpu_queue.h - an ordered queue of device copies on one GPU: a CUDA stream
 * and an event recorded behind the copies queued so far. The cuda
 * transport keeps one per instance (one per worker process); it queues a
 * batch's device pieces, marks the queue, and its wait returns once the
 * mark is reached: the stream is in order, so no copy queued before the
 * mark is queued or running any more (the quiescence contract).
 *
 * libcudart is loaded at run time (cuda_rt.h, which only lib/mem
 * includes): without it, a driver or a GPU, probe and open answer
 * KVW_ENODEV "cuda: not available: <why>".
 */
#ifndef KVW_GPU_QUEUE_H
#define KVW_GPU_QUEUE_H

#include <stddef.h>
#include <stdint.h>

struct gpu_queue;

/* 0 when the runtime loads and sees a GPU; else KVW_ENODEV with why. */
int gpu_queue_probe(char *err, size_t errlen);

/* A queue on no device yet (gpu_queue_bind picks it). */
int gpu_queue_open(struct gpu_queue **out, char *err, size_t errlen);

/* Makes device the queue's (and the calling thread's current) device and
 * creates the stream and the event on it, once; binding to another device
 * afterwards is KVW_EINVAL (one instance copies for pools on one GPU). */
int gpu_queue_bind(struct gpu_queue *q, int device, char *err,
		   size_t errlen);

/* Queues a copy of len bytes (device or host addresses: the driver picks
 * peer-to-peer or staging). The queue is bound. */
int gpu_queue_copy(struct gpu_queue *q, void *dst, const void *src,
		   uint64_t len, char *err, size_t errlen);

/* Records the mark behind everything queued so far (without an event, it
 * waits for the stream itself and returns the event's error). */
int gpu_queue_mark(struct gpu_queue *q, char *err, size_t errlen);

/* Waits until the mark is reached: timeout_ms < 0 blocks; else
 * KVW_ETIMEDOUT once timeout_ms have passed with copies still running.
 * 0 at once when nothing is marked. */
int gpu_queue_wait(struct gpu_queue *q, int timeout_ms, char *err,
		   size_t errlen);

/* Waits for the mark, then frees the stream, the event and the queue. */
void gpu_queue_close(struct gpu_queue **q);

#endif
