/*
 * xnet.h - the few TCP socket steps the transports with a side channel
 * share (the rdma queue pair exchange; the tcp data port does the same):
 * HOST[:PORT] parsing, a listening socket on a numeric host, a dial with a
 * connect deadline and I/O timeouts, and exact sends and receives. Every
 * socket is close-on-exec; SIGPIPE is never raised (MSG_NOSIGNAL).
 */
#ifndef KVW_XNET_H
#define KVW_XNET_H

#include <stddef.h>
#include <stdint.h>

/* Splits "HOST:PORT" or "HOST" (port 0) into host[cap] and *port. 0, or
 * KVW_EINVAL (empty or too long host, a port that is not 0..65535) with
 * nothing written. */
int xnet_split(const char *s, char *host, size_t cap, uint16_t *port);

/* Listens on host:*port (numeric host; port 0: a free one, written back
 * to *port), non-blocking when nonblock. The fd, or KVW_EINVAL (host) /
 * KVW_ESYS with err saying why. */
int xnet_listen(const char *host, uint16_t *port, int nonblock, char *err,
		size_t errlen);

/* Connects to host:port (numeric host) within connect_ms; the blocking fd
 * with TCP_NODELAY and send and receive timeouts of io_ms, or -1 with
 * why[whylen] set. */
int xnet_dial(const char *host, uint16_t port, int connect_ms, int io_ms,
	      char *why, size_t whylen);

/* Sends (out != 0) or receives exactly len bytes on a blocking fd: 0, or
 * -1 with errno set (a connection closed early reads as ECONNRESET, a
 * timeout as EAGAIN). */
int xnet_io_all(int fd, uint8_t *buf, size_t len, int out);

#endif
