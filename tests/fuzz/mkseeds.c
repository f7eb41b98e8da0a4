/*
 * mkseeds.c - writes the seed corpus of every fuzz target from today's
 * code, so the seeds cannot go stale: `make seeds` runs it into
 * tests/fuzz/corpus/<target>/ (check the result in), and
 * tests/unit/test_seeds.c decodes every seed.
 *  - fuzz_frame: TYPE-0 and TYPE-1 for every frame type, the messages of
 *    tests/unit/frame_fixture.h encoded by frame_encode (fuzz_input.h);
 *  - fuzz_boot: request sequences (registrations, lookups, a conflict);
 *  - fuzz_chan: streams of records as chan_send writes them, read back
 *    from the other end of a real chan_pair, one with a bad magic;
 *  - fuzz_runinfo: endpoints files as bin/kv-up writes them;
 *  - fuzz_rtab: an operation program touching every operation, and table
 *    files made by rtab_create (raw, and as entries behind a header);
 *  - fuzz_rdma: rdma descriptors (RoCE, InfiniBand), an exchange hello and
 *    replies, each behind the byte that picks its decoder;
 *  - fuzz_roles: per handler, every frame type of frame_fixture.h sent to
 *    it (as the registered decode where a peer talks), and a prefill and
 *    a decode room's life (begin, transfer, done, abort, clear) on one
 *    room id, each record behind the byte that picks its handler.
 * Usage: mkseeds DIR. Exit 0, or 111 with a message when a write fails.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_input.h"
#include "../unit/frame_fixture.h"
#include "table/rtab.h"
#include "wire/chan.h"
#include "wire/frame.h"
#include "xport/rdma/rdma_cm.h"
#include "xport/rdma/rdma_desc.h"

static const char *dir;

static void fatal(const char *what, const char *detail)
{
	fprintf(stderr, "mkseeds: fatal: unable to %s: %s\n", what, detail);
	exit(111);
}

/* Opens DIR/target/name for writing (creating DIR/target). */
static FILE *seed_open(const char *target, const char *name)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof path, "%s/%s", dir, target);
	if (mkdir(path, 0755) != 0 && errno != EEXIST)
		fatal("create a corpus folder", strerror(errno));
	snprintf(path, sizeof path, "%s/%s/%s", dir, target, name);
	f = fopen(path, "wb");
	if (!f)
		fatal("create a seed", strerror(errno));
	return f;
}

static void seed_close(FILE *f)
{
	if (ferror(f) || fclose(f) != 0)
		fatal("write a seed", "write error");
}

static void encode(const struct frame_msg *m, struct frame_out *out)
{
	char err[200];

	if (frame_encode(m, out, err, sizeof err) != 0)
		fatal("encode a message", err);
}

static void frame_seeds(void)
{
	static struct frame_out out;
	struct frame_msg m;
	char name[64];

	for (unsigned t = 1; t <= FRAME_TYPE_MAX; t++)
		for (int v = 0; v < NVARIANTS; v++) {
			FILE *f;

			fixture(t, v, &m);
			encode(&m, &out);
			snprintf(name, sizeof name, "%s-%d", frame_type_str(t), v);
			f = seed_open("fuzz_frame", name);
			if (fuzz_put(f, out.parts, out.nparts, 1) != 0)
				fatal("write a seed", name);
			seed_close(f);
		}
}

/* ---- fuzz_boot: request sequences ---- */

static void put_msg(FILE *f, const struct frame_msg *m)
{
	static struct frame_out out;

	encode(m, &out);
	if (fuzz_put(f, out.parts, out.nparts, 0) != 0)
		fatal("write a seed", "boot record");
}

static void boot_register(FILE *f, uint32_t tp, uint32_t ranks,
			  const char *ep)
{
	struct frame_msg m;

	frame_msg_init(&m, FRAME_BOOT_REGISTER, tp, 1, 0x1000u + tp);
	m.u.boot_register.topo = (struct kvw_topo){ ranks, 1, 1, 1 };
	m.u.boot_register.coord = (struct kvw_coord){ tp, 0, 0, 0 };
	snprintf(m.u.boot_register.endpoint, FRAME_STR_SIZE, "%s", ep);
	m.u.boot_register.model = model1;
	m.u.boot_register.layer_first = 0;
	m.u.boot_register.layer_count = 61;
	put_msg(f, &m);
}

