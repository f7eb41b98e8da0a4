/*
 * rdma_cm.c - the queue pair exchange's messages and its prefill side
 * (rdma_cm.h). The decode side is rdma_serve.c.
 */
#include "rdma_cm.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/kvw.h"
#include "base/le.h"
#include "xport/xnet.h"

void rcm_hello_encode(uint8_t out[RCM_HELLO_LEN], const uint8_t secret[16],
		      const struct rdma_peer *me)
{
	le_put(out, RCM_MAGIC_HELLO, 4);
	le_put(out + 4, RCM_VERSION, 2);
	le_put(out + 6, 0, 2);
	memcpy(out + 8, secret, 16);
	le_put(out + 24, me->qpn, 4);
	le_put(out + 28, me->psn, 4);
	le_put(out + 32, me->lid, 2);
	out[34] = me->mtu;
	out[35] = me->link;
	memcpy(out + 36, me->gid, 16);
}

int rcm_hello_decode(const uint8_t *p, size_t len, uint8_t secret[16],
		     struct rdma_peer *peer)
{
	if (len < 6 || le_get(p, 4) != RCM_MAGIC_HELLO ||
	    le_get(p + 4, 2) != RCM_VERSION)
		return KVW_EVERSION;
	if (len != RCM_HELLO_LEN || le_get(p + 6, 2) != 0)
		return KVW_EINVAL;
	memset(peer, 0, sizeof *peer);
	memcpy(secret, p + 8, 16);
	peer->qpn = (uint32_t)le_get(p + 24, 4);
	peer->psn = (uint32_t)le_get(p + 28, 4);
	peer->lid = (uint16_t)le_get(p + 32, 2);
	peer->mtu = p[34];
	peer->link = p[35];
	memcpy(peer->gid, p + 36, 16);
	/* QP numbers 0 and 1 are the special management pairs. */
	if (peer->qpn < 2 || peer->qpn > 0xffffff || peer->psn > 0xffffff ||
	    peer->mtu < 1 || peer->mtu > 5 ||
	    (peer->link != 1 && peer->link != 2))
		return KVW_EINVAL;
	return 0;
}

void rcm_reply_encode(uint8_t out[RCM_REPLY_LEN], uint32_t status,
		      uint32_t qpn, uint32_t psn)
{
	le_put(out, RCM_MAGIC_REPLY, 4);
	le_put(out + 4, status, 4);
	le_put(out + 8, qpn, 4);
	le_put(out + 12, psn, 4);
}

int rcm_reply_decode(const uint8_t *p, size_t len, uint32_t *status,
		     uint32_t *qpn, uint32_t *psn)
{
	if (len != RCM_REPLY_LEN || le_get(p, 4) != RCM_MAGIC_REPLY)
		return KVW_EINVAL;
	*status = (uint32_t)le_get(p + 4, 4);
	*qpn = (uint32_t)le_get(p + 8, 4);
	*psn = (uint32_t)le_get(p + 12, 4);
	if (*status == RCM_OK && (*qpn < 2 || *qpn > 0xffffff || *psn > 0xffffff))
		return KVW_EINVAL;
	return 0;
}

const char *rcm_status_str(uint32_t status)
{
	switch (status) {
	case RCM_OK: return "ok";
	case RCM_BAD: return "malformed hello";
	case RCM_NORES: return "no queue pair to spare";
	case RCM_SECRET: return "wrong secret";
	case RCM_LINK: return "link layers differ";
	default: return "unknown status";
	}
}

int rcm_exchange(const char *host, uint16_t port, const uint8_t secret[16],
		 const struct rdma_peer *me, int timeout_ms, int *fd,
		 struct rdma_peer *peer, char *err, size_t errlen)
{
	uint8_t hello[RCM_HELLO_LEN], reply[RCM_REPLY_LEN];
	uint32_t st, qpn, psn;
	char why[200];
	int s;

	*fd = -1;
	s = xnet_dial(host, port, timeout_ms, timeout_ms, why, sizeof why);
	if (s < 0)
		return kvw_errf(err, errlen, KVW_ESYS,
				"rdma: queue pair exchange: %s", why);
	rcm_hello_encode(hello, secret, me);
	if (xnet_io_all(s, hello, sizeof hello, 1) < 0 ||
	    xnet_io_all(s, reply, sizeof reply, 0) < 0) {
		kvw_seterr(err, errlen,
			   "rdma: queue pair exchange with %.64s:%u: %s", host,
			   port, strerror(errno));
		close(s);
		return KVW_ESYS;
	}
	if (rcm_reply_decode(reply, sizeof reply, &st, &qpn, &psn) < 0) {
		close(s);
		return kvw_errf(err, errlen, KVW_EPEER,
				"rdma: %.64s:%u sent a malformed reply", host,
				port);
	}
	if (st != RCM_OK) {
		close(s);
		return kvw_errf(err, errlen, KVW_EPEER,
				"rdma: %.64s:%u refused the queue pair: %s",
				host, port, rcm_status_str(st));
	}
	peer->qpn = qpn;
	peer->psn = psn;
	*fd = s;
	return 0;
}
