"""test_source.py - a prefill engine frees a room's source pages when
KVSender.poll() says Success or Failed (SGLang's KVPoll), so poll() may say
Failed only once no sender worker reads them any more (issue 29: on tcp a
decode may release an aborted room while a batch is still being sent, and
kv-bench once refilled the pages under it). The room's only worker is
SIGSTOPped before its job is dispatched, so the job stays outstanding
across the decode's abort for as long as the test holds it (no race to
win); once resumed, the worker drops the job of the failed room."""
import os
import signal
import subprocess

import numpy as np

from conftest import Group
from kvwire import KVArgs, KVManager, KVPoll, KVReceiver, KVSender
from kvwire import _lib
from test_binding import SHAPE, room_id, wait_for
from test_reuse import pid_of


def test_an_aborted_room_polls_failed_only_after_its_job_drained():
    # No stall check may replace the stopped worker while the test holds
    # it (that would end the job by other means).
    with Group("--heartbeat-interval", 300, "--workers", 1, *SHAPE,
               env={"KVW_WORKER_STALL": "600"}) as g:
        pm = KVManager(KVArgs.from_run_dir(g.dir, "prefill"), "prefill")
        dm = KVManager(KVArgs.from_run_dir(g.dir, "decode"), "decode")
        workers = [int(p) for p in subprocess.run(
            ["pgrep", "-P", str(pid_of(g, "p0"))], stdout=subprocess.PIPE,
            check=True).stdout.split()]
        assert len(workers) == 1
        stopped = False
        try:
            room = room_id()
            s = KVSender(pm, pm.kv_args.bootstrap_addr, room, [0], 0)
            r = KVReceiver(dm, dm.kv_args.bootstrap_addr, room)
            r.init(0)
            r.send_metadata(np.array([10, 11], np.int32), 1)
            wait_for("prefill WaitingForInput",
                     lambda: s.poll() == KVPoll.WaitingForInput)
            os.kill(workers[0], signal.SIGSTOP)
            stopped = True
            s.init(2, 0)
            s.send(np.array([3, 4], np.int32))
            wait_for("the job out at the stopped worker", lambda: (
                pm.status(room) is not None and
                pm.status(room).flags & _lib.ROOM_F_SENDING))
            r.abort()
            wait_for("the prefill room failed by the abort",
                     lambda: pm.status(room).state == _lib.FAILED)
            # Failed in the table, its job still out: not Failed to the
            # engine yet.
            assert pm.status(room).flags & _lib.ROOM_F_SENDING
            assert s.poll() == KVPoll.Transferring
            assert s.conclude_state is None
            os.kill(workers[0], signal.SIGCONT)
            stopped = False
            wait_for("prefill poll Failed", lambda: s.poll() == KVPoll.Failed)
            assert not pm.status(room).flags & _lib.ROOM_F_SENDING
            wait_for("decode releasable", lambda: r.releasable)
            s.clear()
            r.clear()
        finally:
            if stopped:
                os.kill(workers[0], signal.SIGCONT)
            pm.close()
            dm.close()
