/*
 * placement_body.h — the placement rule (docs/SPEC.md "Placement"), the one
 * place it is written: where a round puts a table's survivors, how its
 * moves compose into a call's move list, and a call's final mapping.
 *
 * A round of one full table: sp[0 .. C) all valid, the call's tokens
 * (positions >= pos0) the top block; ev[0 .. r) the evicted slots,
 * ascending. Its split (kve_round_split_of):
 *
 *   low    slots below low hold old tokens; the call's are low .. C - 1
 *   e_old  evicted slots below low: ev[0 .. e_old)
 *   bound  low - e_old: the old survivors end here, the call's follow
 *   holes  evicted slots below bound: ev[0 .. holes), filled by the old
 *          survivors of slots bound .. low - 1, which are that many
 *
 * The w-th slot from bound (slot bound + w, w < e_old) holds, when it is
 * not evicted, the k-th old survivor above the bound and moves to hole
 * ev[k]; a call survivor at slot s moves down by the evicted slots below it.
 *
 * Each step of a round is written once, here, per slot: whether a slot is
 * old (kve_round_slot_old), the check of an evicted entry
 * (kve_round_ev_bad), an old slot's move (kve_round_old_step), a call
 * slot's destination (kve_round_call_step), a freed slot
 * (kve_round_free_step). A loop owns only its iteration: kve_round_table
 * walks the slots in order on one thread; the GPU's block per table
 * (kernels_cuda/round_body.h) spreads them over its threads, finds each
 * slot's index into ev by binary search and adds the barriers. Both must
 * give the same slots, pairs (and their order), counts and return codes.
 */
#ifndef KVE_PLACEMENT_BODY_H
#define KVE_PLACEMENT_BODY_H

#include "kve_device.h"

/* The first index of the ascending slots ev[lo .. hi) whose slot is >= @p t
 * (@p hi when none): how many of them lie below t, plus lo. */
