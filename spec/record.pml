/*
 * idemkit: the record protocol, for the spin model checker. docs/model.md maps every step to the
 * code that implements it, gives the commands and the state counts.
 *
 * One key, NC requests carrying it (a client's retries, duplicates, a gateway's resend), each a
 * client that retries until it gets an answer, with the server that runs its attempt inline.
 * The store is the global state; every store operation is one atomic step, as in every backend
 * (one SQL statement or function, one Lua script, a critical section without an await).
 *
 * Compile-time switches (spin -DNAME / -DNAME=value):
 *   TX=1           transactional mode (the handler's writes and the completion commit together);
 *                  TX=0 (default): a non-transactional store, the handler's effect is a separate
 *                  write, and a phase (idemkit/patterns definePhases) commits with its checkpoint.
 *   BROKEN_FENCE   complete() without the owner-token check (only "is it in flight?"): must FAIL.
 *   BROKEN_LATE    the engine's cleanup of a claim that landed after storeTimeoutMs releases it
 *                  even when it was a take-over (idemkit before this model): must FAIL (TX=0).
 *   MAXCRASH, MAXSTALL, MAXLATE, MAXDISCARD   the fault budgets (defaults 2, 1, 1, 1).
 *   MAXWIN         how many retention windows the key lives through (default 2: the first one
 *                  ends, the second lasts).
 *
 * Time is the store's clock only. The model keeps what is left of the lease and of the window
 * (the clock process counts both down): only differences to the store's `now` matter, so this is
 * exact for one store clock and keeps the state space finite.
 */

#ifndef TX
#define TX 0
#endif
#ifndef NC
#define NC 3
#endif
#ifndef MAXCRASH
#define MAXCRASH 2
#endif
#ifndef MAXSTALL
#define MAXSTALL 1
#endif
#ifndef MAXLATE
#define MAXLATE 1
#endif
#ifndef MAXDISCARD
#define MAXDISCARD 1
#endif
#ifndef MAXWIN
#define MAXWIN 2
#endif
#define LEASE 2
#define WINDOW 3
#define MAXW (MAXWIN + 1)

#define ABSENT 0
#define INFLIGHT 1
#define COMPLETED 2

/* ---- the record of the key (the store) ---- */
byte st = ABSENT;
byte tok;       /* the current owner token; 0 = none. In the code a claim draws 128 random bits.
                 * Here the token of request i's attempt is i + 1: a request runs one attempt at a
                 * time and its earlier attempts are dead (crashed, or gave up) before it claims
                 * again, so `tok == t` holds exactly when this attempt is the current owner, as
                 * with fresh tokens, and the state space does not count claims. */
byte lease;     /* store-clock units left on the lease */
byte win;       /* store-clock units left in the retention window */
bool rp;        /* the recovery point: phase 1 committed (non-transactional mode) */
byte resp;      /* the stored response: the value the completing attempt answered (its token) */

byte crashes, stalls, lates, discards;

/* ---- what the clock needs to know of the servers ---- */
byte held[NC];    /* the token of the attempt this request's server is running; 0 = none. The code's
                   * Execution is `running` while it is set, until its completion or release (`finished`) */
bool paused[NC];  /* that server is frozen (GC pause, partition from the store): no renewals.
                   * The code's `overtime` (past maxExecutionMs) is a freeze that never thaws */

/* ---- ghost state: what the properties are stated on (never read by the protocol) ---- */
byte owner;          /* 1 + the request whose claim acquired the record last; 0 = none */
bool ownerGone;      /* that attempt stopped renewing at some point (crashed, froze, gave the lease back) */
bool lapsed[NC];     /* this request's current attempt froze at some point */
byte wid;            /* the retention window: a new one starts when a record is created after the */
bool lastReleased;   /* previous one expired, not after a release (nothing happened then) */
byte effects[MAXW];  /* the handler's effects per window */
byte phases[MAXW];   /* phase-1 commits per window (TX=0) */
byte takeovers[MAXW];
byte answer[MAXW];   /* the answer every client of a window must get (set by the first) */
byte ndone;

#define EXPIRED      (win == 0 && (st == COMPLETED || lease == 0))
/* A server that is running and not frozen renews every third of the lease: the store's clock never
 * passes the lease of an owner that is still renewing. This is the timing assumption leases need. */
#define HOLDING(i)   (held[i] != 0 && held[i] == tok && st == INFLIGHT && !paused[i] && lease <= 1)
#define SOMEHOLDING  (HOLDING(0) || HOLDING(1) || HOLDING(2)) /* names NC = 3 requests */
/* A completed record inside its window never changes: asserted before every write to the record. */
#define WRITABLE     assert(!(st == COMPLETED && win > 0))
/* Every fenced write that succeeds is the current owner's. */
#define OWNER_WRITES assert(owner == me + 1)

#ifdef BROKEN_FENCE
#define COMPLETE_FENCE (st == INFLIGHT)
#else
#define COMPLETE_FENCE (st == INFLIGHT && tok == t)
#endif

