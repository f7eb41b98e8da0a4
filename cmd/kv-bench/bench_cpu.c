/*
 * bench_cpu.c - bench_cpu.h: getrusage for this process, fields 14 and 15
 * (utime, stime, in clock ticks) of /proc/PID/stat for the child.
 */
#include "bench_cpu.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static double tv_s(struct timeval tv)
{
	return (double)tv.tv_sec + (double)tv.tv_usec / 1e6;
}

double bench_cpu_proc_s(pid_t child)
{
	char path[64], buf[1024], *p;
	unsigned long ut = 0, st = 0;
	long tick = sysconf(_SC_CLK_TCK);
	FILE *f;
	size_t n;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)child);
	f = fopen(path, "r");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* The name (field 2) may hold spaces: count fields after its ')'. */
	p = strrchr(buf, ')');
	if (!p || tick <= 0 ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
		   &ut, &st) != 2)
		return 0;
	return (double)(ut + st) / (double)tick;
}

double bench_cpu_s(pid_t child)
{
	struct rusage ru;
	double s = 0;

	if (getrusage(RUSAGE_SELF, &ru) == 0)
		s = tv_s(ru.ru_utime) + tv_s(ru.ru_stime);
	return s + (child > 0 ? bench_cpu_proc_s(child) : 0);
}
