/*
 * test_sender_register.c - kv-sender's REGISTER handler validates, then
 * acts, on a real control process (sender_open on files in /dev/shm; its
 * handlers are driven directly, without the poll loop). Proved: a decode
 * registers and its room reaches WaitingForInput; a later REGISTER from
 * the same endpoint whose plan cannot be built (another transport, a layout
 * missing buffers), with a new epoch or the same one, is refused and
 * counted: the registration (epoch, plan, descriptor), the peer table's
 * epoch and the room stay exactly as they were; and a good REGISTER of a
 * new epoch does replace it and fails the old incarnation's room, so the
 * test can tell the two apart. And (issue 12) on room id reuse, an MLA
 * dummy rank's XFER_INFO that beats SEND_BEGIN opens the new incarnation;
 * a cleared room with a job in flight outlives its ack deadline. And
 * (issue 14) an ABORT from a registered decode that is not a destination
 * of the room changes nothing and is counted as unauthorised; a REGISTER
 * naming the prefill's own pool, another decode's or another group's is
 * refused, counted, and its room fails cleanly; a full peer list
 * reclaims refused, dead and silent registrations no room names. And
 * (issue 36) a pool that is not a regular file, belongs to another user
 * or is not the file its descriptor's dev and ino state is refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "base/proc.h"
#include "mem/pool.h"
#include "plan/shape.h"
#include "roles/sender/sender_impl.h"
#include "table/rtab.h"
#include "xport/xport.h"

#define E1 0x1111111111111111ull
#define E2 0x2222222222222222ull
#define ROOM 42u
#define DECODE_EP "ipc:///tmp/kvw-test-decode-not-bound"

struct fix {
	char dir[32], listen[96], eng[96], table[96], pool[96];
	struct sender *s;
	struct shape shape;
	struct kvw_topo topo;
	struct kvw_coord coord;
	struct kvw_buf bufs[64];
	uint32_t nbufs;
	struct kvw_model model;
	/* Two decode pools and their real shm descriptors: a registration
	 * names one of them (issue 14: never a made-up file). */
	char dpool[2][96];
	struct pool *dp[2];
	uint8_t desc[2][256];
	size_t desclen[2];
};

/* Set by setup_kvup: the files carry kv-up's names (DIR/kvwire.G.p0.pool
 * for this rank; decode pool 0 is group G's d0, pool 1 another group's). */
static int kvup_names;

/* Makes decode pool i and its descriptor. */
static int decode_pool(struct fix *f, int i)
{
	const struct xport_ops *ops = xport_find("shm");
	struct xport *x = NULL;
	uint32_t id;
	char err[256];
	int rc;

	if (kvup_names)
		snprintf(f->dpool[i], sizeof f->dpool[i],
			 "/dev/shm/kvwire.treg%s-%d.d0.pool", i ? "x" : "",
			 (int)getpid());
	else
		snprintf(f->dpool[i], sizeof f->dpool[i],
			 "/dev/shm/kvwire.treg-%d-d%d.pool", (int)getpid(), i);
	rc = pool_create(f->dpool[i], 1 << 20, &f->dp[i], err, sizeof err);
	if (rc == 0)
		rc = xport_open(ops, &x, err, sizeof err);
	if (rc == 0)
		rc = xport_register(x, f->dp[i], &id, f->desc[i],
				    sizeof f->desc[i], &f->desclen[i], err,
				    sizeof err);
	xport_close(&x);
	if (rc != 0)
		fprintf(stderr, "decode pool %d: %s\n", i, err);
	return rc;
}

