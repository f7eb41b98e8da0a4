/*
 * cuda_rt.h - the CUDA runtime, loaded at run time. kvwire never links
 * libcudart and needs no CUDA header: the entry points it uses are declared
 * here by hand (types reduced to what the C ABI sees: cudaError_t and the
 * enums are ints, streams and events opaque pointers, an IPC handle a
 * 64-byte struct passed by value). tests/cuda/decl_check.c compares these
 * declarations with cuda_runtime_api.h where that header exists
 * (`make cuda-decl`).
 *
 * curt_get loads the library once per process (KVW_CUDART=path first, then
 * the usual sonames), resolves every entry point and counts devices; a
 * machine without the library, the driver or a GPU gets KVW_ENODEV and
 * "cuda: not available: <why>". Every call's result goes through curt_ok,
 * which turns a CUDA error into KVW_ESYS with the runtime's own text.
 */
#ifndef KVW_CUDA_RT_H
#define KVW_CUDA_RT_H

#include <stddef.h>
#include <stdint.h>

#include "base/kvw.h"

#define CURT_IPC_HANDLE_SIZE 64u
#define CURT_SUCCESS 0
#define CURT_NOT_READY 600          /* cudaErrorNotReady */
#define CURT_MEMCPY_DEFAULT 4       /* cudaMemcpyDefault (UVA) */
#define CURT_IPC_LAZY_PEER 0x1u     /* cudaIpcMemLazyEnablePeerAccess */
#define CURT_EVENT_NO_TIMING 0x2u   /* cudaEventDisableTiming */
#define CURT_STREAM_NONBLOCKING 0x1u /* cudaStreamNonBlocking */
#define CURT_HOST_REGISTER_PORTABLE 0x1u /* cudaHostRegisterPortable */
#define CURT_ENTRY_DEFAULT 0x0u     /* cudaEnableDefault */
#define CURT_RANGE_DMA_BUF_FD 0x1   /* CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD */

/* cudaIpcMemHandle_t: same size and layout, passed by value. */
struct curt_ipc {
	char reserved[CURT_IPC_HANDLE_SIZE];
};

/* The types as the C ABI sees them. tests/cuda/decl_check.c defines these
 * as the headers' own types before including this file, so that compiling
 * it checks every entry point below against cuda_runtime_api.h. */
#ifndef CURT_ERR
#define CURT_ERR int                 /* cudaError_t */
#define CURT_KIND int                /* enum cudaMemcpyKind */
#define CURT_IPC struct curt_ipc     /* cudaIpcMemHandle_t */
#define CURT_STREAM void *           /* cudaStream_t */
#define CURT_EVENT void *            /* cudaEvent_t */
#define CURT_RES int                 /* CUresult */
#define CURT_DPTR uint64_t           /* CUdeviceptr */
#define CURT_QRES int                /* enum cudaDriverEntryPointQueryResult */
#define CURT_HTYPE int               /* CUmemRangeHandleType */
#endif

typedef CURT_STREAM curt_stream;
typedef CURT_EVENT curt_event;

/* cuMemGetHandleForAddressRange, the driver call a dmabuf fd of device
 * memory comes from; found through get_driver_entry (rdma_gpu.c). */
typedef CURT_RES (*curt_range_handle_fn)(void *handle, CURT_DPTR dptr,
					 size_t size, CURT_HTYPE type,
					 unsigned long long flags);

/* The entry points (same parameters as the runtime's). */
struct curt {
	CURT_ERR (*get_device_count)(int *count);
	const char *(*get_error_string)(CURT_ERR error);
	CURT_ERR (*set_device)(int device);
	CURT_ERR (*get_device)(int *device);
	CURT_ERR (*malloc_)(void **p, size_t size);
	CURT_ERR (*free_)(void *p);
	CURT_ERR (*host_register)(void *p, size_t size, unsigned int flags);
	CURT_ERR (*host_unregister)(void *p);
	CURT_ERR (*ipc_get)(CURT_IPC *h, void *p);
	CURT_ERR (*ipc_open)(void **p, CURT_IPC h, unsigned int flags);
	CURT_ERR (*ipc_close)(void *p);
	CURT_ERR (*memcpy_)(void *dst, const void *src, size_t n,
			    CURT_KIND kind);
	CURT_ERR (*memcpy_async)(void *dst, const void *src, size_t n,
				 CURT_KIND kind, curt_stream s);
	CURT_ERR (*memset_)(void *p, int value, size_t n);
	CURT_ERR (*stream_create)(curt_stream *s, unsigned int flags);
	CURT_ERR (*stream_destroy)(curt_stream s);
	CURT_ERR (*stream_sync)(curt_stream s);
	CURT_ERR (*event_create)(curt_event *e, unsigned int flags);
	CURT_ERR (*event_record)(curt_event e, curt_stream s);
	CURT_ERR (*event_query)(curt_event e);
	CURT_ERR (*event_sync)(curt_event e);
	CURT_ERR (*event_destroy)(curt_event e);
	CURT_ERR (*event_elapsed)(float *ms, curt_event a, curt_event b);
	CURT_ERR (*can_access_peer)(int *can, int dev, int peer);
	CURT_ERR (*device_sync)(void);
	/* Driver API, from libcuda.so.1: the allocation an address lies in
	 * (cuMemGetAddressRange_v2), for IPC of a pointer inside a block. */
	CURT_RES (*mem_range)(CURT_DPTR *base, size_t *size, CURT_DPTR ptr);
	/* Optional (CUDA 11.3 and later): NULL when the runtime lacks it.
	 * A driver entry point by name, so that kvwire still dlopens only
	 * libcudart for the driver calls rdma's dmabuf path needs. 11.x
	 * takes no status argument: it ignores the fourth (the C ABI passes
	 * it in a register), and *status keeps what the caller set. */
	CURT_ERR (*get_driver_entry)(const char *symbol, void **fn,
				     unsigned long long flags,
				     CURT_QRES *status);
	int ndev; /* devices found by the probe */
};

/* Loads the runtime once (thread-safe) and returns its table in *out (static,
 * never freed), or KVW_ENODEV with "cuda: not available: <why>" (no
 * library, an entry point missing, no driver, no device) and *out NULL. */
int curt_get(const struct curt **out, char *err, size_t errlen);

/* 0 when rc is cudaSuccess, else KVW_ESYS with "cuda: WHAT: <text> (error
 * N)" in err. */
int curt_ok(const struct curt *rt, int rc, const char *what, char *err,
	    size_t errlen);

#endif
