/*
 * rtab_grant.c - the destination grants of rtab_grant.h: a file of a
 * header, the decode layout, one seqlocked record per room-table slot, the
 * target slice table and two owner maps (pool pages, aux slots) of packed
 * rtab_refs. Geometry and
 * layout are copied into the handle when it is opened and checked there,
 * so a reader never trusts the shared bytes for its own bounds.
 */
#include "rtab_grant.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#define GRANT_MAX_PAGES (1u << 24) /* owner words of one map: 128 MiB */

struct rtab_grant {
	void *map;
	size_t len;
	int writable;
	uint32_t nbufs, nslots, npages, naux;
	/* State rows (RTAB_GRANT_STATE buffers): component c's owner words
	 * are state_owner[state_base[c] .. + state_rows[c]). */
	uint32_t state_base[KVW_MAX_STATE], state_rows[KVW_MAX_STATE];
	uint32_t nstate_rows;
	uint16_t state_layers[KVW_MAX_STATE]; /* the header's */
	struct rtab_grant_buf *bufs;    /* private copy, sorted by offset */
	struct rtab_grant_room *rooms;  /* in the map */
	struct rtab_grant_target *slices; /* in the map; appended only */
	uint32_t nslices;               /* writer: entries used so far */
	uint8_t key[16];                /* rtab_grant_token's */
	_Atomic uint64_t *page_owner;   /* in the map */
	_Atomic uint64_t *aux_owner;    /* in the map */
	_Atomic uint64_t *state_owner;  /* in the map */
};

/* The state-row maps a sorted layout needs: each component's rows (the
 * most of its buffers), their bases, and the total in *total. */
static void state_maps(const struct rtab_grant_buf *b, uint32_t n,
		       uint32_t rows[KVW_MAX_STATE], uint32_t base[KVW_MAX_STATE],
		       uint32_t *total)
{
	uint64_t sum = 0;

	memset(rows, 0, KVW_MAX_STATE * sizeof rows[0]);
	for (uint32_t i = 0; i < n; i++)
		if (b[i].aux == RTAB_GRANT_STATE && b[i].reserved0 < KVW_MAX_STATE &&
		    b[i].pages > rows[b[i].reserved0])
			rows[b[i].reserved0] = b[i].pages;
	for (uint32_t c = 0; c < KVW_MAX_STATE; c++) {
		base[c] = (uint32_t)sum;
		sum += rows[c];
	}
	*total = (uint32_t)sum;
}

static uint64_t pack(struct rtab_ref ref)
{
	return (uint64_t)ref.gen << 32 | ref.slot;
}

/* naux: aux slots and state rows together (both maps follow the pages). */
static size_t grant_len(uint32_t nbufs, uint32_t nslots, uint32_t npages,
			uint32_t naux)
{
	return RTAB_GRANT_HDR + (size_t)nbufs * sizeof(struct rtab_grant_buf) +
	       (size_t)nslots * sizeof(struct rtab_grant_room) +
	       (size_t)RTAB_GRANT_SLICES * sizeof(struct rtab_grant_target) +
	       ((size_t)npages + naux) * sizeof(uint64_t);
}

static int buf_cmp(const void *a, const void *b)
{
	uint64_t x = ((const struct rtab_grant_buf *)a)->offset;
	uint64_t y = ((const struct rtab_grant_buf *)b)->offset;

	return (x > y) - (x < y);
}

/* Checks a sorted layout: lengths that fit, no overlap, pages within the
 * maps. 0 or KVW_EINVAL. */
