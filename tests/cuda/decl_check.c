/*
 * decl_check.c - compiled, never run, by `make cuda-decl`: proves that
 * lib/mem/cuda_rt.h's hand-made declarations match the CUDA headers.
 * With KVW_CUDA_HEADERS (the headers exist), cuda_rt.h is included with
 * the headers' own types, and a table initialised with the real functions
 * fails to compile (-Werror) if any parameter differs; the constants and
 * the IPC handle's size are compared too. Without it, only what can be
 * checked without the headers (sizes) is.
 */
#include <stddef.h>
#include <stdint.h>

#ifdef KVW_CUDA_HEADERS
#include <cuda.h>
#include <cuda_runtime_api.h>
#define CURT_ERR cudaError_t
#define CURT_KIND enum cudaMemcpyKind
#define CURT_IPC cudaIpcMemHandle_t
#define CURT_STREAM cudaStream_t
#define CURT_EVENT cudaEvent_t
#define CURT_RES CUresult
#define CURT_DPTR CUdeviceptr
#define CURT_QRES enum cudaDriverEntryPointQueryResult
#define CURT_HTYPE CUmemRangeHandleType
#endif

#include "mem/cuda_rt.h"

_Static_assert(sizeof(struct curt_ipc) == 64, "IPC handle is 64 bytes");

#ifdef KVW_CUDA_HEADERS
_Static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(struct curt_ipc),
	       "IPC handle size");
_Static_assert(CURT_IPC_HANDLE_SIZE == CUDA_IPC_HANDLE_SIZE, "handle size");
_Static_assert(sizeof(cudaError_t) == sizeof(int), "cudaError_t is an int");
_Static_assert(sizeof(enum cudaMemcpyKind) == sizeof(int), "kind is an int");
_Static_assert(sizeof(CUdeviceptr) == sizeof(uint64_t), "CUdeviceptr");
_Static_assert(sizeof(cudaStream_t) == sizeof(void *), "cudaStream_t");
_Static_assert(CURT_SUCCESS == cudaSuccess, "cudaSuccess");
_Static_assert(CURT_NOT_READY == cudaErrorNotReady, "cudaErrorNotReady");
_Static_assert(CURT_MEMCPY_DEFAULT == cudaMemcpyDefault, "cudaMemcpyDefault");
_Static_assert(CURT_IPC_LAZY_PEER == cudaIpcMemLazyEnablePeerAccess,
	       "cudaIpcMemLazyEnablePeerAccess");
_Static_assert(CURT_EVENT_NO_TIMING == cudaEventDisableTiming,
	       "cudaEventDisableTiming");
_Static_assert(CURT_STREAM_NONBLOCKING == cudaStreamNonBlocking,
	       "cudaStreamNonBlocking");
_Static_assert(CURT_HOST_REGISTER_PORTABLE == cudaHostRegisterPortable,
	       "cudaHostRegisterPortable");
_Static_assert(CURT_ENTRY_DEFAULT == cudaEnableDefault, "cudaEnableDefault");
_Static_assert(CURT_RANGE_DMA_BUF_FD == CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
	       "CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD");
_Static_assert(sizeof(enum cudaDriverEntryPointQueryResult) == sizeof(int),
	       "the entry point query result is an int");
_Static_assert(sizeof(CUmemRangeHandleType) == sizeof(int),
	       "CUmemRangeHandleType is an int");

/* rdma's dmabuf path calls it through cudaGetDriverEntryPoint. */
const curt_range_handle_fn decl_range = cuMemGetHandleForAddressRange;

/* CUDA 12.5 and later mark cudaGetDriverEntryPoint deprecated (for
 * ...ByVersion); the symbol and its parameters are what is checked. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* Every slot takes the real function: a differing parameter is an
 * incompatible-pointer error. */
const struct curt decl_check = {
	.get_device_count = cudaGetDeviceCount,
	.get_error_string = cudaGetErrorString,
	.set_device = cudaSetDevice,
	.get_device = cudaGetDevice,
	.malloc_ = cudaMalloc,
	.free_ = cudaFree,
	.host_register = cudaHostRegister,
	.host_unregister = cudaHostUnregister,
	.ipc_get = cudaIpcGetMemHandle,
	.ipc_open = cudaIpcOpenMemHandle,
	.ipc_close = cudaIpcCloseMemHandle,
	.memcpy_ = cudaMemcpy,
	.memcpy_async = cudaMemcpyAsync,
	.memset_ = cudaMemset,
	.stream_create = cudaStreamCreateWithFlags,
	.stream_destroy = cudaStreamDestroy,
	.stream_sync = cudaStreamSynchronize,
	.event_create = cudaEventCreateWithFlags,
	.event_record = cudaEventRecord,
	.event_query = cudaEventQuery,
	.event_sync = cudaEventSynchronize,
	.event_destroy = cudaEventDestroy,
	.event_elapsed = cudaEventElapsedTime,
	.can_access_peer = cudaDeviceCanAccessPeer,
	.device_sync = cudaDeviceSynchronize,
	.mem_range = cuMemGetAddressRange_v2,
	.get_driver_entry = cudaGetDriverEntryPoint,
};
#endif
