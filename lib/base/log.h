/*
 * log.h - one line per event on stderr: time, role tag ("sender[2]"),
 * level, optional room id, message. The level is checked before any
 * formatting, and anything a peer can trigger goes through a per-call-site
 * rate limit that reports how many lines it suppressed.
 */
#ifndef KVW_LOG_H
#define KVW_LOG_H

#include <stdatomic.h>
#include <stdint.h>

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

/* Sets the role tag (copied, truncated to 31 bytes; idx < 0 means no
 * "[idx]" suffix) and the level; KVW_LOG=error|warn|info|debug in the
 * environment overrides lvl. Safe to call again (e.g. after fork). */
void log_init(const char *role, int idx, enum log_level lvl);

/* Parses "error", "warn", "info", "debug"; returns -1 for anything else. */
int log_level_parse(const char *s);

extern enum log_level log_cur_level;

/* Writes one line with a single write(2) so lines from several processes
 * sharing a stderr never interleave. */
void log_msg(enum log_level lvl, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Per-call-site rate limit: at most log_rl_burst lines per second; the
 * first line after a suppressed stretch says how many were dropped. */
struct log_rl {
	_Atomic uint64_t window; /* monotonic second of the current window */
	atomic_uint passed;      /* lines let through in this window */
	atomic_uint suppressed;  /* lines dropped since the last one passed */
};
extern unsigned log_rl_burst;

/* Returns the suppressed count + 1 when this line may be written (so the
 * caller can report drops), 0 when it must be dropped. */
unsigned log_rl_pass(struct log_rl *rl);

/* Total lines ever suppressed by rate limits in this process. */
uint64_t log_rl_total_suppressed(void);

#define LOG(lvl, ...)                                                     \
	do {                                                              \
		if ((lvl) <= log_cur_level)                               \
			log_msg((lvl), __VA_ARGS__);                      \
	} while (0)

#define LOG_ROOM(lvl, room, fmt, ...)                                     \
	LOG(lvl, "room %llu: " fmt, (unsigned long long)(room), ##__VA_ARGS__)

/* Rate-limited form for anything an outside peer can cause. */
#define LOG_RL(lvl, fmt, ...)                                             \
	do {                                                              \
		static struct log_rl log_rl_site_;                        \
		unsigned log_rl_n_;                                       \
		if ((lvl) <= log_cur_level &&                             \
		    (log_rl_n_ = log_rl_pass(&log_rl_site_)) != 0) {      \
			if (log_rl_n_ > 1)                                \
				log_msg((lvl), fmt " (suppressed %u)",    \
					##__VA_ARGS__, log_rl_n_ - 1);    \
			else                                              \
				log_msg((lvl), fmt, ##__VA_ARGS__);       \
		}                                                         \
	} while (0)

#endif
