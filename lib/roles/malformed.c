/*
 * malformed.c - the counter behind MALFORMED (malformed.h).
 */
#include "malformed.h"

#include <stdatomic.h>

#include "table/rtab.h"

static _Atomic uint64_t local_count;

void malformed_count(struct rtab *t)
{
	if (t)
		rtab_counter_add(t, RTAB_C_MALFORMED, 1);
	else
		atomic_fetch_add_explicit(&local_count, 1, memory_order_relaxed);
}

uint64_t malformed_local(void)
{
	return atomic_load_explicit(&local_count, memory_order_relaxed);
}
