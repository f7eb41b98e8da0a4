/*
 * kvwire.pml - the room protocol of kvwire as a Promela model, checked by
 * spin (`make model`; docs/MODEL.md says what is modelled and how to read
 * a trail). The state numbers, legal[from][to] and the table of which
 * message each role acts on in which state are not written here: they are
 * generated at build time from lib/table/rtab_states.def, the file the C
 * code is built from (tables.pml, made by model/tables.c).
 *
 * Bounds (small on purpose, each one stated):
 *   - one room id, used by NINC = 2 incarnations (the engine CLEARs it and
 *     begins it again: room-id reuse);
 *   - one prefill rank, one decode rank; the prefill's ack-target set holds
 *     NACK = 2 entries (one decode aborting both incarnations of the id);
 *   - NEPOCH = 2 epochs of the prefill control (it crashes at most once);
 *   - NCHUNK = 2 chunks (jobs, batches) per room; the last one also
 *     carries the room's metadata rows (every AUX buffer's row, and the
 *     state components'), written by the same job after its pages;
 *   - the decode may hold a prefix of the room already (its prefix cache):
 *     0, 1 or all NCHUNK chunks' pages, said in XFER_INFO; the prefill
 *     engine then sends the others, and on a full hit one last chunk
 *     without pages, for the metadata;
 *   - every channel holds at most a few messages (see the declarations).
 * With -DTCP a sink process of kv-receiver is the only writer of decode
 * memory (the tcp design); without it the worker writes decode memory
 * itself (shm).
 *
 * Mutations: -DMUT_<NAME> breaks one rule on purpose (model/check.sh runs
 * each against the property that must catch it).
 */
#include "tables.pml"

#define NINC 2
#define NACK 2
#define NEPOCH 2
#define NCHUNK 2

#define LIVE(s) ((s) == BOOTSTRAPPING || (s) == WAITING || (s) == TRANSFERRING)
/* The specification's own idea of terminal, independent of the generated
 * table (a change to the table must not change what is checked). */
#define SPEC_TERMINAL(s) ((s) == SUCCESS || (s) == FAILED || (s) == CLEARED)

mtype = { XFER, ABORT, ACK, STATUS };

/* ---- decode (kv-receiver) room table and private state ---------------- */
byte dst = CLEARED;  /* state of the current incarnation */
byte dinc = 0;       /* its incarnation = its token (0: none begun yet) */
bool dsent;          /* XFER_INFO sent to the prefill */
bool armed;          /* failed and armed: ABORT sent, acks counted */
bool rel;            /* releasable: the engine may reuse the pages */
byte dpe = 0;        /* prefill epoch the decode knows (heartbeat, frames) */
byte landed;         /* chunks in this incarnation's pages (held or landed) */
byte hp;             /* chunks its decode holds already (its prefix) */
bool metal;          /* its metadata rows (aux, state) landed */

/* ---- prefill (kv-sender) room table and private state ----------------- */
byte pst = CLEARED;
byte pinc = 0;       /* incarnation of the prefill room */
bool pbegun;         /* SEND_BEGIN seen for pinc */
byte ptok;           /* token of the XFER_INFO for pinc (0: none yet) */
byte outstanding;    /* jobs dispatched, not yet done */
byte chunks;         /* chunks the prefill engine has handed over */
byte php;            /* the decode prefix its XFER_INFO said (chunks) */
byte acks[NACK];     /* ack targets: tokens owed an ABORT_ACK (0: empty) */
byte epoch = 0;      /* the prefill control's incarnation */

#ifdef TCP
byte sinflight;      /* token of the batch the sink is writing (0: none) */
#endif

/* ---- ghosts: what the properties observe ------------------------------ */
bool badwrite;       /* a write landed in released or reused pages */
bool shortsucc;      /* decode Success while a chunk had not landed */
bool leftterm;       /* a terminal state left for anything but Cleared */
bool resurrect;      /* a message of another incarnation changed a room */
bool wrongbatch;     /* a batch of another incarnation was written */
byte pend;           /* jobs of the current epoch not yet past their write */

