/*
 * xport_rdma.c - the RDMA transport: one-sided RDMA WRITE into the decode
 * pool over RC queue pairs. libibverbs is loaded at run time with dlopen, so
 * kvwire binaries start on machines without RDMA; verbs.h is included only
 * for its types, and the data-path verbs (post_send, poll_cq) are inline
 * calls through the device context, so they need no symbol lookup either.
 *
 * Done: probe (library + device list), open (first device, protection
 * domain), register (memory region; the descriptor carries addr, size,
 * rkey). Not done yet: queue-pair setup, connect, RDMA WRITE and completion
 * polling. Those entries answer KVW_ENODEV "not implemented yet", and probe
 * says "not available" even where devices exist, so nothing pretends to
 * move bytes.
 */
#include "xport_impl.h"

#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"

#define XRDMA_MAX_MR 64u
#define XRDMA_DESC_LEN 28u /* "KVRD", version 2, pad 2, addr 8, size 8, rkey 4 */

typedef struct ibv_device **(*ibv_get_device_list_fn)(int *n);
typedef void (*ibv_free_device_list_fn)(struct ibv_device **list);
typedef const char *(*ibv_get_device_name_fn)(struct ibv_device *dev);
typedef struct ibv_context *(*ibv_open_device_fn)(struct ibv_device *dev);
typedef int (*ibv_close_device_fn)(struct ibv_context *ctx);
typedef struct ibv_pd *(*ibv_alloc_pd_fn)(struct ibv_context *ctx);
typedef int (*ibv_dealloc_pd_fn)(struct ibv_pd *pd);
typedef struct ibv_mr *(*ibv_reg_mr_fn)(struct ibv_pd *pd, void *addr,
					size_t len, int access);
typedef int (*ibv_dereg_mr_fn)(struct ibv_mr *mr);

/* The library, loaded once and kept for the life of the process. */
static struct {
	pthread_once_t once;
	void *dl;       /* NULL: unusable, why[] says so */
	char why[160];
	ibv_get_device_list_fn get_device_list;
	ibv_free_device_list_fn free_device_list;
	ibv_get_device_name_fn get_device_name;
	ibv_open_device_fn open_device;
	ibv_close_device_fn close_device;
	ibv_alloc_pd_fn alloc_pd;
	ibv_dealloc_pd_fn dealloc_pd;
	ibv_reg_mr_fn reg_mr;
	ibv_dereg_mr_fn dereg_mr;
} xrdma = { .once = PTHREAD_ONCE_INIT };

struct xrdma_xport {
	struct xport base;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr[XRDMA_MAX_MR];
	uint32_t nmr;
};

/* Resolves one symbol; on failure records why and returns NULL. */
static void *xrdma_sym(const char *name)
{
	void *p = dlsym(xrdma.dl, name);

	if (p == NULL)
		snprintf(xrdma.why, sizeof xrdma.why,
			 "libibverbs.so.1 lacks %s", name);
	return p;
}

static void xrdma_load(void)
{
	xrdma.dl = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
	if (xrdma.dl == NULL) {
		snprintf(xrdma.why, sizeof xrdma.why,
			 "libibverbs.so.1 not found (%s)", dlerror());
		return;
	}
	/* POSIX guarantees dlsym's void * converts to a function pointer. */
	if (!(xrdma.get_device_list =
		      (ibv_get_device_list_fn)xrdma_sym("ibv_get_device_list")) ||
	    !(xrdma.free_device_list =
		      (ibv_free_device_list_fn)xrdma_sym("ibv_free_device_list")) ||
	    !(xrdma.get_device_name =
		      (ibv_get_device_name_fn)xrdma_sym("ibv_get_device_name")) ||
	    !(xrdma.open_device =
		      (ibv_open_device_fn)xrdma_sym("ibv_open_device")) ||
	    !(xrdma.close_device =
		      (ibv_close_device_fn)xrdma_sym("ibv_close_device")) ||
	    !(xrdma.alloc_pd = (ibv_alloc_pd_fn)xrdma_sym("ibv_alloc_pd")) ||
	    !(xrdma.dealloc_pd =
		      (ibv_dealloc_pd_fn)xrdma_sym("ibv_dealloc_pd")) ||
	    !(xrdma.reg_mr = (ibv_reg_mr_fn)xrdma_sym("ibv_reg_mr")) ||
	    !(xrdma.dereg_mr = (ibv_dereg_mr_fn)xrdma_sym("ibv_dereg_mr"))) {
		dlclose(xrdma.dl);
		xrdma.dl = NULL;
	}
}

/* Loads the library and lists devices. On success *list is the caller's
 * (free with xrdma.free_device_list) and holds *n > 0 devices. */
static int xrdma_devices(struct ibv_device ***list, int *n, char *err,
			 size_t errlen)
{
	*list = NULL;
	*n = 0;
	pthread_once(&xrdma.once, xrdma_load);
	if (xrdma.dl == NULL)
		return kvw_errf(err, errlen, KVW_ENODEV,
				"rdma: not available: %s", xrdma.why);
	*list = xrdma.get_device_list(n);
	if (*list == NULL)
		return kvw_errf(err, errlen, KVW_ENODEV,
				"rdma: not available: no RDMA devices "
				"(ibv_get_device_list failed: %s)",
				strerror(errno));
	if (*n <= 0) {
		xrdma.free_device_list(*list);
		*list = NULL;
		return kvw_errf(err, errlen, KVW_ENODEV,
				"rdma: not available: no RDMA devices "
				"(ibv_get_device_list found 0)");
	}
	return 0;
}

