/*
 * test_rtab_grant.c - the decode's destination grants on real files in
 * /dev/shm: a copy is accepted only inside pages (or the aux slot) granted
 * to its incarnation, up to the last byte of a granted page and not one
 * byte further; a copy straddling a granted and an ungranted page, or two
 * buffers, is refused; another token is "not live"; a withdrawn (cleared)
 * grant refuses its late batch; a slot reused under a new generation
 * grants only the new incarnation; a page given to another room is that
 * room's; bad arguments change nothing; files that are not grants are
 * refused; rooms of thousands of pages are checked page by page; and a
 * reader in another process, racing the writer 200,000 times, never acts
 * on half of a grant. Per target (issue 29 item 3): a PP stage's token
 * writes only its layers, a TP head slice only its bytes of each token
 * slot (one slot per copy; in vLLM's block-major pages, in each of a
 * block's K and V slots), whole-slot targets (no TP mismatch, MLA's KV,
 * AUX) are not narrowed, a token of no target is not live, and rooms of
 * one topology share one run of the slice table.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/kvw.h"
#include "table/rtab_grant.h"

#define ITEM 256u
#define PAGES 256u
#define AUX_SLOTS 8u
#define AUX_ITEM 32u
#define SLOTS 16u

static char path[128];

/* Two layers of K and V (64 pages of 256 bytes each, back to back from
 * byte 4096), then an AUX buffer of 8 slots of 32 bytes. Listed out of
 * offset order on purpose: the grant sorts them. */
static const struct kvw_buf bufs[] = {
	{ .layer_id = 1, .role = KVW_ROLE_V, .offset = 4096 + 3 * ITEM * PAGES,
	  .item_len = ITEM, .pages = PAGES },
	{ .layer_id = 0, .role = KVW_ROLE_K, .offset = 4096,
	  .item_len = ITEM, .pages = PAGES },
	{ .layer_id = 1, .role = KVW_ROLE_K, .offset = 4096 + ITEM * PAGES,
	  .item_len = ITEM, .pages = PAGES },
	{ .layer_id = 0, .role = KVW_ROLE_V, .offset = 4096 + 2 * ITEM * PAGES,
	  .item_len = ITEM, .pages = PAGES },
	{ .role = KVW_ROLE_AUX, .offset = 4096 + 4 * ITEM * PAGES,
	  .item_len = AUX_ITEM, .pages = AUX_SLOTS },
};
#define NBUFS (sizeof bufs / sizeof bufs[0])
#define AUX_BASE (4096u + 4 * ITEM * PAGES)

/* Byte offset of page p of buffer k (in the order above). */
static uint64_t at(unsigned k, uint32_t p)
{
	return bufs[k].offset + (uint64_t)p * bufs[k].item_len;
}

static int fresh(void **state)
{
	static unsigned n;

	(void)state;
	snprintf(path, sizeof path, "/dev/shm/kvwire.tgrant-%d-%u.grant",
		 (int)getpid(), n++);
	return 0;
}

static pid_t race_pid; /* the race's reader while it may run */

static int gone(void **state)
{
	(void)state;
	/* A failed assertion left the race's reader spinning: end it. */
	if (race_pid > 0) {
		kill(race_pid, SIGKILL);
		waitpid(race_pid, NULL, 0);
		race_pid = 0;
	}
	unlink(path);
	return 0;
}

static struct rtab_grant *make(void)
{
	struct rtab_grant *g = NULL;
	char err[160];

	assert_int_equal(rtab_grant_create(path, SLOTS, bufs, NBUFS, NULL, &g, err,
					   sizeof err), 0);
	assert_int_equal(rtab_grant_slots(g), SLOTS);
	assert_int_equal(rtab_grant_pages(g), PAGES);
	return g;
}

/* 1 when a batch of incarnation ref carrying inc with the one copy
 * [off, off + len) may be written; 0 when refused for its destination;
 * -1 when not live. */
static int check(const struct rtab_grant *g, struct rtab_ref ref,
		 uint64_t inc, uint64_t off, uint64_t len)
{
	struct rtab_grant_read rd;
	int ok;

	/* inc is the room's base token: the batch carries its one target's. */
	if (rtab_grant_begin(g, ref, inc ? rtab_grant_token(g, inc, 0) : 0,
			     &rd) != RTAB_GRANT_OK)
		return -1;
	ok = rtab_grant_covers(g, &rd, off, len);
	return rtab_grant_still(g, &rd) ? ok : -1;
}

