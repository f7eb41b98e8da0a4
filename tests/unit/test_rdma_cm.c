/*
 * test_rdma_cm.c - the rdma transport's queue pair exchange
 * (lib/xport/rdma/rdma_cm.h) without a device: a hello and a reply round-trip
 * at their documented offsets; the hello decoder refuses every truncation,
 * an extension, a wrong magic or version, flags, and each field out of
 * range (qpn 0, 1 and over 24 bits, psn over 24 bits, mtu, link layer);
 * the reply decoder refuses a bad magic, length, or an OK naming an
 * impossible queue pair. The prefill side's exchange runs against a fake
 * decode on loopback: OK gives the decode's qpn and psn and keeps the
 * connection open; a refusal names its reason; a malformed reply, a close
 * without a reply, nobody listening and a decode that never answers (within
 * the timeout) all fail cleanly with the connection closed.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/kvw.h"
#include "base/le.h"
#include "xport/rdma/rdma_cm.h"

static const uint8_t SECRET[16] = { 1, 2, 3, 4, 5, 6, 7, 8,
				    9, 10, 11, 12, 13, 14, 15, 16 };

static struct rdma_peer me(void)
{
	struct rdma_peer p = { .qpn = 0x123456, .psn = 0xabcdef, .lid = 0x42,
			       .mtu = 3, .link = 2 };

	for (int i = 0; i < 16; i++)
		p.gid[i] = (uint8_t)(0xa0 + i);
	return p;
}

static void test_hello_and_reply_round_trip_at_their_offsets(void **state)
{
	struct rdma_peer p = me(), o;
	uint8_t h[RCM_HELLO_LEN], r[RCM_REPLY_LEN], sec[16];
	uint32_t st, qpn, psn;

	(void)state;
	rcm_hello_encode(h, SECRET, &p);
	assert_memory_equal(h, "KVRH", 4);
	assert_int_equal(le_get(h + 4, 2), 1);
	assert_memory_equal(h + 8, SECRET, 16);
	assert_int_equal(le_get(h + 24, 4), 0x123456);
	assert_int_equal(le_get(h + 28, 4), 0xabcdef);
	assert_int_equal(le_get(h + 32, 2), 0x42);
	assert_int_equal(h[34], 3);
	assert_int_equal(h[35], 2);
	assert_memory_equal(h + 36, p.gid, 16);
	assert_int_equal(rcm_hello_decode(h, sizeof h, sec, &o), 0);
	assert_memory_equal(sec, SECRET, 16);
	assert_int_equal(o.qpn, p.qpn);
	assert_int_equal(o.psn, p.psn);
	assert_int_equal(o.lid, p.lid);
	assert_int_equal(o.mtu, p.mtu);
	assert_int_equal(o.link, p.link);
	assert_memory_equal(o.gid, p.gid, 16);
	rcm_reply_encode(r, RCM_OK, 0x777, 0x888);
	assert_memory_equal(r, "KVRW", 4);
	assert_int_equal(rcm_reply_decode(r, sizeof r, &st, &qpn, &psn), 0);
	assert_int_equal(st, RCM_OK);
	assert_int_equal(qpn, 0x777);
	assert_int_equal(psn, 0x888);
}

static void poke(const uint8_t *h, size_t off, unsigned bytes, uint64_t v,
		 int rc)
{
	uint8_t t[RCM_HELLO_LEN], sec[16];
	struct rdma_peer o;

	memcpy(t, h, sizeof t);
	le_put(t + off, v, bytes);
	assert_int_equal(rcm_hello_decode(t, sizeof t, sec, &o), rc);
}

static void test_the_hello_decoder_refuses_bad_lengths_and_fields(void **state)
{
	struct rdma_peer p = me(), o;
	uint8_t h[RCM_HELLO_LEN + 1], sec[16];

	(void)state;
	rcm_hello_encode(h, SECRET, &p);
	for (size_t k = 0; k < RCM_HELLO_LEN; k++)
		assert_int_not_equal(rcm_hello_decode(h, k, sec, &o), 0);
	assert_int_equal(rcm_hello_decode(h, RCM_HELLO_LEN + 1, sec, &o),
			 KVW_EINVAL);
	poke(h, 0, 1, 'X', KVW_EVERSION);
	poke(h, 4, 2, 2, KVW_EVERSION);
	poke(h, 6, 2, 1, KVW_EINVAL);
	poke(h, 24, 4, 0, KVW_EINVAL);
	poke(h, 24, 4, 1, KVW_EINVAL);
	poke(h, 24, 4, 2, 0);
	poke(h, 24, 4, 0x1000000, KVW_EINVAL);
	poke(h, 28, 4, 0x1000000, KVW_EINVAL);
	poke(h, 28, 4, 0xffffff, 0);
	poke(h, 34, 1, 0, KVW_EINVAL);
	poke(h, 34, 1, 6, KVW_EINVAL);
	poke(h, 35, 1, 0, KVW_EINVAL);
	poke(h, 35, 1, 3, KVW_EINVAL);
	poke(h, 35, 1, 1, 0);
}

static void test_the_reply_decoder_refuses_bad_magic_length_and_numbers(void **state)
{
	uint8_t r[RCM_REPLY_LEN];
	uint32_t st, qpn, psn;

	(void)state;
	rcm_reply_encode(r, RCM_OK, 0x777, 0x888);
	assert_int_equal(rcm_reply_decode(r, sizeof r - 1, &st, &qpn, &psn),
			 KVW_EINVAL);
	r[1] = 0;
	assert_int_equal(rcm_reply_decode(r, sizeof r, &st, &qpn, &psn),
			 KVW_EINVAL);
	rcm_reply_encode(r, RCM_OK, 1, 0);
	assert_int_equal(rcm_reply_decode(r, sizeof r, &st, &qpn, &psn),
			 KVW_EINVAL);
	rcm_reply_encode(r, RCM_OK, 5, 0x1000000);
	assert_int_equal(rcm_reply_decode(r, sizeof r, &st, &qpn, &psn),
			 KVW_EINVAL);
	/* A refusal carries no queue pair. */
	rcm_reply_encode(r, RCM_SECRET, 0, 0);
	assert_int_equal(rcm_reply_decode(r, sizeof r, &st, &qpn, &psn), 0);
	assert_int_equal(st, RCM_SECRET);
	assert_string_equal(rcm_status_str(RCM_SECRET), "wrong secret");
	assert_string_equal(rcm_status_str(99), "unknown status");
}