chan d2p = [4] of { mtype, byte, byte, byte }; /* type, token, decode's idea of the epoch, prefix */
chan p2d = [3] of { mtype, byte, byte, bit }; /* type, token, epoch, ok */
chan w2d = [2] of { byte, byte, bit };        /* STATUS from the worker: token, epoch, ok */
chan jobq = [2] of { byte, byte, bit, byte, bit }; /* token, incarnation, last, epoch, has pages */
chan done = [2] of { byte, byte };            /* incarnation, epoch */
#ifdef TCP
chan w2s = [1] of { byte, bit, bit };         /* batch: token, last, has pages */
chan s2w = [1] of { bit };                    /* batch acked */
#endif

/* A store of a room state, watched by the `absorbing` property. */
inline store(st, to)
{
	if
	:: SPEC_TERMINAL(st) && to != CLEARED -> leftterm = 1
	:: else -> skip
	fi;
	st = to
}

/* CAS against the generated legal table, as rtab_transition does. */
inline trans(st, to)
{
	if
	:: LEGAL(st, to) -> store(st, to)
	:: else -> skip
	fi
}

/* Bytes of token tk land in decode memory (pg: a chunk's pages; lst:
 * the last chunk, with the metadata rows). A batch of another
 * incarnation (tk != dinc) writing is `wrongbatch`: with the room id
 * reused, its pages may be the new incarnation's. */
inline land(tk, lst, pg)
{
	if
	:: tk == dinc && !rel && dst != CLEARED ->
		landed = landed + pg;
		if
		:: lst -> metal = 1
		:: else -> skip
		fi
	:: else ->
		badwrite = 1;
		if
		:: tk != dinc -> wrongbatch = 1
		:: else -> skip
		fi
	fi
}

/* Decode fails its room and arms it before sending ABORT to the target. */
inline d_fail()
{
	if
	:: LIVE(dst) ->
		trans(dst, FAILED);
		if
		:: dsent -> armed = 1; d2p ! ABORT, dinc, dpe, 0
		:: else -> rel = 1 /* nothing was ever asked of a prefill */
		fi
	:: else -> skip
	fi
}

/* Whether nothing can still write this incarnation's pages: tcp asks its
 * own sink; shm has only the prefill's word (the ack). */
#ifdef TCP
#ifdef MUT_SINK_NO_WAIT
#define QUIET (1)
#else
#define QUIET (sinflight != dinc)
#endif
#else
#define QUIET (1)
#endif

/* When the release deadline may fire. tcp: once the sink is quiet. shm:
 * only the prefill can tell nothing is in flight, so the deadline is
 * assumed to come after the prefill has read everything the decode sent
 * and its last job of the room has written (the deadline is minutes, a
 * batch milliseconds); docs/MODEL.md. */
#ifdef TCP
#define LATE_ENOUGH QUIET
#else
#define LATE_ENOUGH (empty(d2p) && pend == 0)
#endif

/* Chunks the prefill engine sends: those after the decode's prefix, or
 * one without pages on a full hit (the metadata must still go). */
#define NSEND (php == NCHUNK -> 1 : NCHUNK - php)

