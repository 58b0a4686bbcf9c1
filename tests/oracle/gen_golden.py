#!/usr/bin/python3
"""Generate kvevict's golden vectors from the Python oracle.

Writes tools/golden/golden_vectors.h and rewrites the generated regions of
docs/SPEC.md (between <!-- golden:begin --> / <!-- golden:end --> and
<!-- example:begin --> / <!-- example:end -->).

    /usr/bin/python3 tests/oracle/gen_golden.py            # write both files
    /usr/bin/python3 tests/oracle/gen_golden.py --check    # exit 1 if either is stale
    /usr/bin/python3 tests/oracle/gen_golden.py --print    # print the markdown only

The C header is written here, the Markdown by golden_markdown.py, the
scored cases by golden_scored.py.
"""

import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import golden_markdown  # noqa: E402
import golden_scored  # noqa: E402
import kve_oracle as kve  # noqa: E402
from golden_markdown import hx  # noqa: E402
from kve_oracle import PERSISTENT, SHARED_HEADS, SHARED_LAYERS, U32_MAX, U64_MAX  # noqa: E402

HEADER_PATH = os.path.join(ROOT, "tools", "golden", "golden_vectors.h")
SCORED_PATH = os.path.join(ROOT, "tests", "golden", "golden_scored.h")
SPEC_PATH = os.path.join(ROOT, "docs", "SPEC.md")

# ---------------------------------------------------------------------------
# Key vectors
# ---------------------------------------------------------------------------

def key_inputs():
    """(seed, seq_id, layer, head, pos, round, flags) tuples."""
    M32, M64 = U32_MAX, U64_MAX
    base = (0x0123456789ABCDEF, 0x00000000DEADBEEF, 5, 3, 1000, 2)
    v = [
        (0, 0, 0, 0, 0, 0, 0),                       # all zeros
        (0, 0, 0, 0, 1, 0, 0),
        (1, 0, 0, 0, 0, 0, 0),
        (0, 1, 0, 0, 0, 0, 0),
        (0, 0, 1, 0, 0, 0, 0),
        (0, 0, 0, 1, 0, 0, 0),
        (0, 0, 0, 0, 0, 1, 0),
        (0, 0, 0, 0, M32, 0, 0),                     # all-ones fields, one at a time
        (0, 0, M32, 0, 0, 0, 0),
        (0, 0, 0, M32, 0, 0, 0),
        (0, 0, 0, 0, 0, M32, 0),
        (M64, 0, 0, 0, 0, 0, 0),
        (0, M64, 0, 0, 0, 0, 0),
        (M64, M64, M32, M32, M32, M32, 0),           # everything all ones
        (M64, M64, M32, M32, M32, M32, 7),
    ]
    for flags in range(8):                          # every flag combination, one coordinate
        v.append(base + (flags,))
    # The switches equal explicit all-ones fields.
    v.append((base[0], base[1], base[2], base[3], base[4], M32, 0))
    v.append((base[0], base[1], base[2], M32, base[4], base[5], 0))
    v.append((base[0], base[1], M32, base[3], base[4], base[5], 0))
    v += [
        (0x9E3779B97F4A7C15, 0x8000000000000000, 17, 6, 123456, 3, 0),   # large seeds / ids
        (0x8000000000000000, 0xFFFFFFFF00000000, 0, 0, 0x7FFFFFFF, 0, 0),
        (0x0000000100000000, 0x0000000100000000, 0x80000000, 0x80000000, 0x80000000, 0x80000000, 0),
        (2609, 128, 35, 7, 2111, 1, 0),                                  # a G1-like coordinate
        (2609, 128, 35, 7, 2111, 1, SHARED_HEADS),
        (2609, 128, 35, 7, 2111, 1, SHARED_HEADS | SHARED_LAYERS),
        (42, 7, 2, 1, 6, 0, 0),                                          # the basic case's first candidate
    ]
    return v


def key_vectors():
    return [t + (kve.key(*t),) for t in key_inputs()]


# ---------------------------------------------------------------------------
# Keep-set cases
# ---------------------------------------------------------------------------