/* The store's clock advances (nondeterministically, whenever no live owner is due to renew). */
active proctype clock() {
end:
  do
  :: atomic {
       st != ABSENT && (lease > 0 || (win > 0 && wid < MAXWIN)) && !SOMEHOLDING ->
       if :: lease > 0 -> lease-- :: else fi;
       printf("MSC: the store's clock advances (lease left %d)\n", lease);
       /* windows end, except the last one the bound allows (MAXWIN windows in all) */
       if :: win > 0 && wid < MAXWIN -> win-- :: else fi
     }
  od
}

/* store.reap(): deletes records whose window has passed and whose lease (if in flight) ran out. */
active proctype reaper() {
end:
  do
  :: atomic {
       st != ABSENT && EXPIRED ->
       WRITABLE;
       st = ABSENT; tok = 0; rp = 0; resp = 0; lease = 0; win = 0; owner = 0; lastReleased = false;
       printf("MSC: reap deletes the expired record\n")
     }
  od
}

/* Forgets the attempt: its server is gone or gave up; the client will retry. */
#define FORGET  held[me] = 0; t = 0; w = 0; v = 0; over = false; resumed = false; lost = false; consistent = false

/* store.release(ref, t): fenced; deletes an in-flight record (nothing happened). */
#define RELEASE \
    if \
    :: st == INFLIGHT && tok == t -> \
       OWNER_WRITES; WRITABLE; \
       st = ABSENT; tok = 0; rp = 0; lease = 0; win = 0; owner = 0; lastReleased = true \
    :: else /* LeaseLostError: another request owns the key now; nothing of ours to release */ \
    fi

/* store.renew(ref, t, ms): fenced; false (the lease is lost) when the token is no longer current. */
#define RENEW(ms) \
    if \
    :: st == INFLIGHT && tok == t -> OWNER_WRITES; WRITABLE; lease = ms \
    :: else -> lost = true \
    fi

/* Between two steps of a running handler: the lease keeper may renew, the process may crash
 * (its attempt is gone, the client sees a broken connection and retries), or it may freeze. */
inline between() {
  if
  :: skip
  :: atomic { RENEW(LEASE) }
  :: atomic {
       crashes < MAXCRASH -> crashes++; printf("MSC: request %d: its process crashes\n", me);
       if :: tok == t && st == INFLIGHT -> ownerGone = true :: else fi;
       FORGET;
       goto retry
     }
  :: atomic {
       stalls < MAXSTALL -> stalls++; paused[me] = true; lapsed[me] = true;
       printf("MSC: request %d: its process freezes (no renewals)\n", me);
       if :: tok == t && st == INFLIGHT -> ownerGone = true :: else fi
     };
     /* the freeze lasts for any number of other steps (of the clock too) */
     atomic { paused[me] = false; printf("MSC: request %d: its process runs again\n", me) }
  fi
}

