/*
 * sender_room.c - the pure bookkeeping of kv-sender's control process: the
 * private room map (id -> room), each room's destinations, queued chunks
 * and ABORT ack targets, the slicing of a destination's page list per
 * chunk, how many pages fit in one JOB, and the per-worker queue of jobs
 * in flight. No sockets and no room table here, so all of it is unit
 * tested directly (tests/unit/test_sender.c).
 */
#include "sender_impl.h"

#include <stdlib.h>
#include <string.h>

int sender_rooms_init(struct sender_rooms *m, uint32_t nbuckets)
{
	return idmap_init(&m->m, nbuckets);
}

static void room_free(struct sender_room *r)
{
	sender_room_drop_chunks(r);
	for (uint32_t i = 0; i < r->ndst; i++)
		sender_dst_free(&r->dst[i]);
	for (uint32_t i = 0; i < r->nheld; i++)
		sender_dst_free(&r->held[i]);
	free(r->src_state);
	free(r->dst);
	free(r->held);
	free(r->q);
	free(r->acks);
	free(r);
}

void sender_rooms_free(struct sender_rooms *m)
{
	struct idmap_iter it = { 0 };
	struct idmap_node *n;

	while ((n = idmap_next(&m->m, &it)))
		room_free(idmap_entry(idmap_del(&m->m, n->id), struct sender_room,
				      node));
	idmap_fini(&m->m);
}

struct sender_room *sender_rooms_get(const struct sender_rooms *m, uint64_t id)
{
	struct idmap_node *n = idmap_get(&m->m, id);

	return n ? idmap_entry(n, struct sender_room, node) : NULL;
}

int sender_rooms_add(struct sender_rooms *m, uint64_t id,
		     struct sender_room **out)
{
	struct sender_room *r = sender_rooms_get(m, id);
	int rc;

	*out = r;
	if (r)
		return KVW_EEXIST;
	if (!m->m.b)
		return KVW_ENOMEM;
	r = calloc(1, sizeof *r);
	if (!r)
		return KVW_ENOMEM;
	r->id = id;
	rc = idmap_put(&m->m, &r->node);
	if (rc < 0) {
		free(r);
		return rc;
	}
	*out = r;
	return 0;
}

void sender_rooms_del(struct sender_rooms *m, uint64_t id)
{
	struct idmap_node *n = idmap_del(&m->m, id);

	if (n)
		room_free(idmap_entry(n, struct sender_room, node));
}

void sender_rooms_foreach(struct sender_rooms *m,
			  void (*fn)(void *arg, struct sender_room *r),
			  void *arg)
{
	struct idmap_iter it = { 0 };
	struct idmap_node *n;

	while ((n = idmap_next(&m->m, &it)))
		fn(arg, idmap_entry(n, struct sender_room, node));
}

/* Grows *arr (elements of size sz) to hold at least want; 0 or ENOMEM. */
static int grow(void **arr, uint32_t *cap, uint32_t want, size_t sz)
{
	uint32_t nc = *cap ? *cap : 4;
	void *p;

	if (want <= *cap)
		return 0;
	while (nc < want)
		nc *= 2;
	p = realloc(*arr, (size_t)nc * sz);
	if (!p)
		return KVW_ENOMEM;
	*arr = p;
	*cap = nc;
	return 0;
}

/* A private copy of a wire page list (n may be 0). */
static uint32_t *pages_copy(struct frame_u32s v)
{
	uint32_t *a = malloc(v.n ? (size_t)v.n * 4 : 1);

	if (a && v.n)
		memcpy(a, v.p, (size_t)v.n * 4); /* little-endian host (frame.h) */
	return a;
}

int sender_room_has_dst(const struct sender_room *r,
			const struct sender_peer *p)
{
	for (uint32_t i = 0; i < r->ndst; i++)
		if (r->dst[i].peer == p)
			return 1;
	return 0;
}

