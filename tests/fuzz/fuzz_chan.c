/*
 * fuzz_chan.c - libFuzzer target for chan_recv. Byte 0 picks the size of
 * the pieces in which the rest of the input is written raw into one end
 * of a real chan_pair; after each piece the other end is drained with
 * chan_recv, so records arrive split at every place. Then the writer end
 * is closed and the reader drained to the end of stream. Every result
 * must be one chan_recv promises: a decoded message (which must encode
 * back to exactly the received parts, so every byte of them is read),
 * a codec refusal with its reason, EAGAIN only while the writer is open,
 * or ESYS with its reason, after which the channel stays finished. Both
 * descriptors are closed every run and checked closed (no fd leak).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire/chan.h"

#define INPUT_MAX (256u * 1024u) /* longer inputs are ignored */
#define SMALL_MAX (16u * 1024u)  /* cap for pieces under 64 bytes */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

/* Reads every view of a decoded message. */
static void touch(const struct frame_msg *m)
{
	uint64_t s = m->hdr.room ^ m->hdr.epoch ^ m->hdr.src_rank;
	struct frame_u32s pages = { NULL, 0 };

	switch (m->hdr.type) {
	case FRAME_REGISTER:
		for (uint32_t i = 0; i < m->u.reg.desc.len; i++)
			s += m->u.reg.desc.p[i];
		for (uint32_t i = 0; i < m->u.reg.bufs.n; i++)
			s += frame_bufs_get(m->u.reg.bufs, i).offset;
		s += strlen(m->u.reg.endpoint) + strlen(m->u.reg.transport);
		break;
	case FRAME_XFER_INFO:
		pages = m->u.xfer_info.pages;
		break;
	case FRAME_SEND_CHUNK:
		pages = m->u.send_chunk.pages;
		break;
	case FRAME_RECV_BEGIN:
		pages = m->u.recv_begin.pages;
		s += strlen(m->u.recv_begin.bootstrap);
		break;
	case FRAME_JOB:
		for (uint32_t i = 0; i < m->u.job.desc.len; i++)
			s += m->u.job.desc.p[i];
		for (uint32_t i = 0; i < m->u.job.copies.n; i++) {
			struct frame_copy c = frame_copies_get(m->u.job.copies, i);

			s += c.src_off ^ c.dst_off ^ c.len;
		}
		s += strlen(m->u.job.reply);
		break;
	case FRAME_JOB_DONE:
		s += m->u.job_done.bytes + m->u.job_done.count;
		break;
	}
	for (uint32_t i = 0; i < pages.n; i++)
		s += frame_u32s_get(pages, i);
	sink += s;
}

/* Checks a decoded message against the record it came from: the codec's
 * wire form is canonical, so encoding it again gives the same parts. */
static void check_canonical(const struct chan *r, const struct frame_msg *m)
{
	static struct frame_out o;
	char err[160];

	if (frame_encode(m, &o, err, sizeof err) != 0)
		abort(); /* chan_recv handed out what the codec refuses */
	for (size_t i = 0; i < o.nparts; i++)
		if (o.parts[i].len != r->parts[i].len ||
		    (o.parts[i].len &&
		     memcmp(o.parts[i].data, r->parts[i].data, o.parts[i].len)))
			abort();
}

/* Takes records until EAGAIN or ESYS and returns which. */
static int drain(struct chan *r)
{
	struct frame_msg m;
	char err[160];

	for (;;) {
		int rc;

		err[0] = '\0';
		rc = chan_recv(r, &m, err, sizeof err);
		if (rc == 0) {
			touch(&m);
			check_canonical(r, &m);
			continue;
		}
		if (rc == KVW_EAGAIN)
			return rc;
		if (rc != KVW_EINVAL && rc != KVW_EVERSION && rc != KVW_ESYS)
			abort();
		if (err[0] == '\0')
			abort(); /* every failure says why */
		if (rc == KVW_ESYS)
			return rc;
	}
}

static void assert_closed(int fd)
{
	if (fcntl(fd, F_GETFD) != -1 || errno != EBADF)
		abort(); /* a descriptor outlived its run */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const size_t pieces[] = { 65536, 1, 3, 17, 255, 4096, 100000 };
	struct frame_msg m;
	struct chan r;
	int fds[2], rc = KVW_EAGAIN;
	size_t piece, off = 1;

	if (size < 1 || size > 1 + INPUT_MAX)
		return 0;
	piece = pieces[data[0] % (sizeof pieces / sizeof pieces[0])];
	if (piece < 64 && size > 1 + SMALL_MAX)
		size = 1 + SMALL_MAX;
	if (chan_pair(fds) != 0)
		abort();
	chan_init(&r, fds[1]);
	while (off < size && rc != KVW_ESYS) {
		size_t n = size - off < piece ? size - off : piece;
		ssize_t k = send(fds[0], data + off, n,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (k < 0 && errno != EAGAIN && errno != EINTR)
			abort(); /* the reader is open: a write cannot fail */
		if (k > 0)
			off += (size_t)k;
		/* Draining empties the socket, so the next send progresses. */
		rc = drain(&r);
	}
	close(fds[0]);
	if (rc != KVW_ESYS)
		rc = drain(&r);
	if (rc != KVW_ESYS)
		abort(); /* the writer is gone: the stream must end */
	if (chan_recv(&r, &m, NULL, 0) != KVW_ESYS)
		abort(); /* a finished channel stays finished */
	chan_close(&r);
	assert_closed(fds[0]);
	assert_closed(fds[1]);
	return 0;
}
