/*
 * bench_parts_isa.c — the pieces of one ISA's eviction timed one at a time,
 * compiled once per ISA with that ISA's kernel file included
 * (KVE_PARTS_KERNEL) and flags, so each piece is the library's own code:
 * the hash-only floor, the hashing pass with and without the duplicate
 * marks, the boundary, the whole head. The kernel file's one external
 * symbol, its table, is renamed (KVE_PARTS_TABLE) so that the library's
 * own stays the one the library uses.
 */
#define kve_cpu_kernels_avx2 kve_parts_table_avx2
#define kve_cpu_kernels_avx512 kve_parts_table_avx512
#include KVE_PARTS_KERNEL

#include <stdio.h>
#include <stdlib.h>

#include "bench_parts.h"
#include "bench_util.h"

#define PARTS_MAX_HEADS 4096u
#define PARTS_MAX_SURV 256u /* survivors kept per head for the boundary piece */

/* One head's pass as kve_simd_passes runs it once the window is known. */
typedef struct {
    uint32_t win_lo, survivors;
    int top;
    uint64_t T;
} parts_plan;

typedef struct {
    const parts_input *in;
    kve_simd_ws w;
    void *scratch;
    unsigned char *map;
    int32_t *cand, *evicted;
    uint64_t *keys;
    uint32_t *shi; /* [heads][PARTS_MAX_SURV]: each head's survivors' high halves */
    kve_head_hint hint;
    uint32_t round;
    parts_plan plan[PARTS_MAX_HEADS];
} parts_run;

/* The pieces; P_KEEP is P_SCAN keeping each head's survivors for P_BOUNDARY (not timed). */
enum { P_FLOOR, P_SCAN, P_SCAN_DUPS, P_KEEP, P_BOUNDARY, P_HEAD, P_HEAD_DUPS };

static kve_head_job parts_job(parts_run *r, uint32_t h)
{
    const parts_input *in = r->in;
    kve_head_job j;
    memset(&j, 0, sizeof j);
    j.slot_pos = in->slots + (size_t)h * in->n_slots;
    j.n_slots = in->n_slots;
    j.prompt = in->prompt;
    j.window = in->window;
    j.budget = in->budget;
    j.seed = 2609;
    j.seq_id = 1000;
    j.layer = h / 8;
    j.head = h % 8;
    j.round = r->round;
    j.hint = &r->hint;
    j.evicted = r->evicted;
    j.check_map = r->map;
    return j;
}

/* The window, T and side of head h's pass (what the hint and the plan give
 * the kernel before it hashes; not timed). */
static void parts_plan_head(parts_run *r, uint32_t h)
{
    kve_head_job j = parts_job(r, h);
    kve_counts c;
    int32_t max_pos;
    kve_isa_count(j.slot_pos, j.n_slots, (int32_t)j.prompt, &c, &max_pos);
    c.n_cand = c.n_gen - kve_min_u32(j.window, c.n_gen);
    kve_plan p = kve_plan_of(&j, &c);
    parts_plan *q = &r->plan[h];
    q->win_lo = kve_window_guess(c.n_gen, j.window, max_pos, (int32_t)j.prompt);
    kve_simd_pick(&p, &q->top, &q->T);
}

/* Head h's hashing pass; with keep, its survivors' high halves kept for
 * the boundary (gathered from the per-slot ones where the ISA's pass leaves
 * them to kve_simd_select). */
static void parts_scan(parts_run *r, const kve_head_job *j, uint32_t h, uint32_t check, int keep)
{
    parts_plan *q = &r->plan[h];
    kve_hconst hc = kve_hconst_make(kve_seq_seed(j->seed, j->seq_id), 0, j->layer, j->head, j->round);
    kve_counts x;
    kve_scan_facts f;
    kve_scan s = {j->slot_pos, j->n_slots, (int32_t)j->prompt, q->win_lo, &hc, q->T, q->top,
                  r->w.khi, r->w.surv, r->w.shi, check, check & KVE_JOB_CHECK_DUPS ? r->map : NULL, &f};
    q->survivors = kve_isa_scan(&s, &x);
    if (check & KVE_JOB_CHECK_DUPS) /* the verdict zeroes the map again */
        kve_simd_verdict(&f, x.n_valid, j->n_slots, r->map);
    for (uint32_t i = 0; keep && i < q->survivors && i < PARTS_MAX_SURV; i++)
        r->shi[(size_t)h * PARTS_MAX_SURV + i] = KVE_ISA_SCAN_SHI ? r->w.shi[i] : r->w.khi[r->w.surv[i]];
}

