/*
 * recfile.h - the small record files that engines leave beside their pool
 * for the group's processes (gpool.h's GPU record, hostmem.h's host memory
 * record): read whole, as untrusted bytes, by one function.
 */
#ifndef KVW_RECFILE_H
#define KVW_RECFILE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

/* Reads the regular file at path (a symlink is refused) of at most max
 * bytes into *buf (the caller frees it) and *len, with its stat in *st.
 * `what` names it in err. 0; KVW_ENOENT (none), KVW_EINVAL (not a regular
 * file, or longer than max), KVW_ENOMEM, KVW_ESYS. */
int recfile_read(const char *path, size_t max, const char *what,
		 uint8_t **buf, size_t *len, struct stat *st, char *err,
		 size_t errlen);

#endif
