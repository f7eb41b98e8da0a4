/*
 * rtab_file.c - the room table file: creating it (fully initialised in a
 * private file, then linked at its path so nobody maps half a table),
 * reopening it after an owner restart, mapping it for other processes
 * (read-write or PROT_READ), validating magic, version, geometry and size
 * before anything is trusted, and the header accessors.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rtab_impl.h"

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static size_t file_size(uint32_t cap, uint32_t peer_cap)
{
	return (size_t)RTAB_HDR_SIZE + (size_t)cap * RTAB_ENTRY_SIZE +
	       (size_t)peer_cap * RTAB_PEER_SIZE;
}

static int geometry_ok(uint32_t cap, uint32_t peer_cap)
{
	return cap >= 2 && cap <= RTAB_MAX_CAPACITY && (cap & (cap - 1)) == 0 &&
	       peer_cap >= 1 && peer_cap <= RTAB_MAX_PEERS;
}

/* ---- file ------------------------------------------------------------ */

/* Validates the mapped header against the file size (and, if cap != 0, the
 * expected geometry) and fills in the handle. */
static int check_header(struct rtab *t, const char *path, uint32_t cap,
			uint32_t peer_cap, char *err, size_t errlen)
{
	const struct rtab_hdr *h = t->hdr;

	if (h->magic != RTAB_MAGIC)
		return kvw_errf(err, errlen, KVW_EVERSION,
				"%s: not a kvwire room table (bad magic)",
				path);
	if (h->version != RTAB_VERSION || h->hdr_size != RTAB_HDR_SIZE ||
	    h->entry_size != RTAB_ENTRY_SIZE ||
	    h->peer_entry_size != RTAB_PEER_SIZE) {
		kvw_seterr(err, errlen,
			   "%s: room table version %u (header %u, entry %u, peer %u); "
			   "this build reads version %u", path, h->version,
			   h->hdr_size, h->entry_size, h->peer_entry_size,
			   RTAB_VERSION);
		return KVW_EVERSION;
	}
	if (!geometry_ok(h->capacity, h->peer_capacity) ||
	    file_size(h->capacity, h->peer_capacity) != t->len) {
		kvw_seterr(err, errlen,
			   "%s: room table geometry %u rooms, %u peers does not "
			   "match its size %zu bytes", path, h->capacity,
			   h->peer_capacity, t->len);
		return KVW_EVERSION;
	}
	if (cap != 0 && (h->capacity != cap || h->peer_capacity != peer_cap)) {
		kvw_seterr(err, errlen,
			   "%s: existing room table has %u rooms, %u peers; "
			   "asked for %u rooms, %u peers", path, h->capacity,
			   h->peer_capacity, cap, peer_cap);
		return KVW_EVERSION;
	}
	t->cap = h->capacity;
	t->mask = h->capacity - 1;
	t->peer_cap = h->peer_capacity;
	t->ent = (struct rtab_entry *)((char *)t->map + RTAB_HDR_SIZE);
	t->peers = (struct rtab_peer *)((char *)t->ent +
					(size_t)t->cap * RTAB_ENTRY_SIZE);
	return 0;
}

/* Maps an open table file and validates it. */
static int map_fd(struct rtab *t, int fd, const char *path, uint32_t cap,
		  uint32_t peer_cap, char *err, size_t errlen)
{
	struct stat st;
	int prot = PROT_READ | (t->writable ? PROT_WRITE : 0);

	if (fstat(fd, &st) < 0)
		return kvw_errf(err, errlen, KVW_ESYS, "%s: fstat: %s", path,
				strerror(errno));
	if (st.st_size < (off_t)RTAB_HDR_SIZE) {
		kvw_seterr(err, errlen, "%s: truncated room table (%lld bytes)",
			   path, (long long)st.st_size);
		return KVW_EVERSION;
	}
	if ((uint64_t)st.st_size > file_size(RTAB_MAX_CAPACITY, RTAB_MAX_PEERS))
		return kvw_errf(err, errlen, KVW_EVERSION,
				"%s: too large for a room table (%lld bytes)",
				path, (long long)st.st_size);
	t->len = (size_t)st.st_size;
	t->dev = st.st_dev;
	t->ino = st.st_ino;
	t->map = mmap(NULL, t->len, prot, MAP_SHARED, fd, 0);
	if (t->map == MAP_FAILED) {
		t->map = NULL;
		return kvw_errf(err, errlen, KVW_ESYS, "%s: mmap: %s", path,
				strerror(errno));
	}
	t->hdr = t->map;
	return check_header(t, path, cap, peer_cap, err, errlen);
}

void rtab_close(struct rtab **tp)
{
	struct rtab *t;

	if (tp == NULL || *tp == NULL)
		return;
	t = *tp;
	if (t->map != NULL)
		munmap(t->map, t->len);
	if (t->lock_fd >= 0)
		close(t->lock_fd); /* releases the owner's lock */
	rtab_reclaim_free(t);
	free(t);
	*tp = NULL;
}

