"""The Python oracle's self-test (kve_oracle.self_test, which
``/usr/bin/python3 tests/oracle/kve_oracle.py --self-test`` runs): its keys
against libxxhash, the spec's properties of evict_head, evict_head_scored,
the schedule and the digests on random tables."""

import random
import struct

from kve_oracle import (PERSISTENT, SHARED_HEADS, SHARED_LAYERS, U32_MAX, classify, digest,
                        evict_head, evict_head_scored, f32, key, schedule, xxh3_64)


def scored_self_test(rng, n, expect):
    """Properties of evict_head_scored: the kept candidates outrank the
    evicted ones, counts and protection as for keys, slot order free."""
    for _ in range(n):
        n_slots = rng.randint(0, 60)
        positions = rng.sample(range(0, 150), n_slots)
        table = [p if rng.random() > 0.2 else -1 for p in positions]
        pool = [rng.uniform(-5, 5) for _ in range(4)] + [0.0, -0.0, float("inf"), float("-inf")]
        scores = [f32(rng.choice(pool)) for _ in range(n_slots)]
        P, W, B = rng.randint(0, 30), rng.randint(0, 15), rng.randint(0, 50)
        ev, kp, ob = evict_head_scored(table, P, W, B, scores)
        ev0, kp0, ob0 = evict_head(table, P, W, B, 1, 2, 3, 4, 5)
        what = "table=%r scores=%r P=%d W=%d B=%d" % (table, scores, P, W, B)
        expect(len(ev) == len(ev0) and ob == ob0, "scored counts as for keys " + what)
        _, _, win, cands = classify(table, P, W)
        expect(set(ev) <= set(cands), "scored evicts candidates only " + what)
        kc = [s for s in kp if s in cands]
        for a in kc:
            for b in ev:
                ok = scores[a] > scores[b] or (scores[a] == scores[b] and table[a] < table[b])
                expect(ok, "scored rank " + what)
        perm = list(range(n_slots))
        rng.shuffle(perm)
        t2 = [table[perm[i]] for i in range(n_slots)]
        s2 = [scores[perm[i]] for i in range(n_slots)]
        ev2, kp2, _ = evict_head_scored(t2, P, W, B, s2)
        expect(sorted(t2[s] for s in kp2) == sorted(table[s] for s in kp), "scored slot order " + what)
        # NaN where no score is read changes nothing; at a candidate it is refused.
        s3 = [float("nan") if s not in cands else scores[s] for s in range(n_slots)]
        expect(evict_head_scored(table, P, W, B, s3) == (ev, kp, ob), "scored reads candidates only")
        if cands and len([s for s in table if s >= 0]) > B:
            s3[cands[0]] = float("nan")
            try:
                evict_head_scored(table, P, W, B, s3)
                expect(False, "scored accepted a NaN candidate " + what)
            except ValueError:
                pass


def _libxxhash():
    """libxxhash through ctypes, when present: an independent XXH3."""
    import ctypes
    import ctypes.util
    for name in ("libxxhash.so.0", ctypes.util.find_library("xxhash")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        f = lib.XXH3_64bits_withSeed
        f.restype = ctypes.c_uint64
        f.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint64]
        return f
    return None


