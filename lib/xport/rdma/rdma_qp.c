/*
 * rdma_qp.c - device, port and GID choice; queue pair bring-up (rdma_qp.h).
 */
#include "rdma_qp.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "base/kvw.h"

#define GID_SCAN_MAX 256 /* GID table entries looked at, at most */

static const uint8_t zero_gid[16];

/* KVW_RDMA_GID_INDEX: -1 when unset; KVW_EINVAL when not an integer in
 * 0..65535. */
static int env_gid_index(int *out)
{
	const char *s = getenv("KVW_RDMA_GID_INDEX");
	char *end;
	long v;

	*out = -1;
	if (!s || !*s)
		return 0;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < 0 || v > 65535)
		return KVW_EINVAL;
	*out = (int)v;
	return 0;
}

/* 1 when GID idx of the port is RoCE v2, 0 when another type, -1 when
 * its type cannot be read. */
static int gid_is_v2(const struct rdma_dev *d, int idx)
{
	char path[256], buf[32] = "";
	FILE *f;

	if (d->lib->query_gid_ex) {
		struct ibv_gid_entry e;

		if (d->lib->query_gid_ex(d->ctx, d->port, (uint32_t)idx, &e, 0,
					 sizeof e) != 0)
			return -1;
		return e.gid_type == IBV_GID_TYPE_ROCE_V2;
	}
	snprintf(path, sizeof path,
		 "/sys/class/infiniband/%s/ports/%u/gid_attrs/types/%d",
		 d->name, d->port, idx);
	f = fopen(path, "re");
	if (!f)
		return -1;
	if (!fgets(buf, sizeof buf, f))
		buf[0] = '\0';
	fclose(f);
	return strncmp(buf, "RoCE v2", 7) == 0;
}

