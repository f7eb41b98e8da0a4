/*
 * fakecudart.c - a CPU stand-in for libcudart, for tests only: it proves
 * kvwire's cuda plumbing (dlopen, registration, IPC handles opened in
 * other processes, copies, events, record epochs), never the GPU.
 * "Device memory" is a memfd mapped shared; an IPC handle names the
 * exporting process and the memfd (opened again through /proc/PID/fd), so
 * a kv-sender worker really maps an engine's buffer from another process.
 * Copies are memcpy and complete at once; streams and events are tokens.
 * Loaded with KVW_CUDART=path/libfakecudart.so; FAKECUDA_DEVICES=N (default
 * 1) devices. cudaGetDriverEntryPoint hands out a stand-in
 * cuMemGetHandleForAddressRange whose "dmabuf" fd is a dup of the memfd
 * behind the allocation (FAKECUDA_NO_DMABUF=1: the entry point is not
 * found, as with a driver too old for it).
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FAKE_MAX 4096
#define E_INVALID 1       /* cudaErrorInvalidValue */
#define E_NOMEM 2         /* cudaErrorMemoryAllocation */
#define E_DEVICE 101      /* cudaErrorInvalidDevice */
#define E_MAPFAILED 205   /* cudaErrorMapBufferObjectFailed */

struct fake_handle {
	char magic[8]; /* "FAKECUDA" */
	int32_t pid, fd;
	uint64_t size;
	char pad[40];
};
_Static_assert(sizeof(struct fake_handle) == 64, "handle is 64 bytes");

struct fake_alloc {
	uint8_t *base;
	uint64_t size;
	int fd;       /* >= 0: our own allocation; -1: opened from a handle */
	int ofd;      /* an opened handle's memfd, kept for dmabuf export */
	int host;     /* cudaHostAlloc */
};

static struct fake_alloc allocs[FAKE_MAX];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int cur_dev;
static char token; /* streams and events point here */

static int ndev(void)
{
	const char *e = getenv("FAKECUDA_DEVICES");

	return e ? atoi(e) : 1;
}

static int add(uint8_t *base, uint64_t size, int fd, int host)
{
	pthread_mutex_lock(&lock);
	for (int i = 0; i < FAKE_MAX; i++)
		if (allocs[i].base == NULL) {
			allocs[i] = (struct fake_alloc){ base, size, fd, -1,
							 host };
			pthread_mutex_unlock(&lock);
			return 0;
		}
	pthread_mutex_unlock(&lock);
	return E_NOMEM;
}

/* The allocation holding p (any byte of it), or NULL. */
static struct fake_alloc *find(uint64_t p)
{
	for (int i = 0; i < FAKE_MAX; i++)
		if (allocs[i].base && p >= (uint64_t)(uintptr_t)allocs[i].base &&
		    p < (uint64_t)(uintptr_t)allocs[i].base + allocs[i].size)
			return &allocs[i];
	return NULL;
}

int cudaGetDeviceCount(int *n);
int cudaGetDeviceCount(int *n)
{
	*n = ndev();
	return *n > 0 ? 0 : 100;
}

const char *cudaGetErrorString(int e);
const char *cudaGetErrorString(int e)
{
	return e == 0 ? "no error" : "fake cuda error";
}

int cudaSetDevice(int d);
int cudaSetDevice(int d)
{
	if (d < 0 || d >= ndev())
		return E_DEVICE;
	cur_dev = d;
	return 0;
}

int cudaGetDevice(int *d);
int cudaGetDevice(int *d)
{
	*d = cur_dev;
	return 0;
}

int cudaMalloc(void **p, size_t size);
int cudaMalloc(void **p, size_t size)
{
	int fd = memfd_create("fakecuda", MFD_CLOEXEC);
	void *m;

	if (fd < 0 || size == 0 || ftruncate(fd, (off_t)size) != 0) {
		if (fd >= 0)
			close(fd);
		return E_NOMEM;
	}
	m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		close(fd);
		return E_NOMEM;
	}
	if (add(m, size, fd, 0)) {
		munmap(m, size);
		close(fd);
		return E_NOMEM;
	}
	*p = m;
	return 0;
}