static int bufs_check(const struct rtab_grant_buf *b, uint32_t n,
		      uint32_t npages, uint32_t naux)
{
	for (uint32_t i = 0; i < n; i++) {
		uint64_t end;

		if (b[i].item_len == 0 || b[i].pages == 0 ||
		    b[i].aux > RTAB_GRANT_STATE ||
		    (b[i].aux == RTAB_GRANT_STATE &&
		     b[i].reserved0 >= KVW_MAX_STATE) ||
		    (b[i].aux != RTAB_GRANT_STATE && b[i].reserved0) ||
		    b[i].pages > (b[i].aux == 1 ? naux : b[i].aux ? GRANT_MAX_PAGES
							      : npages) ||
		    __builtin_add_overflow(b[i].offset,
					   (uint64_t)b[i].item_len * b[i].pages,
					   &end) ||
		    end != b[i].end || (i && b[i].offset < b[i - 1].end))
			return KVW_EINVAL;
	}
	return 0;
}

/* Maps fd (len bytes) and fills the handle from the layout in bufs[n]
 * (already checked). */
static int map_fd(int fd, size_t len, int writable,
		  const struct rtab_grant_hdr *h,
		  const struct rtab_grant_buf *bufs, struct rtab_grant **out)
{
	struct rtab_grant *g = calloc(1, sizeof *g);
	char *base;

	if (!g)
		return KVW_ENOMEM;
	g->bufs = malloc((h->nbufs ? h->nbufs : 1) * sizeof *g->bufs);
	if (!g->bufs) {
		free(g);
		return KVW_ENOMEM;
	}
	g->map = mmap(NULL, len, PROT_READ | (writable ? PROT_WRITE : 0),
		      MAP_SHARED, fd, 0);
	if (g->map == MAP_FAILED) {
		free(g->bufs);
		free(g);
		return KVW_ESYS;
	}
	memcpy(g->bufs, bufs, (size_t)h->nbufs * sizeof *g->bufs);
	g->len = len;
	g->writable = writable;
	g->nbufs = h->nbufs;
	g->nslots = h->nslots;
	g->npages = h->npages;
	g->naux = h->naux;
	memcpy(g->key, h->key, sizeof g->key);
	memcpy(g->state_layers, h->state_layers, sizeof g->state_layers);
	base = (char *)g->map + RTAB_GRANT_HDR +
	       (size_t)h->nbufs * sizeof(struct rtab_grant_buf);
	g->rooms = (struct rtab_grant_room *)(void *)base;
	base += (size_t)h->nslots * sizeof(struct rtab_grant_room);
	g->slices = (struct rtab_grant_target *)(void *)base;
	base += (size_t)RTAB_GRANT_SLICES * sizeof(struct rtab_grant_target);
	g->page_owner = (_Atomic uint64_t *)(void *)base;
	g->aux_owner = g->page_owner + h->npages;
	state_maps(bufs, h->nbufs, g->state_rows, g->state_base,
		   &g->nstate_rows);
	g->state_owner = g->aux_owner + h->naux;
	*out = g;
	return 0;
}

int rtab_grant_create(const char *path, uint32_t nslots,
		      const struct kvw_buf *bufs, uint32_t nbufs,
		      const uint32_t *state_layers,
		      struct rtab_grant **out, char *err, size_t errlen)
{
	struct rtab_grant_hdr h = { .magic = RTAB_GRANT_MAGIC,
				    .version = RTAB_GRANT_VERSION,
				    .nslots = nslots };
	struct rtab_grant_buf *b = NULL;
	char tmp[4096];
	size_t len, blen;
	int fd, rc;

