/*
 * tcp_auth.h - the tcp data port's handshake proof. The sink sends a fresh
 * 16-byte challenge on every connection; the client answers with
 * HMAC-SHA256 (libsodium) keyed by the group's data key and the
 * registration's secret, over a fixed label and the challenge. So the
 * secret never travels on the data connection, a recorded answer is
 * worthless on the next connection, and with the group's keys in use a
 * peer needs both the keys and a live registration's secret. Without
 * group keys the data key is all zeros and the secret alone protects.
 */
#ifndef KVW_TCP_AUTH_H
#define KVW_TCP_AUTH_H

#include <stdint.h>

#include "tcp_proto.h"

#define TCP_GROUP_KEY_LEN 32u
#define TCP_MAC_LEN 32u

/* mac = HMAC-SHA256(group || secret, "kvwire-data-v3" || nonce); group may
 * be NULL (zeros). */
void tcp_auth_mac(const uint8_t *group, const uint8_t secret[TCP_SECRET_LEN],
		  const uint8_t nonce[TCP_NONCE_LEN], uint8_t mac[TCP_MAC_LEN]);

/* 1 when mac is the right answer (compared in constant time), else 0. */
int tcp_auth_ok(const uint8_t *group, const uint8_t secret[TCP_SECRET_LEN],
		const uint8_t nonce[TCP_NONCE_LEN],
		const uint8_t mac[TCP_MAC_LEN]);

#endif
