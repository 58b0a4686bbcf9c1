/* validate.c — every argument check of the public API, in one place. */
#include <stdint.h>
#include <stdio.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <stdlib.h>
#include <string.h>

#include "kve_error.h"
#include "kve_validate.h"

#define KVE_I32_MAX 0x7fffffffu

static int kve_mul_overflows(size_t a, size_t b, size_t *out)
{
    return __builtin_mul_overflow(a, b, out);
}

/* Elements spanned by @p rows rows of @p len at @p stride (0 when empty). */
static int kve_rows_span(size_t rows, size_t stride, size_t len, size_t *out)
{
    size_t s;
    if (rows == 0 || len == 0) {
        *out = 0;
        return 0;
    }
    if (kve_mul_overflows(rows - 1, stride, &s) || __builtin_add_overflow(s, len, &s))
        return 1;
    *out = s;
    return 0;
}

kve_status kve_validate_batch(const kve_batch *b, size_t *out_heads)
{
    KVE_RETURN_ERROR_IF(!b, KVE_ERR_NULL, "batch is NULL");
    const uint32_t known = KVE_KEY_FLAGS | KVE_TRUSTED_SLOTS | KVE_SCORED;
    KVE_RETURN_ERROR_IF(b->flags & ~known, KVE_ERR_INVALID, "batch.flags = 0x%x: unknown bits 0x%x",
                        b->flags, b->flags & ~known);
    size_t heads;
    KVE_RETURN_ERROR_IF(kve_mul_overflows((size_t)b->n_seqs * b->n_layers, b->n_heads, &heads),
                        KVE_ERR_OVERFLOW, "batch: n_seqs %u x n_layers %u x n_heads %u overflows",
                        b->n_seqs, b->n_layers, b->n_heads);
    KVE_RETURN_ERROR_IF(b->n_layers && b->layer_offset > UINT32_MAX - (b->n_layers - 1),
                        KVE_ERR_OVERFLOW,
                        "batch.layer_offset = %u: layer_offset + n_layers - 1 exceeds 2^32-1",
                        b->layer_offset);
    KVE_RETURN_ERROR_IF(b->n_heads && b->head_offset > UINT32_MAX - (b->n_heads - 1),
                        KVE_ERR_OVERFLOW,
                        "batch.head_offset = %u: head_offset + n_heads - 1 exceeds 2^32-1",
                        b->head_offset);
    KVE_RETURN_ERROR_IF(b->n_slots > KVE_I32_MAX, KVE_ERR_RANGE,
                        "batch.n_slots = %u: must be <= 2^31-1", b->n_slots);
    KVE_RETURN_ERROR_IF(b->budget > KVE_I32_MAX, KVE_ERR_RANGE,
                        "batch.budget = %u: must be <= 2^31-1", b->budget);
    KVE_RETURN_ERROR_IF(b->window > KVE_I32_MAX, KVE_ERR_RANGE,
                        "batch.window = %u: must be <= 2^31-1", b->window);
    KVE_RETURN_ERROR_IF(b->n_seqs && !b->seqs, KVE_ERR_NULL, "batch.seqs is NULL (n_seqs = %u)",
                        b->n_seqs);
    if (heads && b->n_slots) {
        KVE_RETURN_ERROR_IF(!b->slot_pos, KVE_ERR_NULL, "batch.slot_pos is NULL");
        KVE_RETURN_ERROR_IF(b->slot_pos_stride < b->n_slots, KVE_ERR_ALIAS,
                            "batch.slot_pos_stride = %zu < n_slots = %u: head rows overlap",
                            b->slot_pos_stride, b->n_slots);
        size_t span;
        KVE_RETURN_ERROR_IF(kve_rows_span(heads, b->slot_pos_stride, b->n_slots, &span) ||
                                span > SIZE_MAX / sizeof(int32_t),
                            KVE_ERR_OVERFLOW,
                            "batch.slot_pos_stride = %zu: %zu heads overflow the address space",
                            b->slot_pos_stride, heads);
    }
    KVE_TRY(kve_validate_batch_scores(b, heads));
    *out_heads = heads;
    return KVE_OK;
}

typedef struct {
    const char *name;
    const char *lo;
    size_t bytes;
} kve_range;