	*out = NULL;
	if (nslots == 0 || nslots > RTAB_MAX_CAPACITY ||
	    nbufs > KVW_MAX_BUFFERS || (nbufs && !bufs))
		return kvw_errf(err, errlen, KVW_EINVAL, "grant: %u slots, "
				"%u buffers: out of range", nslots, nbufs);
	for (uint32_t c = 0; state_layers && c < KVW_MAX_STATE; c++) {
		if (state_layers[c] > UINT16_MAX)
			return kvw_errf(err, errlen, KVW_EINVAL, "grant: state "
					"component %u: %u layers", c,
					state_layers[c]);
		h.state_layers[c] = (uint16_t)state_layers[c];
	}
	b = calloc(nbufs ? nbufs : 1, sizeof *b);
	if (!b)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	for (uint32_t i = 0; i < nbufs; i++) {
		uint32_t aux = bufs[i].role == KVW_ROLE_AUX ? 1
			       : bufs[i].role == KVW_ROLE_STATE ? RTAB_GRANT_STATE
								 : 0;
		uint32_t *most = aux == 1 ? &h.naux : &h.npages;
		uint32_t none = 0;

		if (bufs[i].pages == 0)
			continue; /* nothing to grant in it */
		b[h.nbufs] = (struct rtab_grant_buf){
			.offset = bufs[i].offset, .item_len = bufs[i].item_len,
			.pages = bufs[i].pages, .aux = (uint8_t)aux,
			.layer_id = bufs[i].layer_id, .role = bufs[i].role,
			.reserved0 = aux == RTAB_GRANT_STATE
					     ? (uint16_t)KVW_STATE_OF(bufs[i].layer_id)
					     : 0,
			.end = bufs[i].offset +
			       (uint64_t)bufs[i].item_len * bufs[i].pages };
		if (aux == RTAB_GRANT_STATE)
			most = &none; /* rows of their own map */
		if (bufs[i].pages > *most)
			*most = bufs[i].pages;
		h.nbufs++;
	}
	qsort(b, h.nbufs, sizeof *b, buf_cmp);
	/* The token key: only this receiver and its sinks read the file. */
	if (getrandom(h.key, sizeof h.key, 0) != (ssize_t)sizeof h.key) {
		free(b);
		return kvw_errf(err, errlen, KVW_ESYS, "grant: getrandom: %s",
				strerror(errno));
	}
	if (h.npages > GRANT_MAX_PAGES || h.naux > GRANT_MAX_PAGES ||
	    bufs_check(b, h.nbufs, h.npages, h.naux) != 0) {
		free(b);
		return kvw_errf(err, errlen, KVW_EINVAL, "grant: the layout "
				"has overlapping, empty or oversized buffers");
	}
	if (snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid()) >=
	    (int)sizeof tmp) {
		free(b);
		return kvw_errf(err, errlen, KVW_EINVAL, "grant: path too long");
	}
	{
		uint32_t rows[KVW_MAX_STATE], base[KVW_MAX_STATE], total;

		state_maps(b, h.nbufs, rows, base, &total);
		if (total > GRANT_MAX_PAGES) {
			free(b);
			return kvw_errf(err, errlen, KVW_EINVAL, "grant: %u "
					"state rows, at most %u", total,
					GRANT_MAX_PAGES);
		}
		len = grant_len(h.nbufs, nslots, h.npages, h.naux + total);
	}
	blen = (size_t)h.nbufs * sizeof *b;
	fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		free(b);
		return kvw_errf(err, errlen, KVW_ESYS, "grant: %s: %s", tmp,
				strerror(errno));
	}
	/* ftruncate zero-fills: no record grants anything, no page is
	 * owned. */
	rc = ftruncate(fd, (off_t)len) == 0 &&
	     pwrite(fd, &h, sizeof h, 0) == (ssize_t)sizeof h &&
	     pwrite(fd, b, blen, RTAB_GRANT_HDR) == (ssize_t)blen &&
	     rename(tmp, path) == 0 ? 0 : KVW_ESYS;
	if (rc == 0)
		rc = map_fd(fd, len, 1, &h, b, out);
	if (rc) {
		kvw_seterr(err, errlen, "grant: %s: %s", path, strerror(errno));
		unlink(tmp);
	}
	close(fd);
	free(b);
	return rc;
}

