/*
 * test_seeds.c - the checked-in fuzz seeds (tests/fuzz/corpus, written by
 * tests/fuzz/mkseeds.c through `make seeds`) still mean what they were
 * made for: every fuzz_frame seed decodes to the type its name says and
 * every frame type has one; every message of every fuzz_boot seed decodes
 * and the bootstrap answers it; every record of every fuzz_chan stream
 * decodes (but the spoiled first one of a bad_* seed); every fuzz_runinfo
 * seed parses with members; the raw fuzz_rtab table file opens with its
 * rooms and peer, and the ops program starts with an even byte; every
 * fuzz_rdma seed decodes as what its first byte picks; every record of
 * every fuzz_roles seed decodes, and together they send every frame type
 * to every handler. A seed the
 * codec refuses is a stale seed: run `make seeds`. Run from the repository
 * root (KVW_CORPUS overrides the corpus folder).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../fuzz/fuzz_input.h"
#include "plan/runinfo.h"
#include "roles/bootstrap/boot.h"
#include "table/rtab.h"
#include "wire/chan.h"
#include "wire/frame.h"
#include "xport/rdma/rdma_cm.h"
#include "xport/rdma/rdma_desc.h"

struct seed {
	char name[256];
	uint8_t *data;
	size_t len;
};

/* Every seed of a target, sorted by name; returns the count (> 0). */
static size_t load(const char *target, struct seed *out, size_t cap)
{
	const char *root = getenv("KVW_CORPUS");
	char path[512];
	struct dirent *e;
	size_t n = 0;
	DIR *d;

	snprintf(path, sizeof path, "%s/%s", root ? root : "tests/fuzz/corpus",
		 target);
	d = opendir(path);
	assert_non_null(d);
	while ((e = readdir(d)) != NULL) {
		FILE *f;
		long len;

		if (e->d_name[0] == '.')
			continue;
		assert_true(n < cap);
		snprintf(out[n].name, sizeof out[n].name, "%s", e->d_name);
		snprintf(path, sizeof path, "%s/%s/%s",
			 root ? root : "tests/fuzz/corpus", target, e->d_name);
		f = fopen(path, "rb");
		assert_non_null(f);
		assert_int_equal(fseek(f, 0, SEEK_END), 0);
		len = ftell(f);
		assert_true(len > 0);
		rewind(f);
		out[n].data = malloc((size_t)len);
		assert_non_null(out[n].data);
		assert_int_equal(fread(out[n].data, 1, (size_t)len, f), len);
		out[n].len = (size_t)len;
		fclose(f);
		n++;
	}
	closedir(d);
	assert_true(n > 0);
	return n;
}

static void unload(struct seed *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(s[i].data);
}

static void free_parts(uint8_t **mem, int n)
{
	for (int i = 0; i < n; i++)
		free(mem[i]);
}

static void every_frame_seed_decodes_to_its_type_and_every_type_has_one(
	void **state)
{
	static struct seed s[64];
	unsigned seen[FRAME_TYPE_MAX + 1] = { 0 };
	size_t n = load("fuzz_frame", s, 64);
	char err[200];

	(void)state;
	for (size_t i = 0; i < n; i++) {
		struct frame_part parts[FUZZ_NMAX];
		uint8_t *mem[FUZZ_NMAX] = { 0 };
		struct frame_msg m;
		const char *type;
		size_t off = 0;
		int k = fuzz_cut(s[i].data, s[i].len, &off, 1, parts, mem);

		err[0] = '\0';
		if (frame_decode(parts, (size_t)k, &m, err, sizeof err) != 0)
			fail_msg("fuzz_frame/%s is refused: %s", s[i].name, err);
		type = frame_type_str(m.hdr.type);
		assert_memory_equal(s[i].name, type, strlen(type));
		assert_int_equal(s[i].name[strlen(type)], '-');
		seen[m.hdr.type]++;
		free_parts(mem, k);
	}
	for (unsigned t = 1; t <= FRAME_TYPE_MAX; t++)
		if (seen[t] == 0)
			fail_msg("no fuzz_frame seed of type %s", frame_type_str(t));
	unload(s, n);
}

