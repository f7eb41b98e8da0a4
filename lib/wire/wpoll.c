/*
 * wpoll.c - see wpoll.h. The descriptors are kept in a pollfd array in
 * slot order (grown by doubling), so a wait is one poll(2) over the set;
 * an empty slot carries fd -1, which poll ignores. A slot with a
 * descriptor but no socket is a plain one (wpoll_set_fd).
 */
#include "wpoll.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <zmq.h>

#include "base/kvw.h"

struct wpoll {
	uint32_t n, cap;
	uint32_t ndue;
	void **sock;
	struct pollfd *pfd;
	uint8_t *due;
};

struct wpoll *wpoll_new(void)
{
	return calloc(1, sizeof(struct wpoll));
}

void wpoll_free(struct wpoll **w)
{
	if (w && *w) {
		free((*w)->sock);
		free((*w)->pfd);
		free((*w)->due);
		free(*w);
		*w = NULL;
	}
}

/* Room for n slots: 0 or KVW_ENOMEM (what was there stays). */
static int grow(struct wpoll *w, uint32_t n)
{
	uint32_t cap = w->cap ? w->cap : 8;
	void **s;
	struct pollfd *p;
	uint8_t *d;

	if (n <= w->cap)
		return 0;
	while (cap < n)
		cap *= 2;
	s = realloc(w->sock, cap * sizeof *s);
	if (!s)
		return KVW_ENOMEM;
	w->sock = s;
	p = realloc(w->pfd, cap * sizeof *p);
	if (!p)
		return KVW_ENOMEM;
	w->pfd = p;
	d = realloc(w->due, cap * sizeof *d);
	if (!d)
		return KVW_ENOMEM;
	w->due = d;
	w->cap = cap;
	return 0;
}

static void mark(struct wpoll *w, uint32_t i, uint8_t due)
{
	if (w->due[i] == due)
		return;
	w->due[i] = due;
	if (due)
		w->ndue++;
	else
		w->ndue--;
}

/* Makes slot i exist; new slots are empty. */
static int extend(struct wpoll *w, uint32_t i)
{
	if (i >= WPOLL_MAX)
		return KVW_EINVAL;
	if (grow(w, i + 1) < 0)
		return KVW_ENOMEM;
	for (; w->n <= i; w->n++) {
		w->sock[w->n] = NULL;
		w->pfd[w->n] = (struct pollfd){ -1, POLLIN, 0 };
		w->due[w->n] = 0;
	}
	return 0;
}

int wpoll_set(struct wpoll *w, uint32_t i, void *sock)
{
	size_t len = sizeof(int);
	int fd = -1, rc = extend(w, i);

	if (rc < 0)
		return rc;
	if (w->sock[i] == sock && (sock || w->pfd[i].fd < 0))
		return 0;
	w->sock[i] = NULL;
	w->pfd[i].fd = -1;
	mark(w, i, 0);
	if (!sock)
		return 0;
	if (zmq_getsockopt(sock, ZMQ_FD, &fd, &len) != 0)
		return KVW_ESYS;
	w->sock[i] = sock;
	w->pfd[i] = (struct pollfd){ fd, POLLIN, 0 };
	mark(w, i, 1);
	return 0;
}

int wpoll_set_fd(struct wpoll *w, uint32_t i, int fd, short events)
{
	int rc = extend(w, i);

	if (rc < 0)
		return rc;
	if (!w->sock[i] && w->pfd[i].fd == fd && fd >= 0) {
		w->pfd[i].events = events;
		return 0;
	}
	w->sock[i] = NULL;
	w->pfd[i] = (struct pollfd){ fd, events, 0 };
	mark(w, i, fd >= 0);
	return 0;
}

void wpoll_truncate(struct wpoll *w, uint32_t n)
{
	while (w->n > n) {
		w->n--;
		mark(w, w->n, 0);
		w->sock[w->n] = NULL;
	}
}

void wpoll_touch(struct wpoll *w, uint32_t i)
{
	if (i < w->n && w->sock[i])
		mark(w, i, 1);
}

void wpoll_touch_sock(struct wpoll *w, const void *sock)
{
	for (uint32_t i = 0; sock && i < w->n; i++)
		if (w->sock[i] == sock)
			mark(w, i, 1);
}

void wpoll_touch_all(struct wpoll *w)
{
	for (uint32_t i = 0; i < w->n; i++)
		if (w->sock[i])
			mark(w, i, 1);
}

int wpoll_wait(struct wpoll *w, long timeout_ms)
{
	int rc;

	if (w->ndue)
		return (int)w->ndue;
	rc = poll(w->pfd, w->n, timeout_ms < 0 ? -1
			       : timeout_ms > 1000000000L ? 1000000000
			       : (int)timeout_ms);
	if (rc <= 0)
		return rc;
	for (uint32_t i = 0; i < w->n; i++)
		if (w->pfd[i].fd >= 0 &&
		    (w->pfd[i].revents & (POLLIN | POLLOUT | POLLERR | POLLHUP)))
			mark(w, i, 1);
	return (int)w->ndue;
}

int wpoll_due(const struct wpoll *w, uint32_t i)
{
	return i < w->n && w->due[i];
}

void wpoll_drained(struct wpoll *w, uint32_t i)
{
	if (i < w->n)
		mark(w, i, 0);
}
