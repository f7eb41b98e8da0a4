/*
 * bench_limit.c - the reference measurements of bench_limit.h: machine
 * facts, single-thread memcpy over a copy list, memcpy on every core at
 * once, the raw CUDA runtime's
 * device-to-device copies of the same list, and a raw ZMQ ipc ping-pong
 * with a forked echo child. Nothing here touches kvwire's own code paths: these are the
 * limits kvwire's figures are divided by.
 */
#include "bench_limit.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "base/proc.h"
#include "mem/cuda_rt.h"
#include "xport/xcopy.h"

#define GIB (1024.0 * 1024.0 * 1024.0)
#define ECHO_WAIT_MS 2000

void bench_limit_machine(struct bench_limit_machine *m)
{
	char line[512];
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	FILE *f;

	memset(m, 0, sizeof *m);
	m->cores = n > 0 ? (unsigned)n : 0;
	m->os_page = sysconf(_SC_PAGESIZE);
	snprintf(m->cpu, sizeof m->cpu, "unknown");
	if ((f = fopen("/proc/cpuinfo", "r")) != NULL) {
		while (fgets(line, sizeof line, f)) {
			char *c = strchr(line, ':');

			if (strncmp(line, "model name", 10) != 0 || !c)
				continue;
			c += 1 + (c[1] == ' ');
			c[strcspn(c, "\n")] = '\0';
			snprintf(m->cpu, sizeof m->cpu, "%s", c);
			break;
		}
		fclose(f);
	}
	if ((f = fopen("/proc/meminfo", "r")) != NULL) {
		while (fgets(line, sizeof line, f))
			if (sscanf(line, "Hugepagesize: %ld kB",
				   &m->huge_page_kib) == 1)
				break;
		fclose(f);
	}
}

/* Passes over spans[0..n) for at least min_s (at least one): GiB/s. A
 * streaming pass is drained before the clock is read. */
static double copy_timed(const struct bench_limit_span *spans, size_t n,
			 double min_s, int streaming)
{
	uint64_t t0 = proc_now_ns(), t, bytes = 0;
	uint64_t need = (uint64_t)(min_s * 1e9);

	do {
		for (size_t i = 0; i < n; i++) {
			if (streaming)
				xcopy_stream(spans[i].dst, spans[i].src,
					     spans[i].len);
			else
				memcpy(spans[i].dst, spans[i].src,
				       spans[i].len);
			bytes += spans[i].len;
		}
		if (streaming)
			xcopy_drain();
		t = proc_now_ns() - t0;
	} while (t < need && bytes);
	return bytes && t ? (double)bytes / GIB / ((double)t / 1e9) : 0;
}

double bench_limit_memcpy(const struct bench_limit_span *spans, size_t n,
			double min_s)
{
	return copy_timed(spans, n, min_s, 0);
}

/* The start of bench_limit_memcpy_cores: go 1 (copy) or -1 (give up). */
struct core_start {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int go;
};

/* One thread of bench_limit_memcpy_cores. */
struct core_copy {
	struct core_start *st;
	uint8_t *src, *dst;
	size_t bytes;
	struct bench_limit_span *spans; /* its pages, in a shuffled order */
	size_t n;
	double min_s;
	int streaming;
	uint64_t copied, ns;
};

static void *core_copy_main(void *arg)
{
	struct core_copy *c = arg;
	uint64_t t0;
	double g;
	int go;

	pthread_mutex_lock(&c->st->mu);
	while (!c->st->go)
		pthread_cond_wait(&c->st->cv, &c->st->mu);
	go = c->st->go;
	pthread_mutex_unlock(&c->st->mu);
	if (go < 0)
		return NULL;
	t0 = proc_now_ns();
	g = copy_timed(c->spans, c->n, c->min_s, c->streaming);
	c->ns = proc_now_ns() - t0;
	c->copied = (uint64_t)(g * GIB * ((double)c->ns / 1e9));
	return NULL;
}

/* A buffer of the all-core limit: the streaming limit's (the machine's
 * best copy) asks for 2 MiB pages, as kv-up --huge-pages gives the pools;
 * NULL without memory. */
static uint8_t *core_buf(size_t bytes, int huge)
{
	void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return NULL;
	if (huge)
		(void)madvise(p, bytes, MADV_HUGEPAGE); /* best effort */
	return p;
}

static void core_buf_free(uint8_t *p, size_t bytes)
{
	if (p)
		munmap(p, bytes);
}

/* c's buffers as pages of `page` bytes, page k of src to page k of dst,
 * visited in a shuffled order (as a room's pages lie in a pool): 0, or -1
 * without memory. */