BASIC = dict(seed=42, seq_id=7, layer=2, head=1, prompt=4, window=2, budget=8, round=0, flags=0)


def reuse_table():
    """A table with positions out of slot order, as the slot-reusing schedule
    of earlier releases reached it before its third eviction (P=4, W=3,
    B=10, r=4): fixed input data of the keep-set case."""
    return [0, 1, 2, 3, 14, 15, 16, 18, 17, 19, 10, 11, 20, 21]


# Placement cases (docs/SPEC.md "Placement"): one head, the basic
# coordinates, a history of appends; the table after the last append, that
# append's moves (slot before, slot after) and its tokens' slots.
PLACEMENT_SPECS = [
    ("one_token", "one token per append after the prompt; the last append runs round 2",
     dict(prompt=4, window=3, budget=10, r=4, flags=0), [4] + [1] * 19),
    ("straddle", "an append of 5 tokens whose first 2 fill the head: round 1 runs between them",
     dict(prompt=4, window=3, budget=10, r=4, flags=0), [4, 10, 2, 5]),
    ("self_evict", "one append of 20 generated tokens, more than W = 2, across two rounds",
     dict(prompt=4, window=2, budget=10, r=4, flags=0), [4, 20]),
    ("persistent_shared", "persistent keys, shared heads, appends of 1 to 6 tokens",
     dict(prompt=6, window=4, budget=12, r=5, flags=3), [6, 3, 6, 1, 4, 6, 2, 5, 3, 6]),
]


def placement_cases():
    out = []
    for name, comment, p, steps in PLACEMENT_SPECS:
        b = BASIC
        n = sum(steps)
        before, _, _ = kve.schedule(p["prompt"], p["window"], p["budget"], p["r"], n - steps[-1],
                                    b["seed"], b["seq_id"], b["layer"], b["head"], p["flags"],
                                    steps=steps[:-1])
        table, rounds, log = kve.schedule(p["prompt"], p["window"], p["budget"], p["r"], n,
                                          b["seed"], b["seq_id"], b["layer"], b["head"],
                                          p["flags"], steps=steps)
        pos0 = n - steps[-1]
        moves = kve.net_moves(before, table, pos0)
        where = {q: s for s, q in enumerate(table) if q >= 0}
        mapping = [where.get(q, -1) for q in range(pos0, n)]
        out.append(dict(name=name, comment=comment, steps=steps, table=table, rounds=rounds,
                        moves=moves, mapping=mapping, **p))
    return out


def holes_table():
    rng = random.Random(20260903)
    positions = rng.sample(range(0, 40), 20)
    table = positions + [-1] * 6
    rng.shuffle(table)
    return table


