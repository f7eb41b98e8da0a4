/*
 * test_chan.c - frames over a real socketpair (lib/wire/chan.c), both ends in
 * this one thread, both non-blocking. Proved: a JOB, a JOB_DONE and a PONG
 * arrive in order, field for field; a JOB of KVW_MAX_COPIES copies (more
 * than the socket buffer) and small frames behind it are queued by
 * chan_send (also when the kernel has room again but the queue is not
 * empty) and arrive whole and in order as the writer flushes and the
 * reader reads; an empty channel says EAGAIN, a closed peer's end of
 * stream and a send to a gone peer say ESYS without SIGPIPE; every broken
 * framing (length 0 or over the cap, nparts 0 or over KVW_MAX_FRAMES,
 * part lengths that do not add up) finishes the channel with "broken";
 * a well-framed record the codec refuses is consumed and the next one
 * still arrives; a record written one byte at a time is EAGAIN until its
 * last byte; closing twice is safe and a closed channel refuses to send.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wire/chan.h"

/* ---- fixtures ---- */

static const struct frame_copy copies3[] = {
	{ 0, 4096, 4096 }, { 1ull << 40, 7, 1 }, { UINT64_MAX - 1, 0, 24 },
};
static const uint8_t desc7[] = { 'r', 'k', 0, 0xFF, 1, 2, 3 };

static struct frame_copy big_copies[KVW_MAX_COPIES];

/* A JOB with the three copies above, every field non-zero. */
static void job_fixture(struct frame_msg *m, uint32_t slot)
{
	frame_msg_init(m, FRAME_JOB, 3, 0x0102030405060708ull + slot,
		       0xA1B2C3D4E5F60718ull);
	m->u.job.slot = slot;
	m->u.job.generation = 0x7000 + slot;
	m->u.job.peer = 4;
	m->u.job.flags = FRAME_JOB_LAST | FRAME_JOB_FINAL;
	m->u.job.dst_index = 1;
	m->u.job.desc.p = desc7;
	m->u.job.desc.len = sizeof desc7;
	m->u.job.pages = 3 + slot;
	m->u.job.token = 0x70c0000ull + slot;
	strcpy(m->u.job.reply, "tcp://10.0.0.9:7100");
	m->u.job.copies = frame_copies_of(copies3, 3);
}

/* A successful JOB_DONE answering `count` jobs. */
static void done_fixture(struct frame_msg *m, uint32_t slot, uint32_t count)
{
	frame_msg_init(m, FRAME_JOB_DONE, 3, 0x0102030405060708ull + slot,
		       0xA1B2C3D4E5F60718ull);
	m->u.job_done.slot = slot;
	m->u.job_done.generation = 0x7000 + slot;
	m->u.job_done.result = 0;
	m->u.job_done.reason = KVW_R_NONE;
	m->u.job_done.bytes = (1ull << 33) + slot;
	m->u.job_done.count = count;
}

static void pong_fixture(struct frame_msg *m, uint64_t room)
{
	frame_msg_init(m, FRAME_PONG, 9, room, 0x55AA55AA55AA55AAull);
}

/* Fills big_copies with values that differ in every field of every copy. */
static void fill_big(void)
{
	for (uint32_t i = 0; i < KVW_MAX_COPIES; i++)
		big_copies[i] = (struct frame_copy){
			(uint64_t)i * 4096 + 1,
			~(uint64_t)i << 12,
			(uint64_t)i ^ 0x5A5A5A5A00000000ull,
		};
}

static void assert_hdr_eq(const struct frame_hdr *a, const struct frame_hdr *b)
{
	assert_true(a->magic == b->magic);
	assert_int_equal(a->version, b->version);
	assert_int_equal(a->type, b->type);
	assert_int_equal(a->flags, b->flags);
	assert_true(a->src_rank == b->src_rank);
	assert_true(a->room == b->room);
	assert_true(a->epoch == b->epoch);
}