static void parts_fail(const char *what, uint32_t h)
{
    fprintf(stderr, "kvevict-bench-parts: head %u: %s\n", h, what);
    exit(2);
}

static void parts_round(parts_run *r, int piece)
{
    const parts_input *in = r->in;
    const uint32_t n_cand = in->n_slots - in->prompt - in->window, want = in->n_slots - in->budget;
    r->round++;
    for (uint32_t h = 0; h < in->heads; h++) {
        kve_head_job j = parts_job(r, h);
        uint64_t t;
        switch (piece) {
        case P_FLOOR: KVE_PARTS_TABLE.head_keys(&j, r->cand, n_cand, r->keys); break;
        case P_SCAN:
        case P_KEEP: parts_scan(r, &j, h, KVE_JOB_CHECK_RANGE, piece == P_KEEP); break;
        case P_SCAN_DUPS: parts_scan(r, &j, h, KVE_JOB_CHECK_RANGE | KVE_JOB_CHECK_DUPS, 0); break;
        case P_BOUNDARY: /* on the survivors P_KEEP kept */
            if (!r->plan[h].top || r->plan[h].survivors > PARTS_MAX_SURV)
                parts_fail("not the plan the boundary piece times", h);
            kve_simd_boundary(r->shi + (size_t)h * PARTS_MAX_SURV, r->plan[h].survivors, want,
                              (uint32_t)(r->plan[h].T >> 32), UINT32_MAX, r->w.tmp, &t);
            break;
        default:
            j.check = KVE_JOB_CHECK_RANGE | (piece == P_HEAD_DUPS ? KVE_JOB_CHECK_DUPS : 0);
            KVE_PARTS_TABLE.evict_head(&j, r->scratch);
            if (j.n_evicted != want || j.check_result != KVE_JOB_CLEAN)
                parts_fail("evicted other than the workload says, or not clean", h);
        }
    }
}

/* The fastest of repeated rounds of one piece, in ms. */
static double parts_time(parts_run *r, int piece)
{
    double best = 1e30, start = bench_now();
    for (int i = 0; i < 3 || bench_now() - start < r->in->min_time; i++) {
        double t0 = bench_now();
        parts_round(r, piece);
        double t = bench_now() - t0;
        best = t < best ? t : best;
    }
    return best * 1e3;
}

void KVE_PARTS_FN(const parts_input *in, parts_times *out)
{
    static parts_run r; /* the benchmark runs one piece at a time, on one thread */
    memset(&r, 0, sizeof r);
    r.in = in;
    uint32_t n = in->n_slots, n_cand = n - in->prompt - in->window;
    r.scratch = aligned_alloc(64, KVE_ALIGN_UP(kve_simd_scratch_bytes(n), 64) + 64);
    r.map = (unsigned char *)calloc(KVE_FUSED_MAP_BYTES, 1);
    r.cand = (int32_t *)malloc((size_t)n_cand * 4);
    r.evicted = (int32_t *)malloc((size_t)n * 4);
    r.keys = (uint64_t *)aligned_alloc(64, KVE_ALIGN_UP((size_t)n * 8, 64));
    r.shi = (uint32_t *)malloc((size_t)in->heads * PARTS_MAX_SURV * 4);
    if (!r.scratch || !r.map || !r.cand || !r.evicted || !r.keys || !r.shi || in->heads > PARTS_MAX_HEADS)
        parts_fail("out of memory, or too many heads", 0);
    kve_simd_ws_layout(n, (char *)r.scratch, &r.w);
    for (uint32_t i = 0; i < n_cand; i++)
        r.cand[i] = (int32_t)(in->prompt + i);
    for (uint32_t h = 0; h < in->heads; h++)
        parts_plan_head(&r, h);
    out->floor = parts_time(&r, P_FLOOR);
    out->scan_dups = parts_time(&r, P_SCAN_DUPS);
    out->scan = parts_time(&r, P_SCAN);
    parts_round(&r, P_KEEP);
    out->boundary = parts_time(&r, P_BOUNDARY);
    out->head = parts_time(&r, P_HEAD);
    out->head_dups = parts_time(&r, P_HEAD_DUPS);
    free(r.scratch);
    free(r.map);
    free(r.cand);
    free(r.evicted);
    free(r.keys);
    free(r.shi);
}