/* dst_put: P's entry in the list ARR (N entries of CAP) becomes this
 * XFER_INFO, added or replacing P's earlier one (its pages freed). Returns
 * its index, or KVW_ERANGE (SENDER_MAX_DST entries already) or
 * KVW_ENOMEM, with the list unchanged. */
static int dst_put(struct sender_dst **arr, uint32_t *n, uint32_t *cap,
		   struct sender_peer *p, const struct sender_xfer *x)
{
	uint32_t i;
	uint32_t *copy;
	uint8_t *state = NULL;

	for (i = 0; i < *n; i++)
		if ((*arr)[i].peer == p)
			break;
	if (i == *n) {
		if (*n >= SENDER_MAX_DST)
			return KVW_ERANGE;
		if (grow((void **)arr, cap, *n + 1, sizeof **arr))
			return KVW_ENOMEM;
	}
	copy = pages_copy(x->pages);
	if (x->state.len && (state = malloc(x->state.len)))
		memcpy(state, x->state.p, x->state.len);
	if (!copy || (x->state.len && !state)) {
		free(copy);
		free(state);
		return KVW_ENOMEM;
	}
	if (i == *n)
		(*n)++;
	else
		sender_dst_free(&(*arr)[i]);
	(*arr)[i] = (struct sender_dst){ .peer = p, .pages = copy,
					 .npages = x->pages.n,
					 .state = state,
					 .state_len = x->state.len,
					 .aux_slot = x->aux_slot,
					 .prefix_tokens = x->prefix_tokens,
					 .token = x->token,
					 .dummy = x->dummy ? 1 : 0 };
	return (int)i;
}

void sender_dst_free(struct sender_dst *d)
{
	free(d->pages);
	free(d->state);
	d->pages = NULL;
	d->state = NULL;
}

int sender_room_set_src_state(struct sender_room *r, struct frame_bytes st)
{
	uint8_t *copy = NULL;

	if (st.len && !(copy = malloc(st.len)))
		return KVW_ENOMEM;
	if (st.len)
		memcpy(copy, st.p, st.len);
	free(r->src_state);
	r->src_state = copy;
	r->src_state_len = st.len;
	return 0;
}

int sender_room_set_dst(struct sender_room *r, struct sender_peer *p,
			const struct sender_xfer *x)
{
	return dst_put(&r->dst, &r->ndst, &r->capdst, p, x);
}

int sender_room_is_later(const struct sender_room *r,
			 const struct sender_peer *p, uint64_t token)
{
	for (uint32_t i = 0; i < r->ndst; i++)
		if (r->dst[i].peer == p)
			return r->dst[i].token != token;
	return 0;
}

int sender_room_hold(struct sender_room *r, struct sender_peer *p,
		     const struct sender_xfer *x)
{
	int i = dst_put(&r->held, &r->nheld, &r->capheld, p, x);

	if (i < 0)
		return i;
	r->held_required = x->required;
	return 0;
}

uint32_t sender_room_nreal(const struct sender_room *r)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < r->ndst; i++)
		n += !r->dst[i].dummy;
	return n;
}

int sender_room_ready(const struct sender_room *r)
{
	return r->required > 0 && r->ndst >= r->required;
}

int sender_room_all_done(const struct sender_room *r)
{
	uint32_t real = 0;

	for (uint32_t i = 0; i < r->ndst; i++) {
		if (r->dst[i].dummy)
			continue;
		if (!r->dst[i].done)
			return 0;
		real++;
	}
	return real > 0;
}

int sender_room_push_chunk(struct sender_room *r, struct frame_u32s pages,
			   int is_last)
{
	struct sender_chunk *c;

	if (r->last_queued || pages.n > r->num_pages - r->queued_pages)
		return KVW_ERANGE;
	if (grow((void **)&r->q, &r->capq, r->nq + 1, sizeof *r->q))
		return KVW_ENOMEM;
	c = &r->q[r->nq];
	c->pages = pages_copy(pages);
	if (!c->pages)
		return KVW_ENOMEM;
	c->n = pages.n;
	c->is_last = is_last ? 1 : 0;
	r->nq++;
	r->queued_pages += pages.n;
	r->last_queued = c->is_last;
	return 0;
}

