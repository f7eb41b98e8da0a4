/*
 * tcp_auth.c - the handshake proofs and key derivation of tcp_auth.h,
 * with libsodium's HMAC-SHA256, BLAKE2b and constant-time compare: no
 * hand-made crypto.
 */
#include "tcp_auth.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "base/le.h"

#define SECRET_KEY (TCP_GROUP_KEY_LEN + TCP_SECRET_LEN)

static void secret_key(const uint8_t *group, const uint8_t *secret,
		       uint8_t key[SECRET_KEY])
{
	memset(key, 0, SECRET_KEY);
	if (group)
		memcpy(key, group, TCP_GROUP_KEY_LEN);
	memcpy(key + TCP_GROUP_KEY_LEN, secret, TCP_SECRET_LEN);
}

/* HMAC(group || secret, label || nonce_s || nonce_c || tail). */
static void proof(const uint8_t *group, const uint8_t *secret,
		  const char *label, const uint8_t *nonce_s,
		  const uint8_t *nonce_c, const uint8_t *tail, size_t taillen,
		  uint8_t mac[TCP_MAC_LEN])
{
	uint8_t key[SECRET_KEY];
	crypto_auth_hmacsha256_state st;

	secret_key(group, secret, key);
	crypto_auth_hmacsha256_init(&st, key, sizeof key);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)label,
				      strlen(label));
	crypto_auth_hmacsha256_update(&st, nonce_s, TCP_NONCE_LEN);
	crypto_auth_hmacsha256_update(&st, nonce_c, TCP_NONCE_LEN);
	crypto_auth_hmacsha256_update(&st, tail, taillen);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_memzero(key, sizeof key);
	sodium_memzero(&st, sizeof st);
}

void tcp_auth_hello(const uint8_t *group, const uint8_t *secret,
		    const uint8_t *nonce_s, const uint8_t *nonce_c,
		    uint16_t flags, uint8_t mac[TCP_MAC_LEN])
{
	uint8_t f[2];

	le_put(f, flags, 2);
	proof(group, secret, "kvwire-data-v4", nonce_s, nonce_c, f, sizeof f,
	      mac);
}

void tcp_auth_welcome(const uint8_t *group, const uint8_t *secret,
		      const uint8_t *nonce_s, const uint8_t *nonce_c,
		      uint32_t status, uint8_t mac[TCP_MAC_LEN])
{
	uint8_t s[4];

	le_put(s, status, 4);
	proof(group, secret, "kvwire-welcome-v4", nonce_s, nonce_c, s,
	      sizeof s, mac);
}

int tcp_auth_same(const uint8_t *a, const uint8_t *b)
{
	return crypto_verify_32(a, b) == 0;
}

void tcp_auth_keys(const uint8_t *group, const uint8_t *secret,
		   const uint8_t *nonce_s, const uint8_t *nonce_c,
		   uint16_t flags, uint8_t c2s[32], uint8_t s2c[32])
{
	static const char label[] = "kvwire-conn-v4";
	uint8_t key[SECRET_KEY], k[32], f[2];
	crypto_generichash_state st;

	secret_key(group, secret, key);
	le_put(f, flags, 2);
	crypto_generichash_init(&st, key, sizeof key, sizeof k);
	crypto_generichash_update(&st, (const uint8_t *)label,
				  sizeof label - 1);
	crypto_generichash_update(&st, nonce_s, TCP_NONCE_LEN);
	crypto_generichash_update(&st, nonce_c, TCP_NONCE_LEN);
	crypto_generichash_update(&st, f, sizeof f);
	crypto_generichash_final(&st, k, sizeof k);
	crypto_generichash(c2s, 32, (const uint8_t *)"c2s", 3, k, sizeof k);
	crypto_generichash(s2c, 32, (const uint8_t *)"s2c", 3, k, sizeof k);
	sodium_memzero(key, sizeof key);
	sodium_memzero(k, sizeof k);
	sodium_memzero(&st, sizeof st);
}

void tcp_auth_fingerprint(const uint8_t *group, uint8_t fp[TCP_FP_LEN])
{
	uint8_t zero[TCP_GROUP_KEY_LEN] = { 0 }, h[32];

	crypto_generichash(h, sizeof h, group ? group : zero,
			   TCP_GROUP_KEY_LEN, NULL, 0);
	memcpy(fp, h, TCP_FP_LEN);
}

void tcp_auth_fp_hex(const uint8_t fp[TCP_FP_LEN], char out[17])
{
	for (unsigned i = 0; i < TCP_FP_LEN; i++)
		snprintf(out + 2 * i, 3, "%02x", fp[i]);
}
