/*
 * bench_mac.c - what each candidate for the tcp data port's batch MAC
 * costs on this CPU (issue 29, bench/README.md): GB/s over 4 KiB, 64 KiB
 * and 1 MiB buffers, one buffer per MAC as a batch would be, for
 *   xxh3-128 (the unkeyed reference: libxxhash, and kvwire's own build of
 *   it, xhash.h, as the keyless tag computes it), AES-256-GCM as GMAC (AAD only) and
 *   as AEAD (encrypt in place), Poly1305 with a per-batch one-time key
 *   drawn from ChaCha20 over the connection key and seq, ChaCha20-Poly1305
 *   (IETF, encrypt in place), keyed BLAKE2b-128.
 * The buffers stay in the cache (the sink MACs what just landed, hot).
 * Usage: bench_mac [seconds per cell] (default 0.3).
 */
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "xport/xhash.h"

static uint8_t key[32], tag[16];

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void m_xxh3(uint8_t *b, size_t n, uint64_t seq)
{
	XXH128_hash_t h = XXH3_128bits_withSeed(b, n, seq);

	memcpy(tag, &h, 16);
}

static void m_xhash(uint8_t *b, size_t n, uint64_t seq)
{
	static XXH3_state_t s;
	XXH128_hash_t h;

	(void)seq;
	xhash_reset(&s);
	xhash_update(&s, b, n);
	h = xhash_digest(&s);
	memcpy(tag, &h, 16);
}

static EVP_CIPHER_CTX *gcm;

static void gcm_iv(uint64_t seq)
{
	uint8_t iv[12] = { 0 };

	memcpy(iv, &seq, 8);
	EVP_EncryptInit_ex(gcm, NULL, NULL, NULL, iv);
}

static void m_gmac(uint8_t *b, size_t n, uint64_t seq)
{
	int ol;

	gcm_iv(seq);
	EVP_EncryptUpdate(gcm, NULL, &ol, b, (int)n);
	EVP_EncryptFinal_ex(gcm, tag, &ol);
	EVP_CIPHER_CTX_ctrl(gcm, EVP_CTRL_GCM_GET_TAG, 16, tag);
}

static void m_gcm(uint8_t *b, size_t n, uint64_t seq)
{
	int ol;

	gcm_iv(seq);
	EVP_EncryptUpdate(gcm, b, &ol, b, (int)n);
	EVP_EncryptFinal_ex(gcm, tag, &ol);
	EVP_CIPHER_CTX_ctrl(gcm, EVP_CTRL_GCM_GET_TAG, 16, tag);
}

static void m_poly(uint8_t *b, size_t n, uint64_t seq)
{
	uint8_t otk[32], nonce[8];

	memcpy(nonce, &seq, 8);
	crypto_stream_chacha20(otk, sizeof otk, nonce, key);
	crypto_onetimeauth_poly1305(tag, b, n, otk);
}

/* OpenSSL's Poly1305 (EVP_MAC, its AVX-512 code where the CPU has it)
 * with a one-time key per batch from ChaCha20 (OpenSSL) over the
 * connection key and seq, as ChaCha20-Poly1305 draws it. */
static EVP_MAC_CTX *ossl_poly;
static EVP_CIPHER_CTX *ossl_chacha;

static void m_ossl_poly(uint8_t *b, size_t n, uint64_t seq)
{
	uint8_t iv[16] = { 0 }, otk[32] = { 0 };
	size_t tl;
	int ol;

	memcpy(iv + 4, &seq, 8);
	EVP_EncryptInit_ex(ossl_chacha, NULL, NULL, key, iv);
	EVP_EncryptUpdate(ossl_chacha, otk, &ol, otk, sizeof otk);
	EVP_MAC_init(ossl_poly, otk, sizeof otk, NULL);
	EVP_MAC_update(ossl_poly, b, n);
	EVP_MAC_final(ossl_poly, tag, &tl, sizeof tag);
}

static void m_chapoly(uint8_t *b, size_t n, uint64_t seq)
{
	uint8_t nonce[12] = { 0 };

	memcpy(nonce, &seq, 8);
	crypto_aead_chacha20poly1305_ietf_encrypt_detached(
		b, tag, NULL, b, n, NULL, 0, NULL, nonce, key);
}

static void m_blake(uint8_t *b, size_t n, uint64_t seq)
{
	(void)seq;
	crypto_generichash(tag, 16, b, n, key, sizeof key);
}

struct cand {
	const char *name;
	void (*f)(uint8_t *b, size_t n, uint64_t seq);
};

int main(int argc, char **argv)
{
	static const struct cand c[] = {
		{ "xxh3-128 (unkeyed)", m_xxh3 },
		{ "xxh3-128 (unkeyed, xhash.h)", m_xhash },
		{ "AES-256-GCM GMAC (OpenSSL)", m_gmac },
		{ "AES-256-GCM AEAD (OpenSSL)", m_gcm },
		{ "Poly1305 one-time key (sodium)", m_poly },
		{ "Poly1305 one-time key (OpenSSL)", m_ossl_poly },
		{ "ChaCha20-Poly1305 (sodium)", m_chapoly },
		{ "BLAKE2b-128 keyed (sodium)", m_blake },
	};
	static const size_t sz[] = { 4096, 65536, 1u << 20 };
	double secs = argc > 1 ? atof(argv[1]) : 0.3;
	uint8_t *b = aligned_alloc(64, 1u << 20);

	if (!b || sodium_init() < 0)
		return 111;
	randombytes_buf(key, sizeof key);
	randombytes_buf(b, 1u << 20);
	gcm = EVP_CIPHER_CTX_new();
	EVP_EncryptInit_ex(gcm, EVP_aes_256_gcm(), NULL, key, NULL);
	{
		EVP_MAC *mac = EVP_MAC_fetch(NULL, "POLY1305", NULL);

		ossl_poly = EVP_MAC_CTX_new(mac);
		EVP_MAC_free(mac);
		ossl_chacha = EVP_CIPHER_CTX_new();
		EVP_EncryptInit_ex(ossl_chacha, EVP_chacha20(), NULL, key, NULL);
	}
	printf("%-32s %10s %10s %10s   (GB/s)\n", "MAC", "4 KiB", "64 KiB",
	       "1 MiB");
	for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
		printf("%-32s", c[i].name);
		for (size_t j = 0; j < 3; j++) {
			double t0 = now_s(), t;
			uint64_t bytes = 0, seq = 0;

			do {
				for (int k = 0; k < 16; k++) {
					c[i].f(b, sz[j], seq++);
					bytes += sz[j];
				}
				t = now_s() - t0;
			} while (t < secs);
			printf(" %10.2f", (double)bytes / t / 1e9);
		}
		printf("\n");
	}
	EVP_CIPHER_CTX_free(gcm);
	free(b);
	return 0;
}
