/*
 * test_idmap.c - the one id map (lib/base/idmap.h) behind kv-sender's and
 * kv-receiver's room records: records found by id after growth, ids that
 * share a bucket kept apart, a duplicate id refused without change, and
 * iteration that visits every record once while the caller unlinks the
 * record it was just given.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>

#include "base/idmap.h"
#include "base/kvw.h"

struct rec {
	uint32_t tag;
	struct idmap_node node;
};

static struct rec *rec_new(uint64_t id, uint32_t tag)
{
	struct rec *r = calloc(1, sizeof *r);

	assert_non_null(r);
	r->node.id = id;
	r->tag = tag;
	return r;
}

static struct rec *get(const struct idmap *m, uint64_t id)
{
	struct idmap_node *n = idmap_get(m, id);

	return n ? idmap_entry(n, struct rec, node) : NULL;
}

static void free_all(struct idmap *m)
{
	struct idmap_iter it = { 0 };
	struct idmap_node *n;

	while ((n = idmap_next(m, &it)))
		free(idmap_entry(idmap_del(m, n->id), struct rec, node));
	assert_int_equal(m->n, 0);
	idmap_fini(m);
}

static void test_records_are_found_by_id_after_the_map_grows(void **state)
{
	struct idmap m;

	(void)state;
	assert_int_equal(idmap_init(&m, 3), 0);
	assert_int_equal(m.nb, 16); /* rounded up to the smallest size */
	for (uint32_t i = 0; i < 3000; i++)
		assert_int_equal(idmap_put(&m, &rec_new((uint64_t)i << 32, i)->node),
				 0);
	assert_int_equal(m.n, 3000);
	assert_true(m.nb >= 2048 && (m.nb & (m.nb - 1)) == 0);
	for (uint32_t i = 0; i < 3000; i++) {
		struct rec *r = get(&m, (uint64_t)i << 32);

		assert_non_null(r);
		assert_int_equal(r->tag, i);
	}
	assert_null(get(&m, 1));
	free_all(&m);
}

static void test_a_duplicate_id_is_refused_and_changes_nothing(void **state)
{
	struct idmap m;
	struct rec *a = rec_new(42, 1), *b = rec_new(42, 2);

	(void)state;
	assert_int_equal(idmap_init(&m, 16), 0);
	assert_int_equal(idmap_put(&m, &a->node), 0);
	assert_int_equal(idmap_put(&m, &b->node), KVW_EEXIST);
	assert_int_equal(m.n, 1);
	assert_ptr_equal(get(&m, 42), a);
	free(b);
	free_all(&m);
}

static void test_deleting_keeps_the_other_records_of_a_bucket(void **state)
{
	struct idmap m;

	(void)state;
	assert_int_equal(idmap_init(&m, 16), 0);
	/* 16 records in 16 buckets: some share a chain. */
	for (uint64_t id = 0; id < 16; id++)
		assert_int_equal(idmap_put(&m, &rec_new(id, (uint32_t)id)->node), 0);
	for (uint64_t id = 0; id < 16; id += 3)
		free(idmap_entry(idmap_del(&m, id), struct rec, node));
	assert_null(idmap_del(&m, 0)); /* gone already */
	assert_null(idmap_del(&m, 99)); /* never there */
	for (uint64_t id = 0; id < 16; id++)
		assert_true((get(&m, id) != NULL) == (id % 3 != 0));
	assert_int_equal(m.n, 10);
	free_all(&m);
}

static void test_iteration_visits_each_record_once_while_unlinking(void **state)
{
	struct idmap m;
	struct idmap_iter it = { 0 };
	struct idmap_node *n;
	uint8_t seen[500] = { 0 };
	uint32_t count = 0;

	(void)state;
	assert_int_equal(idmap_init(&m, 16), 0);
	for (uint32_t i = 0; i < 500; i++)
		assert_int_equal(idmap_put(&m, &rec_new(i * 7919u, i)->node), 0);
	while ((n = idmap_next(&m, &it))) {
		struct rec *r = idmap_entry(n, struct rec, node);

		assert_int_equal(seen[r->tag], 0);
		seen[r->tag] = 1;
		count++;
		if (r->tag % 2 == 0) /* unlink every other one as it is met */
			free(idmap_entry(idmap_del(&m, n->id), struct rec, node));
	}
	assert_int_equal(count, 500);
	assert_int_equal(m.n, 250);
	free_all(&m);
}

static void test_a_zeroed_map_holds_nothing_and_takes_nothing(void **state)
{
	struct idmap m = { 0 };
	struct idmap_iter it = { 0 };
	struct rec r = { .node = { .id = 7 } };

	(void)state;
	assert_null(idmap_get(&m, 7));
	assert_null(idmap_del(&m, 7));
	assert_null(idmap_next(&m, &it));
	assert_int_equal(idmap_put(&m, &r.node), KVW_ENOMEM);
	idmap_fini(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_records_are_found_by_id_after_the_map_grows),
		cmocka_unit_test(test_a_duplicate_id_is_refused_and_changes_nothing),
		cmocka_unit_test(test_deleting_keeps_the_other_records_of_a_bucket),
		cmocka_unit_test(test_iteration_visits_each_record_once_while_unlinking),
		cmocka_unit_test(test_a_zeroed_map_holds_nothing_and_takes_nothing),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
