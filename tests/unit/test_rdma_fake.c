/*
 * test_rdma_fake.c - the whole rdma transport (xport_rdma.c with its
 * exchange thread, queue pair bring-up and bookkeeping) driven over a fake
 * verbs device in this process (rdma_lib_override): every library verb is
 * a function here, and the fake context's post_send, poll_cq, post_recv and
 * req_notify_cq execute RDMA WRITEs as memcpy into the registered remote
 * region (checking its rkey, bounds and remote-write access), deliver
 * immediates to the peer queue pair's receive CQ and its completion
 * channel, and complete signalled WRs in order. Proved, with no hardware:
 * connect brings both ends to RTS through the exchange (a wrong secret is
 * refused and counted); batches land byte-exact, one immediate each, at
 * most the send queue's depth in flight; a bad copy is refused before any
 * WR is posted; WRs held in flight keep their room busy and make a timed
 * wait time out until they complete; a failed WR fails the wait with the
 * verbs status text and its room, flushes and drains the rest, refuses
 * the remote's later batches, and after disconnect the decode drops its
 * queue pair and a fresh connect works.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/kvw.h"
#include "xport/pool.h"
#include "xport/rdma_desc.h"
#include "xport/rdma_lib.h"
#include "xport/xport.h"

/* ---- the fake device ----------------------------------------------- */

#define FQ 4096u /* CQ ring, events, held WRs */

struct fcq {
	struct ibv_cq cq;
	struct ibv_wc ring[FQ];
	unsigned head, n;
	int armed;
};

struct fqp {
	struct ibv_qp qp;
	uint32_t dest;
	unsigned recvs;
	int access;
	struct fqp *next;
};

struct fmr {
	struct ibv_mr mr;
	int access;
	struct fmr *next;
};

static struct {
	pthread_mutex_t mu;
	struct ibv_context ctx;
	struct ibv_device dev;
	struct fqp *qps;
	struct fmr *mrs;
	uint32_t next_qpn, next_key;
	int chan_wfd;
	struct fcq *events[FQ];
	unsigned nev;
	uint64_t posted;   /* WRs posted, all queue pairs */
	int hold;          /* 1: WRs wait in held[] until fake_release */
	struct { struct fqp *qp; struct ibv_send_wr wr; struct ibv_sge sge[32]; } held[FQ];
	unsigned nheld;
	uint64_t fail_at;  /* the WR with this post number fails (0: none) */
	unsigned live_qps;
} F = { .mu = PTHREAD_MUTEX_INITIALIZER, .next_qpn = 100, .next_key = 7 };

static struct fqp *qp_of(struct ibv_qp *q)
{
	return (struct fqp *)(void *)q;
}

static struct fqp *qp_by_num(uint32_t n)
{
	for (struct fqp *q = F.qps; q; q = q->next)
		if (q->qp.qp_num == n)
			return q;
	return NULL;
}

/* Adds a completion; a channel event when the CQ is armed. Locked. */
static void push(struct ibv_cq *c, struct ibv_wc wc)
{
	struct fcq *f = (struct fcq *)(void *)c;
	uint8_t b = 1;

	assert_true(f->n < FQ);
	f->ring[(f->head + f->n++) % FQ] = wc;
	if (f->armed && c->channel) {
		f->armed = 0;
		F.events[F.nev++] = f;
		assert_int_equal(write(F.chan_wfd, &b, 1), 1);
	}
}

/* The MR holding [a, a + len) with key and (remote) access, or NULL. */
static struct fmr *mr_at(uint64_t a, uint64_t len, uint32_t key, int remote)
{
	for (struct fmr *m = F.mrs; m; m = m->next) {
		uint64_t b = (uint64_t)(uintptr_t)m->mr.addr;

		if ((remote ? m->mr.rkey : m->mr.lkey) == key && a >= b &&
		    a + len <= b + m->mr.length &&
		    (!remote || (m->access & IBV_ACCESS_REMOTE_WRITE)))
			return m;
	}
	return NULL;
}

