/*
 * xport_cuda.c - the GPU transport: pools in device memory shared through
 * CUDA IPC handles, copies on a stream. libcudart is loaded at run time
 * (dlopen), so every kvwire binary starts on a machine without CUDA and this
 * transport then says "not available". No CUDA header is needed: the few
 * entry points used are declared here by hand.
 *
 * Done: finding the runtime and counting devices (probe). Not done yet: the
 * copy path (cudaIpcGetMemHandle / cudaIpcOpenMemHandle / cudaMemcpyAsync),
 * so probe and open answer KVW_ENODEV "not implemented yet" even where GPUs
 * exist, instead of pretending to move bytes.
 */
#include "xport_impl.h"

#include <dlfcn.h>
#include <pthread.h>

/* cudaError_t is an int-sized enum; 0 is cudaSuccess. */
typedef int (*cuda_count_fn)(int *count);
typedef const char *(*cuda_errstr_fn)(int error);

static struct {
	pthread_once_t once;
	void *dl; /* kept open for the life of the process: libcudart does not
		  * unload cleanly once initialised */
	cuda_count_fn get_device_count;
	cuda_errstr_fn get_error_string; /* optional */
} xcuda = { .once = PTHREAD_ONCE_INIT };

static void xcuda_load(void)
{
	static const char *const sonames[] = {
		"libcudart.so", "libcudart.so.12", "libcudart.so.13",
		"libcudart.so.11.0",
	};
	size_t i;

	for (i = 0; i < sizeof sonames / sizeof sonames[0]; i++) {
		xcuda.dl = dlopen(sonames[i], RTLD_NOW | RTLD_LOCAL);
		if (xcuda.dl != NULL)
			break;
	}
	if (xcuda.dl == NULL)
		return;
	/* POSIX guarantees dlsym's void * converts to a function pointer. */
	xcuda.get_device_count =
		(cuda_count_fn)dlsym(xcuda.dl, "cudaGetDeviceCount");
	xcuda.get_error_string =
		(cuda_errstr_fn)dlsym(xcuda.dl, "cudaGetErrorString");
}

static int xcuda_probe(char *err, size_t errlen)
{
	int n = 0, rc;

	pthread_once(&xcuda.once, xcuda_load);
	if (xcuda.dl == NULL)
		return kvw_errf(err, errlen, KVW_ENODEV,
				"cuda: not available: libcudart not found");
	if (xcuda.get_device_count == NULL)
		return kvw_errf(err, errlen, KVW_ENODEV,
				"cuda: not available: libcudart has no "
				"cudaGetDeviceCount");
	/* Fails (e.g. error 35, 100) when there is no driver or no GPU. */
	rc = xcuda.get_device_count(&n);
	if (rc != 0)
		return kvw_errf(
		    err, errlen, KVW_ENODEV,
		    "cuda: not available: cudaGetDeviceCount "
		    "failed (error %d%s%s)",
		    rc, xcuda.get_error_string ? ": " : "",
		    xcuda.get_error_string ? xcuda.get_error_string(rc) : "");
	if (n <= 0)
		return kvw_errf(err, errlen, KVW_ENODEV,
				"cuda: not available: no CUDA devices "
				"(cudaGetDeviceCount found 0)");
	return kvw_errf(err, errlen, KVW_ENODEV,
			"cuda: not available: found %d GPU(s), but the CUDA "
			"IPC copy path is not implemented yet",
			n);
}

/* Until the copy path exists an instance would be useless: refuse with the
 * probe's reason. */
static int xcuda_open(struct xport **out, char *err, size_t errlen)
{
	*out = NULL;
	return xcuda_probe(err, errlen);
}

/* Never reached while open refuses; present so the table is complete. */
static void xcuda_close(struct xport **x)
{
	if (x != NULL)
		*x = NULL;
}

const struct xport_ops xport_cuda_ops = {
	.name = "cuda",
	.probe = xcuda_probe,
	.open = xcuda_open,
	.close = xcuda_close,
};
