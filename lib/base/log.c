/*
 * log.c - the logger of log.h. Formatting happens into a stack buffer and
 * leaves in one write(2); the library never prints any other way.
 */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum log_level log_cur_level = LOG_INFO;
unsigned log_rl_burst = 5;

static char log_tag[48] = "kvwire";
static _Atomic uint64_t log_rl_dropped;

static const char *const level_names[] = { "error", "warn", "info", "debug" };

int log_level_parse(const char *s)
{
	for (int i = 0; i <= LOG_DEBUG; i++)
		if (s && strcmp(s, level_names[i]) == 0)
			return i;
	return -1;
}

void log_init(const char *role, int idx, enum log_level lvl)
{
	int env = log_level_parse(getenv("KVW_LOG"));

	if (idx >= 0)
		snprintf(log_tag, sizeof log_tag, "%.31s[%d]", role, idx);
	else
		snprintf(log_tag, sizeof log_tag, "%.31s", role);
	log_cur_level = env >= 0 ? (enum log_level)env : lvl;
}

void log_msg(enum log_level lvl, const char *fmt, ...)
{
	char line[1024];
	struct timespec ts;
	struct tm tm;
	size_t n;
	int saved = errno;
	va_list ap;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	n = strftime(line, sizeof line, "%Y-%m-%dT%H:%M:%S", &tm);
	n += (size_t)snprintf(line + n, sizeof line - n, ".%03ldZ %s %s: ",
			      ts.tv_nsec / 1000000, log_tag,
			      level_names[lvl <= LOG_DEBUG ? lvl : LOG_DEBUG]);
	va_start(ap, fmt);
	if (n < sizeof line)
		vsnprintf(line + n, sizeof line - n, fmt, ap);
	va_end(ap);
	n = strnlen(line, sizeof line - 1);
	line[n++] = '\n';
	/* A failed log write has nowhere to be reported; ignore it. */
	if (write(STDERR_FILENO, line, n) < 0)
		(void)0;
	errno = saved;
}

unsigned log_rl_pass(struct log_rl *rl)
{
	struct timespec ts;
	uint64_t now, win;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec;
	win = atomic_load_explicit(&rl->window, memory_order_relaxed);
	if (win != now &&
	    atomic_compare_exchange_strong(&rl->window, &win, now))
		atomic_store(&rl->passed, 0);
	if (atomic_fetch_add(&rl->passed, 1) >= log_rl_burst) {
		atomic_fetch_add(&rl->suppressed, 1);
		atomic_fetch_add(&log_rl_dropped, 1);
		return 0;
	}
	return atomic_exchange(&rl->suppressed, 0) + 1;
}

uint64_t log_rl_total_suppressed(void)
{
	return atomic_load(&log_rl_dropped);
}
