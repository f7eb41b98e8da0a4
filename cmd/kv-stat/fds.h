/*
 * fds.h - how many files a table's owner has open and may open (issue 34:
 * a member's sockets grow with its peers; running out must be visible
 * before it looks like a dead peer). Read from /proc/PID, so only for an
 * owner on this host that kv-stat may inspect.
 */
#ifndef KVW_STAT_FDS_H
#define KVW_STAT_FDS_H

#include <stdint.h>

/* 0 with *open (entries of /proc/PID/fd) and *limit (the soft "Max open
 * files" of /proc/PID/limits; 0 for unlimited), or -1 when either cannot
 * be read (no such process, not ours to inspect). */
int fds_of(uint32_t pid, unsigned long *open, unsigned long *limit);

#endif
