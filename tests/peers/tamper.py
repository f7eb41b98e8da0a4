#!/usr/bin/python3
"""tamper.py - a keyless relay on the tcp data path (issue 29), for
tests/bats/tamper.bats: a TCP proxy that accepts prefill workers'
connections meant for a decode's data port (the test redirects them here)
and forwards each to the real port, parsing the stream so that it can
tamper with exactly the batches it picks. Standard library only (Debian's
/usr/bin/python3); xxh3 through ctypes from libxxhash (mk/deps.sh).

  tamper.py --listen HOST:PORT --to HOST:PORT --mode MODE [--every N]
            [--max M] [--first-conns K] [--seed S] [--lag L] [--retarget]
            [--state FILE] [--port-file FILE] [--ready-fd FD]

The handshake (CHALLENGE, HELLO, WELCOME) passes through untouched; its
CHALLENGE's version picks the framing, lib/xport/tcp/tcp_proto.h's v3 or
docs/TCP-V4.md's v4:

  v3 batch: header 40 (magic, ncopies u32, id u64, room u64, total u64,
            0 u64) | copies 16 each (dst_off u64, len u64) | payload |
            xxh3-64 of the payload u64;              ACK 16 (magic,
            status u32, id u64)
  v4 batch: header 56 (magic, ncopies u32, id u64, room u64, incarnation
            u64, total u64, seq u64, flags u32, 0 u32) | copies | head
            tag 16 | payload | body tag 16;          ACK 40 (magic,
            status u32, id u64, seq u64, tag 16)
            (with --encrypt the payload is ciphertext: the same framing)

Every Nth batch seen (default 50; counting all connections, resent
batches included, from 1; at most M of them, default no limit; with
--first-conns K only on the first K client connections) is tampered
with, as MODE says:
  payload  rewrites 16 payload bytes and recomputes the unkeyed hash (v3's
           trailer; v4's tags as --insecure computes them, XXH3-128: a
           keyless attacker can do no better)
  copybit  flips one bit, in bits 0..15 of one copy's dst_off, so that the
           copy stays inside the pool (a flip that leaves it is refused
           today already); a link error, nothing recomputed
  swap     swaps two same-length copies' destinations (the next batch
           with two such copies, when the Nth has none); unkeyed tags
           recomputed
  replay   passes the batch, keeps its bytes, and sends them again after
           the --lag'th next batch on the same connection (default 1); the
           ACK the sink answers the copy with is swallowed, so the client
           never sees it. With --retarget the copy carries the room id of
           the batch it follows (a live room: v3 writes a batch only for a
           live room), its copy list and payload unchanged, unkeyed tags
           recomputed: old bytes into pages that the old room gave back
  drop     never forwards the batch, and answers the client with a forged
           ACK OK for it, in its place among the sink's ACKs (v4: with the
           next sequence number and an unkeyed tag)
  count    rewrites the header's copy count to 0xFFFFFFFF (the rest of
           the batch unchanged): a size no sink may allocate for before
           the header is checked (its tag comes after the copy list)
  none     forwards everything (for checking the path)

--state FILE gets, after every read of a client's bytes that changed it
(before any of them is passed on) and every new connection, one line "tampered=T
tampered_conns=K batches=B conns=C hash_bad=H bad_frames=F" (written to
a temporary file and renamed: a reader never sees half of it): T batches
tampered with (a replay counts once it was sent), K connections that
carried at least one of them, B batches seen from clients, C client
connections, H v3 trailers that did not match the payload as the relay
computed them and F connections dropped for bytes that were not the
framing it expected (both 0, or the relay's framing is wrong). Each
tampering, and each forged ACK, is also logged on stderr. --port-file
gets the port it listens on (PORT 0: a free one); --ready-fd FD gets
"READY" once it listens (start_ready in helpers.bash). SIGTERM ends it.
Exit 0, or 2 on a usage or setup error.
"""
import argparse
import collections
import ctypes
import os
import random
import selectors
import signal
import socket
import struct
import sys

