/*
 * proc.h - what every kvwire process does the same way: signals that only
 * set flags, the s6-style readiness line, a random incarnation epoch and
 * the poll timeout that wakes a loop at its nearest deadline.
 */
#ifndef KVW_PROC_H
#define KVW_PROC_H

#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

/* Installs handlers: SIGTERM/SIGINT set the stop flag, SIGCHLD sets the
 * child flag, SIGPIPE is ignored. Returns 0 or KVW_ESYS. */
int proc_signals_init(void);

/* Raises the soft limit on open files to the hard limit (capped at the
 * kernel's fs.nr_open when the hard limit is unlimited) and logs both at
 * info level: a member's sockets grow with its peers (issue 34), and
 * running out must name the limit, not look like a dead peer. Returns the
 * soft limit now in force, or 0 when it cannot be read. */
unsigned long proc_raise_nofile(void);

/* Nonzero once SIGTERM or SIGINT arrived. */
int proc_stopping(void);

/* Returns and clears the SIGCHLD flag. */
int proc_take_sigchld(void);

/* Writes "READY\n" to fd (the --ready-fd of s6 and kv-up) and closes it.
 * fd < 0 writes nothing. Either way the ready hook, if one is set, runs
 * first (a program's other readiness channel: sd_notify under systemd).
 * Returns 0 or KVW_ESYS. */
int proc_ready(int fd);

/* Sets the hook proc_ready runs (NULL: none). Programs set it; the
 * library never does. */
void proc_set_ready_hook(void (*hook)(void));

/* A random non-zero 64-bit incarnation id (getrandom). */
uint64_t proc_epoch(void);

/* CLOCK_MONOTONIC in ns. */
uint64_t proc_now_ns(void);

/* Forks and execs argv[0] (argv NULL-ended; envp NULL: this process's
 * environment). The child keeps keep_fd (>= 0) open across the exec and
 * nothing else that is close-on-exec, gets SIGKILL the moment this process
 * dies (PR_SET_PDEATHSIG), and exits 102 at once if this process died
 * before it could ask for that. Only async-signal-safe calls run in the
 * child. Returns the child's pid, or -1 with errno. */
pid_t proc_spawn(char *const argv[], char *const envp[], int keep_fd);

/* Milliseconds from now until deadline_ns, clamped to [0, cap_ms];
 * deadline 0 means none (cap_ms). For a poll loop's timeout. */
long proc_poll_ms(uint64_t deadline_ns, uint64_t now_ns, long cap_ms);

/* TEST ONLY (never set in production): the microseconds the environment
 * variable `name` asks for, capped at 10 s; 0 when unset; PROC_TEST_STOP
 * for the value "stop". A process reads it once at start (its log says so
 * when set), then sleeps that long with proc_test_sleep_us at the one
 * point it names, so a test can land an abort there (KVW_TEST_COPY_DELAY_US:
 * a worker between its room check and its write; KVW_TEST_SINK_DELAY_US: a
 * sink between its room check and its write). "stop" makes the window as
 * long as the test needs, whatever the machine's load: the process stops
 * itself there (SIGSTOP) each time, and the test, having seen it stopped,
 * acts and sends SIGCONT; a sleep is a window a busy test can miss. */
#define PROC_TEST_STOP UINT64_MAX
uint64_t proc_test_delay_us(const char *name);
/* Sleeps us microseconds (through EINTR, until a stop is asked);
 * PROC_TEST_STOP: stops the process until SIGCONT. */
void proc_test_sleep_us(uint64_t us);

/* TEST ONLY: the room table's slots a control creates, dflt unless
 * KVW_TEST_ROOM_CAPACITY asks for a power of two from 16 to dflt (its log
 * says so), so a test can run many times a table's capacity in rooms. */
uint32_t proc_test_room_capacity(uint32_t dflt);

#endif
