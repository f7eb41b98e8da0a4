/*
 * spawn.h - kv-bench --spawn: start a private kvwire group through
 * `kv-up --daemon` in a fresh temporary run directory under $TMPDIR (else
 * /tmp; kv-up returns once every member is READY), and stop it with
 * `kv-up --stop DIR` and remove the directory at the end.
 */
#ifndef KVBENCH_SPAWN_H
#define KVBENCH_SPAWN_H

#include <stddef.h>

struct spawn {
	char kv_up[4096]; /* the kv-up that started it */
	char dir[256];    /* the run directory, "" when none */
	int up;           /* kv-up --daemon succeeded */
	int up_rc;        /* kv-up --daemon's exit status (77: a transport
			   * this machine lacks) */
};

/* Makes a fresh directory $TMPDIR/kvw-bench.XXXXXX (/tmp without
 * $TMPDIR) and writes its path into dir: 0, or an errno (ENAMETOOLONG
 * when the path does not fit in len). */
int spawn_mkdtemp(char *dir, size_t len);

/* Runs `kv_up --daemon --run-dir DIR ARGS...` (args NULL-terminated) and
 * waits up to timeout_s for it to return. Returns 0, or -1 with err and
 * up_rc (the group is then stopped; its directory is kept for the logs,
 * unless kv-up refused with 77 or 100 before it made anything). */
int spawn_start(struct spawn *s, const char *kv_up, char *const *args,
		double timeout_s, char *err, size_t errlen);

/* `kv-up --stop DIR` (bounded wait), then removes the run directory.
 * Accepts a struct that was never started (all zero). */
void spawn_stop(struct spawn *s);

/* Runs argv[0] with argv (a path: no PATH search), waits up to timeout_s;
 * returns its exit status, 124 when it ran too long (then killed), 128 for
 * a signal, -1 when it could not start. */
int spawn_run_wait(char *const *argv, double timeout_s);

/* Removes dir and everything under it (not following links). */
void spawn_remove_dir(const char *dir);

/* Writes the kv-up that sits beside this program (/proc/self/exe's
 * directory) into buf, or "bin/kv-up" when that cannot be read. */
void spawn_default_kv_up(char *buf, size_t len);

#endif