static kve_status kve_check_disjoint(const kve_range *r, size_t n)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = i + 1; j < n; j++) {
            if (!r[i].bytes || !r[j].bytes)
                continue;
            /* integer addresses, ends saturated: a span too large for the
             * address space (its stride is refused later) must not wrap */
            uintptr_t li = (uintptr_t)r[i].lo, lj = (uintptr_t)r[j].lo;
            uintptr_t ei = r[i].bytes > UINTPTR_MAX - li ? UINTPTR_MAX : li + r[i].bytes;
            uintptr_t ej = r[j].bytes > UINTPTR_MAX - lj ? UINTPTR_MAX : lj + r[j].bytes;
            int overlap = li < ej && lj < ei;
            KVE_RETURN_ERROR_IF(overlap, KVE_ERR_ALIAS, "%s (%p, %zu bytes) overlaps %s (%p, %zu bytes)",
                                r[i].name, (const void *)r[i].lo, r[i].bytes, r[j].name,
                                (const void *)r[j].lo, r[j].bytes);
        }
    return KVE_OK;
}

kve_status kve_validate_evict_out(const kve_batch *b, size_t heads, const kve_evict_out *o)
{
    KVE_RETURN_ERROR_IF(!o, KVE_ERR_NULL, "out is NULL");
    if (heads == 0)
        return KVE_OK;
    size_t max_evicted = b->n_slots > b->budget ? (size_t)(b->n_slots - b->budget) : 0;
    size_t min_stride = max_evicted ? max_evicted : 1;
    KVE_RETURN_ERROR_IF(!o->evicted, KVE_ERR_NULL, "out.evicted is NULL");
    KVE_RETURN_ERROR_IF(!o->n_evicted, KVE_ERR_NULL, "out.n_evicted is NULL");
    KVE_RETURN_ERROR_IF(!o->n_kept, KVE_ERR_NULL, "out.n_kept is NULL");
    KVE_RETURN_ERROR_IF(o->evicted_stride < min_stride, KVE_ERR_RANGE,
                        "out.evicted_stride = %zu: must be >= max(1, n_slots - budget) = %zu",
                        o->evicted_stride, min_stride);
    KVE_RETURN_ERROR_IF(o->kept && o->kept_stride < b->n_slots, KVE_ERR_RANGE,
                        "out.kept_stride = %zu: must be >= n_slots = %u", o->kept_stride,
                        b->n_slots);
    size_t ev_span = 0, kept_span = 0, in_span = 0;
    KVE_RETURN_ERROR_IF(kve_rows_span(heads, o->evicted_stride, max_evicted, &ev_span) ||
                            ev_span > SIZE_MAX / 4,
                        KVE_ERR_OVERFLOW, "out.evicted_stride = %zu overflows over %zu heads",
                        o->evicted_stride, heads);
    if (o->kept)
        KVE_RETURN_ERROR_IF(kve_rows_span(heads, o->kept_stride, b->n_slots, &kept_span) ||
                                kept_span > SIZE_MAX / 4,
                            KVE_ERR_OVERFLOW, "out.kept_stride = %zu overflows over %zu heads",
                            o->kept_stride, heads);
    KVE_RETURN_ERROR_IF(heads > SIZE_MAX / 8, KVE_ERR_OVERFLOW, "%zu heads overflow", heads);
    size_t sc_span = 0;
    if (b->n_slots)
        kve_rows_span(heads, b->slot_pos_stride, b->n_slots, &in_span);
    if (b->n_slots && (b->flags & KVE_SCORED))
        KVE_RETURN_ERROR_IF(kve_rows_span(heads, b->scores_stride, b->n_slots, &sc_span) ||
                                sc_span > SIZE_MAX / 4,
                            KVE_ERR_OVERFLOW, "batch.scores_stride = %zu overflows over %zu heads",
                            b->scores_stride, heads);
    const kve_range r[] = {
        {"batch.slot_pos", (const char *)b->slot_pos, in_span * 4},
        {"out.evicted", (const char *)o->evicted, ev_span * 4},
        {"out.n_evicted", (const char *)o->n_evicted, heads * 4},
        {"out.n_kept", (const char *)o->n_kept, heads * 4},
        {"out.head_flags", (const char *)o->head_flags, o->head_flags ? heads : 0},
        {"out.kept", (const char *)o->kept, kept_span * 4},
        {"out.round_digest", (const char *)o->round_digest, o->round_digest ? heads * 8 : 0},
        {"out.run_digest", (const char *)o->run_digest, o->run_digest ? (size_t)b->n_seqs * 8 : 0},
        {"batch.scores", (const char *)b->scores, sc_span * 4},
    };
    return kve_check_disjoint(r, sizeof r / sizeof r[0]);
}

