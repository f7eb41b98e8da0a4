/*
 * tcp_auth.h - the tcp data port's handshake (protocol v4, docs/TCP-V4.md). The
 * sink sends a fresh 16-byte challenge on every connection; the client
 * answers with its own nonce and HMAC-SHA256 (libsodium) keyed by the
 * group's data key and the registration's secret over a fixed label, both
 * nonces and the flags; the sink's WELCOME carries the same kind of proof
 * back. Both sides then derive the connection's keys, one per direction,
 * from the same secret material and both nonces: so the secret never
 * travels, a recorded connection is worthless on the next, and every
 * batch and ACK after the handshake is authenticated (tcp_mac.h). Without
 * group keys the data key is all zeros and the secret alone protects.
 */
#ifndef KVW_TCP_AUTH_H
#define KVW_TCP_AUTH_H

#include <stdint.h>

#include "tcp_proto.h"

#define TCP_GROUP_KEY_LEN 32u
#define TCP_MAC_LEN 32u
#define TCP_FP_LEN 8u

/* HELLO's mac: HMAC-SHA256(group || secret, "kvwire-data-v4" || nonce_s
 * || nonce_c || flags u16). group may be NULL (zeros). */
void tcp_auth_hello(const uint8_t *group, const uint8_t *secret,
		    const uint8_t *nonce_s, const uint8_t *nonce_c,
		    uint16_t flags, uint8_t mac[TCP_MAC_LEN]);

/* WELCOME's mac: the same key over "kvwire-welcome-v4" || nonce_s ||
 * nonce_c || status u32. */
void tcp_auth_welcome(const uint8_t *group, const uint8_t *secret,
		      const uint8_t *nonce_s, const uint8_t *nonce_c,
		      uint32_t status, uint8_t mac[TCP_MAC_LEN]);

/* 1 when a and b (TCP_MAC_LEN bytes) are equal, in constant time. */
int tcp_auth_same(const uint8_t *a, const uint8_t *b);

/* The connection's keys (32 bytes each): client -> sink and back. */
void tcp_auth_keys(const uint8_t *group, const uint8_t *secret,
		   const uint8_t *nonce_s, const uint8_t *nonce_c,
		   uint16_t flags, uint8_t c2s[32], uint8_t s2c[32]);

/* The first 8 bytes of BLAKE2b(group data key) (zeros for NULL): names the
 * key in a log line without giving it away. */
void tcp_auth_fingerprint(const uint8_t *group, uint8_t fp[TCP_FP_LEN]);

/* fp as 16 hex digits and a NUL. */
void tcp_auth_fp_hex(const uint8_t fp[TCP_FP_LEN], char out[17]);

#endif
