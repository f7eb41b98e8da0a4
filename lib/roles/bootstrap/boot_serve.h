/*
 * boot_serve.h - kv-bootstrap's process: one ROUTER on the listen endpoint
 * and one zmq_poll loop that hands each decoded request to boot_handle()
 * (boot.h) and sends its reply back to the asker. Malformed requests are
 * counted (malformed.h) and change nothing.
 */
#ifndef KVW_BOOT_SERVE_H
#define KVW_BOOT_SERVE_H

#include <stddef.h>

struct boot_serve; /* opaque */

/* Builds the rank table, then binds a ROUTER on listen (tcp:// or ipc://).
 * 0 and *out (the caller's, freed with boot_serve_close), or KVW_ENOMEM /
 * KVW_ESYS with the reason in err and *out NULL. */
int boot_serve_open(const char *listen, struct boot_serve **out, char *err,
		    size_t errlen);

/* Serves until proc_stopping() (SIGTERM/SIGINT): 0. KVW_ESYS with the
 * reason in err when the socket or its context fails. Either way it logs
 * how many ranks registered and how many requests were malformed. */
int boot_serve_run(struct boot_serve *s, char *err, size_t errlen);

/* Closes the socket and context and frees *s (half-built is fine). Accepts
 * NULL and *s == NULL; sets *s = NULL. */
void boot_serve_close(struct boot_serve **s);

#endif
