"""model_harness.py - what sglang_model_probe.py and vllm_model_probe.py
share: pd_model's model and the run's constants ($KVW_RUN_DIR, prefill
and decode TP from $KVW_HARNESS_TP "P,D"), the step lines, a block
allocator that hands out the most recently freed blocks first, the
one-process reference and its check, and the prefill member the probes
kill (and how they see kv-up's restart of it)."""
import os
import signal
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
# pd_model is an example, not a part of the package (installed or not).
sys.path.append(os.path.join(HERE, "..", "..", "examples"))
import pd_model  # noqa: E402

RUN = os.environ["KVW_RUN_DIR"]
PTP, DTP = (int(x) for x in os.environ["KVW_HARNESS_TP"].split(","))
DEADLINE = time.monotonic() + 90
NEW_TOKENS = 6
TOL = 1e-4  # test_model.py says why
CFG = pd_model.Config()
MODEL = pd_model.Model(CFG)
PT = CFG.page_tokens
KILLED = "p%d" % (PTP - 1)  # the last prefill rank's member
FAKE = os.path.join(HERE, "..", "peers", "kvwfake.py")


def step(name):
    print("step %s: ok" % name, flush=True)


class Blocks(pd_model.PageAllocator):
    """The most recently freed pages first, so a retracted (preempted)
    request's pages go to the next request."""

    def release(self, pages):
        self.free[:0] = pages


class Reference:
    """A request's prompt (seeded by key) and the one-process run's tokens
    and logits for it."""

    def __init__(self, key, prompt_len):
        self.prompt = np.random.default_rng(key).integers(
            0, CFG.vocab, prompt_len)
        self.ref_toks, self.ref_logits = pd_model.one_process(
            MODEL, self.prompt, NEW_TOKENS)
        self.n_pages = -(-prompt_len // PT)

    @staticmethod
    def forward(caches, tokens, pos):
        """The decode's forward of tokens at positions pos: the logits of
        the last. caches: the DTP ranks' caches, or a function (tokens,
        pos) -> logits that runs it in the rank processes."""
        if callable(caches):
            return caches(tokens, pos)
        return MODEL.logits(MODEL.layers(MODEL.embed[tokens], pos, 0,
                                         CFG.layers, caches, DTP))

    def decode_step(self, pages, alloc, caches):
        """One greedy decode step of the request (a running batch's
        forward) on the decode's DTP ranks: self.toks and self.logits
        grow by one; a page more from alloc when the token needs it
        (caches hold the pages list itself). True once it has as many
        tokens as the reference."""
        p = len(self.prompt) + len(self.toks) - 1
        if p // PT >= len(pages):
            pages.extend(alloc.alloc(1))
        self.logits.append(self.forward(caches, [self.toks[-1]],
                                        np.array([p])))
        self.toks.append(int(np.argmax(self.logits[-1])))
        return len(self.toks) == len(self.ref_toks)

    def recompute(self, alloc, make_caches):
        """A retracted (preempted) request resumed as the engines do without
        a KV offload: what it had (the prompt and the tokens it generated
        but the last) prefilled again on the decode, in pages from alloc.
        Returns (pages, caches)."""
        seq = np.concatenate([self.prompt, self.toks[:-1]])
        pages = alloc.alloc(-(-len(seq) // PT))
        caches = make_caches(pages)
        self.forward(caches, seq, np.arange(len(seq)))
        return pages, caches

    def equal(self, toks, logits):
        """The outcome line of a request that succeeded: its tokens must be
        the reference's and its logits within TOL."""
        diff = float(np.abs(np.array(logits) - self.ref_logits).max())
        assert toks == self.ref_toks, (toks, self.ref_toks)
        assert diff <= TOL, diff
        return "tokens equal, max |logit diff| %.3g" % diff


def kill_prefill_member():
    """SIGKILL to KILLED (kv-up restarts it); its pid."""
    pid = member_pid()
    os.kill(pid, signal.SIGKILL)
    return pid


def member_pid():
    return int(open(os.path.join(RUN, "pids", KILLED + ".pid")).read())


def peer_rows(tables):
    """(liveness, epoch) of KILLED in each decode rank's peer table (what
    kv-heartbeat writes and kv-receiver reads before it sends a room)."""
    rows = []
    for t in tables:
        out = subprocess.run([sys.executable, FAKE, "peers", t], check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        mine = [x.split() for x in out.splitlines()
                if x.endswith("/%s.peer" % KILLED)]
        rows.append((mine[0][1], mine[0][3]) if mine else None)
    return rows


def wait_restart_seen(tables, before):
    """Until every decode rank's peer table names the restarted member (a
    new epoch, alive). A room sent in the moment between the restart and
    a decode rank learning of it is failed there as "peer restarted"
    while the new member may keep it (left open: the closing note of the
    stop that wrote this says so)."""
    while not all(r and r[0] == "alive" and r[1] != b[1]
                  for r, b in zip(peer_rows(tables), before)):
        assert time.monotonic() < DEADLINE, (peer_rows(tables), before)
        time.sleep(0.01)
