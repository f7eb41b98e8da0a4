"""conftest.py - what the Python tests share: the package on sys.path,
`Group`, a kvwire group started by `kv-up --daemon` in its own run
directory and always stopped (every socket and /dev/shm file removed),
and a small group with a prefill and a decode manager on it for the tests
that drive rooms by hand (`group`, `mgrs`)."""
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# KVW_PY_INSTALLED=1: test the kvwire package installed where this Python
# finds it (tests/bats/install.bats, after pip install), not the tree's.
if not os.environ.get("KVW_PY_INSTALLED"):
    sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples"))
BIN = os.environ.get("KVW_BIN", os.path.join(ROOT, "bin"))


class Group:
    """kv-up --daemon --run-dir DIR ARGS...; stop() ends it. env: more
    variables for the members (KVW_LOG=debug for the logs a test reads)."""

    def __init__(self, *args, env=None):
        self.dir = tempfile.mkdtemp(prefix="kvwp.", dir="/tmp")
        self.args = [str(a) for a in args]
        r = subprocess.run(["timeout", "60", os.path.join(ROOT, "bin", "kv-up"),
                            "--daemon", "--run-dir", self.dir] + self.args,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           env=dict(os.environ, KVW_BIN=BIN, **(env or {})))
        if r.returncode != 0:
            out = r.stdout.decode(errors="replace")
            self.stop()
            raise RuntimeError("kv-up failed (%d):\n%s" % (r.returncode, out))

    def stop(self):
        if os.path.isdir(os.path.join(self.dir, "pids")):
            subprocess.run(["timeout", "30", os.path.join(ROOT, "bin", "kv-up"),
                            "--stop", self.dir], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def run_probe(script, stand_in, run_dir, last_line, extra_path=(),
              env=None):
    """Runs tests/python/SCRIPT in a fresh interpreter whose path holds
    tests/python/STAND_IN (an engine's surface, written for these tests),
    kvwire (the tree's, unless KVW_PY_INSTALLED) and EXTRA_PATH, with
    KVW_RUN_DIR=run_dir and ENV; fails the test unless it exits 0 with
    LAST_LINE last (its whole output in the failure)."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = [os.path.join(here, stand_in)]
    if not os.environ.get("KVW_PY_INSTALLED"):
        path += [os.path.join(ROOT, "python")] + list(extra_path)
    r = subprocess.run([sys.executable, os.path.join(here, script)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=120,
                       env=dict(os.environ, KVW_RUN_DIR=run_dir,
                                PYTHONDONTWRITEBYTECODE="1",
                                PYTHONPATH=os.pathsep.join(path),
                                **(env or {})))
    out = r.stdout.decode(errors="replace")
    assert r.returncode == 0 and out.rstrip().endswith(last_line), out
    steps = [x[5:-4] for x in out.splitlines()
             if x.startswith("step ") and x.endswith(": ok")]
    if steps:
        REPORT.append("%s%s: %s" % (script, "".join(
            " %s=%s" % kv for kv in (env or {}).items()), ", ".join(steps)))


@pytest.fixture
def group_factory():
    """Starts groups on demand; every one is stopped after the test."""
    made = []

    def make(*args):
        g = Group(*args)
        made.append(g)
        return g

    yield make
    for g in made:
        g.stop()


# The small group's shape: 2 layers, 2 heads of 8, 4-token pages, 32
# pages of float32, 8 aux slots, one worker.
SHAPE = ["--layers", 2, "--heads", 2, "--head-dim", 8, "--page-tokens", 4,
         "--pages", 32, "--dtype-bytes", 4, "--aux-slots", 8, "--workers", 1]


def managers(g):
    """A prefill and a decode KVManager on group g's first ranks."""
    from kvwire import KVArgs, KVManager
    return (KVManager(KVArgs.from_run_dir(g.dir, "prefill"), "prefill"),
            KVManager(KVArgs.from_run_dir(g.dir, "decode"), "decode"))


@pytest.fixture(scope="module")
def group(request):
    """The small group, one per test module (a module's GROUP_ARGS, when
    it has them, instead of SHAPE)."""
    with Group(*getattr(request.module, "GROUP_ARGS", SHAPE)) as g:
        yield g


@pytest.fixture
def mgrs(group):
    """Fresh managers on the module's small group, closed after."""
    pm, dm = managers(group)
    yield pm, dm
    pm.close()
    dm.close()


# Figures a test wants in the run's output (model topologies, stress and
# benchmark numbers): printed in the terminal summary, before pytest's
# closing line.
REPORT = []


def pytest_terminal_summary(terminalreporter):
    if REPORT:
        terminalreporter.section("kvwire figures")
        for line in REPORT:
            terminalreporter.write_line(line)
