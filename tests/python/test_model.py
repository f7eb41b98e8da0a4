"""test_model.py - a real model's KV cache through kvwire: the numpy
transformer of examples/pd_model.py prefilled on one group side, decoded
from the transferred cache on the other, token for token equal to the same
model in one process, in four topologies.

Tolerance: logits within 1e-4 (absolute; they are of order 1 to 10). With
TP 1 on both sides the arithmetic is the one-process arithmetic on the same
float32 values (0 difference here); a TP split only reorders float32 sums
(each rank adds its heads' share of the output projection, then the ranks'
shares are summed), so the logits move by a few float32 ulps through 4
layers (about 2e-6 observed): 1e-4 leaves room for other BLAS builds while
a wrong head or page, which moves logits by O(1), cannot pass."""
import random

import numpy as np
import pytest

import pd_model
from conftest import REPORT
from kvwire import make_layout, read_run_dir

TOL = 1e-4
NEW_TOKENS = 16


@pytest.fixture(scope="module")
def reference():
    cfg = pd_model.Config()
    model = pd_model.Model(cfg)
    prompt = np.random.default_rng(5).integers(0, cfg.vocab, 23)
    toks, logits = pd_model.one_process(model, prompt, NEW_TOKENS)
    return model, prompt, toks, logits


@pytest.mark.parametrize("ptp,ppp,dtp,transport,layout", [
    (1, 1, 1, "shm", "sglang"), (2, 1, 1, "shm", "sglang"),
    (1, 1, 2, "shm", "sglang"), (1, 2, 1, "shm", "sglang"),
    (2, 1, 1, "tcp", "sglang"), (2, 1, 1, "tcp", "vllm"),
    (1, 2, 2, "shm", "vllm"), (1, 1, 2, "tcp", "vllm-blocks")])
def test_decode_from_transferred_kv_equals_one_process(group_factory,
                                                       reference, ptp, ppp,
                                                       dtp, transport,
                                                       layout):
    """layout: the pools' --kv-layout (vllm: each layer's K then its V,
    as vLLM's per-layer tensor; vllm-blocks: each block's K then its V,
    vLLM's block-major tensor; the engines read K and V by layer)."""
    model, prompt, ref_toks, ref_logits = reference
    g = group_factory("--prefill-tp", ptp, "--prefill-pp", ppp,
                      "--decode-tp", dtp, "--workers", 1, "--transport",
                      transport, "--kv-layout", layout,
                      *model.cfg.shape_flags())
    toks, logits = pd_model.run_pd(model, g.dir, prompt, NEW_TOKENS, ptp,
                                   ppp, dtp)
    diff = float(np.abs(logits - ref_logits).max())
    REPORT.append("model: prefill tp %d pp %d -> decode tp %d (%s, %s "
                  "layout): %d tokens equal: %s, max |logit diff| %.3g"
                  % (ptp, ppp, dtp, transport, layout, len(toks),
                     toks == ref_toks, diff))
    assert toks == ref_toks
    assert diff <= TOL


def own_memory_run(group_factory, reference, label, ptp, ppp, dtp,
                   transport, own, prefix_pages):
    """A group of the reference's model, one room through it with the
    engines' memory their own where `own` says and a decode prefix;
    (tokens, max |logit diff|), reported."""
    model, prompt, ref_toks, ref_logits = reference
    g = group_factory("--prefill-tp", ptp, "--prefill-pp", ppp,
                      "--decode-tp", dtp, "--workers", 1, "--transport",
                      transport, *model.cfg.shape_flags())
    toks, logits = pd_model.run_pd(model, g.dir, prompt, NEW_TOKENS, ptp,
                                   ppp, dtp, prefix_pages=prefix_pages,
                                   own_memory=own)
    diff = float(np.abs(logits - ref_logits).max())
    REPORT.append("model: %sprefill tp %d pp %d -> decode tp %d (%s, own "
                  "memory: %s, prefix %d pages): %d tokens equal: %s, max "
                  "|logit diff| %.3g" % (label, ptp, ppp, dtp, transport,
                                         own or "none", prefix_pages,
                                         len(toks), toks == ref_toks, diff))
    return toks, diff


@pytest.mark.parametrize("ptp,ppp,dtp,transport,own,prefix_pages", [
    (1, 1, 1, "shm", "both", 0), (2, 1, 1, "tcp", "prefill", 2),
    (1, 1, 2, "shm", "decode", 0), (1, 2, 1, "tcp", "both", 3)])
def test_engines_own_memory_gives_the_same_output(group_factory, reference,
                                                  ptp, ppp, dtp, transport,
                                                  own, prefix_pages):
    """Issue 32 item 1: the engines keep their KV cache in memory of their
    own (pd_model.OwnKV: per layer one allocation, the layer's V pages
    before its K pages: neither the pool's layout nor its memory),
    registered in place, and compute and read it there; the decode's
    output is the one-process output."""
    toks, diff = own_memory_run(group_factory, reference, "", ptp, ppp,
                                dtp, transport, own, prefix_pages)
    assert toks == reference[2]
    assert diff <= TOL