MAGIC_CHALLENGE = b"KVTC"
MAGIC_BATCH = b"KVTB"
MAGIC_ACK = b"KVTA"
HIGH_WATER = 8 << 20  # bytes queued toward one side before reading stops


class XXH128(ctypes.Structure):
    _fields_ = [("low64", ctypes.c_uint64), ("high64", ctypes.c_uint64)]


_lib = ctypes.CDLL("libxxhash.so.0")
_lib.XXH3_64bits.restype = ctypes.c_uint64
_lib.XXH3_64bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
_lib.XXH3_128bits.restype = XXH128
_lib.XXH3_128bits.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def xxh3_64(b):
    b = bytes(b)
    return _lib.XXH3_64bits(b, len(b))


def xxh3_128(b):
    """The 16-byte unkeyed tag as docs/TCP-V4.md's --insecure sends it: XXH3-128
    in its canonical form (XXH128_canonicalFromHash: big-endian, the high
    64 bits first)."""
    b = bytes(b)
    h = _lib.XXH3_128bits(b, len(b))
    return struct.pack(">QQ", h.high64, h.low64)


class Proto:
    """The byte layout of one protocol version."""

    def __init__(self, version):
        self.version = version
        if version == 3:
            self.welcome, self.header, self.ack = 8, 40, 16
            self.head_tag, self.trailer = 0, 8
            self.total_at = 24
        elif version == 4:
            self.welcome, self.header, self.ack = 48, 56, 40
            self.head_tag, self.trailer = 16, 16
            self.total_at = 32
        else:
            raise ValueError("protocol version %d" % version)


class Batch:
    """One batch taken apart: header, copy list, head tag (v4), payload,
    trailer (v3 digest or v4 body tag)."""

    def __init__(self, p, raw):
        self.p = p
        n = struct.unpack_from("<I", raw, 4)[0]
        self.ncopies = n
        self.id = struct.unpack_from("<Q", raw, 8)[0]
        self.room = struct.unpack_from("<Q", raw, 16)[0]
        self.total = struct.unpack_from("<Q", raw, p.total_at)[0]
        self.seq = None
        if p.version == 4:
            self.seq = struct.unpack_from("<Q", raw, 40)[0]
        o = p.header
        self.header = bytearray(raw[:o])
        self.copies = [list(struct.unpack_from("<QQ", raw, o + 16 * i))
                       for i in range(n)]
        o += 16 * n
        self.head_tag = bytes(raw[o:o + p.head_tag])
        o += p.head_tag
        self.payload = bytearray(raw[o:o + self.total])
        o += self.total
        self.trailer = bytes(raw[o:o + p.trailer])

    def copy_bytes(self):
        return b"".join(struct.pack("<QQ", d, n) for d, n in self.copies)

    def rehash(self):
        """Recomputes the unkeyed hash over what the batch says now."""
        if self.p.version == 3:
            self.trailer = struct.pack("<Q", xxh3_64(self.payload))
        else:
            self.head_tag = xxh3_128(bytes(self.header) + self.copy_bytes())
            self.trailer = xxh3_128(self.head_tag + bytes(self.payload))

    def raw(self):
        return (bytes(self.header) + self.copy_bytes() + self.head_tag +
                bytes(self.payload) + self.trailer)


def batch_len(p, buf):
    """Bytes of the batch at the start of buf, or None while its header is
    not all there. Raises ValueError on a stream that is not batches."""
    if len(buf) < p.header:
        return None
    if bytes(buf[:4]) != MAGIC_BATCH:
        raise ValueError("no batch magic: %r" % bytes(buf[:4]))
    n = struct.unpack_from("<I", buf, 4)[0]
    total = struct.unpack_from("<Q", buf, p.total_at)[0]
    return p.header + 16 * n + p.head_tag + total + p.trailer


