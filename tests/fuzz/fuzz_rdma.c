/*
 * fuzz_rdma.c - libFuzzer target for the rdma transport's untrusted bytes:
 * the REGISTER descriptor (lib/xport/rdma/rdma_desc.h) and the queue pair
 * exchange's hello and reply (lib/xport/rdma/rdma_cm.h). Byte 0 picks which;
 * the rest is copied into an exact-size heap buffer so ASan sees any read
 * past it. A descriptor or hello that decodes must encode back to the very
 * same bytes, and its fields must be in range; otherwise the target
 * aborts.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xport/rdma/rdma_cm.h"
#include "xport/rdma/rdma_desc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void desc(const uint8_t *p, size_t n)
{
	struct rdma_desc d;
	uint8_t out[RDMA_DESC_FIXED + RDMA_HOST_MAX];
	size_t len = 0;

	if (rdma_desc_decode(p, n, &d, NULL, 0) != 0)
		return;
	if (d.ib_port == 0 || d.mtu < 1 || d.mtu > 5 || d.size == 0 ||
	    d.addr + d.size < d.addr || strlen(d.host) == 0)
		abort();
	if (rdma_desc_encode(&d, out, sizeof out, &len, NULL, 0) != 0 ||
	    len != n || memcmp(out, p, n) != 0)
		abort();
}

static void hello(const uint8_t *p, size_t n)
{
	struct rdma_peer peer;
	uint8_t sec[16], out[RCM_HELLO_LEN];

	if (rcm_hello_decode(p, n, sec, &peer) != 0)
		return;
	if (peer.qpn < 2 || peer.qpn > 0xffffff || peer.psn > 0xffffff)
		abort();
	rcm_hello_encode(out, sec, &peer);
	if (n != RCM_HELLO_LEN || memcmp(out, p, n) != 0)
		abort();
}

static void reply(const uint8_t *p, size_t n)
{
	uint32_t st, qpn, psn;

	if (rcm_reply_decode(p, n, &st, &qpn, &psn) == 0 && st == RCM_OK &&
	    (qpn < 2 || qpn > 0xffffff || psn > 0xffffff))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t *buf;

	if (size == 0)
		return 0;
	buf = malloc(size - 1 ? size - 1 : 1);
	if (!buf)
		return 0;
	memcpy(buf, data + 1, size - 1);
	switch (data[0] % 3) {
	case 0: desc(buf, size - 1); break;
	case 1: hello(buf, size - 1); break;
	default: reply(buf, size - 1); break;
	}
	free(buf);
	return 0;
}
