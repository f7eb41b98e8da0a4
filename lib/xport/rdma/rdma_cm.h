/*
 * rdma_cm.h - the queue pair exchange of the rdma transport: a reliable
 * connection needs a queue pair at each end, each told the other's number
 * and first PSN. The decode side listens on a TCP port (rdma_serve.h, named
 * with a secret in the descriptor, rdma_desc.h); a prefill worker dials it
 * once per decode pool:
 *
 *   prefill -> decode  HELLO  magic "KVRH" u32 | version u16 (1) | 0 u16
 *                             | secret 16 | qpn u32 | psn u32 | lid u16
 *                             | mtu u8 | link layer u8 | gid 16      (52)
 *   decode -> prefill  REPLY  magic "KVRW" u32 | status u32 | qpn u32
 *                             | psn u32                              (16)
 *
 * Little-endian, field by field. On OK the decode has made a queue pair for
 * this connection alone (in RTR/RTS toward the hello's) and the prefill
 * brings its own to RTS. The TCP connection then stays open and silent for
 * the queue pair's life: its close (the worker disconnects, exits or dies)
 * makes the decode destroy that queue pair; anything sent on it is a
 * protocol breach and closes it too.
 */
#ifndef KVW_RDMA_CM_H
#define KVW_RDMA_CM_H

#include <stddef.h>
#include <stdint.h>

#include "rdma_qp.h"

#define RCM_VERSION 1u
#define RCM_HELLO_LEN 52u
#define RCM_REPLY_LEN 16u
#define RCM_MAGIC_HELLO 0x4852564Bu /* "KVRH" */
#define RCM_MAGIC_REPLY 0x5752564Bu /* "KVRW" */

enum rcm_status {
	RCM_OK = 0,
	RCM_BAD = 1,    /* a malformed hello */
	RCM_NORES = 2,  /* the decode could not make a queue pair */
	RCM_SECRET = 3, /* a wrong secret */
	RCM_LINK = 4,   /* the hello's link layer is not the decode's */
};

/* Encodes our end (qpn, psn, lid, gid, mtu, link) with the secret. */
void rcm_hello_encode(uint8_t out[RCM_HELLO_LEN], const uint8_t secret[16],
		      const struct rdma_peer *me);

/* Decodes an untrusted hello: 0, KVW_EVERSION (magic or version) or
 * KVW_EINVAL (length, flags, a field out of range). The secret is copied
 * out, not checked. */
int rcm_hello_decode(const uint8_t *p, size_t len, uint8_t secret[16],
		     struct rdma_peer *peer);

void rcm_reply_encode(uint8_t out[RCM_REPLY_LEN], uint32_t status,
		      uint32_t qpn, uint32_t psn);

/* 0 or KVW_EINVAL (length, magic, a qpn or psn over 24 bits). */
int rcm_reply_decode(const uint8_t *p, size_t len, uint32_t *status,
		     uint32_t *qpn, uint32_t *psn);

/* "wrong secret", "malformed hello", ... for a reply status. */
const char *rcm_status_str(uint32_t status);

/* Prefill side: dials host:port (numeric host) within timeout_ms, sends
 * the hello and reads the reply (each within timeout_ms). On OK, *fd is
 * the open connection (the caller keeps it for the queue pair's life) and
 * peer->qpn, peer->psn are the decode's. 0, KVW_ESYS (unreachable, closed,
 * timed out) or KVW_EPEER (the decode refused, err saying why). */
int rcm_exchange(const char *host, uint16_t port, const uint8_t secret[16],
		 const struct rdma_peer *me, int timeout_ms, int *fd,
		 struct rdma_peer *peer, char *err, size_t errlen);

#endif
