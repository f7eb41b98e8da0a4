/*
 * kvw.c - names for the shared codes of kvw.h, for logs and tools, and the
 * one formatter of failure reasons every module uses.
 */
#include "kvw.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

/* errno is kept: callers set err on a failed system call and their own
 * callers may still read errno (ETERM, EINTR) after the return. */
static void vseterr(char *err, size_t errlen, const char *fmt, va_list ap)
{
	int saved = errno;

	if (err != NULL && errlen > 0)
		vsnprintf(err, errlen, fmt, ap);
	errno = saved;
}

void kvw_seterr(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vseterr(err, errlen, fmt, ap);
	va_end(ap);
}

int kvw_errf(char *err, size_t errlen, int rc, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vseterr(err, errlen, fmt, ap);
	va_end(ap);
	return rc;
}

const char *kvw_strerror(int err)
{
	static const char *const names[] = {
		"OK", "EINVAL", "ENOMEM", "ESYS", "ENOENT", "EEXIST", "ESTALE",
		"ESTATE", "EVERSION", "ETIMEDOUT", "EAGAIN", "ENODEV", "ERANGE",
		"EPEER", "ECORRUPT",
	};
	unsigned i = err <= 0 ? (unsigned)-err : 0xffffu;

	return i < sizeof names / sizeof names[0] ? names[i] : "E?";
}

const char *kvw_state_str(unsigned state)
{
	static const char *const names[KVW_NSTATES] = {
		"Failed", "Bootstrapping", "WaitingForInput", "Transferring",
		"Success", "Cleared",
	};

	return state < KVW_NSTATES ? names[state] : "?";
}

const char *kvw_reason_str(unsigned reason)
{
	static const char *const names[KVW_NREASONS] = {
		"none", "aborted", "timeout", "peer dead", "peer restarted",
		"transfer error", "page index out of range", "layout mismatch",
		"worker died", "owner restarted", "bootstrap lookup failed",
		"cleared while active", "page lists differ",
		"integrity", "refused",
	};

	return reason < KVW_NREASONS ? names[reason] : "?";
}