static void test_copies_inside_granted_pages_pass_up_to_the_last_byte(void **state)
{
	struct rtab_grant *g = make(), *r;
	struct rtab_ref a = { 3, 1 };
	const uint32_t pages[] = { 7, 8, 20 };
	char err[160];

	(void)state;
	assert_int_equal(rtab_grant_give(g, a, 0xabc, pages, 3, 5), 0);
	/* The sink's read-only mapping sees the writer's grant. */
	assert_int_equal(rtab_grant_open(path, &r, err, sizeof err), 0);
	for (unsigned k = 0; k < 4; k++) { /* every K and V buffer */
		assert_int_equal(check(r, a, 0xabc, at(k, 7), ITEM), 1);
		assert_int_equal(check(r, a, 0xabc, at(k, 7), 2 * ITEM), 1);
		assert_int_equal(check(r, a, 0xabc, at(k, 8) + ITEM - 1, 1), 1);
		assert_int_equal(check(r, a, 0xabc, at(k, 20) + 17, 100), 1);
		/* One byte before the first granted page, one past the last. */
		assert_int_equal(check(r, a, 0xabc, at(k, 7) - 1, 1), 0);
		assert_int_equal(check(r, a, 0xabc, at(k, 9), 1), 0);
		assert_int_equal(check(r, a, 0xabc, at(k, 0), ITEM), 0);
	}
	/* The aux slot granted, and no other. */
	assert_int_equal(check(r, a, 0xabc, AUX_BASE + 5 * AUX_ITEM, AUX_ITEM), 1);
	assert_int_equal(check(r, a, 0xabc, AUX_BASE + 4 * AUX_ITEM, AUX_ITEM), 0);
	assert_int_equal(check(r, a, 0xabc, AUX_BASE + 5 * AUX_ITEM, AUX_ITEM + 1),
			 0);
	/* Incarnation 0 and the bare base token are no target's. */
	assert_int_equal(check(r, a, 0, at(0, 7), ITEM), -1);
	assert_int_equal(rtab_grant_begin(r, a, 0xabc, &(struct rtab_grant_read){
					  0 }), RTAB_GRANT_NOT_LIVE);
	rtab_grant_close(&r);
	rtab_grant_close(&g);
	assert_null(g);
	rtab_grant_close(&g); /* twice: a no-op */
}

static void test_a_copy_straddling_a_granted_and_an_ungranted_page_is_refused(void **state)
{
	struct rtab_grant *g = make();
	struct rtab_ref a = { 3, 1 };
	const uint32_t pages[] = { 7, 8, PAGES - 1 };

	(void)state;
	assert_int_equal(rtab_grant_give(g, a, 5, pages, 3, RTAB_GRANT_NO_AUX),
			 0);
	/* Pages 8 and 9: the last granted byte and the first one after. */
	assert_int_equal(check(g, a, 5, at(1, 8) + ITEM - 1, 2), 0);
	/* Pages 6 and 7. */
	assert_int_equal(check(g, a, 5, at(1, 7) - 1, ITEM), 0);
	/* The last page of layer 0's K runs into layer 1's K page 0; the
	 * last of the V of layer 1 into the AUX buffer. */
	assert_int_equal(check(g, a, 5, at(1, PAGES - 1), ITEM), 1);
	assert_int_equal(check(g, a, 5, at(1, PAGES - 1), ITEM + 1), 0);
	assert_int_equal(check(g, a, 5, at(0, PAGES - 1) + 1, ITEM), 0);
	/* Outside every buffer, and ranges that wrap. */
	assert_int_equal(check(g, a, 5, 0, 16), 0);
	assert_int_equal(check(g, a, 5, AUX_BASE + AUX_SLOTS * AUX_ITEM, 1), 0);
	assert_int_equal(check(g, a, 5, at(1, 7), UINT64_MAX), 0);
	assert_int_equal(check(g, a, 5, UINT64_MAX, 2), 0);
	/* A zero length is checked as its first byte. */
	assert_int_equal(check(g, a, 5, at(1, 7), 0), 1);
	assert_int_equal(check(g, a, 5, at(1, 9), 0), 0);
	/* No aux slot was granted. */
	assert_int_equal(check(g, a, 5, AUX_BASE, 1), 0);
	rtab_grant_close(&g);
}

static void test_another_token_or_incarnation_is_not_live(void **state)
{
	struct rtab_grant *g = make();
	struct rtab_ref a = { 3, 4 }, older = { 3, 3 }, other = { 4, 4 };
	const uint32_t pages[] = { 1 };

	(void)state;
	assert_int_equal(check(g, a, 7, at(0, 1), 1), -1); /* nothing yet */
	assert_int_equal(rtab_grant_give(g, a, 7, pages, 1, RTAB_GRANT_NO_AUX),
			 0);
	assert_int_equal(check(g, a, 7, at(0, 1), 1), 1);
	assert_int_equal(check(g, a, 8, at(0, 1), 1), -1);
	assert_int_equal(check(g, older, 0, at(0, 1), 1), -1);
	assert_int_equal(check(g, other, 0, at(0, 1), 1), -1);
	assert_int_equal(check(g, (struct rtab_ref){ SLOTS, 4 }, 0, at(0, 1), 1),
			 -1);
	assert_int_equal(check(g, (struct rtab_ref){ 3, 0 }, 0, at(0, 1), 1),
			 -1);
	rtab_grant_close(&g);
}

