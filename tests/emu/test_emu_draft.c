/* test_emu_draft.c — speculative steps on the emulated device (issue 38,
 * deliverable 5): kve_state_draft planned by the planner kernel, commits
 * through kve_state_append_device and kve_state_append, and the commit's
 * kve_cache_write (src_slots and the round's moves in one launch) through
 * kernels_cuda/'s bodies; the same run as the CPU's
 * (tests/state/kve_state_draft.h). A draft launches the same kernels on
 * the same grids whatever its data, pads its shape with -1, and a refusal
 * maps its tokens to -1 and surfaces at kve_context_synchronize. */
#include "emu_backend.h"
#include "emu_suite.h"
#include "kve_state_draft.h"

/* Commits eager (_i = 0) and planned on the device (_i = 1); two modes. */
START_TEST(test_draft_commit)
{
    kve_emu_context_use(kve_serial_pools[0], 5, kve_pools[0]);
    kd_counts seen = kd_run(kve_emu, _i < 2 ? 0 : KVE_SHARED_HEADS, 0xe3d + (uint64_t)_i, _i % 2, 120);
    ck_assert_uint_gt(seen.drafts_past_room, 20);
    ck_assert_uint_gt(seen.commits_round, 20);
}
END_TEST

/* The launches of a draft: the planner, the move lists' clearing and the
 * mapping, on grids of the call's shape alone; a refused call (a row
 * twice, an inactive row, too many drafts) maps -1 and is reported. */
START_TEST(test_draft_launches_and_refusals)
{
    kve_emu_context_use(kve_serial_pools[0], 5, kve_pools[0]);
    kve_state_desc d = ks_desc(0, 3, 2, 2, 8, 2, 4, 20);
    d.max_draft = 5;
    kve_state *st = NULL;
    KT_OK(kve_state_create(kve_emu, &d, NULL, 0, &st));
    KT_OK(kve_state_admit(st, 0, 1, 3));
    KT_OK(kve_state_admit(st, 1, 2, 0));
    kve_state_layout lay;
    KT_OK(kve_state_get_layout(st, &lay));
    kd_step s;
    kd_step_init(kve_emu, &s, st, lay.table_layers, lay.table_heads, 16, 5);
    uint32_t *call = (uint32_t *)kd_dev(kve_emu, 6 * 4, NULL);
    static const uint32_t data[4][6] = {
        {0, 1, 0, 5, 1, 0}, {1, 0, 0, 0, 2, 0}, {0, 0, 0, 2, 3, 0}, {0, 2, 0, 1, 1, 0}};
    static const kve_status want[4] = {KVE_OK, KVE_OK, KVE_ERR_INVALID, KVE_ERR_INVALID};
    kve_emu_launch_rec first[16], log[16];
    uint32_t n_first = 0;
    kve_state_seq_info before, after;
    KT_OK(kve_state_get_seq(st, 0, &before));
    for (int k = 0; k < 4; k++) {
        kd_up(kve_emu, call, data[k], sizeof data[k]);
        kve_emu_log_start(k ? log : first, 16);
        KT_OK(kve_state_draft(st, 3, call, call + 3, 5, &s.b));
        uint32_t n = kve_emu_log_stop();
        ck_assert_uint_eq(kve_context_synchronize(kve_emu), want[k]);
        kd_step_read(kve_emu, &s);
        if (!k) {
            static const char *const names[] = {"kve_state_plan_kernel", "kve_state_kernel",
                                                "kve_state_kernel", "kve_state_kernel"};
            ck_assert_uint_eq(n, 4); /* no upload: planner, clear, padding, mapping */
            for (uint32_t q = 0; q < n; q++)
                ck_assert_str_eq(first[q].what, names[q]);
            n_first = n;
        } else {
            ck_assert_uint_eq(n, n_first);
            for (uint32_t q = 0; q < n; q++) {
                ck_assert_str_eq(log[q].what, first[q].what);
                ck_assert_uint_eq(log[q].grid, first[q].grid);
            }
        }
        uint32_t tokens = data[k][3] + data[k][4] + data[k][5];
        for (uint32_t t = 0, i = 0, row = 0; t < tokens; t++, i++) {
            while (i >= data[k][3 + row]) {
                row++;
                i = 0;
            }
            kve_state_seq_info info;
            KT_OK(kve_state_get_seq(st, data[k][row], &info));
            for (size_t e = 0; e < lay.table_layers * lay.table_heads; e++) {
                int64_t m = s.map[((e / lay.table_heads) * 16 + t) * lay.table_heads +
                                  e % lay.table_heads];
                ck_assert_int_eq(m, want[k] ? -1 : (int64_t)info.capacity + i);
            }
        }
        for (uint32_t t = tokens; t < 3 * 5; t++) /* the shape's padding: -1 */
            for (size_t e = 0; e < lay.table_layers * lay.table_heads; e++)
                ck_assert_int_eq(s.map[((e / lay.table_heads) * 16 + t) * lay.table_heads +
                                       e % lay.table_heads],
                                 -1);
        for (size_t l = 0; l < s.lists; l++)
            ck_assert_uint_eq(s.n_moves[l], 0);
    }
    KT_OK(kve_state_get_seq(st, 0, &after));
    ck_assert(!memcmp(&before, &after, sizeof before));
    KT_OK(kve_free(kve_emu, call));
    kd_step_free(kve_emu, &s);
    kve_state_destroy(st);
}
END_TEST

