#!/usr/bin/python3
"""kve_oracle — a plain Python reference for kvevict's keep-set v2.

Written directly from docs/SPEC.md, independently of the C library, so that
the two can be checked against each other.  It favours clarity over speed.

Run ``/usr/bin/python3 tests/oracle/kve_oracle.py --self-test`` to check the
oracle's own properties.  Needs Debian's python3-xxhash (xxhash >= 3.0).
"""

import struct
import sys

import xxhash

# The keep-set specification version this oracle implements (KVE_SPEC_VERSION).
SPEC_VERSION = 2

# Mode switches: the same bit values as include/kvevict.h.
PERSISTENT = 1
SHARED_HEADS = 2
SHARED_LAYERS = 4
KEY_FLAGS = PERSISTENT | SHARED_HEADS | SHARED_LAYERS
# Not a key flag: selection by scores (docs/SPEC.md "Scored selection").
SCORED = 16

U32_MAX = 0xFFFFFFFF
U64_MAX = 0xFFFFFFFFFFFFFFFF
I32_MAX = 0x7FFFFFFF


def _check_uint(name, value, limit):
    if not isinstance(value, int) or isinstance(value, bool) or value < 0 or value > limit:
        raise ValueError("%s = %r is not an integer in [0, %d]" % (name, value, limit))


def le32(x):
    return struct.pack("<I", x)


def le64(x):
    return struct.pack("<Q", x)


def xxh3_64(data, seed):
    """XXH3 64-bit with a seed, as libxxhash's XXH3_64bits_withSeed."""
    return xxhash.xxh3_64_intdigest(data, seed=seed)


# ---------------------------------------------------------------------------
# Key
# ---------------------------------------------------------------------------

def seq_seed(seed, seq_id):
    """seq_seed = XXH3_64(LE64(seq_id), seed=seed)."""
    _check_uint("seed", seed, U64_MAX)
    _check_uint("seq_id", seq_id, U64_MAX)
    return xxh3_64(le64(seq_id), seed)


def key_message(layer, head, pos, round_, flags=0):
    """The 16 hashed bytes, after the mode switches are applied."""
    _check_uint("layer", layer, U32_MAX)
    _check_uint("head", head, U32_MAX)
    _check_uint("pos", pos, U32_MAX)
    _check_uint("round", round_, U32_MAX)
    _check_uint("flags", flags, U32_MAX)
    if flags & ~KEY_FLAGS:
        raise ValueError("flags = %#x has bits outside PERSISTENT|SHARED_HEADS|SHARED_LAYERS" % flags)
    if flags & PERSISTENT:
        round_ = U32_MAX
    if flags & SHARED_HEADS:
        head = U32_MAX
    if flags & SHARED_LAYERS:
        layer = U32_MAX
    return le32(layer) + le32(head) + le32(pos) + le32(round_)


FINISH_MUL = 0x9E3779B1  # the finisher's multiplier (xxHash's PRIME32_1)


def finish(h):
    """Keep-set v2's finisher of the 16-byte hash: m = h * 0x9E3779B1 mod 2^64, m ^ (m >> 32)."""
    m = (h * FINISH_MUL) & U64_MAX
    return m ^ (m >> 32)


def key(seed, seq_id, layer, head, pos, round_, flags=0):
    """The spec's 64-bit key of one token in one head at one round."""
    return finish(xxh3_64(key_message(layer, head, pos, round_, flags), seq_seed(seed, seq_id)))


# ---------------------------------------------------------------------------
# One head's eviction
# ---------------------------------------------------------------------------

def check_slot_table(slot_pos):
    """Raise ValueError unless slot_pos is a list of int32 values >= -1 with
    no position held twice."""
    seen = {}
    for slot, p in enumerate(slot_pos):
        if not isinstance(p, int) or isinstance(p, bool):
            raise ValueError("slot %d holds %r, not an integer" % (slot, p))
        if p < -1 or p > I32_MAX:
            raise ValueError("slot %d holds %d, outside [-1, 2^31-1]" % (slot, p))
        if p >= 0:
            if p in seen:
                raise ValueError("position %d is held by slots %d and %d" % (p, seen[p], slot))
            seen[p] = slot


def classify(slot_pos, prompt, window):
    """Steps 1-3: return (valid, prefix, window_slots, candidates), lists of
    slots (ascending slot order)."""
    valid = [s for s, p in enumerate(slot_pos) if p >= 0]
    prefix = [s for s in valid if slot_pos[s] < prompt]
    generated = [s for s in valid if slot_pos[s] >= prompt]
    n_window = min(window, len(generated))
    by_pos_desc = sorted(generated, key=lambda s: slot_pos[s], reverse=True)
    window_set = set(by_pos_desc[:n_window])
    window_slots = [s for s in generated if s in window_set]
    candidates = [s for s in generated if s not in window_set]
    return valid, prefix, window_slots, candidates