def case_specs():
    """(name, parameters, slot_pos, comment)."""
    B = BASIC
    seq16 = list(range(16))
    big = 0x7FFFFFFF
    return [
        ("basic", dict(B), seq16, "P=4, W=2, B=8 over positions 0..15"),
        ("round1", dict(B, round=1), seq16, "the basic head at round 1: fresh keys"),
        ("persistent", dict(B, round=3, flags=PERSISTENT), seq16,
         "persistent keys: the round (3) is ignored"),
        ("shared_heads", dict(B, head=5, flags=SHARED_HEADS), seq16,
         "one keep-set per layer: any head gives this answer"),
        ("shared_layers", dict(B, layer=9, flags=SHARED_LAYERS), seq16,
         "shared layers alone: one keep-set per head index"),
        ("shared_layers_heads", dict(B, layer=9, head=3, flags=SHARED_HEADS | SHARED_LAYERS), seq16,
         "one keep-set per sequence"),
        ("all_flags", dict(B, layer=9, head=3, round=4,
                           flags=PERSISTENT | SHARED_HEADS | SHARED_LAYERS), seq16,
         "all three switches"),
        ("prompt_over_budget", dict(B, prompt=10), seq16,
         "P=10 > B=8: the prompt and window are kept, every candidate goes"),
        ("prompt_covers_all", dict(B, prompt=100), seq16,
         "every valid slot is prompt: nothing can be evicted"),
        ("empty_slots", dict(B, prompt=6, window=3, budget=12), holes_table(),
         "-1 holes, positions not in slot order"),
        ("slot_reuse", dict(B, prompt=4, window=3, budget=10, round=2), reuse_table(),
         "the table the schedule (P=4, W=3, B=10, r=4) reaches before its third eviction"),
        ("window_larger", dict(B, window=20), seq16,
         "W=20 > 12 generated tokens: no candidates, nothing evicted"),
        ("window_zero", dict(B, window=0), seq16, "W=0: no recent tokens protected"),
        ("exact_protected", dict(B, window=4), seq16, "P+W = B: every candidate goes"),
        ("prompt_zero", dict(B, prompt=0, window=4, budget=10, round=1), list(range(20)),
         "P=0: everything but the window is a candidate"),
        ("budget_zero", dict(B, prompt=0, window=0, budget=0), list(range(10)),
         "B=0 with nothing protected: every slot goes"),
        ("budget_zero_protected", dict(B, prompt=2, window=1, budget=0), list(range(10)),
         "B=0: the protected slots stay, over budget"),
        ("single_candidate", dict(B, budget=6), list(range(7)),
         "one candidate and no room for it"),
        ("nothing_to_evict", dict(B, budget=16), seq16, "|valid| = B: nothing is evicted"),
        ("nothing_to_evict_holes", dict(B, budget=16),
         [-1, 3, 0, 1, -1, 2, 4, 5, 6, 7, -1, 8, 9, 10, 11, 12, 13, 14, 15, -1],
         "16 valid slots among 20, B=16"),
        ("all_empty", dict(B, budget=0), [-1] * 8, "no valid slot at all"),
        ("large_coordinates",
         dict(seed=U64_MAX, seq_id=U64_MAX - 1, layer=U32_MAX - 1, head=U32_MAX - 1,
              prompt=0, window=2, budget=5, round=U32_MAX - 1, flags=0),
         [big - 3 * i if i % 3 else -1 for i in range(14)],
         "64-bit seed and id, positions near 2^31-1"),
    ]


def cases():
    out = []
    for name, p, table, comment in case_specs():
        ev, kp, ob = kve.evict_head(table, p["prompt"], p["window"], p["budget"], p["seed"],
                                    p["seq_id"], p["layer"], p["head"], p["round"], p["flags"])
        out.append(dict(p, name=name, slot_pos=table, evicted=ev, kept=kp, over_budget=ob,
                        comment=comment))
    return out


def check_cases(cs):
    """Each case shows what its name promises."""
    by = {c["name"]: c for c in cs}
    assert len(by["basic"]["evicted"]) == 8 and not by["basic"]["over_budget"]
    assert by["prompt_over_budget"]["over_budget"] and by["prompt_over_budget"]["evicted"] == [10, 11, 12, 13]
    assert by["prompt_covers_all"]["evicted"] == [] and by["prompt_covers_all"]["over_budget"]
    assert by["window_larger"]["evicted"] == [] and by["window_larger"]["over_budget"]
    assert by["budget_zero"]["kept"] == [] and not by["budget_zero"]["over_budget"]
    assert len(by["budget_zero_protected"]["kept"]) == 3 and by["budget_zero_protected"]["over_budget"]
    assert by["single_candidate"]["evicted"] == [0 + 4]
    assert by["nothing_to_evict"]["evicted"] == [] and by["nothing_to_evict_holes"]["evicted"] == []
    assert by["all_empty"]["kept"] == [] and by["all_empty"]["evicted"] == []
    assert by["exact_protected"]["evicted"] == list(range(4, 12))
    assert len(by["slot_reuse"]["evicted"]) == 4
    for c in cs:
        assert len(c["slot_pos"]) <= 40
        valid = sum(p >= 0 for p in c["slot_pos"])
        if valid > c["budget"] and not c["over_budget"]:
            assert len(c["evicted"]) == valid - c["budget"], c["name"]


