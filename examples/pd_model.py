#!/usr/bin/python3
"""pd_model.py - a small decoder-only transformer in numpy whose KV cache
moves through kvwire between a prefill and a decode engine, checked
against the same model run in one process.

The model: seeded random float32 weights (no download), RMSNorm, rotary
positions, grouped-query attention (8 query heads over 4 KV heads), a
SiLU MLP, tied to a small vocabulary. Tensor parallelism is real
arithmetic: a TP rank holds only its KV heads (and the query heads that
use them) and the attention outputs of all ranks are summed (the
all-reduce), so a decode rank that received the wrong heads would produce
wrong logits. A PP stage holds only its layers.

With Config(hybrid=True) layer 1 is a Mamba-like recurrence (per-request
state: a conv window and h, in a request slot row) and layer 2 a
sliding-window attention layer (its K/V in SWA rows by page), as SGLang's
hybrid models keep them: kvwire state components (kv-up --state), sent with
the last chunk, the window's pages only; and the decode has a speculative
draft layer (--draft-layers 1: the decode holds draft KV, the prefill none)
that guesses each next token from the target's last hidden state, the first
time from the metadata row that moved.

The prefill engine runs the prompt in chunks of whole pages (chunked
prefill: each chunk attends to the cache the earlier chunks wrote), writes
K/V straight into its kvwire pool pages (chosen by a page allocator) and
sends each chunk's pages through KVSender; the last chunk carries the first
token in the aux slot. The decode engine receives into pages of its own
allocator (other indices), reads the first token from its aux slot and
generates greedily, appending to the transferred cache.

Usage: pd_model.py [--prefill-tp N --prefill-pp N --decode-tp N] [--tokens N]
                   [--hybrid]
starts its own group with kv-up, runs both engines, prints the tokens of
both runs and the largest logit difference, and stops the group.
"""
import argparse
import dataclasses
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "python"))
from kvwire import (KVArgs, KVManager, KVPoll, KVReceiver,  # noqa: E402
                    KVSender, read_run_dir)
from kvwire.layout import ROLE_AUX, ROLE_K, ROLE_STATE, ROLE_V, \
    state_layer  # noqa: E402

F32 = np.float32
DRAFT = 1000000  # the draft layer's id (LAYOUT_DRAFT_BASE)


@dataclasses.dataclass
class Config:
    vocab: int = 512
    hidden: int = 64
    layers: int = 4
    q_heads: int = 8
    kv_heads: int = 4
    head_dim: int = 16
    ffn: int = 256
    page_tokens: int = 4
    rope_theta: float = 10000.0
    # Hybrid (issue 32 item 6): layer rec_layer is a Mamba-like recurrence
    # (a depthwise causal conv of `conv` taps, then h = a * h + u, per
    # request: state rows by request slot) and layer swa_layer attends to
    # the last `window` tokens only (its K/V in pages of its own: state
    # rows by page), as SGLang's hybrid models keep them. Both are
    # replicated over TP (every rank computes them whole; one adds the
    # output): kvwire sends replicated state from one prefill rank.
    hybrid: bool = False
    rec_layer: int = 1
    swa_layer: int = 2
    rec_dim: int = 32
    conv: int = 4
    window: int = 6
    slots: int = 8
    swa_pages: int = 32
    # A speculative draft layer (EAGLE-like, with the hybrid model): on the
    # decode only (kvwire's rule: the decode has draft KV, the prefill
    # none), its KV in the decode's draft buffers (layer DRAFT), its first
    # input the prompt's last hidden state from the metadata row.

    @property
    def draft_layers(self):
        return 1 if self.hybrid else 0

    def shape_flags(self, pages=64):
        """The kv-up shape flags of this model's KV cache (float32)."""
        flags = ["--layers", self.layers, "--heads", self.kv_heads,
                 "--head-dim", self.head_dim, "--page-tokens",
                 self.page_tokens, "--dtype-bytes", 4, "--pages", pages,
                 "--aux-slots", 16, "--aux-bytes",
                 ",".join(str(n) for n in self.metadata_bytes())]
        if self.hybrid:
            flags += ["--draft-layers", self.draft_layers]
            flags += ["--state", "slot:%d:%d:rep,paged:%d:%d:rep" % (
                self.slots, self.rec_row_bytes(), self.swa_pages,
                self.swa_row_bytes())]
        return flags

    def rec_row_bytes(self):
        """A request slot's recurrent state: the conv's last conv - 1
        inputs and h, rec_dim float32 each."""
        return 4 * self.rec_dim * self.conv

    def swa_row_bytes(self):
        """An SWA page: K then V of page_tokens tokens, every KV head."""
        return 4 * 2 * self.page_tokens * self.kv_heads * self.head_dim

    def metadata_bytes(self):
        """The request's metadata buffers, as SGLang's decode reads them
        with the KV (one row of each per request): output ids (magic,
        room, first token, 0 as int32), the first token's logprob
        (float32) and the last prompt token's hidden state (float32 x
        hidden: what a speculative draft model starts from)."""
        return [16, 4, 4 * self.hidden]