/* ---- the exchange against a fake decode ------------------------------ */

enum fake_mode { FK_OK, FK_SECRET, FK_GARBAGE, FK_CLOSE, FK_SILENT };

struct fake {
	int lfd;
	uint16_t port;
	enum fake_mode mode;
	uint8_t hello[RCM_HELLO_LEN];
	int got;       /* bytes of hello read */
	int peer_open; /* FK_OK: the client kept the connection open */
	pthread_t th;
};

static void *fake_main(void *arg)
{
	struct fake *f = arg;
	int fd = accept(f->lfd, NULL, NULL);
	uint8_t r[RCM_REPLY_LEN], b;

	if (fd < 0)
		return NULL;
	while (f->got < (int)RCM_HELLO_LEN) {
		ssize_t k = recv(fd, f->hello + f->got, RCM_HELLO_LEN - f->got, 0);

		if (k <= 0)
			break;
		f->got += (int)k;
	}
	switch (f->mode) {
	case FK_OK:
		rcm_reply_encode(r, RCM_OK, 0x4321, 0x765);
		(void)send(fd, r, sizeof r, MSG_NOSIGNAL);
		/* The connection outlives the exchange: the client sends a
		 * byte on it afterwards, then closes it. */
		{
			struct timeval tv = { 5, 0 };

			setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
			f->peer_open = recv(fd, &b, 1, 0) == 1 && b == 'k' &&
				       recv(fd, &b, 1, 0) == 0;
		}
		break;
	case FK_SECRET:
		rcm_reply_encode(r, RCM_SECRET, 0, 0);
		(void)send(fd, r, sizeof r, MSG_NOSIGNAL);
		break;
	case FK_GARBAGE:
		memset(r, 0x5a, sizeof r);
		(void)send(fd, r, sizeof r, MSG_NOSIGNAL);
		break;
	case FK_CLOSE:
		break;
	case FK_SILENT:
		(void)recv(fd, &b, 1, 0); /* until the client gives up */
		break;
	}
	close(fd);
	return NULL;
}