/* The engines of both sides: begin, chunk, stall, clear, begin again. */
proctype engine()
{
end:	do
	/* decode engine: RECV_BEGIN of the next incarnation of the id */
	:: atomic { dinc < NINC && dst == CLEARED ->
		dinc++; dst = BOOTSTRAPPING; dsent = 0; armed = 0; rel = 0;
		metal = 0;
		if
		:: hp = 0
		:: hp = 1
		:: hp = NCHUNK
		fi;
		landed = hp }
	/* decode engine: CLEAR once Success, or failed and releasable */
	:: atomic { dst == SUCCESS || (dst == FAILED && rel) -> trans(dst, CLEARED) }
	/* prefill engine: SEND_BEGIN (the slot is reused only with no job) */
	:: atomic { pinc < NINC && pst == CLEARED && outstanding == 0 ->
		pinc++; pst = BOOTSTRAPPING; pbegun = 1; ptok = 0; chunks = 0;
		php = 0 }
	/* prefill engine: SEND_BEGIN for a room an XFER_INFO opened */
	:: atomic { pinc > 0 && !pbegun && pst != CLEARED -> pbegun = 1; chunks = 0 }
	/* kv-sender: every destination in and the engine begun */
	:: atomic { pbegun && pst == BOOTSTRAPPING && ptok == pinc -> trans(pst, WAITING) }
	/* prefill engine: SEND_CHUNK, acted on as the table says */
	/* (it reads the decode's prefix at WaitingForInput, as SGLang's
	 * finalize_bootstrap does: SEND_CHUNK is taken only from then on) */
	:: atomic { pbegun && chunks < NSEND ->
		if
		:: ACCEPTS(R_PREFILL, M_SEND_CHUNK, pst) ->
			trans(pst, TRANSFERRING);
			chunks++; outstanding++; pend++;
			jobq ! ptok, pinc, (chunks == NSEND), epoch,
			       (php < NCHUNK);
#ifdef MUT_STATUS_EARLY
			/* Success when the last job is dispatched, not done */
			if
			:: chunks == NSEND && ptok != 0 ->
				trans(pst, SUCCESS); w2d ! ptok, epoch, 1
			:: else -> skip
			fi
#endif
#ifdef MUT_HIT_NO_JOB
		/* a full hit taken as nothing to move: Success, no job */
		:: php == NCHUNK && ACCEPTS(R_PREFILL, M_SEND_CHUNK, pst) &&
		   ptok != 0 ->
			trans(pst, TRANSFERRING); trans(pst, SUCCESS);
			chunks = NSEND; w2d ! ptok, epoch, 1
#endif
		:: TERMINAL(pst) -> chunks = NSEND /* dropped */
		fi }
	/* prefill engine stalls for good (a hung engine): deadlines must act */
	:: atomic { pbegun && chunks < NSEND -> chunks = NSEND }
	/* prefill engine: CLEAR a terminal room (ack targets survive it) */
	:: atomic { pbegun && (pst == SUCCESS || pst == FAILED) ->
		trans(pst, CLEARED); pbegun = 0 }
	od
}

/* kv-receiver's STATUS handler (tk, ep, ok: the frame). */
inline on_status()
{
	if
	:: ep < dpe -> skip /* a retired epoch: stale */
	:: else ->
		if
		:: ep > dpe -> dpe = ep; d_fail() /* a restart: fail */
		:: else -> skip
		fi;
		if
#ifdef MUT_STATUS_NO_TOKEN
		:: ACCEPTS(R_DECODE, M_STATUS, dst) && dsent ->
#else
		:: ACCEPTS(R_DECODE, M_STATUS, dst) && dsent && tk == dinc ->
#endif
			if
			:: tk != dinc -> resurrect = 1
			:: else -> skip
			fi;
			if
			:: ok ->
				if
				:: landed < NCHUNK || !metal -> shortsucc = 1
				:: else -> skip
				fi;
				trans(dst, SUCCESS)
			:: else -> d_fail()
			fi
		:: else -> skip
		fi
	fi
}

/* kv-receiver: XFER_INFO out, STATUS and ABORT_ACK in. */
proctype decode()
{
	byte tk, ep;
	bit ok;
	mtype t;

end:	do
	:: atomic { dst == BOOTSTRAPPING && !dsent ->
		d2p ! XFER, dinc, dpe, hp; dsent = 1; trans(dst, WAITING) }
	/* STATUS from the worker's socket, or from a restarted control */
	:: atomic { w2d ? tk, ep, ok -> on_status() }
	:: atomic { p2d ? STATUS, tk, ep, ok -> on_status() }
	:: atomic { p2d ? ACK, tk, ep, ok ->
		if
		:: ep >= dpe && ACCEPTS(R_DECODE, M_ABORT_ACK, dst) && armed &&
		   tk == dinc && !rel && QUIET -> rel = 1
		:: else -> skip /* tcp: released once its sink is quiet */
		fi;
		if
		:: ep > dpe -> dpe = ep
		:: else -> skip
		fi }
#ifdef TCP
	/* tcp: an armed room is releasable once no batch of it is in flight;
	 * the decode never waits on a prefill that may be dead. */
	:: atomic { dst == FAILED && armed && !rel && QUIET -> rel = 1 }
#endif
	od
}