static void boot_lookup(FILE *f, uint32_t tp, uint64_t room)
{
	struct frame_msg m;

	frame_msg_init(&m, FRAME_BOOT_LOOKUP, 0, room, 0x2000u);
	m.u.boot_lookup.want = tp == FRAME_LOOKUP_TOPO_ONLY ?
		(struct kvw_coord){ tp, tp, tp, tp } :
		(struct kvw_coord){ tp, 0, 0, 0 };
	m.u.boot_lookup.model = model1;
	put_msg(f, &m);
}

static void boot_seeds(void)
{
	struct frame_msg m;
	FILE *f;

	/* Two ranks register; topology, each rank and a missing one. */
	f = seed_open("fuzz_boot", "seq_two_ranks");
	boot_lookup(f, FRAME_LOOKUP_TOPO_ONLY, 2); /* not ready yet */
	boot_register(f, 0, 2, "ipc:///tmp/kvw/p0.peer");
	boot_register(f, 1, 2, "ipc:///tmp/kvw/p1.peer");
	boot_lookup(f, FRAME_LOOKUP_TOPO_ONLY, 3);
	boot_lookup(f, 0, 4);
	boot_lookup(f, 1, 5);
	seed_close(f);
	/* The same rank again elsewhere, and another topology. */
	f = seed_open("fuzz_boot", "conflicts");
	boot_register(f, 0, 2, "tcp://10.0.0.1:7001");
	boot_register(f, 0, 2, "tcp://10.0.0.2:7001");
	boot_register(f, 1, 4, "tcp://10.0.0.3:7001");
	boot_lookup(f, 1, 6);
	seed_close(f);
	/* PING, then a lookup of a rank that never registered. */
	f = seed_open("fuzz_boot", "ping_notfound");
	frame_msg_init(&m, FRAME_PING, 0, 77, 0x3000u);
	put_msg(f, &m);
	boot_register(f, 0, 1, "ipc:///tmp/kvw/p0.peer");
	boot_lookup(f, 3, 8);
	seed_close(f);
}

/* ---- fuzz_chan: record streams ---- */

/* The bytes chan_send writes for msgs[0..n), appended to f after byte
 * piece (the target's piece-size selector); bad_magic spoils the first
 * record's frame magic. */
static void chan_seed(const char *name, unsigned piece,
		      const struct frame_msg *msgs, size_t n, int bad_magic)
{
	static uint8_t buf[1 << 20];
	struct chan c;
	char err[200];
	int fds[2];
	size_t len = 0;
	ssize_t k;
	FILE *f;

	if (chan_pair(fds) != 0)
		fatal("make a channel", strerror(errno));
	chan_init(&c, fds[0]);
	for (size_t i = 0; i < n; i++) {
		if (chan_send(&c, &msgs[i], err, sizeof err) != 0)
			fatal("send a record", err);
		while (chan_pending(&c)) {
			if (chan_flush(&c) < 0)
				fatal("send a record", "flush");
			while ((k = read(fds[1], buf + len, sizeof buf - len)) > 0)
				len += (size_t)k;
		}
	}
	while ((k = read(fds[1], buf + len, sizeof buf - len)) > 0)
		len += (size_t)k;
	chan_close(&c);
	close(fds[1]);
	if (bad_magic) {
		/* u32 length, u8 nparts, nparts x u32, then part 0: magic */
		size_t at = 5 + 4u * buf[4];

		if (at >= len)
			fatal("spoil a record", "short");
		buf[at] ^= 0xFF;
	}
	f = seed_open("fuzz_chan", name);
	fputc((int)piece, f);
	fwrite(buf, 1, len, f);
	seed_close(f);
}

