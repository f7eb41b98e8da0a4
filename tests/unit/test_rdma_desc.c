/*
 * test_rdma_desc.c - the rdma transport's REGISTER descriptor
 * (lib/xport/rdma/rdma_desc.h): a round trip keeps every field, at the host
 * length's both ends (1 and 255); every byte offset is where the layout
 * says; the decoder refuses each truncation and extension, a wrong magic
 * or version, unknown flags, each field out of range (ib port 0, mtu 0
 * and 6, link layer 0 and 3, size 0, address 0 or wrapping, host length 0
 * and 256, a NUL in the host, a host length that disagrees with the
 * length) and random garbage; the encoder refuses what the decoder would
 * and a buffer one byte short, writing nothing. GPU pools (flags GPU and
 * DMABUF): the segment table round-trips at its documented offsets, 1 and
 * RDMA_DESC_SEG_MAX segments beside the longest host fit KVW_MAX_DESC;
 * an unknown flag bit, DMABUF without GPU, 0 or too many segments, a
 * segment empty, at 0, wrapping or past the pool, and each truncation or
 * extension of the table are refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "base/kvw.h"
#include "base/le.h"
#include "xport/rdma/rdma_desc.h"

static struct rdma_desc sample(void)
{
	struct rdma_desc d = { .ib_port = 1, .mtu = 5, .link = 2, .lid = 0,
			       .rkey = 0x1234abcd, .addr = 0x7f0000001000ull,
			       .size = 1ull << 30, .port = 40123 };

	for (int i = 0; i < 16; i++) {
		d.gid[i] = (uint8_t)(0xf0 + i);
		d.secret[i] = (uint8_t)(i * 7 + 1);
	}
	strcpy(d.host, "10.1.2.3");
	return d;
}

static size_t enc(const struct rdma_desc *d, uint8_t *buf, size_t cap)
{
	size_t len = 0;
	char err[200] = "";

	assert_int_equal(rdma_desc_encode(d, buf, cap, &len, err, sizeof err), 0);
	return len;
}

static int dec(const uint8_t *p, size_t len)
{
	struct rdma_desc d;
	char err[200] = "";
	int rc = rdma_desc_decode(p, len, &d, err, sizeof err);

	if (rc != 0)
		assert_non_null(strstr(err, "rdma:"));
	return rc;
}

static void test_round_trip_keeps_every_field_at_the_documented_offsets(void **state)
{
	struct rdma_desc d = sample(), o;
	uint8_t b[512];
	char err[200];
	size_t len;

	(void)state;
	len = enc(&d, b, sizeof b);
	assert_int_equal(len, RDMA_DESC_FIXED + strlen(d.host));
	assert_memory_equal(b, "KVRD", 4);
	assert_int_equal(b[4], 2);
	assert_int_equal(b[5], 0);
	assert_int_equal(b[6], 1);
	assert_int_equal(b[7], 5);
	assert_int_equal(b[10], 2);
	assert_int_equal(b[11], 0);
	assert_memory_equal(b + 12, d.gid, 16);
	assert_int_equal(le_get(b + 28, 4), 0x1234abcd);
	assert_int_equal(le_get(b + 32, 8), 0x7f0000001000ull);
	assert_int_equal(le_get(b + 40, 8), 1ull << 30);
	assert_memory_equal(b + 48, d.secret, 16);
	assert_int_equal(le_get(b + 64, 2), 40123);
	assert_int_equal(le_get(b + 66, 2), 8);
	assert_memory_equal(b + 68, "10.1.2.3", 8);
	assert_int_equal(rdma_desc_decode(b, len, &o, err, sizeof err), 0);
	assert_int_equal(o.ib_port, 1);
	assert_int_equal(o.mtu, 5);
	assert_int_equal(o.link, 2);
	assert_int_equal(o.lid, 0);
	assert_memory_equal(o.gid, d.gid, 16);
	assert_int_equal(o.rkey, d.rkey);
	assert_int_equal(o.addr, d.addr);
	assert_int_equal(o.size, d.size);
	assert_memory_equal(o.secret, d.secret, 16);
	assert_int_equal(o.port, 40123);
	assert_string_equal(o.host, "10.1.2.3");
}

static void test_host_lengths_1_and_255_pass_0_and_256_do_not(void **state)
{
	struct rdma_desc d = sample(), o;
	uint8_t b[512];
	char err[200];
	size_t len = 0;

	(void)state;
	strcpy(d.host, "h");
	len = enc(&d, b, sizeof b);
	assert_int_equal(len, RDMA_DESC_FIXED + 1);
	assert_int_equal(dec(b, len), 0);
	memset(d.host, 'a', 255);
	d.host[255] = '\0';
	len = enc(&d, b, sizeof b);
	assert_int_equal(len, RDMA_DESC_FIXED + 255);
	assert_int_equal(rdma_desc_decode(b, len, &o, err, sizeof err), 0);
	assert_int_equal(strlen(o.host), 255);
	/* 256 host bytes on the wire (the encoder cannot make them). */
	memcpy(b + RDMA_DESC_FIXED + 255, "a", 1);
	le_put(b + 66, 256, 2);
	assert_int_equal(dec(b, RDMA_DESC_FIXED + 256), KVW_EINVAL);
	/* 0 host bytes. */
	le_put(b + 66, 0, 2);
	assert_int_equal(dec(b, RDMA_DESC_FIXED), KVW_EINVAL);
	d.host[0] = '\0';
	assert_int_equal(rdma_desc_encode(&d, b, sizeof b, &len, err, sizeof err),
			 KVW_EINVAL);
}