/* kv-sender's control: XFER_INFO, ABORT, JOB_DONE, acks, one crash. */
proctype prefill()
{
	byte tk, de, inc, ep, ph;
	byte i;

end:	do
	:: atomic { d2p ? XFER, tk, de, ph ->
		if
		:: de != epoch ->
			/* it never REGISTERed with this incarnation */
			p2d ! STATUS, tk, epoch, 0
		:: else ->
			if
			:: tk == pinc + 1 && pst == CLEARED && outstanding == 0 ->
				/* XFER_INFO before SEND_BEGIN opens the room */
				pinc = tk; pst = BOOTSTRAPPING; pbegun = 0;
				chunks = 0; ptok = tk; php = ph
			:: tk == pinc && ACCEPTS(R_PREFILL, M_XFER_INFO, pst) ->
				ptok = tk; php = ph
			:: else -> skip /* late, or its room is not free: ignored */
			fi
		fi }
	:: atomic { d2p ? ABORT, tk, de, ph ->
		/* failed FIRST, then the requester joins the ack targets */
		if
		:: tk == pinc && tk == ptok && ACCEPTS(R_PREFILL, M_ABORT, pst) ->
			if
			:: LIVE(pst) -> trans(pst, FAILED)
			:: else -> skip
			fi
		:: else -> skip
		fi;
		if
		:: acks[0] == 0 -> acks[0] = tk
		:: acks[0] != 0 && acks[1] == 0 -> acks[1] = tk
		:: else -> assert(0) /* beyond the bound NACK */
		fi }
	/* an ack goes once the room has nothing outstanding */
	:: atomic { acks[0] != 0 &&
#ifdef MUT_ACK_EARLY
		1 ->
#else
		(acks[0] != pinc || outstanding == 0) ->
#endif
		p2d ! ACK, acks[0], epoch, 1; acks[0] = acks[1]; acks[1] = 0 }
	:: atomic { done ? inc, ep ->
		if
		:: ep == epoch && inc == pinc && outstanding > 0 -> outstanding--
		:: else -> skip
		fi }
	/* crash and restart with a new epoch: the table survives (live rooms
	 * fail, outstanding zeroed), private state and queues are lost, the
	 * workers die with it (PR_SET_PDEATHSIG) */
	:: atomic { epoch + 1 < NEPOCH ->
		epoch++;
		if
		:: LIVE(pst) -> trans(pst, FAILED)
		:: else -> skip
		fi;
		outstanding = 0; pend = 0; ptok = 0;
		acks[0] = 0; acks[1] = 0; pbegun = 0;
		do
		:: d2p ? _, _, _, _
		:: jobq ? _, _, _, _, _
		:: done ? _, _
		:: empty(d2p) && empty(jobq) && empty(done) -> break
		od }
	od
}

/* A worker: re-checks the room, moves the bytes, re-checks, reports. A
 * worker of a dead epoch does nothing more. */
