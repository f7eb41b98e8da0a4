"""test_sglang_harness.py - issue 33 item 1 (SGLang): SGLang's schedulers'
calls into a transfer backend, replayed step by step on kvwire through
the plugin route (sglang_harness_probe.py, against
tests/python/sglang_pinned): the managers built as SGLang's prefill and
decode modules build them, with SGLang's eight metadata buffers in SGLang's
own memory; the decode's prefill info and DP rank; the bootstrap and
prealloc queues; chunks with state_indices=[]; poll_and_all_reduce;
the metadata gate; get_transfer_metric; an aborted request's
failure_exception() then clear(); over TP 1 -> 1, 2 -> 1 and 1 -> 2, a
scheduler process per rank, the poll consensus (an all-reduce MIN
across the rank processes) one answer on every rank. Each step is named
in the output. And issue 33 item 3:
pd_model's transformer served through that loop (sglang_model_probe.py)
over TP 2 -> 1 and 1 -> 2, with a retracted, an aborted and a
killed-member request among plain ones, a process per rank there too. And item 2: the same calls on
KV and state in SGLang's own (stand-in GPU) memory."""
import os
import sys

import pytest

from conftest import ROOT, Group, run_probe

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_sglang_plugin import entry_point_dist  # noqa: E402
import pd_model  # noqa: E402

# The state components of sglang_harness_probe.py's hybrid model (its
# MAMBA and SWA runs: rows, whole row bytes, buffers).
STATE_FLAG = "slot:8:64:layers=2,slot:8:128:layers=2,paged:8:32:layers=4"
# SGLang's MetadataBuffers rows (utils.py): output ids, token logprob
# value and index, top-128 logprob values and indices, top-k p and index,
# a hidden-state row (32 float32 here).
AUX_BYTES = "64,64,64,512,512,64,128,128"


@pytest.mark.parametrize("ptp,dtp", [(1, 1), (2, 1), (1, 2)])
def test_sglang_scheduler_calls_replayed(tmp_path, ptp, dtp):
    """Prefill TP ptp, decode TP dtp: a scheduler process per rank, each
    rank's heads byte-exact, the poll consensus one answer on every
    rank."""
    with Group("--prefill-tp", ptp, "--decode-tp", dtp, "--layers", 2,
               "--heads", 2, "--head-dim", 4, "--page-tokens", 2,
               "--pages", 8, "--aux-slots", 8, "--aux-bytes", AUX_BYTES,
               "--workers", 1) as g:
        run_probe("sglang_harness_probe.py", "sglang_pinned", g.dir,
                  "harness: ok", [entry_point_dist(tmp_path)],
                  env={"KVW_HARNESS_TP": "%d,%d" % (ptp, dtp)})


@pytest.mark.parametrize("ptp,dtp", [(1, 1), (2, 1), (1, 2)])
def test_sglang_scheduler_calls_replayed_on_sglangs_own_memory(
        tmp_path, ptp, dtp):
    """The same calls with each rank's KV cache and its state where SGLang
    keeps them (KVW_HARNESS_MEM=sglang): KVArgs with kv_data_ptrs and
    state_types [MAMBA, SWA] and their buffer lists, in GPU buffers of
    each rank's own over the CPU stand-in runtime; the last chunk and the
    decode's metadata name a Mamba slot and SWA pages per request. Each
    decode rank's heads and its part of each named state row byte-exact,
    every other state row untouched."""
    fake = os.path.join(ROOT, "build", "default", "tests",
                        "libfakecudart.so")
    assert os.path.exists(fake), "make builds %s" % fake
    env = {"KVW_CUDART": fake}
    with Group("--prefill-tp", ptp, "--decode-tp", dtp, "--layers", 2,
               "--heads", 2, "--head-dim", 4, "--page-tokens", 2,
               "--pages", 8, "--aux-slots", 8, "--aux-bytes", AUX_BYTES,
               "--state", STATE_FLAG, "--transport", "cuda",
               "--workers", 1, env=env) as g:
        run_probe("sglang_harness_probe.py", "sglang_pinned", g.dir,
                  "harness: ok", [entry_point_dist(tmp_path)],
                  env=dict(env, KVW_HARNESS_TP="%d,%d" % (ptp, dtp),
                           KVW_HARNESS_MEM="sglang"))


@pytest.mark.parametrize("ptp,dtp", [(2, 1), (1, 2)])
def test_the_model_served_through_sglangs_scheduler_loop(tmp_path, ptp, dtp):
    """Issue 33 item 3: pd_model's transformer behind SGLang's scheduler
    loop (sglang_model_probe.py): a plain request, one the decode retracts
    and resumes, one it aborts, one whose prefill member is killed, one
    after that member's restart. The ones that succeed give the
    one-process run's tokens; the others fail on both sides with a
    reason."""
    cfg = pd_model.Config()
    with Group("--prefill-tp", ptp, "--decode-tp", dtp, "--workers", 1,
               *cfg.shape_flags()) as g:
        run_probe("sglang_model_probe.py", "sglang_pinned", g.dir,
                  "model harness: ok",
                  [entry_point_dist(tmp_path)],
                  env={"KVW_HARNESS_TP": "%d,%d" % (ptp, dtp)})