/* Runs one WR of q: 0, or the IBV_WC_* status it fails with. Locked. */
static int execute(struct fqp *q, const struct ibv_send_wr *w)
{
	struct fqp *d = qp_by_num(q->dest);
	uint64_t ra = w->wr.rdma.remote_addr, len = 0;

	if (q->qp.state != IBV_QPS_RTS)
		return IBV_WC_WR_FLUSH_ERR;
	for (int i = 0; i < w->num_sge; i++)
		len += w->sg_list[i].length;
	if (!d || d->qp.state < IBV_QPS_RTR || !(d->access & IBV_ACCESS_REMOTE_WRITE) ||
	    !mr_at(ra, len, w->wr.rdma.rkey, 1))
		return IBV_WC_REM_ACCESS_ERR;
	for (int i = 0; i < w->num_sge; i++) {
		const struct ibv_sge *g = &w->sg_list[i];

		if (!(w->send_flags & IBV_SEND_INLINE) &&
		    !mr_at(g->addr, g->length, g->lkey, 0))
			return IBV_WC_LOC_PROT_ERR;
		memcpy((uint8_t *)(uintptr_t)ra, (const uint8_t *)(uintptr_t)g->addr,
		       g->length);
		ra += g->length;
	}
	if (w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
		if (d->recvs == 0)
			return IBV_WC_RNR_RETRY_EXC_ERR;
		d->recvs--;
		push(d->qp.recv_cq, (struct ibv_wc){
			.status = IBV_WC_SUCCESS, .opcode = IBV_WC_RECV_RDMA_WITH_IMM,
			.imm_data = w->imm_data, .qp_num = d->qp.qp_num,
			.wc_flags = IBV_WC_WITH_IMM });
	}
	return 0;
}

/* Completes one WR with status st (an error moves its QP to ERR).
 * Locked. */
static void complete(struct fqp *q, const struct ibv_send_wr *w, int st)
{
	if (st != 0)
		q->qp.state = IBV_QPS_ERR;
	if (st != 0 || (w->send_flags & IBV_SEND_SIGNALED))
		push(q->qp.send_cq, (struct ibv_wc){ .wr_id = w->wr_id,
			.status = (enum ibv_wc_status)st,
			.opcode = IBV_WC_RDMA_WRITE, .qp_num = q->qp.qp_num });
}

static int f_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
		       struct ibv_send_wr **bad)
{
	struct fqp *q = qp_of(qp);

	pthread_mutex_lock(&F.mu);
	for (; wr; wr = wr->next) {
		int st;

		if (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_ERR) {
			*bad = wr;
			pthread_mutex_unlock(&F.mu);
			return EINVAL;
		}
		F.posted++;
		if (F.hold && q->qp.state == IBV_QPS_RTS) {
			assert_true(F.nheld < FQ && wr->num_sge <= 32);
			F.held[F.nheld].qp = q;
			F.held[F.nheld].wr = *wr;
			memcpy(F.held[F.nheld].sge, wr->sg_list,
			       (size_t)wr->num_sge * sizeof *wr->sg_list);
			F.held[F.nheld].wr.sg_list = F.held[F.nheld].sge;
			F.nheld++;
			continue;
		}
		st = F.posted == F.fail_at ? IBV_WC_REM_ACCESS_ERR : execute(q, wr);
		complete(q, wr, st);
	}
	pthread_mutex_unlock(&F.mu);
	return 0;
}

/* Runs the held WRs (they complete now, or flushed if their QP failed). */
static void fake_release(void)
{
	pthread_mutex_lock(&F.mu);
	F.hold = 0;
	for (unsigned i = 0; i < F.nheld; i++)
		complete(F.held[i].qp, &F.held[i].wr,
			 execute(F.held[i].qp, &F.held[i].wr));
	F.nheld = 0;
	pthread_mutex_unlock(&F.mu);
}

static int f_poll_cq(struct ibv_cq *c, int n, struct ibv_wc *wc)
{
	struct fcq *f = (struct fcq *)(void *)c;
	int k = 0;

	pthread_mutex_lock(&F.mu);
	while (k < n && f->n) {
		wc[k++] = f->ring[f->head];
		f->head = (f->head + 1) % FQ;
		f->n--;
	}
	pthread_mutex_unlock(&F.mu);
	return k;
}