static void test_a_cleared_rooms_grant_refuses_its_late_batch(void **state)
{
	struct rtab_grant *g = make();
	struct rtab_ref a = { 2, 1 };
	const uint32_t pages[] = { 10, 11 };

	(void)state;
	assert_int_equal(rtab_grant_give(g, a, 99, pages, 2, 1), 0);
	assert_int_equal(check(g, a, 99, at(2, 10), 2 * ITEM), 1);
	assert_int_equal(rtab_grant_withdraw(g, a, pages, 2, 1), 1);
	/* The late batch: no record, and with a stale record its pages and
	 * aux slot would be nobody's. */
	assert_int_equal(check(g, a, 99, at(2, 10), 2 * ITEM), -1);
	assert_int_equal(check(g, a, 0, at(2, 10), 1), -1);
	assert_int_equal(rtab_grant_give(g, (struct rtab_ref){ 9, 1 }, 1, NULL,
					 0, RTAB_GRANT_NO_AUX), 0);
	assert_int_equal(check(g, (struct rtab_ref){ 9, 1 }, 1, at(2, 10), 1), 0);
	assert_int_equal(check(g, (struct rtab_ref){ 9, 1 }, 1, AUX_BASE +
			       AUX_ITEM, 1), 0);
	/* Withdrawing twice, or another incarnation's, changes nothing. */
	assert_int_equal(rtab_grant_withdraw(g, a, pages, 2, 1), 0);
	assert_int_equal(rtab_grant_withdraw(g, (struct rtab_ref){ 9, 2 }, NULL,
					     0, RTAB_GRANT_NO_AUX), 0);
	assert_int_equal(check(g, (struct rtab_ref){ 9, 1 }, 1, at(2, 10), 0), 0);
	rtab_grant_close(&g);
}

static void test_a_reused_slot_grants_only_its_new_generation(void **state)
{
	struct rtab_grant *g = make();
	struct rtab_ref old = { 5, 1 }, cur = { 5, 2 };
	const uint32_t p1[] = { 1, 2 }, p2[] = { 2, 3 };

	(void)state;
	assert_int_equal(rtab_grant_give(g, old, 0xa, p1, 2, RTAB_GRANT_NO_AUX),
			 0);
	assert_int_equal(rtab_grant_withdraw(g, old, p1, 2, RTAB_GRANT_NO_AUX), 1);
	assert_int_equal(rtab_grant_give(g, cur, 0xb, p2, 2, RTAB_GRANT_NO_AUX),
			 0);
	assert_int_equal(check(g, old, 0xa, at(0, 2), 1), -1);
	assert_int_equal(check(g, old, 0, at(0, 2), 1), -1);
	assert_int_equal(check(g, cur, 0xa, at(0, 2), 1), -1); /* old token */
	assert_int_equal(check(g, cur, 0xb, at(0, 2), 2 * ITEM), 1);
	assert_int_equal(check(g, cur, 0xb, at(0, 1), 1), 0); /* old page */
	/* Re-granted without a withdrawal (a receiver that missed it): the
	 * new record replaces the old one all the same. */
	assert_int_equal(rtab_grant_give(g, (struct rtab_ref){ 5, 3 }, 0xc, p1,
					 2, RTAB_GRANT_NO_AUX), 0);
	assert_int_equal(check(g, cur, 0xb, at(0, 3), 1), -1);
	assert_int_equal(check(g, (struct rtab_ref){ 5, 3 }, 0xc, at(0, 1),
			       2 * ITEM), 1);
	rtab_grant_close(&g);
}

static void test_a_page_given_to_another_room_is_that_rooms(void **state)
{
	struct rtab_grant *g = make();
	struct rtab_ref a = { 1, 1 }, b = { 2, 1 };
	const uint32_t pa[] = { 4, 5 }, pb[] = { 5 };

	(void)state;
	assert_int_equal(rtab_grant_give(g, a, 1, pa, 2, RTAB_GRANT_NO_AUX), 0);
	assert_int_equal(rtab_grant_give(g, b, 2, pb, 1, RTAB_GRANT_NO_AUX), 0);
	assert_int_equal(check(g, a, 1, at(0, 4), ITEM), 1);
	assert_int_equal(check(g, a, 1, at(0, 5), ITEM), 0);
	assert_int_equal(check(g, b, 2, at(0, 5), ITEM), 1);
	/* a's withdrawal frees page 4 and leaves b's page 5 alone. */
	assert_int_equal(rtab_grant_withdraw(g, a, pa, 2, RTAB_GRANT_NO_AUX), 1);
	assert_int_equal(check(g, b, 2, at(3, 5), ITEM), 1);
	rtab_grant_close(&g);
}

