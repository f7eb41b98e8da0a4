/*
 * spawn.c - kv-bench's private group (see spawn.h). Both kv-up calls run
 * as children with a bounded wait: a hung kv-up is killed, never waited on
 * forever.
 */
#include "spawn.h"
#include "base/kvw.h"

#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/proc.h"
#include "common/cli.h"

static int rm_one(const char *path, const struct stat *st, int flag,
		  struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

void spawn_remove_dir(const char *dir)
{
	nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int spawn_run_wait(char *const *argv, double timeout_s)
{
	uint64_t end = proc_now_ns() + (uint64_t)(timeout_s * 1e9);
	struct timespec ts = { 0, 20000000 };
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return -1;
	if (pid == 0) {
		execv(argv[0], argv);
		fprintf(stderr, "kv-bench: fatal: unable to exec %s: %s\n",
			argv[0], strerror(errno));
		_exit(111);
	}
	/* A child's exit has no fd to wait on here: poll it, bounded. */
	for (;;) {
		pid_t w = waitpid(pid, &st, WNOHANG);

		if (w == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
		if (w < 0 && errno != EINTR)
			return -1;
		if (proc_now_ns() >= end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return 124;
		}
		nanosleep(&ts, NULL);
	}
}

void spawn_stop(struct spawn *s)
{
	if (s->dir[0] == '\0')
		return;
	if (s->up) {
		char *argv[] = { s->kv_up, "--stop", s->dir, NULL };
		int rc = spawn_run_wait(argv, 30);

		if (rc != 0)
			fprintf(stderr, "kv-bench: kv-up --stop %s: exit %d\n",
				s->dir, rc);
		s->up = 0;
	}
	spawn_remove_dir(s->dir);
	s->dir[0] = '\0';
}

int spawn_mkdtemp(char *dir, size_t len)
{
	if ((size_t)snprintf(dir, len, "%s/kvw-bench.XXXXXX", cli_tmpdir()) >=
	    len)
		return ENAMETOOLONG;
	return mkdtemp(dir) ? 0 : errno;
}

int spawn_start(struct spawn *s, const char *kv_up, char *const *args,
		double timeout_s, char *err, size_t errlen)
{
	char *argv[512];
	int n = 0, rc;

	memset(s, 0, sizeof *s);
	snprintf(s->kv_up, sizeof s->kv_up, "%s", kv_up);
	if ((rc = spawn_mkdtemp(s->dir, sizeof s->dir)) != 0) {
		kvw_seterr(err, errlen, "mkdtemp in %s: %s", cli_tmpdir(),
			   strerror(rc));
		s->dir[0] = '\0';
		return -1;
	}
	argv[n++] = s->kv_up;
	argv[n++] = "--daemon";
	argv[n++] = "--run-dir";
	argv[n++] = s->dir;
	for (; args && *args && n < 511; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	/* From here on --stop cleans up whatever part of the group started. */
	s->up = 1;
	rc = spawn_run_wait(argv, timeout_s);
	s->up_rc = rc;
	if (rc == 0)
		return 0;
	/* Refused before it made anything (the reason is on stderr): the
	 * directory is as empty as mkdtemp left it. */
	if ((rc == 77 || rc == 100) && rmdir(s->dir) == 0) {
		kvw_seterr(err, errlen, "%s --daemon exited %d", kv_up, rc);
		s->up = 0;
		s->dir[0] = '\0';
		return -1;
	}
	kvw_seterr(err, errlen, "%s --daemon exited %d (logs kept in %s)",
		   kv_up, rc, s->dir);
	/* Stop the group, keep the directory with its logs. */
	{
		char *stop[] = { s->kv_up, "--stop", s->dir, NULL };

		spawn_run_wait(stop, 30);
	}
	s->up = 0;
	s->dir[0] = '\0';
	return -1;
}

void spawn_default_kv_up(char *buf, size_t len)
{
	char exe[4096];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	char *slash;

	if (n <= 0) {
		snprintf(buf, len, "bin/kv-up");
		return;
	}
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (slash)
		slash[1] = '\0';
	else
		exe[0] = '\0';
	snprintf(buf, len, "%skv-up", exe);
}