static void test_every_truncation_and_an_extension_are_refused(void **state)
{
	struct rdma_desc d = sample();
	uint8_t b[512];
	size_t len;

	(void)state;
	len = enc(&d, b, sizeof b);
	for (size_t k = 0; k < len; k++)
		assert_int_not_equal(dec(b, k), 0);
	b[len] = 'x';
	assert_int_equal(dec(b, len + 1), KVW_EINVAL);
	assert_int_equal(dec(b, len), 0);
}

static void test_magic_version_and_flags_are_checked(void **state)
{
	struct rdma_desc d = sample();
	uint8_t b[512], t[512];
	size_t len;

	(void)state;
	len = enc(&d, b, sizeof b);
	memcpy(t, b, len);
	t[0] = 'X';
	assert_int_equal(dec(t, len), KVW_EVERSION);
	memcpy(t, b, len);
	t[4] = 1; /* the version 1 descriptor of before (addr, size, rkey) */
	assert_int_equal(dec(t, len), KVW_EVERSION);
	memcpy(t, b, len);
	t[5] = 1;
	assert_int_equal(dec(t, len), KVW_EVERSION);
	memcpy(t, b, len);
	t[11] = 0x80;
	assert_int_equal(dec(t, len), KVW_EINVAL);
}

/* Sets one byte field at off to v and expects rc from the decoder. */
static void poke(const uint8_t *b, size_t len, size_t off, unsigned bytes,
		 uint64_t v, int rc)
{
	uint8_t t[512];

	memcpy(t, b, len);
	le_put(t + off, v, bytes);
	assert_int_equal(dec(t, len), rc);
}

static void test_each_field_out_of_range_is_refused(void **state)
{
	struct rdma_desc d = sample();
	uint8_t b[512];
	size_t len;

	(void)state;
	len = enc(&d, b, sizeof b);
	poke(b, len, 6, 1, 0, KVW_EINVAL);  /* ib port 0 */
	poke(b, len, 6, 1, 255, 0);
	poke(b, len, 7, 1, 0, KVW_EINVAL);  /* mtu */
	poke(b, len, 7, 1, 6, KVW_EINVAL);
	poke(b, len, 7, 1, 1, 0);
	poke(b, len, 10, 1, 0, KVW_EINVAL); /* link layer */
	poke(b, len, 10, 1, 3, KVW_EINVAL);
	poke(b, len, 10, 1, 1, 0);
	poke(b, len, 40, 8, 0, KVW_EINVAL); /* size 0 */
	poke(b, len, 32, 8, 0, KVW_EINVAL); /* addr 0 */
	poke(b, len, 32, 8, UINT64_MAX - (1ull << 30) + 1, KVW_EINVAL); /* 2^64 */
	poke(b, len, 32, 8, UINT64_MAX - (1ull << 30), 0); /* ends at 2^64 - 1 */
	poke(b, len, 64, 2, 0, 0);          /* port 0: a source's, decodable */
	poke(b, len, 66, 2, 7, KVW_EINVAL); /* host length disagrees */
	poke(b, len, 66, 2, 9, KVW_EINVAL);
	poke(b, len, RDMA_DESC_FIXED + 3, 1, 0, KVW_EINVAL); /* NUL in host */
}