static void test_bad_grants_change_nothing(void **state)
{
	struct rtab_grant *g = make(), *r;
	struct rtab_ref a = { 3, 1 };
	const uint32_t good[] = { 1 }, bad[] = { 2, PAGES };
	char err[160];

	(void)state;
	assert_int_equal(rtab_grant_give(g, a, 1, good, 1, RTAB_GRANT_NO_AUX), 0);
	assert_int_equal(rtab_grant_give(g, a, 2, bad, 2, RTAB_GRANT_NO_AUX),
			 KVW_ERANGE);
	assert_int_equal(rtab_grant_give(g, a, 2, good, 1, AUX_SLOTS),
			 KVW_ERANGE);
	assert_int_equal(rtab_grant_give(g, a, 0, good, 1, RTAB_GRANT_NO_AUX),
			 KVW_EINVAL);
	assert_int_equal(rtab_grant_give(g, (struct rtab_ref){ 3, 0 }, 2, good,
					 1, RTAB_GRANT_NO_AUX), KVW_EINVAL);
	assert_int_equal(rtab_grant_give(g, (struct rtab_ref){ SLOTS, 1 }, 2,
					 good, 1, RTAB_GRANT_NO_AUX), KVW_EINVAL);
	/* The first grant stands, page 2 was not taken. */
	assert_int_equal(check(g, a, 1, at(0, 1), ITEM), 1);
	assert_int_equal(check(g, a, 1, at(0, 2), 1), 0);
	/* A sink's mapping cannot grant. */
	assert_int_equal(rtab_grant_open(path, &r, err, sizeof err), 0);
	assert_int_equal(rtab_grant_give(r, a, 1, good, 1, RTAB_GRANT_NO_AUX),
			 KVW_EINVAL);
	assert_int_equal(rtab_grant_withdraw(r, a, good, 1, RTAB_GRANT_NO_AUX), 0);
	assert_int_equal(check(g, a, 1, at(0, 1), ITEM), 1);
	rtab_grant_close(&r);
	rtab_grant_close(&g);
}

static void test_files_and_layouts_that_are_not_grants_are_refused(void **state)
{
	struct rtab_grant *g = (struct rtab_grant *)&g;
	struct kvw_buf overlap[2] = { bufs[1], bufs[1] };
	char err[160];
	FILE *fp;

	(void)state;
	overlap[1].offset += ITEM; /* starts inside the first */
	overlap[1].layer_id = 7;
	assert_int_equal(rtab_grant_create(path, SLOTS, overlap, 2, NULL, &g, err,
					   sizeof err), KVW_EINVAL);
	assert_null(g);
	assert_int_equal(rtab_grant_create(path, 0, bufs, NBUFS, NULL, &g, err,
					   sizeof err), KVW_EINVAL);
	assert_int_equal(rtab_grant_open(path, &g, err, sizeof err), KVW_ENOENT);
	fp = fopen(path, "w");
	assert_non_null(fp);
	fputs("not a grant file, not even close to one; long enough to be "
	      "read as a header of sixty-four bytes", fp);
	fclose(fp);
	assert_int_equal(rtab_grant_open(path, &g, err, sizeof err), KVW_EVERSION);
	assert_non_null(strstr(err, "not a kvwire grant"));
	/* A real one cut short is refused too; a new one replaces it. */
	g = make();
	rtab_grant_close(&g);
	assert_int_equal(truncate(path, 4096), 0);
	assert_int_equal(rtab_grant_open(path, &g, err, sizeof err), KVW_EVERSION);
	g = make();
	rtab_grant_close(&g);
	assert_int_equal(rtab_grant_open(path, &g, err, sizeof err), 0);
	rtab_grant_close(&g);
}

/* Rooms of thousands of pages: one copy over all 5,000 pages of a room
 * passes, one byte into the next room's first page does not; after the
 * first room is withdrawn its pages go to a third room whole. */
static void test_rooms_of_thousands_of_pages(void **state)
{
	static const struct kvw_buf big[] = {
		{ .role = KVW_ROLE_KV, .offset = 0, .item_len = 64,
		  .pages = 8192 },
	};
	static uint32_t pa[5000], pb[3192];
	struct rtab_grant *g = NULL;
	struct rtab_ref a = { 1, 1 }, b = { 2, 1 }, c = { 3, 1 };
	char err[160];

	(void)state;
	for (uint32_t i = 0; i < 5000; i++)
		pa[i] = i;
	for (uint32_t i = 0; i < 3192; i++)
		pb[i] = 5000 + i;
	assert_int_equal(rtab_grant_create(path, SLOTS, big, 1, NULL, &g, err,
					   sizeof err), 0);
	assert_int_equal(rtab_grant_pages(g), 8192);
	assert_int_equal(rtab_grant_give(g, a, 1, pa, 5000, RTAB_GRANT_NO_AUX), 0);
	assert_int_equal(rtab_grant_give(g, b, 2, pb, 3192, RTAB_GRANT_NO_AUX), 0);
	assert_int_equal(check(g, a, 1, 0, 5000 * 64), 1);
	assert_int_equal(check(g, a, 1, 0, 5000 * 64 + 1), 0);
	assert_int_equal(check(g, b, 2, 5000 * 64, 3192 * 64), 1);
	assert_int_equal(check(g, b, 2, 5000 * 64 - 1, 2), 0);
	assert_int_equal(rtab_grant_withdraw(g, a, pa, 5000, RTAB_GRANT_NO_AUX), 1);
	assert_int_equal(rtab_grant_give(g, c, 3, pa, 5000, RTAB_GRANT_NO_AUX), 0);
	assert_int_equal(check(g, c, 3, 0, 5000 * 64), 1);
	assert_int_equal(check(g, a, 1, 0, 64), -1);
	rtab_grant_close(&g);
}

