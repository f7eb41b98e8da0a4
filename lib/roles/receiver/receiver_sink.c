/*
 * receiver_sink.c - kv-receiver's sink processes, for a transport whose
 * decode side its own processes write (ops->sink_info: tcp). Each is
 * this program exec'd in sink mode with the transport's listening socket
 * as its one inherited descriptor and the registration's secret in its
 * environment (not on its command line, which every local user can read).
 * A sink that dies is restarted, at most once a second; they all get
 * SIGKILL with the receiver (proc_spawn), so no sink of a dead receiver
 * keeps writing into the pool. The fence they share with the receiver
 * (table/rtab_fence.h) and the destination grants they read
 * (table/rtab_grant.h) are made fresh before the first sink starts; a dead
 * sink's row is cleared only once it is reaped.
 */
#include "receiver_impl.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sink.h"
#include "base/log.h"
#include "base/proc.h"
#include "table/rtab_fence.h"
#include "table/rtab_grant.h"
#include "xport/xport.h"

#define SINK_HOLDOFF_NS 1000000000ull

/* The environment a sink runs with: this process's plus KVW_SINK_SECRET.
 * Built once, before any fork. */
static int sink_env(struct receiver *r, const uint8_t secret[16])
{
	extern char **environ;
	size_t n = 0, k = 0;
	char *var;

	while (environ[n])
		n++;
	r->sink_env = calloc(n + 2, sizeof *r->sink_env);
	var = malloc(sizeof "KVW_SINK_SECRET=" + 32);
	if (!r->sink_env || !var) {
		free(var);
		return KVW_ENOMEM;
	}
	strcpy(var, "KVW_SINK_SECRET=");
	for (unsigned i = 0; i < 16; i++)
		snprintf(var + 16 + 2 * i, 3, "%02x", secret[i]);
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "KVW_SINK_SECRET=", 16) != 0)
			r->sink_env[k++] = environ[i];
	r->sink_env[k++] = var; /* the last entry: freed at close */
	r->sink_env[k] = NULL;
	return 0;
}

static int spawn(struct receiver *r, uint32_t k, int fd)
{
	char idbuf[16], fdbuf[16];
	char *argv[16];
	int n = 0;
	pid_t pid;

	snprintf(idbuf, sizeof idbuf, "%u", k);
	snprintf(fdbuf, sizeof fdbuf, "%d", fd);
	argv[n++] = r->exe;
	argv[n++] = "--sink-id";
	argv[n++] = idbuf;
	argv[n++] = "--sink-fd";
	argv[n++] = fdbuf;
	argv[n++] = "--table";
	argv[n++] = r->table_path;
	argv[n++] = "--pool";
	argv[n++] = r->pool_path;
	argv[n] = NULL;
	pid = proc_spawn(argv, r->sink_env, fd);
	if (pid < 0)
		return KVW_ESYS;
	r->sink[k].pid = pid;
	r->sink[k].restart_ns = proc_now_ns() + SINK_HOLDOFF_NS;
	LOG(LOG_INFO, "sink %u started (pid %d)", k, (int)pid);
	return 0;
}

int receiver_sinks_start(struct receiver *r, char *err, size_t errlen)
{
	uint8_t secret[16];
	uint32_t own[KVW_MAX_STATE] = { 0 };
	char path[4096];
	int fd, rc;

	rc = xport_sink_info(r->xp, &fd, secret);
	if (rc)
		return kvw_errf(err, errlen, rc, "%s: no data port to serve",
				xport_ops_of(r->xp)->name);
	if (sink_env(r, secret) != 0)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	rc = sink_fence_path(r->table_path, path, sizeof path);
	if (rc == 0)
		rc = rtab_fence_create(path, r->nsinks, SINK_MAX_CONNS, &r->fence,
				       err, errlen);
	/* Fresh grants (none given), for this receiver's sinks only. */
	for (uint32_t c = 0; c < r->shape.nstate && c < KVW_MAX_STATE; c++)
		own[c] = r->shape.state[c].layers;
	if (rc == 0)
		rc = sink_grant_path(r->table_path, path, sizeof path);
	if (rc == 0)
		rc = rtab_grant_create(path, rtab_capacity(r->tab), r->bufs,
				       r->nbufs, own, &r->grant, err, errlen);
	if (rc)
		return rc;
	for (uint32_t k = 0; k < r->nsinks; k++)
		if (spawn(r, k, fd) != 0)
			return kvw_errf(err, errlen, KVW_ESYS, "sink %u: %s", k,
					strerror(errno));
	return 0;
}

void receiver_sinks_tick(struct receiver *r)
{
	uint8_t secret[16];
	uint64_t now = proc_now_ns();
	int fd, st;

	for (uint32_t k = 0; k < r->nsinks; k++) {
		struct rx_sink *s = &r->sink[k];

		if (s->pid > 0 && waitpid(s->pid, &st, WNOHANG) == s->pid) {
			LOG(LOG_ERROR, "sink %u (pid %d) %s %d; restarting", k,
			    (int)s->pid,
			    WIFSIGNALED(st) ? "killed by signal" : "exited",
			    WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
			s->pid = 0;
			/* Reaped: it writes nothing any more. */
			rtab_fence_reset(r->fence, k);
		}
		if (s->pid == 0 && now >= s->restart_ns &&
		    xport_sink_info(r->xp, &fd, secret) == 0 &&
		    spawn(r, k, fd) != 0)
			LOG_RL(LOG_ERROR, "sink %u: restart: %s", k,
			       strerror(errno));
	}
}

void receiver_sinks_stop(struct receiver *r)
{
	uint64_t end = proc_now_ns() + 2000000000ull;

	for (uint32_t k = 0; k < r->nsinks; k++)
		if (r->sink[k].pid > 0)
			kill(r->sink[k].pid, SIGTERM);
	for (uint32_t k = 0; k < r->nsinks; k++) {
		struct rx_sink *s = &r->sink[k];

		/* A sink ends its poll loop within 200 ms of SIGTERM. */
		while (s->pid > 0 && waitpid(s->pid, NULL, WNOHANG) == 0 &&
		       proc_now_ns() < end)
			usleep(10000);
		if (s->pid > 0 && waitpid(s->pid, NULL, WNOHANG) == 0) {
			kill(s->pid, SIGKILL);
			waitpid(s->pid, NULL, 0);
		}
		s->pid = 0;
	}
	if (r->fence) {
		char path[4096];

		rtab_fence_close(&r->fence);
		if (sink_fence_path(r->table_path, path, sizeof path) == 0)
			unlink(path);
	}
	if (r->grant) {
		char path[4096];

		rtab_grant_close(&r->grant);
		if (sink_grant_path(r->table_path, path, sizeof path) == 0)
			unlink(path);
	}
	if (r->sink_env) {
		size_t n = 0;

		while (r->sink_env[n])
			n++;
		if (n)
			free(r->sink_env[n - 1]);
		free(r->sink_env);
		r->sink_env = NULL;
	}
}