int rtab_open(const char *path, int writable, struct rtab **out, char *err,
	      size_t errlen)
{
	struct rtab *t;
	int fd, rc;

	*out = NULL;
	if (path == NULL)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"room table path missing");
	t = calloc(1, sizeof(*t));
	if (t == NULL)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	t->lock_fd = -1;
	t->writable = writable != 0;
	fd = open(path, (writable ? O_RDWR : O_RDONLY) | O_CLOEXEC);
	if (fd < 0) {
		rc = errno == ENOENT ? KVW_ENOENT : KVW_ESYS;
		kvw_seterr(err, errlen, "%s: open: %s", path, strerror(errno));
		goto fail;
	}
	rc = map_fd(t, fd, path, 0, 0, err, errlen);
	close(fd);
	if (rc < 0)
		goto fail;
	*out = t;
	return 0;
fail:
	rtab_close(&t);
	return rc;
}

/* Slots an owner left RESERVED (it died mid-rewrite) become Cleared
 * tombstones: the key is either the slot's old key or the new one, both
 * unique, and the incarnation never became visible. A slot it left between
 * the two CASes of a take (the job counter already claimed for the next
 * generation, the state word still EMPTY or a Cleared tombstone of the old
 * one) gets its counter back: it counted nothing (a take starts only from
 * zero), and without this no insert could take the slot again. */
static void repair_reserved(struct rtab *t)
{
	for (uint32_t s = 0; s < t->cap; s++) {
		struct rtab_entry *e = &t->ent[s];
		uint64_t w = sw_load(e), o = ow_load(e);

		if ((sw_kind(w) == RTAB_K_EMPTY ||
		     (sw_kind(w) == RTAB_K_LIVE && sw_state(w) == KVW_CLEARED)) &&
		    ow_gen(o) != sw_gen(w) && o == ow_pack(ow_gen(o), 0)) {
			atomic_store_explicit(&e->outstanding,
					      ow_pack(sw_gen(w), 0),
					      memory_order_relaxed);
			continue;
		}
		if (sw_kind(w) != RTAB_K_RESERVED)
			continue;
		atomic_store_explicit(&e->outstanding, ow_pack(sw_gen(w), 0),
				      memory_order_relaxed);
		sw_store_release(e, sw_pack(sw_gen(w), KVW_R_OWNER_RESTART,
					    KVW_CLEARED, RTAB_K_LIVE));
	}
}

/* Builds a fresh table in a private temporary file and links it at path,
 * so nobody ever maps a half-initialised table. Returns 0, KVW_EEXIST if
 * path appeared meanwhile, or an error. */
static int create_new(struct rtab *t, const char *path, uint32_t cap,
		      uint32_t peer_cap, uint64_t epoch, char *err,
		      size_t errlen)
{
	char tmp[4096];
	int fd, rc;
	struct rtab_hdr *h;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path,
			     (long)getpid()) >= sizeof(tmp)) {
		return kvw_errf(err, errlen, KVW_EINVAL,
				"room table path too long");
	}
	unlink(tmp);
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return kvw_errf(err, errlen, KVW_ESYS, "%s: create: %s", tmp,
				strerror(errno));
	/* Locked before it is linked: no moment where the table exists and
	 * has no owner's lock. */
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		kvw_seterr(err, errlen, "%s: flock: %s", tmp, strerror(errno));
		rc = KVW_ESYS;
		goto out;
	}
	if (ftruncate(fd, (off_t)file_size(cap, peer_cap)) < 0) {
		kvw_seterr(err, errlen, "%s: ftruncate: %s", tmp,
			   strerror(errno));
		rc = KVW_ESYS;
		goto out;
	}
	t->len = file_size(cap, peer_cap);
	{
		struct stat st;

		if (fstat(fd, &st) == 0) {
			t->dev = st.st_dev;
			t->ino = st.st_ino;
		}
	}
	t->map = mmap(NULL, t->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (t->map == MAP_FAILED) {
		t->map = NULL;
		kvw_seterr(err, errlen, "%s: mmap: %s", tmp, strerror(errno));
		rc = KVW_ESYS;
		goto out;
	}
	/* ftruncate zero-filled it: every slot EMPTY, every peer unused. */
	h = t->hdr = t->map;
	h->magic = RTAB_MAGIC;
	h->version = RTAB_VERSION;
	h->hdr_size = RTAB_HDR_SIZE;
	h->entry_size = RTAB_ENTRY_SIZE;
	h->capacity = cap;
	h->peer_capacity = peer_cap;
	h->peer_entry_size = RTAB_PEER_SIZE;
	h->created_ns = realtime_ns();
	atomic_store_explicit(&h->owner_epoch, epoch, memory_order_relaxed);
	atomic_store_explicit(&h->owner_pid, (uint32_t)getpid(),
			      memory_order_relaxed);
	rc = check_header(t, tmp, cap, peer_cap, err, errlen);
	if (rc < 0)
		goto out;
	if (link(tmp, path) < 0) {
		rc = errno == EEXIST ? KVW_EEXIST : KVW_ESYS;
		kvw_seterr(err, errlen, "%s: link: %s", path, strerror(errno));
		goto out;
	}
	rc = 0;
	t->lock_fd = fd; /* kept: the owner's lock */
out:
	unlink(tmp);
	if (rc < 0)
		close(fd);
	if (rc < 0 && t->map != NULL) {
		munmap(t->map, t->len);
		t->map = NULL;
	}
	return rc;
}