void sender_room_pop_chunk(struct sender_room *r)
{
	if (r->nq == 0)
		return;
	free(r->q[0].pages);
	memmove(&r->q[0], &r->q[1], (r->nq - 1) * sizeof *r->q);
	r->nq--;
}

void sender_room_drop_chunks(struct sender_room *r)
{
	for (uint32_t i = 0; i < r->nq; i++)
		free(r->q[i].pages);
	r->nq = 0;
}

int sender_room_add_ack(struct sender_room *r, struct sender_peer *p,
			uint64_t token, uint64_t deadline_ns)
{
	for (uint32_t i = 0; i < r->nacks; i++)
		if (r->acks[i].peer == p && r->acks[i].token == token)
			return 0;
	if (grow((void **)&r->acks, &r->capacks, r->nacks + 1, sizeof *r->acks))
		return KVW_ENOMEM;
	r->acks[r->nacks++] = (struct sender_ack){ p, token };
	if (r->nacks == 1)
		r->ack_deadline_ns = deadline_ns;
	return 1;
}

int sender_room_ack_due(const struct sender_room *r, uint32_t outstanding)
{
	return r->nacks > 0 && outstanding == 0;
}

int sender_dst_slice(const struct sender_dst *d, uint32_t cursor, uint32_t n,
		     const uint32_t **out)
{
	if (cursor > d->npages || n > d->npages - cursor)
		return KVW_ERANGE;
	*out = d->pages + cursor;
	return 0;
}

uint32_t sender_job_pages(const struct plan *p, uint32_t n, int with_aux,
			  uint64_t max_copies)
{
	uint64_t per, fixed;
	uint32_t k;

	if (n == 0)
		return 0;
	fixed = plan_chunk_max(p, 0, with_aux);
	per = plan_chunk_max(p, 1, 0);
	if (per == 0 || plan_chunk_max(p, n, with_aux) <= max_copies)
		return n;
	k = fixed < max_copies ? (uint32_t)((max_copies - fixed) / per) : 0;
	if (k == 0)
		k = 1;
	return k < n ? k : n;
}

int sender_jobq_push(struct sender_jobq *q, const struct sender_jobrec *j)
{
	if (q->n == q->cap) {
		uint32_t nc = q->cap ? q->cap * 2 : 16;
		struct sender_jobrec *a = malloc((size_t)nc * sizeof *a);

		if (!a)
			return KVW_ENOMEM;
		for (uint32_t i = 0; i < q->n; i++)
			a[i] = q->a[(q->head + i) % q->cap];
		free(q->a);
		q->a = a;
		q->cap = nc;
		q->head = 0;
	}
	q->a[(q->head + q->n) % q->cap] = *j;
	q->n++;
	q->bytes += j->bytes;
	return 0;
}

void sender_jobq_unpush(struct sender_jobq *q)
{
	if (q->n == 0)
		return;
	q->n--;
	q->bytes -= q->a[(q->head + q->n) % q->cap].bytes;
}

const struct sender_jobrec *sender_jobq_head(const struct sender_jobq *q)
{
	return q->n ? &q->a[q->head] : NULL;
}

const struct sender_jobrec *sender_jobq_at(const struct sender_jobq *q,
					   uint32_t i)
{
	return i < q->n ? &q->a[(q->head + i) % q->cap] : NULL;
}

void sender_jobq_pop(struct sender_jobq *q)
{
	if (q->n == 0)
		return;
	q->bytes -= q->a[q->head].bytes;
	q->head = (q->head + 1) % q->cap;
	q->n--;
}

void sender_jobq_free(struct sender_jobq *q)
{
	free(q->a);
	memset(q, 0, sizeof *q);
}
