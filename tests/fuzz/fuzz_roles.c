/*
 * fuzz_roles.c - libFuzzer target for kv-sender's and kv-receiver's frame
 * handlers, driven directly (not only the codec and the bootstrap): per
 * input (reopened every REOPEN inputs: state carries over between them)
 * one real kv-sender control (sender_open; its one worker is /bin/true, so
 * no job is ever run) and one real kv-receiver (shm, no sinks), each on its
 * own files, then a sequence of records, each: byte 0
 * picks the handler (mod 6: sender peer, sender engine, sender worker's
 * JOB_DONE, receiver engine, receiver peer, receiver bootstrap reply), then
 * one message as fuzz_boot reads it (fuzz_input.h). A message the codec
 * refuses goes nowhere, as in the programs. The sender starts with one
 * decode registered (src_rank 0, epoch FUZZ_DECODE_EPOCH, its REGISTER
 * built from the sender's own layout), so XFER_INFO, ABORT and room traffic
 * reach real rooms. A RECV_BEGIN's bootstrap address is replaced by a fixed
 * unbound ipc path (nothing outside is dialled).
 * Checked, besides ASan/UBSan: every room state in both tables is a known
 * state; a STATUS whose token is not the receiver room's never changes that
 * room's state (issue 12, item 6).
 */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_input.h"
#include "base/log.h"
#include "mem/pool.h"
#include "plan/shape.h"
#include "roles/receiver/receiver_impl.h"
#include "roles/sender/sender_impl.h"
#include "table/rtab.h"

#define NMAX FUZZ_NMAX
#define MAX_MSGS 64
#define REOPEN 256

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];
static char s_listen[128], s_eng[128], s_table[128], s_pool[128];
static char r_listen[128], r_eng[128], r_table[128], r_pool[128], boot[128];

static struct sender *s_open;
static struct receiver *r_open;

/* At exit: nothing of the run stays in /tmp or /dev/shm. */
static void cleanup(void)
{
	char path[160];

	receiver_close(&r_open);
	sender_close(&s_open);
	unlink(s_table);
	unlink(r_table);
	pool_unlink(s_pool);
	pool_unlink(r_pool);
	for (const char *const *n = (const char *const[]){ "sp", "se", "rp",
							    "re", NULL };
	     *n; n++) {
		snprintf(path, sizeof path, "%s/%s", dir, *n);
		unlink(path);
	}
	rmdir(dir);
}

static void paths(void)
{
	if (dir[0])
		return;
	atexit(cleanup);
	snprintf(dir, sizeof dir, "/tmp/kvwfz.XXXXXX");
	if (!mkdtemp(dir))
		abort();
	snprintf(s_listen, sizeof s_listen, "ipc://%s/sp", dir);
	snprintf(s_eng, sizeof s_eng, "ipc://%s/se", dir);
	snprintf(s_table, sizeof s_table, "%s/s.rooms", dir);
	snprintf(s_pool, sizeof s_pool, "/dev/shm/kvwire.fz%d-s.pool", (int)getpid());
	snprintf(r_listen, sizeof r_listen, "ipc://%s/rp", dir);
	snprintf(r_eng, sizeof r_eng, "ipc://%s/re", dir);
	snprintf(r_table, sizeof r_table, "%s/r.rooms", dir);
	snprintf(r_pool, sizeof r_pool, "/dev/shm/kvwire.fz%d-r.pool", (int)getpid());
	snprintf(boot, sizeof boot, "ipc://%s/boot-not-bound", dir);
	signal(SIGPIPE, SIG_IGN);
}

static void small_shape(struct shape *sh)
{
	shape_default(sh);
	sh->layers = 2;
	sh->pages = 16;
}

static struct sender *sender_up(void)
{
	struct sender_cfg cfg = { 0 };
	struct sender *s = NULL;
	char err[256];

	cfg.listen = s_listen;
	cfg.engine = s_eng;
	cfg.table = s_table;
	cfg.pool = s_pool;
	cfg.transport = "shm";
	cfg.exe = "/bin/true";
	cfg.workers = 1;
	cfg.topo = (struct kvw_topo){ 1, 1, 1, 1 };
	small_shape(&cfg.shape);
	cfg.bootstrap_timeout_ns = 60000000000ull;
	if (sender_open(&cfg, &s, err, sizeof err) != 0) {
		fprintf(stderr, "sender_open: %s\n", err);
		abort();
	}
	return s;
}

static struct receiver *receiver_up(void)
{
	struct receiver_cfg cfg = { 0 };
	struct receiver *r = NULL;
	char err[256];

	cfg.listen = r_listen;
	cfg.engine = r_eng;
	cfg.table = r_table;
	cfg.pool = r_pool;
	cfg.transport = "shm";
	cfg.topo = (struct kvw_topo){ 1, 1, 1, 1 };
	small_shape(&cfg.shape);
	cfg.waiting_timeout_ns = 60000000000ull;
	if (receiver_open(&cfg, &r, err, sizeof err) != 0) {
		fprintf(stderr, "receiver_open: %s\n", err);
		abort();
	}
	return r;
}