static int f_req_notify(struct ibv_cq *c, int solicited)
{
	(void)solicited;
	pthread_mutex_lock(&F.mu);
	((struct fcq *)(void *)c)->armed = 1;
	pthread_mutex_unlock(&F.mu);
	return 0;
}

static int f_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
		       struct ibv_recv_wr **bad)
{
	(void)bad;
	pthread_mutex_lock(&F.mu);
	for (; wr; wr = wr->next)
		qp_of(qp)->recvs++;
	pthread_mutex_unlock(&F.mu);
	return 0;
}

static struct ibv_device *one_dev[2];

static struct ibv_device **f_get_device_list(int *n)
{
	one_dev[0] = &F.dev;
	*n = 1;
	return one_dev;
}

static void f_free_device_list(struct ibv_device **l) { (void)l; }
static const char *f_device_name(struct ibv_device *d) { (void)d; return "fake0"; }

static struct ibv_context *f_open_device(struct ibv_device *d)
{
	(void)d;
	F.ctx.ops.post_send = f_post_send;
	F.ctx.ops.post_recv = f_post_recv;
	F.ctx.ops.poll_cq = f_poll_cq;
	F.ctx.ops.req_notify_cq = f_req_notify;
	return &F.ctx;
}

static int f_close_device(struct ibv_context *c) { (void)c; return 0; }

static int f_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
	(void)c;
	memset(a, 0, sizeof *a);
	a->phys_port_cnt = 1;
	a->max_qp_wr = 128; /* under the transport's 256: the clamp is used */
	a->max_sge = 4;
	return 0;
}

static int f_query_port(struct ibv_context *c, uint8_t port, void *attr)
{
	struct ibv_port_attr *a = attr;

	(void)c;
	(void)port;
	a->state = IBV_PORT_ACTIVE;
	a->active_mtu = IBV_MTU_1024;
	a->link_layer = IBV_LINK_LAYER_ETHERNET;
	a->max_msg_sz = 1u << 31;
	a->gid_tbl_len = 4;
	return 0;
}

static int f_query_gid(struct ibv_context *c, uint8_t port, int i,
		       union ibv_gid *g)
{
	(void)c;
	(void)port;
	memset(g, 0, sizeof *g);
	if (i == 1) { /* ::ffff:10.0.0.1 */
		g->raw[10] = g->raw[11] = 0xff;
		g->raw[12] = 10;
		g->raw[15] = 1;
	}
	return 0;
}

static struct ibv_pd fpd = { .context = &F.ctx };
static struct ibv_pd *f_alloc_pd(struct ibv_context *c) { (void)c; return &fpd; }
static int f_dealloc_pd(struct ibv_pd *p) { (void)p; return 0; }

static struct ibv_mr *f_reg_mr(struct ibv_pd *pd, void *addr, size_t len,
			       int access)
{
	struct fmr *m = calloc(1, sizeof *m);

	pthread_mutex_lock(&F.mu);
	m->mr = (struct ibv_mr){ .context = &F.ctx, .pd = pd, .addr = addr,
				 .length = len, .lkey = F.next_key++,
				 .rkey = F.next_key++ };
	m->access = access;
	m->next = F.mrs;
	F.mrs = m;
	pthread_mutex_unlock(&F.mu);
	return &m->mr;
}

static int f_dereg_mr(struct ibv_mr *mr)
{
	pthread_mutex_lock(&F.mu);
	for (struct fmr **p = &F.mrs; *p; p = &(*p)->next)
		if (&(*p)->mr == mr) {
			struct fmr *m = *p;

			*p = m->next;
			free(m);
			break;
		}
	pthread_mutex_unlock(&F.mu);
	return 0;
}

static struct ibv_comp_channel fch;

static struct ibv_comp_channel *f_create_channel(struct ibv_context *c)
{
	int p[2];

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	fch = (struct ibv_comp_channel){ .context = c, .fd = p[0] };
	F.chan_wfd = p[1];
	return &fch;
}

static int f_destroy_channel(struct ibv_comp_channel *ch)
{
	close(ch->fd);
	close(F.chan_wfd);
	return 0;
}

