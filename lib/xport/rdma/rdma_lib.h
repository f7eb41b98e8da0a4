/*
 * rdma_lib.h - libibverbs, loaded at run time (dlopen, once per process), so
 * kvwire binaries start on machines without it. Every verb the rdma
 * transport calls that is a library function is a pointer here; the
 * data-path verbs (post_send, post_recv, poll_cq, req_notify_cq) are inline
 * calls through the device context in <infiniband/verbs.h> and need no
 * lookup. verbs.h is included for its types only; nothing links
 * libibverbs.
 */
#ifndef KVW_RDMA_LIB_H
#define KVW_RDMA_LIB_H

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

struct rdma_lib {
	struct ibv_device **(*get_device_list)(int *n);
	void (*free_device_list)(struct ibv_device **list);
	const char *(*get_device_name)(struct ibv_device *dev);
	struct ibv_context *(*open_device)(struct ibv_device *dev);
	int (*close_device)(struct ibv_context *ctx);
	int (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *a);
	/* The exported (compat) ibv_query_port; use rdma_query_port. */
	int (*query_port_compat)(struct ibv_context *ctx, uint8_t port,
				 void *attr);
	int (*query_gid)(struct ibv_context *ctx, uint8_t port, int index,
			 union ibv_gid *gid);
	/* Optional (rdma-core 32 and later): NULL when the library lacks
	 * it; the GID's type is then read from sysfs. */
	int (*query_gid_ex)(struct ibv_context *ctx, uint32_t port,
			    uint32_t index, struct ibv_gid_entry *e,
			    uint32_t flags, size_t entry_size);
	struct ibv_pd *(*alloc_pd)(struct ibv_context *ctx);
	int (*dealloc_pd)(struct ibv_pd *pd);
	struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len,
				 int access);
	int (*dereg_mr)(struct ibv_mr *mr);
	/* Optional (rdma-core 34 and later): NULL when the library lacks it.
	 * Registers device memory exported as a dmabuf (rdma_gpu.h). */
	struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset,
					size_t len, uint64_t iova, int fd,
					int access);
	struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *c);
	int (*destroy_comp_channel)(struct ibv_comp_channel *ch);
	struct ibv_cq *(*create_cq)(struct ibv_context *ctx, int cqe,
				    void *cq_context,
				    struct ibv_comp_channel *ch, int vector);
	int (*destroy_cq)(struct ibv_cq *cq);
	int (*get_cq_event)(struct ibv_comp_channel *ch, struct ibv_cq **cq,
			    void **cq_context);
	void (*ack_cq_events)(struct ibv_cq *cq, unsigned int n);
	struct ibv_qp *(*create_qp)(struct ibv_pd *pd,
				    struct ibv_qp_init_attr *attr);
	int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr,
			 int mask);
	int (*destroy_qp)(struct ibv_qp *qp);
	const char *(*wc_status_str)(enum ibv_wc_status status);
};

/* The library: loaded on the first call, kept for the process's life.
 * NULL when it cannot be used, with why[whylen] saying so ("libibverbs.so.1
 * not found (...)", "libibverbs.so.1 lacks ibv_create_qp"). Thread-safe. */
const struct rdma_lib *rdma_lib_get(char *why, size_t whylen);

/* TEST ONLY: from now on rdma_lib_get returns l in this process (NULL: the
 * real library again), so a unit test can drive the transport over a fake
 * device (tests/unit/test_rdma_fake.c). Never called by kvwire itself. */
void rdma_lib_override(const struct rdma_lib *l);

/* ibv_query_port through the context's extended op when the provider has
 * one, else the exported compat call; *a is zeroed first. 0 or an errno. */
int rdma_query_port(const struct rdma_lib *l, struct ibv_context *ctx,
		    uint8_t port, struct ibv_port_attr *a);

/* "remote access error (status 10)": the library's text for a completion
 * status, or "status N" when l is NULL. Static storage, or buf. */
const char *rdma_status_text(const struct rdma_lib *l, int status, char *buf,
			     size_t len);

#endif