@pytest.mark.parametrize("ptp,dtp,transport,prefix_pages", [
    (1, 1, "shm", 2), (2, 1, "tcp", 5), (1, 2, "shm", 5)])
def test_decode_prefix_is_not_sent_and_the_output_is_the_same(
        group_factory, reference, ptp, dtp, transport, prefix_pages):
    """The decode holds the prompt's first pages already (it computed
    them for an earlier request) and says so (decode_prefix_len): the
    prefill is told, computes every token but sends only the pages after
    them, and the decode's output is the one-process output."""
    model, prompt, ref_toks, ref_logits = reference
    g = group_factory("--prefill-tp", ptp, "--decode-tp", dtp, "--workers",
                      1, "--transport", transport, *model.cfg.shape_flags())
    toks, logits = pd_model.run_pd(model, g.dir, prompt, NEW_TOKENS, ptp, 1,
                                   dtp, prefix_pages=prefix_pages)
    diff = float(np.abs(logits - ref_logits).max())
    REPORT.append("model: prefill tp %d -> decode tp %d (%s), decode prefix "
                  "of %d pages: %d tokens equal: %s, max |logit diff| %.3g"
                  % (ptp, dtp, transport, prefix_pages, len(toks),
                     toks == ref_toks, diff))
    assert toks == ref_toks
    assert diff <= TOL


@pytest.mark.parametrize("players,dlayers,ptp,dtp", [
    ("sglang", "vllm", 2, 1), ("vllm", "sglang", 1, 2)])
def test_engines_of_two_kv_layouts_exchange_kv(group_factory, reference,
                                               players, dlayers, ptp, dtp):
    """An SGLang-laid-out prefill (every K, then every V) and a vLLM-laid-out
    decode (each layer's K then its V), and the reverse, under a TP
    mismatch: two groups of one cluster, the decode's reaching the
    prefill's bootstrap; the output is the one-process output."""
    model, prompt, ref_toks, ref_logits = reference
    cluster = "L%d" % random.randrange(10 ** 6)
    common = ["--workers", 1, "--cluster", cluster, *model.cfg.shape_flags()]
    gp = group_factory("--prefill-tp", ptp, "--kv-layout", players, *common)
    gd = group_factory("--decode-tp", dtp, "--kv-layout", dlayers, *common)
    for g, layout in ((gp, players), (gd, dlayers)):  # as the group says
        bufs, _ = make_layout(read_run_dir(g.dir)[1], (1, 1), (0, 0), False)
        assert [b.layer_id for b in bufs[:3]] == \
            ([0, 0, 1] if layout == "vllm" else [0, 1, 2])
    toks, logits = pd_model.run_pd(model, gp.dir, prompt, NEW_TOKENS, ptp, 1,
                                   dtp, decode_run_dir=gd.dir)
    diff = float(np.abs(logits - ref_logits).max())
    REPORT.append("model: prefill tp %d (%s layout) -> decode tp %d (%s "
                  "layout): %d tokens equal: %s, max |logit diff| %.3g"
                  % (ptp, players, dtp, dlayers, len(toks), toks == ref_toks,
                     diff))
    assert toks == ref_toks
    assert diff <= TOL


@pytest.fixture(scope="module")
def hybrid_reference():
    cfg = pd_model.Config(hybrid=True)
    model = pd_model.Model(cfg)
    prompt = np.random.default_rng(5).integers(0, cfg.vocab, 23)
    toks, logits = pd_model.one_process(model, prompt, NEW_TOKENS)
    plain = pd_model.one_process(pd_model.Model(pd_model.Config()), prompt,
                                 NEW_TOKENS)[0]
    assert toks != plain  # the hybrid layers change the output
    return model, prompt, toks, logits


@pytest.mark.parametrize("ptp,ppp,dtp,transport,own,prefix_pages", [
    (1, 1, 1, "shm", "both", 3), (2, 1, 1, "tcp", "prefill", 0),
    (1, 1, 2, "shm", "decode", 2), (1, 2, 1, "tcp", "both", 1),
    (1, 1, 1, "tcp", "", 0), (2, 1, 1, "shm", "", 4)])
