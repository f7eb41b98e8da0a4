"""test_bench.py - the binding's overhead: the same workload on the same
group, first by kv-bench's C engines, then by the Python engines of
examples/py_bench.py (tiny rooms for rooms/s, 8 MiB rooms for GiB/s). The
figures and their ratio go to the run's output; the test asserts only that
both moved every room. "tiny-batch" is the tiny run with the Python
engines' commands of a pass held and sent together (KVManager.batch);
"tiny-threads" that run with each engine's loop in a thread of its own
(py_bench steps both in one by default)."""
import json
import os
import subprocess

import pytest

import py_bench
from conftest import BIN, REPORT

TINY = (["--layers", 2, "--heads", 2, "--head-dim", 8, "--page-tokens", 4,
         "--pages", 1024], ["--rooms", "2000", "--concurrency", "64",
                            "--pages-per-room", "2", "--chunk-pages", "1"])
WORKLOADS = {
    "tiny": TINY + ([],),
    "tiny-batch": TINY + (["--batch"],),
    "tiny-threads": TINY + (["--batch", "--threads"],),
    "large": (["--layers", 8, "--heads", 8, "--head-dim", 128,
               "--page-tokens", 16, "--pages", 256],
              ["--rooms", "150", "--concurrency", "8", "--pages-per-room",
               "16", "--chunk-pages", "4"], []),
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_python_path_against_kv_bench(group_factory, name):
    shape, load, py_only = WORKLOADS[name]
    g = group_factory(*shape)
    r = subprocess.run(["timeout", "120", os.path.join(BIN, "kv-bench"),
                        "--run-dir", g.dir, "--json"] + load,
                       stdout=subprocess.PIPE, check=True)
    c = json.loads(r.stdout)
    p = py_bench.run(g.dir, py_bench.options(["--run-dir", g.dir] + load +
                                             py_only))
    REPORT.append("bench %s (%s): kv-bench %.1f rooms/s %.3f GiB/s, python "
                  "%.1f rooms/s %.3f GiB/s, ratio %.2f rooms/s %.2f GiB/s"
                  % (name, " ".join(load + py_only), c["rooms_per_s"], c["gib_per_s"],
                     p["rooms_per_s"], p["gib_per_s"],
                     p["rooms_per_s"] / c["rooms_per_s"],
                     p["gib_per_s"] / c["gib_per_s"]))
    assert c["success"] == c["rooms"]
    assert p["success"] == p["rooms"] and p["bytes"] == c["bytes"]
