"""test_vllm_connector.py - issue 33 items 1 and 2 (vLLM): kvwire's
KvwireConnector replayed through vLLM's connector call order against
tests/python/vllm_pinned (vLLM's connector base; its README says what it
keeps) in a fresh interpreter (vllm_connector_probe.py), on a live group
with vLLM's per-layer layout (--kv-layout vllm): a prefill's blocks land
byte-exact in the decode's blocks (both K and V of every layer), a room
kvwire fails is reported through get_block_ids_with_load_errors, a send
is reported only once vLLM named its request finished, every aux row
comes back, and tensors that are not the pool's views are refused."""
from conftest import Group, run_probe


def test_vllm_connector_call_order():
    with Group("--kv-layout", "vllm", "--layers", 2, "--heads", 2,
               "--head-dim", 4, "--page-tokens", 4, "--pages", 8,
               "--dtype-bytes", 4, "--aux-slots", 8, "--workers", 1) as g:
        run_probe("vllm_connector_probe.py", "vllm_pinned", g.dir,
                  "vllm: ok")
