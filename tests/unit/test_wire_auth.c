/*
 * test_wire_auth.c - the group's keys and the tcp:// policy with the real
 * libzmq: keys made are loaded back; a key file or directory others could
 * read, another file in its place, a malformed or mismatched key, or
 * keys that already exist are refused; without a policy tcp:// is refused
 * both ways while ipc:// is not; with the group's keys a member's DEALER
 * reaches a CURVE ROUTER over loopback, while a client with another
 * group's keys, or with none, gets no frame through and the ZAP handler
 * counts the refusal.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include "base/keys.h"
#include "base/kvw.h"
#include "wire/wire.h"
#include "wire/wire_auth.h"

static char dir[64], other[64];

static int fresh(void **state)
{
	static unsigned n;

	(void)state;
	snprintf(dir, sizeof dir, "/tmp/kvw-keys-%d-%u", (int)getpid(), n);
	snprintf(other, sizeof other, "/tmp/kvw-keys-%d-%u-b", (int)getpid(), n++);
	return 0;
}

static void rm_keys(const char *d)
{
	char p[128];

	snprintf(p, sizeof p, "%s/%s", d, KEYS_FILE);
	unlink(p);
	rmdir(d);
}

static int gone(void **state)
{
	(void)state;
	rm_keys(dir);
	rm_keys(other);
	return 0;
}

static void test_keys_made_load_back_and_are_never_overwritten(void **state)
{
	struct keys k, k2;
	char err[256], p[128];
	struct stat st;

	(void)state;
	assert_int_equal(keys_make(dir, err, sizeof err), 0);
	assert_int_equal(stat(dir, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0700);
	snprintf(p, sizeof p, "%s/%s", dir, KEYS_FILE);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(keys_load(dir, &k, err, sizeof err), 0);
	assert_int_equal(strlen(k.server_public), 40);
	assert_string_not_equal(k.server_public, k.client_public);
	assert_int_equal(keys_make(dir, err, sizeof err), KVW_EEXIST);
	assert_int_equal(keys_load(dir, &k2, err, sizeof err), 0);
	assert_memory_equal(&k, &k2, sizeof k); /* unchanged */
}

static void test_keys_others_could_read_or_that_are_malformed_are_refused(void **state)
{
	struct keys k;
	char err[256], p[128];
	FILE *f;

	(void)state;
	assert_int_equal(keys_load(dir, &k, err, sizeof err), KVW_ENOENT);
	assert_int_equal(keys_make(dir, err, sizeof err), 0);
	snprintf(p, sizeof p, "%s/%s", dir, KEYS_FILE);
	assert_int_equal(chmod(p, 0640), 0);
	assert_int_equal(keys_load(dir, &k, err, sizeof err), KVW_EINVAL);
	assert_non_null(strstr(err, "lets others in"));
	assert_int_equal(chmod(p, 0600), 0);
	assert_int_equal(chmod(dir, 0755), 0);
	assert_int_equal(keys_load(dir, &k, err, sizeof err), KVW_EINVAL);
	assert_int_equal(chmod(dir, 0700), 0);
	/* A public key that is not the secret key's: refused. */
	f = fopen(p, "r+");
	assert_non_null(f);
	assert_int_equal(fseek(f, 14 + 14, SEEK_SET), 0);
	fputc('0', f);
	fputc('0', f);
	fclose(f);
	assert_int_equal(keys_load(dir, &k, err, sizeof err), KVW_EINVAL);
	assert_non_null(strstr(err, "not a kvwire key file"));
	/* Another kind of file in its place. */
	unlink(p);
	assert_int_equal(mkdir(p, 0700), 0);
	assert_int_equal(keys_load(dir, &k, err, sizeof err), KVW_EINVAL);
	assert_non_null(strstr(err, "not a regular file"));
	rmdir(p);
	/* An unsafe directory is not used for new keys either. */
	assert_int_equal(chmod(dir, 0777), 0);
	assert_int_equal(keys_make(dir, err, sizeof err), KVW_EINVAL);
	assert_int_equal(chmod(dir, 0700), 0);
}

/* A DEALER that dials tcp://127.0.0.1:port, optionally as a CURVE client
 * with the given keys, sends "hi"; whether the ROUTER got it within ms. */
static int reaches(void *ctx, void *router, int port, const struct keys *as,
		   int ms)
{
	void *d = zmq_socket(ctx, ZMQ_DEALER);
	char ep[64], buf[16];
	int zero = 0, got = 0;
	zmq_pollitem_t it = { router, 0, ZMQ_POLLIN, 0 };

	snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
	zmq_setsockopt(d, ZMQ_LINGER, &zero, sizeof zero);
	if (as) {
		zmq_setsockopt(d, ZMQ_CURVE_SERVERKEY, as->server_public, 40);
		zmq_setsockopt(d, ZMQ_CURVE_PUBLICKEY, as->client_public, 40);
		zmq_setsockopt(d, ZMQ_CURVE_SECRETKEY, as->client_secret, 40);
	}
	assert_int_equal(zmq_connect(d, ep), 0);
	zmq_send(d, "hi", 2, ZMQ_DONTWAIT);
	if (zmq_poll(&it, 1, ms) == 1) {
		/* identity frame, then "hi" */
		while (zmq_recv(router, buf, sizeof buf, ZMQ_DONTWAIT) >= 0) {
			if (memcmp(buf, "hi", 2) == 0)
				got = 1;
		}
	}
	zmq_close(d);
	return got;
}

