/*
 * xport_tcp.h - the tcp transport's calls (xport_tcp.c) beyond its ops
 * table, for tests and kv-bench that drive one tcp instance by hand. Roles
 * never include it: the ops table's optional entries (xport.h) carry the
 * same to them without the name.
 */
#ifndef KVW_XPORT_TCP_H
#define KVW_XPORT_TCP_H

#include <stddef.h>
#include <stdint.h>

#include "xport/xport.h"

/* ops->listen: decode side, before xport_register: listen on HOST[:PORT]
 * (numeric host; port 0 or none: a free one) with a fresh random secret;
 * the registration's descriptor then names them. 0, KVW_EINVAL (bad
 * address or not a tcp instance), KVW_EEXIST or KVW_ESYS. */
int xport_tcp_listen(struct xport *x, const char *hostport, char *err,
		     size_t errlen);
/* ops->sink_info: the listening socket (still owned by x) and the secret,
 * for the sink processes that serve it. 0, KVW_EINVAL or KVW_ENOENT (not
 * listening). */
int xport_tcp_sink_info(const struct xport *x, int *listen_fd,
			uint8_t secret[16]);
/* ops->set_group_key: the group's 32-byte data key (base/keys.h), which
 * every data connection this instance dials proves it holds (tcp_auth.h).
 * Without it the registration's secret alone does. 0, or KVW_EINVAL (not
 * tcp). */
int xport_tcp_set_group_key(struct xport *x, const uint8_t key[32]);

/* Ask every sink for ENCRYPT (AES-256-GCM payloads; needs the group's
 * keys). 0 or KVW_EINVAL (not tcp). */
int xport_tcp_set_encrypt(struct xport *x, int on);

/* ops->set_incarnation (a no-op elsewhere): the incarnation (the decode
 * room's XFER_INFO token) the next batches carry; xport_set_room resets
 * it to 0. The sink discards a batch of another incarnation. */
void xport_tcp_set_incarnation(struct xport *x, uint64_t inc);

/* ops->counts (zeros elsewhere): data connections re-dialled, batches sent
 * again on them, and ACKs or batches that failed integrity, over the
 * instance's life. */
void xport_tcp_counts(const struct xport *x, uint64_t *redials,
		      uint64_t *resent, uint64_t *integrity);

/* ops->address: "HOST:PORT" the registration listens on, into buf[len]; 0
 * or KVW_ENOENT (not listening). */
int xport_tcp_address(const struct xport *x, char *buf, size_t len);

#endif
