/*
 * cuda_rt.c - loads libcudart (and libcuda.so.1 for the one driver call)
 * with dlopen, once per process, and fills the table of entry points that
 * cuda_rt.h declares. Both libraries stay loaded for the life of the process:
 * the runtime does not unload cleanly once initialised.
 */
#include "cuda_rt.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct {
	pthread_once_t once;
	struct curt rt;
	int rc;        /* 0 or KVW_ENODEV */
	char why[256]; /* "cuda: not available: ..." */
} curt_g = { .once = PTHREAD_ONCE_INIT };

static void *curt_open_lib(void)
{
	static const char *const sonames[] = {
		"libcudart.so", "libcudart.so.13", "libcudart.so.12",
		"libcudart.so.11.0",
	};
	const char *env = getenv("KVW_CUDART");
	void *dl = NULL;

	if (env != NULL && *env != '\0')
		return dlopen(env, RTLD_NOW | RTLD_LOCAL);
	for (size_t i = 0; i < sizeof sonames / sizeof sonames[0] && !dl; i++)
		dl = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
	return dl;
}

/* One symbol into a function-pointer slot; 0 or -1 (missing). POSIX lets
 * dlsym's void * convert to a function pointer; memcpy keeps -Wpedantic
 * quiet about it. */
static int curt_sym(void *dl, const char *name, void *slot, size_t size)
{
	void *f = dlsym(dl, name);

	if (f == NULL)
		return -1;
	memcpy(slot, &f, size);
	return 0;
}

#define CURT_SYM(dl, name, field)                                         \
	do {                                                              \
		if (curt_sym(dl, name, &curt_g.rt.field,                  \
			     sizeof curt_g.rt.field) != 0) {              \
			missing = name;                                   \
			goto out;                                         \
		}                                                         \
	} while (0)

static void curt_load(void)
{
	const char *missing = NULL;
	void *dl = curt_open_lib(), *drv;
	int rc, n = 0;

	curt_g.rc = KVW_ENODEV;
	if (dl == NULL) {
		const char *env = getenv("KVW_CUDART");

		snprintf(curt_g.why, sizeof curt_g.why,
			 "cuda: not available: libcudart not found%s%s",
			 env && *env ? " at KVW_CUDART=" : "",
			 env && *env ? env : "");
		return;
	}
	CURT_SYM(dl, "cudaGetDeviceCount", get_device_count);
	CURT_SYM(dl, "cudaGetErrorString", get_error_string);
	CURT_SYM(dl, "cudaSetDevice", set_device);
	CURT_SYM(dl, "cudaGetDevice", get_device);
	CURT_SYM(dl, "cudaMalloc", malloc_);
	CURT_SYM(dl, "cudaFree", free_);
	CURT_SYM(dl, "cudaHostRegister", host_register);
	CURT_SYM(dl, "cudaHostUnregister", host_unregister);
	CURT_SYM(dl, "cudaIpcGetMemHandle", ipc_get);
	CURT_SYM(dl, "cudaIpcOpenMemHandle", ipc_open);
	CURT_SYM(dl, "cudaIpcCloseMemHandle", ipc_close);
	CURT_SYM(dl, "cudaMemcpy", memcpy_);
	CURT_SYM(dl, "cudaMemcpyAsync", memcpy_async);
	CURT_SYM(dl, "cudaMemset", memset_);
	CURT_SYM(dl, "cudaStreamCreateWithFlags", stream_create);
	CURT_SYM(dl, "cudaStreamDestroy", stream_destroy);
	CURT_SYM(dl, "cudaStreamSynchronize", stream_sync);
	CURT_SYM(dl, "cudaEventCreateWithFlags", event_create);
	CURT_SYM(dl, "cudaEventRecord", event_record);
	CURT_SYM(dl, "cudaEventQuery", event_query);
	CURT_SYM(dl, "cudaEventSynchronize", event_sync);
	CURT_SYM(dl, "cudaEventDestroy", event_destroy);
	CURT_SYM(dl, "cudaEventElapsedTime", event_elapsed);
	CURT_SYM(dl, "cudaDeviceCanAccessPeer", can_access_peer);
	CURT_SYM(dl, "cudaDeviceSynchronize", device_sync);
	/* Fails (35 insufficient driver, 100 no device) without a GPU. */
	rc = curt_g.rt.get_device_count(&n);
	if (rc != CURT_SUCCESS) {
		snprintf(curt_g.why, sizeof curt_g.why,
			 "cuda: not available: cudaGetDeviceCount failed "
			 "(error %d: %s)",
			 rc, curt_g.rt.get_error_string(rc));
		return;
	}
	if (n <= 0) {
		snprintf(curt_g.why, sizeof curt_g.why,
			 "cuda: not available: no CUDA devices "
			 "(cudaGetDeviceCount found 0)");
		return;
	}
	/* The driver is loaded by now (the runtime opened it): the stand-in
	 * under tests/fakecuda/ exports the driver call itself. */
	drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	if (drv == NULL)
		drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (drv == NULL || curt_sym(drv, "cuMemGetAddressRange_v2",
				    &curt_g.rt.mem_range,
				    sizeof curt_g.rt.mem_range) != 0)
		CURT_SYM(dl, "cuMemGetAddressRange_v2", mem_range);
	/* Optional: only rdma's dmabuf registration uses it. */
	if (curt_sym(dl, "cudaGetDriverEntryPoint", &curt_g.rt.get_driver_entry,
		     sizeof curt_g.rt.get_driver_entry) != 0)
		curt_g.rt.get_driver_entry = NULL;
	curt_g.rt.ndev = n;
	curt_g.rc = 0;
out:
	if (missing != NULL)
		snprintf(curt_g.why, sizeof curt_g.why,
			 "cuda: not available: the CUDA runtime has no %s",
			 missing);
}

int curt_get(const struct curt **out, char *err, size_t errlen)
{
	pthread_once(&curt_g.once, curt_load);
	if (curt_g.rc != 0) {
		*out = NULL;
		return kvw_errf(err, errlen, curt_g.rc, "%s", curt_g.why);
	}
	*out = &curt_g.rt;
	return 0;
}

int curt_ok(const struct curt *rt, int rc, const char *what, char *err,
	    size_t errlen)
{
	if (rc == CURT_SUCCESS)
		return 0;
	return kvw_errf(err, errlen, KVW_ESYS, "cuda: %s: %s (error %d)", what,
			rt->get_error_string(rc), rc);
}