def test_hybrid_model_with_state_equals_one_process(
        group_factory, hybrid_reference, ptp, ppp, dtp, transport, own,
        prefix_pages):
    """Issue 32 item 6: the hybrid model (a Mamba-like recurrent layer
    whose per-request state sits in a request slot row, a sliding-window
    layer whose K/V sit in SWA rows by page, a speculative draft layer on
    the decode, three metadata buffers), the
    engines' memory their own where `own` says, a decode prefix of some
    pages: the decode goes on from the moved state and gives the
    one-process output, exactly where nothing changes the order of float
    sums (equal TP: TP 1 -> 1, PP 2 -> 1), within 1e-5 elsewhere."""
    model = hybrid_reference[0]
    toks, diff = own_memory_run(group_factory, hybrid_reference,
                                "hybrid, ", ptp, ppp, dtp, transport, own,
                                prefix_pages)
    assert toks == hybrid_reference[2]
    # The decode's draft layer (its KV in the decode's draft buffers, its
    # first input the hidden state row that moved) guesses as in one
    # process.
    assert len(model.pd_proposals) == NEW_TOKENS
    assert model.pd_proposals == model.proposals
    assert diff == 0.0 if ptp == dtp else diff <= 1e-5


@pytest.mark.parametrize("component,dtp", [(0, 1), (1, 1), (1, 2)])
def test_one_changed_state_byte_is_caught(group_factory, hybrid_reference,
                                          component, dtp):
    """The hybrid runs can fail: one byte of the received recurrent state
    (component 0, the request's slot row) or of an SWA row of the window
    (component 1) changed after it landed, on the last decode rank, and
    the run does not pass: with one decode rank the output is not the
    exact one-process output (one high mantissa bit); with
    two, the ranks' replicated rows differ and the decode refuses them."""
    model, prompt, ref_toks, ref_logits = hybrid_reference
    c = model.cfg
    g = group_factory("--decode-tp", dtp, "--workers", 1,
                      *c.shape_flags())

    def flip(pools, pages, aux_slot, rows):
        if component == 0:
            row = pools[-1].state(0, c.rec_layer)[rows.slot]
        else:
            last = rows.window(len(prompt))[-1]
            row = pools[-1].state(1, c.swa_layer)[rows.rows[last]]
        row[2] ^= 0x40  # a high mantissa bit of the row's first float32

    if dtp > 1:
        with pytest.raises(RuntimeError, match="different state"):
            pd_model.run_pd(model, g.dir, prompt, NEW_TOKENS, 1, 1, dtp,
                            tamper=flip)
        return
    toks, logits = pd_model.run_pd(model, g.dir, prompt, NEW_TOKENS, 1, 1,
                                   dtp, tamper=flip)
    # TP 1 -> 1 is exactly equal untampered (above): any change shows.
    assert toks != ref_toks or float(np.abs(logits - ref_logits).max()) > 0


def test_a_wrong_head_changes_the_logits(group_factory, reference):
    """The comparison can fail: the same run with two KV heads of one
    received page swapped on a decode rank does not match."""
    model, prompt, ref_toks, ref_logits = reference
    g = group_factory("--decode-tp", 2, "--workers", 1,
                      *model.cfg.shape_flags())

    def swap_heads(pools, pages, aux_slot):
        k = pools[1].k(0)
        k[pages[0]] = k[pages[0]][:, ::-1].copy()

    toks, logits = pd_model.run_pd(model, g.dir, prompt, NEW_TOKENS, 1, 1, 2,
                                   tamper=swap_heads)
    assert float(np.abs(logits - ref_logits).max()) > 100 * TOL


def test_one_changed_kv_byte_in_the_engines_own_memory_is_caught(
        group_factory, reference):
    """The own-memory runs can fail too: one byte (an exponent byte of
    one K value of a received page) changed in the decode engine's own
    memory on one rank, and the run does not pass as equal."""
    model, prompt, ref_toks, ref_logits = reference
    g = group_factory("--decode-tp", 2, "--workers", 1,
                      *model.cfg.shape_flags())

    def flip(pools, pages, aux_slot):
        # The pool's views show the engine's own memory once registered.
        pools[1].k(0)[pages[0]].view(np.uint8).reshape(-1)[3] ^= 0x40

    toks, logits = pd_model.run_pd(model, g.dir, prompt, NEW_TOKENS, 1, 1, 2,
                                   tamper=flip, own_memory="decode")
    assert float(np.abs(logits - ref_logits).max()) > 100 * TOL


@pytest.mark.parametrize("buf,byte", [(0, 8), (1, 3), (2, 101)])
def test_one_changed_metadata_byte_is_caught(group_factory, reference, buf,
                                            byte):
    """Every metadata buffer counts: one byte of the first token (output
    ids), of its logprob or of the hidden state row changed after it
    landed, on one decode rank, and the run does not pass as equal."""
    model, prompt, ref_toks, ref_logits = reference
    g = group_factory("--decode-tp", 2, "--workers", 1,
                      *model.cfg.shape_flags())

    def flip(pools, pages, aux_slot):
        pools[1].aux_buffers[buf][aux_slot, byte] ^= 0x40

    try:
        toks, logits = pd_model.run_pd(model, g.dir, prompt, NEW_TOKENS, 1,
                                       1, 2, tamper=flip)
    except RuntimeError as e:  # the metadata disagree with each other
        assert "metadata" in str(e)
        return
    assert toks != ref_toks or \
        float(np.abs(logits - ref_logits).max()) > 100 * TOL
