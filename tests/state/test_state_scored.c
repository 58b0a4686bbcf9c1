/* test_state_scored.c — a KVE_SCORED cache state against a plain model of
 * docs/SPEC.md "Schedule" whose rounds keep the highest engine-supplied
 * scores: random calls over several rows, rounds_due against the model,
 * NaN wherever the spec reads no score, and the restriction errors (state
 * unchanged); the flag, scores and rebuild errors are
 * tests/core/test_errors_state.c's. */
#include <math.h>

#include "kve_scored_model.h"
#include "kve_state_test.h"

enum { ROWS = 3, LAYERS = 2, HEADS = 2, TABLES = LAYERS * HEADS, PAD = 3 };
static const uint32_t B = 12, W = 4, R = 4;

/* The engine's score of a position: few distinct values, so ties are common. */
static float engine_score(uint64_t id, uint32_t table, uint32_t pos, uint32_t round)
{
    uint64_t h = id * 0x9E3779B97F4A7C15ULL ^ (uint64_t)table << 40 ^ (uint64_t)pos << 8 ^ round;
    h = (h ^ (h >> 29)) * 0xBF58476D1CE4E5B9ULL;
    return (float)((h >> 40) % 7) - 3.0f;
}

typedef struct {
    uint64_t id;
    uint32_t P, C, n_tokens, round, count;
    int32_t pos[TABLES][64]; /* held positions, any order */
} model_row;

/* The model's rounds for n_new more tokens. */
static uint32_t model_due(const model_row *m, uint32_t n_new)
{
    uint32_t room = m->C - m->count;
    return n_new <= room ? 0 : (n_new - room + R - 1) / R;
}

static void model_append(model_row *m, uint32_t n_new)
{
    for (uint32_t k = 0; k < n_new; k++) {
        if (m->count == m->C) { /* a round: each table keeps its highest scores */
            for (uint32_t t = 0; t < TABLES; t++) {
                float sc[64];
                int32_t ev[64], keep[64];
                int over;
                for (uint32_t i = 0; i < m->C; i++)
                    sc[i] = engine_score(m->id, t, (uint32_t)m->pos[t][i], m->round);
                uint32_t ne = ksm_head(m->pos[t], sc, m->C, m->P, W, B, ev, &over, NULL), j = 0;
                ck_assert_uint_eq(ne, R);
                for (uint32_t i = 0, e = 0; i < m->C; i++) {
                    if (e < ne && ev[e] == (int32_t)i) {
                        e++;
                        continue;
                    }
                    keep[j++] = m->pos[t][i];
                }
                memcpy(m->pos[t], keep, (size_t)j * 4);
            }
            m->count = m->C - R;
            m->round++;
        }
        for (uint32_t t = 0; t < TABLES; t++)
            m->pos[t][m->count] = (int32_t)m->n_tokens;
        m->count++;
        m->n_tokens++;
    }
}

/* The state's rows hold the model's positions (as sets) and counts. */
static void expect_model(kve_state *st, const kve_state_layout *lay, const model_row *m)
{
    int32_t *buf = (int32_t *)malloc(lay->row_elems * 4);
    for (uint32_t r = 0; r < ROWS; r++) {
        kve_state_seq_info info;
        KT_OK(kve_state_get_seq(st, r, &info));
        ck_assert_uint_eq(info.n_tokens, m[r].n_tokens);
        ck_assert_uint_eq(info.round, m[r].round);
        ck_assert_uint_eq(info.n_valid, m[r].count);
        KT_OK(kve_state_read_slots(st, r, buf, lay->row_elems));
        for (uint32_t t = 0; t < TABLES; t++) {
            int32_t got[64], want[64];
            memcpy(got, buf + (size_t)t * lay->max_slots, (size_t)m[r].count * 4);
            memcpy(want, m[r].pos[t], (size_t)m[r].count * 4);
            qsort(got, m[r].count, 4, kve_test_cmp_i32);
            qsort(want, m[r].count, 4, kve_test_cmp_i32);
            ck_assert_msg(memcmp(got, want, (size_t)m[r].count * 4) == 0,
                          "row %u table %u: the state holds other positions than the model", r, t);
        }
    }
    free(buf);
}