/* The race: the writer grants slot 7 to generation n = 1 + i % 4 with
 * token 0x100 + n and the RACE_PAGES pages from RACE_PAGES * n,
 * withdrawing the last one first, back to back; every RACE_HOLD rounds it
 * holds a grant until the reader has kept a view of it (a handshake
 * through shared memory, so a kept view exists however loaded the machine
 * is). A reader in another process checks every (generation, token) pair
 * against its own pages and one of the next generation's until the writer
 * is done. A view it keeps (begin OK and still unchanged) must be whole:
 * the right token, all its pages covered, none of the others. */
#define RACE_PAGES 32u
#define RACE_ROUNDS 200000u
#define RACE_HOLD 1000u

struct race {
	_Atomic uint32_t kept; /* whole views the reader kept */
	_Atomic uint32_t done; /* the writer finished */
};

static void race_pages(uint32_t n, uint32_t *p)
{
	for (uint32_t i = 0; i < RACE_PAGES; i++)
		p[i] = RACE_PAGES * n + i;
}

/* Child: 0 when every kept view was whole, 1 on a torn view, 3 when it
 * cannot map the file. */
static int race_reader(struct race *sh)
{
	struct rtab_grant *g;
	char err[160];

	if (rtab_grant_open(path, &g, err, sizeof err) != 0)
		return 3;
	for (uint32_t i = 0; !atomic_load(&sh->done); i++) {
		uint32_t n = 1 + i % 4, tok = 0x100 + 1 + (i / 4) % 4;
		struct rtab_ref ref = { 7, n };
		struct rtab_grant_read rd;
		int mine = 0, theirs;

		if (rtab_grant_begin(g, ref, rtab_grant_token(g, tok, 0), &rd) !=
		    RTAB_GRANT_OK)
			continue;
		for (uint32_t p = 0; p < RACE_PAGES; p++)
			mine += rtab_grant_covers(g, &rd,
						  at(0, RACE_PAGES * n + p), ITEM);
		theirs = rtab_grant_covers(g, &rd,
					   at(0, RACE_PAGES * (n % 4 + 1)), 1);
		if (!rtab_grant_still(g, &rd))
			continue;
		if (tok != 0x100 + n || mine != (int)RACE_PAGES || theirs)
			return 1;
		atomic_fetch_add(&sh->kept, 1);
	}
	rtab_grant_close(&g);
	return 0;
}

