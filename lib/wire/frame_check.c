/*
 * frame_check.c - the value checks of the frame codec (frame_impl.h): enum
 * ranges, caps, flags and coordinates of a message whose header type is
 * known. frame_decode() runs them on every decoded message and
 * frame_encode() before it writes a byte, so both directions refuse the
 * same messages. The per-field checks come from the rows of
 * frame_bodies.def (their check column); what no one field can say (a
 * coordinate inside its topology, a layer range that fits) is a rule
 * below, run where its FRAME_RULE row stands.
 */
#include "frame_impl.h"

#define BAD(...) kvw_errf(err, errlen, KVW_EINVAL, __VA_ARGS__)

/* Sizes at least 1 and every coordinate inside them. */
static int topo_check(const struct kvw_topo *t, const struct kvw_coord *x)
{
	return t->tp && t->pp && t->cp && t->dp && x->tp < t->tp &&
	       x->pp < t->pp && x->cp < t->cp && x->dp < t->dp;
}

/* ---- rules: one per message that needs one (FRAME_RULE rows) ---- */

static int frame_rule_boot_register(const struct frame_boot_register *b,
				    const char *t, char *err, size_t errlen)
{
	if (!topo_check(&b->topo, &b->coord))
		return BAD("%s: coord outside topo", t);
	if (b->layer_count > UINT32_MAX - b->layer_first)
		return BAD("%s: layer range overflows", t);
	return 0;
}

static int frame_rule_boot_lookup(const struct frame_boot_lookup *b,
				  const char *t, char *err, size_t errlen)
{
	const struct kvw_coord *w = &b->want;
	int any = (w->tp == FRAME_LOOKUP_TOPO_ONLY) + (w->pp == FRAME_LOOKUP_TOPO_ONLY) +
		  (w->cp == FRAME_LOOKUP_TOPO_ONLY) + (w->dp == FRAME_LOOKUP_TOPO_ONLY);

	if (any != 0 && any != 4)
		return BAD("%s: want mixes topology-only and coordinates", t);
	return 0;
}

/* An error reply may carry no topology at all. */
static int frame_rule_boot_reply(const struct frame_boot_reply *b,
				 const char *t, char *err, size_t errlen)
{
	if (b->status == FRAME_BOOT_OK && !topo_check(&b->topo, &b->coord))
		return BAD("%s: coord outside topo", t);
	if (b->layer_count > UINT32_MAX - b->layer_first)
		return BAD("%s: layer range overflows", t);
	return 0;
}

static int frame_rule_register(const struct frame_register *r, const char *t,
			       char *err, size_t errlen)
{
	if (!topo_check(&r->topo, &r->coord))
		return BAD("%s: coord outside topo", t);
	return 0;
}

/* A STATUS reports an outcome: never a live state. */
static int frame_rule_status(const struct frame_status *s, const char *t,
			     char *err, size_t errlen)
{
	if (s->state != KVW_SUCCESS && s->state != KVW_FAILED)
		return BAD("%s: state %u not Success/Failed", t, s->state);
	return 0;
}

static int frame_rule_job(const struct frame_job *j, const char *t, char *err,
			  size_t errlen)
{
	if ((j->flags & FRAME_JOB_FINAL) && !(j->flags & FRAME_JOB_LAST))
		return BAD("%s: flags 0x%x: FINAL without LAST", t, j->flags);
	return 0;
}

/* Only a burst of successes is answered at once. */
static int frame_rule_job_done(const struct frame_job_done *d, const char *t,
			       char *err, size_t errlen)
{
	if (d->count > 1 && d->result != 0)
		return BAD("%s: count %u for a failed job", t, d->count);
	return 0;
}

/* A state part: whole lists, at most KVW_MAX_STATE of them, none over
 * KVW_MAX_STATE_IDX rows. */