static void test_tcp_needs_a_policy_then_admits_only_the_groups_key(void **state)
{
	struct keys k, stranger;
	void *ctx = zmq_ctx_new(), *r, *d;
	char err[256], ep[64];
	size_t len = sizeof ep;
	int port;
	uint64_t before;

	(void)state;
	/* Fail-closed: no policy chosen yet in this process. */
	assert_int_equal(wire_auth_mode(), WIRE_AUTH_UNSET);
	r = wire_socket(ctx, ZMQ_ROUTER, 0, err, sizeof err);
	assert_non_null(r);
	assert_int_equal(wire_bind(r, "tcp://127.0.0.1:*", 0, err, sizeof err),
			 KVW_EINVAL);
	assert_non_null(strstr(err, "--keys DIR"));
	d = wire_socket(ctx, ZMQ_DEALER, 0, err, sizeof err);
	assert_int_equal(wire_connect(d, "tcp://127.0.0.1:1", err, sizeof err),
			 KVW_EINVAL);
	assert_int_equal(wire_connect(d, "ipc:///tmp/kvw-no-such.sock", err,
				      sizeof err), 0);
	wire_close(&d);
	wire_close(&r);

	assert_int_equal(keys_make(dir, err, sizeof err), 0);
	assert_int_equal(keys_load(dir, &k, err, sizeof err), 0);
	assert_int_equal(keys_make(other, err, sizeof err), 0);
	assert_int_equal(keys_load(other, &stranger, err, sizeof err), 0);
	wire_auth_use(&k);
	r = wire_socket(ctx, ZMQ_ROUTER, 0, err, sizeof err);
	assert_non_null(r);
	assert_int_equal(wire_bind(r, "tcp://127.0.0.1:*", 0, err, sizeof err), 0);
	assert_int_equal(zmq_getsockopt(r, ZMQ_LAST_ENDPOINT, ep, &len), 0);
	port = atoi(strrchr(ep, ':') + 1);
	/* A member (what wire_connect makes of the group's keys). */
	d = wire_socket(ctx, ZMQ_DEALER, 0, err, sizeof err);
	snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", port);
	assert_int_equal(wire_connect(d, ep, err, sizeof err), 0);
	zmq_send(d, "hi", 2, 0);
	{
		zmq_pollitem_t it = { r, 0, ZMQ_POLLIN, 0 };
		char buf[16];

		assert_int_equal(zmq_poll(&it, 1, 5000), 1);
		assert_true(zmq_recv(r, buf, sizeof buf, 0) > 0); /* identity */
		assert_int_equal(zmq_recv(r, buf, sizeof buf, 0), 2);
		assert_memory_equal(buf, "hi", 2);
	}
	wire_close(&d);
	/* Another group's client key with our server key: refused by ZAP. */
	before = wire_auth_refused();
	memcpy(stranger.server_public, k.server_public, sizeof k.server_public);
	assert_false(reaches(ctx, r, port, &stranger, 500));
	assert_true(wire_auth_refused() > before);
	/* No CURVE at all: the handshake cannot even start, and ZAP never
	 * hears of it; the socket's monitor counts it (issue 14). */
	before = wire_auth_refused();
	assert_false(reaches(ctx, r, port, NULL, 300));
	for (int i = 0; i < 500 && wire_auth_refused() == before; i++)
		zmq_poll(NULL, 0, 10); /* a bounded poll of the counter */
	assert_true(wire_auth_refused() > before);
	wire_close(&r);
	keys_wipe(&k);
	keys_wipe(&stranger);
	zmq_ctx_term(ctx);
}

/* Fingerprints (issue 29): BLAKE2b-256's first 8 bytes in hex (the value
 * for 32 zero bytes is Python's hashlib.blake2b(bytes(32),
 * digest_size=32)); a Z85 key gives its raw bytes' fingerprint; a bad one
 * "?" and EINVAL; two groups' fingerprints differ; a fingerprint never
 * holds the key. */
static void test_fingerprints(void **state)
{
	uint8_t zero[32] = { 0 }, raw[32];
	char fp[KEYS_FP], fp2[KEYS_FP], err[256];
	struct keys k, k2;

	(void)state;
	keys_fp(zero, fp);
	assert_string_equal(fp, "89eb0d6a8a691dae");
	assert_int_equal(keys_fp_z85("nonsense", fp), KVW_EINVAL);
	assert_string_equal(fp, "?");
	assert_int_equal(keys_make(dir, err, sizeof err), 0);
	assert_int_equal(keys_make(other, err, sizeof err), 0);
	assert_int_equal(keys_load(dir, &k, err, sizeof err), 0);
	assert_int_equal(keys_load(other, &k2, err, sizeof err), 0);
	assert_non_null(zmq_z85_decode(raw, k.client_public));
	keys_fp(raw, fp);
	assert_int_equal(keys_fp_z85(k.client_public, fp2), 0);
	assert_string_equal(fp, fp2);
	assert_int_equal(keys_group_fp(&k, fp), 0);
	assert_int_equal(keys_group_fp(&k2, fp2), 0);
	assert_int_equal(strlen(fp), 16);
	assert_string_not_equal(fp, fp2);
	assert_null(strstr(k.client_public, fp));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_keys_made_load_back_and_are_never_overwritten, fresh, gone),
		cmocka_unit_test_setup_teardown(test_keys_others_could_read_or_that_are_malformed_are_refused, fresh, gone),
		cmocka_unit_test_setup_teardown(test_tcp_needs_a_policy_then_admits_only_the_groups_key, fresh, gone),
		cmocka_unit_test_setup_teardown(test_fingerprints, fresh, gone),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
