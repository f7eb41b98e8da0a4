/*
 * forget_cleared.c - see forget_cleared.h.
 */
#include "forget_cleared.h"

#include "base/kvw.h"
#include "base/log.h"
#include "table/rtab.h"

void forget_cleared(struct rtab *t, uint64_t now_ns)
{
	int n = rtab_reclaim_tick(t, now_ns);

	if (n > 0)
		LOG(LOG_DEBUG, "room table: %d old Cleared rooms forgotten", n);
	else if (n < 0)
		LOG_RL(LOG_WARN, "room table: old Cleared rooms kept: %s",
		       kvw_strerror(n));
}
