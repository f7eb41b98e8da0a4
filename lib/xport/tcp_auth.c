/*
 * tcp_auth.c - the handshake proof of tcp_auth.h, with libsodium's
 * HMAC-SHA256 and constant-time compare: no hand-made crypto.
 */
#include "tcp_auth.h"

#include <sodium.h>
#include <string.h>

#define LABEL "kvwire-data-v3"

void tcp_auth_mac(const uint8_t *group, const uint8_t secret[TCP_SECRET_LEN],
		  const uint8_t nonce[TCP_NONCE_LEN], uint8_t mac[TCP_MAC_LEN])
{
	uint8_t key[TCP_GROUP_KEY_LEN + TCP_SECRET_LEN] = { 0 };
	crypto_auth_hmacsha256_state st;

	if (group)
		memcpy(key, group, TCP_GROUP_KEY_LEN);
	memcpy(key + TCP_GROUP_KEY_LEN, secret, TCP_SECRET_LEN);
	crypto_auth_hmacsha256_init(&st, key, sizeof key);
	crypto_auth_hmacsha256_update(&st, (const uint8_t *)LABEL,
				      sizeof LABEL - 1);
	crypto_auth_hmacsha256_update(&st, nonce, TCP_NONCE_LEN);
	crypto_auth_hmacsha256_final(&st, mac);
	sodium_memzero(key, sizeof key);
	sodium_memzero(&st, sizeof st);
}

int tcp_auth_ok(const uint8_t *group, const uint8_t secret[TCP_SECRET_LEN],
		const uint8_t nonce[TCP_NONCE_LEN],
		const uint8_t mac[TCP_MAC_LEN])
{
	uint8_t want[TCP_MAC_LEN];
	int ok;

	tcp_auth_mac(group, secret, nonce, want);
	ok = crypto_verify_32(want, mac) == 0;
	sodium_memzero(want, sizeof want);
	return ok;
}
