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

The prefill engine runs the prompt in chunks of whole pages (chunked
prefill: each chunk attends to the cache the earlier chunks wrote), writes
K/V straight into its kvwire pool pages (chosen by a page allocator) and
sends each chunk's pages through KVSender; the last chunk carries the first
token in the aux slot. The decode engine receives into pages of its own
allocator (other indices), reads the first token from its aux slot and
generates greedily, appending to the transferred cache.

Usage: pd_model.py [--prefill-tp N --prefill-pp N --decode-tp N] [--tokens N]
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
from kvwire.layout import ROLE_AUX, ROLE_K, ROLE_V  # noqa: E402

F32 = np.float32


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

    def shape_flags(self, pages=64):
        """The kv-up shape flags of this model's KV cache (float32)."""
        return ["--layers", self.layers, "--heads", self.kv_heads,
                "--head-dim", self.head_dim, "--page-tokens",
                self.page_tokens, "--dtype-bytes", 4, "--pages", pages,
                "--aux-slots", 16, "--aux-bytes",
                ",".join(str(n) for n in self.metadata_bytes())]

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
        projection (the all-reduce is the sum over ranks)."""
        c, L = self.cfg, self.layer[li]
        d, g = c.head_dim, c.q_heads // c.kv_heads
        out = np.zeros((h.shape[0], c.hidden), F32)
        for r in range(tp):
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
        return out

    def layers(self, x, pos, first, count, caches, tp):
        """Runs x (n, hidden) through layers [first, first + count)."""
        for li in range(first, first + count):
            L = self.layer[li]
            x = x + self.attention(li, self.rmsnorm(x, L["n1"]), pos, caches,
                                   tp)
            h = self.rmsnorm(x, L["n2"])
            a, b = h @ L["w1"], h @ L["w3"]
            x = (x + ((a / (1 + np.exp(-a))) * b) @ L["w2"]).astype(F32)
        return x

    def logits(self, x):
        return self.rmsnorm(x[-1:], self.norm)[0] @ self.lm_head


class ContigCache:
    """The one-process cache: a growing array per layer."""

    def __init__(self, cfg, heads, maxlen=1024):
        self.k = {}
        self.v = {}
        self.shape = (maxlen, heads, cfg.head_dim)

    def write(self, li, pos, k, v):
        for d, x in ((self.k, k), (self.v, v)):
            d.setdefault(li, np.zeros(self.shape, F32))[pos] = x

    def read(self, li, n):
        return self.k[li][:n], self.v[li][:n]


class PagedCache:
    """A cache in kvwire pool pages: token t of the sequence lives in page
    pages[t // page_tokens], slot t % page_tokens."""

    def __init__(self, pool, pages, page_tokens):
        self.pool, self.pages, self.pt = pool, pages, page_tokens

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
    and then its K pages, from KVManager.alloc (memory kvwire's workers can
    map), registered in place with register_host_pool in the order the
    rank's layout lists its buffers. k(li) and v(li) are this memory's
    own arrays, as KVPool's are the pool's."""

    def __init__(self, m):
        kv = [b for b in m.pool.buffers if b.role != ROLE_AUX]
        self._arrs = {}
        for b in kv:
            if b.role != ROLE_K:
                continue
            shape = m.pool.k(b.layer_id).shape
            n = b.item_len * b.pages
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


def one_process(model, prompt, new_tokens):
    """The reference: the whole prompt in one pass, then greedy decoding,
    one process, contiguous cache. Returns (tokens, logits per token)."""
    c = model.cfg
    caches = [ContigCache(c, c.kv_heads)]
    pos = np.arange(len(prompt))
    x = model.layers(model.embed[prompt], pos, 0, c.layers, caches, 1)
    logits = [model.logits(x)]
    toks = [int(np.argmax(logits[-1]))]
    for i in range(new_tokens):
        p = np.array([len(prompt) + i])
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
    caches = {s: [PagedCache(kv_memory(mgrs[(r, s)], own_memory), pages,
                             c.page_tokens)
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
            if hi == len(prompt):
                logits = model.logits(x)
                for m in mgrs.values():  # every rank's rows are the same
                    write_metadata(m.pool, aux_slot, room, x[-1], logits)
            for snd in senders.values():
                snd.send(chunk)
        for k, snd in senders.items():
            wait_for("prefill %s done" % (k,), lambda: snd.poll()
                     in (KVPoll.Success, KVPoll.Failed))
            if snd.poll() == KVPoll.Failed:
                snd.failure_exception()
            snd.clear()
        return logits
    finally:
        del caches
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
    cache and metadata first. bootstrap: the prefill instance's (default:
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
    held = prefix_pages * c.page_tokens
    if held:  # an earlier request left the prompt's first pages here
        pos = np.arange(held)
        model.layers(model.embed[prompt[:held]], pos, 0, c.layers,
                     [PagedCache(kv, pages, c.page_tokens) for kv in kvs],
                     tp)
    recvs = [KVReceiver(m, bootstrap or a0.bootstrap_addr, room)
             for m in mgrs]
    try:
        for rv in recvs:
            rv.init(0)
            rv.send_metadata(np.array(pages[prefix_pages:], np.int32),
                             aux_slot, [], decode_prefix_len=held)
        decode_ready.set()
        for rv in recvs:
            wait_for("decode room", lambda: rv.poll()
                     in (KVPoll.Success, KVPoll.Failed))
            if rv.poll() == KVPoll.Failed:
                rv.failure_exception()
        if tamper:
            tamper([m.pool for m in mgrs], pages, aux_slot)
        firsts = [read_metadata(model, m.pool, aux_slot, room) for m in mgrs]
        if any(t != firsts[0][0] or not np.array_equal(lg, firsts[0][1])
               for t, lg in firsts):
            raise RuntimeError("decode ranks received different metadata")
        toks = [firsts[0][0]]
        caches = [PagedCache(kv, pages, c.page_tokens) for kv in kvs]
        logits = [firsts[0][1]]
        for i in range(new_tokens):
            p = prompt_len + i
            if p // c.page_tokens >= len(pages):
                pages.extend(alloc.alloc(1))  # caches share the list
            x = model.layers(model.embed[[toks[-1]]], np.array([p]), 0,
                             c.layers, caches, tp)
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
    one_process, both as the decode side has them."""
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
    ap.add_argument("--prompt-len", type=int, default=23)
    ap.add_argument("--own-memory", choices=("prefill", "decode", "both"),
                    default="", help="engines that keep their KV cache in "
                    "memory of their own, registered in place")
    o = ap.parse_args()
    here = os.path.dirname(os.path.abspath(__file__))
    kv_up = os.path.join(here, "..", "bin", "kv-up")
    cfg = Config()
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
    return 0 if toks == ref_toks else 1


if __name__ == "__main__":
    sys.exit(main())
