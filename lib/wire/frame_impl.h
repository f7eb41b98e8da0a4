/*
 * frame_impl.h - what frame.c (the cursors and entry points) and
 * frame_check.c (the value checks) share. Not for use outside the codec:
 * everything else goes through frame_decode() and frame_encode().
 */
#ifndef KVW_FRAME_IMPL_H
#define KVW_FRAME_IMPL_H

#include "frame.h"

/* The part 2 view (page indices) of a type that has one, or NULL. */
const struct frame_u32s *frame_msg_pages(const struct frame_msg *m);

/* Checks the values of a message whose header type is known: enum ranges,
 * caps, flags. Returns 0 or KVW_EINVAL with the reason in err. */
int frame_msg_check(const struct frame_msg *m, char *err, size_t errlen);

#endif
