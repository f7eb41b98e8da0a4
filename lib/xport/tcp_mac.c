/*
 * tcp_mac.c - the tags of tcp_mac.h: OpenSSL's AES-256-GCM (one key
 * schedule per connection direction; each tag sets only a fresh IV) or,
 * without keys, libxxhash's XXH3-128. No hand-made crypto.
 */
#include "tcp_mac.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "base/kvw.h"
#include "le.h"

int tcp_mac_init(struct tcp_mac *m, const uint8_t *key, int sender)
{
	*m = (struct tcp_mac){ .sender = sender };
	if (!key) {
		m->xs = XXH3_createState();
		return m->xs ? 0 : KVW_ENOMEM;
	}
	m->evp = EVP_CIPHER_CTX_new();
	if (!m->evp || EVP_CipherInit_ex(m->evp, EVP_aes_256_gcm(), NULL, key,
					 NULL, sender) != 1) {
		tcp_mac_free(m);
		return KVW_ENOMEM;
	}
	return 0;
}

void tcp_mac_free(struct tcp_mac *m)
{
	EVP_CIPHER_CTX_free(m->evp);
	XXH3_freeState(m->xs);
	m->evp = m->xs = NULL;
}

void tcp_mac_begin(struct tcp_mac *m, uint64_t seq, enum tcp_tag_kind kind)
{
	uint8_t iv[12];

	if (!m->evp) {
		XXH3_128bits_reset(m->xs);
		return;
	}
	le_put(iv, seq, 8);
	le_put(iv + 8, (uint64_t)kind, 4);
	(void)EVP_CipherInit_ex(m->evp, NULL, NULL, NULL, iv, m->sender);
}

void tcp_mac_add(struct tcp_mac *m, const void *p, size_t n)
{
	int ol;

	if (!m->evp) {
		XXH3_128bits_update(m->xs, p, n);
		return;
	}
	/* GCM takes AAD in pieces of any size until the first text byte;
	 * int-sized pieces for EVP's int lengths. */
	while (n > 0) {
		size_t k = n < (1u << 30) ? n : (1u << 30);

		(void)EVP_CipherUpdate(m->evp, NULL, &ol, p, (int)k);
		p = (const uint8_t *)p + k;
		n -= k;
	}
}

void tcp_mac_crypt(struct tcp_mac *m, const uint8_t *in, uint8_t *out,
		   size_t n)
{
	int ol;

	while (m->evp && n > 0) {
		size_t k = n < (1u << 30) ? n : (1u << 30);

		(void)EVP_CipherUpdate(m->evp, out, &ol, in, (int)k);
		in += k;
		out += k;
		n -= k;
	}
}

void tcp_mac_final(struct tcp_mac *m, uint8_t tag[TCP_TAG_LEN])
{
	uint8_t end[16];
	int ol;

	if (!m->evp) {
		XXH128_canonical_t c;

		XXH128_canonicalFromHash(&c, XXH3_128bits_digest(m->xs));
		memcpy(tag, c.digest, TCP_TAG_LEN);
		return;
	}
	(void)EVP_CipherFinal_ex(m->evp, end, &ol);
	(void)EVP_CIPHER_CTX_ctrl(m->evp, EVP_CTRL_GCM_GET_TAG, TCP_TAG_LEN,
				  tag);
}

int tcp_mac_check(struct tcp_mac *m, const uint8_t tag[TCP_TAG_LEN])
{
	uint8_t want[TCP_TAG_LEN], end[16];
	int ol;

	if (!m->evp) {
		tcp_mac_final(m, want);
		return CRYPTO_memcmp(want, tag, TCP_TAG_LEN) == 0;
	}
	/* OpenSSL compares the tag in constant time inside Final. */
	memcpy(want, tag, TCP_TAG_LEN);
	if (EVP_CIPHER_CTX_ctrl(m->evp, EVP_CTRL_GCM_SET_TAG, TCP_TAG_LEN,
				want) != 1)
		return 0;
	return EVP_CipherFinal_ex(m->evp, end, &ol) == 1;
}

void tcp_mac_one(struct tcp_mac *m, uint64_t seq, enum tcp_tag_kind kind,
		 const void *p, size_t n, uint8_t tag[TCP_TAG_LEN])
{
	tcp_mac_begin(m, seq, kind);
	tcp_mac_add(m, p, n);
	tcp_mac_final(m, tag);
}
