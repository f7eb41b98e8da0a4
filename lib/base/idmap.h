/*
 * idmap.h - the one map from a 64-bit id to a record, used for kv-sender's
 * and kv-receiver's private room records. Intrusive: a record embeds a
 * struct idmap_node and the map only links it, so a lookup costs no
 * allocation and the map never owns or frees a record. Buckets are a
 * power of two, chained, and double when the map holds as many records as
 * buckets (up to IDMAP_MAX_BUCKETS); a failed growth leaves the map as it
 * was and only makes chains longer.
 */
#ifndef KVW_IDMAP_H
#define KVW_IDMAP_H

#include <stddef.h>
#include <stdint.h>

#define IDMAP_MAX_BUCKETS (1u << 24)

struct idmap_node {
	uint64_t id;
	struct idmap_node *next; /* chain; owned by the map while linked */
};

struct idmap {
	struct idmap_node **b;
	uint32_t nb; /* buckets, a power of two */
	uint32_t n;  /* records linked */
};

/* The record that embeds node as member `field`. */
#define idmap_entry(node, type, field) \
	((type *)(void *)((char *)(node) - offsetof(type, field)))

/* Prepares m with at least nbuckets buckets (16 at least, rounded up to a
 * power of two). 0, or KVW_ENOMEM with m zeroed. */
int idmap_init(struct idmap *m, uint32_t nbuckets);

/* Frees the buckets (not the records: unlink or free them first, e.g. with
 * idmap_next + idmap_del) and zeroes m. Accepts a zeroed map. */
void idmap_fini(struct idmap *m);

/* The record with this id, or NULL. A zeroed map holds nothing. */
struct idmap_node *idmap_get(const struct idmap *m, uint64_t id);

/* Links node under node->id: 0, KVW_EEXIST (an other record has the id;
 * nothing changed) or KVW_ENOMEM (the map was never initialised). */
int idmap_put(struct idmap *m, struct idmap_node *node);

/* Unlinks and returns the record with this id, or NULL. */
struct idmap_node *idmap_del(struct idmap *m, uint64_t id);

/* Iteration: start from a zeroed struct idmap_iter; each call returns the
 * next record, or NULL at the end. The record returned may be
 * unlinked (idmap_del) before the next call; no other change is allowed
 * during an iteration. */
struct idmap_iter {
	uint32_t k;              /* next bucket to look at */
	struct idmap_node *next; /* next record of the current chain */
};
struct idmap_node *idmap_next(const struct idmap *m, struct idmap_iter *it);

#endif