proctype worker()
{
	byte tk, inc, ep;
	bit last, ok, pg;
#ifdef MUT_META_LATE
	bit late;
#endif

end:	do
	:: jobq ? tk, inc, last, ep, pg ->
		atomic {
		if
		:: ep == epoch && inc == pinc && ACCEPTS(R_WORKER, M_JOB, pst) ->
			ok = 1
		:: else ->
			ok = 0;
			if
			:: ep == epoch -> pend--
			:: else -> skip
			fi
		fi }
		if
		:: ok ->
#ifdef TCP
			w2s ! tk, last, pg;
			s2w ? ok;
			atomic {
			if
			:: ep == epoch -> pend--
			:: else -> skip
			fi }
#else
			atomic {
			if
#ifdef MUT_META_LATE
			/* the metadata rows as a write after the status */
			:: ep == epoch -> land(tk, 0, pg); pend--
#else
			:: ep == epoch -> land(tk, last, pg); pend--
#endif
			:: else -> skip
			fi }
#endif
		:: else -> skip
		fi;
		atomic {
		if
		:: ep != epoch -> skip /* died with its control */
		:: ep == epoch && ok && last ->
#ifdef MUT_SUCCESS_STORE
			store(pst, SUCCESS); /* a plain store, not a CAS */
#else
			trans(pst, SUCCESS);
#endif
			ok = (pst == SUCCESS);
			if
			:: ok && ptok != 0 -> w2d ! ptok, ep, 1
			:: else -> skip
			fi;
#ifdef MUT_META_LATE
			late = last;
#endif
			done ! inc, ep
		:: ep == epoch && !ok && LIVE(pst) && inc == pinc ->
			/* the batch was lost: a transfer error */
			trans(pst, FAILED);
			if
			:: ptok != 0 -> w2d ! ptok, ep, 0
			:: else -> skip
			fi;
			done ! inc, ep
		:: else -> done ! inc, ep
		fi }
#ifdef MUT_META_LATE
		atomic {
		if
		:: late && tk == dinc && !rel && dst != CLEARED -> metal = 1
		:: else -> skip
		fi;
		late = 0 }
#endif
	od
}

#ifdef TCP
/* kv-receiver's sink: marks the batch in flight, THEN checks the room,
 * writes, clears the mark. A broken connection loses the batch. */
proctype sink()
{
	byte tk;
	bit lst, pg;
	bool live;

end:	do
	:: w2s ? tk, lst, pg ->
		if
		:: sinflight = tk;
		   /* The batch incarnation rule: a batch carries its room's
		    * incarnation token; one of another incarnation is read
		    * and discarded, never written. */
#ifdef MUT_BATCH_NO_INC
		   live = (!armed && dst != CLEARED && !rel);
#else
		   live = (tk == dinc && !armed && dst != CLEARED && !rel);
#endif
		   if
		   :: live -> land(tk, lst, pg)
		   :: else -> skip
		   fi;
		   sinflight = 0;
		   s2w ! live
		:: s2w ! 0 /* connection broken: the batch is lost */
		fi
	od
}
#endif

/* kv-heartbeat: a new prefill epoch fails the live room. */
proctype heartbeat()
{
end:	do
	:: atomic { dpe < epoch -> dpe = epoch; d_fail() }
	od
}

/* Deadlines, as a timeout that may fire at any moment. */
proctype deadlines()
{
end:	do
#ifndef MUT_NO_DECODE_DEADLINE
	/* decode: waiting-timeout (or the engine's RECV_ABORT) */
	:: atomic { LIVE(dst) -> d_fail() }
#endif
	/* prefill: bootstrap-timeout */
	:: atomic { LIVE(pst) -> trans(pst, FAILED) }
#ifndef MUT_NO_RELEASE_DEADLINE
	/* decode: the release deadline, loudly */
	:: atomic { dst == FAILED && armed && !rel && LATE_ENOUGH -> rel = 1 }
#endif
	od
}

init
{
	atomic {
		run engine(); run decode(); run prefill(); run worker();
		run heartbeat(); run deadlines();
#ifdef TCP
		run sink();
#endif
	}
}

/* ---- properties -------------------------------------------------------- */

/* A room reaches a terminal state on every side. */
ltl terminal { [] ((LIVE(dst) -> <> !LIVE(dst)) && (LIVE(pst) -> <> !LIVE(pst))) }
/* No write lands in decode pages after they were declared releasable (or
 * reused by the next incarnation). */
ltl quiescence { [] !badwrite }
/* A terminal state is left only for Cleared. */
ltl absorbing { [] !leftterm }
/* A message of another (cleared) incarnation never changes a room. */
ltl no_resurrect { [] !resurrect }
/* An armed room is acked, or released by its deadline. */
ltl abort_acked { [] ((armed && !rel) -> <> rel) }
/* A batch of another incarnation of the room id is never written (the
 * sink's batch incarnation rule; tcp). */
ltl batch_incarnation { [] !wrongbatch }
/* Decode sees Success only for a room whose bytes all landed: every
 * chunk's pages (those of its prefix it held already) and the last
 * one's metadata rows. */
ltl success_complete { [] !shortsucc }