class Relay:
    def __init__(self, args):
        self.a = args
        self.rng = random.Random(args.seed)
        self.sel = selectors.DefaultSelector()
        self.tampered = self.batches = self.conns = self.hash_bad = 0
        self.tampered_conns = self.bad_frames = 0
        self.want = False  # the Nth batch came and was not eligible
        self.dirty = False  # counters changed since the state file was written
        host, port = args.listen.rsplit(":", 1)
        self.ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind((host, int(port)))
        self.ls.listen(128)
        self.ls.setblocking(False)
        self.sel.register(self.ls, selectors.EVENT_READ, None)
        host, port = args.to.rsplit(":", 1)
        self.to = (host, int(port))
        self.save()

    def log(self, msg):
        print("tamper: " + msg, file=sys.stderr, flush=True)

    def save(self):
        self.dirty = False
        if not self.a.state:
            return
        tmp = self.a.state + ".tmp"
        with open(tmp, "w") as f:
            f.write("tampered=%d tampered_conns=%d batches=%d conns=%d "
                    "hash_bad=%d bad_frames=%d\n" %
                    (self.tampered, self.tampered_conns, self.batches,
                     self.conns, self.hash_bad, self.bad_frames))
        os.rename(tmp, self.a.state)

    def port(self):
        return self.ls.getsockname()[1]

    def accept(self):
        try:
            c, _ = self.ls.accept()
        except (BlockingIOError, InterruptedError):
            return
        try:
            s = socket.create_connection(self.to, timeout=5)
        except OSError as e:
            self.log("cannot reach %s:%d: %s" % (self.to + (e,)))
            c.close()
            return
        for k in (c, s):
            k.setblocking(False)
            k.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.conns += 1
        self.save()
        Pair(self, c, s, self.conns)

    # The choice: is this (the Nth) batch, on connection number conn
    # (from 1), the one?
    def pick(self, b, conn):
        self.batches += 1
        if self.a.mode == "none":
            return False
        if self.a.first_conns and conn > self.a.first_conns:
            return False
        if self.batches % self.a.every == 0:
            self.want = True
        if not self.want or (self.a.max and self.tampered >= self.a.max):
            return False
        if self.a.mode == "swap" and swap_pair(b) is None:
            return False
        if self.a.mode == "payload" and b.total == 0:
            return False
        self.want = False
        return True

    def run(self):
        stop = []
        signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
        while not stop:
            for key, ev in self.sel.select(timeout=0.5):
                if key.data is None:
                    self.accept()
                else:
                    key.data.event(key.fileobj, ev)
        self.save()


def swap_pair(b):
    """Two copies of the batch with the same length and different
    destinations, or None."""
    seen = {}
    for i, (d, n) in enumerate(b.copies):
        j = seen.get(n)
        if j is not None and b.copies[j][0] != d:
            return j, i
        seen.setdefault(n, i)
    return None