static void assert_job_eq(const struct frame_msg *a, const struct frame_msg *b)
{
	assert_hdr_eq(&a->hdr, &b->hdr);
	assert_int_equal(a->u.job.slot, b->u.job.slot);
	assert_int_equal(a->u.job.generation, b->u.job.generation);
	assert_int_equal(a->u.job.peer, b->u.job.peer);
	assert_int_equal(a->u.job.flags, b->u.job.flags);
	assert_int_equal(a->u.job.dst_index, b->u.job.dst_index);
	assert_int_equal(a->u.job.desc.len, b->u.job.desc.len);
	if (a->u.job.desc.len)
		assert_memory_equal(a->u.job.desc.p, b->u.job.desc.p,
				    a->u.job.desc.len);
	assert_int_equal(a->u.job.pages, b->u.job.pages);
	assert_true(a->u.job.token == b->u.job.token);
	assert_string_equal(a->u.job.reply, b->u.job.reply);
	assert_int_equal(a->u.job.copies.n, b->u.job.copies.n);
	for (uint32_t i = 0; i < a->u.job.copies.n; i++) {
		struct frame_copy p = frame_copies_get(a->u.job.copies, i);
		struct frame_copy q = frame_copies_get(b->u.job.copies, i);

		assert_true(p.src_off == q.src_off);
		assert_true(p.dst_off == q.dst_off);
		assert_true(p.len == q.len);
	}
}

static void assert_done_eq(const struct frame_msg *a, const struct frame_msg *b)
{
	assert_hdr_eq(&a->hdr, &b->hdr);
	assert_int_equal(a->u.job_done.slot, b->u.job_done.slot);
	assert_int_equal(a->u.job_done.generation, b->u.job_done.generation);
	assert_int_equal(a->u.job_done.result, b->u.job_done.result);
	assert_int_equal(a->u.job_done.reason, b->u.job_done.reason);
	assert_true(a->u.job_done.bytes == b->u.job_done.bytes);
	assert_int_equal(a->u.job_done.count, b->u.job_done.count);
}

/* ---- helpers ---- */

struct ends {
	struct chan w, r; /* writer (control end), reader (worker end) */
};

static void open_ends(struct ends *e)
{
	int fds[2];

	assert_int_equal(chan_pair(fds), 0);
	chan_init(&e->w, fds[0]);
	chan_init(&e->r, fds[1]);
}

static void close_ends(struct ends *e)
{
	chan_close(&e->w);
	chan_close(&e->r);
}

/* Writes all n bytes to fd with write(2); small enough for the buffer. */
static void raw_write(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;

	while (n) {
		ssize_t k = write(fd, b, n);

		if (k < 0 && errno == EINTR)
			continue;
		assert_true(k > 0);
		b += k;
		n -= (size_t)k;
	}
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

/* Builds the channel's record of n parts into out (of cap bytes); returns
 * its length. */
static size_t record(uint8_t *out, size_t cap, const struct frame_part *parts,
		     unsigned n)
{
	size_t len = 5 + 4 * (size_t)n;

	assert_true(len <= cap);
	out[4] = (uint8_t)n;
	for (unsigned i = 0; i < n; i++) {
		put32(out + 5 + 4 * i, (uint32_t)parts[i].len);
		assert_true(len + parts[i].len <= cap);
		if (parts[i].len)
			memcpy(out + len, parts[i].data, parts[i].len);
		len += parts[i].len;
	}
	put32(out, (uint32_t)(len - 4));
	return len;
}

/* Encodes m and builds its record. */
static size_t record_of(uint8_t *out, size_t cap, const struct frame_msg *m)
{
	static struct frame_out o;
	char err[128];

	assert_int_equal(frame_encode(m, &o, err, sizeof err), 0);
	return record(out, cap, o.parts, (unsigned)o.nparts);
}

/* ---- in order, field for field ---- */

static void test_job_done_and_pong_arrive_in_order_field_for_field(void **state)
{
	struct ends e;
	struct frame_msg job, done, pong, got;
	char err[128] = "";

	(void)state;
	open_ends(&e);
	job_fixture(&job, 17);
	done_fixture(&done, 17, 5);
	pong_fixture(&pong, 0xDEADBEEFCAFEull);
	assert_int_equal(chan_send(&e.w, &job, err, sizeof err), 0);
	assert_int_equal(chan_send(&e.w, &done, err, sizeof err), 0);
	assert_int_equal(chan_send(&e.w, &pong, err, sizeof err), 0);
	assert_int_equal(chan_pending(&e.w), 0);

	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), 0);
	assert_int_equal(got.hdr.type, FRAME_JOB);
	assert_job_eq(&got, &job);
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), 0);
	assert_int_equal(got.hdr.type, FRAME_JOB_DONE);
	assert_done_eq(&got, &done);
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), 0);
	assert_int_equal(got.hdr.type, FRAME_PONG);
	assert_hdr_eq(&got.hdr, &pong.hdr);
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), KVW_EAGAIN);

	/* The other direction works the same way. */
	assert_int_equal(chan_send(&e.r, &done, err, sizeof err), 0);
	assert_int_equal(chan_recv(&e.w, &got, err, sizeof err), 0);
	assert_done_eq(&got, &done);
	close_ends(&e);
}

