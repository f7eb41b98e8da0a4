/*
 * proc.c - see proc.h. Signal handlers only store to sig_atomic_t flags;
 * all work happens in the loops that read them.
 */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "kvw.h"
#include "log.h"

static volatile sig_atomic_t stop_flag;
static volatile sig_atomic_t chld_flag;

static void on_stop(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static void on_chld(int sig)
{
	(void)sig;
	chld_flag = 1;
}

/* fs.nr_open: the most a process may ask for (0: unreadable). */
static unsigned long nr_open(void)
{
	FILE *f = fopen("/proc/sys/fs/nr_open", "r");
	unsigned long n = 0;

	if (f) {
		if (fscanf(f, "%lu", &n) != 1)
			n = 0;
		fclose(f);
	}
	return n;
}

unsigned long proc_raise_nofile(void)
{
	struct rlimit rl;
	rlim_t was, want;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return 0;
	was = rl.rlim_cur;
	want = rl.rlim_max;
	if (want == RLIM_INFINITY) {
		unsigned long n = nr_open();

		want = n ? (rlim_t)n : was;
	}
	if (want > was) {
		rl.rlim_cur = want;
		if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
			LOG(LOG_WARN, "open files: soft limit %lu, cannot raise "
			    "it to %lu: %s", (unsigned long)was,
			    (unsigned long)want, strerror(errno));
			return (unsigned long)was;
		}
	}
	LOG(LOG_INFO, "open files: soft limit %lu (was %lu)",
	    (unsigned long)(want > was ? want : was), (unsigned long)was);
	return (unsigned long)(want > was ? want : was);
}

int proc_signals_init(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof sa);
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = on_stop;
	if (sigaction(SIGTERM, &sa, NULL) || sigaction(SIGINT, &sa, NULL))
		return KVW_ESYS;
	sa.sa_handler = on_chld;
	sa.sa_flags = SA_NOCLDSTOP;
	if (sigaction(SIGCHLD, &sa, NULL))
		return KVW_ESYS;
	sa.sa_handler = SIG_IGN;
	sa.sa_flags = 0;
	if (sigaction(SIGPIPE, &sa, NULL))
		return KVW_ESYS;
	return 0;
}

int proc_stopping(void)
{
	return stop_flag != 0;
}

int proc_take_sigchld(void)
{
	int was = chld_flag != 0;

	chld_flag = 0;
	return was;
}

static void (*ready_hook)(void);

void proc_set_ready_hook(void (*hook)(void))
{
	ready_hook = hook;
}

int proc_ready(int fd)
{
	static const char line[] = "READY\n";
	ssize_t n;

	if (ready_hook)
		ready_hook();
	if (fd < 0)
		return 0;
	do
		n = write(fd, line, sizeof line - 1);
	while (n < 0 && errno == EINTR);
	close(fd);
	return n == (ssize_t)(sizeof line - 1) ? 0 : KVW_ESYS;
}

pid_t proc_spawn(char *const argv[], char *const envp[], int keep_fd)
{
	extern char **environ;
	pid_t parent = getpid(), pid = fork();

	if (pid != 0)
		return pid;
	/* SIGKILL, not SIGTERM: a child must not finish what it is doing
	 * once the process that owns its work is gone. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(KVW_EXIT_PEER);
	if (keep_fd >= 0 && fcntl(keep_fd, F_SETFD, 0) < 0)
		_exit(KVW_EXIT_SYS);
	execve(argv[0], argv, envp ? envp : environ);
	_exit(KVW_EXIT_SYS);
}

uint64_t proc_epoch(void)
{
	uint64_t e = 0;

	while (e == 0)
		if (getrandom(&e, sizeof e, 0) != sizeof e)
			e = proc_now_ns() ^ ((uint64_t)getpid() << 32);
	return e;
}

uint64_t proc_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

long proc_poll_ms(uint64_t deadline_ns, uint64_t now_ns, long cap_ms)
{
	uint64_t ms;

	if (deadline_ns == 0)
		return cap_ms;
	if (deadline_ns <= now_ns)
		return 0;
	/* Round up so a loop never wakes just before its deadline and spins. */
	ms = (deadline_ns - now_ns + 999999u) / 1000000u;
	return ms < (uint64_t)cap_ms ? (long)ms : cap_ms;
}

uint64_t proc_test_delay_us(const char *name)
{
	const char *d = getenv(name);
	uint64_t us;

	if (!d || !*d)
		return 0;
	if (strcmp(d, "stop") == 0) {
		LOG(LOG_WARN, "test-only stop %s: SIGSTOP at that point", name);
		return PROC_TEST_STOP;
	}
	us = strtoull(d, NULL, 10);
	if (us > 10000000u)
		us = 10000000u;
	if (us)
		LOG(LOG_WARN, "test-only delay %s: %llu us", name,
		    (unsigned long long)us);
	return us;
}

uint32_t proc_test_room_capacity(uint32_t dflt)
{
	const char *d = getenv("KVW_TEST_ROOM_CAPACITY");
	unsigned long long n;

	if (!d || !*d)
		return dflt;
	n = strtoull(d, NULL, 10);
	if (n < 16 || n > dflt || (n & (n - 1)) != 0) {
		LOG(LOG_WARN, "test-only KVW_TEST_ROOM_CAPACITY=%s ignored: want "
		    "a power of two from 16 to %u", d, dflt);
		return dflt;
	}
	LOG(LOG_WARN, "test-only room table of %llu slots "
	    "(KVW_TEST_ROOM_CAPACITY)", n);
	return (uint32_t)n;
}

void proc_test_sleep_us(uint64_t us)
{
	struct timespec ts = { (time_t)(us / 1000000u),
			       (long)(us % 1000000u) * 1000 };

	if (us == PROC_TEST_STOP) {
		raise(SIGSTOP); /* until the test sends SIGCONT */
		return;
	}
	while (us && nanosleep(&ts, &ts) != 0 && errno == EINTR &&
	       !proc_stopping())
		;
}
