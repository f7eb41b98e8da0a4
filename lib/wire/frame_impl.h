/*
 * frame_impl.h - what frame.c (the cursors and entry points) and
 * frame_check.c (the value checks) share, besides the rows of
 * frame_bodies.def that both include. Not for use outside the codec:
 * everything else goes through frame_decode() and frame_encode().
 */
#ifndef KVW_FRAME_IMPL_H
#define KVW_FRAME_IMPL_H

#include "frame.h"

/* Checks the values of a message whose header type is known: enum ranges,
 * caps, flags. Returns 0 or KVW_EINVAL with the reason in err. */
int frame_msg_check(const struct frame_msg *m, char *err, size_t errlen);

#endif