static int state_check(struct frame_bytes s, const char *t, char *err,
		       size_t errlen)
{
	size_t at = 0;
	uint32_t k = 0;

	if (s.len > FRAME_STATE_MAX_BYTES)
		return BAD("%s: state %u bytes over %u", t, s.len,
			   FRAME_STATE_MAX_BYTES);
	if (s.len && !s.p)
		return BAD("%s: state has no data", t);
	while (at < s.len) {
		uint32_t n;

		if (s.len - at < 4 || k == KVW_MAX_STATE)
			return BAD("%s: state: %s", t,
				   k == KVW_MAX_STATE ? "more than the "
				   "KVW_MAX_STATE lists" : "a cut count");
		n = frame_le32(s.p + at);
		if (n > KVW_MAX_STATE_IDX || (s.len - at - 4) / 4 < n)
			return BAD("%s: state list %u: %u rows %s", t, k, n,
				   n > KVW_MAX_STATE_IDX ? "over "
				   "KVW_MAX_STATE_IDX" : "past the part's end");
		at += 4 + 4 * (size_t)n;
		k++;
	}
	return 0;
}

/* ---- the check column of frame_bodies.def ---- */

/* CHECK_<kind>(field, value, arg, arg as written in the row). */

#define CHECK_ANY(f, v, a, as)
#define CHECK_NONZERO(f, v, a, as)                       \
	if ((v) == 0)                                \
		return BAD("%s: " #f " 0", t);
#define CHECK_BOOL(f, v, a, as)                          \
	if ((v) > 1)                                 \
		return BAD("%s: " #f " not 0/1", t);
#define CHECK_BELOW(f, v, a, as)                                              \
	if ((v) >= (a))                                                   \
		return BAD("%s: " #f " %u out of range", t, (unsigned)(v));
#define CHECK_MASK(f, v, a, as)                                               \
	if ((v) & ~(uint32_t)(a))                                         \
		return BAD("%s: unknown " #f " 0x%x", t, (unsigned)(v));
#define CHECK_NOT_POS(f, v, a, as)                                            \
	if ((v) > 0)                                                      \
		return BAD("%s: " #f " %d positive", t, (int)(v));
#define CHECK_ONE_TO(f, v, a, as)                                             \
	if ((v) < 1 || (v) > (a))                                         \
		return BAD("%s: " #f " %u outside 1.." as, t, (unsigned)(v));

int frame_msg_check(const struct frame_msg *m, char *err, size_t errlen)
{
	const char *t = frame_type_str(m->hdr.type);
	int rc;

	switch (m->hdr.type) {
#define FRAME_BODY(T, member, tag) case FRAME_##T: { const struct tag *b = &m->u.member; (void)b;
#define FRAME_U8(f, check, arg) CHECK_##check(f, b->f, arg, #arg)
#define FRAME_U32(f, check, arg) CHECK_##check(f, b->f, arg, #arg)
#define FRAME_I32(f, check, arg) CHECK_##check(f, b->f, arg, #arg)
#define FRAME_U64(f, check, arg) CHECK_##check(f, b->f, arg, #arg)
#define FRAME_BYTES(f, cap)                                                   \
	if (b->f.len > (cap))                                                 \
		return BAD("%s: " #f " %u bytes over " #cap, t, b->f.len);    \
	if (b->f.len && !b->f.p)                                              \
		return BAD("%s: " #f " has no data", t);
#define FRAME_BUFS(f, cap)                                                    \
	if (b->f.n > (cap))                                                   \
		return BAD("%s: n" #f " %u over " #cap, t, b->f.n);           \
	if (b->f.n && !b->f.p && !b->f.native)                                \
		return BAD("%s: " #f " has no data", t);                      \
	for (uint32_t i = 0; i < b->f.n; i++)                                 \
		if (frame_bufs_get(b->f, i).role >= KVW_NROLES)               \
			return BAD("%s: " #f "[%u] role out of range", t, i);
#define FRAME_RULE(name)                                                      \
	if ((rc = frame_rule_##name(b, t, err, errlen)) < 0)                  \
		return rc;
#define FRAME_PART2(f, what, cap)                                             \
	if (b->f.n > (cap))                                                   \
		return BAD("%s: %u " what " over " #cap, t, b->f.n);          \
	if (b->f.n && !b->f.p)                                                \
		return BAD("%s: " what " has no data", t);
#define FRAME_PAGES(f) FRAME_PART2(f, "pages", KVW_MAX_PAGES)
#define FRAME_COPIES(f) FRAME_PART2(f, "copies", KVW_MAX_COPIES)
#define FRAME_STATE(f)                                                        \
	if ((rc = state_check(b->f, t, err, errlen)) < 0)                     \
		return rc;
#define FRAME_END(T) break; }
#include "frame_bodies.def"
#undef FRAME_PART2
	}
	return 0;
}