static struct ibv_cq *f_create_cq(struct ibv_context *c, int cqe, void *uctx,
				  struct ibv_comp_channel *ch, int vec)
{
	struct fcq *f = calloc(1, sizeof *f);

	(void)vec;
	assert_true(cqe > 0 && (unsigned)cqe <= FQ);
	f->cq = (struct ibv_cq){ .context = c, .channel = ch, .cq_context = uctx,
				 .cqe = cqe };
	return &f->cq;
}

static int f_destroy_cq(struct ibv_cq *c)
{
	pthread_mutex_lock(&F.mu);
	for (unsigned i = 0; i < F.nev;)
		if (&F.events[i]->cq == c)
			F.events[i] = F.events[--F.nev];
		else
			i++;
	pthread_mutex_unlock(&F.mu);
	free(c);
	return 0;
}

static int f_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq,
			  void **uctx)
{
	uint8_t b;

	if (read(ch->fd, &b, 1) != 1)
		return -1;
	pthread_mutex_lock(&F.mu);
	if (F.nev == 0) { /* its CQ was destroyed */
		pthread_mutex_unlock(&F.mu);
		errno = EAGAIN;
		return -1;
	}
	*cq = &F.events[0]->cq;
	memmove(F.events, F.events + 1, --F.nev * sizeof *F.events);
	*uctx = (*cq)->cq_context;
	pthread_mutex_unlock(&F.mu);
	return 0;
}

static void f_ack_cq_events(struct ibv_cq *c, unsigned n) { (void)c; (void)n; }

static struct ibv_qp *f_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
	struct fqp *q = calloc(1, sizeof *q);

	pthread_mutex_lock(&F.mu);
	q->qp = (struct ibv_qp){ .context = pd->context, .pd = pd,
				 .send_cq = a->send_cq, .recv_cq = a->recv_cq,
				 .qp_num = F.next_qpn++, .state = IBV_QPS_RESET,
				 .qp_type = a->qp_type };
	q->next = F.qps;
	F.qps = q;
	F.live_qps++;
	pthread_mutex_unlock(&F.mu);
	return &q->qp;
}

static int f_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	struct fqp *q = qp_of(qp);
	static const int next[] = { [IBV_QPS_RESET] = IBV_QPS_INIT,
				    [IBV_QPS_INIT] = IBV_QPS_RTR,
				    [IBV_QPS_RTR] = IBV_QPS_RTS };
	int rc = 0;

	pthread_mutex_lock(&F.mu);
	if (!(mask & IBV_QP_STATE)) {
		rc = EINVAL;
	} else if (a->qp_state == IBV_QPS_ERR) {
		q->qp.state = IBV_QPS_ERR;
		/* Held WRs of this QP complete flushed. */
		for (unsigned i = 0; i < F.nheld;)
			if (F.held[i].qp == q) {
				complete(q, &F.held[i].wr, IBV_WC_WR_FLUSH_ERR);
				memmove(&F.held[i], &F.held[i + 1],
					(F.nheld - i - 1) * sizeof F.held[0]);
				F.nheld--;
			} else {
				i++;
			}
	} else if (q->qp.state > IBV_QPS_RTR || (int)a->qp_state != next[q->qp.state]) {
		rc = EINVAL; /* only RESET -> INIT -> RTR -> RTS, in order */
	} else {
		if (a->qp_state == IBV_QPS_INIT)
			q->access = a->qp_access_flags;
		if (a->qp_state == IBV_QPS_RTR) {
			q->dest = a->dest_qp_num;
			if (!a->ah_attr.is_global || a->path_mtu != IBV_MTU_1024)
				rc = EINVAL; /* RoCE: GRH, the ports' MTU */
		}
		if (!rc)
			q->qp.state = a->qp_state;
	}
	pthread_mutex_unlock(&F.mu);
	return rc;
}

static int f_destroy_qp(struct ibv_qp *qp)
{
	pthread_mutex_lock(&F.mu);
	for (struct fqp **p = &F.qps; *p; p = &(*p)->next)
		if (&(*p)->qp == qp) {
			*p = (*p)->next;
			break;
		}
	F.live_qps--;
	pthread_mutex_unlock(&F.mu);
	free(qp_of(qp));
	return 0;
}