class Model:
    """Weights, and the forward pass of a block of tokens through a range of
    layers on one TP group. Everything is float32."""

    def __init__(self, cfg, seed=1234):
        self.cfg = c = cfg
        rng = np.random.default_rng(seed)

        def w(*shape):
            return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(F32)

        self.embed = rng.standard_normal((c.vocab, c.hidden)).astype(F32)
        self.layer = [dict(
            wq=w(c.hidden, c.q_heads * c.head_dim),
            wk=w(c.hidden, c.kv_heads * c.head_dim),
            wv=w(c.hidden, c.kv_heads * c.head_dim),
            wo=w(c.q_heads * c.head_dim, c.hidden),
            w1=w(c.hidden, c.ffn), w3=w(c.hidden, c.ffn),
            w2=w(c.ffn, c.hidden),
            n1=(1 + 0.1 * rng.standard_normal(c.hidden)).astype(F32),
            n2=(1 + 0.1 * rng.standard_normal(c.hidden)).astype(F32))
            for _ in range(c.layers)]
        if c.hybrid:
            self.draft = dict(
                fc=w(c.hidden, c.hidden), wq=w(c.hidden, c.q_heads * c.head_dim),
                wk=w(c.hidden, c.kv_heads * c.head_dim),
                wv=w(c.hidden, c.kv_heads * c.head_dim),
                wo=w(c.q_heads * c.head_dim, c.hidden),
                n1=np.ones(c.hidden, F32))
            self.rec = dict(
                w_in=w(c.hidden, c.rec_dim), w_out=w(c.rec_dim, c.hidden),
                taps=(rng.standard_normal((c.conv, c.rec_dim)) /
                      c.conv).astype(F32),
                a=rng.uniform(0.5, 0.95, c.rec_dim).astype(F32))
        self.norm = np.ones(c.hidden, F32)
        self.lm_head = w(c.hidden, c.vocab)
        half = c.head_dim // 2
        self.inv_freq = (1.0 / c.rope_theta ** (np.arange(half) / half)) \
            .astype(F32)

    def rope(self, x, pos):
        """Rotary positions on x (n, heads, head_dim) at positions pos (n)."""
        ang = pos[:, None].astype(F32) * self.inv_freq[None, :]
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
        a, b = np.split(x, 2, axis=-1)
        return np.concatenate([a * cos - b * sin, a * sin + b * cos],
                              axis=-1).astype(F32)

    @staticmethod
    def rmsnorm(x, g):
        return (x / np.sqrt((x * x).mean(-1, keepdims=True) + F32(1e-6))
                * g).astype(F32)

    def heads_of(self, tp, r):
        """KV heads [lo, hi) and query heads [qlo, qhi) of TP rank r."""
        c = self.cfg
        kr = c.kv_heads // tp
        g = c.q_heads // c.kv_heads
        return r * kr, (r + 1) * kr, r * kr * g, (r + 1) * kr * g

    def attention(self, li, h, pos, caches, tp):
        """Attention of layer li for normed inputs h (n, hidden) at
        positions pos: each TP rank writes its heads' K/V into its cache,
        reads the whole prefix back and adds its share of the output
        projection (the all-reduce is the sum over ranks). caches: one
        per rank; a RankCaches in a rank's own process (the other ranks'
        entries None), whose group sums the ranks' shares."""
        c = self.cfg
        L = self.draft if li == DRAFT else self.layer[li]
        d, g = c.head_dim, c.q_heads // c.kv_heads
        out = np.zeros((h.shape[0], c.hidden), F32)
        for r in range(tp):
            if caches[r] is None:
                continue  # another process's rank
            lo, hi, qlo, qhi = self.heads_of(tp, r)
            q = (h @ L["wq"][:, qlo * d:qhi * d]).reshape(-1, qhi - qlo, d)
            k = (h @ L["wk"][:, lo * d:hi * d]).reshape(-1, hi - lo, d)
            v = (h @ L["wv"][:, lo * d:hi * d]).reshape(-1, hi - lo, d)
            q, k = self.rope(q, pos), self.rope(k, pos)
            caches[r].write(li, pos, k, v)
            K, V = caches[r].read(li, int(pos[-1]) + 1)
            K, V = np.repeat(K, g, axis=1), np.repeat(V, g, axis=1)
            s = np.einsum("nhd,thd->hnt", q, K) * F32(1 / np.sqrt(d))
            mask = np.arange(K.shape[0])[None, :] > pos[:, None]
            s = np.where(mask[None], F32(-np.inf), s)
            p = np.exp(s - s.max(-1, keepdims=True))
            p = (p / p.sum(-1, keepdims=True)).astype(F32)
            o = np.einsum("hnt,thd->nhd", p, V).reshape(h.shape[0], -1)
            out += o @ L["wo"][qlo * d:qhi * d]
        return caches.all_reduce(out) if isinstance(caches, RankCaches) \
            else out

    def recurrent(self, li, h, caches):
        """The Mamba-like layer for normed inputs h (n, hidden), token by
        token from the request's state (rank 0's; every rank's state is
        written: replicated). Returns its output (n, hidden)."""
        c, R = self.cfg, self.rec
        past, state = caches[0].rec_get(li)
        u = h @ R["w_in"]
        ys = np.zeros((h.shape[0], c.rec_dim), F32)
        for t in range(h.shape[0]):
            win = np.concatenate([past, u[t:t + 1]])  # conv taps, oldest 1st
            state = (R["a"] * state + (win * R["taps"]).sum(0)).astype(F32)
            past = win[1:]
            ys[t] = state
        for cache in caches:
            cache.rec_set(li, past, state)
        return (ys @ R["w_out"]).astype(F32)

    def window_attention(self, li, h, pos, caches):
        """The sliding-window layer: every head on every rank (its K/V are
        replicated state: each rank's store is written), queries attend to
        the last `window` positions only."""
        c, L = self.cfg, self.layer[li]
        d, g = c.head_dim, c.q_heads // c.kv_heads
        q = (h @ L["wq"]).reshape(-1, c.q_heads, d)
        k = (h @ L["wk"]).reshape(-1, c.kv_heads, d)
        v = (h @ L["wv"]).reshape(-1, c.kv_heads, d)
        q, k = self.rope(q, pos), self.rope(k, pos)
        for cache in caches:
            cache.swa_write(li, pos, k, v)
        K, V = caches[0].swa_read(li, int(pos[-1]) + 1)
        K, V = np.repeat(K, g, axis=1), np.repeat(V, g, axis=1)
        s = np.einsum("nhd,thd->hnt", q, K) * F32(1 / np.sqrt(d))
        t = np.arange(K.shape[0])[None, :]
        mask = (t > pos[:, None]) | (t <= pos[:, None] - c.window)
        s = np.where(mask[None], F32(-np.inf), s)
        p = np.exp(s - s.max(-1, keepdims=True))
        p = (p / p.sum(-1, keepdims=True)).astype(F32)
        o = np.einsum("hnt,thd->nhd", p, V).reshape(h.shape[0], -1)
        return (o @ L["wo"]).astype(F32)

    def mixer(self, li, h, pos, caches, tp):
        """Layer li's token mixer: attention, or a hybrid layer."""
        c = self.cfg
        if c.hybrid and li == c.rec_layer:
            return self.recurrent(li, h, caches)
        if c.hybrid and li == c.swa_layer:
            return self.window_attention(li, h, pos, caches)
        return self.attention(li, h, pos, caches, tp)

    def layers(self, x, pos, first, count, caches, tp):
        """Runs x (n, hidden) through layers [first, first + count)."""
        for li in range(first, first + count):
            L = self.layer[li]
            x = x + self.mixer(li, self.rmsnorm(x, L["n1"]), pos, caches,
                               tp)
            h = self.rmsnorm(x, L["n2"])
            a, b = h @ L["w1"], h @ L["w3"]
            x = (x + ((a / (1 + np.exp(-a))) * b) @ L["w2"]).astype(F32)
        return x

    def logits(self, x):
        return self.rmsnorm(x[-1:], self.norm)[0] @ self.lm_head

    def propose(self, hidden, tok, p, caches, tp):
        """The draft layer's guess at the token after tok (at position p),
        from the target's hidden state before it: its own K/V (layer
        DRAFT of caches) hold its earlier guesses' positions."""
        D = self.draft
        x = ((hidden + self.embed[tok]) @ D["fc"]).astype(F32)[None]
        x = x + self.attention(DRAFT, self.rmsnorm(x, D["n1"]),
                               np.array([p]), caches, tp)
        return int(np.argmax(self.logits(x)))