def self_test(n=3000, seed=1, verbose=True):
    rng = random.Random(seed)
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    # XXH3 against libxxhash, when it is installed.
    lib = _libxxhash()
    if lib is not None:
        for _ in range(200):
            data = bytes(rng.getrandbits(8) for _ in range(rng.choice([8, 16])))
            s = rng.getrandbits(64)
            expect(lib(data, len(data), s) == xxh3_64(data, s), "xxh3 vs libxxhash %r %d" % (data, s))
    elif verbose:
        print("note: libxxhash not found, XXH3 cross-check skipped")

    # Key: switches replace exactly one field each.
    for _ in range(200):
        sd, sq = rng.getrandbits(64), rng.getrandbits(64)
        l, h, p, r = (rng.getrandbits(32) for _ in range(4))
        k = key(sd, sq, l, h, p, r)
        m = xxh3_64(struct.pack("<IIII", l, h, p, r), xxh3_64(struct.pack("<Q", sq), sd))
        m = m * 0x9E3779B1 % 2**64
        expect(k == m ^ (m >> 32), "key layout")
        expect(key(sd, sq, l, h, p, r, PERSISTENT) == key(sd, sq, l, h, p, U32_MAX), "persistent")
        expect(key(sd, sq, l, h, p, r, SHARED_HEADS) == key(sd, sq, l, U32_MAX, p, r), "shared heads")
        expect(key(sd, sq, l, h, p, r, SHARED_LAYERS) == key(sd, sq, U32_MAX, h, p, r), "shared layers")
        expect(key(sd, sq, l, h, p, r, 7) == key(sd, sq, U32_MAX, U32_MAX, p, U32_MAX), "all flags")

    # Eviction properties on random heads.
    for _ in range(n):
        n_slots = rng.randint(0, 80)
        positions = rng.sample(range(0, 200), n_slots) if rng.random() < 0.5 else list(range(n_slots))
        table = [p if rng.random() > 0.2 else -1 for p in positions]
        P, W, B = rng.randint(0, 40), rng.randint(0, 20), rng.randint(0, 70)
        sd, sq = rng.getrandbits(64), rng.getrandbits(64)
        l, h, r = rng.getrandbits(32), rng.getrandbits(32), rng.randint(0, 5)
        flags = rng.randint(0, 7)
        ev, kp, ob = evict_head(table, P, W, B, sd, sq, l, h, r, flags)
        valid = [s for s, p in enumerate(table) if p >= 0]
        gen = sorted((table[s] for s in valid if table[s] >= P), reverse=True)
        win = set(gen[:min(W, len(gen))])
        prot = sum(1 for s in valid if table[s] < P) + len(win)
        what = "table=%r P=%d W=%d B=%d" % (table, P, W, B)
        expect(ev == sorted(ev) and kp == sorted(kp), "canonical order " + what)
        expect(sorted(ev + kp) == valid and not set(ev) & set(kp), "partition " + what)
        expect(all(table[s] >= P and table[s] not in win for s in ev), "protected evicted " + what)
        expect(len(ev) <= max(0, n_slots - B), "at most n_slots - B " + what)
        if len(valid) <= B:
            expect(ev == [] and ob is False, "within budget " + what)
        else:
            expect(ob == (prot > B), "over_budget " + what)
            expect(len(kp) == max(B, prot), "kept count " + what)
            if prot <= B:
                expect(len(ev) == len(valid) - B, "exact evictions " + what)
        # The kept candidates are the smallest keys among the candidates.
        cands = [s for s in valid if table[s] >= P and table[s] not in win]
        if ev and len(kp) > prot:
            kmax = max(key(sd, sq, l, h, table[s], r, flags) for s in kp if s in cands)
            kmin = min(key(sd, sq, l, h, table[s], r, flags) for s in ev)
            expect(kmax < kmin, "bottom-k " + what)
        # Slot order does not matter: permuting the table permutes the answer.
        perm = list(range(n_slots))
        rng.shuffle(perm)
        t2 = [table[perm[i]] for i in range(n_slots)]
        ev2, kp2, ob2 = evict_head(t2, P, W, B, sd, sq, l, h, r, flags)
        expect(sorted(t2[s] for s in kp2) == sorted(table[s] for s in kp) and ob2 == ob,
               "slot-order independence " + what)

    # Shared modes: one keep-set across heads / layers.
    for _ in range(100):
        table = list(range(rng.randint(10, 60)))
        args = (table, 3, 4, 12, rng.getrandbits(64), rng.getrandbits(64))
        a = evict_head(*args, 1, 2, 0, SHARED_HEADS)
        b = evict_head(*args, 1, 9, 0, SHARED_HEADS)
        c = evict_head(*args, 5, 9, 0, SHARED_HEADS | SHARED_LAYERS)
        d = evict_head(*args, 0, 3, 0, SHARED_HEADS | SHARED_LAYERS)
        expect(a == b and c == d, "shared modes")
        e = evict_head(*args, 1, 2, 0, PERSISTENT)
        f = evict_head(*args, 1, 2, 3, PERSISTENT)
        expect(e == f, "persistent ignores round")

    # Schedule: every round frees exactly r slots; heads stay in step.
    for _ in range(30):
        P, W, B, r = rng.randint(0, 20), rng.randint(0, 10), rng.randint(1, 40), rng.randint(1, 8)
        n_tok = rng.randint(0, 150)
        steps, left = [], n_tok
        while left:
            steps.append(min(left, rng.choice([1, 1, 2, 5, 13])))
            left -= steps[-1]
        tables = [schedule(P, W, B, r, n_tok, 5, 6, 0, h, steps=steps) for h in range(3)]
        expect(all(len(ev) == r for t in tables for _, ev, _, _ in t[2]), "schedule frees r slots")
        expect(len({sum(p >= 0 for p in t[0]) for t in tables}) == 1, "heads in step")
        # Placement: the valid slots come first; the last append's tokens last, in order.
        for t in tables:
            n_valid = sum(p >= 0 for p in t[0])
            expect(all(p >= 0 for p in t[0][:n_valid]), "valid slots first")
            last = [p for p in t[0][:n_valid] if p >= n_tok - (steps[-1] if steps else 0)]
            expect(t[0][n_valid - len(last):n_valid] == sorted(last), "the append's tokens last")
            expect(all(len(mv) <= r for _, _, _, mv in t[2]), "at most r moves a round")
        # Keep-sets never depend on the grouping.
        ones = [schedule(P, W, B, r, n_tok, 5, 6, 0, h) for h in range(3)]
        expect(all(sorted(a[0]) == sorted(b[0]) for a, b in zip(tables, ones)), "grouping")

    scored_self_test(rng, n // 3, expect)

    # Bad input.
    for bad in ([0, 1, 1], [0, -2], [3, -1, 3]):
        try:
            evict_head(bad, 0, 0, 0, 0, 0, 0, 0, 0)
            failures.append("accepted bad table %r" % bad)
        except ValueError:
            pass

    # Digest layout.
    d = digest([(1, 2, 3, [9, 4]), (1, 2, 4, [])])
    raw = struct.pack("<QIII", 1, 2, 3, 2) + struct.pack("<II", 4, 9) + struct.pack("<QIII", 1, 2, 4, 0)
    expect(d == xxh3_64(raw, 0), "digest layout")
    if lib is not None:
        expect(d == lib(raw, len(raw), 0), "digest vs libxxhash")

    for f in failures[:10]:
        print("FAIL:", f)
    if verbose or failures:
        print("self-test: %d failures" % len(failures))
    return not failures