KVE_FN uint32_t kve_slots_lower(const int32_t *ev, uint32_t lo, uint32_t hi, uint32_t t)
{
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if ((uint32_t)ev[mid] < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Whether entry @p i of a round's evicted list breaks the rule (a slot
 * within 0 .. C - 1, ascending); the round then changes nothing. */
KVE_FN int kve_round_ev_bad(const int32_t *ev, uint32_t i, uint32_t C)
{
    return ev[i] < 0 || (uint32_t)ev[i] >= C || (i && ev[i] <= ev[i - 1]);
}

/* A round's split (see above). */
typedef struct kve_round_split {
    uint32_t low, e_old, bound, holes;
} kve_round_split;

/* The first index of the ascending slots ev[lo .. hi) whose slot is >= @p t,
 * as kve_slots_lower, found by a walk from lo when @p walk is 1: on one
 * thread, for the few slots a round evicts, a walk whose branches the CPU
 * predicts is cheaper than a binary search (the CPU's decode step runs a
 * round per table). @p walk is a constant at every call. */
KVE_FN uint32_t kve_slots_lower_by(const int32_t *ev, uint32_t lo, uint32_t hi, uint32_t t,
                                   int walk)
{
    if (!walk)
        return kve_slots_lower(ev, lo, hi, t);
    while (lo < hi && (uint32_t)ev[lo] < t)
        lo++;
    return lo;
}

/* The split of a round whose call block starts at slot @p low, ev valid;
 * @p walk as kve_slots_lower_by's (1 on one thread, 0 for a block). */
KVE_FN kve_round_split kve_round_split_of(const int32_t *ev, uint32_t r, uint32_t low, int walk)
{
    kve_round_split p;
    p.low = low;
    p.e_old = kve_slots_lower_by(ev, 0, r, low, walk);
    p.bound = low - p.e_old;
    p.holes = kve_slots_lower_by(ev, 0, p.e_old, p.bound, walk);
    return p;
}

/* A step's answer for a slot that is evicted: it moves nothing. */
#define KVE_ROUND_EVICTED 0xffffffffu

/* Whether slot @p s of a full table holds an old token (one written before
 * the call): low is 1 + the highest such slot. */
KVE_FN int kve_round_slot_old(const int32_t *sp, uint32_t s, int32_t pos0) { return sp[s] < pos0; }

/* The step of old slot @p s (bound <= s < low), ev[@p i] the first evicted
 * slot at or above it (holes <= i <= e_old): unless s is evicted
 * (KVE_ROUND_EVICTED), its token moves to hole ev[k], k the count of old
 * survivors from bound up to s (always < holes); returns k, the index of
 * its pair in a move list empty before the round. ev[k] < bound <= s: no
 * other slot's step reads the hole. */
KVE_FN uint32_t kve_round_old_step(int32_t *sp, const int32_t *ev, kve_round_split p, uint32_t s,
                                   uint32_t i)
{
    if (i < p.e_old && (uint32_t)ev[i] == s)
        return KVE_ROUND_EVICTED;
    uint32_t k = s - p.bound - (i - p.holes);
    sp[ev[k]] = sp[s];
    return k;
}

/* The step of call slot @p s (low <= s < C), ev[@p i] the first evicted slot
 * at or above it (e_old <= i <= r): its slot after the round (s minus the
 * evicted slots below it, never above s), or KVE_ROUND_EVICTED. The loop
 * moves the token: a block reads a chunk of slots before it writes any. */
KVE_FN uint32_t kve_round_call_step(const int32_t *ev, uint32_t r, uint32_t s, uint32_t i)
{
    if (i < r && (uint32_t)ev[i] == s)
        return KVE_ROUND_EVICTED;
    return s - i;
}

/* The step of freed slot @p i (i < r): the round's top r slots end empty. */
KVE_FN void kve_round_free_step(int32_t *sp, uint32_t C, uint32_t r, uint32_t i)
{
    sp[C - r + i] = -1;
}

/* Compose one step of an old token into a move list (pairs src, dst, in
 * cache slots as they were before the call): the token at @p a moves to
 * @p b, or is evicted when b = -1. Only the first @p earlier pairs (those
 * of the call's earlier rounds) can end at @p a: a round's own pairs go
 * from above its bound to holes below it, each source once. Returns 1 when
 * the list is full. */
KVE_FN int kve_moves_compose(int32_t *mv, uint32_t *n, uint32_t cap, uint32_t earlier, int32_t a,
                             int32_t b)
{
    for (uint32_t k = 0; k < earlier; k++) {
        if (mv[2 * k + 1] != a)
            continue;
        if (b >= 0) {
            mv[2 * k + 1] = b; /* moved before in this call: only where it ends changes */
        } else {
            --*n;
            mv[2 * k] = mv[2 * *n];
            mv[2 * k + 1] = mv[2 * *n + 1];
        }
        return 0;
    }
    if (b < 0)
        return 0; /* evicted where it was written: nothing to move */
    if (*n >= cap)
        return 1;
    mv[2 * *n] = a;
    mv[2 * *n + 1] = b;
    ++*n;
    return 0;
}

/*
 * One round's placement of one full table, on one thread: sp and ev as
 * above. Afterwards slots 0 .. C - r - 1 are valid: the old survivors
 * below (those above fill the holes, lowest to lowest), then the call's
 * survivors in position order; slots C - r .. C - 1 are -1. When @p mv is
 * not NULL every old token that moves is composed into the list. Returns 0;
 * 1 when ev is not ascending within 0 .. C - 1 or the list overflows (the
 * table may then be partly placed).
 */
KVE_FN int kve_round_table(int32_t *sp, const int32_t *ev, uint32_t C, uint32_t r, int32_t pos0,
                           int32_t *mv, uint32_t *n_mv, uint32_t cap)
{
    for (uint32_t i = 0; i < r; i++)
        if (kve_round_ev_bad(ev, i, C))
            return 1;
    uint32_t low = C;
    while (low > 0 && !kve_round_slot_old(sp, low - 1, pos0))
        low--;
    kve_round_split p = kve_round_split_of(ev, r, low, 1);
    int bad = 0;
    for (uint32_t i = 0; mv && i < p.e_old; i++) /* removals keep earlier rounds' pairs first */
        bad |= kve_moves_compose(mv, n_mv, cap, *n_mv, ev[i], -1);
    uint32_t earlier = mv ? *n_mv : 0; /* the pairs of the call's earlier rounds */
    uint32_t j = p.holes;              /* ev[j]: the next evicted slot at or above s */
    for (uint32_t s = p.bound; s < low; s++) {
        uint32_t k = kve_round_old_step(sp, ev, p, s, j);
        if (k == KVE_ROUND_EVICTED)
            j++;
        else if (mv)
            bad |= kve_moves_compose(mv, n_mv, cap, earlier, (int32_t)s, ev[k]);
    }
    /* The call's survivors move down (destination <= source, ascending). */
    for (uint32_t s = low; s < C; s++) {
        uint32_t d = kve_round_call_step(ev, r, s, j);
        if (d == KVE_ROUND_EVICTED)
            j++;
        else
            sp[d] = sp[s];
    }
    for (uint32_t i = 0; i < r; i++)
        kve_round_free_step(sp, C, r, i);
    return bad;
}

/* The call's final mapping in one table (FINAL): tokens i < count at
 * positions pos0 + i, held in the top block of sp[0 .. n_valid); map entry
 * of token i at map[i * stride]. */
KVE_FN void kve_final_table(const int32_t *sp, uint32_t n_valid, int32_t pos0, uint32_t count,
                            int64_t *map, size_t stride)
{
    for (uint32_t i = 0; i < count; i++)
        map[(size_t)i * stride] = -1;
    for (uint32_t s = n_valid; s-- > 0 && sp[s] >= pos0;) {
        uint32_t i = (uint32_t)(sp[s] - pos0);
        if (i < count)
            map[(size_t)i * stride] = s;
    }
}

#endif /* KVE_PLACEMENT_BODY_H */
