/*
 * history.h - kv-bench's record of its ratios over commits (issue 35 item
 * 4): `--record` appends each figure of a run to a CSV file (by default
 * bench/history.csv, or $KVW_BENCH_HISTORY), one line per figure:
 *
 *   utc,commit,mode,figure,value,limit,ratio
 *
 * with the commit of the tree kv-bench runs in (`git rev-parse --short
 * HEAD`, else $KVW_COMMIT, else "unknown"). `kv-bench history` reads it
 * back: each figure's ratio run after run, and with --plot a picture of
 * them (gnuplot), so a regression is seen at a glance.
 */
#ifndef KVW_BENCH_HISTORY_H
#define KVW_BENCH_HISTORY_H

#include <stddef.h>

/* The history file: $KVW_BENCH_HISTORY, else "bench/history.csv". */
const char *history_path(void);

/* Appends one figure of this run (the header line first when the file is
 * new). 0, or -1 with why in err. */
int history_record(const char *mode, const char *figure, double value,
		   double limit, double ratio, char *err, size_t errlen);

/* history_record when on, the failure said on stderr (the run's figures
 * stand; the history misses them). */
void history_note(int on, const char *mode, const char *figure, double value,
		  double limit, double ratio);

/* kv-bench history [FILE] [--plot PNG]: argv after the mode word. Prints
 * each figure's ratios in the order recorded (first, last, best, and
 * how the last compares with the best before it); --plot draws them.
 * Returns an exit code. */
int history_main(int argc, char **argv);

#endif