int rtab_grant_open(const char *path, struct rtab_grant **out, char *err,
		    size_t errlen)
{
	struct rtab_grant_hdr h;
	struct rtab_grant_buf *b = NULL;
	struct stat sb;
	int fd, rc = KVW_EVERSION;

	*out = NULL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return kvw_errf(err, errlen, errno == ENOENT ? KVW_ENOENT : KVW_ESYS,
				"grant: %s: %s", path, strerror(errno));
	if (fstat(fd, &sb) == 0 && pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h &&
	    h.magic == RTAB_GRANT_MAGIC && h.version == RTAB_GRANT_VERSION &&
	    h.nbufs <= KVW_MAX_BUFFERS && h.nslots >= 1 &&
	    h.nslots <= RTAB_MAX_CAPACITY && h.npages <= GRANT_MAX_PAGES &&
	    h.naux <= GRANT_MAX_PAGES) {
		size_t blen = (size_t)h.nbufs * sizeof *b;
		uint32_t rows[KVW_MAX_STATE], base[KVW_MAX_STATE], total;

		b = malloc(blen ? blen : 1);
		if (!b)
			rc = KVW_ENOMEM;
		else if (pread(fd, b, blen, RTAB_GRANT_HDR) == (ssize_t)blen &&
			 bufs_check(b, h.nbufs, h.npages, h.naux) == 0 &&
			 (state_maps(b, h.nbufs, rows, base, &total),
			  total <= GRANT_MAX_PAGES) &&
			 (size_t)sb.st_size == grant_len(h.nbufs, h.nslots,
							 h.npages,
							 h.naux + total))
			rc = map_fd(fd, (size_t)sb.st_size, 0, &h, b, out);
	}
	close(fd);
	free(b);
	if (rc == KVW_EVERSION)
		return kvw_errf(err, errlen, rc, "grant: %s: not a kvwire grant "
				"file", path);
	if (rc)
		return kvw_errf(err, errlen, rc, "grant: %s: cannot map it", path);
	return 0;
}

void rtab_grant_close(struct rtab_grant **g)
{
	if (!g || !*g)
		return;
	munmap((*g)->map, (*g)->len);
	free((*g)->bufs);
	free(*g);
	*g = NULL;
}

uint32_t rtab_grant_slots(const struct rtab_grant *g)
{
	return g->nslots;
}

uint32_t rtab_grant_pages(const struct rtab_grant *g)
{
	return g->npages;
}

/* ---- the one writer: a seqlock write around each record change ------- */

/* Without fences (ThreadSanitizer has none): every store between
 * write_begin and write_end is a release store and every reader's load of
 * those words an acquire load, so a reader that saw any store of a
 * rewrite also sees the odd sequence before it when it reads the sequence
 * again (rtab_grant_still). On x86 these are plain moves. */
static void write_begin(struct rtab_grant_room *r)
{
	uint64_t s = atomic_load_explicit(&r->seq, memory_order_relaxed);

	atomic_store_explicit(&r->seq, s + 1, memory_order_relaxed);
}

static void write_end(struct rtab_grant_room *r)
{
	uint64_t s = atomic_load_explicit(&r->seq, memory_order_relaxed);

	atomic_store_explicit(&r->seq, s + 1, memory_order_release);
}

uint64_t rtab_grant_token_of(const uint8_t key[16], uint64_t base,
			     uint32_t i)
{
	uint8_t in[12], out[crypto_shorthash_BYTES];
	uint64_t t;

	_Static_assert(crypto_shorthash_KEYBYTES == 16, "siphash key");
	memcpy(in, &base, 8);
	memcpy(in + 8, &i, 4);
	crypto_shorthash(out, in, sizeof in, key);
	memcpy(&t, out, sizeof t);
	t = (t & ~(uint64_t)0xff) | (i & 0xff);
	return t ? t : 0x100; /* never 0: 0 is "no token" */
}

uint64_t rtab_grant_token(const struct rtab_grant *g, uint64_t base,
			  uint32_t i)
{
	return rtab_grant_token_of(g->key, base, i);
}

void rtab_grant_key(const struct rtab_grant *g, uint8_t key[16])
{
	memcpy(key, g->key, sizeof g->key);
}