/* 1 for an IPv4-mapped GID (::ffff: then the IPv4 address). */
static int gid_is_v4(const uint8_t *g)
{
	static const uint8_t pre[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

	return memcmp(g, pre, 12) == 0;
}

/* Chooses the GID (see rdma_qp.h) of d's port: 0 or KVW_EINVAL. */
static int pick_gid(struct rdma_dev *d, int want, int tbl_len, char *err,
		    size_t errlen)
{
	union ibv_gid g;
	int best = -1, score = 0;

	if (want >= 0) {
		if (want >= tbl_len ||
		    d->lib->query_gid(d->ctx, d->port, want, &g) != 0 ||
		    !memcmp(g.raw, zero_gid, 16))
			return kvw_errf(err, errlen, KVW_EINVAL,
					"rdma: GID index %d of %s port %u is "
					"empty or past its table (%d entries)",
					want, d->name, d->port, tbl_len);
		d->gid_index = want;
		memcpy(d->gid, g.raw, 16);
		return 0;
	}
	/* Scores: any non-zero GID 1; on Ethernet RoCE v2 3, and 4 when
	 * it is an IPv4 address (routable without a link-local scope). */
	for (int i = 0; i < tbl_len && i < GID_SCAN_MAX && score < 4; i++) {
		int sc = 1;

		if (d->lib->query_gid(d->ctx, d->port, i, &g) != 0 ||
		    !memcmp(g.raw, zero_gid, 16))
			continue;
		if (d->link == IBV_LINK_LAYER_ETHERNET && gid_is_v2(d, i) == 1)
			sc = gid_is_v4(g.raw) ? 4 : 3;
		if (sc > score) {
			score = sc;
			best = i;
			memcpy(d->gid, g.raw, 16);
		}
		if (d->link != IBV_LINK_LAYER_ETHERNET)
			break; /* InfiniBand: the first (index 0) */
	}
	if (best < 0) {
		if (d->link == IBV_LINK_LAYER_ETHERNET)
			return kvw_errf(err, errlen, KVW_EINVAL,
					"rdma: %s port %u has no GID (RoCE "
					"needs an address on its netdev)",
					d->name, d->port);
		best = 0; /* InfiniBand routes by LID; GID unused */
	}
	d->gid_index = best;
	return 0;
}

/* Opens dev and finds its first active port: 1 found (d->ctx open, port
 * fields set), 0 none, -1 the device would not open (why set). */
static int try_device(struct rdma_dev *d, struct ibv_device *dev, char *why,
		      size_t whylen)
{
	struct ibv_device_attr da;
	struct ibv_port_attr pa;

	snprintf(d->name, sizeof d->name, "%s", d->lib->get_device_name(dev));
	d->ctx = d->lib->open_device(dev);
	if (!d->ctx) {
		snprintf(why, whylen, "unable to open %s: %s", d->name,
			 strerror(errno));
		return -1;
	}
	if (d->lib->query_device(d->ctx, &da) == 0) {
		for (unsigned p = 1; p <= da.phys_port_cnt; p++) {
			if (rdma_query_port(d->lib, d->ctx, (uint8_t)p, &pa) ||
			    pa.state != IBV_PORT_ACTIVE)
				continue;
			d->port = (uint8_t)p;
			d->lid = pa.lid;
			d->mtu = (uint8_t)pa.active_mtu;
			d->link = pa.link_layer == IBV_LINK_LAYER_ETHERNET
					  ? IBV_LINK_LAYER_ETHERNET
					  : IBV_LINK_LAYER_INFINIBAND;
			d->max_msg = pa.max_msg_sz ? pa.max_msg_sz : 1u << 30;
			d->max_qp_wr = da.max_qp_wr > 0 ? (uint32_t)da.max_qp_wr : 1;
			d->max_sge = da.max_sge > 0 ? (uint32_t)da.max_sge : 1;
			return 1;
		}
	}
	snprintf(why, whylen, "%s has no active port", d->name);
	d->lib->close_device(d->ctx);
	d->ctx = NULL;
	return 0;
}

int rdma_dev_open(struct rdma_dev *d, char *err, size_t errlen)
{
	const char *want = getenv("KVW_RDMA_DEVICE");
	struct ibv_device **list = NULL;
	char why[200] = "";
	int n = 0, gid, rc, found = 0;

	memset(d, 0, sizeof *d);
	d->lib = rdma_lib_get(why, sizeof why);
	if (!d->lib)
		return kvw_errf(err, errlen, KVW_ENODEV,
				"rdma: not available: %s", why);
	if (env_gid_index(&gid) < 0)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"rdma: KVW_RDMA_GID_INDEX (--rdma-gid-index): "
				"want an integer in 0..65535");
	list = d->lib->get_device_list(&n);
	if (!list)
		return kvw_errf(err, errlen, KVW_ENODEV,
				"rdma: not available: no RDMA devices "
				"(ibv_get_device_list failed: %s)",
				strerror(errno));
	if (n <= 0) {
		rc = kvw_errf(err, errlen, KVW_ENODEV,
			      "rdma: not available: no RDMA devices "
			      "(ibv_get_device_list found 0)");
		goto fail_list;
	}
	for (int i = 0; i < n && !found; i++) {
		if (want && *want &&
		    strcmp(d->lib->get_device_name(list[i]), want) != 0)
			continue;
		found = try_device(d, list[i], why, sizeof why) == 1;
		if (want && *want && !found)
			break;
	}
	if (!found) {
		if (want && *want && !why[0])
			snprintf(why, sizeof why, "no device named %s", want);
		rc = kvw_errf(err, errlen, KVW_ENODEV,
			      "rdma: not available: %s (%d device(s), first "
			      "%s)", why, n, d->lib->get_device_name(list[0]));
		goto fail_list;
	}
	d->pd = d->lib->alloc_pd(d->ctx);
	if (!d->pd) {
		rc = kvw_errf(err, errlen, KVW_ESYS,
			      "rdma: unable to allocate a protection domain "
			      "on %s: %s", d->name, strerror(errno));
		goto fail_ctx;
	}
	{
		struct ibv_port_attr pa;

		rc = rdma_query_port(d->lib, d->ctx, d->port, &pa);
		if (rc == 0)
			rc = pick_gid(d, gid, pa.gid_tbl_len, err, errlen);
		else
			rc = kvw_errf(err, errlen, KVW_ESYS,
				      "rdma: query of %s port %u: %s", d->name,
				      d->port, strerror(rc));
	}
	if (rc)
		goto fail_pd;
	d->lib->free_device_list(list); /* allowed once the device is open */
	return 0;

fail_pd:
	d->lib->dealloc_pd(d->pd);
fail_ctx:
	d->lib->close_device(d->ctx);
fail_list:
	d->lib->free_device_list(list);
	memset(d, 0, sizeof *d);
	return rc;
}

void rdma_dev_close(struct rdma_dev *d)
{
	if (d->pd)
		d->lib->dealloc_pd(d->pd);
	if (d->ctx)
		d->lib->close_device(d->ctx);
	memset(d, 0, sizeof *d);
}