def evict_head(slot_pos, prompt, window, budget, seed, seq_id, layer, head, round_, flags=0):
    """Spec steps 1-6 for one head.

    Returns (evicted_slots, kept_slots, over_budget): both lists in ascending
    slot order; kept_slots are all valid slots that are not evicted.
    over_budget is True only when |valid| > budget and prefix + window alone
    exceed the budget.  Raises ValueError on a bad slot table or argument.
    """
    slot_pos = list(slot_pos)
    check_slot_table(slot_pos)
    for name, v in (("prompt", prompt), ("window", window), ("budget", budget)):
        _check_uint(name, v, U32_MAX)
    key_message(layer, head, 0, round_, flags)  # validates coordinates and flags
    _check_uint("seed", seed, U64_MAX)
    _check_uint("seq_id", seq_id, U64_MAX)

    valid, prefix, window_slots, candidates = classify(slot_pos, prompt, window)
    # Step 1: within budget, nothing is evicted.
    if len(valid) <= budget:
        return [], valid, False
    protected = len(prefix) + len(window_slots)
    # Step 4.
    n_keep = max(0, min(budget - protected, len(candidates)))
    # Step 5: the n_keep smallest (key, pos) survive.
    ranked = sorted(candidates,
                    key=lambda s: (key(seed, seq_id, layer, head, slot_pos[s], round_, flags),
                                   slot_pos[s]))
    kept_candidates = set(ranked[:n_keep])
    # Step 6: canonical order.
    evicted = sorted(s for s in candidates if s not in kept_candidates)
    evicted_set = set(evicted)
    kept = [s for s in valid if s not in evicted_set]
    return evicted, kept, protected > budget