active [NC] proctype request() {
  byte me = _pid - 2; /* the clock and the reaper are processes 0 and 1 */
  byte t;             /* this attempt's owner token */
  byte w;             /* its window */
  byte v;             /* the answer */
  bool over;          /* it took the record over */
  bool resumed;       /* it resumes after phase 1 (the record's recovery point) */
  bool lost;          /* a renewal said the token is no longer current (the code's `lost` state) */
  bool consistent;    /* the answer is the stored result */

retry:
  /* store.claim(): ONE atomic step (the PL/pgSQL function, the Lua script, memory's critical
   * section). */
  do
  :: atomic {
       /* in flight under a live lease: 409 request-in-progress; nothing changes, the client retries */
       st == INFLIGHT && !EXPIRED && lease > 0 -> skip
     }
  :: atomic {
    !(st == INFLIGHT && !EXPIRED && lease > 0) ->
    lapsed[me] = false;
    if
    :: st == COMPLETED && !EXPIRED -> v = resp; w = wid; consistent = true;
       printf("MSC: request %d: claim -> completed, replays %d\n", me, v); goto reply
    :: st == INFLIGHT && !EXPIRED ->
       /* lease == 0, take-over: the window and the recovery point stay, the token is new */
       assert(ownerGone); /* only an owner that stopped renewing is ever taken over */
       WRITABLE;
       over = true; resumed = rp; takeovers[wid]++;
       printf("MSC: request %d: claim -> acquired, take-over (resume after phase 1: %d)\n", me, rp)
    :: else ->
       /* absent, or past its window: a new record (and, unless the key was released, a new window) */
       WRITABLE;
       if :: !(st == ABSENT && lastReleased) -> wid++ :: else fi;
       assert(wid < MAXW);
       st = INFLIGHT; win = WINDOW; rp = 0; resp = 0; lastReleased = false;
       printf("MSC: request %d: claim -> acquired, new record (window %d)\n", me, wid)
    fi;
    t = me + 1; tok = t; lease = LEASE; w = wid;
    owner = me + 1; ownerGone = false;
    if
    :: lates < MAXLATE ->
       /* the claim lands after storeTimeoutMs: the client already got 503, and Engine.claim's
        * onLate cleans up (nothing of this attempt ran) */
       lates++; ownerGone = true;
       printf("MSC: request %d: the claim's answer came too late (503); onLate cleans up\n", me);
#ifdef BROKEN_LATE
       RELEASE;
#else
       if
       :: over -> RENEW(0) /* give the lease back: the record keeps its recovery point */
       :: else -> RELEASE
       fi;
#endif
       FORGET;
       goto retry
    :: held[me] = t; break
    fi
  }
  od;

#if TX
  /* ---- transactional mode: the handler's writes and checkpoints wait in its transaction ---- */
  between();
  between();
  if
  :: atomic {
       discards < MAXDISCARD -> discards++;
       /* the handler threw or answered 5xx: the transaction rolls back and the claim is released */
       printf("MSC: request %d: releases the claim (nothing happened)\n", me);
       RELEASE; FORGET; goto retry
     }
  :: atomic {
       /* Execution.complete: tx.complete (fenced UPDATE), then commit. The fenced UPDATE locks the
        * record's row until the commit, so fence, writes and commit act as one step. */
       if
       :: !lost && COMPLETE_FENCE ->
          OWNER_WRITES; WRITABLE;
          st = COMPLETED; resp = t; lease = 0; rp = 1; owner = 0;
          printf("MSC: request %d: commits its effect and the completion\n", me);
          effects[w]++; assert(effects[w] <= 1); /* at most one effect per key per window */
          consistent = true; v = t
       :: else ->
          /* LeaseLostError: rolled back, nothing committed; the client gets 409 lease-lost and retries */
          printf("MSC: request %d: lease lost, rolled back\n", me);
          FORGET; goto retry
       fi
     }
  fi;
#else
  /* ---- a store without a shared transaction ---- */
  if
  :: atomic {
       discards < MAXDISCARD && !resumed -> discards++;
       /* ctx.discard(): validation inside the handler failed before anything ran */
       printf("MSC: request %d: releases the claim (nothing happened)\n", me);
       RELEASE; FORGET; goto retry
     }
  :: between()
  fi;
  atomic {
    if
    :: resumed /* the take-over resumes after phase 1 */
    :: !resumed && st == INFLIGHT && tok == t ->
       /* phase 1 (definePhases, a local phase): its writes and its fenced checkpoint commit together */
       OWNER_WRITES; WRITABLE;
       rp = 1; phases[w]++;
       printf("MSC: request %d: phase 1 commits (window %d, phase-1 commits in it: %d)\n", me, w, phases[w]);
       assert(phases[w] <= 1) /* a committed phase never runs again in its window */
    :: else ->
       /* LeaseLostError: the phase rolls back; phases.run suspends the request (renew 0, fenced,
        * refused too) and rethrows: a 5xx that is not stored; the client retries */
       FORGET; goto retry
    fi
  };
  between();
  /* the handler's own effect: a write the store's record does not commit with */
  atomic {
    effects[w]++;
    printf("MSC: request %d: the handler's effect (window %d, effects in it: %d)\n", me, w, effects[w]);
    /* a second effect only after a take-over in this window (whose owner stopped renewing) */
    assert(effects[w] == 1 || takeovers[w] > 0)
  };
  between();
  /* Execution.complete → store.complete(ref, t, response), fenced by the token */
  atomic {
    if
    :: COMPLETE_FENCE ->
       OWNER_WRITES; WRITABLE;
       st = COMPLETED; resp = t; lease = 0; owner = 0; consistent = true;
       printf("MSC: request %d: completes the record\n", me)
    :: else ->
       /* refused: the response still goes out (the effect happened); only an attempt that froze
        * past its lease can be here (the documented limit of non-transactional stores) */
       printf("MSC: request %d: completion refused (lease lost)\n", me);
       assert(lapsed[me]); consistent = false
    fi;
    v = t
  };
#endif
  /* the process may still die before the answer leaves: the client retries and gets the replay */
  if
  :: atomic { crashes < MAXCRASH -> crashes++; FORGET; goto retry }
  :: skip
  fi;
reply:
  /* The answer reaches the client. Every answer of a window that is the stored result, first or
   * replayed, is the same value. */
  atomic {
    if
    :: consistent ->
       if
       :: answer[w] == 0 -> answer[w] = v
       :: else -> assert(answer[w] == v)
       fi
    :: else
    fi;
    held[me] = 0; ndone++
  }
}

/* Liveness: while the store answers, every client that keeps retrying gets an answer. */
ltl live { <> (ndone == NC) }

/* An instance restarts under its name (startInstance): it registers only once the dead one's
 * registration has lapsed, which a process that renews never lets happen (a second live process
 * with the name is refused), then ends the leases its dead incarnation held (endLeasesOf). So it
 * ends a lease only of an owner that stopped renewing: one that crashed, froze or gave it back.
 * BROKEN_RESTART drops that condition (a duplicate that reclaims a live process's keys): spin must
 * then find a take-over of a live owner. */
active proctype restart() {
end:
  do
  :: atomic {
#ifdef BROKEN_RESTART
       st == INFLIGHT && lease > 0 ->
#else
       st == INFLIGHT && lease > 0 && ownerGone && !SOMEHOLDING ->
#endif
       lease = 0;
       printf("MSC: an instance restarts and ends its dead incarnation's lease\n")
     }
  od
}
