/*
 * modes.h - kv-bench's modes: `kv-bench [copy|rooms|demo] [flags]`. demo
 * (also what runs with no mode word) is the original workload run over a
 * group; rooms runs tiny rooms over a group against a ZMQ ping-pong; copy
 * needs no group (copy.c). modes.c picks the mode out of argv together with
 * the flags only the modes know (--json, --latency-rooms, --rtt,
 * --warmup), so main.c
 * keeps parsing the group and workload flags it always parsed, then hands
 * the loaded group to kvb_run, which measures and prints.
 */
#ifndef KVBENCH_MODES_H
#define KVBENCH_MODES_H

#include <stdint.h>
#include <stdio.h>

#include "bench.h"

struct runinfo;

enum kvb_mode { KVB_DEMO, KVB_COPY, KVB_ROOMS, KVB_TCP, KVB_HISTORY };

struct kvb_opts {
	enum kvb_mode mode;
	int json;           /* --json: one JSON document on stdout */
	int no_reference;   /* demo: --no-reference (or
			     * $KVW_BENCH_NO_REFERENCE=1), no memcpy limit */
	uint32_t lat_rooms; /* rooms: --latency-rooms N (one at a time) */
	uint32_t rtt;       /* rooms: --rtt N timed ping-pong round trips */
	uint32_t warmup;    /* rooms: --warmup N untimed rooms first */
	const char *plot;   /* demo, rooms: --plot FILE.png (plot.c) */
	uint32_t cost;      /* rooms: --metrics-cost N passes with and N
			     * without the tables' measures (bench_cost.c) */
	int auth_cost;      /* rooms --spawn: --auth-cost, the same bench on
			     * a group with keys, then one with --insecure
			     * (main.c), and the ratio of their rooms/s */
	uint32_t port_base; /* --auth-cost: --port-base N, the keys group's
			     * kv-up --port-base (the --insecure one's is
			     * N + 100); default 27400 */
	double *rooms_per_s; /* rooms: where the rate run's rooms/s goes */
	int record;         /* --record: each figure's ratio appended to the
			     * history file (history.h) */
	int hops;           /* demo, rooms: --hops, where the rooms' time
			     * went, hop by hop (bench_hops.h) */
	int stream_limit;   /* demo: the group moves its bytes over tcp
			     * (--transport tcp): a raw loopback stream of
			     * the same bytes is its limit too */
	int netns;          /* demo --spawn --transport tcp: --netns, the
			     * group split over two namespaces (netns.h) */
	const struct bench_netns *ns; /* those namespaces, once made: the
				       * stream runs between them */
};

/* Takes the mode word (argv[1]) and the mode flags out of argv, in place
 * (argv keeps its NULL end). For rooms with --spawn, puts the tiny-room
 * shape flags in front of the caller's (which still win). Returns 0, or
 * KVW_EXIT_USAGE after printing `kv-bench: fatal: ...`. On 0, *argv is
 * a new array (the strings stay argv's) for the caller to free once the
 * run is over; on a refusal nothing is left allocated. */
int kvb_opts_parse(int *argc, char ***argv, struct kvb_opts *o);

/* The workload defaults of a mode (demo: unchanged). */
void kvb_defaults(const struct kvb_opts *o, struct bench_config *cfg);

/* The usage lines of the modes, for kv-bench --help. */
void kvb_usage(FILE *f);

/* Measures mode o->mode over the loaded group and prints the result (human
 * table, or JSON with --json; demo also keeps its summary line). arg is
 * the struct kvb_progress (plot.h) progress is called with. Returns the
 * process exit code. */
int kvb_run(const struct kvb_opts *o, const struct runinfo *ri,
	    const struct bench_config *cfg, bench_progress_fn *progress,
	    void *arg);

/* The machine line (or JSON object, no newline), with the KV page bytes of
 * this run. */
/* kv-bench tcp (tcp.c): the tcp transport against a raw stream. */
int kvb_tcp_main(int argc, char **argv, const struct kvb_opts *o);

void kvb_machine_print(FILE *f, int json, uint64_t kv_page_bytes);

/* kv-bench copy (copy.c): argv without the mode word. Returns the exit
 * code. */
int kvb_copy_main(int argc, char **argv, const struct kvb_opts *o);

#endif