static int core_pages(struct core_copy *c, size_t page, uint64_t seed)
{
	c->n = c->bytes / page;
	c->spans = malloc(c->n * sizeof *c->spans);
	if (!c->spans)
		return -1;
	for (size_t k = 0; k < c->n; k++)
		c->spans[k] = (struct bench_limit_span){ c->dst + k * page,
							 c->src + k * page,
							 page };
	for (size_t k = c->n; k > 1; k--) {
		struct bench_limit_span t;
		size_t j;

		seed ^= seed << 13;
		seed ^= seed >> 7;
		seed ^= seed << 17;
		j = (size_t)(seed % k);
		t = c->spans[k - 1];
		c->spans[k - 1] = c->spans[j];
		c->spans[j] = t;
	}
	return 0;
}

double bench_limit_memcpy_cores(unsigned threads, size_t bytes, size_t page,
				double min_s, int streaming)
{
	struct core_start st = { PTHREAD_MUTEX_INITIALIZER,
				 PTHREAD_COND_INITIALIZER, 0 };
	struct core_copy *c = calloc(threads ? threads : 1, sizeof *c);
	pthread_t *th = calloc(threads ? threads : 1, sizeof *th);
	uint64_t copied = 0, ns = 0;
	unsigned started = 0;
	int ok = c && th && threads;

	for (unsigned i = 0; ok && i < threads; i++) {
		c[i] = (struct core_copy){ &st, core_buf(bytes, streaming),
					   core_buf(bytes, streaming),
					   bytes, NULL, 0, min_s, streaming,
					   0, 0 };
		ok = c[i].src && c[i].dst &&
		     core_pages(&c[i], page ? page : bytes, 0x9e37u + i) == 0;
		if (ok) { /* touched first: no page fault is timed */
			memset(c[i].src, 1, bytes);
			memset(c[i].dst, 2, bytes);
		}
	}
	for (; ok && started < threads; started++)
		ok = pthread_create(&th[started], NULL, core_copy_main,
				    &c[started]) == 0;
	/* All start together, or none copies. */
	pthread_mutex_lock(&st.mu);
	st.go = ok ? 1 : -1;
	pthread_cond_broadcast(&st.cv);
	pthread_mutex_unlock(&st.mu);
	for (unsigned i = 0; i < started; i++) {
		pthread_join(th[i], NULL);
		copied += c[i].copied;
		ns = c[i].ns > ns ? c[i].ns : ns;
	}
	for (unsigned i = 0; c && i < threads; i++) {
		core_buf_free(c[i].src, bytes);
		core_buf_free(c[i].dst, bytes);
		free(c[i].spans);
	}
	free(c);
	free(th);
	return ok && ns ? (double)copied / GIB / ((double)ns / 1e9) : 0;
}

double bench_limit_cuda_d2d(const struct bench_limit_span *spans, size_t n,
			    double min_s)
{
	static curt_stream st;
	const struct curt *rt;
	uint64_t t0, t, bytes = 0, need = (uint64_t)(min_s * 1e9);
	char e[8];

	if (curt_get(&rt, e, sizeof e) != 0 ||
	    (st == NULL &&
	     rt->stream_create(&st, CURT_STREAM_NONBLOCKING) != CURT_SUCCESS))
		return -1;
	t0 = proc_now_ns();
	do {
		for (size_t i = 0; i < n; i++) {
			if (rt->memcpy_async(spans[i].dst, spans[i].src,
					     spans[i].len, CURT_MEMCPY_DEFAULT,
					     st) != CURT_SUCCESS)
				return -1;
			bytes += spans[i].len;
		}
		if (rt->stream_sync(st) != CURT_SUCCESS)
			return -1;
		t = proc_now_ns() - t0;
	} while (t < need && bytes);
	return bytes && t ? (double)bytes / GIB / ((double)t / 1e9) : 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

double bench_limit_quantile(double *v, size_t n, double q)
{
	size_t k;

	if (n == 0)
		return 0;
	qsort(v, n, sizeof *v, cmp_double);
	k = (size_t)(q * (double)n + 0.999999);
	k = k ? k - 1 : 0;
	return v[k < n ? k : n - 1];
}

/* The child: a ROUTER that sends every message back to its sender until an
 * empty payload arrives. Never returns. */
static void echo_child(const char *ep, int ready_fd)
{
	void *ctx = zmq_ctx_new(), *s = ctx ? zmq_socket(ctx, ZMQ_ROUTER) : NULL;
	int zero = 0, rc = 1;
	char ok = 'R';

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (!s || zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero) ||
	    zmq_bind(s, ep) != 0)
		_exit(1);
	if (write(ready_fd, &ok, 1) != 1)
		_exit(1);
	close(ready_fd);
	for (;;) {
		zmq_msg_t id, body;

		zmq_msg_init(&id);
		zmq_msg_init(&body);
		if (zmq_msg_recv(&id, s, 0) < 0 || zmq_msg_recv(&body, s, 0) < 0)
			break;
		if (zmq_msg_size(&body) == 0) {
			rc = 0;
			break;
		}
		if (zmq_msg_send(&id, s, ZMQ_SNDMORE) < 0 ||
		    zmq_msg_send(&body, s, 0) < 0)
			break;
	}
	zmq_close(s);
	zmq_ctx_term(ctx);
	_exit(rc);
}

