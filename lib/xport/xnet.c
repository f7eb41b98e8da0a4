/*
 * xnet.c - TCP socket steps shared by transports (xnet.h).
 */
#include "xnet.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/kvw.h"

int xnet_split(const char *s, char *host, size_t cap, uint16_t *port)
{
	const char *c = strrchr(s, ':');
	size_t n = c ? (size_t)(c - s) : strlen(s);
	unsigned long p = 0;
	char *end;

	if (n == 0 || n >= cap)
		return KVW_EINVAL;
	if (c) {
		errno = 0;
		p = strtoul(c + 1, &end, 10);
		if (errno || *end || end == c + 1 || p > 65535)
			return KVW_EINVAL;
	}
	memcpy(host, s, n);
	host[n] = '\0';
	*port = (uint16_t)p;
	return 0;
}

int xnet_listen(const char *host, uint16_t *port, int nonblock, char *err,
		size_t errlen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICHOST | AI_PASSIVE };
	struct addrinfo *ai = NULL;
	struct sockaddr_storage sa;
	socklen_t salen = sizeof sa;
	char ps[8];
	int fd, one = 1, rc;

	snprintf(ps, sizeof ps, "%u", *port);
	rc = getaddrinfo(host, ps, &hints, &ai);
	if (rc != 0)
		return kvw_errf(err, errlen, KVW_EINVAL, "%s: %s", host,
				gai_strerror(rc));
	fd = socket(ai->ai_family,
		    SOCK_STREAM | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0),
		    0);
	if (fd < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 ||
	    listen(fd, SOMAXCONN) < 0 ||
	    getsockname(fd, (struct sockaddr *)&sa, &salen) < 0) {
		kvw_seterr(err, errlen, "listen on %.100s:%u: %s", host, *port,
			   strerror(errno));
		if (fd >= 0)
			close(fd);
		freeaddrinfo(ai);
		return KVW_ESYS;
	}
	freeaddrinfo(ai);
	*port = ntohs(sa.ss_family == AF_INET6
			      ? ((struct sockaddr_in6 *)&sa)->sin6_port
			      : ((struct sockaddr_in *)&sa)->sin_port);
	return fd;
}

int xnet_dial(const char *host, uint16_t port, int connect_ms, int io_ms,
	      char *why, size_t whylen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICHOST };
	struct timeval tv = { io_ms / 1000, (io_ms % 1000) * 1000 };
	struct addrinfo *ai = NULL;
	struct pollfd pfd;
	socklen_t sl = sizeof(int);
	char ps[8];
	int fd, one = 1, soerr = 0, rc;

	snprintf(ps, sizeof ps, "%u", port);
	rc = getaddrinfo(host, ps, &hints, &ai);
	if (rc != 0) {
		snprintf(why, whylen, "%.64s: %s", host, gai_strerror(rc));
		return -1;
	}
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK,
		    0);
	if (fd < 0) {
		snprintf(why, whylen, "socket: %s", strerror(errno));
		freeaddrinfo(ai);
		return -1;
	}
	rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	if (rc < 0 && errno == EINPROGRESS) {
		pfd = (struct pollfd){ .fd = fd, .events = POLLOUT };
		rc = poll(&pfd, 1, connect_ms);
		if (rc == 1 &&
		    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 &&
		    soerr == 0)
			rc = 0;
		else
			errno = rc == 0 ? ETIMEDOUT : soerr ? soerr : errno;
	}
	if (rc != 0 || fcntl(fd, F_SETFL, 0) < 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0) {
		snprintf(why, whylen, "connect %.64s:%u: %s", host, port,
			 strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

int xnet_io_all(int fd, uint8_t *buf, size_t len, int out)
{
	while (len > 0) {
		ssize_t k = out ? send(fd, buf, len, MSG_NOSIGNAL)
				: recv(fd, buf, len, 0);

		if (k < 0 && errno == EINTR)
			continue;
		if (k == 0)
			errno = ECONNRESET;
		if (k <= 0)
			return -1;
		buf += k;
		len -= (size_t)k;
	}
	return 0;
}