static void fake_start(struct fake *f, enum fake_mode mode)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof a;

	memset(f, 0, sizeof *f);
	f->mode = mode;
	f->lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(f->lfd >= 0);
	assert_int_equal(bind(f->lfd, (struct sockaddr *)&a, sizeof a), 0);
	assert_int_equal(listen(f->lfd, 4), 0);
	assert_int_equal(getsockname(f->lfd, (struct sockaddr *)&a, &al), 0);
	f->port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&f->th, NULL, fake_main, f), 0);
}

static void fake_end(struct fake *f)
{
	pthread_join(f->th, NULL);
	close(f->lfd);
}

static int exchange(struct fake *f, int ms, int *fd, struct rdma_peer *peer,
		    char *err, size_t errlen)
{
	struct rdma_peer m = me();

	return rcm_exchange("127.0.0.1", f->port, SECRET, &m, ms, fd, peer, err,
			    errlen);
}

static void test_an_accepted_exchange_gives_the_decode_queue_pair_and_stays_open(void **state)
{
	struct rdma_peer peer = { 0 }, o;
	struct fake f;
	uint8_t sec[16];
	char err[200] = "";
	int fd = -1;

	(void)state;
	fake_start(&f, FK_OK);
	assert_int_equal(exchange(&f, 2000, &fd, &peer, err, sizeof err), 0);
	assert_true(fd >= 0);
	assert_int_equal(peer.qpn, 0x4321);
	assert_int_equal(peer.psn, 0x765);
	assert_int_equal(send(fd, "k", 1, MSG_NOSIGNAL), 1);
	close(fd);
	fake_end(&f);
	assert_int_equal(f.peer_open, 1);
	assert_int_equal(f.got, RCM_HELLO_LEN);
	assert_int_equal(rcm_hello_decode(f.hello, RCM_HELLO_LEN, sec, &o), 0);
	assert_memory_equal(sec, SECRET, 16);
	assert_int_equal(o.qpn, 0x123456);
}

static void test_refusals_malformed_replies_and_closes_fail_with_no_fd(void **state)
{
	const enum fake_mode modes[] = { FK_SECRET, FK_GARBAGE, FK_CLOSE };
	const int want[] = { KVW_EPEER, KVW_EPEER, KVW_ESYS };
	const char *text[] = { "wrong secret", "malformed reply", "exchange" };
	struct rdma_peer peer;

	(void)state;
	for (size_t i = 0; i < 3; i++) {
		struct fake f;
		char err[200] = "";
		int fd = 7;

		fake_start(&f, modes[i]);
		assert_int_equal(exchange(&f, 2000, &fd, &peer, err, sizeof err),
				 want[i]);
		assert_int_equal(fd, -1);
		assert_non_null(strstr(err, text[i]));
		fake_end(&f);
	}
}

static void test_nobody_listening_and_a_silent_decode_fail_within_the_timeout(void **state)
{
	struct rdma_peer peer;
	struct timespec t0, t1;
	struct fake f;
	char err[200] = "";
	uint16_t port;
	int fd = 7;

	(void)state;
	fake_start(&f, FK_CLOSE);
	port = f.port;
	/* Connect once so the fake ends, then nothing listens there. */
	assert_int_not_equal(exchange(&f, 2000, &fd, &peer, err, sizeof err), 0);
	fake_end(&f);
	f.port = port;
	assert_int_equal(exchange(&f, 2000, &fd, &peer, err, sizeof err),
			 KVW_ESYS);
	assert_int_equal(fd, -1);
	fake_start(&f, FK_SILENT);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	assert_int_equal(exchange(&f, 300, &fd, &peer, err, sizeof err),
			 KVW_ESYS);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_int_equal(fd, -1);
	assert_true(t1.tv_sec - t0.tv_sec < 3);
	fake_end(&f);
	/* A host that is not numeric. */
	f.port = 1;
	{
		struct rdma_peer m = me();

		assert_int_equal(rcm_exchange("decode.example", 1, SECRET, &m, 100,
					      &fd, &peer, err, sizeof err),
				 KVW_ESYS);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hello_and_reply_round_trip_at_their_offsets),
		cmocka_unit_test(test_the_hello_decoder_refuses_bad_lengths_and_fields),
		cmocka_unit_test(test_the_reply_decoder_refuses_bad_magic_length_and_numbers),
		cmocka_unit_test(test_an_accepted_exchange_gives_the_decode_queue_pair_and_stays_open),
		cmocka_unit_test(test_refusals_malformed_replies_and_closes_fail_with_no_fd),
		cmocka_unit_test(test_nobody_listening_and_a_silent_decode_fail_within_the_timeout),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
