#!/usr/bin/python3
"""e2e.py - small helpers for tests/bats/e2e.bats, the end-to-end tests of a
whole kvwire group. Frames are packed as lib/wire/frame.h documents (see
kvwfake.py). Needs Debian's /usr/bin/python3 (pyzmq).

  e2e.py fill POOL SEED
      Overwrites the whole pool file with bytes 1..255 drawn from SEED (no
      zero byte, so every byte a transfer lands is non-zero).
  e2e.py zero POOL
      Overwrites the whole pool file with zero bytes.
  e2e.py check SRC_POOL DST_POOL EXPECT_BYTES
      For a transfer with identical layouts on both sides whose source and
      destination page indices (and aux slots) are the same: every non-zero
      byte of DST must equal SRC at the same offset, and exactly
      EXPECT_BYTES bytes of DST are non-zero (DST started zeroed). Prints
      "landed=N mismatched=M"; exit 0 when intact, 1 otherwise.
  e2e.py early EP TYPE [ROOM [BODY_HEX]] [--want TYPE] [--wait S]
      Connects a DEALER to EP BEFORE anything listens there (zmq connects
      lazily and keeps the frame queued), sends one frame, then waits up to
      S seconds (default 20) for a reply of type --want (if given). Prints
      "sent" at once and "got TYPE" on the reply; exit 0, or 99 when no
      reply came in time.
"""
import mmap
import os
import random
import struct
import sys

import zmq

MAGIC = 0x3157564B
T = dict(BOOT_REGISTER=1, BOOT_LOOKUP=2, BOOT_REPLY=3, PING=4, PONG=5,
         REGISTER=6, XFER_INFO=7, ABORT=8, STATUS=9, ABORT_ACK=10,
         SEND_BEGIN=11, SEND_CHUNK=12, RECV_BEGIN=13, RECV_ABORT=14, CLEAR=15)
TN = {v: k for k, v in T.items()}


def hdr(typ, room=0):
    return struct.pack("<IBBHIIQQ", MAGIC, 1, typ, 0, 0, 0, room, 0x1234)


def fill(path, seed):
    size = os.path.getsize(path)
    if seed is None:
        data = bytes(size)
    else:
        data = random.Random(seed).randbytes(size).replace(b"\x00", b"\x01")
    with open(path, "r+b") as f:
        mm = mmap.mmap(f.fileno(), size)
        mm[:] = data
        mm.close()


def check(src_path, dst_path, expect):
    with open(src_path, "rb") as f:
        src = f.read()
    with open(dst_path, "rb") as f:
        dst = f.read()
    n = min(len(src), len(dst))
    landed = mismatched = 0
    # Compare in blocks: only blocks holding a non-zero byte cost work.
    step = 4096
    for off in range(0, len(dst), step):
        d = dst[off:off + step]
        if not d.strip(b"\x00"):
            continue
        s = src[off:off + step] if off < n else b""
        for i, b in enumerate(d):
            if b:
                landed += 1
                if i >= len(s) or s[i] != b:
                    mismatched += 1
    print("landed=%d mismatched=%d expected=%d" % (landed, mismatched, expect))
    return 0 if mismatched == 0 and landed == expect else 1


def early(argv):
    pos = argv[:next((i for i, a in enumerate(argv) if a.startswith("--")),
                     len(argv))]
    ep, typ = pos[0], T[pos[1]]
    room = int(pos[2]) if len(pos) > 2 else 0
    body = bytes.fromhex(pos[3]) if len(pos) > 3 else None
    want = argv[argv.index("--want") + 1] if "--want" in argv else None
    wait = float(argv[argv.index("--wait") + 1]) if "--wait" in argv else 20.0
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.linger = int(wait * 1000)
    s.connect(ep)  # nothing is bound yet: the frame waits in the pipe
    s.send_multipart([hdr(typ, room)] + ([body] if body is not None else []))
    print("sent", flush=True)
    rc = 0
    if want:
        if s.poll(int(wait * 1000)):
            parts = s.recv_multipart()
            got = TN.get(parts[0][5], "?")
            print("got", got, flush=True)
            rc = 0 if got == want else 1
        else:
            print("no reply", flush=True)
            rc = 99
    s.close()
    ctx.term()
    return rc


def main():
    cmd, argv = sys.argv[1], sys.argv[2:]
    if cmd == "fill":
        fill(argv[0], int(argv[1]))
        return 0
    if cmd == "zero":
        fill(argv[0], None)
        return 0
    if cmd == "check":
        return check(argv[0], argv[1], int(argv[2]))
    if cmd == "early":
        return early(argv)
    print(__doc__, file=sys.stderr)
    return 100


if __name__ == "__main__":
    sys.exit(main())
