/*
 * serve.c - kv-stat --serve (see serve.h). libmicrohttpd answers on its
 * own polling thread, one connection at a time, so the tables are loaded
 * and rendered by one thread only; the main thread waits for SIGINT or
 * SIGTERM with sigwait (both blocked before the daemon's thread starts).
 */
#include "serve.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prom.h"

#define CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

int serve_parse_addr(const char *addr, char *host, size_t hostlen,
		     unsigned *port, char *err, size_t errlen)
{
	const char *colon = strrchr(addr, ':'), *p = colon ? colon + 1 : addr;
	size_t hl = colon ? (size_t)(colon - addr) : 0;
	struct in_addr ia;
	char *end;
	unsigned long v;

	v = strtoul(p, &end, 10);
	if (*p == '\0' || *end != '\0' || v > 65535)
		return kvw_errf(err, errlen, KVW_EINVAL, "bad port in %s",
				addr);
	if (hl == 0 || (hl == 9 && strncmp(addr, "localhost", 9) == 0))
		snprintf(host, hostlen, "127.0.0.1");
	else if (hl < hostlen)
		snprintf(host, hostlen, "%.*s", (int)hl, addr);
	else
		return kvw_errf(err, errlen, KVW_EINVAL, "bad host in %s",
				addr);
	if (inet_pton(AF_INET, host, &ia) != 1)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"bad host in %s (an IPv4 address)", addr);
	*port = (unsigned)v;
	return 0;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code,
			     char *body, size_t len, enum MHD_ResponseMemoryMode mode)
{
	struct MHD_Response *r =
		MHD_create_response_from_buffer(len, body, mode);
	enum MHD_Result ok;

	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, CONTENT_TYPE);
	ok = MHD_queue_response(c, code, r);
	MHD_destroy_response(r);
	return ok;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c,
			      const char *url, const char *method,
			      const char *version, const char *upload,
			      size_t *upload_len, void **ctx)
{
	static char not_found[] = "not found: try /metrics\n";
	static char bad_method[] = "only GET\n";
	static char no_mem[] = "out of memory\n";
	struct tables *ts = cls;
	size_t len = 0;
	char *text;

	(void)version;
	(void)upload;
	(void)upload_len;
	(void)ctx;
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, bad_method,
			     strlen(bad_method), MHD_RESPMEM_PERSISTENT);
	if (strcmp(url, "/metrics") != 0)
		return reply(c, MHD_HTTP_NOT_FOUND, not_found,
			     strlen(not_found), MHD_RESPMEM_PERSISTENT);
	if (tables_load(ts) < 0) {
		/* The endpoints file is gone: nothing to show, not an error
		 * of this server. */
		text = strdup("");
	} else {
		text = prom_text(ts->tb, ts->n, &len);
	}
	tables_unload(ts);
	if (!text)
		return reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, no_mem,
			     strlen(no_mem), MHD_RESPMEM_PERSISTENT);
	return reply(c, MHD_HTTP_OK, text, len, MHD_RESPMEM_MUST_FREE);
}

int serve_run(struct tables *ts, const char *host, unsigned port, char *err,
	      size_t errlen)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	struct MHD_Daemon *d;
	const union MHD_DaemonInfo *di;
	sigset_t set;
	int sig;

	sa.sin_port = htons((uint16_t)port);
	inet_pton(AF_INET, host, &sa.sin_addr);
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO,
			     (uint16_t)port, NULL, NULL, answer, ts,
			     MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
			     MHD_OPTION_CONNECTION_TIMEOUT, 10u,
			     MHD_OPTION_END);
	if (!d)
		return kvw_errf(err, errlen, KVW_ESYS,
				"unable to listen on %s:%u", host, port);
	di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	printf("kv-stat: serving http://%s:%u/metrics\n", host,
	       di ? (unsigned)di->port : port);
	fflush(stdout);
	sigwait(&set, &sig);
	MHD_stop_daemon(d);
	return 0;
}
