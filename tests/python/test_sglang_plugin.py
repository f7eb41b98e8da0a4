"""test_sglang_plugin.py - issue 33 items 2 and 5: kvwire enters SGLang
through SGLang's own plugin entry point, with no patch to SGLang, against
tests/python/sglang_pinned (SGLang's plugin and backend surface; its
README says what it keeps and what not). In a fresh interpreter
(sglang_plugin_probe.py): load_plugins() finds the `kvwire` entry point
of the group sglang.srt.plugins (the installed package's under
KVW_PY_INSTALLED, else one made here from python/pyproject.toml's
declaration), `--disaggregation-transfer-backend kvwire` parses,
TransferBackend("kvwire") exists, get_kv_class answers kvwire's classes
(through utils and through the prefill module's own binding) and SGLang's
answer for its other backends, one room moves through those classes, and
poll_and_all_reduce answers through poll_many, the MIN over ranks kept."""
import os
import tomllib

from conftest import Group, ROOT, run_probe


def entry_point_dist(tmp_path):
    """A dist-info that declares what python/pyproject.toml declares, for a
    checkout that is not pip-installed: importlib.metadata reads it."""
    with open(os.path.join(ROOT, "python", "pyproject.toml"), "rb") as f:
        eps = tomllib.load(f)["project"]["entry-points"]["sglang.srt.plugins"]
    d = tmp_path / "kvwire_checkout-0.dist-info"
    d.mkdir()
    (d / "METADATA").write_text("Metadata-Version: 2.1\nName: "
                                "kvwire-checkout\nVersion: 0\n")
    (d / "entry_points.txt").write_text(
        "[sglang.srt.plugins]\n" +
        "".join("%s = %s\n" % kv for kv in eps.items()))
    return str(tmp_path)


def test_sglang_loads_kvwire_as_a_plugin(tmp_path):
    with Group("--layers", 1, "--heads", 1, "--head-dim", 4, "--page-tokens",
               2, "--pages", 8, "--aux-slots", 4, "--workers", 1) as g:
        run_probe("sglang_plugin_probe.py", "sglang_pinned", g.dir,
                  "plugin: ok", [entry_point_dist(tmp_path)])
