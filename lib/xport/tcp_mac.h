/*
 * tcp_mac.h - the tags of tcp protocol v4 (tcp_proto.h, TCPV4.md): one
 * direction of one connection. With the group's keys a tag is GMAC
 * (AES-256-GCM through OpenSSL, AAD only; measured the fastest sound MAC
 * here, bench/README.md) under the direction's connection key, with the
 * IV (seq, kind) so no IV repeats under one key; with ENCRYPT the body is
 * AES-256-GCM proper. Without group keys (--insecure) a tag is the
 * unkeyed XXH3-128 of the same bytes: it catches a flipped bit, never an
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
	void *evp;      /* EVP_CIPHER_CTX, keyed; NULL: --insecure */
	void *xs;       /* XXH3_state_t (--insecure) */
	int sender;     /* 1: computes tags (encrypts), 0: checks (decrypts) */
};

/* key: TCP_KEY_LEN bytes, or NULL for --insecure. 0 or KVW_ENOMEM. */
int tcp_mac_init(struct tcp_mac *m, const uint8_t *key, int sender);
void tcp_mac_free(struct tcp_mac *m);

/* Starts one tag. */
void tcp_mac_begin(struct tcp_mac *m, uint64_t seq, enum tcp_tag_kind kind);
/* Bytes covered by the tag, not encrypted. */
void tcp_mac_add(struct tcp_mac *m, const void *p, size_t n);
/* ENCRYPT only (keyed): n bytes from in to out (may be equal), encrypted
 * by a sender, decrypted by a receiver; covered by the tag. After every
 * tcp_mac_add of this tag. */
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