static int release(void *p, int want_fd)
{
	struct fake_alloc *a;

	pthread_mutex_lock(&lock);
	a = find((uint64_t)(uintptr_t)p);
	if (a == NULL || a->base != p || (want_fd ? a->fd < 0 : a->fd >= 0)) {
		pthread_mutex_unlock(&lock);
		return E_INVALID;
	}
	munmap(a->base, a->size);
	if (a->fd >= 0)
		close(a->fd);
	if (a->ofd >= 0)
		close(a->ofd);
	memset(a, 0, sizeof *a);
	pthread_mutex_unlock(&lock);
	return 0;
}

int cudaFree(void *p);
int cudaFree(void *p)
{
	return p == NULL ? 0 : release(p, 1);
}

/* Host memory is what the copies use anyway: registering pins nothing
 * here, but a second registration of the same range fails as it does in
 * the real runtime (cudaErrorHostMemoryAlreadyRegistered), so a caller
 * that would register twice is caught. */
#define E_REGISTERED 712
static void *registered[FAKE_MAX];

int cudaHostRegister(void *p, size_t size, unsigned int flags);
int cudaHostRegister(void *p, size_t size, unsigned int flags)
{
	int rc = E_NOMEM;

	(void)flags;
	if (p == NULL || size == 0)
		return E_INVALID;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < FAKE_MAX; i++)
		if (registered[i] == p) {
			rc = E_REGISTERED;
			break;
		}
	for (int i = 0; rc == E_NOMEM && i < FAKE_MAX; i++)
		if (registered[i] == NULL) {
			registered[i] = p;
			rc = 0;
		}
	pthread_mutex_unlock(&lock);
	return rc;
}

int cudaHostUnregister(void *p);
int cudaHostUnregister(void *p)
{
	int rc = E_INVALID;

	pthread_mutex_lock(&lock);
	for (int i = 0; i < FAKE_MAX; i++)
		if (registered[i] == p) {
			registered[i] = NULL;
			rc = 0;
			break;
		}
	pthread_mutex_unlock(&lock);
	return rc;
}

int cudaIpcGetMemHandle(struct fake_handle *h, void *p);
int cudaIpcGetMemHandle(struct fake_handle *h, void *p)
{
	struct fake_alloc *a = find((uint64_t)(uintptr_t)p);

	if (a == NULL || a->base != p || a->fd < 0)
		return E_INVALID;
	memset(h, 0, sizeof *h);
	memcpy(h->magic, "FAKECUDA", 8);
	h->pid = (int32_t)getpid();
	h->fd = a->fd;
	h->size = a->size;
	return 0;
}

int cudaIpcOpenMemHandle(void **p, struct fake_handle h, unsigned int flags);
int cudaIpcOpenMemHandle(void **p, struct fake_handle h, unsigned int flags)
{
	char path[64];
	void *m;
	int fd;

	(void)flags;
	if (memcmp(h.magic, "FAKECUDA", 8) != 0)
		return E_INVALID;
	snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h.pid, (int)h.fd);
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return E_MAPFAILED;
	m = mmap(NULL, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		close(fd);
		return E_MAPFAILED;
	}
	if (add(m, h.size, -1, 0)) {
		munmap(m, h.size);
		close(fd);
		return E_NOMEM;
	}
	pthread_mutex_lock(&lock);
	find((uint64_t)(uintptr_t)m)->ofd = fd;
	pthread_mutex_unlock(&lock);
	*p = m;
	return 0;
}

int cudaIpcCloseMemHandle(void *p);
int cudaIpcCloseMemHandle(void *p)
{
	return release(p, 0);
}

int cudaMemcpy(void *d, const void *s, size_t n, int kind);
int cudaMemcpy(void *d, const void *s, size_t n, int kind)
{
	(void)kind;
	memmove(d, s, n);
	return 0;
}

