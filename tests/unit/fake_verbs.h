/*
 * fake_verbs.h - a fake verbs device in the test's own process, installed
 * with rdma_lib_override(&FAKE) (or a copy of it with verbs taken out):
 * every library verb is a function here, and the fake context's
 * post_send, poll_cq, post_recv and req_notify_cq execute RDMA WRITEs as
 * memcpy into the registered remote region (checking its rkey, bounds and
 * remote-write access; a local scatter entry against its lkey), deliver
 * immediates to the peer queue pair's receive CQ and its completion
 * channel, and complete signalled WRs in order. ibv_reg_dmabuf_mr maps the
 * fd it is given (at offset, length bytes) and serves the region's iova
 * range through that mapping, so bytes written through a dmabuf region
 * really reach the memory behind the fd. F.device_mem: ibv_reg_mr of an
 * address it says is device memory fails with EFAULT (no nvidia-peermem);
 * F.dmabuf_errno: ibv_reg_dmabuf_mr fails with it.
 * Included by one test file each (static functions).
 */
#ifndef KVW_UNIT_FAKE_VERBS_H
#define KVW_UNIT_FAKE_VERBS_H

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "xport/rdma/rdma_lib.h"

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
	uint8_t *map;  /* dmabuf: the fd's pages, standing for mr.addr.. */
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
	/* Set: ibv_reg_mr refuses (EFAULT) a range it says is device memory,
	 * as without nvidia-peermem. */
	int (*device_mem)(uint64_t addr);
	int dmabuf_errno;  /* reg_dmabuf_mr fails with it (0: works) */
	unsigned dmabuf_regs, plain_regs; /* registrations that succeeded */
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

/* Where the HCA reaches address a of region m: through the dmabuf's
 * mapping, or a itself. */
static uint8_t *fake_at(const struct fmr *m, uint64_t a)
{
	return m->map ? m->map + (a - (uint64_t)(uintptr_t)m->mr.addr)
		      : (uint8_t *)(uintptr_t)a;
}

/* Runs one WR of q: 0, or the IBV_WC_* status it fails with. Locked. */
static int execute(struct fqp *q, const struct ibv_send_wr *w)
{
	struct fqp *d = qp_by_num(q->dest);
	uint64_t ra = w->wr.rdma.remote_addr, len = 0;
	const struct fmr *rm;
	uint8_t *to;

	if (q->qp.state != IBV_QPS_RTS)
		return IBV_WC_WR_FLUSH_ERR;
	for (int i = 0; i < w->num_sge; i++)
		len += w->sg_list[i].length;
	if (!d || d->qp.state < IBV_QPS_RTR || !(d->access & IBV_ACCESS_REMOTE_WRITE) ||
	    !(rm = mr_at(ra, len, w->wr.rdma.rkey, 1)))
		return IBV_WC_REM_ACCESS_ERR;
	to = fake_at(rm, ra);
	for (int i = 0; i < w->num_sge; i++) {
		const struct ibv_sge *g = &w->sg_list[i];
		const struct fmr *lm = NULL;

		if (!(w->send_flags & IBV_SEND_INLINE) &&
		    !(lm = mr_at(g->addr, g->length, g->lkey, 0)))
			return IBV_WC_LOC_PROT_ERR;
		memcpy(to, lm ? fake_at(lm, g->addr)
			      : (const uint8_t *)(uintptr_t)g->addr,
		       g->length);
		to += g->length;
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
static inline void fake_release(void)
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

/* A new region over [addr, + len) (map: a dmabuf's pages, or NULL). */
static struct ibv_mr *fake_mr_new(struct ibv_pd *pd, void *addr, size_t len,
				  int access, uint8_t *map)
{
	struct fmr *m = calloc(1, sizeof *m);

	pthread_mutex_lock(&F.mu);
	*(map ? &F.dmabuf_regs : &F.plain_regs) += 1;
	m->mr = (struct ibv_mr){ .context = &F.ctx, .pd = pd, .addr = addr,
				 .length = len, .lkey = F.next_key++,
				 .rkey = F.next_key++ };
	m->access = access;
	m->map = map;
	m->next = F.mrs;
	F.mrs = m;
	pthread_mutex_unlock(&F.mu);
	return &m->mr;
}

static struct ibv_mr *f_reg_mr(struct ibv_pd *pd, void *addr, size_t len,
			       int access)
{
	uint64_t a = (uint64_t)(uintptr_t)addr;

	(void)len;
	if (F.device_mem && F.device_mem(a)) {
		errno = EFAULT; /* what ib_umem_get says of device memory */
		return NULL;
	}
	return fake_mr_new(pd, addr, len, access, NULL);
}

/* The fd's pages [offset, + len) stand for [iova, + len). */
static struct ibv_mr *f_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
				      size_t len, uint64_t iova, int fd,
				      int access)
{
	void *map;

	if (F.dmabuf_errno) {
		errno = F.dmabuf_errno;
		return NULL;
	}
	map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		   (off_t)offset);
	if (map == MAP_FAILED)
		return NULL;
	return fake_mr_new(pd, (void *)(uintptr_t)iova, len, access, map);
}

static int f_dereg_mr(struct ibv_mr *mr)
{
	pthread_mutex_lock(&F.mu);
	for (struct fmr **p = &F.mrs; *p; p = &(*p)->next)
		if (&(*p)->mr == mr) {
			struct fmr *m = *p;

			*p = m->next;
			if (m->map)
				munmap(m->map, m->mr.length);
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
	.reg_dmabuf_mr = f_reg_dmabuf_mr,
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

#endif
