/*
 * test_byteq.c - the byte queue of lib/base/byteq.c against a plain model:
 * runs of appends and takes of every size (the pseudo-random ones of a
 * fixed seed) keep every queued byte, in order, through every slide to
 * the front and every growth; a reserve always leaves the room it was
 * asked for; taking everything starts the queue over at 0; a freed queue
 * is empty and can be used again.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "base/byteq.h"

#define MODEL_MAX (1u << 20)

static uint64_t rnd_state = 0x9e3779b97f4a7c15ULL;

static uint32_t rnd(uint32_t n)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return (uint32_t)(rnd_state % n);
}

static void bytes_survive_slides_and_growth(void **state)
{
	static uint8_t model[MODEL_MAX];
	struct byteq q = { 0 };
	size_t head = 0, tail = 0; /* model[head, tail) is queued */
	uint8_t next = 1;
	unsigned slid = 0, grew = 0;

	(void)state;
	for (int step = 0; step < 20000; step++) {
		size_t more = rnd(step % 7 == 0 ? 70000 : 3000) + 1;
		/* Phases that mostly fill, then mostly drain. */
		size_t queued = tail - head, take = (step / 500) % 2
			? rnd((uint32_t)queued + 1)
			: rnd((uint32_t)queued / 16 + 1);
		size_t cap = q.cap, off = q.off;

		/* Append `more` bytes (the model slides when it must). */
		if (tail + more > MODEL_MAX) {
			memmove(model, model + head, tail - head);
			tail -= head;
			head = 0;
		}
		assert_true(tail + more <= MODEL_MAX);
		assert_int_equal(byteq_reserve(&q, more), 0);
		assert_true(q.cap - q.len >= more);
		slid += q.off == 0 && off > 0 && q.len > 0;
		grew += q.cap > cap;
		for (size_t i = 0; i < more; i++) {
			q.p[q.len + i] = next;
			model[tail + i] = next++;
		}
		q.len += more;
		tail += more;
		/* Take some from the front, at least the excess over a
		 * quarter of the model. */
		if (tail - head - take > MODEL_MAX / 4)
			take = tail - head - MODEL_MAX / 4;
		assert_int_equal(q.len - q.off, tail - head);
		assert_memory_equal(q.p + q.off, model + head, tail - head);
		q.off += take;
		head += take;
	}
	assert_true(slid > 10);
	assert_true(grew >= 2);
	assert_true(q.cap >= MODEL_MAX / 4);
	/* Everything taken: the next reserve starts over at 0. */
	q.off = q.len;
	assert_int_equal(byteq_reserve(&q, 1), 0);
	assert_int_equal(q.off, 0);
	assert_int_equal(q.len, 0);
	byteq_free(&q);
	assert_null(q.p);
	assert_int_equal(q.cap, 0);
	assert_int_equal(byteq_reserve(&q, 10), 0);
	assert_true(q.cap >= 10);
	byteq_free(&q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(bytes_survive_slides_and_growth),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
