#!/usr/bin/python3
"""kvwfake.py - Python stand-ins for the prefill side of kvwire, for tests of
kv-receiver and kv-heartbeat, plus small clients (engine, control) and a room
table reader. Frames are packed exactly as lib/wire/frame.h documents: part 0 is
the 32-byte little-endian header, part 1 the body, part 2 a packed array.
Needs Debian's /usr/bin/python3 (pyzmq).

  kvwfake.py serve --topo TP,PP --ranks EP0,EP1.. [--boot EP] [--register-at EP]
                   [--not-ready N] [--auto] [--mla] [--ctl EP] [--events FILE]
      Plays the prefill bootstrap (--boot: a ROUTER answering BOOT_LOOKUP;
      NOT_READY for the first N topology lookups) and/or registers the ranks
      at a real kv-bootstrap (--register-at), and plays every prefill rank
      (a ROUTER per endpoint, unique rank = pp * TP + tp). Ranks take
      REGISTER / XFER_INFO / ABORT / PING; --auto answers each real XFER_INFO
      at once by writing the pages and sending STATUS(Success). Control
      commands on the PULL socket --ctl: "status RANK ROOM success|failed
      [REASON [TOKEN]]" (default token: the room's last XFER_INFO's),
      "holdping RANK", "flushping RANK" (delayed PONGs), "ack RANK ROOM [TOKEN]", "hold RANK" (no
      automatic ABORT_ACK), "mute RANK", "unmute RANK", "restart RANK".
      Every event is appended to --events as one line.
  kvwfake.py engine EP begin ROOM BOOTSTRAP AUX DP PAGES(comma list or -)
  kvwfake.py engine EP abort|clear ROOM
  kvwfake.py engine EP send-begin ROOM NUM_PAGES AUX
  kvwfake.py engine EP send-chunk ROOM IS_LAST PAGES
  kvwfake.py engine EP send-clear ROOM NUM_PAGES AUX PAGES
      SEND_BEGIN, the last SEND_CHUNK and CLEAR on one socket, in order
  kvwfake.py benchlink EP DIGEST ROOM NUM_PAGES
      Plays kv-bench --role decode on the link to a kv-bench --role prefill
      bound at EP (--insecure): a PING carrying DIGEST and at once, without
      waiting for the PONG, a SEND_BEGIN of ROOM; prints the PONG's digest
      ("digest=N"), then holds the link for 10 s.
  kvwfake.py ctl EP WORDS...
  kvwfake.py room TABLE ROOM      -> "state=NAME reason=N flags=N" or "missing"
  kvwfake.py peers TABLE          -> "id liveness misses epoch endpoint" lines
  kvwfake.py counter TABLE I      -> header counter I (0 = malformed)
  kvwfake.py pool PATH OFFSET LEN -> hex of pool bytes
"""
import mmap
import os
import random
import struct
import sys
import time

# pyzmq is imported by main() for the commands that talk: its import costs
# about 60 ms of CPU, and the table readers (room, peers, counter, pool),
# which tests poll in their waits, do without it (issue 30: make test's CPU).
zmq = None

MAGIC = 0x3157564B
T = dict(BOOT_REGISTER=1, BOOT_LOOKUP=2, BOOT_REPLY=3, PING=4, PONG=5,
         REGISTER=6, XFER_INFO=7, ABORT=8, STATUS=9, ABORT_ACK=10,
         SEND_BEGIN=11, SEND_CHUNK=12, RECV_BEGIN=13, RECV_ABORT=14, CLEAR=15)
TN = {v: k for k, v in T.items()}
STATES = ["Failed", "Bootstrapping", "WaitingForInput", "Transferring",
          "Success", "Cleared"]
LIVENESS = ["unknown", "alive", "dead"]
RTAB_F_BEGUN = 0x10  # lib/table/rtab.h


def hdr(typ, src=0, room=0, epoch=1):
    return struct.pack("<IBBHIIQQ", MAGIC, 1, typ, 0, src, 0, room, epoch)


def parse_hdr(b):
    magic, ver, typ, flags, src, _, room, epoch = struct.unpack("<IBBHIIQQ", b)
    assert magic == MAGIC and ver == 1
    return typ, src, room, epoch


def s16(s):
    b = s.encode()
    return struct.pack("<H", len(b)) + b


