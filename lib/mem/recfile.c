/*
 * recfile.c - reading an engine's record file whole (see recfile.h).
 */
#include "recfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/kvw.h"

int recfile_read(const char *path, size_t max, const char *what,
		 uint8_t **buf, size_t *len, struct stat *st, char *err,
		 size_t errlen)
{
	uint8_t *b = NULL;
	int fd, rc = 0;

	*buf = NULL;
	*len = 0;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return kvw_errf(err, errlen,
				errno == ENOENT ? KVW_ENOENT : KVW_ESYS,
				"%s: %s: %s", what, path, strerror(errno));
	if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode) ||
	    st->st_size > (off_t)max)
		rc = kvw_errf(err, errlen, KVW_EINVAL, "%s: %s is not a record",
			      what, path);
	else if ((b = malloc((size_t)st->st_size + 1)) == NULL)
		rc = kvw_errf(err, errlen, KVW_ENOMEM, "out of memory");
	else if (read(fd, b, (size_t)st->st_size) != (ssize_t)st->st_size)
		rc = kvw_errf(err, errlen, KVW_ESYS, "%s: read %s: %s", what,
			      path, strerror(errno));
	close(fd);
	if (rc) {
		free(b);
		return rc;
	}
	*buf = b;
	*len = (size_t)st->st_size;
	return 0;
}