static int setup(void **state)
{
	struct fix *f = test_calloc(1, sizeof *f);
	struct sender_cfg cfg = { 0 };
	uint64_t bytes;
	char err[256];

	snprintf(f->dir, sizeof f->dir, "/tmp/kvwtr.XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->listen, sizeof f->listen, "ipc://%s/p", f->dir);
	snprintf(f->eng, sizeof f->eng, "ipc://%s/e", f->dir);
	snprintf(f->table, sizeof f->table, "%s/t.rooms", f->dir);
	snprintf(f->pool, sizeof f->pool, "/dev/shm/kvwire.treg-%d%s.pool",
		 (int)getpid(), kvup_names ? ".p0" : "");
	f->topo = (struct kvw_topo){ 1, 1, 1, 1 };
	shape_default(&f->shape);
	f->shape.layers = 2;
	f->shape.pages = 8;
	cfg.listen = f->listen;
	cfg.engine = f->eng;
	cfg.table = f->table;
	cfg.pool = f->pool;
	cfg.transport = "shm";
	/* The handlers are driven directly: the worker only has to exist. */
	cfg.exe = "/bin/true";
	cfg.workers = 1;
	cfg.topo = f->topo;
	cfg.shape = f->shape;
	cfg.bootstrap_timeout_ns = 60000000000ull;
	if (sender_open(&cfg, &f->s, err, sizeof err) != 0) {
		fprintf(stderr, "sender_open: %s\n", err);
		return -1;
	}
	/* The decode's side of the same shape: what its REGISTER states. */
	shape_model(&f->shape, &f->topo, &f->coord, &f->model);
	if (shape_layout(&f->shape, &f->topo, &f->coord, 1, f->bufs, 64,
			 &f->nbufs, &bytes, err, sizeof err) != 0)
		return -1;
	if (decode_pool(f, 0) != 0 || decode_pool(f, 1) != 0)
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;
	char path[128];

	sender_close(&f->s);
	unlink(f->table);
	pool_unlink(f->pool);
	for (int i = 0; i < 2; i++) {
		pool_close(&f->dp[i]);
		pool_unlink(f->dpool[i]);
	}
	snprintf(path, sizeof path, "%s/p", f->dir);
	unlink(path);
	snprintf(path, sizeof path, "%s/e", f->dir);
	unlink(path);
	rmdir(f->dir);
	test_free(f);
	return 0;
}

static int setup_kvup(void **state)
{
	int rc;

	kvup_names = 1;
	rc = setup(state);
	kvup_names = 0;
	return rc;
}

/* A REGISTER from the decode at ep with this epoch, transport, the
 * first nbufs buffers of its layout and decode pool `pool`'s descriptor. */
static void reg_at(struct fix *f, const char *ep, uint64_t epoch,
		   const char *transport, uint32_t nbufs, int pool)
{
	struct wire_in in = { 0 };
	struct frame_msg m;

	frame_msg_init(&m, FRAME_REGISTER, 0, 0, epoch);
	m.u.reg.coord = f->coord;
	m.u.reg.topo = f->topo;
	snprintf(m.u.reg.endpoint, sizeof m.u.reg.endpoint, "%s", ep);
	snprintf(m.u.reg.transport, sizeof m.u.reg.transport, "%s", transport);
	m.u.reg.desc.p = f->desc[pool];
	m.u.reg.desc.len = (uint32_t)f->desclen[pool];
	m.u.reg.model = f->model;
	m.u.reg.bufs = frame_bufs_of(f->bufs, nbufs);
	sender_on_peer(f->s, &in, &m);
}

/* The same from the decode at DECODE_EP. */
static void reg(struct fix *f, uint64_t epoch, const char *transport,
		uint32_t nbufs, int pool)
{
	reg_at(f, DECODE_EP, epoch, transport, nbufs, pool);
}

/* SEND_BEGIN from the engine and XFER_INFO from the decode of epoch. */
static void open_room(struct fix *f, uint64_t epoch)
{
	static const uint32_t pages[2] = { 1, 2 };
	struct wire_in in = { 0 };
	struct frame_msg m;

	frame_msg_init(&m, FRAME_SEND_BEGIN, 0, ROOM, 0);
	m.u.send_begin.num_pages = 2;
	sender_on_engine(f->s, &m);
	frame_msg_init(&m, FRAME_XFER_INFO, 0, ROOM, epoch);
	m.u.xfer_info.required_dst_info_num = 1;
	m.u.xfer_info.token = 1;
	m.u.xfer_info.pages = frame_u32s_of(pages, 2);
	sender_on_peer(f->s, &in, &m);
}

static int room_state(struct fix *f)
{
	struct sender_room *r = sender_rooms_get(&f->s->rooms, ROOM);

	assert_non_null(r);
	return rtab_state(f->s->t, r->ref);
}

/* Everything a refused REGISTER must leave as it was. */
struct snap {
	uint32_t npeers, id, desclen;
	uint64_t epoch, table_epoch, malformed;
	struct plan *plan;
	uint8_t desc[256];
	int state;
};

static void snap(struct fix *f, struct snap *x)
{
	struct sender_peer *p = f->s->peers[0];
	struct rtab_peer_view v;

	x->npeers = f->s->npeers;
	x->id = p->id;
	x->epoch = p->epoch;
	x->plan = p->plan;
	x->desclen = p->desclen;
	assert_true(p->desclen <= sizeof x->desc);
	memcpy(x->desc, p->desc, p->desclen);
	assert_int_equal(rtab_peer_get(f->s->t, p->id, &v), 0);
	x->table_epoch = v.epoch;
	x->malformed = rtab_counter_get(f->s->t, RTAB_C_MALFORMED);
	x->state = room_state(f);
}

static void assert_unchanged(struct fix *f, const struct snap *before)
{
	struct snap now;

	snap(f, &now);
	assert_int_equal(now.npeers, before->npeers);
	assert_int_equal(now.id, before->id);
	assert_true(now.epoch == before->epoch);
	assert_ptr_equal(now.plan, before->plan);
	assert_non_null(now.plan);
	assert_int_equal(now.desclen, before->desclen);
	assert_memory_equal(now.desc, before->desc, now.desclen);
	assert_true(now.table_epoch == before->table_epoch);
	assert_int_equal(now.state, before->state);
	/* Refused, and counted once. */
	assert_true(now.malformed == before->malformed + 1);
}

static void test_a_bad_register_leaves_the_registration_and_its_rooms(void **state)
{
	struct fix *f = *state;
	struct snap before;

	reg(f, E1, "shm", f->nbufs, 0);
	assert_int_equal(f->s->npeers, 1);
	assert_non_null(f->s->peers[0]->plan);
	open_room(f, E1);
	assert_int_equal(room_state(f), KVW_WAITING);
	snap(f, &before);
	assert_true(before.epoch == E1 && before.table_epoch == E1);

	/* A new epoch with a transport this rank does not use. */
	reg(f, E2, "rdma", f->nbufs, 1);
	assert_unchanged(f, &before);
	before.malformed++;
	/* The same epoch with a layout that lacks most of its buffers. */
	reg(f, E1, "shm", 1, 1);
	assert_unchanged(f, &before);
	before.malformed++;
	/* A new epoch with a layout that lacks most of its buffers. */
	reg(f, E2, "shm", 1, 1);
	assert_unchanged(f, &before);
}

static void test_a_good_register_of_a_new_epoch_replaces_it(void **state)
{
	struct fix *f = *state;
	struct rtab_peer_view v;
	struct sender_peer *p;

	reg(f, E1, "shm", f->nbufs, 0);
	open_room(f, E1);
	assert_int_equal(room_state(f), KVW_WAITING);
	reg(f, E2, "shm", f->nbufs, 1);
	p = f->s->peers[0];
	assert_int_equal(f->s->npeers, 1);
	assert_true(p->epoch == E2);
	assert_non_null(p->plan);
	assert_int_equal(p->desclen, f->desclen[1]);
	assert_memory_equal(p->desc, f->desc[1], f->desclen[1]);
	assert_int_equal(rtab_peer_get(f->s->t, p->id, &v), 0);
	assert_true(v.epoch == E2);
	/* The old incarnation's room failed: its decode restarted. */
	assert_int_equal(room_state(f), KVW_FAILED);
}

/* XFER_INFO (dummy when dummy) of the decode of epoch E1 with token. */
static void xfer_info(struct fix *f, uint64_t room, int dummy, uint64_t token)
{
	static const uint32_t pages[2] = { 1, 2 };
	struct wire_in in = { 0 };
	struct frame_msg m;

	frame_msg_init(&m, FRAME_XFER_INFO, 0, room, E1);
	m.u.xfer_info.required_dst_info_num = 1;
	m.u.xfer_info.dummy = (uint8_t)dummy;
	m.u.xfer_info.token = token;
	if (!dummy)
		m.u.xfer_info.pages = frame_u32s_of(pages, 2);
	sender_on_peer(f->s, &in, &m);
}

static void engine(struct fix *f, unsigned type, uint64_t room)
{
	struct frame_msg m;

	frame_msg_init(&m, type, 0, room, 0);
	if (type == FRAME_SEND_BEGIN)
		m.u.send_begin.num_pages = 2;
	sender_on_engine(f->s, &m);
}

/* Issue 12, item 6: on an MLA dummy rank (every XFER_INFO dummy, so no
 * table peer is ever set) the XFER_INFO of a reused room id that beats its
 * SEND_BEGIN opens the new incarnation with its token; an XFER_INFO for an
 * incarnation the engine cleared before any XFER_INFO came is still late. */
static void test_a_dummy_xfer_info_that_beats_send_begin_on_id_reuse_opens_the_room(void **state)
{
	struct fix *f = *state;
	struct sender_room *r;

	reg(f, E1, "shm", f->nbufs, 0);
	xfer_info(f, ROOM, 1, 0x71);
	engine(f, FRAME_SEND_BEGIN, ROOM);
	r = sender_rooms_get(&f->s->rooms, ROOM);
	assert_non_null(r);
	assert_int_equal(r->ndst, 1);
	engine(f, FRAME_CLEAR, ROOM);
	assert_null(sender_rooms_get(&f->s->rooms, ROOM));
	/* The id again: its XFER_INFO comes before its SEND_BEGIN. */
	xfer_info(f, ROOM, 1, 0x72);
	r = sender_rooms_get(&f->s->rooms, ROOM);
	assert_non_null(r);
	assert_int_equal(r->ndst, 1);
	assert_true(r->dst[0].dummy && r->dst[0].token == 0x72);
	/* Cleared before any XFER_INFO: the one that comes then is late. */
	engine(f, FRAME_SEND_BEGIN, ROOM + 1);
	engine(f, FRAME_CLEAR, ROOM + 1);
	xfer_info(f, ROOM + 1, 1, 0x73);
	assert_null(sender_rooms_get(&f->s->rooms, ROOM + 1));
}

static void abort_by(struct fix *f, uint64_t epoch, uint64_t room,
		     uint64_t token)
{
	struct wire_in in = { 0 };
	struct frame_msg m;

	frame_msg_init(&m, FRAME_ABORT, 0, room, epoch);
	m.u.abort.reason = KVW_R_ABORTED;
	m.u.abort.token = token;
	sender_on_peer(f->s, &in, &m);
}

static void abort_from(struct fix *f, uint64_t room, uint64_t token)
{
	abort_by(f, E1, room, token);
}

/* Issue 14: only a destination of a room may abort it. A second,
 * registered decode's ABORT of the first one's room is counted as
 * unauthorised and changes nothing (state, ack targets); the
 * destination's own ABORT still fails the room. */
static void test_an_abort_from_a_decode_that_is_not_a_destination_changes_nothing(void **state)
{
	struct fix *f = *state;
	struct rtab_metrics_view mv;
	struct sender_room *r;
	struct rtab_view v;

	reg(f, E1, "shm", f->nbufs, 0);
	reg_at(f, DECODE_EP "-other", E2, "shm", f->nbufs, 1);
	assert_int_equal(f->s->npeers, 2);
	open_room(f, E1);
	r = sender_rooms_get(&f->s->rooms, ROOM);
	assert_non_null(r);
	assert_int_equal(rtab_get(f->s->t, r->ref, &v), 0);
	assert_int_equal(v.state, KVW_WAITING);
	abort_by(f, E2, ROOM, 0x93);
	assert_int_equal(rtab_get(f->s->t, r->ref, &v), 0);
	assert_int_equal(v.state, KVW_WAITING);
	assert_int_equal(r->nacks, 0);
	rtab_metrics_get(f->s->t, &mv);
	assert_int_equal(mv.sec[RTAB_S_UNAUTHORISED], 1);
	abort_from(f, ROOM, 0x94);
	assert_int_equal(rtab_get(f->s->t, r->ref, &v), 0);
	assert_int_equal(v.state, KVW_FAILED);
	assert_int_equal(v.reason, KVW_R_ABORTED);
	rtab_metrics_get(f->s->t, &mv);
	assert_int_equal(mv.sec[RTAB_S_UNAUTHORISED], 1);
}

/* Issue 12, item 4: a cleared room whose ack deadline passed while a job
 * of it is still in flight stays, so a later ABORT of its id (another
 * decode rank) waits for that job instead of being acked at once. */
static void test_a_cleared_room_with_a_job_in_flight_outlives_its_ack_deadline(void **state)
{
	struct fix *f = *state;
	struct sender_room *r;

	reg(f, E1, "shm", f->nbufs, 0);
	open_room(f, E1);
	r = sender_rooms_get(&f->s->rooms, ROOM);
	assert_non_null(r);
	/* A job of the room at a worker (that never answers). */
	r->inflight = 1;
	assert_int_equal(rtab_outstanding_add(f->s->t, r->ref, 1), 1);
	abort_from(f, ROOM, 0x91);
	assert_int_equal(r->nacks, 1); /* owed: the job is outstanding */
	engine(f, FRAME_CLEAR, ROOM);
	r = sender_rooms_get(&f->s->rooms, ROOM);
	assert_non_null(r);
	assert_true(r->cleared);
	/* Past every deadline: the ack targets are dropped, the room stays. */
	sender_sweep(f->s, proc_now_ns() + 3600000000000ull);
	r = sender_rooms_get(&f->s->rooms, ROOM);
	assert_non_null(r);
	assert_int_equal(r->nacks, 0);
	/* A later ABORT of the id waits for the job too. */
	abort_from(f, ROOM, 0x92);
	assert_int_equal(r->nacks, 1);
}

/* SEND_CHUNK of both pages of ROOM from the engine, with a worker up: the
 * room's first job is planned (or the room fails). */
static void chunk(struct fix *f)
{
	static const uint32_t pages[2] = { 1, 2 };
	struct frame_msg m;

	f->s->w[0].up = 1;
	frame_msg_init(&m, FRAME_SEND_CHUNK, 0, ROOM, 1);
	m.u.send_chunk.is_last = 1;
	m.u.send_chunk.pages = frame_u32s_of(pages, 2);
	sender_on_engine(f->s, &m);
}

static uint64_t unauthorised(struct fix *f)
{
	struct rtab_metrics_view mv;

	rtab_metrics_get(f->s->t, &mv);
	return mv.sec[RTAB_S_UNAUTHORISED];
}

/* Issue 14: a REGISTER whose shm descriptor names this prefill rank's own
 * pool, or a pool another decode registered, is refused and counted as
 * unauthorised; the decode is recorded unusable, so its room fails
 * cleanly (Failed, refused: not a layout mismatch) at its first chunk,
 * never mapped. */
static void test_a_register_naming_the_prefills_own_or_another_decodes_pool_is_refused(void **state)
{
	struct fix *f = *state;
	const struct xport_ops *ops = xport_find("shm");
	struct xport *x = NULL;
	struct rtab_view v;
	struct sender_room *r;
	uint32_t id;
	char err[256];

	/* The prefill's own pool, described as a decode would. */
	assert_int_equal(xport_open(ops, &x, err, sizeof err), 0);
	assert_int_equal(xport_register(x, f->s->pool, &id, f->desc[1],
					sizeof f->desc[1], &f->desclen[1], err,
					sizeof err), 0);
	xport_close(&x);
	reg(f, E1, "shm", f->nbufs, 1);
	assert_int_equal(unauthorised(f), 1);
	assert_int_equal(f->s->npeers, 1);
	assert_null(f->s->peers[0]->plan);
	assert_non_null(strstr(f->s->peers[0]->why, "own"));
	open_room(f, E1);
	chunk(f);
	r = sender_rooms_get(&f->s->rooms, ROOM);
	assert_non_null(r);
	assert_int_equal(rtab_get(f->s->t, r->ref, &v), 0);
	assert_int_equal(v.state, KVW_FAILED);
	assert_int_equal(v.reason, KVW_R_REFUSED);

	/* The decode's own pool: accepted. Another decode naming it: not. */
	reg(f, E2, "shm", f->nbufs, 0);
	assert_non_null(f->s->peers[0]->plan);
	reg_at(f, DECODE_EP "-other", E1, "shm", f->nbufs, 0);
	assert_int_equal(unauthorised(f), 2);
	assert_int_equal(f->s->npeers, 2);
	assert_null(f->s->peers[1]->plan);
	assert_non_null(strstr(f->s->peers[1]->why, DECODE_EP));
}

/* A shm descriptor (xport_shm.c's layout: magic, version, path length,
 * size, dev, ino, path) naming path with the identity given. */
static size_t shm_desc(uint8_t *out, const char *path, uint64_t dev,
		       uint64_t ino)
{
	size_t n = strlen(path);
	uint64_t v[3] = { 1 << 20, dev, ino };

	memset(out, 0, 32);
	memcpy(out, "KVSH", 4);
	out[4] = 1;
	out[6] = (uint8_t)n;
	out[7] = (uint8_t)(n >> 8);
	for (int k = 0; k < 3; k++)
		for (int b = 0; b < 8; b++)
			out[8 + 8 * k + b] = (uint8_t)(v[k] >> (8 * b));
	memcpy(out + 32, path, n);
	return 32 + n;
}

/* sender_pool_allowed on a REGISTER from DECODE_EP naming path with the
 * identity (dev, ino): 1 or 0, the reason in why. */
static int pool_allowed(struct fix *f, const char *path, uint64_t dev,
			uint64_t ino, char *why, size_t whylen)
{
	struct frame_msg m;
	uint8_t desc[256];
	uint64_t d, i;

	frame_msg_init(&m, FRAME_REGISTER, 0, 0, E1);
	snprintf(m.u.reg.endpoint, sizeof m.u.reg.endpoint, "%s", DECODE_EP);
	snprintf(m.u.reg.transport, sizeof m.u.reg.transport, "shm");
	m.u.reg.coord = f->coord;
	m.u.reg.topo = f->topo;
	m.u.reg.desc.p = desc;
	m.u.reg.desc.len = (uint32_t)shm_desc(desc, path, dev, ino);
	why[0] = '\0';
	return sender_pool_allowed(f->s, NULL, &m.u.reg, &d, &i, why, whylen);
}

/* Issue 36: the pool a REGISTER names must be a regular file (lstat):
 * a FIFO, described with its own dev and ino so that every later check
 * would pass, is refused. The honest descriptor of a decode pool is
 * accepted (so the refusals below are about the one check each). */
static void test_a_register_naming_a_pool_that_is_not_a_regular_file_is_refused(void **state)
{
	struct fix *f = *state;
	char path[128], why[512];
	struct stat st;

	assert_int_equal(stat(f->dpool[0], &st), 0);
	assert_int_equal(pool_allowed(f, f->dpool[0], st.st_dev, st.st_ino,
				      why, sizeof why), 1);
	snprintf(path, sizeof path, "/dev/shm/kvwire.treg-%d-fifo.pool",
		 (int)getpid());
	unlink(path);
	assert_int_equal(mkfifo(path, 0600), 0);
	assert_int_equal(lstat(path, &st), 0);
	assert_int_equal(pool_allowed(f, path, st.st_dev, st.st_ino, why,
				      sizeof why), 0);
	unlink(path);
	assert_non_null(strstr(why, "not a regular file"));
}

/* Issue 36: a pool file of another user is refused, though it is a
 * regular file described with its own dev and ino. */
static void test_a_register_naming_another_users_pool_is_refused(void **state)
{
	struct fix *f = *state;
	char path[128], why[512];
	struct stat st;
	int fd;

	if (geteuid() != 0)
		skip(); /* only root can give a file away */
	snprintf(path, sizeof path, "/dev/shm/kvwire.treg-%d-other.pool",
		 (int)getpid());
	fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
	assert_true(fd >= 0);
	assert_int_equal(fchown(fd, 4242, 4242), 0);
	assert_int_equal(fstat(fd, &st), 0);
	close(fd);
	assert_int_equal(pool_allowed(f, path, st.st_dev, st.st_ino, why,
				      sizeof why), 0);
	unlink(path);
	assert_non_null(strstr(why, "belongs to uid 4242"));
}

/* Issue 36: a descriptor whose dev or ino is not the named file's (the
 * file was replaced, or the peer lies) is refused. */
static void test_a_register_whose_pool_is_not_the_file_the_descriptor_states_is_refused(void **state)
{
	struct fix *f = *state;
	char why[512];
	struct stat st;

	assert_int_equal(stat(f->dpool[0], &st), 0);
	assert_int_equal(pool_allowed(f, f->dpool[0], st.st_dev, st.st_ino + 1,
				      why, sizeof why), 0);
	assert_non_null(strstr(why, "not the file the descriptor states"));
	assert_int_equal(pool_allowed(f, f->dpool[0], st.st_dev + 1, st.st_ino,
				      why, sizeof why), 0);
	assert_non_null(strstr(why, "not the file the descriptor states"));
}

/* Issue 14: in a group kv-up started, the decode at rank (0,0) may only
 * name its group's d0 pool: the same member's pool of another group is
 * refused and counted; its own is accepted. */
static void test_under_kvup_names_a_register_naming_another_groups_pool_is_refused(void **state)
{
	struct fix *f = *state;

	reg(f, E1, "shm", f->nbufs, 1);
	assert_int_equal(unauthorised(f), 1);
	assert_null(f->s->peers[0]->plan);
	assert_non_null(strstr(f->s->peers[0]->why, "not this group"));
	reg(f, E2, "shm", f->nbufs, 0);
	assert_int_equal(unauthorised(f), 1);
	assert_non_null(f->s->peers[0]->plan);
}

/* Issue 14: 10,000 fake REGISTERs, each naming a new endpoint, from one
 * source (one ROUTER identity) take at most SENDER_PEERS_PER_SOURCE peer
 * slots, the rest are dropped by the per-source bound and the REGISTER
 * rate, counted as rate_limited; the real decode, registered before and
 * again after from its own source, keeps its room Waiting and opens a
 * new one. */
static void test_ten_thousand_fake_registers_from_one_source_leave_room_for_real_peers(void **state)
{
	struct fix *f = *state;
	struct wire_in flood = { 0 };
	struct rtab_metrics_view mv;
	struct frame_msg m;

	reg(f, E1, "shm", f->nbufs, 0);
	open_room(f, E1);
	assert_int_equal(room_state(f), KVW_WAITING);
	memcpy(flood.id, "\0flood", 6);
	flood.idlen = 6;
	for (int i = 0; i < 10000; i++) {
		frame_msg_init(&m, FRAME_REGISTER, 0, 0, E2 + (uint64_t)i);
		m.u.reg.coord = f->coord;
		m.u.reg.topo = f->topo;
		snprintf(m.u.reg.endpoint, sizeof m.u.reg.endpoint,
			 "ipc:///tmp/kvw-fake-%d", i);
		snprintf(m.u.reg.transport, sizeof m.u.reg.transport, "tcp");
		m.u.reg.model = f->model;
		m.u.reg.bufs = frame_bufs_of(f->bufs, f->nbufs);
		sender_on_peer(f->s, &flood, &m);
	}
	assert_true(f->s->npeers <= 1 + SENDER_PEERS_PER_SOURCE);
	rtab_metrics_get(f->s->t, &mv);
	/* Each fake was dropped by its source's bucket or bound, or took a
	 * slot its source's next fake reclaimed (all were refused). */
	assert_true(mv.sec[RTAB_S_RATE_LIMITED] + mv.sec[RTAB_S_RECLAIMED] >=
		    10000 - SENDER_PEERS_PER_SOURCE);
	assert_true(mv.sec[RTAB_S_RECLAIMED] > 0);
	/* The real decode's room is untouched; it registers again and its
	 * next room opens. */
	assert_int_equal(room_state(f), KVW_WAITING);
	reg(f, E1, "shm", f->nbufs, 0);
	assert_non_null(f->s->peers[0]->plan);
	xfer_info(f, ROOM + 7, 0, 0x75);
	assert_non_null(sender_rooms_get(&f->s->rooms, ROOM + 7));
}

/* A REGISTER from source number `src` (its own ROUTER identity) of the
 * decode at ep: refused (transport tcp: unusable), never a room. */
static void fake_reg(struct fix *f, uint32_t src, const char *ep)
{
	struct wire_in in = { 0 };
	struct frame_msg m;

	in.idlen = (uint32_t)snprintf((char *)in.id, sizeof in.id, "src-%u",
				      src);
	frame_msg_init(&m, FRAME_REGISTER, 0, 0, E2 + src);
	m.u.reg.coord = f->coord;
	m.u.reg.topo = f->topo;
	snprintf(m.u.reg.endpoint, sizeof m.u.reg.endpoint, "%s", ep);
	snprintf(m.u.reg.transport, sizeof m.u.reg.transport, "tcp");
	m.u.reg.model = f->model;
	m.u.reg.bufs = frame_bufs_of(f->bufs, f->nbufs);
	sender_on_peer(f->s, &in, &m);
}

static struct sender_peer *peer_at(struct fix *f, const char *ep)
{
	for (uint32_t i = 0; i < f->s->npeers; i++)
		if (strcmp(f->s->peers[i]->endpoint, ep) == 0)
			return f->s->peers[i];
	return NULL;
}

/* Issue 14: refused registrations from many sources fill the peer list
 * and the table's peer slots; a real decode's REGISTER then reclaims them
 * and gets in, and the real decode already serving a room keeps its peer,
 * its slot and its room. */
static void test_a_full_peer_table_reclaims_refused_registrations(void **state)
{
	struct fix *f = *state;
	struct rtab_metrics_view mv;
	struct sender_peer *real;
	char ep[64];

	reg(f, E1, "shm", f->nbufs, 0);
	open_room(f, E1);
	real = f->s->peers[0];
	for (uint32_t i = 0; f->s->npeers < SENDER_MAX_PEERS; i++) {
		snprintf(ep, sizeof ep, "ipc:///tmp/kvw-fake-%u", i);
		fake_reg(f, i, ep);
	}
	rtab_metrics_get(f->s->t, &mv);
	assert_int_equal(mv.sec[RTAB_S_RECLAIMED], 0);
	/* Full: the next new endpoint gets in by reclaiming the refused. */
	reg_at(f, DECODE_EP "-other", E2, "shm", f->nbufs, 1);
	assert_non_null(peer_at(f, DECODE_EP "-other"));
	assert_non_null(peer_at(f, DECODE_EP "-other")->plan);
	rtab_metrics_get(f->s->t, &mv);
	assert_int_equal(mv.sec[RTAB_S_RECLAIMED], SENDER_MAX_PEERS - 1);
	assert_int_equal(f->s->npeers, 2);
	assert_ptr_equal(peer_at(f, DECODE_EP), real);
	assert_int_equal(room_state(f), KVW_WAITING);
	/* The table's slots went too: new endpoints find room there. */
	for (uint32_t i = 0; i < 100; i++) {
		snprintf(ep, sizeof ep, "ipc:///tmp/kvw-fake-again-%u", i);
		fake_reg(f, 5000 + i, ep);
		assert_non_null(peer_at(f, ep));
	}
}

/* Issue 14: which registrations reclaim frees. A peer that answered the
 * heartbeat stays; one that never answered nor served a room goes after
 * its grace time; a dead one goes once no room names it, and its next
 * XFER_INFO is answered "not registered" (it registers again). */
static void test_reclaim_frees_dead_and_silent_peers_not_live_ones(void **state)
{
	struct fix *f = *state;
	struct sender_peer *a;
	uint64_t now;

	reg(f, E1, "shm", f->nbufs, 0);
	reg_at(f, DECODE_EP "-other", E2, "shm", f->nbufs, 1);
	now = proc_now_ns(); /* after both registered */
	a = peer_at(f, DECODE_EP);
	assert_int_equal(rtab_peer_seen(f->s->t, a->id, E1, now), 0);
	assert_int_equal(sender_peers_reclaim(f->s, NULL, 0, now), 0);
	assert_int_equal(sender_peers_reclaim(f->s, NULL, 0,
		now + SENDER_REGISTER_GRACE_NS + 1), 1);
	assert_null(peer_at(f, DECODE_EP "-other"));
	assert_ptr_equal(peer_at(f, DECODE_EP), a);

	/* Dead, but a room names it: kept until the room is gone. */
	open_room(f, E1);
	assert_int_equal(rtab_peer_set_liveness(f->s->t, a->id,
						RTAB_PEER_DEAD), 0);
	assert_int_equal(sender_peers_reclaim(f->s, NULL, 0, now), 0);
	engine(f, FRAME_CLEAR, ROOM);
	assert_null(sender_rooms_get(&f->s->rooms, ROOM));
	assert_int_equal(sender_peers_reclaim(f->s, NULL, 0, now), 1);
	assert_int_equal(f->s->npeers, 0);
	xfer_info(f, ROOM + 1, 0, 0x31);
	assert_null(sender_rooms_get(&f->s->rooms, ROOM + 1));
	reg(f, E1, "shm", f->nbufs, 0);
	xfer_info(f, ROOM + 1, 0, 0x32);
	assert_non_null(sender_rooms_get(&f->s->rooms, ROOM + 1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_a_bad_register_leaves_the_registration_and_its_rooms, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_good_register_of_a_new_epoch_replaces_it, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_dummy_xfer_info_that_beats_send_begin_on_id_reuse_opens_the_room, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_cleared_room_with_a_job_in_flight_outlives_its_ack_deadline, setup, teardown),
		cmocka_unit_test_setup_teardown(test_an_abort_from_a_decode_that_is_not_a_destination_changes_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_register_naming_the_prefills_own_or_another_decodes_pool_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_register_naming_a_pool_that_is_not_a_regular_file_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_register_naming_another_users_pool_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_register_whose_pool_is_not_the_file_the_descriptor_states_is_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_under_kvup_names_a_register_naming_another_groups_pool_is_refused, setup_kvup, teardown),
		cmocka_unit_test_setup_teardown(test_ten_thousand_fake_registers_from_one_source_leave_room_for_real_peers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_full_peer_table_reclaims_refused_registrations, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reclaim_frees_dead_and_silent_peers_not_live_ones, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