static const char *f_status(enum ibv_wc_status s)
{
	return s == IBV_WC_REM_ACCESS_ERR ? "remote access error"
	     : s == IBV_WC_WR_FLUSH_ERR ? "Work Request Flushed Error"
					  : "other error";
}

static const struct rdma_lib FAKE = {
	.get_device_list = f_get_device_list,
	.free_device_list = f_free_device_list,
	.get_device_name = f_device_name,
	.open_device = f_open_device,
	.close_device = f_close_device,
	.query_device = f_query_device,
	.query_port_compat = f_query_port,
	.query_gid = f_query_gid,
	.alloc_pd = f_alloc_pd,
	.dealloc_pd = f_dealloc_pd,
	.reg_mr = f_reg_mr,
	.dereg_mr = f_dereg_mr,
	.create_comp_channel = f_create_channel,
	.destroy_comp_channel = f_destroy_channel,
	.create_cq = f_create_cq,
	.destroy_cq = f_destroy_cq,
	.get_cq_event = f_get_cq_event,
	.ack_cq_events = f_ack_cq_events,
	.create_qp = f_create_qp,
	.modify_qp = f_modify_qp,
	.destroy_qp = f_destroy_qp,
	.wc_status_str = f_status,
};

/* ---- fixture: a decode and a prefill instance on the fake ------------- */

#define PSZ (1u << 20)

struct fx {
	char sp[96], dp[96];
	struct pool *src, *dst;
	struct xport *pre, *dec;
	uint32_t src_id, dst_id;
	uint8_t desc[KVW_MAX_DESC];
	size_t desclen;
	char err[256];
};

/* Polls cond (a stats field test) for up to 5 s: the exchange thread
 * counts on its own time. */
static int stats_reach(struct fx *f, uint64_t conns, uint64_t batches,
		       uint64_t live)
{
	struct xport_rdma_stats st;

	for (int i = 0; i < 5000; i++) {
		const struct timespec t = { 0, 1000000 }; /* a poll, not a sync */

		assert_int_equal(xport_rdma_stats(f->dec, &st), 0);
		if (st.conns == conns && st.batches == batches && st.live == live)
			return 1;
		nanosleep(&t, NULL);
	}
	print_message("stats: conns %llu batches %llu live %llu\n",
		      (unsigned long long)st.conns,
		      (unsigned long long)st.batches,
		      (unsigned long long)st.live);
	return 0;
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof *f);
	uint8_t own[KVW_MAX_DESC];
	size_t ownlen;
	uint32_t did;
	struct pool *rw = NULL;

	rdma_lib_override(&FAKE);
	snprintf(f->sp, sizeof f->sp, "/dev/shm/kvwire.trf-%d-s.pool", (int)getpid());
	snprintf(f->dp, sizeof f->dp, "/dev/shm/kvwire.trf-%d-d.pool", (int)getpid());
	assert_int_equal(pool_create(f->sp, PSZ, &rw, f->err, sizeof f->err), 0);
	for (uint32_t i = 0; i < PSZ; i++)
		((uint8_t *)pool_base(rw))[i] = (uint8_t)(i * 7 + i / 251);
	pool_close(&rw);
	assert_int_equal(pool_open(f->sp, 0, &f->src, f->err, sizeof f->err), 0);
	assert_int_equal(pool_create(f->dp, PSZ, &f->dst, f->err, sizeof f->err), 0);
	assert_int_equal(xport_open(xport_find("rdma"), &f->dec, f->err,
				    sizeof f->err), 0);
	assert_int_equal(xport_rdma_listen(f->dec, "127.0.0.1:0", f->err,
					   sizeof f->err), 0);
	assert_int_equal(xport_register(f->dec, f->dst, &did, f->desc,
					sizeof f->desc, &f->desclen, f->err,
					sizeof f->err), 0);
	assert_int_equal(xport_open(xport_find("rdma"), &f->pre, f->err,
				    sizeof f->err), 0);
	assert_int_equal(xport_register(f->pre, f->src, &f->src_id, own,
					sizeof own, &ownlen, f->err,
					sizeof f->err), 0);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	xport_close(&f->pre);
	xport_close(&f->dec);
	pool_close(&f->src);
	pool_close(&f->dst);
	unlink(f->sp);
	unlink(f->dp);
	assert_int_equal(F.live_qps, 0);
	assert_null(F.mrs);
	free(f);
	rdma_lib_override(NULL);
	return 0;
}