class RankCaches(list):
    """The caches of one TP rank's process: its own at its rank's index,
    None at the others'; group.all_reduce(rank, x) sums the ranks' float32
    shares in rank order, 0 first (the order of the one-process loop in
    attention, so every rank gets those very bits). Plain attention
    layers only: the hybrid layers read rank 0's state."""

    def __init__(self, tp, rank, cache, group):
        super().__init__(cache if r == rank else None for r in range(tp))
        self.rank, self.group = rank, group

    def all_reduce(self, x):
        return self.group.all_reduce(self.rank, x)


class ContigCache:
    """The one-process cache: a growing array per layer; the hybrid
    layers' state in plain arrays."""

    def __init__(self, cfg, heads, maxlen=1024):
        self.k = {}
        self.v = {}
        self.shape = (maxlen, heads, cfg.head_dim)
        self.cfg = cfg
        self.rec = {}

    def write(self, li, pos, k, v):
        for d, x in ((self.k, k), (self.v, v)):
            d.setdefault(li, np.zeros(self.shape, F32))[pos] = x

    def read(self, li, n):
        return self.k[li][:n], self.v[li][:n]

    swa_write, swa_read = write, read

    def rec_get(self, li):
        c = self.cfg
        return self.rec.get(li, (np.zeros((c.conv - 1, c.rec_dim), F32),
                                 np.zeros(c.rec_dim, F32)))

    def rec_set(self, li, past, state):
        self.rec[li] = (past.copy(), state.copy())