static void test_job_with_no_copies_and_no_desc_round_trips(void **state)
{
	struct ends e;
	struct frame_msg job, got;
	char err[128] = "";

	(void)state;
	open_ends(&e);
	job_fixture(&job, 1);
	job.u.job.flags = 0;
	job.u.job.desc.p = NULL;
	job.u.job.desc.len = 0;
	job.u.job.reply[0] = '\0';
	job.u.job.copies = frame_copies_of(NULL, 0);
	assert_int_equal(chan_send(&e.w, &job, err, sizeof err), 0);
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), 0);
	assert_job_eq(&got, &job);
	close_ends(&e);
}

static void test_message_the_codec_refuses_is_not_sent_and_queues_nothing(void **state)
{
	struct ends e;
	struct frame_msg bad, pong, got;
	char err[128] = "";

	(void)state;
	open_ends(&e);
	job_fixture(&bad, 2);
	bad.u.job.flags = FRAME_JOB_FINAL; /* FINAL without LAST */
	assert_int_equal(chan_send(&e.w, &bad, err, sizeof err), KVW_EINVAL);
	assert_true(err[0] != '\0');
	pong_fixture(&bad, 1);
	bad.hdr.magic = 0;
	assert_int_equal(chan_send(&e.w, &bad, err, sizeof err), KVW_EVERSION);
	assert_int_equal(chan_pending(&e.w), 0);
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), KVW_EAGAIN);

	pong_fixture(&pong, 2);
	assert_int_equal(chan_send(&e.w, &pong, err, sizeof err), 0);
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), 0);
	assert_hdr_eq(&got.hdr, &pong.hdr);
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), KVW_EAGAIN);
	close_ends(&e);
}

/* ---- big traffic, partial writes ---- */

#define NSMALL 300u

/* Small frame i behind the big job: PONG, JOB_DONE or a small JOB. */
static void small_fixture(struct frame_msg *m, uint32_t i)
{
	switch (i % 3) {
	case 0:
		pong_fixture(m, 1000 + i);
		break;
	case 1:
		done_fixture(m, 1000 + i, 1 + i % FRAME_JOB_DONE_MAX);
		break;
	default:
		job_fixture(m, 1000 + i);
		break;
	}
}

/* What the reader of the big traffic has taken so far. */
struct big_rx {
	const struct frame_msg *big;
	uint32_t got;
};

/* Takes records until EAGAIN, each checked against what was sent in its
 * place: the big job first, then small frame 0, 1, ... */
static void take_in_order(struct chan *r, struct big_rx *rx)
{
	struct frame_msg m, want;
	char err[128] = "";
	int rc;

	while ((rc = chan_recv(r, &m, err, sizeof err)) == 0) {
		if (rx->got == 0) {
			assert_int_equal(m.hdr.type, FRAME_JOB);
			assert_int_equal(m.u.job.copies.n, KVW_MAX_COPIES);
			assert_memory_equal(m.u.job.copies.p, big_copies,
					    sizeof big_copies);
			assert_job_eq(&m, rx->big);
		} else {
			small_fixture(&want, rx->got - 1);
			assert_int_equal(m.hdr.type, want.hdr.type);
			if (want.hdr.type == FRAME_JOB)
				assert_job_eq(&m, &want);
			else if (want.hdr.type == FRAME_JOB_DONE)
				assert_done_eq(&m, &want);
			else
				assert_hdr_eq(&m.hdr, &want.hdr);
		}
		rx->got++;
	}
	assert_int_equal(rc, KVW_EAGAIN);
}

