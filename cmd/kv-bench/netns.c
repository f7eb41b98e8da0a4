/*
 * netns.c - the two namespaces of kv-bench demo --netns (netns.h), made
 * and removed with iproute2's `ip` (a child per command, bounded waits:
 * spawn.c), and the split group started in them the way two hosts start
 * one (tests/bats/netns.bats does the same by hand).
 */
#include "netns.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/kvw.h"
#include "base/proc.h"
#include "common/cli.h"
#include "spawn.h"

/* iproute2's ip, where Debian puts it (spawn_run_wait does not search). */
static const char *ip_path(void)
{
	static const char *const where[] = { "/usr/sbin/ip", "/sbin/ip",
					     "/usr/bin/ip", "/bin/ip" };

	for (size_t i = 0; i < sizeof where / sizeof where[0]; i++)
		if (access(where[i], X_OK) == 0)
			return where[i];
	return NULL;
}

/* Runs `ip ARGS...` (NULL-ended), 10 s at most: its exit status. */
static int ip(const char *a0, ...)
{
	char *argv[24];
	const char *p = ip_path();
	va_list ap;
	int n = 0;

	if (!p)
		return -1;
	argv[n++] = (char *)(uintptr_t)p;
	va_start(ap, a0);
	for (const char *a = a0; a && n < 23; a = va_arg(ap, const char *))
		argv[n++] = (char *)(uintptr_t)a;
	va_end(ap);
	argv[n] = NULL;
	return spawn_run_wait(argv, 10);
}

static int link_up(const struct bench_netns *n)
{
	char cmd[256];
	char *argv[] = { "/bin/sh", "-c", cmd, NULL };

	snprintf(cmd, sizeof cmd,
		 "%s -n %s -br link show %s | grep -q ' UP ' && "
		 "%s -n %s -br link show %s | grep -q ' UP '",
		 ip_path(), n->ns[0], n->veth[0], ip_path(), n->ns[1],
		 n->veth[1]);
	return spawn_run_wait(argv, 10) == 0;
}

int netns_make(struct bench_netns *n, char *err, size_t errlen)
{
	uint64_t end;
	int rc = 0;

	memset(n, 0, sizeof *n);
	if (geteuid() != 0)
		return kvw_errf(err, errlen, -1, "--netns makes network "
				"namespaces: run kv-bench as root");
	if (!ip_path())
		return kvw_errf(err, errlen, -1, "--netns needs iproute2's ip "
				"(apt-get install iproute2)");
	for (int i = 0; i < 2; i++) {
		snprintf(n->veth[i], sizeof n->veth[i], "kvb%d%c",
			 (int)getpid(), 'a' + i);
		snprintf(n->ns[i], sizeof n->ns[i], "kvwbench%d%c",
			 (int)getpid(), 'a' + i);
		if (ip("netns", "add", n->ns[i], NULL) != 0) {
			n->ns[i][0] = '\0';
			netns_free(n);
			return kvw_errf(err, errlen, -1, "ip netns add failed "
					"(network namespaces do not work "
					"here?)");
		}
	}
	rc |= ip("link", "add", n->veth[0], "netns", n->ns[0], "type", "veth",
		 "peer", "name", n->veth[1], "netns", n->ns[1], NULL);
	for (int i = 0; i < 2 && rc == 0; i++) {
		rc |= ip("-n", n->ns[i], "link", "set", "lo", "up", NULL);
		rc |= ip("-n", n->ns[i], "addr", "add",
			 i ? NETNS_ADDR_B "/30" : NETNS_ADDR_A "/30", "dev",
			 n->veth[i], NULL);
		rc |= ip("-n", n->ns[i], "link", "set", n->veth[i], "up",
			 NULL);
	}
	end = proc_now_ns() + 10000000000ull;
	while (rc == 0 && !link_up(n)) {
		if (proc_now_ns() > end || proc_stopping()) {
			rc = -1;
			break;
		}
		usleep(20000);
	}
	if (rc != 0) {
		netns_free(n);
		return kvw_errf(err, errlen, -1, "the veth link between the two "
				"namespaces did not come up");
	}
	return 0;
}

/* DIR/endpoints for one kv-bench over both sides: the prefill side's
 * members, the decode side's but its own bootstrap, then the shape (as
 * netns.bats writes it). */
static int join_endpoints(const struct bench_netns *n)
{
	static const char *const part[2] = { "p", "d" };
	char path[320], line[1024];
	FILE *out, *in;
	int rc = 0;

	snprintf(path, sizeof path, "%s/endpoints", n->dir);
	out = fopen(path, "w");
	if (!out)
		return -1;
	for (int pass = 0; pass < 3 && rc == 0; pass++) {
		snprintf(path, sizeof path, "%s/%s/endpoints", n->dir,
			 part[pass == 1]);
		if (!(in = fopen(path, "r"))) {
			rc = -1;
			break;
		}
		while (fgets(line, sizeof line, in)) {
			int shape = strncmp(line, "shape=", 6) == 0;

			if (pass == 2 ? shape
				      : !shape && !(pass == 1 &&
						    strncmp(line, "member=bootstrap",
							    16) == 0))
				fputs(line, out);
		}
		fclose(in);
	}
	return fclose(out) == 0 ? rc : -1;
}

