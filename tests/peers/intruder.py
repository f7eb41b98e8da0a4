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
"""
import os
import socket
import struct
import sys

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fake_decode as fd  # noqa: E402

T = fd.T


def dealer(ctx, ep, keys):
    s = ctx.socket(zmq.DEALER)
    s.linger = 0
    # A DEALER whose handshake never completes has no peer to queue for:
    # a send would wait for one for ever. A refused send is no answer.
    s.sndtimeo = 1000
    if keys:
        with open(keys) as f:
            words = dict(l.split(None, 1) for l in f if ' ' in l.strip())
        pub, sec = zmq.curve_keypair()
        s.curve_serverkey = words['server-public'].strip().encode()
        s.curve_publickey, s.curve_secretkey = pub, sec
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
                      struct.pack('<IIBQ', 0, 1, 0, 1), fd.u32s([1])])
    send(s, [fd.hdr(T['ABORT'], 0, 7, 0x5eed), struct.pack('<IQ', 1, 1)])
    send(s, [fd.hdr(T['PING'], 0, 7, 0x5eed)])
    return answered(s)


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