static void test_max_job_and_frames_behind_it_queue_then_arrive_whole_in_order(void **state)
{
	struct ends e;
	struct frame_msg big, m;
	struct big_rx rx = { &big, 0 };
	char err[128] = "";
	uint32_t i, rounds = 0;
	int fl;

	(void)state;
	fill_big();
	open_ends(&e);
	job_fixture(&big, 0);
	big.u.job.copies = frame_copies_of(big_copies, KVW_MAX_COPIES);
	assert_int_equal(chan_send(&e.w, &big, err, sizeof err), 0);
	/* ~6 MiB: more than any socket buffer takes at once. */
	assert_int_equal(chan_pending(&e.w), 1);
	/* Half the small frames while the reader reads nothing. */
	for (i = 0; i < NSMALL / 2; i++) {
		small_fixture(&m, i);
		assert_int_equal(chan_send(&e.w, &m, err, sizeof err), 0);
		assert_int_equal(chan_pending(&e.w), 1);
	}
	/* The other half while the reader empties the socket before each:
	 * the kernel has room then, yet the bytes must queue behind the
	 * unsent rest of the big job. */
	for (; i < NSMALL; i++) {
		take_in_order(&e.r, &rx);
		small_fixture(&m, i);
		assert_int_equal(chan_send(&e.w, &m, err, sizeof err), 0);
	}

	/* One thread: flush what the kernel takes, read what it holds. */
	while (rx.got < 1 + NSMALL) {
		assert_true(++rounds < 1000000);
		fl = chan_flush(&e.w);
		assert_true(fl == 0 || fl == 1);
		take_in_order(&e.r, &rx);
	}
	assert_int_equal(chan_flush(&e.w), 0);
	assert_int_equal(chan_pending(&e.w), 0);
	assert_int_equal(chan_recv(&e.r, &m, err, sizeof err), KVW_EAGAIN);

	/* Both ends stay usable after their buffers shrank back. */
	job_fixture(&big, 77);
	big.u.job.copies = frame_copies_of(copies3, 3);
	assert_int_equal(chan_send(&e.w, &big, err, sizeof err), 0);
	assert_int_equal(chan_pending(&e.w), 0);
	assert_int_equal(chan_recv(&e.r, &m, err, sizeof err), 0);
	assert_job_eq(&m, &big);
	close_ends(&e);
}

/* ---- empty, end of stream, gone peer ---- */

static void test_empty_channel_is_eagain_and_peer_close_is_end_of_stream(void **state)
{
	struct ends e;
	struct frame_msg pong, got;
	char err[128] = "";

	(void)state;
	open_ends(&e);
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), KVW_EAGAIN);
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), KVW_EAGAIN);
	/* What was sent before the close is still delivered. */
	pong_fixture(&pong, 42);
	assert_int_equal(chan_send(&e.w, &pong, err, sizeof err), 0);
	chan_close(&e.w);
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), 0);
	assert_hdr_eq(&got.hdr, &pong.hdr);
	err[0] = '\0';
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), KVW_ESYS);
	assert_non_null(strstr(err, "end of stream"));
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), KVW_ESYS);
	close_ends(&e);
}

static void test_send_to_a_closed_peer_is_esys_without_sigpipe(void **state)
{
	struct ends e;
	struct frame_msg pong;
	char err[128] = "";
	int rc = 0;

	(void)state;
	open_ends(&e);
	chan_close(&e.r);
	pong_fixture(&pong, 1);
	for (int i = 0; i < 1000 && rc == 0; i++)
		rc = chan_send(&e.w, &pong, err, sizeof err);
	assert_int_equal(rc, KVW_ESYS);
	assert_true(err[0] != '\0');
	close_ends(&e);
}

static void test_flush_of_queued_bytes_to_a_closed_peer_is_esys(void **state)
{
	struct ends e;
	struct frame_msg big;
	char err[128] = "";

	(void)state;
	fill_big();
	open_ends(&e);
	job_fixture(&big, 0);
	big.u.job.copies = frame_copies_of(big_copies, KVW_MAX_COPIES);
	assert_int_equal(chan_send(&e.w, &big, err, sizeof err), 0);
	assert_int_equal(chan_pending(&e.w), 1);
	chan_close(&e.r);
	assert_int_equal(chan_flush(&e.w), KVW_ESYS);
	assert_int_equal(chan_pending(&e.w), 1);
	pong_fixture(&big, 1);
	assert_int_equal(chan_send(&e.w, &big, err, sizeof err), KVW_ESYS);
	close_ends(&e);
}

/* ---- broken framing ---- */

/* Writes the bytes raw on the writer's fd: the reader's channel is then
 * finished with "broken", and stays finished. */
static void assert_broken(const uint8_t *bytes, size_t n)
{
	struct ends e;
	struct frame_msg got;
	char err[128] = "";

	open_ends(&e);
	raw_write(e.w.fd, bytes, n);
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), KVW_ESYS);
	assert_non_null(strstr(err, "broken"));
	err[0] = '\0';
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), KVW_ESYS);
	assert_true(err[0] != '\0');
	close_ends(&e);
}

