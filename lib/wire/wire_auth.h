/*
 * wire_auth.h - who may talk to a kvwire socket on the network. The policy
 * is process-wide and chosen once, at start, before any socket exists:
 *
 *   keys (wire_auth_use):  every tcp:// bind is a CURVE server with the
 *       group's server key, and a ZAP handler in the socket's context
 *       admits only the group's client key; every tcp:// connect is a
 *       CURVE client with the group's client key that checks the server
 *       key. Traffic is encrypted; a peer without the keys never gets a
 *       frame through.
 *   insecure (wire_auth_insecure): tcp:// runs without authentication,
 *       and every such bind says so in the log (--insecure).
 *   neither: a tcp:// bind or connect is refused (fail-closed).
 *
 * ipc:// and inproc:// are left alone: their protection is the file
 * system (the run directory's modes).
 */
#ifndef KVW_WIRE_AUTH_H
#define KVW_WIRE_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "base/keys.h"

enum wire_auth_mode {
	WIRE_AUTH_UNSET = 0,   /* tcp:// refused */
	WIRE_AUTH_KEYS = 1,
	WIRE_AUTH_INSECURE = 2,
};

/* Chooses the policy (k is copied). Call before the first socket. */
void wire_auth_use(const struct keys *k);
void wire_auth_insecure(void);
enum wire_auth_mode wire_auth_mode(void);

/* Applies the policy to sock before it binds (server) or connects
 * (client) to ep: nothing for ipc:// or inproc://; for tcp:// the CURVE
 * options, or KVW_EINVAL "... needs the group's keys (--keys DIR) or
 * --insecure" with err when no policy was chosen. */
int wire_auth_server(void *sock, const char *ep, char *err, size_t errlen);
int wire_auth_client(void *sock, const char *ep, char *err, size_t errlen);

/* With keys: starts ctx's ZAP handler (at most once per context), a
 * thread that answers libzmq's authentication requests - 200 for the
 * group's client key, 400 for anything else - and ends when ctx is
 * terminated. A no-op otherwise. 0, KVW_ENOMEM or KVW_ESYS with err. */
int wire_auth_zap_start(void *ctx, char *err, size_t errlen);

/* The group's data key into out (the tcp data port proves it: the
 * transport's tcp_auth.h): 1 with keys in use, else 0 (out untouched). */
int wire_auth_data_key(uint8_t out[KEYS_DATA]);

/* With keys: counts and logs (rate-limited, naming the peer and the
 * keys' fingerprints) the CURVE handshakes that fail on sock (of ctx),
 * with a socket monitor and a thread that ends with the socket or the
 * context. server != 0 (a ROUTER): those that fail before its ZAP handler
 * is asked (another group's server key, no CURVE at all); server == 0 (a
 * DEALER or REQ that dials): the peer refusing our client key, a protocol
 * failure, or the peer closing the connection before the handshake
 * completed. A no-op otherwise. 0 or KVW_ESYS with err. */
int wire_auth_watch(void *ctx, void *sock, int server, char *err,
		    size_t errlen);

/* The group's fingerprint (keys.h, keys_group_fp) into out: 1 with keys
 * in use, else 0 (out untouched). */
int wire_auth_group_fp(char out[KEYS_FP]);

/* Handshakes this process refused or saw fail: by its ZAP handlers, and
 * on a watched socket (server or client). */
uint64_t wire_auth_refused(void);

#endif