static void chan_seeds(void)
{
	struct frame_msg m[3];

	/* pieces[]: 0 -> 65536 bytes, 1 -> 1 byte, 3 -> 17 bytes */
	fixture(FRAME_JOB, 0, &m[0]);
	fixture(FRAME_JOB, 1, &m[1]);
	chan_seed("job_bytewise", 1, m, 2, 0);
	fixture(FRAME_JOB_DONE, 0, &m[0]);
	fixture(FRAME_JOB_DONE, 1, &m[1]);
	frame_msg_init(&m[2], FRAME_PONG, 0, 0, 9);
	chan_seed("job_done_pong", 3, m, 3, 0);
	frame_msg_init(&m[0], FRAME_PING, 0, 0, 9);
	frame_msg_init(&m[1], FRAME_PING, 0, 0, 9);
	chan_seed("bad_magic_then_ping", 0, m, 2, 1);
}

/* ---- fuzz_runinfo: endpoints files ---- */

static void runinfo_seed(const char *name, const char *text)
{
	FILE *f = seed_open("fuzz_runinfo", name);

	fputs(text, f);
	seed_close(f);
}

static void runinfo_seeds(void)
{
	runinfo_seed("one_by_one",
		"member=bootstrap listen=ipc:///tmp/r/boot.sock\n"
		"member=p0 role=prefill rank=0,0 topo=1,1 "
		"listen=ipc:///tmp/r/p0.peer engine=ipc:///tmp/r/p0.eng "
		"table=/dev/shm/kvwire.r.p0.rooms pool=/dev/shm/kvwire.r.p0.pool\n"
		"member=d0 role=decode rank=0,0 topo=1,1 "
		"listen=ipc:///tmp/r/d0.peer engine=ipc:///tmp/r/d0.eng "
		"table=/dev/shm/kvwire.r.d0.rooms pool=/dev/shm/kvwire.r.d0.pool\n"
		"member=hb0 role=heartbeat table=/dev/shm/kvwire.r.d0.rooms\n"
		"shape=--layers 4 --page-tokens 16 --heads 8 --head-dim 128\n");
	runinfo_seed("tp2_pp2_mla",
		"member=bootstrap listen=tcp://10.0.0.1:8998\n"
		"member=p0 role=prefill rank=0,0 topo=2,2 "
		"listen=tcp://10.0.0.1:7000 engine=ipc:///tmp/r/p0.eng "
		"table=/dev/shm/kvwire.r.p0.rooms pool=/dev/shm/kvwire.r.p0.pool\n"
		"member=p3 role=prefill rank=1,1 topo=2,2 "
		"listen=tcp://10.0.0.1:7003 engine=ipc:///tmp/r/p3.eng "
		"table=/dev/shm/kvwire.r.p3.rooms pool=/dev/shm/kvwire.r.p3.pool\n"
		"member=d1 role=decode rank=1,0 topo=2,1 "
		"listen=tcp://10.0.0.2:7101 engine=ipc:///tmp/r/d1.eng "
		"table=/dev/shm/kvwire.r.d1.rooms pool=/dev/shm/kvwire.r.d1.pool\n"
		"shape=--layers 8 --mla --draft-layers 1 --aux-slots 4\n");
}

/* ---- fuzz_rtab: an operation program and table files ---- */

