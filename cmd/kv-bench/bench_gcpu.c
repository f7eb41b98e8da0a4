/*
 * bench_gcpu.c - bench_gcpu.h: member pids from the run directory's pids/
 * files (kv-up writes pids/NAME.pid for member NAME), their children from
 * /proc/PID/task/TID/children, the CPU of each from /proc/PID/stat
 * (bench_cpu.h).
 */
#include "bench_gcpu.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_cpu.h"
#include "plan/runinfo.h"

const char *gcpu_kind_name(unsigned kind)
{
	static const char *const names[GCPU_NKINDS] = {
		"kv-sender", "workers", "kv-receiver", "sinks",
		"kv-bootstrap", "kv-heartbeat",
	};

	return kind < GCPU_NKINDS ? names[kind] : "?";
}

static void add(struct gcpu_snap *s, pid_t pid, unsigned kind)
{
	if (s->n < GCPU_MAX && pid > 0)
		s->p[s->n++] = (struct gcpu_proc){ pid, kind,
						   bench_cpu_proc_s(pid) };
}

/* The pid in the first of dir/pids/NAME.pid, dir/p/pids/NAME.pid and
 * dir/d/pids/NAME.pid that can be read, else 0. */
static pid_t member_pid(const char *dir, const char *name)
{
	static const char *const sub[] = { "", "/p", "/d" };
	char path[4200];
	long v = 0;

	for (size_t i = 0; i < sizeof sub / sizeof sub[0]; i++) {
		FILE *f;

		snprintf(path, sizeof path, "%s%s/pids/%s.pid", dir, sub[i],
			 name);
		if ((f = fopen(path, "r")) == NULL)
			continue;
		if (fscanf(f, "%ld", &v) != 1)
			v = 0;
		fclose(f);
		if (v > 0)
			return (pid_t)v;
	}
	return 0;
}

/* Adds pid's children (every thread's) as kind. */
static void add_children(struct gcpu_snap *s, pid_t pid, unsigned kind)
{
	char path[64];
	struct dirent *t;
	DIR *d;

	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	if ((d = opendir(path)) == NULL)
		return;
	while ((t = readdir(d)) != NULL) {
		char cpath[128];
		long kid;
		FILE *f;

		if (t->d_name[0] == '.')
			continue;
		snprintf(cpath, sizeof cpath, "/proc/%d/task/%.32s/children",
			 (int)pid, t->d_name);
		if ((f = fopen(cpath, "r")) == NULL)
			continue;
		while (fscanf(f, "%ld", &kid) == 1)
			add(s, (pid_t)kid, kind);
		fclose(f);
	}
	closedir(d);
}

void gcpu_take(struct gcpu_snap *s, const struct runinfo *ri, const char *dir)
{
	for (uint32_t i = 0; i < runinfo_count(ri); i++) {
		const struct runinfo_member *m = runinfo_member(ri, i);
		pid_t pid = member_pid(dir, m->name);

		switch (m->role) {
		case RUNINFO_PREFILL:
			add(s, pid, GCPU_SENDER);
			add_children(s, pid, GCPU_WORKER);
			break;
		case RUNINFO_DECODE:
			add(s, pid, GCPU_RECEIVER);
			add_children(s, pid, GCPU_SINK);
			break;
		case RUNINFO_HEARTBEAT:
			add(s, pid, GCPU_HEARTBEAT);
			break;
		default:
			add(s, pid, GCPU_BOOTSTRAP);
			break;
		}
	}
}

void gcpu_diff(const struct gcpu_snap *a, const struct gcpu_snap *b,
	       struct gcpu_sum *out)
{
	memset(out, 0, sizeof *out);
	for (uint32_t j = 0; j < b->n; j++)
		for (uint32_t i = 0; i < a->n; i++)
			if (a->p[i].pid == b->p[j].pid &&
			    a->p[i].kind == b->p[j].kind) {
				out->s[b->p[j].kind] +=
					b->p[j].s > a->p[i].s
						? b->p[j].s - a->p[i].s : 0;
				out->procs[b->p[j].kind]++;
				break;
			}
}