/* Snapshot of every row's tables and counts, for "state unchanged". */
static void snapshot(kve_state *st, const kve_state_layout *lay, int32_t *buf, kve_state_seq_info *info)
{
    for (uint32_t r = 0; r < ROWS; r++) {
        KT_OK(kve_state_read_slots(st, r, buf + (size_t)r * lay->row_elems, lay->row_elems));
        KT_OK(kve_state_get_seq(st, r, &info[r]));
    }
}

/* Scores of the due rows from their tables before the call; NaN at empty
 * slots, the prompt and the part of the window cached before the call (so
 * the state must read candidates only). */
static void fill_scores(kve_state *st, const kve_state_layout *lay, const model_row *m,
                        const uint32_t *rows, const uint32_t *n_new, uint32_t n_rows, float *sc,
                        size_t s_row, size_t s_tab)
{
    int32_t *buf = (int32_t *)malloc(lay->row_elems * 4);
    for (size_t i = 0; i < n_rows * s_row; i++)
        sc[i] = NAN;
    for (uint32_t i = 0; i < n_rows; i++) {
        const model_row *x = &m[rows[i]];
        if (!model_due(x, n_new[i]))
            continue;
        uint32_t before = x->C - x->count;
        KT_OK(kve_state_read_slots(st, rows[i], buf, lay->row_elems));
        for (uint32_t t = 0; t < TABLES; t++) {
            const int32_t *tab = buf + (size_t)t * lay->max_slots;
            /* the window's part cached before the call: its W - before largest generated */
            int32_t gen[64];
            uint32_t ng = 0;
            for (uint32_t s = 0; s < x->count; s++)
                if ((uint32_t)tab[s] >= x->P)
                    gen[ng++] = tab[s];
            qsort(gen, ng, 4, kve_test_cmp_i32);
            uint32_t wc = W - before < ng ? W - before : ng;
            int32_t win_lo = wc ? gen[ng - wc] : INT32_MAX;
            for (uint32_t s = 0; s < x->count; s++)
                if ((uint32_t)tab[s] >= x->P && tab[s] < win_lo)
                    sc[i * s_row + t * s_tab + s] = engine_score(x->id, t, (uint32_t)tab[s], x->round);
        }
    }
    free(buf);
}

/* Every row admitted with a random prompt of 0..20 tokens, prefilled. */
static void admit_rows(kve_state *st, const kve_schedule *sch, model_row *m, uint64_t *rng)
{
    for (uint32_t r = 0; r < ROWS; r++) {
        m[r].id = 100 + r;
        m[r].P = kt_below(rng, 21);
        KT_OK(kve_schedule_capacity(sch, m[r].P, &m[r].C));
        KT_OK(kve_state_admit(st, r, m[r].id, m[r].P));
        uint32_t p = m[r].P;
        if (p) {
            KT_OK(kve_state_append(st, 1, &r, &p, NULL));
            model_append(&m[r], p);
        }
    }
}

/* The append is refused with a message naming @p needle, and neither the
 * tables nor the rows' infos changed. */
static void expect_refused(kve_state *st, const kve_state_layout *lay, uint32_t n_rows,
                           const uint32_t *rows, const uint32_t *n_new,
                           const kve_step_buffers *out, const char *needle, int32_t *snap0,
                           int32_t *snap1)
{
    kve_state_seq_info i0[ROWS], i1[ROWS];
    snapshot(st, lay, snap0, i0);
    EXPECT_ERR(kve_state_append(st, n_rows, rows, n_new, out), KVE_ERR_INVALID, needle);
    snapshot(st, lay, snap1, i1);
    ck_assert(memcmp(snap0, snap1, ROWS * lay->row_elems * 4) == 0);
    ck_assert(memcmp(i0, i1, sizeof i0) == 0);
}

