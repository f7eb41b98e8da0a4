/*
 * xcopy.h - copies into memory this process will not read again: the
 * transports' writes into a peer's pool. Large copies go with
 * non-temporal (streaming) stores, which write whole cache lines to memory
 * without first reading them in and without evicting the cache: on this
 * project's machines 1.4x to 1.6x memcpy for KV pages that are past the
 * caches (bench/README.md). Streaming stores are weakly ordered: a caller
 * that publishes the copies (a status, an ACK, a flag) calls xcopy_drain
 * first, or a reader may see the flag before the bytes.
 */
#ifndef KVW_XCOPY_H
#define KVW_XCOPY_H

#include <stddef.h>

/* Copies below this go by memcpy: a KV page is at least this big, while
 * aux slots and state rows are small and may well be read soon. */
#define XCOPY_STREAM_MIN 4096u

/* Copies len bytes from src to dst (not overlapping), streaming when len
 * >= XCOPY_STREAM_MIN and the CPU has streaming stores (x86-64: SSE2). */
void xcopy_stream(void *dst, const void *src, size_t len);

/* Orders every streaming store before later stores (x86 SFENCE): call it
 * once after a batch's copies, before anything says they are done. */
void xcopy_drain(void);

#endif
