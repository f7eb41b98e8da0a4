/*
 * unit_wait.h - bounded waits for the unit tests: a thread join and a
 * child wait that give up after a number of seconds, so a hang fails its
 * test instead of stalling `make unit` (tests/unit/run.sh also runs every
 * binary under `timeout`).
 */
#ifndef KVW_UNIT_WAIT_H
#define KVW_UNIT_WAIT_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>

/* Joins th within secs seconds: 0, or ETIMEDOUT (the thread still runs). */
static inline int unit_join(pthread_t th, unsigned secs)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += secs;
	return pthread_timedjoin_np(th, NULL, &ts);
}

/* waitpid(pid, st, 0) within secs seconds: returns pid, or -1 after
 * killing (SIGKILL) and reaping a child that had not ended by then. */
static inline pid_t unit_waitpid(pid_t pid, int *st, unsigned secs)
{
	const struct timespec tick = { 0, 1000000 }; /* a poll, not a sync */
	struct timespec now, end;
	pid_t r;

	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += secs;
	for (;;) {
		r = waitpid(pid, st, WNOHANG);
		if (r != 0 && !(r < 0 && errno == EINTR))
			return r;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec > end.tv_sec ||
		    (now.tv_sec == end.tv_sec && now.tv_nsec >= end.tv_nsec))
			break;
		nanosleep(&tick, NULL);
	}
	kill(pid, SIGKILL);
	waitpid(pid, st, 0);
	return -1;
}

/* Seconds on the monotonic clock: for spins that must give up. */
static inline long unit_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long)ts.tv_sec;
}

#endif