int rdma_qp_create(struct rdma_dev *d, const struct rdma_qp_cfg *cfg,
		   struct ibv_qp **qp, struct ibv_qp_cap *got, char *err,
		   size_t errlen)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cfg->send_cq,
		.recv_cq = cfg->recv_cq,
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 0,
		.cap = {
			.max_send_wr = cfg->send_wr < d->max_qp_wr ? cfg->send_wr
								   : d->max_qp_wr,
			.max_recv_wr = cfg->recv_wr < d->max_qp_wr ? cfg->recv_wr
								   : d->max_qp_wr,
			.max_send_sge = cfg->max_sge < d->max_sge ? cfg->max_sge
								  : d->max_sge,
			.max_recv_sge = 1,
			.max_inline_data = cfg->max_inline,
		},
	};
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = d->port,
		.qp_access_flags = cfg->remote_write ? IBV_ACCESS_REMOTE_WRITE : 0,
	};
	struct ibv_qp_init_attr ia0 = ia;
	int rc;

	*qp = d->lib->create_qp(d->pd, &ia);
	if (!*qp && ia0.cap.max_inline_data) {
		/* Some providers refuse inline data, or this much of it. */
		ia = ia0;
		ia.cap.max_inline_data = 0;
		*qp = d->lib->create_qp(d->pd, &ia);
	}
	if (!*qp)
		return kvw_errf(err, errlen, KVW_ESYS,
				"rdma: unable to create a queue pair on %s: %s",
				d->name, strerror(errno));
	rc = d->lib->modify_qp(*qp, &a,
			       IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				       IBV_QP_ACCESS_FLAGS);
	if (rc) {
		d->lib->destroy_qp(*qp);
		*qp = NULL;
		return kvw_errf(err, errlen, KVW_ESYS,
				"rdma: queue pair to INIT on %s: %s", d->name,
				strerror(rc));
	}
	*got = ia.cap;
	return 0;
}

int rdma_qp_connect(struct rdma_dev *d, struct ibv_qp *qp, uint32_t my_psn,
		    const struct rdma_peer *p, char *err, size_t errlen)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = (enum ibv_mtu)(p->mtu < d->mtu ? p->mtu : d->mtu),
		.dest_qp_num = p->qpn & 0xffffff,
		.rq_psn = p->psn & 0xffffff,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12, /* 0.64 ms before an RNR retry */
		.ah_attr = {
			.dlid = p->lid,
			.sl = 0,
			.src_path_bits = 0,
			.port_num = d->port,
		},
	};
	int rc;

	if (p->link != d->link)
		return kvw_errf(err, errlen, KVW_EINVAL,
				"rdma: the peer's port is %s, %s port %u is %s",
				p->link == IBV_LINK_LAYER_ETHERNET ? "Ethernet"
								   : "InfiniBand",
				d->name, d->port,
				d->link == IBV_LINK_LAYER_ETHERNET ? "Ethernet"
								   : "InfiniBand");
	/* RoCE always routes by GID; InfiniBand by LID (a peer without one
	 * is reached through the GRH). */
	if (d->link == IBV_LINK_LAYER_ETHERNET || p->lid == 0) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, p->gid, 16);
		a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
		a.ah_attr.grh.hop_limit = 64;
	}
	rc = d->lib->modify_qp(qp, &a,
			       IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				       IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				       IBV_QP_MAX_DEST_RD_ATOMIC |
				       IBV_QP_MIN_RNR_TIMER);
	if (rc)
		return kvw_errf(err, errlen, KVW_ESYS,
				"rdma: queue pair to RTR (peer qpn %u): %s",
				p->qpn, strerror(rc));
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;  /* 4.096 us * 2^14: 67 ms per try */
	a.retry_cnt = 7;
	a.rnr_retry = 7; /* the decode reposts receives; a stall is bounded
			  * by the transport's own deadline */
	a.sq_psn = my_psn & 0xffffff;
	a.max_rd_atomic = 1;
	rc = d->lib->modify_qp(qp, &a,
			       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				       IBV_QP_MAX_QP_RD_ATOMIC);
	if (rc)
		return kvw_errf(err, errlen, KVW_ESYS,
				"rdma: queue pair to RTS: %s", strerror(rc));
	return 0;
}

int rdma_qp_error(struct rdma_dev *d, struct ibv_qp *qp)
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_ERR };

	return d->lib->modify_qp(qp, &a, IBV_QP_STATE);
}

void rdma_qp_self(const struct rdma_dev *d, const struct ibv_qp *qp,
		  uint32_t psn, struct rdma_peer *out)
{
	memset(out, 0, sizeof *out);
	out->qpn = qp->qp_num;
	out->psn = psn & 0xffffff;
	out->lid = d->lid;
	memcpy(out->gid, d->gid, 16);
	out->mtu = d->mtu;
	out->link = d->link;
}

uint32_t rdma_psn(void)
{
	uint32_t v = 0;

	if (getrandom(&v, sizeof v, 0) != sizeof v)
		v = (uint32_t)(uintptr_t)&v ^ 0x5a5a5a;
	return v & 0xffffff;
}