def f32(x):
    """x rounded to IEEE binary32, as the C API's float scores hold it."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def evict_head_scored(slot_pos, prompt, window, budget, scores):
    """docs/SPEC.md "Scored selection" for one head: steps 1-4 and 6 as in
    evict_head; step 5 keeps the n_keep candidates with the highest score,
    equal scores (-0.0 == +0.0) keeping the smaller position.  scores[s] is
    read only at candidate slots; a NaN there raises ValueError naming the
    slot.  Returns (evicted_slots, kept_slots, over_budget)."""
    slot_pos = list(slot_pos)
    check_slot_table(slot_pos)
    for name, v in (("prompt", prompt), ("window", window), ("budget", budget)):
        _check_uint(name, v, U32_MAX)
    valid, prefix, window_slots, candidates = classify(slot_pos, prompt, window)
    if len(valid) <= budget:
        return [], valid, False
    for s in candidates:
        if scores[s] != scores[s]:
            raise ValueError("slot %d: the score of a candidate is NaN" % s)
    protected = len(prefix) + len(window_slots)
    n_keep = max(0, min(budget - protected, len(candidates)))
    # Python compares -0.0 == 0.0 and orders infinities; -score sorts descending.
    ranked = sorted(candidates, key=lambda s: (-f32(scores[s]), slot_pos[s]))
    kept_candidates = set(ranked[:n_keep])
    evicted = sorted(s for s in candidates if s not in kept_candidates)
    evicted_set = set(evicted)
    kept = [s for s in valid if s not in evicted_set]
    return evicted, kept, protected > budget


# ---------------------------------------------------------------------------
# Digest
# ---------------------------------------------------------------------------

def digest_bytes(heads):
    """The byte string the digest hashes.  heads: iterable, in (sequence,
    layer, head) order, of (seq_id, layer, head, kept_positions)."""
    parts = []
    for seq_id, layer, head, kept_positions in heads:
        _check_uint("seq_id", seq_id, U64_MAX)
        _check_uint("layer", layer, U32_MAX)
        _check_uint("head", head, U32_MAX)
        positions = sorted(kept_positions)
        parts.append(le64(seq_id) + le32(layer) + le32(head) + le32(len(positions)))
        for p in positions:
            _check_uint("kept position", p, U32_MAX)
            parts.append(le32(p))
    return b"".join(parts)


def digest(heads):
    """XXH3-64, seed 0, over digest_bytes(heads)."""
    h = xxhash.xxh3_64(seed=0)
    h.update(digest_bytes(heads))
    return h.intdigest()


# ---------------------------------------------------------------------------
# A whole CLI configuration
# ---------------------------------------------------------------------------

CONFIG_DEFAULTS = {
    "seed": 0, "seq_id": 0, "layers": 1, "heads": 1, "layer_offset": 0, "head_offset": 0,
    "prompt": 0, "window": 64, "budget": 2048, "round": 0, "cached": 0,
    "persistent": False, "shared_heads": False, "shared_layers": False,
    "slots": None,  # None, one list of ints (every head), or L*H lists
}


def config_flags(config):
    c = dict(CONFIG_DEFAULTS, **config)
    return ((PERSISTENT if c["persistent"] else 0) | (SHARED_HEADS if c["shared_heads"] else 0)
            | (SHARED_LAYERS if c["shared_layers"] else 0))


def head_tables(config):
    """The slot table of each head, in (layer, head) order, as the CLI builds
    them.  Raises ValueError where the CLI must reject its input."""
    c = dict(CONFIG_DEFAULTS, **config)
    L, H = c["layers"], c["heads"]
    _check_uint("layers", L, U32_MAX)
    _check_uint("heads", H, U32_MAX)
    if L < 1 or H < 1:
        raise ValueError("layers and heads must be >= 1")
    _check_uint("layer_offset", c["layer_offset"], U32_MAX)
    _check_uint("head_offset", c["head_offset"], U32_MAX)
    if c["layer_offset"] + L - 1 > U32_MAX:
        raise ValueError("layer_offset + layers - 1 exceeds 2^32-1")
    if c["head_offset"] + H - 1 > U32_MAX:
        raise ValueError("head_offset + heads - 1 exceeds 2^32-1")
    slots = c["slots"]
    if slots is None:
        _check_uint("cached", c["cached"], I32_MAX)
        table = list(range(c["cached"]))
        return [table] * (L * H)
    if not isinstance(slots, list):
        raise ValueError("slot table must be a JSON array")
    if slots and all(isinstance(t, list) for t in slots):
        if len(slots) != L * H:
            raise ValueError("%d per-head tables for %d heads" % (len(slots), L * H))
        if any(len(t) != len(slots[0]) for t in slots):
            raise ValueError("per-head tables differ in length")
        tables = [list(t) for t in slots]
    else:
        tables = [list(slots)] * (L * H)
    for t in tables:
        check_slot_table(t)
    return tables


def select(config):
    """What `kvevict select` prints for @config: one dict per head, in
    (layer, head) order, with keys seq_id, layer, head, evict, keep,
    over_budget.  Raises ValueError where the CLI must fail."""
    c = dict(CONFIG_DEFAULTS, **config)
    flags = config_flags(c)
    tables = head_tables(c)
    out = []
    i = 0
    for l in range(c["layers"]):
        for h in range(c["heads"]):
            gl, gh = c["layer_offset"] + l, c["head_offset"] + h
            ev, kp, ob = evict_head(tables[i], c["prompt"], c["window"], c["budget"], c["seed"],
                                    c["seq_id"], gl, gh, c["round"], flags)
            out.append({"seq_id": c["seq_id"], "layer": gl, "head": gh,
                        "evict": ev, "keep": kp, "over_budget": ob})
            i += 1
    return out


def select_digest(config):
    """What `kvevict digest` reports for @config (the integer)."""
    tables = head_tables(config)
    heads = []
    for i, rec in enumerate(select(config)):
        heads.append((rec["seq_id"], rec["layer"], rec["head"],
                      [tables[i][s] for s in rec["keep"]]))
    return digest(heads)


# ---------------------------------------------------------------------------
# The schedule (one head), for examples and tests
# ---------------------------------------------------------------------------

def place_round(slot_pos, evicted, pos0):
    """docs/SPEC.md "Placement" after one round of a full head: the evicted
    slots emptied, the surviving tokens older than pos0 (the current call's
    first position) kept where they are when below their count and moved,
    lowest slot first, into the free slots there, lowest first; the call's
    survivors after them in position order. Returns the new table and the
    moves of old tokens as (from_slot, to_slot)."""
    kept = [p if s not in evicted else -1 for s, p in enumerate(slot_pos)]
    old = [s for s, p in enumerate(kept) if 0 <= p < pos0]
    mine = sorted(p for p in kept if p >= pos0)
    bound = len(old)
    out = [-1] * len(slot_pos)
    for s in old:
        if s < bound:
            out[s] = kept[s]
    holes = [s for s in range(bound) if out[s] < 0]
    movers = [s for s in old if s >= bound]
    moves = list(zip(movers, holes))
    for src, dst in moves:
        out[dst] = kept[src]
    for i, p in enumerate(mine):
        out[bound + i] = p
    return out, moves


def schedule(prompt, window, budget, r, n_tokens, seed, seq_id, layer, head, flags=0,
             steps=None):
    """Run the spec's schedule and placement on one head.

    Capacity is max(budget, prompt + window) + r slots. The tokens come in
    appends of steps[i] tokens (default: one token each), in order, each at
    the first free slot. A token that finds every slot full first evicts one
    round (round = evictions so far), placed by place_round with the current
    append's first position. Returns (slot_pos, rounds, log) where log
    lists, per eviction, (round, evicted_slots, evicted_positions, moves),
    moves being that round's moves of tokens older than the append.
    """
    capacity = max(budget, prompt + window) + r
    if steps is None:
        steps = [1] * n_tokens
    assert sum(steps) == n_tokens
    slot_pos = [-1] * capacity
    n_valid, pos, rounds, log = 0, 0, 0, []
    for k in steps:
        pos0 = pos
        for _ in range(k):
            if n_valid == capacity:
                ev, _, _ = evict_head(slot_pos, prompt, window, budget, seed, seq_id,
                                      layer, head, rounds, flags)
                gone = [slot_pos[s] for s in ev]
                slot_pos, moves = place_round(slot_pos, set(ev), pos0)
                log.append((rounds, ev, gone, moves))
                rounds += 1
                n_valid = capacity - r
            slot_pos[n_valid] = pos
            n_valid += 1
            pos += 1
    return slot_pos, rounds, log


def net_moves(before, after, pos0):
    """The moves an engine runs for one append: every token older than pos0
    held in both tables at different slots, as (slot before, slot after),
    by destination."""
    where = {p: s for s, p in enumerate(before) if p >= 0}
    return sorted(((where[p], s) for s, p in enumerate(after)
                   if 0 <= p < pos0 and where.get(p, s) != s), key=lambda m: m[1])


# ---------------------------------------------------------------------------
# Running digest (section 11)
# ---------------------------------------------------------------------------

RUN_DIGEST_TWEAK = 0x6B76652D72756E31  # "kve-run1", big-endian
U64_MOD = 1 << 64


def run_element(seed, seq_id, layer, head, pos, round_, flags=0):
    """The running digest's element of one evicted token (section 11)."""
    return key(seed ^ RUN_DIGEST_TWEAK, seq_id, layer, head, pos, round_, flags & ~PERSISTENT)


