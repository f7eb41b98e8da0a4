"""test_stress.py - two Python engines (a prefill and a decode, threads of
examples/py_bench.py) move hundreds of concurrent rooms through one group
with a third of them aborted at random moments: every room ends (nothing
stuck), every successful room's pages and aux slot hold exactly what its
prefill wrote, and no byte lands in an aborted room's pages after they
were released (canaries)."""
import pytest

import py_bench
from conftest import REPORT

SHAPE = ["--layers", 2, "--heads", 2, "--head-dim", 8, "--page-tokens", 4,
         "--pages", 2048, "--aux-slots", 1024]


@pytest.mark.parametrize("batch", [[], ["--batch"]], ids=["each", "batch"])
def test_hundreds_of_rooms_a_third_aborted(group_factory, batch):
    """Also with each engine's commands of a pass held and sent together
    (KVManager.batch): the same outcomes."""
    g = group_factory(*SHAPE)
    o = py_bench.options(["--run-dir", g.dir, "--rooms", "900",
                          "--concurrency", "300", "--pages-per-room", "3",
                          "--chunk-pages", "1", "--abort-frac", "0.33",
                          "--verify", "--room-timeout", "30"] + batch)
    res = py_bench.run(g.dir, o)
    REPORT.append("stress%s: " % " ".join([""] + batch) + " ".join(
        "%s=%s" % (k, ("%.4g" % v) if isinstance(v, float) else v)
        for k, v in res.items()))
    assert res["rooms"] == 900
    assert res["stuck"] == 0 and res["corrupt"] == 0 and res["failed"] == 0
    assert res["success"] + res["aborted"] == 900
    assert 0.25 * 900 < res["aborted"] < 0.42 * 900