class Rd:
    def __init__(self, b):
        self.b, self.o = b, 0

    def u(self, fmt):
        v = struct.unpack_from("<" + fmt, self.b, self.o)
        self.o += struct.calcsize("<" + fmt)
        return v if len(v) > 1 else v[0]

    def s(self):
        n = self.u("H")
        v = self.b[self.o:self.o + n].decode()
        self.o += n
        return v

    def raw(self, n):
        v = self.b[self.o:self.o + n]
        self.o += n
        return v


def model(mla):
    # page_tokens, dtype, total heads, rank heads, head bytes, flags
    return struct.pack("<6I", 16, 2, 8, 8, 256, 1 if mla else 0)


class Fake:
    def __init__(self, a):
        self.ctx = zmq.Context()
        self.tp, self.pp = a.topo
        self.mla = a.mla
        self.auto = a.auto
        self.not_ready = a.not_ready
        self.ev = open(a.events, "a", buffering=1) if a.events else None
        self.ranks = []  # unique rank -> dict
        self.tokens = {}  # (unique rank, room) -> token of the last ABORT
        self.xtokens = {}  # (unique rank, room) -> token of the last XFER_INFO
        self.poller = zmq.Poller()
        for u, ep in enumerate(a.ranks):
            s = self.ctx.socket(zmq.ROUTER)
            s.linger = 0
            s.bind(ep)
            self.poller.register(s, zmq.POLLIN)
            self.ranks.append(dict(ep=ep, sock=s, epoch=random.getrandbits(63) | 1,
                                   muted=False, decode=None, rooms={}))
        self.boot = None
        if a.boot:
            self.boot = self.ctx.socket(zmq.ROUTER)
            self.boot.linger = 0
            self.boot.bind(a.boot)
            self.poller.register(self.boot, zmq.POLLIN)
        self.ctl = None
        if a.ctl:
            self.ctl = self.ctx.socket(zmq.PULL)
            self.ctl.linger = 0
            self.ctl.bind(a.ctl)
            self.poller.register(self.ctl, zmq.POLLIN)
        if a.register_at:
            self.register_at(a.register_at)
        self.event("READY")

    def event(self, line):
        if self.ev:
            self.ev.write(line + "\n")

    def coord_of(self, u):
        return (u % self.tp, u // self.tp, 0, 0)

    def register_at(self, ep):
        d = self.ctx.socket(zmq.DEALER)
        d.linger = 0
        d.connect(ep)
        for u, r in enumerate(self.ranks):
            tp, pp, cp, dp = self.coord_of(u)
            body = (struct.pack("<4I", self.tp, self.pp, 1, 1) +
                    struct.pack("<4I", tp, pp, cp, dp) + s16(r["ep"]) +
                    model(self.mla) + struct.pack("<2I", 0, 1))
            d.send_multipart([hdr(T["BOOT_REGISTER"], u, 0, r["epoch"]), body])
            if not d.poll(5000):
                sys.exit("no BOOT_REPLY from " + ep)
            parts = d.recv_multipart()
            if struct.unpack_from("<I", parts[1])[0] != 0:
                sys.exit("bootstrap refused rank %d" % u)
        d.close()

    def boot_reply(self, ident, room, status, coord=(0, 0, 0, 0), ep="", text=""):
        body = (struct.pack("<I", status) +
                struct.pack("<4I", self.tp, self.pp, 1, 1) +
                struct.pack("<4I", *coord) + s16(ep) + model(self.mla) +
                struct.pack("<2IQ", 0, 1, 0) + s16(text))  # epoch 0: not stated
        self.boot.send_multipart([ident, hdr(T["BOOT_REPLY"], 0, room), body])

    def on_boot(self):
        parts = self.boot.recv_multipart()
        ident, h = parts[0], parts[1]
        typ, src, room, epoch = parse_hdr(h)
        if typ == T["PING"]:
            self.boot.send_multipart([ident, hdr(T["PONG"], 0, room)])
            return
        if typ != T["BOOT_LOOKUP"]:
            return
        want = struct.unpack_from("<4I", parts[2])
        self.event("LOOKUP want=%s" % ",".join(str(x) for x in want))
        if want[0] == 0xFFFFFFFF:
            if self.not_ready > 0:
                self.not_ready -= 1
                self.boot_reply(ident, room, 1)
            else:
                self.boot_reply(ident, room, 0)
            return
        tp, pp = want[0], want[1]
        if tp >= self.tp or pp >= self.pp:
            self.boot_reply(ident, room, 2, text="no such rank")
            return
        u = pp * self.tp + tp
        self.boot_reply(ident, room, 0, want, self.ranks[u]["ep"])

    def to_decode(self, u, typ, room, body=None):
        r = self.ranks[u]
        if not r["decode"]:
            return
        parts = [hdr(typ, u, room, r["epoch"])]
        if body is not None:
            parts.append(body)
        r["decode"]["sock"].send_multipart(parts)

    def write_pages(self, u, room):
        r = self.ranks[u]
        d, info = r["decode"], r["rooms"].get(room)
        if not d or not info or not d["bufs"]:
            return
        off, item, npages = d["bufs"][0]
        with open(d["pool"], "r+b") as f:
            mm = mmap.mmap(f.fileno(), 0)
            for p in info["pages"]:
                mm[off + p * item: off + p * item + 16] = bytes([(room + u + 1) & 255]) * 16
                self.event("WROTE rank=%d room=%d off=%d byte=%02x"
                           % (u, room, off + p * item, (room + u + 1) & 255))
            mm.close()

    def status(self, u, room, ok, reason=0, token=None):
        # token: the incarnation token of the room's XFER_INFO (as kv-sender
        # echoes it); another one stands for a late STATUS of an old room
        if token is None:
            token = self.xtokens.get((u, room), 1)
        if ok:
            self.write_pages(u, room)
        body = (struct.pack("<BIQ", 4 if ok else 0, reason, token) +
                s16("" if ok else "fake failure"))
        self.to_decode(u, T["STATUS"], room, body)
        self.event("STATUS-SENT rank=%d room=%d ok=%d" % (u, room, ok))

    def on_rank(self, u):
        r = self.ranks[u]
        parts = r["sock"].recv_multipart()
        ident, h = parts[0], parts[1]
        typ, src, room, epoch = parse_hdr(h)
        if r["muted"]:
            return
        if typ == T["PING"]:
            if r.get("held") is not None:
                # holdping: answered later (flushping), with this epoch
                r["held"].append((ident, room, r["epoch"]))
                self.event("PING-HELD rank=%d" % u)
                return
            r["sock"].send_multipart([ident, hdr(T["PONG"], u, room, r["epoch"])])
            self.event("PING rank=%d" % u)
        elif typ == T["REGISTER"]:
            rd = Rd(parts[2])
            rd.u("4I"), rd.u("4I")
            ep, transport = rd.s(), rd.s()
            desc = rd.raw(rd.u("I"))
            plen = struct.unpack_from("<H", desc, 6)[0]
            pool = desc[32:32 + plen].decode()
            rd.u("6I")
            bufs = []
            for _ in range(rd.u("I")):
                lid, role, pl, _, off, item, np = rd.u("IBBHQII")
                bufs.append((off, item, np))
            if r["decode"] and r["decode"]["ep"] != ep:
                r["decode"]["sock"].close()
                r["decode"] = None
            if not r["decode"]:
                s = self.ctx.socket(zmq.DEALER)
                s.linger = 0
                s.connect(ep)
                r["decode"] = dict(ep=ep, sock=s)
            r["decode"].update(pool=pool, bufs=bufs, src=src, epoch=epoch)
            self.event("REGISTER rank=%d ep=%s transport=%s pool=%s bufs=%d"
                       % (u, ep, transport, pool, len(bufs)))
        elif typ == T["XFER_INFO"]:
            aux, req, dummy, xtok, _prefix = struct.unpack("<IIBQI", parts[2])
            pages = list(struct.unpack("<%dI" % (len(parts[3]) // 4), parts[3]))
            if not r["decode"]:
                self.event("XFER_INFO-UNREGISTERED rank=%d room=%d" % (u, room))
                return
            r["rooms"][room] = dict(pages=pages, dummy=dummy)
            self.xtokens[(u, room)] = xtok
            self.event("XFER_INFO rank=%d room=%d dummy=%d req=%d pages=%s token=%d"
                       % (u, room, dummy, req, ",".join(map(str, pages)) or "-", xtok))
            if self.auto and not dummy:
                self.status(u, room, True)
        elif typ == T["ABORT"]:
            reason, token = struct.unpack("<IQ", parts[2])
            self.tokens[(u, room)] = token
            self.event("ABORT rank=%d room=%d reason=%d token=%d" % (u, room, reason, token))
            if not r.get("hold"):
                self.to_decode(u, T["ABORT_ACK"], room, struct.pack("<Q", token))

    def on_ctl(self):
        w = self.ctl.recv().decode().split()
        self.event("CTL " + " ".join(w))
        u = int(w[1]) if len(w) > 1 else 0
        if w[0] == "status":
            # status U ROOM success|failed [REASON [TOKEN]]: default, the
            # token of the room's last XFER_INFO
            self.status(u, int(w[2]), w[3] == "success",
                        int(w[4]) if len(w) > 4 else 5,
                        int(w[5]) if len(w) > 5 else None)
        elif w[0] == "ack":
            # ack U ROOM [TOKEN]: default, the token of the last ABORT seen
            room = int(w[2])
            token = int(w[3]) if len(w) > 3 else self.tokens.get((u, room), 1)
            self.to_decode(u, T["ABORT_ACK"], room, struct.pack("<Q", token))
        elif w[0] == "hold":
            # hold U: rank U stops acking ABORTs by itself (see "ack")
            self.ranks[u]["hold"] = True
        elif w[0] == "mute":
            self.ranks[u]["muted"] = True
        elif w[0] == "unmute":
            self.ranks[u]["muted"] = False
        elif w[0] == "restart":
            self.ranks[u]["epoch"] = random.getrandbits(63) | 1
        elif w[0] == "holdping":
            # holdping U: rank U keeps the PINGs it gets unanswered
            self.ranks[u]["held"] = []
        elif w[0] == "flushping":
            # flushping U: answers the held PINGs, each with the epoch the
            # rank had when it got it (a delayed PONG), then answers again
            r = self.ranks[u]
            for ident, room, ep in r["held"] or []:
                r["sock"].send_multipart([ident, hdr(T["PONG"], u, room, ep)])
                self.event("PONG-FLUSHED rank=%d epoch=%d" % (u, ep))
            r["held"] = None

    def run(self):
        while True:
            for s, _ in self.poller.poll(1000):
                if s is self.boot:
                    self.on_boot()
                elif s is self.ctl:
                    self.on_ctl()
                else:
                    for u, r in enumerate(self.ranks):
                        if r["sock"] is s:
                            self.on_rank(u)


def serve(argv):
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("--topo", type=lambda s: tuple(int(x) for x in s.split(",")), default=(1, 1))
    p.add_argument("--ranks", type=lambda s: s.split(","), required=True)
    p.add_argument("--boot")
    p.add_argument("--register-at")
    p.add_argument("--not-ready", type=int, default=0)
    p.add_argument("--auto", action="store_true")
    p.add_argument("--mla", action="store_true")
    p.add_argument("--ctl")
    p.add_argument("--events")
    p.add_argument("--ready-fd", type=int)
    a = p.parse_args(argv)
    assert len(a.ranks) == a.topo[0] * a.topo[1]
    f = Fake(a)
    if a.ready_fd is not None:
        os.write(a.ready_fd, b"READY\n")
        os.close(a.ready_fd)
    f.run()


def send_one(ep, parts, typ=None):
    send_all(ep, [parts], typ)


def send_all(ep, msgs, typ=None):
    """The messages in turn on one socket (a DEALER unless TYP says): the
    peer reads them in order."""
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER if typ is None else typ)
    s.linger = 3000
    s.connect(ep)
    for parts in msgs:
        s.send_multipart(parts)
    s.close()
    ctx.term()


def engine(argv):
    ep, what, room = argv[0], argv[1], int(argv[2])
    if what == "begin":
        boot, aux, dp, pages = argv[3], int(argv[4]), int(argv[5]), argv[6]
        pl = [] if pages == "-" else [int(x) for x in pages.split(",")]
        body = s16(boot) + struct.pack("<III", aux, dp, 0)  # no prefix
        send_one(ep, [hdr(T["RECV_BEGIN"], 0, room), body,
                      struct.pack("<%dI" % len(pl), *pl)])
    elif what == "abort":
        send_one(ep, [hdr(T["RECV_ABORT"], 0, room)])
    elif what == "clear":
        send_one(ep, [hdr(T["CLEAR"], 0, room)])
    elif what == "send-begin":  # prefill engine -> kv-sender
        send_one(ep, [hdr(T["SEND_BEGIN"], 0, room),
                      struct.pack("<II", int(argv[3]), int(argv[4]))])
    elif what == "send-chunk":
        pl = [int(x) for x in argv[4].split(",")]
        send_one(ep, [hdr(T["SEND_CHUNK"], 0, room), struct.pack("<B", int(argv[3])),
                      struct.pack("<%dI" % len(pl), *pl)])
    elif what == "send-clear":  # SEND_BEGIN, last SEND_CHUNK, CLEAR, in order
        pl = [int(x) for x in argv[5].split(",")]
        send_all(ep, [[hdr(T["SEND_BEGIN"], 0, room),
                       struct.pack("<II", int(argv[3]), int(argv[4]))],
                      [hdr(T["SEND_CHUNK"], 0, room), struct.pack("<B", 1),
                       struct.pack("<%dI" % len(pl), *pl)],
                      [hdr(T["CLEAR"], 0, room)]])
    elif what == "raw":  # a malformed frame for hostile-input checks
        send_one(ep, [b"\x00" * 7])


def benchlink(argv):
    ep, digest, room, n = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.linger = 0
    s.connect(ep)
    s.send_multipart([hdr(T["PING"], 0, digest)])
    s.send_multipart([hdr(T["SEND_BEGIN"], 0, room), struct.pack("<II", n, 0)])
    s.rcvtimeo = 60000
    while True:
        typ, _, their, _ = parse_hdr(s.recv_multipart()[0])
        if typ == T["PONG"]:
            print("digest=%d" % their, flush=True)
            break
    time.sleep(10)  # the link stays up while the test looks; not a wait
    s.close()
    ctx.term()


def table_map(path):
    """The table's mapping and geometry, sizes read from its header (they
    change with its version)."""
    f = open(path, "rb")
    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    hsz, esz, cap, pcap, psz = struct.unpack_from("<IIIII", mm, 12)
    return mm, cap, pcap, hsz, esz, psz


def room(argv):
    mm, cap, _, hsz, esz, _ = table_map(argv[0])
    want = int(argv[1])
    key = struct.pack("<Q", want)
    best = None
    o = mm.find(key, hsz)
    while o != -1:
        if (o - hsz) % esz == 0 and o < hsz + cap * esz:
            w, peer, flags = struct.unpack_from("<QII", mm, o + 8)
            if w & 0xFF == 2 and (best is None or (w >> 8) & 0xFF != 5):
                best = (w, peer, flags)
        o = mm.find(key, o + 1)
    if best is None:
        print("missing")
        return
    w, peer, flags = best
    # RTAB_F_BEGUN (an engine's BEGIN reached the row) apart, last: the
    # tests match "state=... reason=... flags=..." as a prefix.
    print("state=%s reason=%d flags=%d peer=%d begun=%d" %
          (STATES[(w >> 8) & 0xFF], (w >> 16) & 0xFFFF, flags & ~RTAB_F_BEGUN,
           peer, bool(flags & RTAB_F_BEGUN)))


def peers(argv):
    mm, cap, pcap, hsz, esz, psz = table_map(argv[0])
    base = hsz + cap * esz
    for i in range(pcap):
        o = base + i * psz
        pid, live, epoch, misses = struct.unpack_from("<IIQI", mm, o)
        if pid == 0:  # never used, or retired (rtab_peers_retire)
            continue
        ep = bytes(mm[o + 32:o + 128]).split(b"\0")[0].decode()
        print("%d %s %d %d %s" % (pid, LIVENESS[live], misses, epoch, ep))


def counter(argv):
    mm = table_map(argv[0])[0]
    print(struct.unpack_from("<Q", mm, 64 + 8 * int(argv[1]))[0])


def pool(argv):
    with open(argv[0], "rb") as f:
        f.seek(int(argv[1]))
        print(f.read(int(argv[2])).hex())


def main():
    global zmq
    cmd, argv = sys.argv[1], sys.argv[2:]
    if cmd not in ("room", "peers", "counter", "pool"):
        import zmq as pyzmq
        zmq = pyzmq
    if cmd == "serve":
        serve(argv)
    elif cmd == "engine":
        engine(argv)
    elif cmd == "benchlink":
        benchlink(argv)
    elif cmd == "ctl":
        send_one(argv[0], [" ".join(argv[1:]).encode()], zmq.PUSH)
    elif cmd == "room":
        room(argv)
    elif cmd == "peers":
        peers(argv)
    elif cmd == "counter":
        counter(argv)
    elif cmd == "pool":
        pool(argv)
    else:
        sys.exit("unknown command " + cmd)


if __name__ == "__main__":
    main()