struct rtab_grant_target rtab_grant_whole(void)
{
	return (struct rtab_grant_target){ .layer_count = UINT32_MAX,
					   .flags = RTAB_GRANT_T_AUX };
}

/* The first slice of a run equal to tg[0..n) in the table, appended when
 * there is none; UINT32_MAX when the table is full. Runs are few (one per
 * prefill topology the receiver met), so a scan is cheap; an entry, once
 * written, is never rewritten, so a reader that saw a record naming it
 * reads it whole. */
static uint32_t slices_find(struct rtab_grant *g,
			    const struct rtab_grant_target *tg, uint32_t n)
{
	size_t len = (size_t)n * sizeof *tg;

	for (uint32_t at = 0; at + n <= g->nslices; at++)
		if (memcmp(&g->slices[at], tg, len) == 0)
			return at;
	if (g->nslices + n > RTAB_GRANT_SLICES)
		return UINT32_MAX;
	memcpy(&g->slices[g->nslices], tg, len);
	g->nslices += n;
	return g->nslices - n;
}

int rtab_grant_give(struct rtab_grant *g, struct rtab_ref ref, uint64_t token,
		    const uint32_t *pages, uint32_t npages, uint32_t aux)
{
	struct rtab_grant_target w = rtab_grant_whole();

	return rtab_grant_give_targets(g, ref, token, &w, 1, pages, npages,
				       aux);
}

int rtab_grant_give_targets(struct rtab_grant *g, struct rtab_ref ref,
			    uint64_t token, const struct rtab_grant_target *tg,
			    uint32_t ntg, const uint32_t *pages,
			    uint32_t npages, uint32_t aux)
{
	struct rtab_grant_room *r;
	uint64_t want = pack(ref);
	uint32_t at;

	if (!g->writable || ref.gen == 0 || ref.slot >= g->nslots ||
	    token == 0 || (npages && !pages) || !tg || ntg == 0 ||
	    ntg > RTAB_GRANT_MAX_TARGETS)
		return KVW_EINVAL;
	for (uint32_t i = 0; i < npages; i++)
		if (pages[i] >= g->npages)
			return KVW_ERANGE;
	if (aux != RTAB_GRANT_NO_AUX && aux >= g->naux)
		return KVW_ERANGE;
	/* Written (if new) before the record names it. */
	at = slices_find(g, tg, ntg);
	if (at == UINT32_MAX)
		return KVW_ERANGE;
	r = &g->rooms[ref.slot];
	write_begin(r);
	atomic_store_explicit(&r->ref, want, memory_order_release);
	atomic_store_explicit(&r->token, token, memory_order_release);
	atomic_store_explicit(&r->targets, (uint64_t)at << 32 | ntg,
			      memory_order_release);
	for (uint32_t i = 0; i < npages; i++)
		atomic_store_explicit(&g->page_owner[pages[i]], want,
				      memory_order_release);
	if (aux != RTAB_GRANT_NO_AUX)
		atomic_store_explicit(&g->aux_owner[aux], want,
				      memory_order_release);
	write_end(r);
	return 0;
}

/* Frees owner word *w if want still owns it. */
static void disown(_Atomic uint64_t *w, uint64_t want)
{
	uint64_t cur = want;

	(void)atomic_compare_exchange_strong_explicit(
		w, &cur, 0, memory_order_release, memory_order_relaxed);
}

int rtab_grant_give_rows(struct rtab_grant *g, struct rtab_ref ref,
			 uint32_t comp, const uint32_t *rows, uint32_t n)
{
	uint64_t want = pack(ref);

	if (!g->writable || ref.gen == 0 || comp >= KVW_MAX_STATE ||
	    (n && !rows))
		return KVW_EINVAL;
	for (uint32_t i = 0; i < n; i++)
		if (rows[i] >= g->state_rows[comp])
			return KVW_ERANGE;
	for (uint32_t i = 0; i < n; i++)
		atomic_store_explicit(&g->state_owner[g->state_base[comp] +
						      rows[i]],
				      want, memory_order_release);
	return 0;
}

