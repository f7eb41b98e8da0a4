/*
 * forget_cleared.h - what kv-sender and kv-receiver do with their room
 * tables' old Cleared rooms: the pass rtab_reclaim_tick runs when due,
 * its outcome told to the log.
 */
#ifndef KVW_FORGET_CLEARED_H
#define KVW_FORGET_CLEARED_H

#include <stdint.h>

struct rtab;

/* Called from a control's loop: old Cleared rooms leave the table when it
 * fills (without it, a long-lived table's misses walk every slot). */
void forget_cleared(struct rtab *t, uint64_t now_ns);

#endif