/* n scattered 1000-byte copies: source i*1300, destination a shuffle. */
static void copies(struct xport_copy *c, uint32_t n, uint32_t src,
		   uint32_t dst)
{
	for (uint32_t i = 0; i < n; i++)
		c[i] = (struct xport_copy){ (uint64_t)i * 1300,
					    (uint64_t)((i * 37) % n) * 1000,
					    1000, src, dst };
}

static void landed(const struct fx *f, const struct xport_copy *c, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		assert_memory_equal((uint8_t *)pool_base(f->dst) + c[i].dst_off,
				    (uint8_t *)pool_base(f->src) + c[i].src_off,
				    c[i].len);
}

static void test_batches_land_byte_exact_with_one_immediate_each(void **state)
{
	struct fx *f = *state;
	static struct xport_copy c[700];
	struct rdma_desc d;

	assert_int_equal(rdma_desc_decode(f->desc, f->desclen, &d, f->err,
					  sizeof f->err), 0);
	assert_int_not_equal(d.port, 0);
	assert_int_equal(d.gid[10], 0xff); /* the IPv4 GID was chosen */
	assert_int_equal(xport_connect(f->pre, f->desc, f->desclen, &f->dst_id,
				       f->err, sizeof f->err), 0);
	assert_true(stats_reach(f, 1, 0, 1));
	copies(c, 700, f->src_id, f->dst_id);
	xport_set_room(f->pre, 42);
	for (uint32_t i = 0; i < 700; i += 256) {
		uint32_t k = 700 - i < 256 ? 700 - i : 256;

		assert_int_equal(xport_write_batch(f->pre, c + i, k, f->err,
						   sizeof f->err), 0);
	}
	assert_int_equal(xport_wait(f->pre, -1, f->err, sizeof f->err), 0);
	assert_int_equal(xport_rdma_room_busy(f->pre, 42), 0);
	landed(f, c, 700);
	assert_true(stats_reach(f, 1, 3, 1));
	/* The same descriptor is the same remote. */
	{
		uint32_t again;

		assert_int_equal(xport_connect(f->pre, f->desc, f->desclen,
					       &again, f->err, sizeof f->err), 0);
		assert_int_equal(again, f->dst_id);
	}
}

static void test_a_bad_copy_or_secret_is_refused_before_anything_moves(void **state)
{
	struct fx *f = *state;
	struct xport_copy c[4];
	uint8_t bad[KVW_MAX_DESC];
	uint32_t id;
	uint64_t before;

	assert_int_equal(xport_connect(f->pre, f->desc, f->desclen, &f->dst_id,
				       f->err, sizeof f->err), 0);
	copies(c, 4, f->src_id, f->dst_id);
	c[3].dst_off = PSZ - 10; /* past the decode pool */
	before = F.posted;
	assert_int_equal(xport_write_batch(f->pre, c, 4, f->err, sizeof f->err),
			 KVW_ERANGE);
	c[3].dst_off = 0;
	c[3].src = 9;
	assert_int_equal(xport_write_batch(f->pre, c, 4, f->err, sizeof f->err),
			 KVW_EINVAL);
	assert_int_equal(F.posted, before);
	/* A descriptor with another secret: the exchange refuses it. */
	memcpy(bad, f->desc, f->desclen);
	bad[48] ^= 1;
	assert_int_equal(xport_connect(f->pre, bad, f->desclen, &id, f->err,
				       sizeof f->err), KVW_EPEER);
	assert_non_null(strstr(f->err, "wrong secret"));
	assert_true(stats_reach(f, 1, 0, 1));
}