static void rtab_seeds(void)
{
	/* Op bytes (fuzz_rtab.c): 0 insert k peer deadline, 2 transition
	 * k to, 4 clear k, 5 jobs k delta+2, 6 fail_peer peer, 7 expire
	 * now, 8 peer epoch endpoint, 9 restart epoch. States: 0 Failed,
	 * 1 Bootstrapping, 2 Waiting, 3 Transferring, 4 Success, 5 Cleared. */
	static const uint8_t ops[] = {
		0,                      /* even: a program */
		8, 1, 0,   8, 2, 1,     /* two peers */
		0, 3, 1, 200,           /* room 3 of peer 1, deadline 200 */
		0, 4, 2, 0,             /* room 4 of peer 2, no deadline */
		0, 5, 0, 9,             /* room 5, deadline 9 */
		2, 3, 2,   5, 3, 3,     /* 3: Waiting, one job */
		2, 3, 3,   5, 3, 1,     /* Transferring, job done */
		2, 3, 4,   4, 3,        /* Success, cleared */
		0, 3, 1, 0,             /* room 3 again: next generation */
		0, 3, 1, 0,             /* and once more: exists */
		2, 4, 5,                /* an illegal transition */
		6, 2,                   /* peer 2 fails: room 4 */
		7, 100,                 /* expire at 100: room 5 */
		8, 3, 0,                /* peer 1's new epoch */
		9, 7,                   /* owner restart */
		4, 4, 4, 5,
	};
	char path[128], err[256];
	struct rtab *t = NULL;
	struct rtab_ref r;
	static uint8_t buf[1 << 16];
	size_t len;
	uint32_t id;
	FILE *f, *in;

	f = seed_open("fuzz_rtab", "ops_every_op");
	fwrite(ops, 1, sizeof ops, f);
	seed_close(f);
	/* A table of the target's geometry with rooms and a peer. */
	snprintf(path, sizeof path, "/dev/shm/kvwire.mkseeds.%ld.rooms",
		 (long)getpid());
	unlink(path);
	if (rtab_create(path, 16, 4, 1, &t, NULL, err, sizeof err) != 0)
		fatal("create a table", err);
	if (rtab_peer_upsert(t, "tcp://h:1", 5, &id, NULL) != 0 ||
	    rtab_insert(t, 0x9e3779b97f4a7c15ULL, id, 0, &r) != 0 ||
	    rtab_transition(t, r, KVW_WAITING, 0) != 0 ||
	    rtab_insert(t, 2 * 0x9e3779b97f4a7c15ULL, 0, 1000, &r) != 0)
		fatal("fill a table", "rtab");
	rtab_close(&t);
	in = fopen(path, "rb");
	if (!in)
		fatal("read a table", strerror(errno));
	len = fread(buf, 1, sizeof buf, in);
	fclose(in);
	unlink(path);
	if (len <= sizeof(struct rtab_hdr) || len == sizeof buf)
		fatal("read a table", "unexpected size");
	f = seed_open("fuzz_rtab", "file_raw");
	fputc(1, f);
	fwrite(buf, 1, len, f);
	seed_close(f);
	f = seed_open("fuzz_rtab", "file_entries");
	fputc(3, f);
	fwrite(buf + sizeof(struct rtab_hdr), 1,
	       len - sizeof(struct rtab_hdr), f);
	seed_close(f);
}

/* ---- fuzz_rdma: byte 0 % 3 picks descriptor, hello or reply ---- */

static void rdma_seed(const char *name, uint8_t kind, const uint8_t *p,
		      size_t n)
{
	FILE *f = seed_open("fuzz_rdma", name);

	fputc(kind, f);
	fwrite(p, 1, n, f);
	seed_close(f);
}

static void rdma_seeds(void)
{
	struct rdma_desc d = { .ib_port = 1, .mtu = 3, .link = 2,
			       .rkey = 0x1234, .addr = 0x7f0000000000ull,
			       .size = 1u << 24, .port = 41000 };
	struct rdma_peer me = { .qpn = 0x11, .psn = 0x222, .mtu = 3,
				.link = 2 };
	uint8_t b[RDMA_DESC_FIXED + RDMA_HOST_MAX], h[RCM_HELLO_LEN];
	size_t len;

	for (int i = 0; i < 16; i++)
		d.gid[i] = me.gid[i] = (uint8_t)(i < 10 ? 0 : i < 12 ? 0xff : i);
	memcpy(d.secret, "0123456789abcdef", 16);
	strcpy(d.host, "192.168.1.20");
	if (rdma_desc_encode(&d, b, sizeof b, &len, NULL, 0) != 0)
		fatal("encode an rdma descriptor", "refused");
	rdma_seed("desc_roce", 0, b, len);
	d.link = 1;
	d.lid = 7;
	d.mtu = 5;
	strcpy(d.host, "10.0.0.2");
	if (rdma_desc_encode(&d, b, sizeof b, &len, NULL, 0) != 0)
		fatal("encode an rdma descriptor", "refused");
	rdma_seed("desc_ib", 3, b, len);
	rcm_hello_encode(h, d.secret, &me);
	rdma_seed("hello", 1, h, sizeof h);
	rcm_reply_encode(h, RCM_OK, 0x33, 0x444);
	rdma_seed("reply_ok", 2, h, RCM_REPLY_LEN);
	rcm_reply_encode(h, RCM_SECRET, 0, 0);
	rdma_seed("reply_secret", 2, h, RCM_REPLY_LEN);
}