def digest_batch():
    """2 layers x 2 heads of the basic case's table, at global layers 2..3,
    heads 1..2 (the first head is the basic case itself)."""
    p = dict(name="basic_2x2", seed=BASIC["seed"], seq_id=BASIC["seq_id"], layer_offset=2,
             head_offset=1, n_layers=2, n_heads=2, prompt=4, window=2, budget=8, round=0,
             flags=0, slot_pos=list(range(16)))
    config = dict(seed=p["seed"], seq_id=p["seq_id"], layers=2, heads=2, layer_offset=2,
                  head_offset=1, prompt=4, window=2, budget=8, round=0, slots=p["slot_pos"])
    heads = []
    for rec in kve.select(config):
        heads.append((rec["seq_id"], rec["layer"], rec["head"],
                      [p["slot_pos"][s] for s in rec["keep"]]))
    p["heads"] = heads
    p["digest"] = kve.digest(heads)
    assert p["digest"] == kve.select_digest(config)
    return p


# ---------------------------------------------------------------------------
# C header
# ---------------------------------------------------------------------------

def c_array(name, values, per_line=12):
    if not values:
        return "static const int32_t %s[1] = {0}; /* empty list (count 0) */\n" % name
    lines = []
    for i in range(0, len(values), per_line):
        lines.append("    " + ", ".join("%d" % v for v in values[i:i + per_line]) + ",")
    return "static const int32_t %s[%d] = {\n%s\n};\n" % (name, len(values), "\n".join(lines))


def c_u64(v):
    return "0x%016xull" % v


def c_u32(v):
    return "0x%08xu" % v if v >= 1 << 20 else "%du" % v


