/*
 * notify.c - sd_notify readiness for the control programs (see notify.h).
 * The message also carries MAINPID, so a program started by a wrapper
 * script (ExecStart=/bin/sh -c ...) is still the unit's main process.
 */
#include "notify.h"

#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "base/proc.h"

static void notify_ready(void)
{
	/* 0 unset: workers spawned later keep $NOTIFY_SOCKET, but only the
	 * main process (NotifyAccess=main) is listened to. */
	(void)sd_notifyf(0, "READY=1\nMAINPID=%ld", (long)getpid());
}

void cli_notify_init(void)
{
	proc_set_ready_hook(notify_ready);
}