START_TEST(scored_state_against_model)
{
    kve_context *ctx = ks_context();
    uint32_t cap_max = 0;
    kve_schedule sch = {0x5eed0001ULL, KVE_SCORED, B, W, R};
    KT_OK(kve_schedule_capacity(&sch, 20, &cap_max));
    kve_state_desc d = ks_desc(KVE_SCORED, ROWS, LAYERS, HEADS, B, W, R, cap_max);
    kve_state_layout lay;
    kve_state *st = ks_create(ctx, &d, &lay);
    ck_assert_uint_eq(lay.table_layers * lay.table_heads, TABLES);
    uint64_t rng = 4242 + (uint64_t)_i;
    model_row m[ROWS];
    memset(m, 0, sizeof m);
    const size_t s_tab = cap_max + PAD, s_row = TABLES * s_tab + 5;
    float *sc = (float *)malloc(ROWS * s_row * 4);
    int32_t *snap0 = (int32_t *)malloc(ROWS * lay.row_elems * 4), *snap1 = (int32_t *)malloc(ROWS * lay.row_elems * 4);
    admit_rows(st, &sch, m, &rng);
    int errors_seen = 0, rounds_seen = 0;
    for (int call = 0; call < 400; call++) {
        uint32_t rows[ROWS], n_new[ROWS], due[ROWS], n_rows = 1 + kt_below(&rng, ROWS);
        uint32_t first = kt_below(&rng, ROWS);
        for (uint32_t i = 0; i < n_rows; i++) {
            rows[i] = (first + i) % ROWS;
            n_new[i] = kt_below(&rng, 4) ? 1 : 1 + kt_below(&rng, 2 * R + W);
        }
        KT_OK(kve_state_rounds_due(st, n_rows, rows, n_new, due));
        int bad = 0;
        for (uint32_t i = 0; i < n_rows; i++) {
            ck_assert_uint_eq(due[i], model_due(&m[rows[i]], n_new[i]));
            bad |= due[i] > 1 || (due[i] == 1 && m[rows[i]].C - m[rows[i]].count > W);
        }
        kve_step_buffers out;
        memset(&out, 0, sizeof out);
        out.scores = sc;
        out.scores_stride_row = s_row;
        out.scores_stride_table = s_tab;
        fill_scores(st, &lay, m, rows, n_new, n_rows, sc, s_row, s_tab);
        if (bad) { /* refused, nothing changed; then one token per row */
            expect_refused(st, &lay, n_rows, rows, n_new, &out, "window W = 4", snap0, snap1);
            errors_seen++;
            for (uint32_t i = 0; i < n_rows; i++)
                n_new[i] = 1;
            fill_scores(st, &lay, m, rows, n_new, n_rows, sc, s_row, s_tab);
        }
        int any_due = 0;
        for (uint32_t i = 0; i < n_rows; i++)
            any_due |= model_due(&m[rows[i]], n_new[i]) > 0;
        if (any_due && call % 7 == 0) { /* a NaN at a candidate: refused, nothing changed */
            uint32_t i = 0;
            while (!model_due(&m[rows[i]], n_new[i]))
                i++;
            size_t at = i * s_row + (TABLES - 1) * s_tab, s = 0;
            while (isnan(sc[at + s]))
                s++;
            float keep = sc[at + s];
            sc[at + s] = NAN;
            expect_refused(st, &lay, n_rows, rows, n_new, &out, "is NaN", snap0, snap1);
            sc[at + s] = keep;
        }
        KT_OK(kve_state_append(st, n_rows, rows, n_new, any_due || kt_below(&rng, 2) ? &out : NULL));
        for (uint32_t i = 0; i < n_rows; i++) {
            rounds_seen += model_due(&m[rows[i]], n_new[i]) > 0;
            model_append(&m[rows[i]], n_new[i]);
        }
        expect_model(st, &lay, m);
    }
    ck_assert_int_gt(errors_seen, 5);
    ck_assert_int_gt(rounds_seen, 30);
    free(sc);
    free(snap0);
    free(snap1);
    kve_state_destroy(st);
    kve_context_destroy(ctx);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_LOOP_TEST(scored, scored_state_against_model, 0, 3),
    };
    const kve_suite_spec spec = {"state_scored", 600, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
