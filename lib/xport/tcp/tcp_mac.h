/*
 * tcp_mac.h - the tags of tcp protocol v4 (tcp_proto.h, docs/TCP-V4.md): one
 * direction of one connection. With the group's keys a tag is Poly1305
 * (OpenSSL) under a one-time key per tag, drawn from ChaCha20 under the
 * direction's connection key with the nonce (seq, kind), so no key is
 * used twice (RFC 8439's construction; measured the fastest sound MAC
 * here, bench/README.md); with ENCRYPT the body is AES-256-GCM with the
 * IV (seq, kind). Without group keys (--insecure) a tag is the unkeyed
 * XXH3-128 of the same bytes: it catches a flipped bit, never an
 * attacker. A sender's side computes tags, a receiver's side checks them
 * (and decrypts).
 */
#ifndef KVW_TCP_MAC_H
#define KVW_TCP_MAC_H

#include <stddef.h>
#include <stdint.h>

#define TCP_TAG_LEN 16u
#define TCP_KEY_LEN 32u

enum tcp_tag_kind { TCP_TAG_HEAD = 0, TCP_TAG_BODY = 1, TCP_TAG_ACK = 2 };

struct tcp_mac {
	void *poly;     /* EVP_MAC_CTX (Poly1305); NULL: --insecure */
	void *otk;      /* EVP_CIPHER_CTX: ChaCha20, the one-time keys */
	void *gcm;      /* EVP_CIPHER_CTX: AES-256-GCM (ENCRYPT bodies) */
	void *xs;       /* XXH3_state_t (--insecure) */
	int sender;     /* 1: computes tags (encrypts), 0: checks (decrypts) */
	int mode;       /* the tag under way: xxh3, Poly1305 or GCM */
};

/* key: TCP_KEY_LEN bytes, or NULL for --insecure. 0 or KVW_ENOMEM. */
int tcp_mac_init(struct tcp_mac *m, const uint8_t *key, int sender);
void tcp_mac_free(struct tcp_mac *m);

/* Starts one tag. */
void tcp_mac_begin(struct tcp_mac *m, uint64_t seq, enum tcp_tag_kind kind);
/* Starts an ENCRYPT body (keyed only): AES-256-GCM, IV (seq, BODY). */
void tcp_mac_begin_sealed(struct tcp_mac *m, uint64_t seq);
/* Bytes covered by the tag, not encrypted. */
void tcp_mac_add(struct tcp_mac *m, const void *p, size_t n);
/* After tcp_mac_begin_sealed only: n bytes from in to out (may be
 * equal), encrypted by a sender, decrypted by a receiver; covered by the
 * tag. After every tcp_mac_add of this tag. */
void tcp_mac_crypt(struct tcp_mac *m, const uint8_t *in, uint8_t *out,
		   size_t n);
/* Sender: the tag. */
void tcp_mac_final(struct tcp_mac *m, uint8_t tag[TCP_TAG_LEN]);
/* Receiver: 1 when tag is right (constant time), else 0. */
int tcp_mac_check(struct tcp_mac *m, const uint8_t tag[TCP_TAG_LEN]);

/* One whole tag over p[0..n) (head and ACK tags). */
void tcp_mac_one(struct tcp_mac *m, uint64_t seq, enum tcp_tag_kind kind,
		 const void *p, size_t n, uint8_t tag[TCP_TAG_LEN]);

#endif