/* ---- slot contents ---------------------------------------------------- */

typedef struct {
    size_t head;
    size_t slot;
    int32_t value;
    int duplicate; /* 0: value < -1; 1: duplicate of an earlier slot */
} kve_slot_problem;

static int kve_cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The exact first problem of one head, 1 if found: the first value < -1;
 * else, positions within 64*n_slots of each other, the first slot holding
 * a position an earlier slot holds; else the second slot of the smallest
 * repeated position. @p scratch holds n_slots 64-bit words. Only reached
 * when the fast checks below cannot clear the head. */
static int kve_head_problem_exact(const int32_t *row, uint32_t n, int check_dups, uint64_t *scratch,
                                  size_t scratch_words, kve_slot_problem *p)
{
    int32_t lo = INT32_MAX, hi = -1;
    for (uint32_t t = 0; t < n; t++) {
        int32_t v = row[t];
        if (v < -1) {
            p->slot = t;
            p->value = v;
            p->duplicate = 0;
            return 1;
        }
        if (v >= 0) {
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
    }
    if (!check_dups || hi < 0)
        return 0;
    size_t span = (size_t)(hi - lo) + 1;
    if (span <= scratch_words * 64) {
        memset(scratch, 0, (span + 63) / 64 * 8);
        for (uint32_t t = 0; t < n; t++) {
            if (row[t] < 0)
                continue;
            size_t bit = (size_t)(row[t] - lo);
            uint64_t m = 1ull << (bit & 63);
            if (scratch[bit >> 6] & m) {
                p->slot = t;
                p->value = row[t];
                p->duplicate = 1;
                return 1;
            }
            scratch[bit >> 6] |= m;
        }
        return 0;
    }
    /* Sparse positions: sort a copy, then find the first slot of a repeat. */
    int32_t *sorted = (int32_t *)scratch;
    size_t m = 0;
    for (uint32_t t = 0; t < n; t++)
        if (row[t] >= 0)
            sorted[m++] = row[t];
    qsort(sorted, m, sizeof *sorted, kve_cmp_i32);
    for (size_t i = 1; i < m; i++)
        if (sorted[i] == sorted[i - 1]) {
            int seen = 0;
            for (uint32_t t = 0; t < n; t++)
                if (row[t] == sorted[i] && seen++) {
                    p->slot = t;
                    break;
                }
            p->value = sorted[i];
            p->duplicate = 1;
            return 1;
        }
    return 0;
}

/* Per-row facts the fast checks need: the smallest value (below -1: a bad
 * one), the smallest and largest valid position, the valid slots, and the
 * adjacent pairs breaking "strictly ascending positions, then only empty
 * slots" (0: sorted, hence distinct). Scalar reference, then AVX2 and
 * AVX-512 versions (kve_row_ops_for picks by the context's ISA). */
typedef struct {
    int32_t min, hi;
    uint32_t lo, valid, unordered;
} kve_row_facts;

static void kve_facts_tail(const int32_t *row, uint32_t t, uint32_t n, kve_row_facts *s)
{
    for (; t < n; t++) {
        int32_t v = row[t];
        s->min = v < s->min ? v : s->min;
        s->hi = v > s->hi ? v : s->hi;
        s->lo = (uint32_t)v < s->lo ? (uint32_t)v : s->lo; /* -1 is never the least */
        s->valid += v >= 0;
        s->unordered += t + 1 < n && row[t + 1] != -1 && (v < 0 || row[t + 1] <= v);
    }
}

static void kve_facts_scalar(const int32_t *row, uint32_t n, kve_row_facts *s)
{
    *s = (kve_row_facts){INT32_MAX, -1, UINT32_MAX, 0, 0};
    kve_facts_tail(row, 0, n, s);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define KVE_HAVE_X86_FACTS 1

__attribute__((target("avx512f,popcnt"))) static void kve_facts_avx512(const int32_t *row, uint32_t n,
                                                                      kve_row_facts *s)
{
    __m512i mn = _mm512_set1_epi32(INT32_MAX), hi = _mm512_set1_epi32(-1), lo = hi;
    const __m512i m1 = _mm512_set1_epi32(-1), zero = _mm512_setzero_si512();
    uint32_t valid = 0, bad = 0, t = 0;
    for (; t + 17 <= n; t += 16) {
        __m512i v = _mm512_loadu_si512(row + t), next = _mm512_loadu_si512(row + t + 1);
        mn = _mm512_min_epi32(mn, v);
        hi = _mm512_max_epi32(hi, v);
        lo = _mm512_min_epu32(lo, v);
        valid += (uint32_t)_mm_popcnt_u32(_mm512_cmpge_epi32_mask(v, zero));
        __mmask16 out = _mm512_cmplt_epi32_mask(v, zero) | _mm512_cmple_epi32_mask(next, v);
        bad += (uint32_t)_mm_popcnt_u32(_mm512_mask_cmpneq_epi32_mask(out, next, m1));
    }
    *s = (kve_row_facts){_mm512_reduce_min_epi32(mn), _mm512_reduce_max_epi32(hi),
                         (uint32_t)_mm512_reduce_min_epu32(lo), valid, bad};
    kve_facts_tail(row, t, n, s);
}

__attribute__((target("avx2,popcnt"))) static void kve_facts_avx2(const int32_t *row, uint32_t n,
                                                                 kve_row_facts *s)
{
    __m256i mn = _mm256_set1_epi32(INT32_MAX), hi = _mm256_set1_epi32(-1), lo = hi;
    const __m256i m1 = _mm256_set1_epi32(-1);
    uint32_t valid = 0, bad = 0, t = 0;
    for (; t + 9 <= n; t += 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(row + t));
        __m256i next = _mm256_loadu_si256((const __m256i *)(const void *)(row + t + 1));
        mn = _mm256_min_epi32(mn, v);
        hi = _mm256_max_epi32(hi, v);
        lo = _mm256_min_epu32(lo, v);
        __m256i neg = _mm256_cmpgt_epi32(_mm256_setzero_si256(), v);
        valid += 8 - (uint32_t)_mm_popcnt_u32((uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(neg)));
        __m256i out = _mm256_or_si256(neg, _mm256_xor_si256(_mm256_cmpgt_epi32(next, v), m1));
        out = _mm256_andnot_si256(_mm256_cmpeq_epi32(next, m1), out);
        bad += (uint32_t)_mm_popcnt_u32((uint32_t)_mm256_movemask_ps(_mm256_castsi256_ps(out)));
    }
    int32_t a[8], b[8];
    uint32_t c[8];
    _mm256_storeu_si256((__m256i *)(void *)a, mn);
    _mm256_storeu_si256((__m256i *)(void *)b, hi);
    _mm256_storeu_si256((__m256i *)(void *)c, lo);
    *s = (kve_row_facts){INT32_MAX, -1, UINT32_MAX, valid, bad};
    for (int k = 0; k < 8; k++) {
        s->min = a[k] < s->min ? a[k] : s->min;
        s->hi = b[k] > s->hi ? b[k] : s->hi;
        s->lo = c[k] < s->lo ? c[k] : s->lo;
    }
    kve_facts_tail(row, t, n, s);
}
#endif

/* Slots at the start holding row[0], row[0] + 1, ...: a prompt in order. */
static uint32_t kve_run_tail(const int32_t *row, uint32_t t, uint32_t n)
{
    while (t < n && (int64_t)row[t] == (int64_t)row[0] + t)
        t++;
    return t;
}

static uint32_t kve_run_scalar(const int32_t *row, uint32_t n)
{
    return row[0] < 0 ? 0 : kve_run_tail(row, 0, n);
}

/* Distinct valid positions in row[0..n), all within [lo, lo + span), and
 * as many as @p valid: whether they are all distinct. A byte map of plain
 * stores (no read-modify-write chains), then its bytes counted. */
static int kve_distinct_scalar(const int32_t *row, uint32_t n, int32_t lo, size_t span,
                               uint32_t valid, void *buf)
{
    unsigned char *map = (unsigned char *)buf;
    size_t words = (span + 7) / 8;
    memset(map, 0, words * 8);
    for (uint32_t t = 0; t < n; t++)
        map[row[t] >= 0 ? (size_t)(row[t] - lo) : words * 8] = 1;
    uint64_t count = 0;
    for (size_t i = 0; i < words; i++) {
        uint64_t w;
        memcpy(&w, map + 8 * i, 8);
        count += (w * 0x0101010101010101ull) >> 56;
    }
    return count == valid;
}

#ifdef KVE_HAVE_X86_FACTS
/* Slots a run from @p first can span before its next position would pass
 * INT32_MAX: the vector passes build expected positions with 32-bit adds,
 * which must not wrap into negative values (then a run crossing INT32_MAX
 * would hide them, and the duplicates after them, from every check). */
static uint32_t kve_run_room(int32_t first, uint32_t n)
{
    uint64_t room = (uint64_t)INT32_MAX - (uint64_t)first + 1;
    return room < n ? (uint32_t)room : n;
}

__attribute__((target("avx512f"))) static uint32_t kve_run_avx512(const int32_t *row, uint32_t n)
{
    if (row[0] < 0)
        return 0;
    __m512i expect = _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                      _mm512_set1_epi32(row[0]));
    uint32_t t = 0, lanes = kve_run_room(row[0], n);
    for (; t + 16 <= lanes; t += 16, expect = _mm512_add_epi32(expect, _mm512_set1_epi32(16)))
        if (_mm512_cmpneq_epi32_mask(_mm512_loadu_si512(row + t), expect))
            break;
    return kve_run_tail(row, t, n);
}

