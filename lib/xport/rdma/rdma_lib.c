/*
 * rdma_lib.c - libibverbs loaded once with dlopen (see rdma_lib.h).
 */
#include "rdma_lib.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static struct {
	pthread_once_t once;
	void *dl;      /* NULL: unusable, why[] says so */
	char why[160];
	struct rdma_lib fn;
} lib = { .once = PTHREAD_ONCE_INIT };

/* Resolves name into *slot; on failure records why and returns 0. POSIX
 * guarantees that dlsym's void * converts to a function pointer. */
static int sym(void *slot, const char *name)
{
	void *p = dlsym(lib.dl, name);

	if (!p) {
		snprintf(lib.why, sizeof lib.why, "libibverbs.so.1 lacks %s",
			 name);
		return 0;
	}
	memcpy(slot, &p, sizeof p);
	return 1;
}

static void load(void)
{
	struct rdma_lib *f = &lib.fn;
	void *gx, *dm;

	lib.dl = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib.dl) {
		snprintf(lib.why, sizeof lib.why,
			 "libibverbs.so.1 not found (%s)", dlerror());
		return;
	}
	if (!sym(&f->get_device_list, "ibv_get_device_list") ||
	    !sym(&f->free_device_list, "ibv_free_device_list") ||
	    !sym(&f->get_device_name, "ibv_get_device_name") ||
	    !sym(&f->open_device, "ibv_open_device") ||
	    !sym(&f->close_device, "ibv_close_device") ||
	    !sym(&f->query_device, "ibv_query_device") ||
	    !sym(&f->query_port_compat, "ibv_query_port") ||
	    !sym(&f->query_gid, "ibv_query_gid") ||
	    !sym(&f->alloc_pd, "ibv_alloc_pd") ||
	    !sym(&f->dealloc_pd, "ibv_dealloc_pd") ||
	    !sym(&f->reg_mr, "ibv_reg_mr") ||
	    !sym(&f->dereg_mr, "ibv_dereg_mr") ||
	    !sym(&f->create_comp_channel, "ibv_create_comp_channel") ||
	    !sym(&f->destroy_comp_channel, "ibv_destroy_comp_channel") ||
	    !sym(&f->create_cq, "ibv_create_cq") ||
	    !sym(&f->destroy_cq, "ibv_destroy_cq") ||
	    !sym(&f->get_cq_event, "ibv_get_cq_event") ||
	    !sym(&f->ack_cq_events, "ibv_ack_cq_events") ||
	    !sym(&f->create_qp, "ibv_create_qp") ||
	    !sym(&f->modify_qp, "ibv_modify_qp") ||
	    !sym(&f->destroy_qp, "ibv_destroy_qp") ||
	    !sym(&f->wc_status_str, "ibv_wc_status_str")) {
		dlclose(lib.dl);
		lib.dl = NULL;
		return;
	}
	gx = dlsym(lib.dl, "_ibv_query_gid_ex"); /* optional */
	memcpy(&f->query_gid_ex, &gx, sizeof gx);
	dm = dlsym(lib.dl, "ibv_reg_dmabuf_mr"); /* optional */
	memcpy(&f->reg_dmabuf_mr, &dm, sizeof dm);
}

static const struct rdma_lib *_Atomic override;

void rdma_lib_override(const struct rdma_lib *l)
{
	override = l;
}

const struct rdma_lib *rdma_lib_get(char *why, size_t whylen)
{
	const struct rdma_lib *o = override;

	if (o)
		return o;
	pthread_once(&lib.once, load);
	if (!lib.dl) {
		if (why && whylen)
			snprintf(why, whylen, "%s", lib.why);
		return NULL;
	}
	return &lib.fn;
}

int rdma_query_port(const struct rdma_lib *l, struct ibv_context *ctx,
		    uint8_t port, struct ibv_port_attr *a)
{
	struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);

	memset(a, 0, sizeof *a);
	if (vctx)
		return vctx->query_port(ctx, port, a, sizeof *a);
	return l->query_port_compat(ctx, port, a);
}

const char *rdma_status_text(const struct rdma_lib *l, int status, char *buf,
			     size_t len)
{
	const char *s = l ? l->wc_status_str((enum ibv_wc_status)status)
			  : NULL;

	if (s)
		snprintf(buf, len, "%s (status %d)", s, status);
	else
		snprintf(buf, len, "status %d", status);
	return buf;
}
