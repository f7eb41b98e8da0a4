/*
 * test_tcp_mac.c - the tags of tcp protocol v4 (lib/xport/tcp/tcp_mac.c):
 * a receiver accepts exactly what the sender tagged; another key, seq,
 * kind, or one flipped bit gives another tag (so the key really keys
 * every tag: a context that lost its key would tag alike under two
 * keys); the tag equals RFC 8439's Poly1305 with the ChaCha20 one-time
 * key computed here from scratch; an ENCRYPT body decrypts to the
 * plaintext, its ciphertext differs from it, and a flipped ciphertext bit
 * fails the check; without keys the tag is XXH3-128 of the bytes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "base/le.h"
#include "xport/tcp/tcp_mac.h"

static const uint8_t K1[32] = { 1, 2, 3 }, K2[32] = { 9, 8, 7 };

static void tag_of(const uint8_t *key, uint64_t seq, enum tcp_tag_kind kind,
		   const uint8_t *p, size_t n, uint8_t tag[TCP_TAG_LEN])
{
	struct tcp_mac m;

	assert_int_equal(tcp_mac_init(&m, key, 1), 0);
	tcp_mac_one(&m, seq, kind, p, n, tag);
	tcp_mac_free(&m);
}

static int checks(const uint8_t *key, uint64_t seq, enum tcp_tag_kind kind,
		  const uint8_t *p, size_t n, const uint8_t tag[TCP_TAG_LEN])
{
	struct tcp_mac m;
	int ok;

	assert_int_equal(tcp_mac_init(&m, key, 0), 0);
	tcp_mac_begin(&m, seq, kind);
	tcp_mac_add(&m, p, n);
	ok = tcp_mac_check(&m, tag);
	tcp_mac_free(&m);
	return ok;
}

static void test_tags_bind_key_seq_kind_and_every_bit(void **state)
{
	uint8_t data[3000], t[TCP_TAG_LEN], u[TCP_TAG_LEN];

	(void)state;
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (uint8_t)(i * 7);
	tag_of(K1, 5, TCP_TAG_HEAD, data, sizeof data, t);
	assert_true(checks(K1, 5, TCP_TAG_HEAD, data, sizeof data, t));
	assert_false(checks(K2, 5, TCP_TAG_HEAD, data, sizeof data, t));
	assert_false(checks(K1, 6, TCP_TAG_HEAD, data, sizeof data, t));
	assert_false(checks(K1, 5, TCP_TAG_BODY, data, sizeof data, t));
	tag_of(K2, 5, TCP_TAG_HEAD, data, sizeof data, u);
	assert_memory_not_equal(t, u, TCP_TAG_LEN);
	data[1234] ^= 0x10;
	assert_false(checks(K1, 5, TCP_TAG_HEAD, data, sizeof data, t));
}

/* RFC 8439 by hand: otk = ChaCha20(key, counter 0, nonce)[0..32),
 * tag = Poly1305(otk, data). */
static void test_a_tag_is_poly1305_under_a_chacha20_one_time_key(void **state)
{
	uint8_t data[100], t[TCP_TAG_LEN], want[TCP_TAG_LEN], iv[16] = { 0 };
	uint8_t otk[32] = { 0 };
	EVP_CIPHER_CTX *cc = EVP_CIPHER_CTX_new();
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "POLY1305", NULL);
	EVP_MAC_CTX *mc = EVP_MAC_CTX_new(mac);
	size_t tl;
	int ol;

	(void)state;
	memset(data, 0x42, sizeof data);
	tag_of(K1, 77, TCP_TAG_ACK, data, sizeof data, t);
	le_put(iv + 4, 77, 8);
	le_put(iv + 12, TCP_TAG_ACK, 4);
	assert_int_equal(EVP_EncryptInit_ex(cc, EVP_chacha20(), NULL, K1, iv), 1);
	assert_int_equal(EVP_EncryptUpdate(cc, otk, &ol, otk, sizeof otk), 1);
	assert_int_equal(EVP_MAC_init(mc, otk, sizeof otk, NULL), 1);
	assert_int_equal(EVP_MAC_update(mc, data, sizeof data), 1);
	assert_int_equal(EVP_MAC_final(mc, want, &tl, sizeof want), 1);
	assert_memory_equal(t, want, TCP_TAG_LEN);
	EVP_MAC_CTX_free(mc);
	EVP_MAC_free(mac);
	EVP_CIPHER_CTX_free(cc);
}

static void test_an_encrypt_body_round_trips_and_a_flipped_bit_fails(void **state)
{
	uint8_t plain[5000], wire[5000], back[5000], aad[16] = { 3 };
	uint8_t t[TCP_TAG_LEN];
	struct tcp_mac s, r;

	(void)state;
	for (size_t i = 0; i < sizeof plain; i++)
		plain[i] = (uint8_t)(i * 13 + 1);
	assert_int_equal(tcp_mac_init(&s, K1, 1), 0);
	assert_int_equal(tcp_mac_init(&r, K1, 0), 0);
	tcp_mac_begin_sealed(&s, 9);
	tcp_mac_add(&s, aad, sizeof aad);
	tcp_mac_crypt(&s, plain, wire, 1000); /* in pieces, as groups go */
	tcp_mac_crypt(&s, plain + 1000, wire + 1000, sizeof plain - 1000);
	tcp_mac_final(&s, t);
	assert_memory_not_equal(plain, wire, sizeof plain);
	memcpy(back, wire, sizeof back);
	tcp_mac_begin_sealed(&r, 9);
	tcp_mac_add(&r, aad, sizeof aad);
	tcp_mac_crypt(&r, back, back, sizeof back); /* in place, as the sink */
	assert_true(tcp_mac_check(&r, t));
	assert_memory_equal(back, plain, sizeof plain);
	wire[4000] ^= 1;
	tcp_mac_begin_sealed(&r, 9);
	tcp_mac_add(&r, aad, sizeof aad);
	tcp_mac_crypt(&r, wire, back, sizeof back);
	assert_false(tcp_mac_check(&r, t));
	tcp_mac_free(&s);
	tcp_mac_free(&r);
}

/* libxxhash's XXH3-128, whatever vector code computes it here (xhash.h):
 * a short input and one long enough for the vector loop. */
static void test_without_keys_a_tag_is_xxh3_128(void **state)
{
	static uint8_t data[70001];
	static const size_t lens[] = { 64, sizeof data };
	uint8_t t[TCP_TAG_LEN];
	XXH128_canonical_t c;

	(void)state;
	for (size_t i = 0; i < sizeof data; i++)
		data[i] = (uint8_t)(i * 13 + 5);
	for (size_t k = 0; k < 2; k++) {
		size_t n = lens[k];

		tag_of(NULL, 3, TCP_TAG_BODY, data, n, t);
		XXH128_canonicalFromHash(&c, XXH3_128bits(data, n));
		assert_memory_equal(t, c.digest, TCP_TAG_LEN);
		assert_true(checks(NULL, 3, TCP_TAG_BODY, data, n, t));
		data[n - 1] ^= 1;
		assert_false(checks(NULL, 3, TCP_TAG_BODY, data, n, t));
		data[n - 1] ^= 1;
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tags_bind_key_seq_kind_and_every_bit),
		cmocka_unit_test(test_a_tag_is_poly1305_under_a_chacha20_one_time_key),
		cmocka_unit_test(test_an_encrypt_body_round_trips_and_a_flipped_bit_fails),
		cmocka_unit_test(test_without_keys_a_tag_is_xxh3_128),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