class Pair:
    """One client connection and its connection to the sink."""

    def __init__(self, relay, c, s, number):
        self.r = relay
        self.number = number    # of the connection, from 1
        self.client, self.server = c, s
        self.cin, self.sin = bytearray(), bytearray()
        self.cout, self.sout = bytearray(), bytearray()
        self.p = None           # Proto, once the CHALLENGE came
        self.s_state = "challenge"  # sink -> client: challenge, welcome, acks
        # (client -> sink: the HELLO until the WELCOME has gone, batches)
        # One entry per batch sent to the sink, in order: does its ACK go
        # to the client (False: an injected replay's, swallowed)?
        self.to_client = collections.deque()
        # One entry per batch the client sent, in order: None (the sink's
        # ACK answers it) or the forged ACK's batch id (dropped).
        self.owed = collections.deque()
        self.acks_out = 0       # ACKs the client got on this connection
        # Kept batches to send again: [batches still to wait, Batch].
        self.replays = collections.deque()
        self.eof = False
        self.closed = False
        self.tampered = False   # anything tampered on this connection yet
        self.sel_c = self.sel_s = None
        self.interest()

    def close(self):
        if self.closed:
            return
        self.closed = True
        for k in (self.client, self.server):
            try:
                self.r.sel.unregister(k)
            except (KeyError, ValueError):
                pass
            k.close()

    def interest(self):
        if self.closed:
            return
        for k, inbuf_full, out, cur in (
                (self.client, len(self.sout) > HIGH_WATER, self.cout, "sel_c"),
                (self.server, len(self.cout) > HIGH_WATER, self.sout, "sel_s")):
            ev = 0 if (inbuf_full or self.eof) else selectors.EVENT_READ
            if out:
                ev |= selectors.EVENT_WRITE
            old = getattr(self, cur)
            if ev == old:
                continue
            if old is None or old == 0:
                if ev:
                    self.r.sel.register(k, ev, self)
            elif ev == 0:
                self.r.sel.unregister(k)
            else:
                self.r.sel.modify(k, ev, self)
            setattr(self, cur, ev)
        # Either side gone and everything owed to the other sent: done.
        if self.eof and not self.cout and not self.sout:
            self.close()

    def event(self, k, ev):
        if self.closed:
            return
        try:
            if ev & selectors.EVENT_WRITE:
                out = self.cout if k is self.client else self.sout
                n = k.send(out)
                del out[:n]
            if ev & selectors.EVENT_READ:
                d = k.recv(1 << 20)
                if not d:
                    self.eof = True
                elif k is self.client:
                    self.cin += d
                    self.from_client()
                    # Once per read, not per batch (a file written and
                    # renamed each time): still before any byte of these
                    # batches or of a forged ACK goes on, since everything
                    # is sent from the buffers after this returns.
                    if self.r.dirty:
                        self.r.save()
                else:
                    self.sin += d
                    self.from_sink()
        except (BlockingIOError, InterruptedError):
            pass
        except ValueError as e:
            self.r.bad_frames += 1
            self.r.save()
            self.r.log("connection dropped: %s" % e)
            self.close()
            return
        except OSError as e:
            if not isinstance(e, (ConnectionResetError, BrokenPipeError)):
                self.r.log("connection dropped: %s" % e)
            self.close()
            return
        self.interest()

    def from_sink(self):
        while True:
            if self.s_state == "challenge":
                if len(self.sin) < 24:
                    return
                if bytes(self.sin[:4]) != MAGIC_CHALLENGE:
                    raise ValueError("no CHALLENGE from the sink")
                self.p = Proto(struct.unpack_from("<H", self.sin, 4)[0])
                self.pass_on(self.sin, 24, self.cout)
                self.s_state = "welcome"
            elif self.s_state == "welcome":
                if len(self.sin) < self.p.welcome:
                    return
                self.pass_on(self.sin, self.p.welcome, self.cout)
                self.s_state = "acks"
            else:
                if len(self.sin) < self.p.ack:
                    return
                a = bytes(self.sin[:self.p.ack])
                del self.sin[:self.p.ack]
                if a[:4] != MAGIC_ACK:
                    raise ValueError("no ACK magic from the sink")
                if self.to_client and not self.to_client.popleft():
                    continue  # the injected replay's: the client never sent it
                if self.owed:
                    self.owed.popleft()
                self.cout += a
                self.acks_out += 1
                self.forge_owed()

    @staticmethod
    def pass_on(src, n, dst):
        dst += src[:n]
        del src[:n]

    def forge_owed(self):
        """Sends the forged ACKs of dropped batches whose turn has come."""
        while self.owed and self.owed[0] is not None:
            bid = self.owed.popleft()
            a = b"KVTA" + struct.pack("<IQ", 0, bid)
            if self.p.version == 4:
                a += struct.pack("<Q", self.acks_out)
                a += xxh3_128(a)
            self.cout += a
            self.acks_out += 1
            self.r.log("forged ACK OK for batch %d sent" % bid)

    def from_client(self):
        while self.p is not None:
            if self.s_state != "acks":
                # The HELLO (whatever its length): a client sends no batch
                # before it has read the WELCOME, which is passed on only
                # once it came whole.
                self.pass_on(self.cin, len(self.cin), self.sout)
                return
            n = batch_len(self.p, self.cin)
            if n is None or len(self.cin) < n:
                return
            raw = bytes(self.cin[:n])
            del self.cin[:n]
            self.batch(Batch(self.p, raw), raw)

    def send_sink(self, raw, to_client):
        self.sout += raw
        self.to_client.append(to_client)

    def batch(self, b, raw):
        r, mode = self.r, self.r.a.mode
        if (b.p.version == 3 and
                struct.pack("<Q", xxh3_64(b.payload)) != b.trailer):
            r.hash_bad += 1
        for k in self.replays:
            k[0] -= 1
        if not r.pick(b, self.number):
            self.owed.append(None)
            self.send_sink(raw, True)
        elif mode == "drop":
            self.owed.append(b.id)
            self.forge_owed()
            self.count(b, "dropped")
        elif mode == "replay":
            self.owed.append(None)
            self.send_sink(raw, True)
            self.replays.append([r.a.lag, Batch(b.p, raw)])
        else:
            self.owed.append(None)
            self.send_sink(self.tamper(b, mode), True)
        while self.replays and self.replays[0][0] <= 0:
            self.replay(self.replays.popleft()[1], b)
        r.dirty = True

    def replay(self, old, now):
        """Sends the kept batch old again, right after batch now."""
        what = "replayed after batch %d" % now.id
        if self.r.a.retarget:
            struct.pack_into("<Q", old.header, 16, now.room)
            if old.p.version == 4:
                old.rehash()
            what += " as room %x" % now.room
        self.send_sink(old.raw(), False)
        self.count(old, what)

    def tamper(self, b, mode):
        rng = self.r.rng
        if mode == "payload":
            at = rng.randrange(max(1, b.total - 16))
            for i in range(at, min(at + 16, b.total)):
                b.payload[i] ^= 0xA5
            b.rehash()
            what = "16 payload bytes at %d rewritten, hash recomputed" % at
        elif mode == "copybit":
            i = rng.randrange(b.ncopies)
            bit = rng.randrange(16)
            b.copies[i][0] ^= 1 << bit
            what = "bit %d of copy %d's dst_off flipped" % (bit, i)
        elif mode == "swap":
            i, j = swap_pair(b)
            b.copies[i][0], b.copies[j][0] = b.copies[j][0], b.copies[i][0]
            if b.p.version == 4:
                b.rehash()
            what = "copies %d and %d swapped" % (i, j)
        elif mode == "count":
            struct.pack_into("<I", b.header, 4, 0xFFFFFFFF)
            what = "copy count %d rewritten to 0xffffffff" % b.ncopies
        else:
            raise ValueError("mode %s" % mode)
        self.count(b, what)
        return b.raw()

    def count(self, b, what):
        self.r.tampered += 1
        self.r.tampered_conns += not self.tampered
        self.tampered = True
        seq = "" if b.seq is None else ", seq %d" % b.seq
        self.r.log("v%d batch %d (room %x%s, %d copies, %d bytes): %s" %
                   (b.p.version, b.id, b.room, seq, b.ncopies, b.total, what))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", required=True)
    ap.add_argument("--to", required=True)
    ap.add_argument("--mode", required=True,
                    choices=["payload", "copybit", "swap", "replay", "drop",
                             "count",
                             "none"])
    ap.add_argument("--every", type=int, default=50)
    ap.add_argument("--max", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--lag", type=int, default=1)
    ap.add_argument("--retarget", action="store_true")
    ap.add_argument("--first-conns", type=int, default=0)
    ap.add_argument("--state")
    ap.add_argument("--port-file")
    ap.add_argument("--ready-fd", type=int)
    try:
        a = ap.parse_args()
        if a.every < 1 or a.lag < 1:
            raise ValueError("--every and --lag must be >= 1")
        relay = Relay(a)
    except (OSError, ValueError) as e:
        print("tamper: %s" % e, file=sys.stderr)
        return 2
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write("%d\n" % relay.port())
        os.rename(a.port_file + ".tmp", a.port_file)
    if a.ready_fd is not None:
        os.write(a.ready_fd, b"READY\n")
        os.close(a.ready_fd)
    relay.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