void rtab_grant_withdraw_rows(struct rtab_grant *g, struct rtab_ref ref,
			      uint32_t comp, const uint32_t *rows, uint32_t n)
{
	for (uint32_t i = 0; g && g->writable && comp < KVW_MAX_STATE &&
			     rows && i < n; i++)
		if (rows[i] < g->state_rows[comp])
			disown(&g->state_owner[g->state_base[comp] + rows[i]],
			       pack(ref));
}

int rtab_grant_withdraw(struct rtab_grant *g, struct rtab_ref ref,
			const uint32_t *pages, uint32_t npages, uint32_t aux)
{
	struct rtab_grant_room *r;
	uint64_t want = pack(ref);

	if (!g || !g->writable || ref.gen == 0 || ref.slot >= g->nslots)
		return 0;
	r = &g->rooms[ref.slot];
	if (atomic_load_explicit(&r->ref, memory_order_relaxed) != want)
		return 0;
	write_begin(r);
	atomic_store_explicit(&r->ref, 0, memory_order_release);
	atomic_store_explicit(&r->token, 0, memory_order_release);
	atomic_store_explicit(&r->targets, 0, memory_order_release);
	for (uint32_t i = 0; pages && i < npages; i++)
		if (pages[i] < g->npages)
			disown(&g->page_owner[pages[i]], want);
	if (aux != RTAB_GRANT_NO_AUX && aux < g->naux)
		disown(&g->aux_owner[aux], want);
	write_end(r);
	return 1;
}

/* ---- readers ---------------------------------------------------------- */

int rtab_grant_begin(const struct rtab_grant *g, struct rtab_ref ref,
		     uint64_t incarnation, struct rtab_grant_read *rd)
{
	const struct rtab_grant_room *r;
	uint64_t want = pack(ref), s, base, tw;
	uint32_t i = (uint32_t)(incarnation & 0xff), at, n;

	if (ref.gen == 0 || ref.slot >= g->nslots || incarnation == 0)
		return RTAB_GRANT_NOT_LIVE;
	r = &g->rooms[ref.slot];
	s = atomic_load_explicit(&r->seq, memory_order_acquire);
	/* Odd: being granted (no XFER_INFO has left yet) or withdrawn. */
	if (s & 1)
		return RTAB_GRANT_NOT_LIVE;
	if (atomic_load_explicit(&r->ref, memory_order_acquire) != want)
		return RTAB_GRANT_NOT_LIVE;
	base = atomic_load_explicit(&r->token, memory_order_acquire);
	tw = atomic_load_explicit(&r->targets, memory_order_acquire);
	at = (uint32_t)(tw >> 32);
	n = (uint32_t)tw;
	/* The shared words are checked before they index anything: a torn
	 * read is caught by rtab_grant_still, a wild one here. */
	if (base == 0 || i >= n || n > RTAB_GRANT_MAX_TARGETS ||
	    at > RTAB_GRANT_SLICES - n ||
	    rtab_grant_token(g, base, i) != incarnation)
		return RTAB_GRANT_NOT_LIVE;
	*rd = (struct rtab_grant_read){ .seq = s, .want = want,
					.slot = ref.slot, .target = i,
					.t = g->slices[at + i] };
	return RTAB_GRANT_OK;
}