/* ---- a whole speculative step captured once and replayed (issue 46.2) ---- */

enum { KG_SHAPE = KD_ROWS * KD_DRAFT, KG_MAXTOK = 24, KG_PMAX = 8, KG_LOG = 32 };

/* One engine of emu_draft_graph: its state, step buffers, cache, and the
 * step's inputs in backend memory (rewritten before every replay). */
typedef struct {
    kve_context *ctx;
    kve_state *st;
    kd_step s;
    kd_cache c;
    uint32_t *call;      /* rows [KD_ROWS], n_draft [KD_ROWS], n_accept [KD_ROWS] */
    int32_t *draft_src;  /* [KG_SHAPE][th]: the drafts' entries */
    int32_t *draft_row;  /* [KG_SHAPE]: the draft write's token_row */
} kdg_rig;

static void kdg_init(kdg_rig *g, kve_context *ctx)
{
    memset(g, 0, sizeof *g);
    g->ctx = ctx;
    kve_state_desc d = ks_desc(0, KD_ROWS, 2, 3, 12, 2, 4, 40);
    d.max_draft = KD_DRAFT;
    KT_OK(kve_state_create(ctx, &d, NULL, 0, &g->st));
    kve_state_layout lay;
    KT_OK(kve_state_get_layout(g->st, &lay));
    uint32_t tl = lay.table_layers, th = lay.table_heads;
    kd_step_init(ctx, &g->s, g->st, tl, th, KG_MAXTOK, KG_PMAX);
    g->c.ctx = ctx;
    g->c.tl = tl;
    g->c.th = th;
    g->c.ps = d.max_slots + KD_DRAFT;
    g->c.max_tokens = KG_MAXTOK;
    size_t n = (size_t)KD_ROWS * g->c.ps * th;
    int32_t *fill = (int32_t *)malloc(n * 4);
    for (size_t i = 0; i < n; i++)
        fill[i] = -7;
    for (uint32_t l = 0; l < tl; l++)
        g->c.cache[l] = (int32_t *)kd_dev(ctx, n * 4, fill);
    free(fill);
    g->c.src = (int32_t *)kd_dev(ctx, (size_t)KG_MAXTOK * th * 4, NULL);
    g->c.src_slots = (int64_t *)kd_dev(ctx, (size_t)KG_MAXTOK * th * 8, NULL);
    g->c.token_row = (int32_t *)kd_dev(ctx, (size_t)KG_MAXTOK * 4, NULL);
    g->call = (uint32_t *)kd_dev(ctx, 3 * KD_ROWS * 4, NULL);
    g->draft_src = (int32_t *)kd_dev(ctx, (size_t)KG_SHAPE * th * 4, NULL);
    g->draft_row = (int32_t *)kd_dev(ctx, (size_t)KG_SHAPE * 4, NULL);
}

static void kdg_fini(kdg_rig *g)
{
    KT_OK(kve_context_synchronize(g->ctx));
    for (uint32_t l = 0; l < g->c.tl; l++)
        KT_OK(kve_free(g->ctx, g->c.cache[l]));
    void *bufs[] = {g->c.src, g->c.src_slots, g->c.token_row, g->call, g->draft_src, g->draft_row};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        KT_OK(kve_free(g->ctx, bufs[i]));
    kd_step_free(g->ctx, &g->s);
    KT_OK(kve_state_destroy(g->st));
}