__attribute__((target("avx2"))) static uint32_t kve_run_avx2(const int32_t *row, uint32_t n)
{
    if (row[0] < 0)
        return 0;
    __m256i expect = _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(row[0]));
    uint32_t t = 0, lanes = kve_run_room(row[0], n);
    for (; t + 8 <= lanes; t += 8, expect = _mm256_add_epi32(expect, _mm256_set1_epi32(8))) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(const void *)(row + t));
        if (_mm256_movemask_epi8(_mm256_cmpeq_epi32(v, expect)) != -1)
            break;
    }
    return kve_run_tail(row, t, n);
}

/* The same map as kve_distinct_scalar, one dword per position, written by
 * scatters of 16 lanes. */
__attribute__((target("avx512f"))) static int kve_distinct_avx512(const int32_t *row, uint32_t n,
                                                                 int32_t lo, size_t span,
                                                                 uint32_t valid, void *buf)
{
    int32_t *map = (int32_t *)buf;
    size_t padded = (span + 15) & ~(size_t)15;
    memset(map, 0, padded * 4);
    const __m512i vlo = _mm512_set1_epi32(lo), one = _mm512_set1_epi32(1);
    for (uint32_t t = 0; t < n; t += 16) {
        __mmask16 in = n - t >= 16 ? 0xFFFF : (__mmask16)((1u << (n - t)) - 1);
        __m512i v = _mm512_maskz_loadu_epi32(in, row + t);
        __mmask16 ok = _mm512_mask_cmpge_epi32_mask(in, v, _mm512_setzero_si512());
        _mm512_mask_i32scatter_epi32(map, ok, _mm512_sub_epi32(v, vlo), one, 4);
    }
    __m512i sum = _mm512_setzero_si512();
    for (size_t i = 0; i < padded; i += 16)
        sum = _mm512_add_epi32(sum, _mm512_loadu_si512(map + i));
    return (uint32_t)_mm512_reduce_add_epi32(sum) == valid;
}
#endif