int cudaMemcpyAsync(void *d, const void *s, size_t n, int kind, void *st);
int cudaMemcpyAsync(void *d, const void *s, size_t n, int kind, void *st)
{
	(void)st;
	return cudaMemcpy(d, s, n, kind);
}

int cudaMemset(void *p, int v, size_t n);
int cudaMemset(void *p, int v, size_t n)
{
	memset(p, v, n);
	return 0;
}

#define TOKEN_FN(name, ...)                                                \
	int name(__VA_ARGS__);                                             \
	int name(__VA_ARGS__)

TOKEN_FN(cudaStreamCreateWithFlags, void **s, unsigned int f)
{
	(void)f;
	*s = &token;
	return 0;
}
TOKEN_FN(cudaStreamDestroy, void *s) { return s == &token ? 0 : E_INVALID; }
TOKEN_FN(cudaStreamSynchronize, void *s) { return s == &token ? 0 : E_INVALID; }
TOKEN_FN(cudaEventCreateWithFlags, void **e, unsigned int f)
{
	(void)f;
	*e = &token;
	return 0;
}
TOKEN_FN(cudaEventRecord, void *e, void *s)
{
	return e == &token && s == &token ? 0 : E_INVALID;
}
TOKEN_FN(cudaEventQuery, void *e) { return e == &token ? 0 : E_INVALID; }
TOKEN_FN(cudaEventSynchronize, void *e) { return e == &token ? 0 : E_INVALID; }
TOKEN_FN(cudaEventDestroy, void *e) { return e == &token ? 0 : E_INVALID; }
TOKEN_FN(cudaEventElapsedTime, float *ms, void *a, void *b)
{
	(void)a;
	(void)b;
	*ms = 0;
	return 0;
}
TOKEN_FN(cudaDeviceCanAccessPeer, int *can, int d, int p)
{
	*can = d != p;
	return 0;
}
TOKEN_FN(cudaDeviceSynchronize, void) { return 0; }

/* The driver call, here too (no libcuda.so.1 on a machine without one). */
TOKEN_FN(cuMemGetAddressRange_v2, uint64_t *base, size_t *size, uint64_t p)
{
	struct fake_alloc *a;

	pthread_mutex_lock(&lock);
	a = find(p);
	if (a) {
		*base = (uint64_t)(uintptr_t)a->base;
		*size = a->size;
	}
	pthread_mutex_unlock(&lock);
	return a ? 0 : E_INVALID;
}

/* The dmabuf export, as the driver's: *(int *)handle gets an fd of the
 * memory [p, p + size). The stand-in exports whole allocations only (a
 * memfd cannot stand for part of one): another range is invalid. */
#define E_DRV_INVALID 1 /* CUDA_ERROR_INVALID_VALUE */
static int fake_range_handle(void *handle, uint64_t p, size_t size, int type,
			     unsigned long long flags)
{
	struct fake_alloc *a;
	int fd = -1;

	pthread_mutex_lock(&lock);
	a = find(p);
	if (a && type == 1 && flags == 0 && (uint64_t)(uintptr_t)a->base == p &&
	    a->size == size)
		fd = dup(a->fd >= 0 ? a->fd : a->ofd);
	pthread_mutex_unlock(&lock);
	if (fd < 0)
		return E_DRV_INVALID;
	*(int *)handle = fd;
	return 0;
}

TOKEN_FN(cudaGetDriverEntryPoint, const char *sym, void **fn,
	 unsigned long long flags, int *status)
{
	int (*rh)(void *, uint64_t, size_t, int, unsigned long long) =
		fake_range_handle;
	const char *off = getenv("FAKECUDA_NO_DMABUF");
	void *f = NULL;

	(void)flags;
	if (strcmp(sym, "cuMemGetHandleForAddressRange") == 0 &&
	    !(off && *off == '1'))
		memcpy(&f, &rh, sizeof f); /* POSIX: same representation */
	*fn = f;
	if (status)
		*status = f ? 0 : 1; /* cudaDriverEntryPointSymbolNotFound */
	return f ? 0 : 500;          /* cudaErrorSymbolNotFound */
}
