/*
 * kernels_scalar.c — the scalar entries of kve_cpu_kernels, the reference
 * every other ISA is tested against: one head's eviction as docs/SPEC.md
 * "One head's eviction" says, step by step, with keys from libxxhash
 * itself (clarity first); keys, entry copies; the content checks' scalar
 * row passes are kernels_cpu/check_rows.c's.
 */
#include <stddef.h>
#include <string.h>
#include <xxhash.h>

#include "kve_cpu_kernels.h"
#include "kve_key.h"
#include "kve_select.h"

typedef struct {
    uint64_t key;
    uint32_t pos;
    uint32_t pad;
} kve_pair;

static int kve_pair_less(kve_pair a, kve_pair b)
{
    return kve_key_pos_less(a.key, a.pos, b.key, b.pos);
}

KVE_DEFINE_SELECT(kve_select_pair, kve_pair, kve_pair_less)
KVE_DEFINE_SELECT(kve_select_u32, uint32_t, KVE_U32_LESS)

static void kve_put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t kve_ref_seq_seed(uint64_t seed, uint64_t seq_id)
{
    unsigned char b[8];
    kve_put_le32(b, (uint32_t)seq_id);
    kve_put_le32(b + 4, (uint32_t)(seq_id >> 32));
    return XXH3_64bits_withSeed(b, 8, seed);
}

static uint64_t kve_ref_key(uint64_t seq_seed, uint32_t flags, uint32_t layer, uint32_t head,
                            uint32_t pos, uint32_t round)
{
    unsigned char b[16];
    kve_put_le32(b, (flags & KVE_SHARED_LAYERS) ? KVE_KEY_ALL_ONES : layer);
    kve_put_le32(b + 4, (flags & KVE_SHARED_HEADS) ? KVE_KEY_ALL_ONES : head);
    kve_put_le32(b + 8, pos);
    kve_put_le32(b + 12, (flags & KVE_PERSISTENT) ? KVE_KEY_ALL_ONES : round);
    return kve_key_finish(XXH3_64bits_withSeed(b, 16, seq_seed));
}

static size_t kve_scalar_scratch_bytes(uint32_t n_slots)
{
    return (size_t)n_slots * (sizeof(uint64_t) + sizeof(kve_pair) + sizeof(uint32_t)) + 64;
}