class PagedCache:
    """A cache in kvwire pool pages: token t of the sequence lives in page
    pages[t // page_tokens], slot t % page_tokens. With hybrid state
    (`hs`, a HybridRows): the recurrent layer's state in its request slot
    row, the window layer's K/V in SWA rows by page (state components 0
    and 1 of the pool, or of the engine's own memory)."""

    def __init__(self, pool, pages, page_tokens, hs=None):
        self.pool, self.pages, self.pt = pool, pages, page_tokens
        self.hs = hs

    def _rec_row(self, li):
        c = self.hs.cfg
        return self.pool.state(0, li)[self.hs.slot].view(F32).reshape(
            c.conv, c.rec_dim)

    def rec_get(self, li):
        row = self._rec_row(li)
        return row[:-1].copy(), row[-1].copy()

    def rec_set(self, li, past, state):
        row = self._rec_row(li)
        row[:-1], row[-1] = past, state

    def _swa_page(self, li, page):
        c = self.hs.cfg
        return self.pool.state(1, li)[page].view(F32).reshape(
            2, c.page_tokens, c.kv_heads, c.head_dim)

    def swa_write(self, li, pos, k, v):
        for i, p in enumerate(pos):
            page = self._swa_page(li, self.hs.swa_row(p // self.pt))
            page[0, p % self.pt], page[1, p % self.pt] = k[i], v[i]

    def swa_read(self, li, n):
        """K and V of positions [0, n): the pages this engine holds (the
        window at least), zeros elsewhere (outside the window, masked)."""
        c = self.hs.cfg
        K = np.zeros((n, c.kv_heads, c.head_dim), F32)
        V = np.zeros_like(K)
        for lp in range(-(-n // self.pt)):
            row = self.hs.rows.get(lp)
            if row is None:
                continue
            page = self._swa_page(li, row)
            lo, hi = lp * self.pt, min(n, (lp + 1) * self.pt)
            K[lo:hi], V[lo:hi] = page[0, :hi - lo], page[1, :hi - lo]
        return K, V

    def write(self, li, pos, k, v):
        pg = np.asarray(self.pages)[pos // self.pt]
        self.pool.k(li)[pg, pos % self.pt] = k
        self.pool.v(li)[pg, pos % self.pt] = v

    def read(self, li, n):
        idx = np.asarray(self.pages[:-(-n // self.pt)])
        K, V = self.pool.k(li)[idx], self.pool.v(li)[idx]
        return K.reshape(-1, *K.shape[2:])[:n], V.reshape(-1, *V.shape[2:])[:n]


class OwnKV:
    """An engine's KV cache in memory of its own, not kvwire's pool layout
    (issue 32 item 1): per layer one allocation holding the layer's V pages
    and then its K pages, and one per state buffer (rows x row bytes),
    from KVManager.alloc (memory kvwire's workers can map), registered in
    place with register_host_pool in the order the rank's layout lists its
    buffers. k(li), v(li) and state(c, li) are this memory's own arrays,
    as KVPool's are the pool's."""

    def __init__(self, m):
        kv = [b for b in m.pool.buffers if b.role != ROLE_AUX]
        self._arrs = {}
        for b in kv:
            n = b.item_len * b.pages
            if b.role == ROLE_STATE:
                self._arrs[(b.layer_id, b.role)] = \
                    m.alloc(n).reshape(b.pages, b.item_len)
                continue
            if b.role != ROLE_K:
                continue
            shape = m.pool.k(b.layer_id).shape
            block = m.alloc(2 * n)
            self._arrs[(b.layer_id, ROLE_V)] = \
                block[:n].view(F32).reshape(shape)
            self._arrs[(b.layer_id, ROLE_K)] = \
                block[n:].view(F32).reshape(shape)
        m.register_host_pool(
            [self._arrs[(b.layer_id, b.role)].ctypes.data for b in kv],
            [b.item_len * b.pages for b in kv], [b.item_len for b in kv])

    def k(self, li):
        return self._arrs[(li, ROLE_K)]

    def v(self, li):
        return self._arrs[(li, ROLE_V)]

    def state(self, c, li):
        return self._arrs[(state_layer(c, li), ROLE_STATE)]


def kv_memory(m, own):
    """Where an engine keeps its KV: its own memory (own) or the pool."""
    return OwnKV(m) if own else m.pool


class PageAllocator:
    """A free list of page indices; `order` decides which come first."""

    def __init__(self, pages, order=None):
        self.free = list(order if order is not None else range(pages))

    def alloc(self, n):
        if n > len(self.free):
            raise MemoryError("out of KV pages")
        got, self.free = self.free[:n], self.free[n:]
        return got

    def release(self, pages):
        self.free.extend(pages)


class HybridRows:
    """One engine's rows of a request's hybrid state (every rank uses the
    same ones): its request slot (state component 0) and, by logical page
    of the sequence, the SWA row that holds it (component 1), from an
    allocator of SWA rows."""

    def __init__(self, cfg, slot, alloc):
        self.cfg, self.slot, self.alloc = cfg, slot, alloc
        self.rows = {}

    def swa_row(self, lp):
        if lp not in self.rows:
            self.rows[lp] = self.alloc.alloc(1)[0]
        return self.rows[lp]

    def window(self, n):
        """The logical pages that hold the last `window` of n tokens: what
        a decode needs to go on from position n."""
        c = self.cfg
        return list(range(max(0, n - c.window) // c.page_tokens,
                          -(-n // c.page_tokens)))

    def held_rows(self):
        """Every SWA row this engine holds, in page order."""
        return [self.rows[lp] for lp in sorted(self.rows)]

    def state_indices(self, n):
        """The room's state lists after n tokens (SGLang's
        state_indices: one list per component)."""
        return [[self.slot], [self.swa_row(lp) for lp in self.window(n)]]


def one_process(model, prompt, new_tokens):
    """The reference: the whole prompt in one pass, then greedy decoding,
    one process, contiguous cache. Returns (tokens, logits per token)."""
    c = model.cfg
    caches = [ContigCache(c, c.kv_heads)]
    pos = np.arange(len(prompt))
    x = model.layers(model.embed[prompt], pos, 0, c.layers, caches, 1)
    logits = [model.logits(x)]
    toks = [int(np.argmax(logits[-1]))]
    model.proposals = []  # the draft's guesses (hybrid), for comparison
    for i in range(new_tokens):
        p = np.array([len(prompt) + i])
        if c.draft_layers:
            model.proposals.append(model.propose(x[-1], toks[-1], p[0],
                                                 caches, 1))
        x = model.layers(model.embed[[toks[-1]]], p, 0, c.layers, caches, 1)
        logits.append(model.logits(x))
        toks.append(int(np.argmax(logits[-1])))
    return toks, np.array(logits)


AUX_MAGIC = 0x4b565731  # "KVW1": output ids hold magic, room, first token


def log_softmax_at(logits, tok):
    """log p(tok) of logits, float32 (the logprob SGLang returns)."""
    z = logits - logits.max()
    return F32(z[tok] - np.log(np.exp(z).sum(dtype=F32)))


def write_metadata(pool, slot, room, hidden_row, logits):
    """The prefill's metadata row of the request in every buffer."""
    ids, lp, hid = pool.aux_buffers
    tok = int(np.argmax(logits))
    ids[slot] = np.array([AUX_MAGIC, room & 0x7fffffff, tok, 0],
                         np.int32).view(np.uint8)
    lp[slot] = np.array([log_softmax_at(logits, tok)], F32).view(np.uint8)
    hid[slot] = hidden_row.astype(F32).view(np.uint8)


def read_metadata(model, pool, slot, room):
    """(first token, first logits) from the decode's metadata row: the
    logits are the model's head over the transferred hidden state, and the
    token and logprob the prefill wrote must be what they give."""
    ids, lp, hid = (b[slot] for b in pool.aux_buffers)
    ids, lp = ids.view(np.int32), lp.view(F32)[0]
    if ids[0] != AUX_MAGIC or ids[1] != room & 0x7fffffff:
        raise RuntimeError("metadata row is not this room's: %s" % ids)
    logits = model.logits(hid.view(F32)[None].copy())
    tok = int(np.argmax(logits))
    if ids[2] != tok or lp != log_softmax_at(logits, tok):
        raise RuntimeError("metadata disagree: token %d logprob %r, the "
                           "hidden state gives %d %r"
                           % (ids[2], lp, tok, log_softmax_at(logits, tok)))
    return tok, logits


def wait_for(what, cond, timeout=30.0):
    """Polls cond() until it is true (bounded); returns its value."""
    deadline, nap = time.monotonic() + timeout, 50e-6
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise TimeoutError("gave up waiting for " + what)
        time.sleep(nap)  # a kvwire room is read from shared memory: poll
        nap = min(2 * nap, 2e-3)


def prefill_engine(model, run_dir, tp, pp, room, prompt, chunk_pages,
                   decode_ready, own_memory=False):
    """The prefill instance: ranks (tp x pp), chunked prefill into pool
    pages (own_memory: into the engine's own memory, OwnKV), chunks sent
    as they are computed. Returns the first token's logits."""
    c = model.cfg
    ranks = [(r, s) for s in range(pp) for r in range(tp)]
    mgrs = {k: KVManager(KVArgs.from_run_dir(run_dir, "prefill", *k,
                                             dtype=F32), "prefill")
            for k in ranks}
    a0 = mgrs[ranks[0]].kv_args
    n_pages = -(-len(prompt) // c.page_tokens)
    pages = PageAllocator(a0.pages).alloc(n_pages)  # every rank: same pages
    aux_slot = 3
    senders = {k: KVSender(mgrs[k], a0.bootstrap_addr, room, None, k[1])
               for k in ranks}
    hs = HybridRows(c, 5, PageAllocator(c.swa_pages)) if c.hybrid else None
    mems = {k: kv_memory(mgrs[k], own_memory) for k in ranks}
    if hs:  # the request's recurrent state starts at zero
        for (r, s), mem in mems.items():
            a = mgrs[(r, s)].kv_args
            for li in range(a.prefill_start_layer, a.prefill_end_layer):
                mem.state(0, li)[hs.slot] = 0
    caches = {s: [PagedCache(mems[(r, s)], pages, c.page_tokens, hs)
                  for r in range(tp)] for s in range(pp)}
    try:
        decode_ready.wait(30)
        # SGLang's order: a sender is initialised once it is WaitingForInput,
        # with the pages after the decode's prefix (finalize_bootstrap).
        skip = None
        for k, snd in senders.items():
            wait_for("prefill %s WaitingForInput" % (k,),
                     lambda: snd.poll() != KVPoll.Bootstrapping)
            held = snd.pop_decode_prefix_len() // c.page_tokens
            if skip not in (None, held):
                raise RuntimeError("prefill ranks were told different "
                                   "decode prefixes")
            skip = held
            snd.init(n_pages - skip, aux_slot)
        step = chunk_pages * c.page_tokens
        for lo in range(0, len(prompt), step):
            hi = min(lo + step, len(prompt))
            pos = np.arange(lo, hi)
            x = model.embed[prompt[lo:hi]]
            for s in range(pp):
                first = mgrs[(0, s)].kv_args.prefill_start_layer
                count = mgrs[(0, s)].kv_args.prefill_end_layer - first
                x = model.layers(x, pos, first, count, caches[s], tp)
            # Every token is computed (attention needs the prefix), only
            # the pages after the decode's prefix are sent.
            chunk = np.array(pages[max(lo // c.page_tokens, skip):
                                   -(-hi // c.page_tokens)], np.int32)
            # The hybrid layers' state goes with the last chunk: the
            # request's slot and the SWA rows of the window's pages.
            state = None
            if hi == len(prompt):
                logits = model.logits(x)
                for m in mgrs.values():  # every rank's rows are the same
                    write_metadata(m.pool, aux_slot, room, x[-1], logits)
                state = hs.state_indices(hi) if hs else None
            for snd in senders.values():
                snd.send(chunk, state)
        for k, snd in senders.items():
            wait_for("prefill %s done" % (k,), lambda: snd.poll()
                     in (KVPoll.Success, KVPoll.Failed))
            if snd.poll() == KVPoll.Failed:
                snd.failure_exception()
            snd.clear()
        return logits
    finally:
        del caches, mems
        for m in mgrs.values():
            m.close()


def decode_engine(model, run_dir, tp, room, prompt, new_tokens,
                  decode_ready, seed=7, tamper=None, prefix_pages=0,
                  bootstrap=None, own_memory=False):
    """The decode instance: receives the room into its own pages, reads the
    first token and its logits from the metadata row, then decodes
    greedily on tp ranks. prefix_pages: the decode holds that many pages
    of the prompt already (its prefix cache: computed here before the
    request, and said to the prefill, which sends only the rest).
    tamper(pools, pages, aux_slot), when given, may change the received
    cache and metadata first (with a hybrid model, tamper(pools, pages,
    aux_slot, rows): rows the decode's HybridRows). bootstrap: the prefill instance's (default:
    the decode group's own). own_memory: the KV cache in the engine's own
    memory (OwnKV), not the pool. Returns (tokens, logits of every token:
    the first from the transferred hidden state)."""
    c = model.cfg
    mgrs = [KVManager(KVArgs.from_run_dir(run_dir, "decode", r, dtype=F32),
                      "decode") for r in range(tp)]
    kvs = [kv_memory(m, own_memory) for m in mgrs]
    a0 = mgrs[0].kv_args
    # Other indices than the prefill's: a shuffled free list.
    alloc = PageAllocator(a0.pages, np.random.default_rng(seed)
                          .permutation(a0.pages).tolist())
    prompt_len = len(prompt)
    n_pages = -(-prompt_len // c.page_tokens)
    pages = alloc.alloc(n_pages)
    aux_slot = 9
    hs = HybridRows(c, 2, PageAllocator(
        c.swa_pages, np.random.default_rng(seed + 1)
        .permutation(c.swa_pages).tolist())) if c.hybrid else None
    held = prefix_pages * c.page_tokens
    if held:  # an earlier request left the prompt's first pages here
        pos = np.arange(held)
        model.layers(model.embed[prompt[:held]], pos, 0, c.layers,
                     [PagedCache(kv, pages, c.page_tokens, hs) for kv in kvs],
                     tp)
    state = []
    if hs:
        # The window's pages come from the prefill, into rows of their
        # own (a prefix page in the window is computed here too: replaced)
        for lp in hs.window(prompt_len):
            hs.rows.pop(lp, None)
        state = hs.state_indices(prompt_len)
    recvs = [KVReceiver(m, bootstrap or a0.bootstrap_addr, room)
             for m in mgrs]
    try:
        for rv in recvs:
            rv.init(0)
            rv.send_metadata(np.array(pages[prefix_pages:], np.int32),
                             aux_slot, state, decode_prefix_len=held)
        decode_ready.set()
        for rv in recvs:
            wait_for("decode room", lambda: rv.poll()
                     in (KVPoll.Success, KVPoll.Failed))
            if rv.poll() == KVPoll.Failed:
                rv.failure_exception()
        if tamper:
            tamper([m.pool for m in mgrs], pages, aux_slot,
                   *([hs] if hs else []))
        if hs and any(not np.array_equal(kv.state(0, li)[hs.slot],
                                         kvs[0].state(0, li)[hs.slot]) or
                      not np.array_equal(kv.state(1, li)[hs.held_rows()],
                                         kvs[0].state(1, li)[
                                             hs.held_rows()])
                      for kv in kvs[1:] for li in (c.rec_layer,
                                                   c.swa_layer)):
            # Replicated state: rank 0's is computed with, so the others
            # must hold the same rows.
            raise RuntimeError("decode ranks received different state")
        firsts = [read_metadata(model, m.pool, aux_slot, room) for m in mgrs]
        if any(t != firsts[0][0] or not np.array_equal(lg, firsts[0][1])
               for t, lg in firsts):
            raise RuntimeError("decode ranks received different metadata")
        toks = [firsts[0][0]]
        caches = [PagedCache(kv, pages, c.page_tokens, hs) for kv in kvs]
        logits = [firsts[0][1]]
        # The draft starts from the prompt's last hidden state: the
        # metadata row the prefill wrote.
        last = mgrs[0].pool.aux_buffers[2][aux_slot].view(F32).copy()
        model.pd_proposals = []
        for i in range(new_tokens):
            p = prompt_len + i
            if p // c.page_tokens >= len(pages):
                pages.extend(alloc.alloc(1))  # caches share the list
            if c.draft_layers:
                model.pd_proposals.append(
                    model.propose(last, toks[-1], p, caches, tp))
            x = model.layers(model.embed[[toks[-1]]], np.array([p]), 0,
                             c.layers, caches, tp)
            last = x[-1]
            logits.append(model.logits(x))
            toks.append(int(np.argmax(logits[-1])))
        del caches
        for rv in recvs:
            rv.clear()
        return toks, np.array(logits)
    finally:
        del kvs
        for m in mgrs:
            m.close()


def run_pd(model, run_dir, prompt, new_tokens, prefill_tp=1, prefill_pp=1,
           decode_tp=1, room=0x1234567, chunk_pages=2, tamper=None,
           prefix_pages=0, decode_run_dir=None, own_memory=""):
    """Prefill and decode engines as two threads that share nothing but
    the kvwire group (decode_run_dir: the decode side's own group, of the
    same --cluster, reaching run_dir's prefill by its bootstrap;
    own_memory: "prefill", "decode" or "both" keep their KV cache in
    memory of their own, OwnKV). Returns (tokens, logits) like
    one_process, both as the decode side has them; with a draft layer,
    model.pd_proposals holds the decode's draft guesses (one_process's are
    model.proposals)."""
    ready, out, errs = threading.Event(), {}, queue.Queue()

    def side(name, fn, *args):
        try:
            out[name] = fn(*args)
        except BaseException as e:  # reported to the caller below
            errs.put(e)
            ready.set()

    th = [threading.Thread(target=side, args=(
            "p", prefill_engine, model, run_dir, prefill_tp, prefill_pp,
            room, prompt, chunk_pages, ready,
            own_memory in ("prefill", "both"))),
          threading.Thread(target=side, args=(
            "d", decode_engine, model, decode_run_dir or run_dir, decode_tp,
            room, prompt, new_tokens, ready, 7, tamper, prefix_pages,
            read_run_dir(run_dir)[0]["bootstrap"].listen,
            own_memory in ("decode", "both")))]
    for t in th:
        t.start()
    for t in th:
        t.join()
    if not errs.empty():
        raise errs.get()
    return out["d"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prefill-tp", type=int, default=1)
    ap.add_argument("--prefill-pp", type=int, default=1)
    ap.add_argument("--decode-tp", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--hybrid", action="store_true",
                    help="a recurrent and a sliding-window layer, their "
                    "state moved as kvwire state components")
    ap.add_argument("--prompt-len", type=int, default=23)
    ap.add_argument("--own-memory", choices=("prefill", "decode", "both"),
                    default="", help="engines that keep their KV cache in "
                    "memory of their own, registered in place")
    o = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    kv_up = os.path.join(here, "..", "bin", "kv-up")
    cfg = Config(hybrid=o.hybrid)
    model = Model(cfg)
    prompt = np.random.default_rng(5).integers(0, cfg.vocab, o.prompt_len)
    run_dir = tempfile.mkdtemp(prefix="kvwm.", dir="/tmp")
    try:
        subprocess.run([kv_up, "--daemon", "--run-dir", run_dir,
                        "--prefill-tp", str(o.prefill_tp), "--prefill-pp",
                        str(o.prefill_pp), "--decode-tp", str(o.decode_tp),
                        "--workers", "1"] +
                       [str(x) for x in cfg.shape_flags()], check=True,
                       timeout=60)
        ref_toks, ref_logits = one_process(model, prompt, o.tokens)
        toks, logits = run_pd(model, run_dir, prompt, o.tokens, o.prefill_tp,
                              o.prefill_pp, o.decode_tp,
                              own_memory=o.own_memory)
    finally:
        subprocess.run([kv_up, "--stop", run_dir], timeout=60)
        shutil.rmtree(run_dir, ignore_errors=True)
    diff = float(np.abs(logits - ref_logits).max())
    print("one process: %s" % ref_toks)
    print("through kvwire (prefill tp %d pp %d -> decode tp %d): %s"
          % (o.prefill_tp, o.prefill_pp, o.decode_tp, toks))
    print("tokens equal: %s; max |logit difference|: %.3g"
          % (toks == ref_toks, diff))
    if cfg.draft_layers:
        print("draft guesses equal: %s"
              % (model.pd_proposals == model.proposals))
    return 0 if toks == ref_toks else 1


if __name__ == "__main__":
    sys.exit(main())