def table_weight(flags, n_layers, n_heads):
    """KV heads one slot table stands for in a shard of n_layers x n_heads."""
    w = 1
    if flags & SHARED_HEADS:
        w *= n_heads
    if flags & SHARED_LAYERS:
        w *= n_layers
    return w


def round_digest(seed, seq_id, round_, tables, flags=0, n_layers=1, n_heads=1):
    """tables: iterable of (layer, head, evicted_positions) for one round,
    with global indices.  Wrapping sum of weight x element."""
    w = table_weight(flags, n_layers, n_heads)
    total = 0
    for layer, head, positions in tables:
        for p in positions:
            total += w * run_element(seed, seq_id, layer, head, p, round_, flags)
    return total % U64_MOD


def replay(seed, seq_id, prompt, window, budget, r, n_tokens, n_layers, n_heads,
           layer_offset=0, head_offset=0, flags=0):
    """Per round of one sequence: (round, [(layer, head, evicted positions)],
    round_digest, running_digest), from the schedule of section 5."""
    t_layers = 1 if flags & SHARED_LAYERS else n_layers
    t_heads = 1 if flags & SHARED_HEADS else n_heads
    per_table = []
    for tl in range(t_layers):
        for th in range(t_heads):
            layer = U32_MAX if flags & SHARED_LAYERS else layer_offset + tl
            head = U32_MAX if flags & SHARED_HEADS else head_offset + th
            _, _, log = schedule(prompt, window, budget, r, n_tokens, seed, seq_id,
                                 layer, head, flags)
            per_table.append((layer, head, log))
    # A round runs when a token finds its heads full (lazily, as the cache
    # state does): max(0, ceil((n_tokens - C) / r)) rounds; schedule() also
    # counts a round that only the next token would trigger.
    capacity = max(budget, prompt + window) + r
    n_rounds = max(0, -(-(n_tokens - capacity) // r))
    rounds = []
    running = 0
    for k in range(n_rounds):
        tables = [(layer, head, sorted(log[k][2])) for layer, head, log in per_table]
        rd = round_digest(seed, seq_id, k, tables, flags, n_layers, n_heads)
        running = (running + rd) % U64_MOD
        rounds.append((k, tables, rd, running))
    return rounds


# ---------------------------------------------------------------------------
# Self-test
# ---------------------------------------------------------------------------

def self_test(n=3000, seed=1, verbose=True):
    """The oracle's own properties (oracle_selftest.py); True when they hold."""
    import oracle_selftest
    return oracle_selftest.self_test(n, seed, verbose)


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(0 if self_test() else 1)
    print("usage: kve_oracle.py --self-test", file=sys.stderr)
    sys.exit(2)