static void test_a_reader_process_never_sees_a_torn_grant(void **state)
{
	struct rtab_grant *g = make();
	struct race *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	uint32_t p[RACE_PAGES], last[RACE_PAGES], n = 0, holds = 0;
	pid_t pid;
	int st = -1, gone_early = 0;

	(void)state;
	assert_true(sh != MAP_FAILED);
	atomic_store(&sh->kept, 0);
	atomic_store(&sh->done, 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(race_reader(sh));
	race_pid = pid;
	for (uint32_t i = 0; i < RACE_ROUNDS && !gone_early; i++) {
		uint32_t next = 1 + i % 4;

		if (n)
			assert_int_equal(rtab_grant_withdraw(
				g, (struct rtab_ref){ 7, n }, last, RACE_PAGES,
				RTAB_GRANT_NO_AUX), 1);
		race_pages(next, p);
		assert_int_equal(rtab_grant_give(g, (struct rtab_ref){ 7, next },
						 0x100 + next, p, RACE_PAGES,
						 RTAB_GRANT_NO_AUX), 0);
		memcpy(last, p, sizeof p);
		n = next;
		if (i % RACE_HOLD == 0) {
			uint32_t k = atomic_load(&sh->kept);

			while (atomic_load(&sh->kept) == k && !gone_early) {
				gone_early = waitpid(pid, &st, WNOHANG) == pid;
				sched_yield();
			}
			holds++;
		}
	}
	atomic_store(&sh->done, 1);
	if (!gone_early)
		assert_int_equal(waitpid(pid, &st, 0), pid);
	race_pid = 0;
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_false(gone_early);
	assert_true(atomic_load(&sh->kept) >= holds);
	munmap(sh, sizeof *sh);
	rtab_grant_close(&g);
}

/* Layer 0's K/V pages are stage 0's, layer 1's stage 1's (PP 2 -> 1);
 * both write the aux slot. Each stage's token writes its own layer whole
 * and nothing of the other's. */
static void test_a_pp_stage_writes_only_its_layers(void **state)
{
	struct rtab_grant *g = make();
	struct rtab_ref a = { 3, 1 };
	const uint32_t pages[] = { 7 };
	const struct rtab_grant_target tg[2] = {
		{ .layer_first = 0, .layer_count = 1,
		  .flags = RTAB_GRANT_T_AUX },
		{ .layer_first = 1, .layer_count = 1,
		  .flags = RTAB_GRANT_T_AUX },
	};
	struct rtab_grant_read rd;
	uint64_t t0, t1;

	(void)state;
	assert_int_equal(rtab_grant_give_targets(g, a, 0x5a, tg, 2, pages, 1,
						 2), 0);
	t0 = rtab_grant_token(g, 0x5a, 0);
	t1 = rtab_grant_token(g, 0x5a, 1);
	assert_int_equal(rtab_grant_begin(g, a, t0, &rd), RTAB_GRANT_OK);
	assert_int_equal(rd.target, 0);
	assert_int_equal(rtab_grant_covers(g, &rd, at(1, 7), ITEM), 1); /* K0 */
	assert_int_equal(rtab_grant_covers(g, &rd, at(3, 7), ITEM), 1); /* V0 */
	assert_int_equal(rtab_grant_covers(g, &rd, at(2, 7), ITEM), 0); /* K1 */
	assert_int_equal(rtab_grant_covers(g, &rd, at(0, 7), 1), 0);    /* V1 */
	assert_int_equal(rtab_grant_covers(g, &rd, AUX_BASE + 2 * AUX_ITEM,
					   AUX_ITEM), 1);
	assert_int_equal(rtab_grant_still(g, &rd), 1);
	assert_int_equal(rtab_grant_begin(g, a, t1, &rd), RTAB_GRANT_OK);
	assert_int_equal(rd.target, 1);
	assert_int_equal(rtab_grant_covers(g, &rd, at(2, 7), ITEM), 1);
	assert_int_equal(rtab_grant_covers(g, &rd, at(0, 7), ITEM), 1);
	assert_int_equal(rtab_grant_covers(g, &rd, at(1, 7), 1), 0);
	assert_int_equal(rtab_grant_covers(g, &rd, AUX_BASE + 2 * AUX_ITEM,
					   AUX_ITEM), 1);
	/* A target without the aux slot (a dummy) writes none of it. */
	assert_int_equal(rtab_grant_give_targets(
		g, a, 0x5b, (struct rtab_grant_target[]){ { 0 } }, 1, pages,
		1, 2), 0);
	assert_int_equal(check(g, a, 0x5b, AUX_BASE + 2 * AUX_ITEM, 1), 0);
	assert_int_equal(check(g, a, 0x5b, at(1, 7), 1), 0);
	rtab_grant_close(&g);
}

/* TP 4 -> 2: ITEM 256 = 4 token slots of 64 bytes; rank 0 writes bytes
 * [0, 32) of each slot, rank 1 [32, 64). */
static void test_a_tp_rank_writes_only_its_head_slice(void **state)
{
	struct rtab_grant *g = make();
	struct rtab_ref a = { 3, 1 };
	const uint32_t pages[] = { 7 };
	const struct rtab_grant_target tg[3] = {
		{ .layer_count = 2, .slot_len = 64, .slice_off = 0,
		  .slice_len = 32, .flags = RTAB_GRANT_T_AUX },
		{ .layer_count = 2, .slot_len = 64, .slice_off = 32,
		  .slice_len = 32, .flags = RTAB_GRANT_T_AUX },
		/* A slice that is the whole slot (TP 2 -> 4): no slice. */
		{ .layer_count = 2, .slot_len = 64, .slice_off = 0,
		  .slice_len = 64, .flags = RTAB_GRANT_T_AUX },
	};
	struct rtab_grant_read r0, r1, r2;

	(void)state;
	assert_int_equal(rtab_grant_give_targets(g, a, 0x6a, tg, 3, pages, 1,
						 RTAB_GRANT_NO_AUX), 0);
	assert_int_equal(rtab_grant_begin(g, a, rtab_grant_token(g, 0x6a, 0),
					  &r0), RTAB_GRANT_OK);
	assert_int_equal(rtab_grant_begin(g, a, rtab_grant_token(g, 0x6a, 1),
					  &r1), RTAB_GRANT_OK);
	assert_int_equal(rtab_grant_begin(g, a, rtab_grant_token(g, 0x6a, 2),
					  &r2), RTAB_GRANT_OK);
	for (uint32_t slot = 0; slot < 4; slot++) {
		uint64_t o = at(1, 7) + 64 * slot;

		assert_int_equal(rtab_grant_covers(g, &r0, o, 32), 1);
		assert_int_equal(rtab_grant_covers(g, &r0, o + 31, 1), 1);
		assert_int_equal(rtab_grant_covers(g, &r0, o + 32, 32), 0);
		assert_int_equal(rtab_grant_covers(g, &r0, o + 16, 32), 0);
		assert_int_equal(rtab_grant_covers(g, &r1, o + 32, 32), 1);
		assert_int_equal(rtab_grant_covers(g, &r1, o, 32), 0);
		assert_int_equal(rtab_grant_covers(g, &r1, o + 31, 2), 0);
		assert_int_equal(rtab_grant_covers(g, &r2, o, 64), 1);
	}
	/* One copy over two slots lies in neither rank's slice; the whole
	 * page is the whole-slot target's. */
	assert_int_equal(rtab_grant_covers(g, &r0, at(1, 7), 96), 0);
	assert_int_equal(rtab_grant_covers(g, &r1, at(1, 7) + 32, 64), 0);
	assert_int_equal(rtab_grant_covers(g, &r2, at(1, 7), ITEM), 1);
	/* The other rank's pages are still checked (page 8 is not granted). */
	assert_int_equal(rtab_grant_covers(g, &r0, at(1, 8), 32), 0);
	rtab_grant_close(&g);
}

/* MLA's latent KV buffer is never head-sliced: a target with a slice
 * writes whole pages of it (the planner sends page copies). */
static void test_whole_slot_buffers_are_not_sliced(void **state)
{
	static const struct kvw_buf mla[] = {
		{ .layer_id = 0, .role = KVW_ROLE_KV, .offset = 0,
		  .item_len = 256, .pages = 16 },
		{ .layer_id = 0, .role = KVW_ROLE_AUX, .offset = 4096,
		  .item_len = 32, .pages = 4 },
	};
	const struct rtab_grant_target tg = {
		.layer_count = 1, .slot_len = 64, .slice_off = 32,
		.slice_len = 32, .flags = RTAB_GRANT_T_AUX
	};
	const uint32_t pages[] = { 2, 3 };
	struct rtab_grant *g = NULL;
	struct rtab_ref a = { 1, 1 };
	char err[160];

	(void)state;
	assert_int_equal(rtab_grant_create(path, SLOTS, mla, 2, NULL, &g, err,
					   sizeof err), 0);
	assert_int_equal(rtab_grant_give_targets(g, a, 0x7a, &tg, 1, pages, 2,
						 1), 0);
	assert_int_equal(check(g, a, 0x7a, 2 * 256, 2 * 256), 1);
	assert_int_equal(check(g, a, 0x7a, 4096 + 32, 32), 1);
	assert_int_equal(check(g, a, 0x7a, 4 * 256, 1), 0);
	rtab_grant_close(&g);
}

/* vLLM's block-major layer (role KVB): a page is a block's K token slots
 * then its V slots, and a TP rank's head slice is checked in every one of
 * them, the V half's as the K half's: its heads pass, the other rank's
 * bytes of each slot and a copy across two slots do not. */
static void test_a_block_major_page_is_sliced_in_every_slot(void **state)
{
	static const struct kvw_buf blk[] = {
		{ .layer_id = 0, .role = KVW_ROLE_KVB, .offset = 0,
		  .item_len = 512, .pages = 16 }, /* 2 x 4 slots of 64 */
	};
	const struct rtab_grant_target tg = {
		.layer_count = 1, .slot_len = 64, .slice_off = 32,
		.slice_len = 32, .flags = 0
	};
	const uint32_t pages[] = { 5 };
	struct rtab_grant *g = NULL;
	struct rtab_ref a = { 2, 1 };
	char err[160];

	(void)state;
	assert_int_equal(rtab_grant_create(path, SLOTS, blk, 1, NULL, &g, err,
					   sizeof err), 0);
	assert_int_equal(rtab_grant_give_targets(g, a, 0x5a, &tg, 1, pages, 1,
						 RTAB_GRANT_NO_AUX), 0);
	for (uint32_t slot = 0; slot < 8; slot++) {
		uint64_t o = 5 * 512 + 64 * slot;

		assert_int_equal(check(g, a, 0x5a, o + 32, 32), 1);
		assert_int_equal(check(g, a, 0x5a, o, 32), 0);
		assert_int_equal(check(g, a, 0x5a, o + 32, 64), 0);
	}
	assert_int_equal(check(g, a, 0x5a, 5 * 512, 512), 0);
	rtab_grant_close(&g);
}

/* A token of no target: an index past the room's targets, another
 * room's base, a flipped bit, 0. */
static void test_a_token_of_no_target_is_not_live(void **state)
{
	struct rtab_grant *g = make();
	struct rtab_ref a = { 3, 1 };
	const uint32_t pages[] = { 7 };
	const struct rtab_grant_target tg[2] = { rtab_grant_whole(),
						 rtab_grant_whole() };
	struct rtab_grant_read rd;
	uint64_t t1;

	(void)state;
	assert_int_equal(rtab_grant_give_targets(g, a, 0x8a, tg, 2, pages, 1,
						 RTAB_GRANT_NO_AUX), 0);
	t1 = rtab_grant_token(g, 0x8a, 1);
	assert_true(t1 != rtab_grant_token(g, 0x8a, 0));
	assert_true(t1 != rtab_grant_token(g, 0x8b, 1));
	assert_int_equal((unsigned)(t1 & 0xff), 1);
	assert_int_equal(rtab_grant_begin(g, a, t1, &rd), RTAB_GRANT_OK);
	assert_int_equal(rtab_grant_begin(g, a, rtab_grant_token(g, 0x8a, 2),
					  &rd), RTAB_GRANT_NOT_LIVE);
	assert_int_equal(rtab_grant_begin(g, a, rtab_grant_token(g, 0x8b, 1),
					  &rd), RTAB_GRANT_NOT_LIVE);
	assert_int_equal(rtab_grant_begin(g, a, t1 ^ 0x100, &rd),
			 RTAB_GRANT_NOT_LIVE);
	assert_int_equal(rtab_grant_begin(g, a, 0, &rd), RTAB_GRANT_NOT_LIVE);
	/* Another grant file has another key: the same base, other tokens. */
	{
		struct rtab_grant *h = NULL;
		char err[160], p2[160];

		snprintf(p2, sizeof p2, "%s.2", path);
		assert_int_equal(rtab_grant_create(p2, SLOTS, bufs, NBUFS, NULL, &h,
						   err, sizeof err), 0);
		assert_true(rtab_grant_token(h, 0x8a, 1) != t1);
		rtab_grant_close(&h);
		unlink(p2);
	}
	/* Bad target lists change nothing. */
	assert_int_equal(rtab_grant_give_targets(g, a, 0x8c, tg, 0, pages, 1,
						 RTAB_GRANT_NO_AUX), KVW_EINVAL);
	assert_int_equal(rtab_grant_give_targets(g, a, 0x8c, NULL, 1, pages, 1,
						 RTAB_GRANT_NO_AUX), KVW_EINVAL);
	assert_int_equal(rtab_grant_give_targets(g, a, 0x8c, tg,
						 RTAB_GRANT_MAX_TARGETS + 1,
						 pages, 1, RTAB_GRANT_NO_AUX),
			 KVW_EINVAL);
	assert_int_equal(rtab_grant_begin(g, a, t1, &rd), RTAB_GRANT_OK);
	rtab_grant_close(&g);
}

/* Rooms of one topology share their run of slices: 10,000 grants of the
 * same two targets fit a table of RTAB_GRANT_SLICES entries; distinct
 * runs fill it, and then a grant is refused with nothing changed. */
static void test_rooms_of_one_topology_share_their_slices(void **state)
{
	struct rtab_grant *g = make();
	const uint32_t pages[] = { 7 };
	struct rtab_grant_target tg[2] = { rtab_grant_whole(),
					   rtab_grant_whole() };
	uint32_t i;
	int rc = 0;

	(void)state;
	tg[1].layer_first = 1;
	for (i = 0; i < 10000; i++)
		assert_int_equal(rtab_grant_give_targets(
			g, (struct rtab_ref){ i % SLOTS, 1 + i / SLOTS }, 9, tg,
			2, pages, 1, RTAB_GRANT_NO_AUX), 0);
	for (i = 0; rc == 0 && i < 2 * RTAB_GRANT_SLICES; i++) {
		tg[0].layer_first = 100 + i;
		rc = rtab_grant_give_targets(g, (struct rtab_ref){ 1, 1 }, 9,
					     tg, 2, pages, 1,
					     RTAB_GRANT_NO_AUX);
	}
	assert_int_equal(rc, KVW_ERANGE);
	assert_true(i >= RTAB_GRANT_SLICES / 2 - 1);
	/* The last grant that fitted stands: its target 1 writes layer 1,
	 * its target 0 (layers from 100 on) nothing here. */
	{
		struct rtab_grant_read rd;
		struct rtab_ref r = { 1, 1 };

		assert_int_equal(rtab_grant_begin(g, r,
						  rtab_grant_token(g, 9, 1),
						  &rd), RTAB_GRANT_OK);
		assert_int_equal(rtab_grant_covers(g, &rd, at(0, 7), 1), 1);
		assert_int_equal(check(g, r, 9, at(0, 7), 1), 0);
	}
	rtab_grant_close(&g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_copies_inside_granted_pages_pass_up_to_the_last_byte, fresh, gone),
		cmocka_unit_test_setup_teardown(test_a_copy_straddling_a_granted_and_an_ungranted_page_is_refused, fresh, gone),
		cmocka_unit_test_setup_teardown(test_another_token_or_incarnation_is_not_live, fresh, gone),
		cmocka_unit_test_setup_teardown(test_a_cleared_rooms_grant_refuses_its_late_batch, fresh, gone),
		cmocka_unit_test_setup_teardown(test_a_reused_slot_grants_only_its_new_generation, fresh, gone),
		cmocka_unit_test_setup_teardown(test_a_page_given_to_another_room_is_that_rooms, fresh, gone),
		cmocka_unit_test_setup_teardown(test_bad_grants_change_nothing, fresh, gone),
		cmocka_unit_test_setup_teardown(test_files_and_layouts_that_are_not_grants_are_refused, fresh, gone),
		cmocka_unit_test_setup_teardown(test_rooms_of_thousands_of_pages, fresh, gone),
		cmocka_unit_test_setup_teardown(test_a_pp_stage_writes_only_its_layers, fresh, gone),
		cmocka_unit_test_setup_teardown(test_a_tp_rank_writes_only_its_head_slice, fresh, gone),
		cmocka_unit_test_setup_teardown(test_whole_slot_buffers_are_not_sliced, fresh, gone),
		cmocka_unit_test_setup_teardown(test_a_block_major_page_is_sliced_in_every_slot, fresh, gone),
		cmocka_unit_test_setup_teardown(test_a_token_of_no_target_is_not_live, fresh, gone),
		cmocka_unit_test_setup_teardown(test_rooms_of_one_topology_share_their_slices, fresh, gone),
		cmocka_unit_test_setup_teardown(test_a_reader_process_never_sees_a_torn_grant, fresh, gone),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
