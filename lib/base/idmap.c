/*
 * idmap.c - the intrusive id map of idmap.h: chained buckets indexed by a
 * 64-bit finaliser (murmur3's fmix64) of the id, so sequential room ids
 * spread over every bucket.
 */
#include "idmap.h"

#include <stdlib.h>
#include <string.h>

#include "kvw.h"

static uint32_t bucket(uint64_t id, uint32_t nb)
{
	id ^= id >> 33;
	id *= 0xff51afd7ed558ccdULL;
	id ^= id >> 33;
	id *= 0xc4ceb9fe1a85ec53ULL;
	id ^= id >> 33;
	return (uint32_t)id & (nb - 1);
}

int idmap_init(struct idmap *m, uint32_t nbuckets)
{
	uint32_t nb = 16;

	memset(m, 0, sizeof *m);
	while (nb < nbuckets && nb < IDMAP_MAX_BUCKETS)
		nb <<= 1;
	m->b = calloc(nb, sizeof *m->b);
	if (!m->b)
		return KVW_ENOMEM;
	m->nb = nb;
	return 0;
}

void idmap_fini(struct idmap *m)
{
	free(m->b);
	memset(m, 0, sizeof *m);
}

struct idmap_node *idmap_get(const struct idmap *m, uint64_t id)
{
	struct idmap_node *p;

	if (!m->b)
		return NULL;
	for (p = m->b[bucket(id, m->nb)]; p; p = p->next)
		if (p->id == id)
			return p;
	return NULL;
}

/* Doubles the buckets; on allocation failure the map stays as it is. */
static void grow(struct idmap *m)
{
	uint32_t nb = m->nb * 2;
	struct idmap_node **b = calloc(nb, sizeof *b);

	if (!b)
		return;
	for (uint32_t i = 0; i < m->nb; i++) {
		struct idmap_node *p = m->b[i], *nx;

		for (; p; p = nx) {
			uint32_t k = bucket(p->id, nb);

			nx = p->next;
			p->next = b[k];
			b[k] = p;
		}
	}
	free(m->b);
	m->b = b;
	m->nb = nb;
}

int idmap_put(struct idmap *m, struct idmap_node *node)
{
	uint32_t k;

	if (!m->b)
		return KVW_ENOMEM;
	if (idmap_get(m, node->id))
		return KVW_EEXIST;
	if (m->n >= m->nb && m->nb < IDMAP_MAX_BUCKETS)
		grow(m);
	k = bucket(node->id, m->nb);
	node->next = m->b[k];
	m->b[k] = node;
	m->n++;
	return 0;
}

struct idmap_node *idmap_del(struct idmap *m, uint64_t id)
{
	struct idmap_node **pp, *p;

	if (!m->b)
		return NULL;
	for (pp = &m->b[bucket(id, m->nb)]; *pp; pp = &(*pp)->next) {
		if ((*pp)->id != id)
			continue;
		p = *pp;
		*pp = p->next;
		p->next = NULL;
		m->n--;
		return p;
	}
	return NULL;
}

struct idmap_node *idmap_next(const struct idmap *m, struct idmap_iter *it)
{
	struct idmap_node *p = it->next;

	while (!p && m->b && it->k < m->nb)
		p = m->b[it->k++];
	/* Read the successor now: the caller may unlink p before the next
	 * call (its next is cleared then). */
	it->next = p ? p->next : NULL;
	return p;
}