static int xrdma_probe(char *err, size_t errlen)
{
	struct ibv_device **list;
	int n, rc;

	rc = xrdma_devices(&list, &n, err, errlen);
	if (rc != 0)
		return rc;
	rc = kvw_errf(err, errlen, KVW_ENODEV,
		      "rdma: not available: found %d device(s) (first %s), "
		      "but queue pairs and RDMA WRITE are not implemented "
		      "yet",
		      n, xrdma.get_device_name(list[0]));
	xrdma.free_device_list(list);
	return rc;
}

static void xrdma_close(struct xport **xp)
{
	struct xrdma_xport *r;
	uint32_t i;

	if (xp == NULL || *xp == NULL)
		return;
	r = XPORT_SELF(struct xrdma_xport, *xp);
	for (i = 0; i < r->nmr; i++)
		xrdma.dereg_mr(r->mr[i]);
	if (r->pd != NULL)
		xrdma.dealloc_pd(r->pd);
	if (r->ctx != NULL)
		xrdma.close_device(r->ctx);
	free(r);
	*xp = NULL;
}

/* Opens the first device and a protection domain. */
static int xrdma_open(struct xport **out, char *err, size_t errlen)
{
	struct xrdma_xport *r = NULL;
	struct ibv_device **list;
	struct xport *x;
	int n, rc;

	*out = NULL;
	rc = xrdma_devices(&list, &n, err, errlen);
	if (rc != 0)
		return rc;
	r = calloc(1, sizeof *r);
	if (r == NULL) {
		rc = kvw_errf(err, errlen, KVW_ENOMEM, "rdma: out of memory");
		goto fail;
	}
	r->base.ops = &xport_rdma_ops;
	r->ctx = xrdma.open_device(list[0]);
	if (r->ctx == NULL) {
		rc = kvw_errf(err, errlen, KVW_ENODEV,
			      "rdma: not available: unable to open %s: %s",
			      xrdma.get_device_name(list[0]), strerror(errno));
		goto fail;
	}
	r->pd = xrdma.alloc_pd(r->ctx);
	if (r->pd == NULL) {
		rc = kvw_errf(err, errlen, KVW_ESYS,
			      "rdma: unable to allocate a protection domain "
			      "on %s: %s",
			      xrdma.get_device_name(list[0]), strerror(errno));
		goto fail;
	}
	xrdma.free_device_list(list); /* allowed once the device is open */
	*out = &r->base;
	return 0;

fail:
	xrdma.free_device_list(list);
	if (r != NULL) {
		x = &r->base;
		xrdma_close(&x);
	}
	return rc;
}

static void put_le(uint8_t *p, uint64_t v, unsigned bytes)
{
	for (unsigned i = 0; i < bytes; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Registers the pool for local reads and remote writes. The descriptor
 * holds addr, size and rkey; the queue-pair address joins it (version 2)
 * when connect is implemented. */
static int xrdma_reg(struct xport *x, const struct pool *p, uint32_t *id,
		     uint8_t *desc, size_t desccap, size_t *desclen, char *err,
		     size_t errlen)
{
	struct xrdma_xport *r = XPORT_SELF(struct xrdma_xport, x);
	struct ibv_mr *mr;

	if (desccap < XRDMA_DESC_LEN)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"rdma: descriptor buffer too small");
	if (r->nmr == XRDMA_MAX_MR)
		return kvw_errf(err, errlen, KVW_ENOMEM,
				"rdma: too many registered pools");
	mr = xrdma.reg_mr(r->pd, pool_base(p), (size_t)pool_size(p),
			  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (mr == NULL)
		return kvw_errf(err, errlen, KVW_ESYS,
				"rdma: unable to register %s: %s", pool_path(p),
				strerror(errno));
	memcpy(desc, "KVRD", 4);
	put_le(desc + 4, 1, 2);
	put_le(desc + 6, 0, 2);
	put_le(desc + 8, (uint64_t)(uintptr_t)pool_base(p), 8);
	put_le(desc + 16, pool_size(p), 8);
	put_le(desc + 24, mr->rkey, 4);
	*desclen = XRDMA_DESC_LEN;
	*id = r->nmr;
	r->mr[r->nmr++] = mr;
	return 0;
}

static int xrdma_connect(struct xport *x, const uint8_t *desc, size_t desclen,
			 uint32_t *id, char *err, size_t errlen)
{
	(void)x;
	(void)desc;
	(void)desclen;
	(void)id;
	return kvw_errf(err, errlen, KVW_ENODEV,
			"rdma: not available: connect (RC queue pair setup) "
			"is not implemented yet");
}

static int xrdma_write_batch(struct xport *x, const struct xport_copy *c,
			     size_t n, char *err, size_t errlen)
{
	(void)x;
	(void)c;
	(void)n;
	return kvw_errf(err, errlen, KVW_ENODEV,
			"rdma: not available: RDMA WRITE is not implemented "
			"yet");
}

static int xrdma_wait(struct xport *x, int timeout_ms, char *err,
		      size_t errlen)
{
	(void)x;
	(void)timeout_ms;
	return kvw_errf(err, errlen, KVW_ENODEV,
			"rdma: not available: completion polling is not "
			"implemented yet");
}

const struct xport_ops xport_rdma_ops = {
	.name = "rdma",
	.probe = xrdma_probe,
	.open = xrdma_open,
	.reg = xrdma_reg,
	.connect = xrdma_connect,
	.write_batch = xrdma_write_batch,
	.wait = xrdma_wait,
	.close = xrdma_close,
};