int netns_group_start(struct bench_netns *n, const char *kv_up,
		      char *const *args, char *err, size_t errlen)
{
	char keygen[4096 + 16], keys[300], side[2][300], *slash;
	char *argv[512];
	int rc;

	snprintf(n->kv_up, sizeof n->kv_up, "%s", kv_up);
	if ((rc = spawn_mkdtemp(n->dir, sizeof n->dir)) != 0) {
		n->dir[0] = '\0';
		return kvw_errf(err, errlen, -1, "mkdtemp in %s: %s",
				cli_tmpdir(), strerror(rc));
	}
	snprintf(keygen, sizeof keygen, "%s", kv_up);
	slash = strrchr(keygen, '/');
	snprintf(slash ? slash + 1 : keygen,
		 sizeof keygen - (size_t)(slash ? slash + 1 - keygen : 0),
		 "kv-keygen");
	snprintf(keys, sizeof keys, "%s/keys", n->dir);
	{
		/* Its "keys in DIR" line would break --json's one document. */
		char *kg[] = { "/bin/sh", "-c", "exec \"$0\" \"$1\" >/dev/null",
			       keygen, keys, NULL };

		if (spawn_run_wait(kg, 30) != 0)
			return kvw_errf(err, errlen, -1, "%s %s failed", keygen,
					keys);
	}
	for (int i = 0; i < 2; i++) {
		int k = 0;

		snprintf(side[i], sizeof side[i], "%s/%s", n->dir,
			 i ? "d" : "p");
		argv[k++] = (char *)(uintptr_t)ip_path();
		argv[k++] = "netns";
		argv[k++] = "exec";
		argv[k++] = n->ns[i];
		argv[k++] = n->kv_up;
		argv[k++] = "--daemon";
		argv[k++] = "--run-dir";
		argv[k++] = side[i];
		argv[k++] = "--role";
		argv[k++] = i ? "decode" : "prefill";
		argv[k++] = "--advertise";
		argv[k++] = i ? NETNS_ADDR_B : NETNS_ADDR_A;
		argv[k++] = "--keys";
		argv[k++] = keys;
		if (i) {
			argv[k++] = "--bootstrap";
			argv[k++] = "tcp://" NETNS_ADDR_A ":17000";
		}
		for (char *const *a = args; a && *a && k < 511; a++)
			argv[k++] = *a;
		argv[k] = NULL;
		n->up[i] = 1; /* from here on, stop cleans up what started */
		rc = spawn_run_wait(argv, 120);
		if (rc == 77 || rc == 100) {
			/* Refused before it made anything: its reason is
			 * on stderr already, and there are no logs. */
			n->up[i] = 0;
			return kvw_errf(err, errlen, -1, "kv-up --role %s in "
					"namespace %s exited %d",
					i ? "decode" : "prefill", n->ns[i], rc);
		}
		if (rc != 0) {
			n->keep = 1;
			return kvw_errf(err, errlen, -1, "kv-up --role %s in "
					"namespace %s exited %d (logs kept in "
					"%s/logs)", i ? "decode" : "prefill",
					n->ns[i], rc, side[i]);
		}
	}
	if (join_endpoints(n) != 0)
		return kvw_errf(err, errlen, -1, "unable to write %s/endpoints",
				n->dir);
	return 0;
}

void netns_free(struct bench_netns *n)
{
	int keep = n->keep;

	for (int i = 1; i >= 0; i--) {
		char side[300];
		char *argv[] = { (char *)(uintptr_t)ip_path(), "netns", "exec",
				 n->ns[i], n->kv_up, "--stop", side, NULL };

		if (!n->up[i])
			continue;
		snprintf(side, sizeof side, "%s/%s", n->dir, i ? "d" : "p");
		if (spawn_run_wait(argv, 30) != 0)
			fprintf(stderr, "kv-bench: kv-up --stop %s failed\n",
				side);
		n->up[i] = 0;
	}
	if (n->dir[0] && !keep)
		spawn_remove_dir(n->dir);
	if (!keep)
		n->dir[0] = '\0';
	for (int i = 0; i < 2; i++) {
		if (n->ns[i][0] && ip("netns", "del", n->ns[i], NULL) != 0)
			fprintf(stderr, "kv-bench: ip netns del %s failed\n",
				n->ns[i]);
		n->ns[i][0] = '\0';
	}
}

int netns_enter(const struct bench_netns *n, int i, int *saved)
{
	char path[64];
	int fd, e;

	*saved = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	snprintf(path, sizeof path, "/run/netns/%s", n->ns[i]);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (*saved < 0 || fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
		e = errno;
		if (fd >= 0)
			close(fd);
		if (*saved >= 0)
			close(*saved);
		*saved = -1;
		errno = e;
		return -1;
	}
	close(fd);
	return 0;
}

void netns_leave(int saved)
{
	if (saved < 0)
		return;
	/* Back where the thread was: its own namespace outlives any run. */
	if (setns(saved, CLONE_NEWNET) != 0)
		fprintf(stderr, "kv-bench: unable to leave a network namespace "
			"(a later stream limit may be measured inside it): %s\n",
			strerror(errno));
	close(saved);
}
