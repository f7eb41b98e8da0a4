/*
 * chan.h - frames between kv-sender and one of its own worker processes
 * over a socketpair, without ZMQ.
 *
 * Why: a JOB through ZMQ wakes four threads (the control, its I/O thread,
 * the worker's I/O thread, the worker); over a socketpair the worker's
 * poll(2) returns straight from the control's write(2). Both ends are one
 * program forked from one process, so the stream needs no identities and
 * no reconnects; the bytes still go through the one codec (frame_decode)
 * before a handler sees them.
 *
 * A record is `u32 length | u8 nparts | nparts x u32 part length | parts`
 * (little-endian; length counts everything after itself). A record whose
 * framing is wrong (length over CHAN_RECORD_MAX, nparts outside
 * 1..KVW_MAX_FRAMES, part lengths that do not add up) breaks the stream:
 * there is no way to find the next record, so the channel reports it gone.
 * A well-framed record the codec refuses is consumed and reported, and the
 * stream goes on.
 *
 * Both descriptors are non-blocking. Sends queue what the kernel does not
 * take at once; the owner polls for POLLOUT while chan_pending() and calls
 * chan_flush(). Single-threaded, like the loops that own it.
 */
#ifndef KVW_CHAN_H
#define KVW_CHAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/byteq.h"
#include "frame.h"

/* The largest record: a JOB of KVW_MAX_COPIES copies plus its header and
 * body, with room to spare. */
#define CHAN_RECORD_MAX \
	(64u * 1024u + (size_t)KVW_MAX_COPIES * FRAME_COPY_LEN)

struct chan {
	int fd; /* -1: closed */
	struct byteq in;  /* received bytes not yet taken */
	struct byteq out; /* bytes to write */
	struct frame_part parts[KVW_MAX_FRAMES];
};

/* A connected pair: fds[0] for the control, fds[1] for the worker, both
 * non-blocking and close-on-exec (the worker's end must be made
 * inheritable in the child before exec). 0 or KVW_ESYS (errno kept). */
int chan_pair(int fds[2]);

/* Wraps fd (the channel owns it from here on). */
void chan_init(struct chan *c, int fd);
/* Closes the descriptor and frees the buffers; safe twice. */
void chan_close(struct chan *c);

/* Encodes m and queues it, then writes what the kernel takes. Returns 0
 * (written or queued), KVW_EINVAL / KVW_EVERSION (m does not encode;
 * nothing queued), KVW_ENOMEM, or KVW_ESYS (the peer is gone). */
int chan_send(struct chan *c, const struct frame_msg *m, char *err,
	      size_t errlen);
/* Writes queued bytes: 0 when none are left, 1 when some still wait for
 * POLLOUT, KVW_ESYS when the peer is gone. */
int chan_flush(struct chan *c);
/* 1 when queued bytes wait for POLLOUT. */
int chan_pending(const struct chan *c);

/* Takes the next whole record and decodes it into *m, whose views point
 * into the channel's buffer: valid until the next chan_recv or
 * chan_close. Returns 0; KVW_EAGAIN (no whole record yet); KVW_EINVAL /
 * KVW_EVERSION (the codec refused the record, which is consumed; err says
 * why); KVW_ESYS (end of stream, a read error, or a broken framing: the
 * channel is finished, err says which). */
int chan_recv(struct chan *c, struct frame_msg *m, char *err, size_t errlen);

#endif