static void kve_scalar_evict_head(kve_head_job *j, void *scratch)
{
    const int32_t *sp = j->slot_pos;
    uint32_t n = j->n_slots;
    uint64_t *slot_key = (uint64_t *)scratch;
    kve_pair *sel = (kve_pair *)(slot_key + n);
    uint32_t *gen = (uint32_t *)(sel + n);

    /* 1–3: valid, prefix, generated. */
    uint32_t n_valid = 0, n_gen = 0;
    for (uint32_t t = 0; t < n; t++)
        if (sp[t] >= 0) {
            n_valid++;
            if ((uint32_t)sp[t] >= j->prompt)
                gen[n_gen++] = (uint32_t)sp[t];
        }
    j->over_budget = 0;
    j->n_evicted = 0;
    j->n_kept = n_valid;
    if (n_valid <= j->budget) {
        if (j->kept)
            for (uint32_t t = 0, k = 0; t < n; t++)
                if (sp[t] >= 0)
                    j->kept[k++] = (int32_t)t;
        return;
    }
    uint32_t n_prefix = n_valid - n_gen;
    uint32_t wc = j->window < n_gen ? j->window : n_gen;
    /* The window is the wc largest generated positions: those >= win_lo. */
    uint64_t win_lo = (uint64_t)1 << 32;
    if (wc)
        win_lo = kve_select_u32(gen, n_gen, n_gen - wc);
    uint32_t n_cand = n_gen - wc;

    /* 4: how many candidates stay. */
    int64_t nk = (int64_t)j->budget - n_prefix - wc;
    nk = nk < 0 ? 0 : nk > n_cand ? n_cand : nk;
    j->over_budget = (uint64_t)n_prefix + wc > j->budget;

    /* 5: keep the nk smallest (key, pos); thr is the largest kept pair.
     * Scored: the key of SPEC "Scored selection" (descending score, then
     * ascending position). */
    uint64_t seq_seed = kve_ref_seq_seed(j->seed, j->seq_id);
    uint32_t m = 0;
    for (uint32_t t = 0; t < n; t++) {
        int32_t v = sp[t];
        if (v >= 0 && (uint32_t)v >= j->prompt && (uint64_t)v < win_lo) {
            slot_key[t] = j->scores ? kve_score_key(kve_score_bits(j->scores[t]), (uint32_t)v)
                                    : kve_ref_key(seq_seed, j->key_flags, j->layer, j->head,
                                                  (uint32_t)v, j->round);
            sel[m].key = slot_key[t];
            sel[m].pos = (uint32_t)v;
            m++;
        }
    }
    /* m == n_cand for valid input; fewer only when a KVE_TRUSTED_SLOTS caller
     * broke its promise, and then this keeps the evicted row within bounds. */
    if (nk > m)
        nk = m;
    kve_pair thr = {0, 0, 0};
    if (nk > 0)
        thr = kve_select_pair(sel, m, (size_t)nk - 1);

    /* 6: canonical outputs, ascending slot order. */
    uint32_t ne = 0, nkept = 0;
    for (uint32_t t = 0; t < n; t++) {
        int32_t v = sp[t];
        if (v < 0)
            continue;
        int candidate = (uint32_t)v >= j->prompt && (uint64_t)v < win_lo;
        kve_pair me = {candidate ? slot_key[t] : 0, (uint32_t)v, 0};
        if (candidate && (nk == 0 || kve_pair_less(thr, me)))
            j->evicted[ne++] = (int32_t)t;
        else if (j->kept)
            j->kept[nkept++] = (int32_t)t;
        else
            nkept++;
    }
    j->n_evicted = ne;
    j->n_kept = nkept;
}

static void kve_scalar_keys(uint64_t seed, uint32_t flags, const kve_coord *c, size_t n,
                            uint64_t *keys)
{
    uint64_t last_id = 0, seq_seed = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0 || c[i].seq_id != last_id) {
            last_id = c[i].seq_id;
            seq_seed = kve_ref_seq_seed(seed, last_id);
        }
        keys[i] = kve_ref_key(seq_seed, flags, c[i].layer, c[i].head, c[i].pos, c[i].round);
    }
}

static void kve_scalar_head_keys(const kve_head_job *j, const int32_t *pos, uint32_t n,
                                 uint64_t *keys)
{
    uint64_t seq_seed = kve_ref_seq_seed(j->seed, j->seq_id);
    for (uint32_t i = 0; i < n; i++)
        keys[i] = kve_ref_key(seq_seed, j->key_flags, j->layer, j->head, (uint32_t)pos[i], j->round);
}

static void kve_scalar_copy_runs(char *const *dst, const char *const *src, const size_t *bytes,
                                 uint32_t count)
{
    for (uint32_t i = 0; i < count; i++)
        memmove(dst[i], src[i], bytes[i]);
}

const kve_cpu_kernels kve_cpu_kernels_scalar = {
    .isa = KVE_CPU_ISA_SCALAR,
    .evict_scratch_bytes = kve_scalar_scratch_bytes,
    .evict_head = kve_scalar_evict_head,
    .keys = kve_scalar_keys,
    .head_keys = kve_scalar_head_keys,
    .copy_runs = kve_scalar_copy_runs,
    .copy_runs_stream = kve_scalar_copy_runs,
    .row_facts = kve_row_facts_scalar,
    .row_run = kve_row_run_scalar,
    .row_distinct = kve_row_distinct_scalar,
    .row_map_bytes = 1,
};