static void test_wrs_in_flight_keep_their_room_busy_and_a_timed_wait_times_out(void **state)
{
	struct fx *f = *state;
	struct xport_copy c[300];

	assert_int_equal(xport_connect(f->pre, f->desc, f->desclen, &f->dst_id,
				       f->err, sizeof f->err), 0);
	copies(c, 300, f->src_id, f->dst_id);
	F.hold = 1;
	xport_set_room(f->pre, 7);
	/* 100 scattered copies: 100 WRs held in flight (the queue holds 128). */
	assert_int_equal(xport_write_batch(f->pre, c, 100, f->err, sizeof f->err),
			 0);
	assert_int_equal(xport_rdma_room_busy(f->pre, 7), 100);
	assert_int_equal(xport_rdma_room_busy(f->pre, 8), 0);
	assert_int_equal(xport_wait(f->pre, 30, f->err, sizeof f->err),
			 KVW_ETIMEDOUT);
	fake_release();
	assert_int_equal(xport_wait(f->pre, -1, f->err, sizeof f->err), 0);
	assert_int_equal(xport_rdma_room_busy(f->pre, 7), 0);
	/* Without holding: a batch over the queue's depth reaps as it goes. */
	assert_int_equal(xport_write_batch(f->pre, c, 300, f->err, sizeof f->err),
			 0);
	assert_int_equal(xport_wait(f->pre, -1, f->err, sizeof f->err), 0);
	landed(f, c, 300);
	assert_true(stats_reach(f, 1, 2, 1));
}

static void test_a_failed_wr_fails_the_wait_with_the_status_text_and_drains(void **state)
{
	struct fx *f = *state;
	struct xport_copy c[50];
	uint32_t id;

	assert_int_equal(xport_connect(f->pre, f->desc, f->desclen, &f->dst_id,
				       f->err, sizeof f->err), 0);
	copies(c, 50, f->src_id, f->dst_id);
	xport_set_room(f->pre, 99);
	F.hold = 1;
	assert_int_equal(xport_write_batch(f->pre, c, 50, f->err, sizeof f->err),
			 0);
	/* WR 10 of them fails at the remote; the rest are flushed. */
	F.fail_at = F.posted - 40;
	pthread_mutex_lock(&F.mu);
	F.hold = 0;
	for (unsigned i = 0; i < F.nheld; i++) {
		int st = i == 10 ? IBV_WC_REM_ACCESS_ERR
				 : execute(F.held[i].qp, &F.held[i].wr);

		complete(F.held[i].qp, &F.held[i].wr, st);
	}
	F.nheld = 0;
	pthread_mutex_unlock(&F.mu);
	F.fail_at = 0;
	assert_int_equal(xport_wait(f->pre, -1, f->err, sizeof f->err), KVW_ESYS);
	assert_non_null(strstr(f->err, "remote access error"));
	assert_non_null(strstr(f->err, "room 99"));
	assert_int_equal(xport_rdma_room_busy(f->pre, 99), 0);
	/* The remote is broken until disconnected; the decode keeps its QP
	 * until the connection closes. */
	assert_int_equal(xport_write_batch(f->pre, c, 1, f->err, sizeof f->err),
			 KVW_ESYS);
	assert_non_null(strstr(f->err, "disconnect"));
	assert_int_equal(xport_wait(f->pre, -1, f->err, sizeof f->err), 0);
	xport_disconnect(f->pre, f->dst_id);
	assert_true(stats_reach(f, 1, 0, 0));
	assert_int_equal(xport_connect(f->pre, f->desc, f->desclen, &id, f->err,
				       sizeof f->err), 0);
	assert_true(stats_reach(f, 2, 0, 1));
	assert_int_equal(xport_write_batch(f->pre, c, 50, f->err, sizeof f->err),
			 0);
	assert_int_equal(xport_wait(f->pre, -1, f->err, sizeof f->err), 0);
	landed(f, c, 50);
	assert_true(stats_reach(f, 2, 1, 1));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_batches_land_byte_exact_with_one_immediate_each, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_bad_copy_or_secret_is_refused_before_anything_moves, setup, teardown),
		cmocka_unit_test_setup_teardown(test_wrs_in_flight_keep_their_room_busy_and_a_timed_wait_times_out, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_failed_wr_fails_the_wait_with_the_status_text_and_drains, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