def header_text(keys, cs, dg, pc):
    o = []
    o.append(("""/*
 * golden_vectors.h -- kvevict keep-set v@SPEC@ golden vectors.
 *
 * generated by tests/oracle/gen_golden.py, do not edit.
 * Regenerate with: /usr/bin/python3 tests/oracle/gen_golden.py
 *
 * The values come from the independent Python oracle (tests/oracle/
 * kve_oracle.py) and are also printed in docs/SPEC.md ("Golden vectors").
 * Flag bits: 1 = KVE_PERSISTENT, 2 = KVE_SHARED_HEADS, 4 = KVE_SHARED_LAYERS.
 * Only <stdint.h> is needed; every object is static, so include this header
 * in one translation unit per test program.
 */
#ifndef KVE_GOLDEN_VECTORS_H
#define KVE_GOLDEN_VECTORS_H

#include <stdint.h>

/* The keep-set specification version these vectors are of. */
#define KVE_GOLDEN_SPEC_VERSION @SPEC@

/* ---------------------------------------------------------------- */
/* Keys: key = spec key of (seed, seq_id, layer, head, pos, round)   */
/* under flags.                                                      */
/* ---------------------------------------------------------------- */

typedef struct kve_golden_key {
    uint64_t seed, seq_id;
    uint32_t layer, head, pos, round, flags;
    uint64_t key;
} kve_golden_key;

static const kve_golden_key kve_golden_keys[] = {
""").replace("@SPEC@", str(kve.SPEC_VERSION)))
    for (seed, sq, l, h, p, r, f, k) in keys:
        o.append("    {%s, %s, %s, %s, %s, %s, %du, %s},\n"
                 % (c_u64(seed), c_u64(sq), c_u32(l), c_u32(h), c_u32(p), c_u32(r), f, c_u64(k)))
    o.append("""};
#define KVE_GOLDEN_N_KEYS (sizeof kve_golden_keys / sizeof kve_golden_keys[0])

/* ---------------------------------------------------------------- */
/* Keep-set cases: one head each (spec "One head's eviction").       */
/* evicted and kept are slot indices in ascending order; kept lists  */
/* every valid slot that is not evicted. over_budget is 1 when the   */
/* head had more than budget valid slots and prefix + window alone   */
/* exceeded the budget. Empty lists point to a one-element dummy     */
/* array with a count of 0.                                          */
/* ---------------------------------------------------------------- */

typedef struct kve_golden_case {
    const char *name;
    uint64_t seed, seq_id;
    uint32_t layer, head, prompt, window, budget, round, flags, n_slots;
    const int32_t *slot_pos;                    /* [n_slots] */
    uint32_t n_evicted; const int32_t *evicted; /* ascending slots */
    uint32_t n_kept;    const int32_t *kept;    /* ascending slots */
    int over_budget;
} kve_golden_case;

""")
    for c in cs:
        o.append("/* %s: %s */\n" % (c["name"], c["comment"]))
        o.append(c_array("kve_golden_%s_slot_pos" % c["name"], c["slot_pos"]))
        o.append(c_array("kve_golden_%s_evicted" % c["name"], c["evicted"]))
        o.append(c_array("kve_golden_%s_kept" % c["name"], c["kept"]))
        o.append("\n")
    o.append("static const kve_golden_case kve_golden_cases[] = {\n")
    for c in cs:
        n = c["name"]
        o.append('    {"%s", %s, %s,\n     %s, %s, %du, %du, %du, %s, %du, %du,\n'
                 '     kve_golden_%s_slot_pos, %du, kve_golden_%s_evicted, %du, kve_golden_%s_kept, %d},\n'
                 % (n, c_u64(c["seed"]), c_u64(c["seq_id"]), c_u32(c["layer"]), c_u32(c["head"]),
                    c["prompt"], c["window"], c["budget"], c_u32(c["round"]), c["flags"],
                    len(c["slot_pos"]), n, len(c["evicted"]), n, len(c["kept"]), n,
                    1 if c["over_budget"] else 0))
    o.append("""};
#define KVE_GOLDEN_N_CASES (sizeof kve_golden_cases / sizeof kve_golden_cases[0])

/* ---------------------------------------------------------------- */
/* Digest: one batch of n_layers x n_heads heads of one sequence,    */
/* every head holding the same slot table slot_pos; head (l, h) has  */
/* global coordinates (layer_offset + l, head_offset + h). digest is */
/* the spec digest of the batch's keep-sets, heads in (layer, head)  */
/* order.                                                            */
/* ---------------------------------------------------------------- */

typedef struct kve_golden_digest_case {
    const char *name;
    uint64_t seed, seq_id;
    uint32_t n_layers, n_heads, layer_offset, head_offset;
    uint32_t prompt, window, budget, round, flags, n_slots;
    const int32_t *slot_pos; /* [n_slots], shared by every head */
    uint64_t digest;
} kve_golden_digest_case;

""")
    o.append(c_array("kve_golden_digest_slot_pos", dg["slot_pos"]))
    o.append('static const kve_golden_digest_case kve_golden_digest = {\n'
             '    "%s", %s, %s, %du, %du, %du, %du,\n    %du, %du, %du, %du, %du, %du,\n'
             '    kve_golden_digest_slot_pos, %s\n};\n\n'
             % (dg["name"], c_u64(dg["seed"]), c_u64(dg["seq_id"]), dg["n_layers"], dg["n_heads"],
                dg["layer_offset"], dg["head_offset"], dg["prompt"], dg["window"], dg["budget"],
                dg["round"], dg["flags"], len(dg["slot_pos"]), c_u64(dg["digest"])))
    o.append("""/* ---------------------------------------------------------------- */
/* Placement cases (spec "Placement", version 1): one head at the    */
/* basic coordinates (seed 42, seq_id 7, layer 2, head 1), a history */
/* of n_steps appends; slot_pos is the head's table after the last   */
/* one (n_slots = the capacity), moves that append's moves as pairs  */
/* (slot before, slot after) by destination, mapping the slot of     */
/* each of its tokens (-1: evicted within it).                       */
/* ---------------------------------------------------------------- */

typedef struct kve_golden_placement {
    const char *name;
    uint32_t prompt, window, budget, interval, flags, rounds;
    uint32_t n_steps; const uint32_t *steps;
    uint32_t n_slots; const int32_t *slot_pos;
    uint32_t n_moves; const int32_t *moves;     /* [n_moves][2] */
    uint32_t n_mapped; const int32_t *mapping;  /* [n_mapped] = last step's tokens */
} kve_golden_placement;

""")
    for c in pc:
        n = c["name"]
        o.append("/* %s: %s */\n" % (n, c["comment"]))
        o.append("static const uint32_t kve_golden_place_%s_steps[] = {%s};\n"
                 % (n, ", ".join("%du" % k for k in c["steps"])))
        o.append(c_array("kve_golden_place_%s_slot_pos" % n, c["table"]))
        o.append(c_array("kve_golden_place_%s_moves" % n, [v for m in c["moves"] for v in m]))
        o.append(c_array("kve_golden_place_%s_mapping" % n, c["mapping"]))
        o.append("\n")
    o.append("static const kve_golden_placement kve_golden_placements[] = {\n")
    for c in pc:
        n = c["name"]
        o.append('    {"%s", %du, %du, %du, %du, %du, %du,\n     %du, kve_golden_place_%s_steps, '
                 '%du, kve_golden_place_%s_slot_pos,\n     %du, kve_golden_place_%s_moves, %du, '
                 'kve_golden_place_%s_mapping},\n'
                 % (n, c["prompt"], c["window"], c["budget"], c["r"], c["flags"], c["rounds"],
                    len(c["steps"]), n, len(c["table"]), n, len(c["moves"]), n,
                    len(c["mapping"]), n))
    o.append("};\n#define KVE_GOLDEN_N_PLACEMENTS "
             "(sizeof kve_golden_placements / sizeof kve_golden_placements[0])\n\n")
    o.append("#endif /* KVE_GOLDEN_VECTORS_H */\n")
    return "".join(o)


