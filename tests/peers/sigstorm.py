#!/usr/bin/python3
"""sigstorm.py - sends a signal to processes at a steady rate until
SIGTERM, then prints "sent=N" (signals delivered) and exits 0. Used by
tests/bats/lifecycle.bats to interrupt the blocking calls of kv-sender,
its workers and kv-receiver (SIGCHLD: each installs a handler for it
without SA_RESTART, so a poll or a ZMQ call in progress returns EINTR).
A process that is gone is dropped from the list and counted in "gone=".

  sigstorm.py SIGNAME RATE_PER_S PID...
"""
import os
import signal
import sys
import time


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 100
    sig = getattr(signal, 'SIG' + argv[0])
    period = 1.0 / float(argv[1])
    pids = [int(p) for p in argv[2:]]
    sent = gone = 0
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    # From here a SIGTERM ends the storm with the counts: say so, so a
    # caller neither stops it before nor measures without it.
    print('storming', flush=True)
    nxt = time.monotonic()
    while not stop and pids:
        for p in list(pids):
            try:
                os.kill(p, sig)
                sent += 1
            except ProcessLookupError:
                pids.remove(p)
                gone += 1
        nxt += period
        left = nxt - time.monotonic()
        if left > 0:
            time.sleep(left)  # the storm's rate, not a synchronisation
    print('sent=%d gone=%d' % (sent, gone), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