/* ---- fuzz_roles: records of handler byte + message ---- */

enum { H_S_PEER, H_S_ENG, H_S_JOB, H_R_ENG, H_R_PEER, H_R_BOOT };

/* One record: the handler byte, then m as fuzz_boot reads a message. */
static void role_put(FILE *f, unsigned handler, const struct frame_msg *m)
{
	if (fputc((int)handler, f) == EOF)
		fatal("write a seed", "roles record");
	put_msg(f, m);
}

/* The fixture of type t (variant 0) on room, as the handler would hear
 * it: a peer message of the sender from the registered decode. */
static void role_fixture(unsigned handler, unsigned t, uint64_t room,
			 struct frame_msg *m)
{
	fixture(t, 0, m);
	m->hdr.room = room;
	if (handler == H_S_PEER) {
		m->hdr.src_rank = 0;
		m->hdr.epoch = FUZZ_DECODE_EPOCH;
	}
}

static void roles_seeds(void)
{
	static const unsigned prefill_life[][2] = {
		{ H_S_ENG, FRAME_SEND_BEGIN }, { H_S_PEER, FRAME_XFER_INFO },
		{ H_S_ENG, FRAME_SEND_CHUNK }, { H_S_JOB, FRAME_JOB_DONE },
		{ H_S_PEER, FRAME_PING },      { H_S_PEER, FRAME_ABORT },
		{ H_S_ENG, FRAME_CLEAR },
	};
	static const unsigned decode_life[][2] = {
		{ H_R_ENG, FRAME_RECV_BEGIN }, { H_R_BOOT, FRAME_BOOT_REPLY },
		{ H_R_PEER, FRAME_STATUS },    { H_R_PEER, FRAME_ABORT_ACK },
		{ H_R_ENG, FRAME_RECV_ABORT }, { H_R_ENG, FRAME_CLEAR },
	};
	struct frame_msg m;
	char name[64];
	FILE *f;

	for (unsigned h = 0; h < FUZZ_ROLES_HANDLERS; h++) {
		snprintf(name, sizeof name, "handler%u_every_type", h);
		f = seed_open("fuzz_roles", name);
		for (unsigned t = 1; t <= FRAME_TYPE_MAX; t++) {
			role_fixture(h, t, 7, &m);
			role_put(f, h, &m);
		}
		seed_close(f);
	}
	f = seed_open("fuzz_roles", "prefill_room_life");
	for (size_t i = 0; i < sizeof prefill_life / sizeof *prefill_life; i++) {
		role_fixture(prefill_life[i][0], prefill_life[i][1], 7, &m);
		role_put(f, prefill_life[i][0], &m);
	}
	seed_close(f);
	f = seed_open("fuzz_roles", "decode_room_life");
	for (size_t i = 0; i < sizeof decode_life / sizeof *decode_life; i++) {
		role_fixture(decode_life[i][0], decode_life[i][1], 9, &m);
		role_put(f, decode_life[i][0], &m);
	}
	seed_close(f);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: mkseeds DIR\n");
		return 100;
	}
	dir = argv[1];
	frame_seeds();
	boot_seeds();
	chan_seeds();
	runinfo_seeds();
	rtab_seeds();
	rdma_seeds();
	roles_seeds();
	return 0;
}