/* The row passes of the context's ISA (resolved: this CPU runs it), so
 * KVE_CPU_ISA and kve_context_set_cpu_isa() choose the checks as they
 * choose the kernels, and every ISA's checks can be tested on one machine. */
typedef struct {
    void (*facts)(const int32_t *, uint32_t, kve_row_facts *);
    uint32_t (*run)(const int32_t *, uint32_t);
    int (*distinct)(const int32_t *, uint32_t, int32_t, size_t, uint32_t, void *);
    size_t map_bytes; /* per position */
} kve_row_ops;

static kve_row_ops kve_row_ops_for(kve_cpu_isa isa)
{
#ifdef KVE_HAVE_X86_FACTS
    if (isa == KVE_CPU_ISA_AVX512)
        return (kve_row_ops){kve_facts_avx512, kve_run_avx512, kve_distinct_avx512, 4};
    if (isa == KVE_CPU_ISA_AVX2)
        return (kve_row_ops){kve_facts_avx2, kve_run_avx2, kve_distinct_scalar, 1};
#else
    (void)isa;
#endif
    return (kve_row_ops){kve_facts_scalar, kve_run_scalar, kve_distinct_scalar, 1};
}

/* Valid slots of a row holding a position in [a, b]. */
static uint32_t kve_row_inside(const int32_t *row, uint32_t n, int32_t a, int32_t b)
{
    uint32_t c = 0;
    for (uint32_t t = 0; t < n; t++)
        c += row[t] >= a && row[t] <= b;
    return c;
}

