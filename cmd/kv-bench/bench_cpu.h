/*
 * bench_cpu.h - CPU time for "CPU seconds per GB moved": this process's
 * user and system time plus one child's (a forked sink or stream reader),
 * read while the child still runs (/proc/PID/stat), so a figure can be
 * taken around a timed section without waiting for the child to exit.
 */
#ifndef KVBENCH_CPU_H
#define KVBENCH_CPU_H

#include <sys/types.h>

/* Seconds of CPU used so far by this process and by child (<= 0: none;
 * a child that cannot be read counts 0). Resolution: the clock tick. */
double bench_cpu_s(pid_t child);

/* Seconds of CPU used so far by process pid, all its threads (0 when it
 * cannot be read: gone, or not ours to read). Resolution: the clock tick. */
double bench_cpu_proc_s(pid_t pid);

#endif
