/*
 * chan.c - see chan.h. A send goes straight from the encoded parts to the
 * kernel with one sendmsg(2); only what the kernel does not take is copied
 * into the queue. A receive reads in large pieces and hands out whole
 * records in place.
 */
#include "chan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define READ_MIN (64u * 1024u)     /* bytes asked of each read(2) at least */
#define KEEP_MAX (1024u * 1024u)   /* an idle buffer above this is freed */
#define SOCKBUF (1024 * 1024)      /* asked for; the kernel may give less */

int chan_pair(int fds[2])
{
	int sz = SOCKBUF;

	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0,
		       fds) != 0)
		return KVW_ESYS;
	/* Fewer partial writes for big jobs; a smaller grant is fine. */
	for (int i = 0; i < 2; i++) {
		(void)setsockopt(fds[i], SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
		(void)setsockopt(fds[i], SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
	}
	return 0;
}

void chan_init(struct chan *c, int fd)
{
	memset(c, 0, sizeof *c);
	c->fd = fd;
}

void chan_close(struct chan *c)
{
	if (c->fd >= 0)
		close(c->fd);
	byteq_free(&c->in);
	byteq_free(&c->out);
	memset(c, 0, sizeof *c);
	c->fd = -1;
}

int chan_pending(const struct chan *c)
{
	return c->out.off < c->out.len;
}

static int gone(int e)
{
	return e != EAGAIN && e != EWOULDBLOCK && e != EINTR;
}

int chan_flush(struct chan *c)
{
	while (c->out.off < c->out.len) {
		ssize_t n = send(c->fd, c->out.p + c->out.off,
				 c->out.len - c->out.off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return gone(errno) ? KVW_ESYS : 1;
		c->out.off += (size_t)n;
	}
	c->out.off = c->out.len = 0;
	if (c->out.cap > KEEP_MAX)
		byteq_free(&c->out);
	return 0;
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

int chan_send(struct chan *c, const struct frame_msg *m, char *err,
	      size_t errlen)
{
	struct frame_out o;
	uint8_t head[4 + 1 + 4 * KVW_MAX_FRAMES];
	struct iovec iov[1 + KVW_MAX_FRAMES];
	size_t hlen, total, sent = 0;
	int rc = frame_encode(m, &o, err, errlen);

	if (rc)
		return rc;
	if (c->fd < 0)
		return kvw_errf(err, errlen, KVW_ESYS, "channel closed");
	hlen = 5 + 4 * o.nparts;
	total = hlen;
	head[4] = (uint8_t)o.nparts;
	iov[0] = (struct iovec){ head, hlen };
	for (size_t i = 0; i < o.nparts; i++) {
		put32(head + 5 + 4 * i, (uint32_t)o.parts[i].len);
		iov[1 + i] = (struct iovec){ (void *)(uintptr_t)o.parts[i].data,
					     o.parts[i].len };
		total += o.parts[i].len;
	}
	put32(head, (uint32_t)(total - 4));
	if (!chan_pending(c)) {
		struct msghdr mh = { .msg_iov = iov, .msg_iovlen = 1 + o.nparts };
		ssize_t n;

		do
			n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
		while (n < 0 && errno == EINTR);
		if (n < 0 && gone(errno))
			return kvw_errf(err, errlen, KVW_ESYS, "send %s: %s",
					frame_type_str(m->hdr.type),
					strerror(errno));
		sent = n > 0 ? (size_t)n : 0;
		if (sent == total)
			return 0;
	}
	/* Queue what the kernel did not take, in order. */
	if (byteq_reserve(&c->out, total - sent) < 0)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	for (size_t i = 0; i <= o.nparts; i++) {
		size_t len = iov[i].iov_len;
		const uint8_t *p = iov[i].iov_base;

		if (sent >= len) {
			sent -= len;
			continue;
		}
		memcpy(c->out.p + c->out.len, p + sent, len - sent);
		c->out.len += len - sent;
		sent = 0;
	}
	rc = chan_flush(c);
	return rc == KVW_ESYS
		   ? kvw_errf(err, errlen, KVW_ESYS, "send %s: peer gone",
			      frame_type_str(m->hdr.type))
		   : 0;
}

/* Room for the rest of a record of `need` bytes from in.off, and at
 * least READ_MIN more to read into. */
static int in_reserve(struct chan *c, size_t need)
{
	size_t avail = c->in.len - c->in.off;

	return byteq_reserve(&c->in, (need > avail ? need - avail : 0) +
					     READ_MIN);
}

/* Takes the whole record at in.off (its length L already checked) and
 * decodes it. */
static int take(struct chan *c, uint32_t L, struct frame_msg *m, char *err,
		size_t errlen)
{
	const uint8_t *r = c->in.p + c->in.off + 4;
	unsigned n = r[0];
	size_t off, sum = 0;

	if (n < 1 || n > KVW_MAX_FRAMES || 1 + 4 * (size_t)n > L)
		return kvw_errf(err, errlen, KVW_ESYS,
				"channel broken: record of %u parts",
				n);
	off = 1 + 4 * (size_t)n;
	for (unsigned i = 0; i < n; i++) {
		size_t len = frame_le32(r + 1 + 4 * i);

		if (len > L - off - sum)
			return kvw_errf(err, errlen, KVW_ESYS,
					"channel broken: part %u runs past its record",
					i);
		c->parts[i] = (struct frame_part){ r + off + sum, len };
		sum += len;
	}
	if (off + sum != L)
		return kvw_errf(err, errlen, KVW_ESYS,
				"channel broken: parts of %zu bytes in a record of %u",
				sum, L);
	c->in.off += 4 + (size_t)L;
	return frame_decode(c->parts, n, m, err, errlen);
}

int chan_recv(struct chan *c, struct frame_msg *m, char *err, size_t errlen)
{
	for (;;) {
		size_t avail = c->in.len - c->in.off, need = 4;
		ssize_t n;

		if (avail >= 4) {
			uint32_t L = frame_le32(c->in.p + c->in.off);

			if (L < 5 || L > CHAN_RECORD_MAX)
				return kvw_errf(err, errlen, KVW_ESYS,
						"channel broken: record of %u bytes",
						L);
			if (avail >= 4 + (size_t)L)
				return take(c, L, m, err, errlen);
			need = 4 + (size_t)L;
		} else if (avail == 0 && c->in.cap > KEEP_MAX) {
			byteq_free(&c->in);
		}
		if (c->fd < 0)
			return kvw_errf(err, errlen, KVW_ESYS,
					"channel closed");
		if (in_reserve(c, need) < 0)
			return kvw_errf(err, errlen, KVW_ESYS, "out of memory");
		n = read(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len);
		if (n > 0) {
			c->in.len += (size_t)n;
			continue;
		}
		if (n == 0)
			return kvw_errf(err, errlen, KVW_ESYS, "end of stream");
		if (errno == EINTR)
			continue;
		if (!gone(errno))
			return KVW_EAGAIN;
		return kvw_errf(err, errlen, KVW_ESYS, "read: %s",
				strerror(errno));
	}
}
