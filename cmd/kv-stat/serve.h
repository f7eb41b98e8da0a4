/*
 * serve.h - kv-stat --serve: answers GET /metrics over HTTP (libmicrohttpd)
 * with the Prometheus text of the tables as they are at each request.
 */
#ifndef KVSTAT_SERVE_H
#define KVSTAT_SERVE_H

#include <stddef.h>

#include "tables.h"

/* Parses ADDR: "PORT", ":PORT" or "IPV4:PORT" ("localhost" is 127.0.0.1);
 * no host means loopback. 0, or KVW_EINVAL with text in err. */
int serve_parse_addr(const char *addr, char *host, size_t hostlen,
		     unsigned *port, char *err, size_t errlen);

/* Serves until SIGINT or SIGTERM. Writes one line "kv-stat: serving
 * http://HOST:PORT/metrics" to stdout (flushed) once it listens (PORT is
 * the bound one when 0 was asked). Returns 0, or a negative KVW_E* with
 * text in err when it cannot listen. */
int serve_run(struct tables *ts, const char *host, unsigned port, char *err,
	      size_t errlen);

#endif
