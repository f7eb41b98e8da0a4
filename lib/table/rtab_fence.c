/*
 * rtab_fence.c - the writer-side fence of rtab_fence.h: a small file of
 * one header and nsinks x nslots 64-bit slots, each 0 (idle) or the packed
 * rtab_ref (gen << 32 | slot, never 0: generations start at 1) of the room
 * that slot is writing.
 */
#include "rtab_fence.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/kvw.h"

#define FENCE_MAGIC 0x45434e4657564b00ull /* "\0KVWFNCE" */
#define FENCE_HDR 64u

struct fence_hdr {
	uint64_t magic;
	uint32_t nsinks;
	uint32_t nslots;
	uint8_t pad[FENCE_HDR - 16];
};
_Static_assert(sizeof(struct fence_hdr) == FENCE_HDR, "fence header size");

struct rtab_fence {
	void *map;
	size_t len;
	uint32_t nsinks, nslots;
	_Atomic uint64_t *slot; /* nsinks x nslots */
};

static size_t fence_len(uint32_t nsinks, uint32_t nslots)
{
	return FENCE_HDR + (size_t)nsinks * nslots * sizeof(uint64_t);
}

static uint64_t pack(struct rtab_ref ref)
{
	return (uint64_t)ref.gen << 32 | ref.slot;
}

static int map_fd(int fd, size_t len, struct rtab_fence **out)
{
	struct rtab_fence *f = calloc(1, sizeof *f);
	const struct fence_hdr *h;

	if (!f)
		return KVW_ENOMEM;
	f->map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (f->map == MAP_FAILED) {
		free(f);
		return KVW_ESYS;
	}
	h = f->map;
	f->len = len;
	f->nsinks = h->nsinks;
	f->nslots = h->nslots;
	f->slot = (_Atomic uint64_t *)(void *)((char *)f->map + FENCE_HDR);
	*out = f;
	return 0;
}

int rtab_fence_create(const char *path, uint32_t nsinks, uint32_t nslots,
		      struct rtab_fence **out, char *err, size_t errlen)
{
	struct fence_hdr h = { .magic = FENCE_MAGIC, .nsinks = nsinks,
			       .nslots = nslots };
	char tmp[4096];
	size_t len = fence_len(nsinks, nslots);
	int fd, rc;

	*out = NULL;
	if (nsinks == 0 || nsinks > RTAB_FENCE_MAX_SINKS || nslots == 0 ||
	    nslots > RTAB_FENCE_MAX_SLOTS)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"fence: %u sinks x %u slots is out of range",
				nsinks, nslots);
	if (snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid()) >=
	    (int)sizeof tmp)
		return kvw_errf(err, errlen, KVW_EINVAL, "fence: path too long");
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return kvw_errf(err, errlen, KVW_ESYS, "fence: %s: %s", tmp,
				strerror(errno));
	/* ftruncate zero-fills: every slot starts idle. */
	rc = ftruncate(fd, (off_t)len) == 0 &&
	     pwrite(fd, &h, sizeof h, 0) == (ssize_t)sizeof h &&
	     rename(tmp, path) == 0 ? 0 : KVW_ESYS;
	if (rc == 0)
		rc = map_fd(fd, len, out);
	if (rc) {
		kvw_seterr(err, errlen, "fence: %s: %s", path, strerror(errno));
		unlink(tmp);
	}
	close(fd);
	return rc;
}

int rtab_fence_open(const char *path, struct rtab_fence **out, char *err,
		    size_t errlen)
{
	struct fence_hdr h;
	struct stat sb;
	int fd, rc = KVW_EVERSION;

	*out = NULL;
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return kvw_errf(err, errlen, errno == ENOENT ? KVW_ENOENT : KVW_ESYS,
				"fence: %s: %s", path, strerror(errno));
	if (fstat(fd, &sb) == 0 && pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h &&
	    h.magic == FENCE_MAGIC && h.nsinks >= 1 &&
	    h.nsinks <= RTAB_FENCE_MAX_SINKS && h.nslots >= 1 &&
	    h.nslots <= RTAB_FENCE_MAX_SLOTS &&
	    (size_t)sb.st_size == fence_len(h.nsinks, h.nslots))
		rc = map_fd(fd, (size_t)sb.st_size, out);
	close(fd);
	if (rc == KVW_EVERSION)
		return kvw_errf(err, errlen, rc, "fence: %s: not a kvwire fence",
				path);
	if (rc)
		return kvw_errf(err, errlen, rc, "fence: %s: cannot map it", path);
	return 0;
}

void rtab_fence_close(struct rtab_fence **f)
{
	if (!f || !*f)
		return;
	munmap((*f)->map, (*f)->len);
	free(*f);
	*f = NULL;
}

uint32_t rtab_fence_sinks(const struct rtab_fence *f)
{
	return f->nsinks;
}

uint32_t rtab_fence_slots(const struct rtab_fence *f)
{
	return f->nslots;
}

int rtab_fence_enter(struct rtab_fence *f, uint32_t sink, uint32_t slot,
		     struct rtab_ref ref)
{
	if (sink >= f->nsinks || slot >= f->nslots || ref.gen == 0)
		return 0;
	atomic_store_explicit(&f->slot[(size_t)sink * f->nslots + slot],
			      pack(ref), memory_order_relaxed);
	/* The store must be visible before the caller reads the room. */
	atomic_thread_fence(memory_order_seq_cst);
	return 1;
}

void rtab_fence_leave(struct rtab_fence *f, uint32_t sink, uint32_t slot)
{
	if (sink < f->nsinks && slot < f->nslots)
		atomic_store_explicit(&f->slot[(size_t)sink * f->nslots + slot],
				      0, memory_order_release);
}

int rtab_fence_busy(const struct rtab_fence *f, struct rtab_ref ref)
{
	uint64_t want = pack(ref);
	size_t n = (size_t)f->nsinks * f->nslots;

	if (ref.gen == 0)
		return 0; /* never a room: 0 is an idle slot */
	/* The caller's ARMED store must be visible before these loads. */
	atomic_thread_fence(memory_order_seq_cst);
	for (size_t i = 0; i < n; i++)
		if (atomic_load_explicit(&f->slot[i], memory_order_acquire) ==
		    want)
			return 1;
	return 0;
}

void rtab_fence_reset(struct rtab_fence *f, uint32_t sink)
{
	if (sink >= f->nsinks)
		return;
	for (uint32_t i = 0; i < f->nslots; i++)
		atomic_store_explicit(&f->slot[(size_t)sink * f->nslots + i], 0,
				      memory_order_release);
}
