/*
 * api_hold.c - the commands an engine handle holds back (api_hold.h). An
 * engine that gives one command at a time wakes its ZMQ I/O thread and
 * the control process once per command; held and sent back to back, a
 * step's commands cross in one wake-up of each (bench/README.md).
 */
#include "api_hold.h"

#include <errno.h>
#include <string.h>
#include <zmq.h>

#include "base/kvw.h"
#include "base/le.h"
#include "wire/wire.h"

int api_hold_put(struct api_hold *h, const struct frame_msg *m, char *err,
		 size_t errlen)
{
	struct frame_out out;
	size_t need = 4;
	uint8_t *p;
	int rc = frame_encode(m, &out, err, errlen);

	if (rc)
		return rc;
	for (size_t i = 0; i < out.nparts; i++)
		need += 4 + out.parts[i].len;
	if (byteq_reserve(&h->q, need) < 0)
		return kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	p = h->q.p + h->q.len;
	le_put(p, out.nparts, 4);
	p += 4;
	for (size_t i = 0; i < out.nparts; i++) {
		le_put(p, out.parts[i].len, 4);
		memcpy(p + 4, out.parts[i].data, out.parts[i].len);
		p += 4 + out.parts[i].len;
	}
	h->q.len += need;
	h->n++;
	return 0;
}

int api_hold_send(struct api_hold *h, void *sock, char *err, size_t errlen)
{
	while (h->q.off < h->q.len) {
		const uint8_t *p = h->q.p + h->q.off;
		uint32_t nparts = (uint32_t)le_get(p, 4);
		size_t at = 4;

		for (uint32_t i = 0; i < nparts; i++) {
			size_t len = (size_t)le_get(p + at, 4);

			/* Only the first part can be refused (wire.h). */
			if (wire_send_part(sock, p + at + 4, len,
					   i + 1 < nparts ? ZMQ_SNDMORE : 0) < 0)
				return errno == EAGAIN || errno == EHOSTUNREACH
					       ? kvw_errf(err, errlen,
							  KVW_EAGAIN,
							  "%u held commands: "
							  "the control's queue "
							  "is full", h->n)
					       : kvw_errf(err, errlen, KVW_ESYS,
							  "%u held commands: %s",
							  h->n,
							  zmq_strerror(errno));
			at += 4 + len;
		}
		h->q.off += at;
		h->n--;
	}
	return 0; /* byteq_reserve starts the emptied queue over */
}

void api_hold_free(struct api_hold *h)
{
	byteq_free(&h->q);
	*h = (struct api_hold){ 0 };
}
