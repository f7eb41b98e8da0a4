/*
 * rdma_qp.h - the local end of the rdma transport: which device, port and
 * GID an instance uses, and bringing a reliable-connected queue pair up
 * (RESET -> INIT -> RTR -> RTS) toward a peer.
 *
 * The choice, made the same way by probe and open, from the environment
 * (kv-sender, kv-receiver and kv-bench set it from --rdma-device and
 * --rdma-gid-index, so a sender's worker processes inherit it):
 *   KVW_RDMA_DEVICE     a device name (ibv_devices); default: the first
 *                       device, in the library's order, with an active port
 *   KVW_RDMA_GID_INDEX  the GID table index; default: on Ethernet (RoCE)
 *                       the first RoCE v2 GID holding an IPv4 address, else
 *                       the first RoCE v2 GID, else the first non-zero
 *                       one; on InfiniBand the first (0)
 * The port is the device's first active one.
 */
#ifndef KVW_RDMA_QP_H
#define KVW_RDMA_QP_H

#include <stddef.h>
#include <stdint.h>

#include "rdma_lib.h"

/* One opened device with its chosen port and GID, and a protection
 * domain. */
struct rdma_dev {
	const struct rdma_lib *lib;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	char name[64];
	uint8_t port;
	int gid_index;
	uint8_t gid[16];
	uint16_t lid;
	uint8_t mtu;       /* the port's active MTU (enum ibv_mtu) */
	uint8_t link;      /* IBV_LINK_LAYER_* */
	uint32_t max_qp_wr, max_sge;
	uint64_t max_msg;  /* bytes per message (port max_msg_sz) */
};

/* What the other end of a queue pair tells us (descriptor and exchange). */
struct rdma_peer {
	uint32_t qpn;      /* 24 bits */
	uint32_t psn;      /* 24 bits: its first send sequence number */
	uint16_t lid;
	uint8_t gid[16];
	uint8_t mtu;       /* its port's active MTU */
	uint8_t link;
};

/* Opens the chosen device (see the top). 0, KVW_ENODEV with
 * "rdma: not available: <why>" (no library, no device, no such device, no
 * active port), KVW_EINVAL (a bad KVW_RDMA_GID_INDEX) or KVW_ESYS. On
 * error *d holds nothing. */
int rdma_dev_open(struct rdma_dev *d, char *err, size_t errlen);
void rdma_dev_close(struct rdma_dev *d);

/* The queue pair's shape. */
struct rdma_qp_cfg {
	struct ibv_cq *send_cq, *recv_cq;
	uint32_t send_wr, recv_wr; /* clamped to the device's max_qp_wr */
	uint32_t max_sge;          /* send entries; clamped to max_sge */
	uint32_t max_inline;       /* asked for; 0 if the provider refuses */
	int remote_write;          /* the peer may write our memory */
};

/* Creates an RC queue pair and moves it to INIT. *got gets the capacities
 * the provider granted. 0 or KVW_ESYS. */
int rdma_qp_create(struct rdma_dev *d, const struct rdma_qp_cfg *cfg,
		   struct ibv_qp **qp, struct ibv_qp_cap *got, char *err,
		   size_t errlen);

/* INIT -> RTR -> RTS toward p; my_psn is the first PSN we send with. The
 * path MTU is the smaller of the two ports'. 0, KVW_EINVAL (the peer's
 * link layer is not ours) or KVW_ESYS. */
int rdma_qp_connect(struct rdma_dev *d, struct ibv_qp *qp, uint32_t my_psn,
		    const struct rdma_peer *p, char *err, size_t errlen);

/* Moves qp to the error state: every outstanding WR completes flushed. 0
 * or an errno. */
int rdma_qp_error(struct rdma_dev *d, struct ibv_qp *qp);

/* The local end of qp as its peer must see it. */
void rdma_qp_self(const struct rdma_dev *d, const struct ibv_qp *qp,
		  uint32_t psn, struct rdma_peer *out);

/* A fresh random 24-bit PSN. */
uint32_t rdma_psn(void);

#endif