static void every_boot_seed_message_decodes_and_is_answered(void **state)
{
	static struct seed s[16];
	size_t n = load("fuzz_boot", s, 16);
	char err[200];

	(void)state;
	for (size_t i = 0; i < n; i++) {
		struct boot *b = boot_open(1, err, sizeof err);
		size_t off = 0;
		unsigned msgs = 0, answered = 0;
		int k;

		assert_non_null(b);
		for (;;) {
			struct frame_part parts[FUZZ_NMAX];
			uint8_t *mem[FUZZ_NMAX] = { 0 };
			struct frame_msg m, reply;

			k = fuzz_cut(s[i].data, s[i].len, &off, 0, parts, mem);
			if (k < 0)
				break;
			err[0] = '\0';
			if (frame_decode(parts, (size_t)k, &m, err, sizeof err))
				fail_msg("fuzz_boot/%s message %u is refused: %s",
					 s[i].name, msgs, err);
			answered += boot_handle(b, &m, &reply, err, sizeof err) == 0;
			msgs++;
			free_parts(mem, k);
		}
		assert_true(msgs >= 3);
		assert_int_equal(answered, msgs);
		boot_close(&b);
	}
	unload(s, n);
}

static void every_chan_seed_record_decodes(void **state)
{
	static struct seed s[16];
	size_t n = load("fuzz_chan", s, 16);
	char err[200];

	(void)state;
	for (size_t i = 0; i < n; i++) {
		int bad = strncmp(s[i].name, "bad_", 4) == 0;
		unsigned ok = 0, refused = 0;
		struct frame_msg m;
		struct chan c;
		int fds[2], rc;

		assert_int_equal(chan_pair(fds), 0);
		chan_init(&c, fds[1]);
		assert_int_equal(write(fds[0], s[i].data + 1, s[i].len - 1),
				 (ssize_t)(s[i].len - 1));
		close(fds[0]);
		while ((rc = chan_recv(&c, &m, err, sizeof err)) != KVW_ESYS) {
			assert_true(rc == 0 || rc == KVW_EINVAL ||
				    rc == KVW_EVERSION);
			ok += rc == 0;
			refused += rc != 0;
		}
		chan_close(&c);
		assert_true(ok >= 1);
		if (refused != (unsigned)bad)
			fail_msg("fuzz_chan/%s: %u records refused", s[i].name,
				 refused);
	}
	unload(s, n);
}

static void every_runinfo_seed_parses_with_members(void **state)
{
	static struct seed s[16];
	size_t n = load("fuzz_runinfo", s, 16);
	char err[256];

	(void)state;
	for (size_t i = 0; i < n; i++) {
		struct runinfo *ri = NULL;

		err[0] = '\0';
		if (runinfo_parse((const char *)s[i].data, s[i].len, &ri, err,
				  sizeof err) != 0)
			fail_msg("fuzz_runinfo/%s is refused: %s", s[i].name, err);
		assert_true(runinfo_count(ri) >= 3);
		assert_non_null(runinfo_shape(ri));
		runinfo_free(&ri);
	}
	unload(s, n);
}

static void every_rdma_seed_decodes_as_its_first_byte_says(void **state)
{
	static struct seed s[16];
	size_t n = load("fuzz_rdma", s, 16);
	unsigned kinds = 0;

	(void)state;
	for (size_t i = 0; i < n; i++) {
		const uint8_t *p = s[i].data + 1;
		size_t len = s[i].len - 1;
		struct rdma_desc d;
		struct rdma_peer peer;
		uint8_t sec[16];
		uint32_t st, qpn, psn;
		int rc;

		switch (s[i].data[0] % 3) {
		case 0: rc = rdma_desc_decode(p, len, &d, NULL, 0); break;
		case 1: rc = rcm_hello_decode(p, len, sec, &peer); break;
		default: rc = rcm_reply_decode(p, len, &st, &qpn, &psn); break;
		}
		if (rc != 0)
			fail_msg("fuzz_rdma/%s is refused (%d)", s[i].name, rc);
		kinds |= 1u << (s[i].data[0] % 3);
	}
	assert_int_equal(kinds, 7);
	unload(s, n);
}