static void test_length_zero_or_under_five_breaks_the_channel(void **state)
{
	uint8_t b[16] = { 0 };

	(void)state;
	assert_broken(b, 4); /* length 0 */
	for (uint32_t l = 1; l < 5; l++) {
		memset(b, 0, sizeof b);
		put32(b, l);
		b[4] = 1;
		assert_broken(b, 4 + l);
	}
}

static void test_length_over_record_max_breaks_the_channel_before_its_body(void **state)
{
	uint8_t b[4];

	(void)state;
	put32(b, (uint32_t)CHAN_RECORD_MAX + 1);
	assert_broken(b, 4);
	put32(b, UINT32_MAX);
	assert_broken(b, 4);
}

static void test_nparts_zero_or_over_max_frames_breaks_the_channel(void **state)
{
	uint8_t b[64] = { 0 };

	(void)state;
	put32(b, 5); /* nparts 0 and four bytes */
	b[4] = 0;
	assert_broken(b, 9);
	put32(b, 1 + 4 * (KVW_MAX_FRAMES + 1));
	b[4] = KVW_MAX_FRAMES + 1;
	assert_broken(b, 4 + 1 + 4 * (KVW_MAX_FRAMES + 1));
	put32(b, 5);
	b[4] = 0xFF;
	assert_broken(b, 9);
	put32(b, 5); /* two parts, but room for one length only */
	b[4] = 2;
	assert_broken(b, 9);
}

static void test_part_lengths_that_do_not_add_up_break_the_channel(void **state)
{
	uint8_t b[64] = { 0 };

	(void)state;
	/* One part of 5 bytes in a record with 10 bytes after the table. */
	put32(b, 1 + 4 + 10);
	b[4] = 1;
	put32(b + 5, 5);
	assert_broken(b, 4 + 1 + 4 + 10);
	/* One part of 10 bytes in a record with 3 after the table. */
	memset(b, 0, sizeof b);
	put32(b, 1 + 4 + 3);
	b[4] = 1;
	put32(b + 5, 10);
	assert_broken(b, 4 + 1 + 4 + 3);
	/* A second part that claims almost 4 GiB. */
	memset(b, 0, sizeof b);
	put32(b, 1 + 8 + 8);
	b[4] = 2;
	put32(b + 5, 8);
	put32(b + 9, UINT32_MAX - 4);
	assert_broken(b, 4 + 1 + 8 + 8);
}

/* ---- refused content, the stream goes on ---- */

static void test_records_the_codec_refuses_are_consumed_and_the_stream_goes_on(void **state)
{
	static uint8_t buf[8192];
	static struct frame_out o;
	struct ends e;
	struct frame_msg m, got;
	struct frame_part p[3];
	uint8_t hdr[FRAME_HDR_LEN];
	char err[128] = "";
	size_t n = 0;

	(void)state;
	open_ends(&e);
	/* 1: a PONG header with a bad magic. */
	pong_fixture(&m, 1);
	assert_int_equal(frame_encode(&m, &o, err, sizeof err), 0);
	memcpy(hdr, o.parts[0].data, sizeof hdr);
	hdr[0] ^= 0xFF;
	p[0] = (struct frame_part){ hdr, sizeof hdr };
	n += record(buf + n, sizeof buf - n, p, 1);
	/* 2: a JOB_DONE body one byte short. */
	done_fixture(&m, 2, 1);
	assert_int_equal(frame_encode(&m, &o, err, sizeof err), 0);
	p[0] = o.parts[0];
	p[1] = (struct frame_part){ o.parts[1].data, o.parts[1].len - 1 };
	n += record(buf + n, sizeof buf - n, p, 2);
	/* 3: a JOB of one part (its type wants three). */
	job_fixture(&m, 3);
	assert_int_equal(frame_encode(&m, &o, err, sizeof err), 0);
	n += record(buf + n, sizeof buf - n, o.parts, 1);
	/* 4: a header shorter than 32 bytes. */
	p[0] = (struct frame_part){ hdr, FRAME_HDR_LEN - 1 };
	n += record(buf + n, sizeof buf - n, p, 1);
	/* 5: a valid JOB. */
	job_fixture(&m, 5);
	n += record_of(buf + n, sizeof buf - n, &m);
	raw_write(e.w.fd, buf, n);

	err[0] = '\0';
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), KVW_EVERSION);
	assert_true(err[0] != '\0');
	err[0] = '\0';
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), KVW_EINVAL);
	assert_true(err[0] != '\0');
	err[0] = '\0';
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), KVW_EINVAL);
	assert_true(err[0] != '\0');
	err[0] = '\0';
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), KVW_EINVAL);
	assert_true(err[0] != '\0');
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), 0);
	assert_job_eq(&got, &m);
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), KVW_EAGAIN);

	/* And chan_send on the same stream still lines up after them. */
	done_fixture(&m, 6, 2);
	assert_int_equal(chan_send(&e.w, &m, err, sizeof err), 0);
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), 0);
	assert_done_eq(&got, &m);
	close_ends(&e);
}

