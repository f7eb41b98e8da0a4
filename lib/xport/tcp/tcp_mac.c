/*
 * tcp_mac.c - the tags of tcp_mac.h with OpenSSL: Poly1305 (its AVX-512
 * code where the CPU has it) under a one-time key per tag, the first 32
 * bytes of ChaCha20 keystream under the direction's key with the nonce
 * (seq, kind) - the construction of RFC 8439 -, and AES-256-GCM for an
 * ENCRYPT body; without keys XXH3-128 (xhash.h: libxxhash's algorithm,
 * compiled for the CPU's widest vectors). No hand-made crypto.
 */
#include "tcp_mac.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "base/kvw.h"
#include "base/le.h"
#include "xport/xhash.h"

enum { M_XXH, M_POLY, M_GCM };

int tcp_mac_init(struct tcp_mac *m, const uint8_t *key, int sender)
{
	EVP_MAC *poly;

	*m = (struct tcp_mac){ .sender = sender };
	if (!key) {
		m->xs = XXH3_createState();
		return m->xs ? 0 : KVW_ENOMEM;
	}
	poly = EVP_MAC_fetch(NULL, "POLY1305", NULL);
	m->poly = poly ? EVP_MAC_CTX_new(poly) : NULL;
	EVP_MAC_free(poly);
	m->otk = EVP_CIPHER_CTX_new();
	m->gcm = EVP_CIPHER_CTX_new();
	if (!m->poly || !m->otk || !m->gcm ||
	    EVP_EncryptInit_ex(m->otk, EVP_chacha20(), NULL, key, NULL) != 1 ||
	    EVP_CipherInit_ex(m->gcm, EVP_aes_256_gcm(), NULL, key, NULL,
			      sender) != 1) {
		tcp_mac_free(m);
		return KVW_ENOMEM;
	}
	return 0;
}

void tcp_mac_free(struct tcp_mac *m)
{
	EVP_MAC_CTX_free(m->poly);
	EVP_CIPHER_CTX_free(m->otk);
	EVP_CIPHER_CTX_free(m->gcm);
	XXH3_freeState(m->xs);
	m->poly = NULL;
	m->otk = m->gcm = m->xs = NULL;
}

/* The nonce of (seq, kind): 12 bytes, seq u64 || kind u32. */
static void nonce_of(uint64_t seq, enum tcp_tag_kind kind, uint8_t n[12])
{
	le_put(n, seq, 8);
	le_put(n + 8, (uint64_t)kind, 4);
}

void tcp_mac_begin(struct tcp_mac *m, uint64_t seq, enum tcp_tag_kind kind)
{
	uint8_t iv[16] = { 0 }, otk[32] = { 0 };
	int ol;

	if (!m->poly) {
		m->mode = M_XXH;
		xhash_reset(m->xs);
		return;
	}
	/* OpenSSL's ChaCha20 IV: block counter u32 (0) || nonce 12. */
	nonce_of(seq, kind, iv + 4);
	(void)EVP_EncryptInit_ex(m->otk, NULL, NULL, NULL, iv);
	(void)EVP_EncryptUpdate(m->otk, otk, &ol, otk, sizeof otk);
	(void)EVP_MAC_init(m->poly, otk, sizeof otk, NULL);
	OPENSSL_cleanse(otk, sizeof otk);
	m->mode = M_POLY;
}

void tcp_mac_begin_sealed(struct tcp_mac *m, uint64_t seq)
{
	uint8_t iv[12];

	nonce_of(seq, TCP_TAG_BODY, iv);
	(void)EVP_CipherInit_ex(m->gcm, NULL, NULL, NULL, iv, m->sender);
	m->mode = M_GCM;
}

void tcp_mac_add(struct tcp_mac *m, const void *p, size_t n)
{
	int ol;

	if (m->mode == M_XXH) {
		xhash_update(m->xs, p, n);
		return;
	}
	if (m->mode == M_POLY) {
		(void)EVP_MAC_update(m->poly, p, n);
		return;
	}
	/* GCM takes AAD in pieces of any size until the first text byte;
	 * int-sized pieces for EVP's int lengths. */
	while (n > 0) {
		size_t k = n < (1u << 30) ? n : (1u << 30);

		(void)EVP_CipherUpdate(m->gcm, NULL, &ol, p, (int)k);
		p = (const uint8_t *)p + k;
		n -= k;
	}
}

void tcp_mac_crypt(struct tcp_mac *m, const uint8_t *in, uint8_t *out,
		   size_t n)
{
	int ol;

	while (m->mode == M_GCM && n > 0) {
		size_t k = n < (1u << 30) ? n : (1u << 30);

		(void)EVP_CipherUpdate(m->gcm, out, &ol, in, (int)k);
		in += k;
		out += k;
		n -= k;
	}
}

void tcp_mac_final(struct tcp_mac *m, uint8_t tag[TCP_TAG_LEN])
{
	uint8_t end[16];
	size_t tl;
	int ol;

	if (m->mode == M_XXH) {
		XXH128_canonical_t c;

		XXH128_canonicalFromHash(&c, xhash_digest(m->xs));
		memcpy(tag, c.digest, TCP_TAG_LEN);
	} else if (m->mode == M_POLY) {
		(void)EVP_MAC_final(m->poly, tag, &tl, TCP_TAG_LEN);
	} else {
		(void)EVP_CipherFinal_ex(m->gcm, end, &ol);
		(void)EVP_CIPHER_CTX_ctrl(m->gcm, EVP_CTRL_GCM_GET_TAG,
					  TCP_TAG_LEN, tag);
	}
}

int tcp_mac_check(struct tcp_mac *m, const uint8_t tag[TCP_TAG_LEN])
{
	uint8_t want[TCP_TAG_LEN], end[16];
	int ol;

	if (m->mode != M_GCM) {
		tcp_mac_final(m, want);
		return CRYPTO_memcmp(want, tag, TCP_TAG_LEN) == 0;
	}
	/* OpenSSL compares the GCM tag in constant time inside Final. */
	memcpy(want, tag, TCP_TAG_LEN);
	if (EVP_CIPHER_CTX_ctrl(m->gcm, EVP_CTRL_GCM_SET_TAG, TCP_TAG_LEN,
				want) != 1)
		return 0;
	return EVP_CipherFinal_ex(m->gcm, end, &ol) == 1;
}

void tcp_mac_one(struct tcp_mac *m, uint64_t seq, enum tcp_tag_kind kind,
		 const void *p, size_t n, uint8_t tag[TCP_TAG_LEN])
{
	tcp_mac_begin(m, seq, kind);
	tcp_mac_add(m, p, n);
	tcp_mac_final(m, tag);
}
