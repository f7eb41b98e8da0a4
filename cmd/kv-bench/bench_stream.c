/*
 * bench_stream.c - the limit a tcp transport's figure is divided by: one
 * raw TCP stream over loopback between this process and a forked reader,
 * sending the same number of bytes per pass from one buffer, with no
 * protocol, checks or checksum. The reader counts what it got and answers
 * one byte at the end, so the time covers every byte received.
 */
#include "bench_stream.h"

#include "bench_cpu.h"
#include "netns.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/kvw.h"
#include "base/proc.h"

#define CHUNK (1u << 20)

/* The forked reader: per pass, exactly `bytes` in, one byte back. */
static int reader(int lfd, uint64_t bytes)
{
	static uint8_t buf[CHUNK];
	int fd = accept(lfd, NULL, NULL);
	uint8_t one = 1;

	if (fd < 0)
		return 1;
	for (;;) {
		uint64_t left = bytes;

		while (left > 0) {
			ssize_t k = recv(fd, buf, left < CHUNK ? left : CHUNK, 0);

			if (k == 0)
				return 0; /* the writer is done */
			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0)
				return 1;
			left -= (uint64_t)k;
		}
		if (send(fd, &one, 1, 0) != 1)
			return 1;
	}
}

/* One pass over the connection: bytes out from buf, the byte back. */
static int pass(int fd, const uint8_t *buf, uint64_t bytes)
{
	uint64_t left = bytes;
	uint8_t b;

	while (left > 0) {
		ssize_t k = send(fd, buf + (bytes - left) % CHUNK,
				 left < CHUNK ? left : CHUNK, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		left -= (uint64_t)k;
	}
	return recv(fd, &b, 1, 0) == 1 ? 0 : -1;
}

/* A socket made in namespace i of ns (none: this thread's own): the
 * namespace a socket is made in is its own for good. */
static int socket_in(const struct bench_netns *ns, int i)
{
	int saved = -1, fd;

	if (ns && netns_enter(ns, i, &saved) != 0)
		return -1;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (ns)
		netns_leave(saved);
	return fd;
}

double bench_stream_gibs(uint64_t bytes, double min_s, double *cpu_gb)
{
	return bench_stream_gibs_ns(bytes, min_s, cpu_gb, NULL);
}

double bench_stream_gibs_ns(uint64_t bytes, double min_s, double *cpu_gb,
			    const struct bench_netns *ns)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof a;
	uint8_t *buf = malloc(2 * CHUNK);
	uint64_t t0, t = 0, moved = 0;
	int lfd = socket_in(ns, 1), fd = -1, one = 1;
	double gibs = 0, cpu0;
	pid_t kid = -1;

	/* Across namespaces: from A to B's end of the link; else loopback. */
	if (ns)
		inet_pton(AF_INET, NETNS_ADDR_B, &a.sin_addr);
	else
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (!buf || lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof a) ||
	    listen(lfd, 1) || getsockname(lfd, (struct sockaddr *)&a, &al))
		goto out;
	memset(buf, 0x5a, 2 * CHUNK);
	kid = fork();
	if (kid == 0)
		_exit(reader(lfd, bytes));
	fd = socket_in(ns, 0);
	if (kid < 0 || fd < 0 ||
	    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) ||
	    connect(fd, (struct sockaddr *)&a, sizeof a))
		goto out;
	/* One untimed pass: the connection's buffers grow to steady state,
	 * as a worker's do after its first batches. */
	if (pass(fd, buf, bytes) < 0)
		goto out;
	cpu0 = bench_cpu_s(kid);
	t0 = proc_now_ns();
	do {
		if (pass(fd, buf, bytes) < 0)
			goto out;
		moved += bytes;
		t = proc_now_ns() - t0;
	} while (t < (uint64_t)(min_s * 1e9) && !proc_stopping());
	gibs = (double)moved / (1024.0 * 1024 * 1024) / ((double)t / 1e9);
	if (cpu_gb)
		*cpu_gb = (bench_cpu_s(kid) - cpu0) / ((double)moved / 1e9);
out:
	if (fd >= 0)
		close(fd);
	if (kid > 0) {
		kill(kid, SIGKILL);
		waitpid(kid, NULL, 0);
	}
	if (lfd >= 0)
		close(lfd);
	free(buf);
	return gibs;
}