/* ---- a record in many tiny writes ---- */

static void test_record_written_byte_by_byte_is_eagain_until_its_last_byte(void **state)
{
	static uint8_t buf[8192];
	struct ends e;
	struct frame_msg m, got;
	char err[128] = "";
	size_t n;

	(void)state;
	open_ends(&e);
	job_fixture(&m, 9);
	n = record_of(buf, sizeof buf, &m);
	/* Two records, so the second one's bytes follow a taken one. */
	n += record_of(buf + n, sizeof buf - n, &m);
	for (int round = 0; round < 2; round++) {
		size_t first = round ? n / 2 : 0, end = round ? n : n / 2;

		for (size_t i = first; i < end; i++) {
			raw_write(e.w.fd, buf + i, 1);
			if (i + 1 < end) {
				assert_int_equal(chan_recv(&e.r, &got, err, sizeof err),
						 KVW_EAGAIN);
				continue;
			}
			assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), 0);
			assert_job_eq(&got, &m);
		}
	}
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), KVW_EAGAIN);
	/* A record cut short by the end of the stream is not handed out. */
	raw_write(e.w.fd, buf, 10);
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), KVW_EAGAIN);
	chan_close(&e.w);
	assert_int_equal(chan_recv(&e.r, &got, err, sizeof err), KVW_ESYS);
	close_ends(&e);
}

/* ---- closing ---- */

static void test_close_twice_is_safe_and_a_closed_channel_refuses_to_send(void **state)
{
	struct ends e;
	struct frame_msg pong, got;
	char err[128] = "";

	(void)state;
	open_ends(&e);
	chan_close(&e.w);
	chan_close(&e.w);
	assert_int_equal(e.w.fd, -1);
	assert_int_equal(chan_pending(&e.w), 0);
	pong_fixture(&pong, 1);
	assert_int_equal(chan_send(&e.w, &pong, err, sizeof err), KVW_ESYS);
	assert_true(err[0] != '\0');
	assert_int_equal(chan_pending(&e.w), 0);
	assert_int_equal(chan_flush(&e.w), 0);
	err[0] = '\0';
	assert_int_equal(chan_recv(&e.w, &got, err, sizeof err), KVW_ESYS);
	assert_true(err[0] != '\0');
	close_ends(&e);
	close_ends(&e);
	/* A channel that never had a descriptor closes too. */
	chan_init(&e.w, -1);
	chan_close(&e.w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_job_done_and_pong_arrive_in_order_field_for_field),
		cmocka_unit_test(test_job_with_no_copies_and_no_desc_round_trips),
		cmocka_unit_test(test_message_the_codec_refuses_is_not_sent_and_queues_nothing),
		cmocka_unit_test(test_max_job_and_frames_behind_it_queue_then_arrive_whole_in_order),
		cmocka_unit_test(test_empty_channel_is_eagain_and_peer_close_is_end_of_stream),
		cmocka_unit_test(test_send_to_a_closed_peer_is_esys_without_sigpipe),
		cmocka_unit_test(test_flush_of_queued_bytes_to_a_closed_peer_is_esys),
		cmocka_unit_test(test_length_zero_or_under_five_breaks_the_channel),
		cmocka_unit_test(test_length_over_record_max_breaks_the_channel_before_its_body),
		cmocka_unit_test(test_nparts_zero_or_over_max_frames_breaks_the_channel),
		cmocka_unit_test(test_part_lengths_that_do_not_add_up_break_the_channel),
		cmocka_unit_test(test_records_the_codec_refuses_are_consumed_and_the_stream_goes_on),
		cmocka_unit_test(test_record_written_byte_by_byte_is_eagain_until_its_last_byte),
		cmocka_unit_test(test_close_twice_is_safe_and_a_closed_channel_refuses_to_send),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