/* Layer @p l's write of @p n tokens through the step's mapping; with moves
 * (call row i = state row i) when @p moves. */
static kve_cache_write_desc kdg_write(const kdg_rig *g, uint32_t l, uint32_t n, int moves)
{
    kve_cache_write_desc w = kd_desc(&g->c, l, n, &g->s);
    if (moves) {
        size_t lists = (size_t)KD_ROWS * g->c.th;
        w.moves = g->s.b.moves + l * lists * g->s.b.max_moves * 2;
        w.n_moves = g->s.b.n_moves + l * lists;
        w.n_move_rows = KD_ROWS;
        w.max_moves = g->s.b.max_moves;
        w.moves_stride_row = g->c.th;
        w.moves_stride_head = g->c.th > 1;
    }
    return w;
}

/* The captured step, of the whole shape: the drafts, their K/V written
 * into the draft slots (verification reads them there), the commit of the
 * accepted ones (a planned append) and its write: the round's moves and
 * the accepted entries copied from their draft slots (src_slots). */
static kve_status kdg_step(kdg_rig *g)
{
    kve_status st = kve_state_draft(g->st, KD_ROWS, g->call, g->call + KD_ROWS, KD_DRAFT, &g->s.b);
    for (uint32_t l = 0; st == KVE_OK && l < g->c.tl; l++) {
        kve_cache_write_desc w = kdg_write(g, l, KG_SHAPE, 0);
        w.src[0] = g->draft_src;
        w.token_row = g->draft_row;
        st = kve_cache_write(g->ctx, &w);
    }
    if (st == KVE_OK)
        st = kve_state_append_device(g->st, KD_ROWS, g->call, g->call + 2 * KD_ROWS, KD_DRAFT,
                                     &g->s.b);
    for (uint32_t l = 0; st == KVE_OK && l < g->c.tl; l++) {
        kve_cache_write_desc w = kdg_write(g, l, KG_SHAPE, 1);
        w.src_slots = g->c.src_slots;
        st = kve_cache_write(g->ctx, &w);
    }
    return st;
}

/* An eager host append of @p n_new tokens to each row of @p rows (n of
 * them, their entries from kd_entry), and its write; moves when @p moves
 * (rows listed through a host move_row: the CPU's). */
static void kdg_append_host(kdg_rig *g, uint32_t n, const uint32_t *rows, const uint32_t *n_new,
                            int moves)
{
    uint32_t th = g->c.th, t = 0;
    int32_t src[KG_MAXTOK * 8], tr[KG_MAXTOK], mr[KD_ROWS];
    for (uint32_t i = 0; i < n; i++) {
        kve_state_seq_info info;
        KT_OK(kve_state_get_seq(g->st, rows[i], &info));
        for (uint32_t k = 0; k < n_new[i]; k++, t++) {
            for (uint32_t h = 0; h < th; h++)
                src[t * th + h] = kd_entry(info.n_tokens + k, h);
            tr[t] = (int32_t)rows[i];
        }
        mr[i] = (int32_t)rows[i];
    }
    KT_OK(kve_state_append(g->st, n, rows, n_new, &g->s.b));
    if (t) {
        kd_up(g->ctx, g->c.src, src, (size_t)t * th * 4);
        kd_up(g->ctx, g->c.token_row, tr, (size_t)t * 4);
    }
    for (uint32_t l = 0; l < g->c.tl && (t || moves); l++) {
        kve_cache_write_desc w = kdg_write(g, l, t, moves);
        if (moves) { /* host memory: the CPU's only */
            w.n_move_rows = n;
            w.move_row = mr;
        }
        KT_OK(kve_cache_write(g->ctx, &w));
    }
}

/* emu_draft_graph: a speculative step (draft, its write, the commit of the
 * accepted drafts, its write with src_slots and the round's moves; rows
 * without drafts padding) captured once on the emulated device and
 * replayed for every step, with admissions (eager appends of prompts
 * through the same buffers) between. Three engines: A the step eager, B
 * the graph, C the CPU seeing the accepted tokens alone. A and B agree bit
 * for bit (mappings, move lists, caches, states); A and C on states, the
 * commit's mapping and move lists; every engine's cache holds at every
 * valid slot the entry of the token its table names (padding written to
 * a stale slot would break it: drafts are padded with -1). */