/* A good REGISTER of the decode the records talk as. */
static void register_decode(struct sender *s)
{
	static struct kvw_buf bufs[64];
	static const uint8_t desc[8] = "fz-desc";
	struct kvw_topo topo = { 1, 1, 1, 1 };
	struct kvw_coord coord = { 0 };
	struct wire_in in = { 0 };
	struct frame_msg m;
	struct shape sh;
	uint64_t bytes;
	uint32_t n;
	char err[256];

	small_shape(&sh);
	frame_msg_init(&m, FRAME_REGISTER, 0, 0, FUZZ_DECODE_EPOCH);
	shape_model(&sh, &topo, &coord, &m.u.reg.model);
	if (shape_layout(&sh, &topo, &coord, 1, bufs, 64, &n, &bytes, err,
			 sizeof err) != 0)
		abort();
	m.u.reg.coord = coord;
	m.u.reg.topo = topo;
	snprintf(m.u.reg.endpoint, sizeof m.u.reg.endpoint, "%s/decode", boot);
	snprintf(m.u.reg.transport, sizeof m.u.reg.transport, "shm");
	m.u.reg.desc.p = desc;
	m.u.reg.desc.len = sizeof desc;
	m.u.reg.bufs = frame_bufs_of(bufs, n);
	sender_on_peer(s, &in, &m);
}

/* Every room of t in a known state. */
static void check_states(struct rtab *t)
{
	struct rtab_view v;
	uint32_t cur = 0;

	while (rtab_next(t, &cur, &v) == 0)
		if (v.state > KVW_CLEARED)
			abort();
}

/* A receiver-side STATUS: returns the room's state before (or -1 when
 * the token is the room's or there is no room: anything may happen). */
static int status_guard(struct receiver *r, const struct frame_msg *m)
{
	struct rx_room *room = receiver_rooms_get(&r->rooms, m->hdr.room);

	if (m->hdr.type != FRAME_STATUS || !room ||
	    receiver_room_token_ok(room, m->u.status.token))
		return -1;
	return rtab_state(r->tab, room->ref);
}

static void dispatch(struct sender *s, struct receiver *r, unsigned which,
		     struct frame_msg *m)
{
	struct wire_in in = { 0 };
	int before, after;

	switch (which) {
	case 0:
		sender_on_peer(s, &in, m);
		break;
	case 1:
		sender_on_engine(s, m);
		break;
	case 2:
		if (m->hdr.type == FRAME_JOB_DONE)
			sender_on_job_done(s, 0, m);
		break;
	case 3:
		if (m->hdr.type == FRAME_RECV_BEGIN)
			snprintf(m->u.recv_begin.bootstrap,
				 sizeof m->u.recv_begin.bootstrap, "%s", boot);
		receiver_dispatch(r, 1, m);
		break;
	case 4:
		before = status_guard(r, m);
		receiver_dispatch(r, 0, m);
		if (before >= 0) {
			struct rx_room *room = receiver_rooms_get(&r->rooms,
								  m->hdr.room);

			after = room ? rtab_state(r->tab, room->ref) : before;
			if (after != before)
				abort(); /* a STATUS of another incarnation acted */
		}
		break;
	default:
		if (r->nboots)
			receiver_boot_reply(r, r->boots[0], m);
		break;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	/* Opening both processes costs far more than a run of records, so
	 * they live for REOPEN inputs (state carries over between those). */
	static unsigned runs;
	struct sender *s;
	struct receiver *r;
	size_t off = 0;

	if (runs++ % REOPEN == 0) {
		receiver_close(&r_open);
		sender_close(&s_open);
		paths();
		log_cur_level = LOG_ERROR;
		unlink(s_table);
		unlink(r_table);
		pool_unlink(s_pool);
		pool_unlink(r_pool);
		s_open = sender_up();
		r_open = receiver_up();
		register_decode(s_open);
	}
	s = s_open;
	r = r_open;
	for (int k = 0; k < MAX_MSGS && off < size; k++) {
		struct frame_part parts[NMAX];
		uint8_t *mem[NMAX] = { 0 };
		unsigned which = data[off++] % FUZZ_ROLES_HANDLERS;
		struct frame_msg m;
		char err[256];
		int n = fuzz_cut(data, size, &off, 0, parts, mem);

		if (n < 0)
			break;
		if (frame_decode(parts, (size_t)n, &m, err, sizeof err) == 0)
			dispatch(s, r, which, &m);
		for (int i = 0; i < n; i++)
			free(mem[i]);
	}
	/* Once per input: a table walk is 65536 slots. */
	check_states(s->t);
	check_states(r->tab);
	return 0;
}
