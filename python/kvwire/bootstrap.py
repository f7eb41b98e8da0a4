"""bootstrap.py - KVBootstrapServer: starts kv-bootstrap on host:port and
supervises it (a bootstrap that dies is started again; kv-senders register
again when they see its new epoch). SGLang runs its bootstrap server in the
prefill instance's front-end process; this is the same role.
"""
import collections
import os
import select
import shutil
import subprocess
import threading
import time


def _bin_dir():
    here = os.path.dirname(os.path.abspath(__file__))
    return os.environ.get("KVW_BIN", os.path.join(here, "..", "..", "bin"))


class KVBootstrapServer:
    """kv-bootstrap listening on tcp://host:port (or an endpoint given as
    host "ipc:///path" with port None). close() stops it. A tcp:// endpoint
    needs the group's keys (keys=DIR, made by kv-keygen; default
    $KVW_KEYS) or insecure=True: kv-bootstrap refuses it otherwise."""

    READY_TIMEOUT = 20.0

    def __init__(self, host, port, bin_dir=None, log_path=os.devnull,
                 keys=None, insecure=False):
        self.endpoint = host if port is None else "tcp://%s:%d" % (host, port)
        self.bootstrap_addr = self.endpoint if port is None else \
            "%s:%d" % (host, port)
        exe = os.path.join(bin_dir or _bin_dir(), "kv-bootstrap")
        if not os.access(exe, os.X_OK):
            exe = shutil.which("kv-bootstrap") or exe
        self._exe = exe
        self._log = log_path
        self._auth = ["--keys", keys] if keys else \
            ["--insecure"] if insecure else []
        self._stop = threading.Event()
        self.restarts = 0
        self.proc = self._start()
        self._thread = threading.Thread(target=self._supervise, daemon=True,
                                        name="kvwire-bootstrap")
        self._thread.start()

    def _forward(self, fd, tail):
        """kv-bootstrap's stderr, line by line, into the log; the last
        lines kept, so a failed start can say why."""
        with os.fdopen(fd, "rb") as err, open(self._log, "ab") as log:
            for line in err:
                log.write(line)
                log.flush()
                tail.append(line.decode(errors="replace").strip())

    def _start(self):
        """Starts kv-bootstrap and waits (bounded) for its READY line. A
        start that fails raises with kv-bootstrap's own last words."""
        r, w = os.pipe()
        er, ew = os.pipe()
        tail = collections.deque(maxlen=4)
        try:
            with open(self._log, "ab") as log:
                proc = subprocess.Popen(
                    [self._exe, "--listen", self.endpoint, "--ready-fd",
                     str(w)] + self._auth, pass_fds=(w,),
                    stdin=subprocess.DEVNULL,
                    stdout=log, stderr=ew)
            os.close(w)
            os.close(ew)
            w = ew = -1
            fwd = threading.Thread(target=self._forward, args=(er, tail),
                                   daemon=True, name="kvwire-bootstrap-log")
            er = -1  # the thread's now
            fwd.start()
            got, deadline = b"", time.monotonic() + self.READY_TIMEOUT
            while b"\n" not in got:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([r], [], [], left)[0]:
                    break
                chunk = os.read(r, 64)
                if not chunk:
                    break
                got += chunk
            if got.strip() != b"READY":
                proc.kill()
                proc.wait()
                fwd.join(5)  # its stderr ended with it
                raise RuntimeError("kv-bootstrap on %s did not get ready "
                                   "(exit %s): %s" % (
                                       self.endpoint, proc.poll(),
                                       " / ".join(tail) or "it said nothing"))
            return proc
        finally:
            for fd in (r, w, er, ew):
                if fd >= 0:
                    os.close(fd)

    def _supervise(self):
        while not self._stop.is_set():
            try:
                self.proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                continue
            if self._stop.is_set():
                break
            try:
                self.proc = self._start()
                self.restarts += 1
            except (OSError, RuntimeError):
                self._stop.wait(1.0)  # the port may be held still: retry

    def close(self):
        self._stop.set()
        self._thread.join()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
