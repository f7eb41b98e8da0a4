/*
 * byteq.c - see byteq.h.
 */
#include "byteq.h"

#include <stdlib.h>
#include <string.h>

#include "base/kvw.h"

int byteq_reserve(struct byteq *q, size_t more)
{
	size_t cap = q->cap ? q->cap : 4096;
	uint8_t *p;

	if (q->off && q->off == q->len)
		q->off = q->len = 0;
	if (q->len + more <= q->cap)
		return 0;
	if (q->off) {
		memmove(q->p, q->p + q->off, q->len - q->off);
		q->len -= q->off;
		q->off = 0;
		if (q->len + more <= q->cap)
			return 0;
	}
	while (cap < q->len + more)
		cap *= 2;
	p = realloc(q->p, cap);
	if (!p)
		return KVW_ENOMEM;
	q->p = p;
	q->cap = cap;
	return 0;
}

void byteq_free(struct byteq *q)
{
	free(q->p);
	*q = (struct byteq){ 0 };
}
