"""test_vllm_connector.py - issue 33 items 1 and 2 (vLLM): kvwire's
KvwireConnector replayed through vLLM's connector call order against
tests/python/vllm_pinned (vLLM's connector base; its README says what it
keeps) in a fresh interpreter (vllm_connector_probe.py), on a live group
with vLLM's per-layer layouts (--kv-layout vllm, and the block-major
vllm-blocks): a prefill's blocks land
byte-exact in the decode's blocks (both K and V of every layer), a room
kvwire fails is reported through get_block_ids_with_load_errors, a send
is reported only once vLLM named its request finished, every aux row
comes back; aborts as vLLM's scheduler makes them (a prefill request that
ended aborted hands nothing over; a decode aborted while its block loads
aborts its room, its prefill's room fails and the block, reused, stays
untouched; a decode aborted before it had blocks still fails its prefill's
room at once); vLLM's own tensors (host memory from kvwire's allocator, or
GPU memory over the stand-in runtime) are registered in place and the
blocks land there; host memory kvwire cannot reach is refused.""" 
import os

import pytest

from conftest import ROOT, Group, run_probe
import pd_model  # noqa: E402 (examples/, on the path conftest makes)

FAKE = os.path.join(ROOT, "build", "default", "tests", "libfakecudart.so")


@pytest.mark.parametrize("where,layout", [
    ("pool", "vllm"), ("host", "vllm"), ("gpu", "vllm"),
    ("host", "vllm-blocks"), ("gpu", "vllm-blocks")])
def test_vllm_connector_call_order(where, layout):
    """vLLM's KV tensors: the connector's pool views; the prefill's in
    host memory of its own from the manager's alloc(), registered in place
    (the decode's the pool's views: K and V where kvwire's layout says);
    GPU tensors on both sides (cudaMalloc on the CPU stand-in runtime: the
    plumbing, not a GPU) exported by CUDA IPC on a cuda group, the blocks
    in the decode's tensors and none in kvwire's pool. 32 blocks:
    each K or V half whole 4 KiB pages, as host memory laid in place
    must be. layout: vLLM's [2, blocks, ...] tensors (vllm), or the
    block-major [blocks, 2, ...] (vllm-blocks: a block's K then its V, one
    kvwire buffer per layer), registered in place either way."""
    env = {"KVW_VLLM_KV": where}
    flags = []
    if where == "gpu":
        assert os.path.exists(FAKE), "make builds %s" % FAKE
        env["KVW_CUDART"] = FAKE
        flags = ["--transport", "cuda"]
    with Group("--kv-layout", layout, "--layers", 2, "--heads", 2,
               "--head-dim", 4, "--page-tokens", 4, "--pages", 32,
               "--dtype-bytes", 4, "--aux-slots", 8, "--workers", 1, *flags,
               env=env if where == "gpu" else None) as g:
        run_probe("vllm_connector_probe.py", "vllm_pinned", g.dir,
                  "vllm: ok", env=env)


@pytest.mark.parametrize("ptp,dtp,layout", [
    (2, 1, "vllm"), (1, 2, "vllm"), (2, 1, "vllm-blocks")])
def test_the_model_served_through_vllms_engine_loop(ptp, dtp, layout):
    """Issue 33 item 3: pd_model's transformer behind vLLM's engine loop
    (vllm_model_probe.py): a plain request, one the decode preempts and
    resumes, one the decode aborts while its blocks load (the next request
    in those blocks), one whose prefill member is killed before its send
    (a load error is recomputed, as vLLM does), one after that member's
    restart;
    each gives the one-process run's tokens; with the block-major layout
    too (each block's K then its V), under a TP mismatch. A worker
    process per TP rank."""
    with Group("--kv-layout", layout, "--prefill-tp", ptp, "--decode-tp",
               dtp, "--workers", 1, *pd_model.Config().shape_flags()) as g:
        run_probe("vllm_model_probe.py", "vllm_pinned", g.dir,
                  "vllm model: ok",
                  env={"KVW_HARNESS_TP": "%d,%d" % (ptp, dtp)})
