/*
 * frame_check.c - the value checks of the frame codec (frame_impl.h): enum
 * ranges, caps, flags and coordinates of a message whose header type is
 * known. frame_decode() runs them on every decoded message and
 * frame_encode() before it writes a byte, so both directions refuse the
 * same messages.
 */
#include "frame_impl.h"

/* Sizes at least 1 and every coordinate inside them. */
static int topo_check(const struct kvw_topo *t, const struct kvw_coord *x)
{
	return t->tp && t->pp && t->cp && t->dp && x->tp < t->tp &&
	       x->pp < t->pp && x->cp < t->cp && x->dp < t->dp;
}

const struct frame_u32s *frame_msg_pages(const struct frame_msg *m)
{
	switch (m->hdr.type) {
	case FRAME_XFER_INFO: return &m->u.xfer_info.pages;
	case FRAME_SEND_CHUNK: return &m->u.send_chunk.pages;
	case FRAME_RECV_BEGIN: return &m->u.recv_begin.pages;
	}
	return NULL;
}

int frame_msg_check(const struct frame_msg *m, char *err, size_t errlen)
{
	const char *t = frame_type_str(m->hdr.type);
	const struct frame_u32s *pages = frame_msg_pages(m);

#define BAD(...) kvw_errf(err, errlen, KVW_EINVAL, __VA_ARGS__)
	if (pages && pages->n > KVW_MAX_PAGES)
		return BAD("%s: %u pages over KVW_MAX_PAGES", t, pages->n);
	switch (m->hdr.type) {
	case FRAME_BOOT_REGISTER: {
		const struct frame_boot_register *b = &m->u.boot_register;

		if (!topo_check(&b->topo, &b->coord))
			return BAD("%s: coord outside topo", t);
		if (b->layer_count > UINT32_MAX - b->layer_first)
			return BAD("%s: layer range overflows", t);
		break;
	}
	case FRAME_BOOT_LOOKUP: {
		const struct kvw_coord *w = &m->u.boot_lookup.want;
		int any = (w->tp == FRAME_LOOKUP_TOPO_ONLY) + (w->pp == FRAME_LOOKUP_TOPO_ONLY) +
			  (w->cp == FRAME_LOOKUP_TOPO_ONLY) + (w->dp == FRAME_LOOKUP_TOPO_ONLY);

		if (any != 0 && any != 4)
			return BAD("%s: want mixes topology-only and coordinates", t);
		break;
	}
	case FRAME_BOOT_REPLY: {
		const struct frame_boot_reply *b = &m->u.boot_reply;

		if (b->status >= FRAME_BOOT_NSTATUS)
			return BAD("%s: status %u out of range", t, b->status);
		if (b->status == FRAME_BOOT_OK && !topo_check(&b->topo, &b->coord))
			return BAD("%s: coord outside topo", t);
		if (b->layer_count > UINT32_MAX - b->layer_first)
			return BAD("%s: layer range overflows", t);
		break;
	}
	case FRAME_REGISTER: {
		const struct frame_register *r = &m->u.reg;

		if (!topo_check(&r->topo, &r->coord))
			return BAD("%s: coord outside topo", t);
		if (r->desc.len > KVW_MAX_DESC)
			return BAD("%s: desc %u bytes over KVW_MAX_DESC", t, r->desc.len);
		if (r->desc.len && !r->desc.p)
			return BAD("%s: desc has no data", t);
		if (r->bufs.n > KVW_MAX_BUFFERS)
			return BAD("%s: nbufs %u over KVW_MAX_BUFFERS", t, r->bufs.n);
		if (r->bufs.n && !r->bufs.p && !r->bufs.native)
			return BAD("%s: bufs has no data", t);
		for (uint32_t i = 0; i < r->bufs.n; i++)
			if (frame_bufs_get(r->bufs, i).role >= KVW_NROLES)
				return BAD("%s: bufs[%u] role out of range", t, i);
		break;
	}
	case FRAME_XFER_INFO:
		if (m->u.xfer_info.required_dst_info_num < 1)
			return BAD("%s: required_dst_info_num is 0", t);
		if (m->u.xfer_info.dummy > 1)
			return BAD("%s: dummy not 0/1", t);
		if (m->u.xfer_info.token == 0)
			return BAD("%s: token 0", t);
		break;
	case FRAME_ABORT:
		if (m->u.abort.reason >= KVW_NREASONS)
			return BAD("%s: reason %u out of range", t, m->u.abort.reason);
		if (m->u.abort.token == 0)
			return BAD("%s: token 0", t);
		break;
	case FRAME_ABORT_ACK:
		if (m->u.abort_ack.token == 0)
			return BAD("%s: token 0", t);
		break;
	case FRAME_STATUS:
		if (m->u.status.state != KVW_SUCCESS && m->u.status.state != KVW_FAILED)
			return BAD("%s: state %u not Success/Failed", t, m->u.status.state);
		if (m->u.status.reason >= KVW_NREASONS)
			return BAD("%s: reason %u out of range", t, m->u.status.reason);
		if (m->u.status.token == 0)
			return BAD("%s: token 0", t);
		break;
	case FRAME_SEND_CHUNK:
		if (m->u.send_chunk.is_last > 1)
			return BAD("%s: is_last not 0/1", t);
		break;
	case FRAME_JOB:
		if (m->u.job.flags & ~(FRAME_JOB_LAST | FRAME_JOB_FINAL))
			return BAD("%s: unknown flags 0x%x", t, m->u.job.flags);
		if ((m->u.job.flags & FRAME_JOB_FINAL) &&
		    !(m->u.job.flags & FRAME_JOB_LAST))
			return BAD("%s: flags 0x%x: FINAL without LAST", t,
				   m->u.job.flags);
		if (m->u.job.token == 0)
			return BAD("%s: token 0", t);
		if (m->u.job.desc.len > KVW_MAX_DESC)
			return BAD("%s: desc %u bytes over KVW_MAX_DESC", t, m->u.job.desc.len);
		if (m->u.job.desc.len && !m->u.job.desc.p)
			return BAD("%s: desc has no data", t);
		if (m->u.job.copies.n > KVW_MAX_COPIES)
			return BAD("%s: %u copies over KVW_MAX_COPIES", t, m->u.job.copies.n);
		if (m->u.job.copies.n && !m->u.job.copies.p)
			return BAD("%s: copies has no data", t);
		break;
	case FRAME_JOB_DONE:
		if (m->u.job_done.result > 0)
			return BAD("%s: result %d positive", t, m->u.job_done.result);
		if (m->u.job_done.reason >= KVW_NREASONS)
			return BAD("%s: reason %u out of range", t, m->u.job_done.reason);
		if (m->u.job_done.count < 1 ||
		    m->u.job_done.count > FRAME_JOB_DONE_MAX)
			return BAD("%s: count %u outside 1..FRAME_JOB_DONE_MAX", t,
				   m->u.job_done.count);
		if (m->u.job_done.count > 1 && m->u.job_done.result != 0)
			return BAD("%s: count %u for a failed job", t,
				   m->u.job_done.count);
		break;
	}
	if (pages && pages->n && !pages->p)
		return BAD("%s: pages has no data", t);
#undef BAD
	return 0;
}
