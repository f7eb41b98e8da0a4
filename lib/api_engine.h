/*
 * api_engine.h - the engine handle of api.h, for the files of the API
 * (api.c: commands and progress; api_mem.c: the engine's host memory).
 */
#ifndef KVW_API_ENGINE_H
#define KVW_API_ENGINE_H

#include <stdint.h>

#include "api_hold.h"
#include "api_inc.h"
#include "mem/pool.h"
#include "table/rtab.h"

struct api_alloc; /* api_mem.c */

struct kvw_engine {
	void *sock;
	struct rtab *tab;
	struct pool *pool;
	uint64_t epoch;
	char *table_path; /* for kvw_control_check */
	int gpu_registered; /* this engine wrote the pool's GPU record */
	int host_registered; /* ... and its host memory record */
	struct api_alloc *allocs; /* kvw_alloc's, nallocs of them */
	uint32_t nallocs, capallocs;
	struct api_inc *inc; /* what each BEGIN replaced (kvw_poll hides it;
			     * behind a pointer: poll takes its lock) */
	struct api_hold hold; /* kvw_engine_hold's commands */
	char err[256]; /* last send error */
};

/* api_mem.c: removes a record that an engine no longer alive left beside
 * e's pool, with its allocations; and at close, e's own. */
void api_mem_sweep(struct kvw_engine *e);
void api_mem_close(struct kvw_engine *e);

#endif