/* The buffer holding byte off, or NULL. */
static const struct rtab_grant_buf *buf_at(const struct rtab_grant *g,
					   uint64_t off)
{
	uint32_t lo = 0, hi = g->nbufs;

	while (lo < hi) { /* the first buffer that starts after off */
		uint32_t mid = lo + (hi - lo) / 2;

		if (g->bufs[mid].offset <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || off >= g->bufs[lo - 1].end)
		return NULL;
	return &g->bufs[lo - 1];
}

/* 1 when [off, off + len) of buffer b (inside it) is target t's to write:
 * the aux slot when t may, a buffer of its layers, and under a head slice
 * the bytes of one token slot of a K, V or KVB page that the slice names. */
static int slice_covers(const struct rtab_grant *g,
			const struct rtab_grant_target *t,
			const struct rtab_grant_buf *b, uint64_t off,
			uint64_t len)
{
	uint64_t pos;
	uint32_t layer, first = t->layer_first, count = t->layer_count;

	if (b->aux == 1)
		return (t->flags & RTAB_GRANT_T_AUX) != 0;
	/* A state buffer's layer is the low half of its id. */
	layer = b->aux == RTAB_GRANT_STATE ? b->layer_id & 0xFFFFu : b->layer_id;
	if (b->aux == RTAB_GRANT_STATE && b->reserved0 < KVW_MAX_STATE &&
	    g->state_layers[b->reserved0]) {
		if (t->stage >> 16 == 0)
			return 0; /* no stage: a target that writes nothing */
		kvw_pp_share(g->state_layers[b->reserved0], t->stage >> 16,
			     t->stage & 0xFFFFu, &first, &count);
	}
	if (layer < first || layer - first >= count)
		return 0;
	if (b->aux == RTAB_GRANT_STATE) {
		uint64_t part;

		if (t->state_parts <= 1 || b->reserved0 >= 32 ||
		    !(t->state_sharded >> b->reserved0 & 1))
			return 1; /* whole rows */
		/* Its part of the row, within one row. */
		part = b->item_len / t->state_parts;
		pos = (off - b->offset) % b->item_len;
		return part != 0 && pos >= t->state_part * part &&
		       len <= part && pos - t->state_part * part <= part - len;
	}
	if ((b->role != KVW_ROLE_K && b->role != KVW_ROLE_V &&
	     b->role != KVW_ROLE_KVB) ||
	    t->slice_len == 0 ||
	    (t->slice_off == 0 && t->slice_len >= t->slot_len))
		return 1; /* whole slots: MLA's KV, no TP mismatch */
	if (t->slot_len == 0)
		return 0;
	/* Where the copy starts in its token slot; it must end in the
	 * slice, so it never reaches the next slot (honest plans send one
	 * slot's slice per copy: plan_chunk). */
	pos = (off - b->offset) % b->item_len % t->slot_len;
	return pos >= t->slice_off && len <= t->slice_len &&
	       pos - t->slice_off <= t->slice_len - len;
}

int rtab_grant_covers(const struct rtab_grant *g,
		      const struct rtab_grant_read *rd, uint64_t off,
		      uint64_t len)
{
	const struct rtab_grant_buf *b = buf_at(g, off);
	const _Atomic uint64_t *map;
	uint64_t end, first, last, n;

	if (!b || __builtin_add_overflow(off, len ? len : 1, &end) ||
	    end > b->end || !slice_covers(g, &rd->t, b, off, end - off))
		return 0;
	first = (off - b->offset) / b->item_len;
	last = (end - 1 - b->offset) / b->item_len;
	if (b->aux == RTAB_GRANT_STATE) {
		map = g->state_owner + g->state_base[b->reserved0];
		n = g->state_rows[b->reserved0];
	} else {
		map = b->aux ? g->aux_owner : g->page_owner;
		n = b->aux ? g->naux : g->npages;
	}
	for (uint64_t p = first; p <= last; p++)
		if (p >= n || atomic_load_explicit(&map[p],
						   memory_order_acquire) !=
				      rd->want)
			return 0;
	return 1;
}

int rtab_grant_still(const struct rtab_grant *g,
		     const struct rtab_grant_read *rd)
{
	/* After the acquire loads of the record and the pages (see
	 * write_begin). */
	return atomic_load_explicit(&g->rooms[rd->slot].seq,
				    memory_order_acquire) == rd->seq;
}
