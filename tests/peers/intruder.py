#!/usr/bin/python3
"""intruder.py - a client without the group's keys (issue 14), for
tests/bats/netns.bats; run with Debian's /usr/bin/python3 (it has pyzmq).
Every mode tries something a member could do and reports whether anything
answered. Frames are packed as lib/wire/frame.h documents
(fake_decode.py's helpers).

  intruder.py boot EP [KEYS]   BOOT_REGISTER for rank (0,0) of a 1x1 group
                               naming tcp://192.0.2.1:1, then a LOOKUP
  intruder.py peer EP [KEYS]   REGISTER, XFER_INFO and ABORT of room 7, then
                               a PING
  intruder.py data HOST:PORT   a data-port hello with a made-up secret
With KEYS (a group.keys file): CURVE with that group's server key and a
client key of its own (the group's server, another client: ZAP says no);
without: no CURVE at all. Exit 0 when nothing answered (refused), 1 when
something did, 2 on a usage or setup error.

  intruder.py forge EP EPOCH ENDPOINT MODEL LAYERS [KEYS]
      A member gone bad (or a misconfigured one): BOOT_REGISTER at the
      bootstrap EP for rank (0,0,0,0) of a 1x1x1x1 group under header epoch
      EPOCH (hex or decimal; the live rank's own, which lookups return, or
      a new one), naming ENDPOINT, with the live rank's MODEL
      (page_tokens,dtype,total_heads,rank_heads,head_bytes,flags) and
      LAYERS (first,count), so that only the live-rank rule can refuse it.
      With KEYS it dials with the group's own client key pair (it holds
      the group's keys). Prints "status=N text=..." of the BOOT_REPLY;
      exit 0 when refused (status != OK), 1 when accepted, 2 no answer.
"""
import os
import socket
import struct
import sys

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_decode as fd  # noqa: E402

T = fd.T


def curve(s, keys, member):
    """Makes s a CURVE client of the group whose group.keys file is keys:
    with the group's own client key pair when member (a member gone bad
    holds it), else with a key pair of its own (ZAP refuses it)."""
    with open(keys) as f:
        words = dict(l.split(None, 1) for l in f if ' ' in l.strip())
    pub, sec = zmq.curve_keypair()
    if member:
        pub = words['client-public'].strip().encode()
        sec = words['client-secret'].strip().encode()
    s.curve_serverkey = words['server-public'].strip().encode()
    s.curve_publickey, s.curve_secretkey = pub, sec


def dealer(ctx, ep, keys, member=False):
    s = ctx.socket(zmq.DEALER)
    s.linger = 0
    # A DEALER whose handshake never completes has no peer to queue for:
    # a send would wait for one for ever. A refused send is no answer.
    s.sndtimeo = 1000
    if keys:
        curve(s, keys, member)
    s.connect(ep)
    return s


def answered(s, ms=1500):
    return s.poll(ms) != 0


def send(s, parts):
    try:
        s.send_multipart(parts)
    except zmq.Again:
        pass


def boot(ep, keys):
    s = dealer(zmq.Context.instance(), ep, keys)
    body = (struct.pack('<4I', 1, 1, 1, 1) + struct.pack('<4I', 0, 0, 0, 0) +
            fd.pstr('tcp://192.0.2.1:1') + struct.pack('<6I', 16, 3, 8, 4, 256, 0) +
            struct.pack('<2I', 0, 1))
    send(s, [fd.hdr(T['BOOT_REGISTER'], 0, 0, 0x5eed), body])
    got = answered(s)
    send(s, [fd.hdr(T['BOOT_LOOKUP'], 0, 1, 0x5eed),
                      struct.pack('<4I', 0, 0, 0, 0) + struct.pack('<6I', 0, 0, 0, 0, 0, 0)])
    return got or answered(s)


def peer(ep, keys):
    s = dealer(zmq.Context.instance(), ep, keys)
    body = (struct.pack('<4I', 0, 0, 0, 0) + struct.pack('<4I', 1, 1, 1, 1) +
            fd.pstr('tcp://192.0.2.1:1') + fd.pstr('tcp'))
    send(s, [fd.hdr(T['REGISTER'], 0, 0, 0x5eed), body + b'\0' * 40])
    send(s, [fd.hdr(T['XFER_INFO'], 0, 7, 0x5eed),
                      struct.pack('<IIBQI', 0, 1, 0, 1, 0), fd.u32s([1])])
    send(s, [fd.hdr(T['ABORT'], 0, 7, 0x5eed), struct.pack('<IQ', 1, 1)])
    send(s, [fd.hdr(T['PING'], 0, 7, 0x5eed)])
    return answered(s)


def boot_reply(s):
    """(status, rank epoch, text) of the next BOOT_REPLY on s; exits 2
    when none comes."""
    if not answered(s, 5000):
        print('no answer', flush=True)
        os._exit(2)
    b = s.recv_multipart()[1]
    off = 4 + 16 + 16
    off += 2 + struct.unpack_from('<H', b, off)[0] + 24 + 8
    status, epoch = struct.unpack_from('<I', b)[0], struct.unpack_from('<Q', b, off)[0]
    n = struct.unpack_from('<H', b, off + 8)[0]
    return status, epoch, b[off + 10:off + 10 + n].decode()


def forge(a):
    ep, endpoint = a[0], a[2]
    model = [int(x) for x in a[3].split(',')]
    layers = [int(x) for x in a[4].split(',')]
    s = dealer(zmq.Context.instance(), ep, a[5] if len(a) > 5 else None,
               member=True)
    if a[1] == 'live':
        send(s, [fd.hdr(T['BOOT_LOOKUP'], 0, 1, 0x5eed),
                 struct.pack('<4I', 0, 0, 0, 0) + struct.pack('<6I', *model)])
        epoch = boot_reply(s)[1]
    else:
        epoch = int(a[1], 0)
    body = (struct.pack('<4I', 1, 1, 1, 1) + struct.pack('<4I', 0, 0, 0, 0) +
            fd.pstr(endpoint) + struct.pack('<6I', *model) +
            struct.pack('<2I', *layers))
    send(s, [fd.hdr(T['BOOT_REGISTER'], 0, 0, epoch), body])
    status, _, text = boot_reply(s)
    print('epoch=%016x status=%d text=%s' % (epoch, status, text), flush=True)
    os._exit(1 if status == 0 else 0)


def data(hostport):
    host, port = hostport.rsplit(':', 1)
    c = socket.create_connection((host, int(port)), timeout=3)
    c.settimeout(3)
    try:
        c.recv(64)  # the sink's challenge
        c.sendall(b'\0' * 64)  # a hello that proves nothing
        got = c.recv(64)
        # A refusal is a WELCOME with status SECRET, then the close.
        return len(got) >= 8 and struct.unpack_from('<I', got, 4)[0] == 0
    except (socket.timeout, ConnectionError):
        return False
    finally:
        c.close()


def main():
    a = sys.argv[1:]
    if len(a) < 2:
        sys.exit(__doc__)
    keys = a[2] if len(a) > 2 else None
    if a[0] == 'forge' and len(a) >= 6:
        forge(a[1:])
    if a[0] == 'boot':
        got = boot(a[1], keys)
    elif a[0] == 'peer':
        got = peer(a[1], keys)
    elif a[0] == 'data':
        got = data(a[1])
    else:
        sys.exit(__doc__)
    print('answered' if got else 'no answer', flush=True)
    # No context teardown: a socket still dialling must not hold the exit.
    os._exit(1 if got else 0)


if __name__ == '__main__':
    main()
