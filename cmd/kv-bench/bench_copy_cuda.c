/*
 * bench_copy_cuda.c - the engine child of kv-bench copy --transport cuda
 * (bench_copy_cuda.h). Commands go down a pipe as one byte ('L' + a
 * double: measure the limit; 'V': verify; EOF: stop), answers come back
 * as fixed records.
 */
#include "bench_copy_cuda.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_limit.h"
#include "mem/cuda_rt.h"
#include "mem/gpool.h"
#include "mem/pool.h"

struct bcc {
	pid_t pid;
	int down, up; /* parent's ends: commands out, answers in */
};

struct bcc_answer {
	int rc;
	int ok;
	double gibs;
	char msg[256];
};

/* The child's state. */
struct bcc_dev {
	const struct curt *rt;
	uint8_t *src, *dst;
	uint64_t size;
	char rec[2][POOL_PATH_MAX + 1];
	struct bench_limit_span *spans;
	uint32_t n;
};

static int full_io(int fd, void *p, size_t n, int wr)
{
	uint8_t *b = p;

	while (n > 0) {
		ssize_t k = wr ? write(fd, b, n) : read(fd, b, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Device memory for both pools, the source filled from its host pool, both
 * registered. */
static int dev_setup(struct bcc_dev *d, const char *src_pool,
		     const char *dst_pool, uint64_t page_bytes,
		     const struct xport_copy *c, char *err, size_t errlen)
{
	const char *pools[2] = { src_pool, dst_pool };
	struct pool *host = NULL;
	uint32_t item = (uint32_t)page_bytes;
	int rc;

	if ((rc = curt_get(&d->rt, err, errlen)) ||
	    (rc = curt_ok(d->rt, d->rt->set_device(0), "cudaSetDevice", err,
			  errlen)) ||
	    (rc = curt_ok(d->rt, d->rt->malloc_((void **)&d->src, d->size),
			  "cudaMalloc", err, errlen)) ||
	    (rc = curt_ok(d->rt, d->rt->malloc_((void **)&d->dst, d->size),
			  "cudaMalloc", err, errlen)) ||
	    (rc = curt_ok(d->rt, d->rt->memset_(d->dst, 0, d->size),
			  "cudaMemset", err, errlen)) ||
	    (rc = pool_open(src_pool, 0, &host, err, errlen)))
		return rc;
	rc = curt_ok(d->rt, d->rt->memcpy_(d->src, pool_base(host), d->size,
					   CURT_MEMCPY_DEFAULT),
		     "cudaMemcpy", err, errlen);
	pool_close(&host);
	for (int k = 0; k < 2 && rc == 0; k++) {
		uint64_t ptr = (uint64_t)(uintptr_t)(k ? d->dst : d->src);

		if (gpool_path_for(pools[k], d->rec[k], sizeof d->rec[k]))
			return kvw_errf(err, errlen, KVW_EINVAL, "bad pool %s",
					pools[k]);
		rc = gpool_export(d->rec[k], 0, &ptr, &d->size, &item, 1,
				  d->size, (uint64_t)getpid() << 1 | (unsigned)k,
				  err, errlen);
	}
	for (uint32_t i = 0; i < d->n && rc == 0; i++)
		d->spans[i] = (struct bench_limit_span){
			d->dst + c[i].dst_off, d->src + c[i].src_off, c[i].len };
	return rc;
}

static int dev_verify(struct bcc_dev *d)
{
	uint8_t *s = malloc(d->size), *t = malloc(d->size);
	int ok = s && t &&
		 d->rt->memcpy_(s, d->src, d->size, CURT_MEMCPY_DEFAULT) == 0 &&
		 d->rt->memcpy_(t, d->dst, d->size, CURT_MEMCPY_DEFAULT) == 0;

	for (uint32_t i = 0; ok && i < d->n; i++)
		ok = !memcmp(t + (d->spans[i].dst - d->dst),
			     s + (d->spans[i].src - d->src), d->spans[i].len);
	free(s);
	free(t);
	return ok;
}

static void child(int down, int up, const char *src_pool,
		  const char *dst_pool, uint64_t size, uint64_t page_bytes,
		  const struct xport_copy *c, uint32_t n)
{
	struct bcc_dev d = { .size = size, .n = n };
	struct bcc_answer a = { 0 };
	double min_s;
	char cmd;

	d.spans = calloc(n, sizeof *d.spans);
	a.rc = d.spans ? dev_setup(&d, src_pool, dst_pool, page_bytes, c,
				   a.msg, sizeof a.msg)
		       : KVW_ENOMEM;
	full_io(up, &a, sizeof a, 1);
	while (a.rc == 0 && full_io(down, &cmd, 1, 0) == 0) {
		memset(&a, 0, sizeof a);
		if (cmd == 'L' && full_io(down, &min_s, sizeof min_s, 0) == 0) {
			a.gibs = bench_limit_cuda_d2d(d.spans, n, min_s);
			a.rc = a.gibs < 0 ? KVW_ESYS : 0;
		} else {
			a.ok = dev_verify(&d);
		}
		if (full_io(up, &a, sizeof a, 1) != 0)
			break;
	}
	for (int k = 0; k < 2; k++)
		if (d.rec[k][0])
			unlink(d.rec[k]);
	if (d.rt) {
		d.rt->free_(d.src);
		d.rt->free_(d.dst);
	}
	_exit(0);
}

static int ask(struct bcc *e, const void *cmd, size_t len,
	       struct bcc_answer *a, char *err, size_t errlen)
{
	if (full_io(e->down, (void *)(uintptr_t)cmd, len, 1) != 0 ||
	    full_io(e->up, a, sizeof *a, 0) != 0)
		return kvw_errf(err, errlen, KVW_ESYS,
				"cuda engine child is gone");
	a->msg[sizeof a->msg - 1] = '\0';
	return a->rc ? kvw_errf(err, errlen, a->rc, "%s", a->msg) : 0;
}

int bcc_start(struct bcc **out, const char *src_pool, const char *dst_pool,
	      uint64_t size, uint64_t page_bytes,
	      const struct xport_copy *copies, uint32_t n, char *err,
	      size_t errlen)
{
	int down[2], up[2];
	struct bcc_answer a;
	struct bcc *e;

	*out = NULL;
	e = calloc(1, sizeof *e);
	if (e == NULL || pipe(down) != 0) {
		free(e);
		return kvw_errf(err, errlen, KVW_ESYS, "pipe: %s",
				strerror(errno));
	}
	if (pipe(up) != 0) {
		close(down[0]);
		close(down[1]);
		free(e);
		return kvw_errf(err, errlen, KVW_ESYS, "pipe: %s",
				strerror(errno));
	}
	e->pid = fork();
	if (e->pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		close(down[1]);
		close(up[0]);
		child(down[0], up[1], src_pool, dst_pool, size, page_bytes,
		      copies, n);
	}
	close(down[0]);
	close(up[1]);
	e->down = down[1];
	e->up = up[0];
	if (e->pid < 0) {
		bcc_stop(&e);
		return kvw_errf(err, errlen, KVW_ESYS, "fork: %s",
				strerror(errno));
	}
	if (full_io(e->up, &a, sizeof a, 0) != 0 || a.rc != 0) {
		int rc = a.rc ? a.rc : KVW_ESYS;

		a.msg[sizeof a.msg - 1] = '\0';
		kvw_seterr(err, errlen, "%s",
			   a.rc ? a.msg : "cuda engine child died");
		bcc_stop(&e);
		return rc;
	}
	*out = e;
	return 0;
}

int bcc_limit(struct bcc *e, double min_s, double *gibs, char *err,
	      size_t errlen)
{
	uint8_t cmd[1 + sizeof min_s] = { 'L' };
	struct bcc_answer a;
	int rc;

	memcpy(cmd + 1, &min_s, sizeof min_s);
	rc = ask(e, cmd, sizeof cmd, &a, err, errlen);
	*gibs = rc ? 0 : a.gibs;
	return rc;
}

int bcc_verify(struct bcc *e, int *ok, char *err, size_t errlen)
{
	struct bcc_answer a;
	int rc = ask(e, "V", 1, &a, err, errlen);

	*ok = rc == 0 && a.ok;
	return rc;
}

void bcc_stop(struct bcc **ep)
{
	struct bcc *e;

	if (ep == NULL || *ep == NULL)
		return;
	e = *ep;
	close(e->down); /* EOF: the child cleans up and exits */
	close(e->up);
	if (e->pid > 0)
		waitpid(e->pid, NULL, 0);
	free(e);
	*ep = NULL;
}