def replace_region(text, tag, body):
    begin, end = "<!-- %s:begin -->" % tag, "<!-- %s:end -->" % tag
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise SystemExit("docs/SPEC.md lacks the %s ... %s markers" % (begin, end))
    return text[:i + len(begin)] + "\n" + body + text[j:]


def main(argv):
    if not kve.self_test(n=500, verbose=False):
        raise SystemExit("oracle self-test failed")
    keys = key_vectors()
    cs = cases()
    check_cases(cs)
    dg = digest_batch()
    assert len(keys) >= 24
    pc = placement_cases()
    md = golden_markdown.golden_markdown(keys, cs, dg, pc)
    ex = golden_markdown.example_markdown(BASIC)
    if "--print" in argv:
        print(ex)
        print(md)
        return 0
    header = header_text(keys, cs, dg, pc)
    with open(SPEC_PATH) as f:
        spec = f.read()
    new_spec = replace_region(replace_region(spec, "golden", md), "example", ex)
    new_spec = replace_region(new_spec, "rundigest", golden_markdown.run_digest_markdown())
    scs = golden_scored.cases()
    new_spec = replace_region(new_spec, "scored", golden_scored.markdown(scs))
    scored_header = golden_scored.header_text(scs, c_array)
    if "--check" in argv:
        stale = []
        if not os.path.exists(HEADER_PATH) or open(HEADER_PATH).read() != header:
            stale.append(HEADER_PATH)
        if not os.path.exists(SCORED_PATH) or open(SCORED_PATH).read() != scored_header:
            stale.append(SCORED_PATH)
        if new_spec != spec:
            stale.append(SPEC_PATH)
        for s in stale:
            print("stale: %s (run tests/oracle/gen_golden.py)" % s)
        return 1 if stale else 0
    with open(HEADER_PATH, "w") as f:
        f.write(header)
    with open(SCORED_PATH, "w") as f:
        f.write(scored_header)
    if new_spec != spec:
        with open(SPEC_PATH, "w") as f:
            f.write(new_spec)
    print("wrote %s (%d keys, %d cases, digest %s) and updated %s"
          % (os.path.relpath(HEADER_PATH, ROOT), len(keys), len(cs), hx(dg["digest"]),
             os.path.relpath(SPEC_PATH, ROOT)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