/* The owner pid a locked table file records (for the refusal's text), or
 * 0 when it cannot be read. */
static unsigned live_owner_pid(int fd)
{
	struct rtab_hdr h;

	if (pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h ||
	    h.magic != RTAB_MAGIC)
		return 0;
	return (unsigned)atomic_load_explicit(&h.owner_pid,
					      memory_order_relaxed);
}

int rtab_create(const char *path, uint32_t capacity, uint32_t peer_capacity,
		uint64_t owner_epoch, struct rtab **out, int *existed,
		char *err, size_t errlen)
{
	struct rtab *t;
	int fd, rc = KVW_ESYS;

	*out = NULL;
	if (existed != NULL)
		*existed = 0;
	if (path == NULL || !geometry_ok(capacity, peer_capacity)) {
		kvw_seterr(err, errlen,
			   "room table: bad geometry %u rooms (power of two, 2..%u), "
			   "%u peers (1..%u)", capacity, RTAB_MAX_CAPACITY,
			   peer_capacity, RTAB_MAX_PEERS);
		return KVW_EINVAL;
	}
	t = calloc(1, sizeof(*t));
	if (t == NULL)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	t->lock_fd = -1;
	t->writable = 1;
	t->owner = 1;
	for (int attempt = 0; attempt < 2; attempt++) {
		fd = open(path, O_RDWR | O_CLOEXEC);
		if (fd >= 0) {
			/* One owner per table: the lock is held as long as
			 * the owner lives (the kernel drops it when the owner
			 * dies), so a second owner started on a live table
			 * refuses here, before it changes anything. */
			if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
				rc = errno == EWOULDBLOCK ? KVW_EEXIST : KVW_ESYS;
				kvw_seterr(err, errlen,
					   "%s: owned by a live process (pid "
					   "%u?): refusing to be a second owner",
					   path, live_owner_pid(fd));
				close(fd);
				goto fail;
			}
			t->lock_fd = fd;
			rc = map_fd(t, fd, path, capacity, peer_capacity, err,
				    errlen);
			if (rc < 0)
				goto fail;
			repair_reserved(t);
			FLD_ADD(&t->hdr->counters[RTAB_C_OWNER_RESTART], 1);
			atomic_store_explicit(&t->hdr->owner_pid,
					      (uint32_t)getpid(),
					      memory_order_release);
			if (existed != NULL)
				*existed = 1;
			*out = t;
			return 0;
		}
		if (errno != ENOENT) {
			kvw_seterr(err, errlen, "%s: open: %s", path,
				   strerror(errno));
			rc = KVW_ESYS;
			goto fail;
		}
		rc = create_new(t, path, capacity, peer_capacity, owner_epoch,
				err, errlen);
		if (rc == 0) {
			*out = t;
			return 0;
		}
		if (rc != KVW_EEXIST)
			goto fail;
	}
fail:
	rtab_close(&t);
	return rc;
}

int rtab_is_at(const struct rtab *t, const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 && st.st_dev == t->dev &&
	       st.st_ino == t->ino;
}

int rtab_unlink(const char *path)
{
	if (unlink(path) == 0)
		return 0;
	return errno == ENOENT ? KVW_ENOENT : KVW_ESYS;
}

uint64_t rtab_owner_epoch(const struct rtab *t)
{
	return atomic_load_explicit(&t->hdr->owner_epoch, memory_order_acquire);
}

uint32_t rtab_capacity(const struct rtab *t) { return t->cap; }
uint32_t rtab_peer_capacity(const struct rtab *t) { return t->peer_cap; }
const struct rtab_hdr *rtab_header(const struct rtab *t) { return t->hdr; }

void rtab_info(const struct rtab *t, struct rtab_info *info)
{
	const struct rtab_hdr *h = t->hdr;
	uint32_t n = PUB_LOAD(&h->peer_count);

	memset(info, 0, sizeof(*info));
	info->capacity = t->cap;
	info->peer_capacity = t->peer_cap;
	if (n > t->peer_cap)
		n = t->peer_cap;
	/* Slots a retire freed are not in use (rtab_peer_retire). */
	for (uint32_t i = 0; i < n; i++)
		info->peer_count += PUB_LOAD(&t->peers[i].id) == i + 1;
	info->owner_pid = PUB_LOAD(&h->owner_pid);
	info->owner_epoch = PUB_LOAD(&h->owner_epoch);
	info->created_ns = h->created_ns;
	for (unsigned i = 0; i < RTAB_NCOUNTERS; i++)
		info->counters[i] = FLD_LOAD(&h->counters[i]);
}

void rtab_counter_add(struct rtab *t, unsigned which, uint64_t n)
{
	if (t->writable && which < RTAB_NCOUNTERS)
		FLD_ADD(&t->hdr->counters[which], n);
}

uint64_t rtab_counter_get(const struct rtab *t, unsigned which)
{
	return which < RTAB_NCOUNTERS ? FLD_LOAD(&t->hdr->counters[which]) : 0;
}