static void test_the_encoder_refuses_what_the_decoder_would_and_short_buffers(void **state)
{
	struct rdma_desc d = sample(), bad;
	uint8_t b[512];
	char err[200];
	size_t len = 0, need;

	(void)state;
	need = RDMA_DESC_FIXED + strlen(d.host);
	memset(b, 0xee, sizeof b);
	assert_int_equal(rdma_desc_encode(&d, b, need - 1, &len, err, sizeof err),
			 KVW_EINVAL);
	assert_int_equal(len, 0);
	assert_int_equal(b[0], 0xee);
	assert_int_equal(rdma_desc_encode(&d, b, need, &len, err, sizeof err), 0);
	assert_int_equal(len, need);
	bad = d;
	bad.ib_port = 0;
	assert_int_equal(rdma_desc_encode(&bad, b, sizeof b, &len, err, sizeof err),
			 KVW_EINVAL);
	bad = d;
	bad.mtu = 7;
	assert_int_equal(rdma_desc_encode(&bad, b, sizeof b, &len, err, sizeof err),
			 KVW_EINVAL);
	bad = d;
	bad.size = 0;
	assert_int_equal(rdma_desc_encode(&bad, b, sizeof b, &len, err, sizeof err),
			 KVW_EINVAL);
	bad = d;
	memset(bad.host, 'z', sizeof bad.host); /* no NUL at all: 256 bytes */
	assert_int_equal(rdma_desc_encode(&bad, b, sizeof b, &len, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "host"));
}

static void test_garbage_is_refused_without_reading_past_its_end(void **state)
{
	uint64_t s = 0x12345;

	(void)state;
	for (int round = 0; round < 2000; round++) {
		size_t len = (size_t)(s % 400);
		uint8_t *p = malloc(len ? len : 1);

		assert_non_null(p);
		for (size_t i = 0; i < len; i++) {
			s = s * 6364136223846793005ull + 1442695040888963407ull;
			p[i] = (uint8_t)(s >> 56);
		}
		/* Half of them start like a descriptor, to go deeper. */
		if (round % 2 && len >= 6) {
			le_put(p, RDMA_DESC_MAGIC, 4);
			le_put(p + 4, RDMA_DESC_VERSION, 2);
		}
		(void)dec(p, len);
		free(p);
		s += 0x9e3779b97f4a7c15ull;
	}
}

static struct rdma_desc gpu_sample(uint16_t nseg)
{
	struct rdma_desc d = sample();

	d.flags = RDMA_DESC_GPU | RDMA_DESC_DMABUF;
	d.nseg = nseg;
	for (uint16_t i = 0; i < nseg; i++)
		d.seg[i] = (struct rdma_desc_seg){ 4096 + i,
						   0x7e0000000000ull + i * 65536ull,
						   0x100u + i };
	return d;
}

static void test_gpu_segments_round_trip_at_their_offsets(void **state)
{
	struct rdma_desc d = gpu_sample(3), o;
	uint8_t b[KVW_MAX_DESC];
	const uint8_t *q;
	char err[200];
	size_t len, hl = strlen(d.host);

	(void)state;
	len = enc(&d, b, sizeof b);
	assert_int_equal(len, RDMA_DESC_FIXED + hl + 2 + 3 * RDMA_DESC_SEG_LEN);
	assert_int_equal(b[11], RDMA_DESC_GPU | RDMA_DESC_DMABUF);
	q = b + RDMA_DESC_FIXED + hl;
	assert_int_equal(le_get(q, 2), 3);
	assert_int_equal(le_get(q + 2 + RDMA_DESC_SEG_LEN, 8), 4097);
	assert_int_equal(le_get(q + 2 + RDMA_DESC_SEG_LEN + 8, 8),
			 0x7e0000010000ull);
	assert_int_equal(le_get(q + 2 + RDMA_DESC_SEG_LEN + 16, 4), 0x101);
	assert_int_equal(rdma_desc_decode(b, len, &o, err, sizeof err), 0);
	assert_int_equal(o.flags, d.flags);
	assert_int_equal(o.nseg, 3);
	assert_memory_equal(o.seg, d.seg, 3 * sizeof d.seg[0]);
	assert_int_equal(o.rkey, d.rkey);
	assert_string_equal(o.host, d.host);
	d.flags = RDMA_DESC_GPU; /* peer memory */
	len = enc(&d, b, sizeof b);
	assert_int_equal(rdma_desc_decode(b, len, &o, err, sizeof err), 0);
	assert_int_equal(o.flags, RDMA_DESC_GPU);
}