#define KVE_MAP_BYTES 32768

/* Clears a head without the exact algorithm when it can: 0 = no problem,
 * 1 = a problem (or maybe one): ask kve_head_problem_exact. */
static int kve_head_suspect(const int32_t *row, uint32_t n, int check_dups, const kve_row_ops *ops,
                            void *map)
{
    kve_row_facts q;
    if (!check_dups) {
        ops->facts(row, n, &q);
        return q.min < -1;
    }
    /* The prompt usually fills the first slots in order: distinct, and only
     * the rest of the row can repeat one of them or itself. */
    uint32_t r = ops->run(row, n);
    const int32_t *rest = row + r;
    ops->facts(rest, n - r, &q);
    if (q.min < -1)
        return 1;
    if (!q.unordered && (!r || r == n || rest[0] == -1 || rest[0] > row[r - 1]))
        return 0; /* ascending positions are distinct */
    if (r && q.valid && (int64_t)q.lo <= row[r - 1] && q.hi >= row[0] &&
        kve_row_inside(rest, n - r, row[0], row[r - 1]))
        return 1;
    if (q.valid <= 1)
        return 0;
    size_t span = (size_t)(q.hi - (int32_t)q.lo) + 1;
    if (span * ops->map_bytes > KVE_MAP_BYTES)
        return 1;
    return !ops->distinct(rest, n - r, (int32_t)q.lo, span, q.valid, map);
}

kve_status kve_validate_slot_contents(const kve_batch *b, size_t heads, int threads,
                                      kve_cpu_isa isa)
{
    if (heads == 0 || b->n_slots == 0)
        return KVE_OK;
    int check_dups = !(b->flags & KVE_TRUSTED_SLOTS);
    size_t words = (size_t)b->n_slots; /* 64 bits per slot of span, or n_slots int32 */
    if (threads < 1)
        threads = 1;
    size_t first_bad = SIZE_MAX;
    kve_slot_problem found = {0, 0, 0, 0};
    int nomem = 0;
    const kve_row_ops ops = kve_row_ops_for(isa);
#pragma omp parallel num_threads(threads)
    {
        uint64_t map[KVE_MAP_BYTES / 8 + 2]; /* + one spare word for empty slots */
        uint64_t *scratch = NULL; /* for the exact algorithm, on demand */
        /* The heads the backend's static schedule gives this thread next, walked
         * backwards: the rows it evicts first are then still in its cache. */
        size_t nt = 1, me = 0;
#ifdef _OPENMP
        nt = (size_t)omp_get_num_threads();
        me = (size_t)omp_get_thread_num();
#endif
        size_t q = heads / nt, extra = heads % nt;
        size_t lo = me * q + (me < extra ? me : extra), hi = lo + q + (me < extra);
        for (size_t i = hi; i-- > lo;) {
            const int32_t *row = b->slot_pos + i * b->slot_pos_stride;
            if (!kve_head_suspect(row, b->n_slots, check_dups, &ops, map))
                continue;
            if (!scratch)
                scratch = (uint64_t *)malloc(words * sizeof *scratch);
            kve_slot_problem p = {i, 0, 0, 0};
            int bad = scratch && kve_head_problem_exact(row, b->n_slots, check_dups, scratch, words, &p);
#pragma omp critical(kve_slot_problem)
            {
                nomem |= !scratch;
                if (bad && i < first_bad) {
                    first_bad = i;
                    found = p;
                }
            }
        }
        free(scratch);
    }
    KVE_RETURN_ERROR_IF(nomem, KVE_ERR_NOMEM,
                        "cannot allocate %zu bytes to check slot_pos for duplicates",
                        words * sizeof(uint64_t));
    if (first_bad == SIZE_MAX)
        return KVE_OK;
    if (found.duplicate)
        return kve_error_set(KVE_ERR_DUPLICATE,
                             "batch.slot_pos[head %zu][slot %zu] = %d: position already held by "
                             "another slot of this head",
                             found.head, found.slot, found.value);
    return kve_error_set(KVE_ERR_RANGE,
                         "batch.slot_pos[head %zu][slot %zu] = %d: positions must be >= 0, or -1 "
                         "for an empty slot",
                         found.head, found.slot, found.value);
}

