/*
 * fakecuda.h - for unit tests that run the cuda code over the CPU stand-in
 * runtime (tests/fakecuda/, built beside the test binaries): points
 * KVW_CUDART at it before anything loads the runtime. It proves the
 * plumbing, never the GPU.
 */
#ifndef KVW_UNIT_FAKECUDA_H
#define KVW_UNIT_FAKECUDA_H

#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* 0, or -1 when this binary's own path is unknown. */
static inline int fakecuda_use(void)
{
	char self[PATH_MAX], lib[PATH_MAX + 32];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);

	if (n <= 0)
		return -1;
	self[n] = '\0';
	snprintf(lib, sizeof lib, "%s/libfakecudart.so", dirname(self));
	return setenv("KVW_CUDART", lib, 1);
}

#endif
