/*
 * bench_hop.c - what one message between two processes costs here, by
 * the transport a room's hop could take (issue 35, bench/README.md): a
 * ping-pong of 64 bytes between this process and a forked child, over a
 * unix socketpair (blocking read and write: what the worker channel,
 * lib/wire/chan.h, is made of) and over ZMQ ipc:// DEALER to ROUTER (what
 * the engine, peer and control sockets are). Prints the p50 and p99
 * round trip of each; a one-way hop costs about half of it.
 * Usage: bench_hop [round trips] (default 20000).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#define MSG 64

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int by_value(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static void report(const char *what, double *rt, int n)
{
	qsort(rt, (size_t)n, sizeof *rt, by_value);
	printf("%-28s round trip p50 %6.1f us  p99 %6.1f us\n", what,
	       rt[n / 2] * 1e6, rt[(long)n * 99 / 100] * 1e6);
}

/* Whole reads and writes of MSG bytes: 0, or -1 when the pair broke. */
static int xfer(int fd, char *b, int out)
{
	size_t done = 0;

	while (done < MSG) {
		ssize_t k = out ? write(fd, b + done, MSG - done)
				: read(fd, b + done, MSG - done);

		if (k <= 0)
			return -1;
		done += (size_t)k;
	}
	return 0;
}

static int socketpair_rt(double *rt, int n)
{
	char b[MSG] = { 0 };
	int sv[2], rc = 0;
	pid_t pid;

	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
		return -1;
	if ((pid = fork()) < 0)
		return -1;
	if (pid == 0) {
		close(sv[0]);
		for (int i = 0; i < n; i++)
			if (xfer(sv[1], b, 0) || xfer(sv[1], b, 1))
				_exit(1);
		_exit(0);
	}
	close(sv[1]);
	for (int i = 0; i < n && rc == 0; i++) {
		double t = now_s();

		rc = xfer(sv[0], b, 1) || xfer(sv[0], b, 0) ? -1 : 0;
		rt[i] = now_s() - t;
	}
	close(sv[0]);
	waitpid(pid, NULL, 0);
	return rc;
}

static void *zsock(void *ctx, int type)
{
	void *s = zmq_socket(ctx, type);
	int linger = 0;

	if (s)
		zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
	return s;
}

/* The child's ROUTER answers n requests, then exits. */
static void zmq_echo(const char *ep, int n)
{
	void *ctx = zmq_ctx_new(), *s = zsock(ctx, ZMQ_ROUTER);
	char id[256], b[MSG];
	int rc = 1;

	if (s && zmq_bind(s, ep) == 0) {
		rc = 0;
		for (int i = 0; i < n && rc == 0; i++) {
			int k = zmq_recv(s, id, sizeof id, 0);

			if (k < 0 || zmq_recv(s, b, MSG, 0) < 0 ||
			    zmq_send(s, id, (size_t)k, ZMQ_SNDMORE) < 0 ||
			    zmq_send(s, b, MSG, 0) < 0)
				rc = 1;
		}
	}
	if (s)
		zmq_close(s);
	zmq_ctx_term(ctx);
	_exit(rc);
}

static int zmq_rt(double *rt, int n)
{
	char ep[64], path[48], b[MSG] = { 0 };
	void *ctx, *s;
	int rc = 0;
	pid_t pid;

	snprintf(path, sizeof path, "/tmp/kvw-bench-hop-%d.ipc", (int)getpid());
	snprintf(ep, sizeof ep, "ipc://%s", path);
	if ((pid = fork()) < 0)
		return -1;
	if (pid == 0)
		zmq_echo(ep, n);
	ctx = zmq_ctx_new();
	s = zsock(ctx, ZMQ_DEALER);
	if (!s || zmq_connect(s, ep) != 0)
		rc = -1;
	for (int i = 0; i < n && rc == 0; i++) {
		double t = now_s();

		if (zmq_send(s, b, MSG, 0) < 0 || zmq_recv(s, b, MSG, 0) < 0)
			rc = -1;
		rt[i] = now_s() - t;
	}
	if (s)
		zmq_close(s);
	zmq_ctx_term(ctx);
	if (rc != 0)
		kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	unlink(path);
	return rc;
}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 20000;
	double *rt;

	if (n < 100 || n > 10000000) {
		fprintf(stderr, "usage: bench_hop [round trips, 100..10^7]\n");
		return 100;
	}
	if (!(rt = calloc((size_t)n, sizeof *rt)))
		return 111;
	if (socketpair_rt(rt, n) != 0) {
		fprintf(stderr, "bench_hop: the socketpair run failed\n");
		return 111;
	}
	report("unix socketpair", rt, n);
	if (zmq_rt(rt, n) != 0) {
		fprintf(stderr, "bench_hop: the ZMQ run failed\n");
		return 111;
	}
	report("ZMQ ipc DEALER -> ROUTER", rt, n);
	free(rt);
	return 0;
}