/* One round trip: sends msg, waits for its echo. */
static int ping(void *s, const uint8_t *msg, uint8_t *back, size_t len,
		char *err, size_t errlen)
{
	zmq_pollitem_t it = { s, 0, ZMQ_POLLIN, 0 };
	int n;

	if (zmq_send(s, msg, len, 0) < 0)
		return kvw_errf(err, errlen, KVW_ESYS, "zmq_send: %s",
				zmq_strerror(errno));
	do
		n = zmq_poll(&it, 1, ECHO_WAIT_MS);
	while (n < 0 && errno == EINTR);
	if (n == 0)
		return kvw_errf(err, errlen, KVW_ETIMEDOUT,
				"no echo within %d ms", ECHO_WAIT_MS);
	if (n < 0 || zmq_recv(s, back, len, 0) < 0)
		return kvw_errf(err, errlen, KVW_ESYS, "zmq_recv: %s",
				zmq_strerror(errno));
	return 0;
}

static int measure(void *s, uint32_t warmup, uint32_t count, size_t len,
		   double *us, struct bench_limit_rtt *out, char *err,
		   size_t errlen)
{
	uint8_t *msg = calloc(2, len), *back = msg + len;
	uint64_t t0 = 0, t;
	double sum = 0;
	int rc = 0;

	if (!msg)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	memset(msg, 0x42, len);
	for (uint32_t i = 0; i < warmup + count && rc == 0; i++) {
		if (i == warmup)
			t0 = proc_now_ns();
		t = proc_now_ns();
		rc = ping(s, msg, back, len, err, errlen);
		if (i >= warmup) {
			us[i - warmup] = (double)(proc_now_ns() - t) / 1e3;
			sum += us[i - warmup];
		}
	}
	if (rc == 0 && count) {
		t = proc_now_ns() - t0;
		out->n = count;
		out->per_s = t ? (double)count / ((double)t / 1e9) : 0;
		out->mean_us = sum / count;
		out->max_us = bench_limit_quantile(us, count, 1.0);
		out->p50_us = bench_limit_quantile(us, count, 0.50);
		out->p99_us = bench_limit_quantile(us, count, 0.99);
	}
	free(msg);
	return rc;
}

int bench_limit_zmq_rtt(const char *dir, uint32_t warmup, uint32_t count,
		      size_t msg_bytes, struct bench_limit_rtt *out, char *err,
		      size_t errlen)
{
	char ep[512], ok;
	int fds[2], zero = 0, rc = KVW_ESYS, status;
	double *us = calloc(count ? count : 1, sizeof *us);
	void *ctx = NULL, *s = NULL;
	pid_t pid;

	memset(out, 0, sizeof *out);
	if (msg_bytes == 0)
		msg_bytes = 1;
	if (!us)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	snprintf(ep, sizeof ep, "ipc://%s/bench-limit-%d.ipc", dir, (int)getpid());
	if (pipe(fds) != 0) {
		kvw_seterr(err, errlen, "pipe: %s", strerror(errno));
		goto out_free;
	}
	fflush(NULL);
	pid = fork();
	if (pid < 0) {
		kvw_seterr(err, errlen, "fork: %s", strerror(errno));
		close(fds[0]);
		close(fds[1]);
		goto out_free;
	}
	if (pid == 0) {
		close(fds[0]);
		echo_child(ep, fds[1]);
	}
	close(fds[1]);
	if (read(fds[0], &ok, 1) != 1) {
		kvw_seterr(err, errlen, "the echo child could not bind %s", ep);
		close(fds[0]);
		goto out_reap;
	}
	close(fds[0]);
	if (!(ctx = zmq_ctx_new()) || !(s = zmq_socket(ctx, ZMQ_DEALER)) ||
	    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero) ||
	    zmq_connect(s, ep) != 0) {
		kvw_seterr(err, errlen, "zmq socket %s: %s", ep,
			   zmq_strerror(errno));
		goto out_zmq;
	}
	rc = measure(s, warmup, count, msg_bytes, us, out, err, errlen);
	if (rc == 0)
		(void)zmq_send(s, "", 0, 0); /* asks the child to exit */
out_zmq:
	if (s)
		zmq_close(s);
	if (ctx)
		zmq_ctx_term(ctx);
out_reap:
	if (rc != 0)
		kill(pid, SIGKILL);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	unlink(ep + 6);
out_free:
	free(us);
	return rc;
}
