/*
 * notify.h - readiness for systemd (Type=notify): the control programs
 * (kv-sender, kv-receiver, kv-bootstrap, kv-heartbeat) call
 * cli_notify_init() once; from then on proc_ready() also sends READY=1 to
 * $NOTIFY_SOCKET with sd_notify (libsystemd), next to --ready-fd. Without
 * $NOTIFY_SOCKET nothing is sent. Programs that call it link -lsystemd
 * (the Makefile says which).
 */
#ifndef KVW_CLI_NOTIFY_H
#define KVW_CLI_NOTIFY_H

/* Installs the ready hook (lib/base/proc.h). */
void cli_notify_init(void);

#endif
