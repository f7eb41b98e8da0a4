"""ranks.py - what the probes need to run an engine's TP ranks as processes
of their own, as SGLang runs a scheduler per rank and vLLM a worker per
rank: a group per engine (its gloo and NCCL groups: all-reduce MIN of
ints, all-gather and all-reduce SUM of float32 arrays, through shared
memory and a barrier), the run of the rank processes and a rank's exit."""
import os
import sys
import traceback

import numpy as np

WAIT = 60  # seconds any barrier waits before the run is given up
INTS = 8   # values of one all_reduce_min


class Group:
    """One engine's TP ranks. Every rank of the engine makes the same calls
    in the same order; each call is one round (write, barrier, read,
    barrier: every rank read before the next round writes). floats: the
    largest array gather takes. Make it before forking the ranks."""

    def __init__(self, ctx, tp, floats=0):
        self.tp, self.floats = tp, floats
        self.f = ctx.Array("f", max(1, tp * floats), lock=False)
        self.i = ctx.Array("q", tp * INTS, lock=False)
        self.bar = ctx.Barrier(tp)

    def all_reduce_min(self, rank, values):
        """The MIN over the ranks of each of values (ints), every rank
        getting the same answer."""
        values = [int(v) for v in values]
        assert len(values) <= INTS, values
        if self.tp == 1:
            return values
        self.i[rank * INTS:rank * INTS + len(values)] = values
        self.bar.wait(WAIT)
        out = [min(self.i[r * INTS + k] for r in range(self.tp))
               for k in range(len(values))]
        self.bar.wait(WAIT)
        return out

    def gather(self, rank, x):
        """Every rank's x (float32, one shape on every rank), rank 0 first."""
        x = np.ascontiguousarray(x, np.float32)
        if self.tp == 1:
            return [x]
        assert x.size <= self.floats, x.shape
        shared = np.ctypeslib.as_array(self.f)
        at = rank * self.floats
        shared[at:at + x.size] = x.ravel()
        self.bar.wait(WAIT)
        out = [shared[r * self.floats:r * self.floats + x.size]
               .reshape(x.shape).copy() for r in range(self.tp)]
        self.bar.wait(WAIT)
        return out

    def all_reduce(self, rank, x):
        """The sum over the ranks, rank 0's share first: the order of
        pd_model's one-process attention, so every rank gets the very
        bits the one-process loop would."""
        out = np.zeros(x.shape, np.float32)
        for part in self.gather(rank, x):
            out += part
        return out


def run_ranks(procs):
    """Starts the rank processes, waits for them (2 x WAIT at most each),
    kills any still running and fails unless every one exited 0."""
    for p in procs:
        p.start()
    for p in procs:
        p.join(2 * WAIT)
    codes = [p.exitcode for p in procs]
    for p in procs:
        if p.exitcode is None:
            p.kill()
    assert codes == [0] * len(procs), "rank processes exited %s" % codes


def rank_body(body, barriers):
    """A rank process's whole life: body(), then exit 0; on any failure
    the traceback and exit 1, with barriers (every one this rank waits
    on) broken, so the other ranks stop waiting and exit too."""
    try:
        body()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        for b in barriers:
            b.abort()
        os._exit(1)
    sys.stdout.flush()
    os._exit(0)
