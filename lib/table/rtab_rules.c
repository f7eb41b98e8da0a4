/*
 * rtab_rules.c - the room protocol's tables, built from rtab_states.def
 * (the one source the Promela model is generated from too): which state
 * moves are legal, which states are terminal, and which messages each role
 * acts on in each state of its room.
 */
#include "rtab.h"

/* Every row kind expands to nothing unless redefined for one pass. */
#define RTAB_STATE(name, term)
#define RTAB_LEGAL(from, to)
#define RTAB_ROLE(name)
#define RTAB_MSG(name)
#define RTAB_ACCEPT(role, msg, state)

/* The .def lists the states in value order, under kvw.h's names. */
#undef RTAB_STATE
#define RTAB_STATE(name, term) RTAB_SEQ_##name,
enum {
#include "rtab_states.def"
	RTAB_SEQ_N
};
#undef RTAB_STATE
#define RTAB_STATE(name, term) \
	_Static_assert((int)RTAB_SEQ_##name == (int)KVW_##name, "state " #name " order");
#include "rtab_states.def"
#undef RTAB_STATE
#define RTAB_STATE(name, term)
_Static_assert((int)RTAB_SEQ_N == (int)KVW_NSTATES, "every state listed once");

/* legal[from][to]: terminal states only go to the Cleared tombstone;
 * Cleared goes nowhere. */
#undef RTAB_LEGAL
#define RTAB_LEGAL(from, to) [KVW_##from][KVW_##to] = 1,
static const unsigned char legal[KVW_NSTATES][KVW_NSTATES] = {
#include "rtab_states.def"
};
#undef RTAB_LEGAL
#define RTAB_LEGAL(from, to)

#undef RTAB_STATE
#define RTAB_STATE(name, term) [KVW_##name] = term,
static const unsigned char terminal[KVW_NSTATES] = {
#include "rtab_states.def"
};
#undef RTAB_STATE
#define RTAB_STATE(name, term)

/* accepts[role][msg]: a mask of RTAB_M(state). */
#undef RTAB_ACCEPT
#define RTAB_ACCEPT(role, msg, state) \
	| (RTAB_ROLE_##role == r && RTAB_MSG_##msg == m ? RTAB_M(KVW_##state) : 0u)
#define ROW(r, m) (0u
#define END )
static unsigned accept_mask(unsigned r, unsigned m)
{
	return ROW(r, m)
#include "rtab_states.def"
	END;
}
#undef ROW
#undef END
#undef RTAB_ACCEPT
#define RTAB_ACCEPT(role, msg, state)

#undef RTAB_ROLE
#define RTAB_ROLE(name) #name,
static const char *const role_names[RTAB_NROLES] = {
#include "rtab_states.def"
};
#undef RTAB_ROLE
#define RTAB_ROLE(name)

#undef RTAB_MSG
#define RTAB_MSG(name) #name,
static const char *const msg_names[RTAB_NMSGS] = {
#include "rtab_states.def"
};

int rtab_legal(unsigned from, unsigned to)
{
	return from < KVW_NSTATES && to < KVW_NSTATES && legal[from][to];
}

int rtab_terminal(unsigned state)
{
	return state < KVW_NSTATES && terminal[state];
}

int rtab_accepts(unsigned role, unsigned state, unsigned msg)
{
	return role < RTAB_NROLES && msg < RTAB_NMSGS && state < KVW_NSTATES &&
	       (accept_mask(role, msg) & RTAB_M(state)) != 0;
}

const char *rtab_role_str(unsigned role)
{
	return role < RTAB_NROLES ? role_names[role] : "?";
}

const char *rtab_msg_str(unsigned msg)
{
	return msg < RTAB_NMSGS ? msg_names[msg] : "?";
}