static void test_the_most_segments_fit_beside_the_longest_host(void **state)
{
	struct rdma_desc d = gpu_sample(RDMA_DESC_SEG_MAX);
	uint8_t b[KVW_MAX_DESC];
	size_t len;
	char err[200];

	(void)state;
	memset(d.host, 'h', RDMA_HOST_MAX);
	d.host[RDMA_HOST_MAX] = '\0';
	len = enc(&d, b, sizeof b);
	assert_true(len <= KVW_MAX_DESC);
	assert_int_equal(dec(b, len), 0);
	d.nseg = RDMA_DESC_SEG_MAX + 1;
	assert_int_equal(rdma_desc_encode(&d, b, sizeof b, &len, err,
					  sizeof err), KVW_EINVAL);
}

static void test_unknown_flags_and_bad_segment_tables_are_refused(void **state)
{
	struct rdma_desc d = gpu_sample(2);
	uint8_t b[KVW_MAX_DESC], t[KVW_MAX_DESC];
	size_t len, hl = strlen(d.host), seg0;
	char err[200];

	(void)state;
	len = enc(&d, b, sizeof b);
	seg0 = RDMA_DESC_FIXED + hl + 2;
	for (unsigned bit = 2; bit < 8; bit++) { /* every unknown bit */
		memcpy(t, b, len);
		t[11] |= (uint8_t)(1u << bit);
		assert_int_equal(dec(t, len), KVW_EINVAL);
	}
	memcpy(t, b, len);
	t[11] = RDMA_DESC_DMABUF; /* without GPU: and no table expected */
	assert_int_equal(dec(t, len), KVW_EINVAL);
	assert_int_equal(dec(t, RDMA_DESC_FIXED + hl), KVW_EINVAL);
	for (size_t cut = RDMA_DESC_FIXED + hl; cut < len; cut++)
		assert_int_equal(dec(b, cut), KVW_EINVAL);
	memcpy(t, b, len);
	t[len] = 0;
	assert_int_equal(dec(t, len + 1), KVW_EINVAL);
	poke(b, len, seg0 - 2, 2, 0, KVW_EINVAL);      /* 0 segments */
	poke(b, len, seg0 - 2, 2, 3, KVW_EINVAL);      /* says 3, holds 2 */
	poke(b, len, seg0 - 2, 2, 0xffff, KVW_EINVAL); /* past the maximum */
	poke(b, len, seg0, 8, 0, KVW_EINVAL);          /* empty */
	poke(b, len, seg0 + 8, 8, 0, KVW_EINVAL);      /* at address 0 */
	poke(b, len, seg0 + 8, 8, UINT64_MAX - 100, KVW_EINVAL); /* wraps */
	poke(b, len, seg0, 8, d.size, KVW_EINVAL);     /* past the pool */
	poke(b, len, seg0, 8, d.size - 4097, 0);       /* the pool exactly */
	d.flags = RDMA_DESC_DMABUF;
	assert_int_equal(rdma_desc_encode(&d, t, sizeof t, &len, err,
					  sizeof err), KVW_EINVAL);
	d.flags = 0x04;
	assert_int_equal(rdma_desc_encode(&d, t, sizeof t, &len, err,
					  sizeof err), KVW_EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip_keeps_every_field_at_the_documented_offsets),
		cmocka_unit_test(test_host_lengths_1_and_255_pass_0_and_256_do_not),
		cmocka_unit_test(test_every_truncation_and_an_extension_are_refused),
		cmocka_unit_test(test_magic_version_and_flags_are_checked),
		cmocka_unit_test(test_each_field_out_of_range_is_refused),
		cmocka_unit_test(test_the_encoder_refuses_what_the_decoder_would_and_short_buffers),
		cmocka_unit_test(test_garbage_is_refused_without_reading_past_its_end),
		cmocka_unit_test(test_gpu_segments_round_trip_at_their_offsets),
		cmocka_unit_test(test_the_most_segments_fit_beside_the_longest_host),
		cmocka_unit_test(test_unknown_flags_and_bad_segment_tables_are_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