START_TEST(test_draft_graph)
{
    kve_emu_context_use(kve_serial_pools[0], 5, kve_pools[0]);
    kdg_rig a, b, c;
    kdg_init(&a, kve_emu);
    kdg_init(&b, kve_emu);
    kdg_init(&c, kve_ref);
    kdg_rig *const rigs[3] = {&a, &b, &c};
    uint32_t th = a.c.th, tl = a.c.tl;
    kve_emu_graph *graph = NULL;
    kve_emu_launch_rec first[KG_LOG], log[KG_LOG];
    uint32_t n_first = 0, padded = 0, rounds = 0, admits = 0, prompts = 0;
    uint64_t rng = 0x46d2, next_seq = 500;
    int active[KD_ROWS] = {0};
    for (int step = 0; step < 150; step++) {
        /* admissions and retirements, eager, between replays */
        for (uint32_t r = 0; r < KD_ROWS; r++) {
            if (active[r] && kt_below(&rng, 25) == 0) {
                for (int k = 0; k < 3; k++)
                    KT_OK(kve_state_retire(rigs[k]->st, r));
                active[r] = 0;
            } else if (!active[r] && kt_below(&rng, 2) == 0) {
                uint32_t p = kt_below(&rng, KG_PMAX + 1);
                for (int k = 0; k < 3; k++) {
                    KT_OK(kve_state_admit(rigs[k]->st, r, next_seq, p));
                    if (p)
                        kdg_append_host(rigs[k], 1, &r, &p, 0);
                }
                prompts += p > 0;
                next_seq++;
                admits++;
                active[r] = 1;
            }
        }
        /* the step's inputs */
        uint32_t call[3 * KD_ROWS], act[KD_ROWS], acc[KD_ROWS], n_act = 0, td = 0, ta = 0;
        int32_t dsrc[KG_SHAPE * 8], drow[KG_SHAPE], crow[KG_MAXTOK];
        int64_t from[KG_MAXTOK * 8];
        kve_state_seq_info before[KD_ROWS];
        for (uint32_t r = 0; r < KD_ROWS; r++) {
            KT_OK(kve_state_get_seq(c.st, r, &before[r]));
            call[r] = r;
            call[KD_ROWS + r] = active[r] ? kt_below(&rng, KD_DRAFT + 1) : 0;
            call[2 * KD_ROWS + r] = kt_below(&rng, call[KD_ROWS + r] + 1);
            padded += !call[KD_ROWS + r];
            if (active[r]) {
                act[n_act] = r;
                acc[n_act++] = call[2 * KD_ROWS + r];
            }
            for (uint32_t i = 0; i < call[KD_ROWS + r]; i++, td++) {
                for (uint32_t h = 0; h < th; h++)
                    dsrc[td * th + h] = kd_entry(before[r].n_tokens + i, h);
                drow[td] = (int32_t)r;
            }
            for (uint32_t i = 0; i < call[2 * KD_ROWS + r]; i++, ta++) {
                for (uint32_t h = 0; h < th; h++)
                    from[ta * th + h] = (int64_t)before[r].capacity + i;
                crow[ta] = (int32_t)r;
            }
        }
        for (uint32_t t = td; t < KG_SHAPE; t++) { /* padding: rows and entries of no one */
            for (uint32_t h = 0; h < th; h++)
                dsrc[t * th + h] = -9;
            drow[t] = (int32_t)(t % KD_ROWS);
        }
        for (uint32_t t = ta; t < KG_SHAPE; t++) {
            for (uint32_t h = 0; h < th; h++)
                from[t * th + h] = -1;
            crow[t] = (int32_t)(t % KD_ROWS);
        }
        for (int k = 0; k < 2; k++) {
            kd_up(kve_emu, rigs[k]->call, call, sizeof call);
            kd_up(kve_emu, rigs[k]->draft_src, dsrc, (size_t)KG_SHAPE * th * 4);
            kd_up(kve_emu, rigs[k]->draft_row, drow, sizeof drow);
            kd_up(kve_emu, rigs[k]->c.src_slots, from, (size_t)KG_SHAPE * th * 8);
            kd_up(kve_emu, rigs[k]->c.token_row, crow, (size_t)KG_SHAPE * 4);
        }
        /* A: eager, its launches the same every step */
        kve_emu_log_start(n_first ? log : first, KG_LOG);
        KT_OK(kdg_step(&a));
        uint32_t n_log = kve_emu_log_stop();
        ck_assert_uint_le(n_log, KG_LOG);
        kve_emu_log_same_step(first, &n_first, log, n_log, step, "speculative step");
        /* B: captured at its first step, replayed from then on */
        if (!graph) {
            graph = kve_emu_capture_begin();
            KT_OK(kdg_step(&b));
            uint32_t nodes;
            const char *broken = kve_emu_capture_end(graph, &nodes);
            ck_assert_msg(!broken, "the captured step made %s", broken ? broken : "");
            ck_assert_uint_eq(nodes, n_first);
        }
        KT_OK(kve_emu_graph_replay(kve_emu, graph));
        /* C: the accepted tokens alone, eager on the CPU */
        kdg_append_host(&c, n_act, act, acc, 1);
        for (int k = 0; k < 3; k++) {
            kve_status sync = kve_context_synchronize(rigs[k]->ctx);
            ck_assert_msg(sync == KVE_OK, "step %d engine %c: %s", step, 'A' + k,
                          k < 2 ? kve_emu_context_message() : kve_last_error());
            kd_step_read(rigs[k]->ctx, &rigs[k]->s);
        }
        ck_assert_mem_eq(a.s.map, b.s.map, a.s.map_n * 8);
        ck_assert_mem_eq(a.s.n_moves, b.s.n_moves, a.s.lists * 4);
        for (uint32_t l = 0; l < tl; l++) {
            for (size_t i = 0; i < (size_t)ta * th; i++)
                ck_assert_int_eq(a.s.map[(size_t)l * KG_MAXTOK * th + i],
                                 c.s.map[(size_t)l * KG_MAXTOK * th + i]);
            for (size_t i = (size_t)ta * th; i < (size_t)KG_SHAPE * th; i++)
                ck_assert_int_eq(a.s.map[(size_t)l * KG_MAXTOK * th + i], -1);
            for (uint32_t k = 0; k < n_act; k++)
                for (uint32_t h = 0; h < th; h++) {
                    size_t la = ((size_t)l * KD_ROWS + act[k]) * th + h;
                    size_t lc = ((size_t)l * KD_ROWS + k) * th + h;
                    ck_assert_uint_eq(a.s.n_moves[la], c.s.n_moves[lc]);
                    ck_assert_mem_eq(a.s.moves + la * a.s.b.max_moves * 2,
                                     c.s.moves + lc * c.s.b.max_moves * 2, a.s.n_moves[la] * 8);
                    ck_assert_mem_eq(a.s.moves + la * a.s.b.max_moves * 2,
                                     b.s.moves + la * b.s.b.max_moves * 2, a.s.n_moves[la] * 8);
                }
        }
        size_t layer = (size_t)KD_ROWS * a.c.ps * th;
        int32_t *ka = (int32_t *)malloc(layer * 4), *kb = (int32_t *)malloc(layer * 4);
        for (uint32_t l = 0; l < tl; l++) {
            kd_down(kve_emu, ka, a.c.cache[l], layer * 4);
            kd_down(kve_emu, kb, b.c.cache[l], layer * 4);
            ck_assert_mem_eq(ka, kb, layer * 4);
        }
        free(ka);
        free(kb);
        for (uint32_t r = 0; r < KD_ROWS; r++) {
            kve_state_seq_info now;
            KT_OK(kve_state_get_seq(c.st, r, &now));
            rounds += now.round > before[r].round;
        }
        kd_expect_same(a.st, b.st, active);
        kd_expect_same(a.st, c.st, active);
        for (int k = 0; k < 3; k++)
            kd_expect_cache(&rigs[k]->c, rigs[k]->st, active);
    }
    kve_emu_graph_destroy(graph);
    ck_assert_uint_gt(padded, 50);
    ck_assert_uint_gt(rounds, 20);
    ck_assert_uint_gt(admits, 10);
    ck_assert_uint_gt(prompts, 10);
    for (int k = 0; k < 3; k++)
        kdg_fini(rigs[k]);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_LOOP_TEST(draft, test_draft_commit, 0, 4),
        KVE_TEST(draft, test_draft_launches_and_refusals),
        KVE_TEST(draft_graph, test_draft_graph),
    };
    const kve_suite_spec spec = {"emu_draft", 1200, 0, kve_emu_fixture_setup,
                                  kve_emu_fixture_teardown};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
