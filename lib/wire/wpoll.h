/*
 * wpoll.h - waiting on ZMQ sockets for the price of one poll(2).
 *
 * zmq_poll() asks every socket for ZMQ_EVENTS before and after it sleeps;
 * with this libzmq each ask is a getpid() and a poll() of the socket's
 * mailbox, so a wakeup costs about four system calls per socket. wpoll
 * polls the sockets' ZMQ_FD descriptors once and names the sockets that
 * can have input ("due"); the caller receives only from those. A ZMQ_FD
 * is edge-like: it signals new input only after an operation on the
 * socket found nothing left. Hence the contract:
 *   - a socket is due when just set, when the poll found its descriptor
 *     readable, or when the caller touched it;
 *   - the caller receives from a due socket until EAGAIN and then calls
 *     wpoll_drained() (a socket left with input stays due);
 *   - any other operation on a socket (a send above all) may take in its
 *     input signal: the caller then calls wpoll_touch() for it, so it is
 *     received from again before the next sleep.
 * Single-threaded, like the sockets it watches.
 */
#ifndef KVW_WPOLL_H
#define KVW_WPOLL_H

#include <stddef.h>
#include <stdint.h>

#define WPOLL_MAX 65536u /* slots of one set (grown as used) */

struct wpoll;

/* An empty set; NULL when out of memory. */
struct wpoll *wpoll_new(void);
/* Frees the set (never closes a socket); accepts NULL and *w == NULL. */
void wpoll_free(struct wpoll **w);

/* Puts sock in slot i (< WPOLL_MAX; the set grows to i + 1 slots). The
 * same socket again keeps its state; a new one (or NULL: an empty slot,
 * never due) replaces it and is due. Returns 0, or KVW_EINVAL, KVW_ENOMEM
 * (set unchanged) or KVW_ESYS (ZMQ_FD unavailable; the slot left empty). */
int wpoll_set(struct wpoll *w, uint32_t i, void *sock);
/* Puts a plain descriptor in slot i (fd < 0: an empty slot), polled for
 * `events` (POLLIN, POLLOUT). Level-triggered: the slot is due whenever
 * poll(2) reports one of them (or an error or hang-up) and after the
 * caller's wpoll_drained() only until the next such report. The same fd
 * again only changes its events. 0, KVW_EINVAL or KVW_ENOMEM. */
int wpoll_set_fd(struct wpoll *w, uint32_t i, int fd, short events);
/* Drops slots i.. (the set has i slots). */
void wpoll_truncate(struct wpoll *w, uint32_t n);

/* Marks slot i, the slot holding sock (no-op when none), or every slot
 * due. */
void wpoll_touch(struct wpoll *w, uint32_t i);
void wpoll_touch_sock(struct wpoll *w, const void *sock);
void wpoll_touch_all(struct wpoll *w);

/* Returns at once with the number of due slots when there are any;
 * otherwise poll(2)s the descriptors for up to timeout_ms (-1: no limit)
 * and returns how many became due (0: timed out). -1 with errno set
 * (EINTR for a signal) on failure. */
int wpoll_wait(struct wpoll *w, long timeout_ms);
/* 1 when slot i is due. */
int wpoll_due(const struct wpoll *w, uint32_t i);
/* The caller received from slot i until EAGAIN: not due any more. */
void wpoll_drained(struct wpoll *w, uint32_t i);

#endif
