/*
 * fds.c - fds_of (fds.h): /proc/PID/fd counted, /proc/PID/limits parsed.
 */
#include "fds.h"

#include <dirent.h>
#include <stdio.h>
#include <string.h>

static int count_fds(uint32_t pid, unsigned long *open)
{
	char path[64];
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof path, "/proc/%u/fd", pid);
	d = opendir(path);
	if (!d)
		return -1;
	*open = 0;
	while ((e = readdir(d)) != NULL)
		if (e->d_name[0] != '.')
			(*open)++;
	closedir(d);
	return 0;
}

/* The soft limit of the "Max open files" line ("unlimited": 0). */
static int soft_limit(uint32_t pid, unsigned long *limit)
{
	static const char key[] = "Max open files";
	char path[64], line[256], soft[32];
	int rc = -1;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%u/limits", pid);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof line, f))
		if (strncmp(line, key, sizeof key - 1) == 0 &&
		    sscanf(line + sizeof key - 1, "%31s", soft) == 1) {
			*limit = 0;
			rc = strcmp(soft, "unlimited") == 0 ||
				     sscanf(soft, "%lu", limit) == 1
			     ? 0 : -1;
			break;
		}
	fclose(f);
	return rc;
}

int fds_of(uint32_t pid, unsigned long *open, unsigned long *limit)
{
	if (pid == 0 || count_fds(pid, open) != 0 ||
	    soft_limit(pid, limit) != 0)
		return -1;
	return 0;
}