static void rtab_seeds_are_a_program_and_tables_that_open(void **state)
{
	static struct seed s[16];
	size_t n = load("fuzz_rtab", s, 16);
	unsigned programs = 0, files = 0;
	char path[128], err[256];

	(void)state;
	snprintf(path, sizeof path, "/dev/shm/kvwire.tseeds-%d.rooms",
		 (int)getpid());
	for (size_t i = 0; i < n; i++) {
		struct rtab *t = NULL;
		struct rtab_view v;
		struct rtab_peer_view pv;
		uint32_t c = 0, rooms = 0, peers = 0;
		FILE *f;

		if (!(s[i].data[0] & 1)) {
			programs++;
			continue;
		}
		if (s[i].data[0] & 2)
			continue; /* entries only: the target adds the header */
		f = fopen(path, "wb");
		assert_non_null(f);
		assert_int_equal(fwrite(s[i].data + 1, 1, s[i].len - 1, f),
				 s[i].len - 1);
		fclose(f);
		if (rtab_open(path, 0, &t, err, sizeof err) != 0)
			fail_msg("fuzz_rtab/%s is refused: %s", s[i].name, err);
		while (rtab_next(t, &c, &v) == 0)
			rooms++;
		c = 0;
		while (rtab_peer_next(t, &c, &pv) == 0)
			peers++;
		assert_int_equal(rooms, 2);
		assert_int_equal(peers, 1);
		rtab_close(&t);
		unlink(path);
		files++;
	}
	assert_true(programs >= 1);
	assert_true(files >= 1);
	unload(s, n);
}

static void every_roles_seed_record_decodes_and_every_handler_gets_every_type(
	void **state)
{
	static struct seed s[32];
	size_t n = load("fuzz_roles", s, 32);
	uint32_t types[FUZZ_ROLES_HANDLERS] = { 0 };
	char err[200];

	(void)state;
	for (size_t i = 0; i < n; i++) {
		size_t off = 0;
		unsigned msgs = 0;

		while (off < s[i].len) {
			struct frame_part parts[FUZZ_NMAX];
			uint8_t *mem[FUZZ_NMAX] = { 0 };
			unsigned h = s[i].data[off++];
			struct frame_msg m;
			int k;

			assert_true(h < FUZZ_ROLES_HANDLERS);
			k = fuzz_cut(s[i].data, s[i].len, &off, 0, parts, mem);
			assert_true(k > 0);
			err[0] = '\0';
			if (frame_decode(parts, (size_t)k, &m, err, sizeof err))
				fail_msg("fuzz_roles/%s record %u is refused: %s",
					 s[i].name, msgs, err);
			types[h] |= 1u << m.hdr.type;
			msgs++;
			free_parts(mem, k);
		}
		/* fuzz_roles reads at most 64 records of an input */
		assert_true(msgs >= 1 && msgs <= 64);
	}
	for (unsigned h = 0; h < FUZZ_ROLES_HANDLERS; h++)
		for (unsigned t = 1; t <= FRAME_TYPE_MAX; t++)
			if (!(types[h] & 1u << t))
				fail_msg("no fuzz_roles record sends %s to handler %u",
					 frame_type_str(t), h);
	unload(s, n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(
			every_frame_seed_decodes_to_its_type_and_every_type_has_one),
		cmocka_unit_test(every_boot_seed_message_decodes_and_is_answered),
		cmocka_unit_test(every_chan_seed_record_decodes),
		cmocka_unit_test(every_runinfo_seed_parses_with_members),
		cmocka_unit_test(rtab_seeds_are_a_program_and_tables_that_open),
		cmocka_unit_test(every_rdma_seed_decodes_as_its_first_byte_says),
		cmocka_unit_test(
			every_roles_seed_record_decodes_and_every_handler_gets_every_type),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