/* ---- compaction --------------------------------------------------------- */

kve_status kve_view_span(const char *what, const size_t extent[4], const size_t stride[4],
                         size_t entry_bytes, size_t *out_span)
{
    int order[4] = {0, 1, 2, 3};
    /* Sort the dimensions by stride; each must step past all inner ones. */
    for (int i = 1; i < 4; i++)
        for (int j = i; j > 0 && stride[order[j]] < stride[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    static const char *const dim_names[4] = {"stride_seq", "stride_layer", "stride_head",
                                             "stride_slot"};
    size_t span = entry_bytes;
    for (int k = 0; k < 4; k++) {
        int d = order[k];
        if (extent[d] <= 1)
            continue;
        KVE_RETURN_ERROR_IF(stride[d] < span, KVE_ERR_ALIAS,
                            "%s.%s = %zu: entries overlap (needs >= %zu bytes)", what,
                            dim_names[d], stride[d], span);
        size_t add;
        KVE_RETURN_ERROR_IF(kve_mul_overflows(extent[d] - 1, stride[d], &add) ||
                                __builtin_add_overflow(span, add, &span),
                            KVE_ERR_OVERFLOW, "%s.%s = %zu overflows the address space", what,
                            dim_names[d], stride[d]);
    }
    *out_span = span;
    return KVE_OK;
}

kve_status kve_validate_compact(const kve_compact_desc *d, size_t *out_heads)
{
    KVE_RETURN_ERROR_IF(!d, KVE_ERR_NULL, "desc is NULL");
    size_t heads;
    KVE_RETURN_ERROR_IF(kve_mul_overflows((size_t)d->n_seqs * d->n_layers, d->n_heads, &heads),
                        KVE_ERR_OVERFLOW, "desc: n_seqs %u x n_layers %u x n_heads %u overflows",
                        d->n_seqs, d->n_layers, d->n_heads);
    KVE_RETURN_ERROR_IF(d->n_slots > KVE_I32_MAX, KVE_ERR_RANGE,
                        "desc.n_slots = %u: must be <= 2^31-1", d->n_slots);
    KVE_RETURN_ERROR_IF(d->n_caches < 1 || d->n_caches > KVE_MAX_CACHES, KVE_ERR_RANGE,
                        "desc.n_caches = %u: must be 1..%d", d->n_caches, KVE_MAX_CACHES);
    KVE_RETURN_ERROR_IF(d->entry_bytes == 0, KVE_ERR_RANGE, "desc.entry_bytes = 0: must be > 0");
    *out_heads = heads;
    if (heads == 0 || d->n_slots == 0)
        return KVE_OK;
    KVE_RETURN_ERROR_IF(!d->slot_pos, KVE_ERR_NULL, "desc.slot_pos is NULL");
    KVE_RETURN_ERROR_IF(!d->evicted, KVE_ERR_NULL, "desc.evicted is NULL");
    KVE_RETURN_ERROR_IF(!d->n_evicted, KVE_ERR_NULL, "desc.n_evicted is NULL");
    KVE_RETURN_ERROR_IF(d->slot_pos_stride < d->n_slots, KVE_ERR_ALIAS,
                        "desc.slot_pos_stride = %zu < n_slots = %u: head rows overlap",
                        d->slot_pos_stride, d->n_slots);
    KVE_RETURN_ERROR_IF(d->evicted_stride == 0, KVE_ERR_RANGE,
                        "desc.evicted_stride = 0: must be >= 1");
    size_t sp_span, ev_span;
    KVE_RETURN_ERROR_IF(kve_rows_span(heads, d->slot_pos_stride, d->n_slots, &sp_span) ||
                            sp_span > SIZE_MAX / 4,
                        KVE_ERR_OVERFLOW, "desc.slot_pos_stride = %zu overflows", d->slot_pos_stride);
    KVE_RETURN_ERROR_IF(kve_rows_span(heads, d->evicted_stride, d->evicted_stride, &ev_span) ||
                            ev_span > SIZE_MAX / 4,
                        KVE_ERR_OVERFLOW, "desc.evicted_stride = %zu overflows", d->evicted_stride);
    const size_t extent[4] = {d->n_seqs, d->n_layers, d->n_heads, d->n_slots};
    int out_of_place = d->dst[0].base != NULL;
    size_t spans[KVE_MAX_CACHES][2];
    for (uint32_t c = 0; c < d->n_caches; c++) {
        for (int side = 0; side < 1 + out_of_place; side++) {
            const kve_cache_view *v = side ? &d->dst[c] : &d->src[c];
            char what[16];
            snprintf(what, sizeof what, "%s[%u]", side ? "dst" : "src", c);
            KVE_RETURN_ERROR_IF(!v->base, KVE_ERR_NULL, "desc.%s.base is NULL%s", what,
                                side ? " (dst[0] is set, so every dst must be)" : "");
            const size_t stride[4] = {v->stride_seq, v->stride_layer, v->stride_head,
                                      v->stride_slot};
            KVE_TRY(kve_view_span(what, extent, stride, d->entry_bytes, &spans[c][side]));
        }
        if (!out_of_place)
            KVE_RETURN_ERROR_IF(d->dst[c].base != NULL, KVE_ERR_INVALID,
                                "desc.dst[%u].base is set but dst[0].base is NULL: give every dst "
                                "or none",
                                c);
    }
    if (out_of_place)
        for (uint32_t c = 0; c < d->n_caches; c++)
            for (uint32_t s = 0; s < d->n_caches; s++) {
                const char *a = (const char *)d->dst[c].base, *b = (const char *)d->src[s].base;
                KVE_RETURN_ERROR_IF(a < b + spans[s][0] && b < a + spans[c][1], KVE_ERR_ALIAS,
                                    "desc.dst[%u] (%p, %zu bytes) overlaps desc.src[%u] (%p, %zu "
                                    "bytes)",
                                    c, (const void *)a, spans[c][1], s, (const void *)b,
                                    spans[s][0]);
            }
    return KVE_OK;
}

kve_status kve_validate_compact_contents(const kve_compact_desc *d, size_t heads)
{
    if (heads == 0 || d->n_slots == 0)
        return KVE_OK;
    for (size_t i = 0; i < heads; i++) {
        uint32_t ne = d->n_evicted[i];
        KVE_RETURN_ERROR_IF(ne > d->n_slots || ne > d->evicted_stride, KVE_ERR_RANGE,
                            "desc.n_evicted[%zu] = %u: exceeds n_slots %u or evicted_stride %zu",
                            i, ne, d->n_slots, d->evicted_stride);
        const int32_t *ev = d->evicted + i * d->evicted_stride;
        const int32_t *row = d->slot_pos + i * d->slot_pos_stride;
        for (uint32_t k = 0; k < ne; k++) {
            KVE_RETURN_ERROR_IF(ev[k] < 0 || (uint32_t)ev[k] >= d->n_slots, KVE_ERR_RANGE,
                                "desc.evicted[head %zu][%u] = %d: not a slot in 0..%u", i, k,
                                ev[k], d->n_slots - 1);
            KVE_RETURN_ERROR_IF(k && ev[k] <= ev[k - 1], KVE_ERR_INVALID,
                                "desc.evicted[head %zu][%u] = %d: evicted slots must be strictly "
                                "ascending (previous %d)",
                                i, k, ev[k], ev[k - 1]);
            KVE_RETURN_ERROR_IF(row[ev[k]] < 0, KVE_ERR_INVALID,
                                "desc.evicted[head %zu][%u] = slot %d, which is empty "
                                "(slot_pos = %d)",
                                i, k, ev[k], row[ev[k]]);
        }
        for (uint32_t t = 0; t < d->n_slots; t++)
            KVE_RETURN_ERROR_IF(row[t] < -1, KVE_ERR_RANGE,
                                "desc.slot_pos[head %zu][slot %u] = %d: must be >= -1", i, t,
                                row[t]);
    }
    return KVE_OK;
}
