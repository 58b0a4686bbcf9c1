/*
 * test_emu_graph.c — a decode step captured once and replayed (issue 38):
 * kve_state_append_device and every layer's kve_cache_write recorded by the
 * emulated device's graph capture (emu_backend.h: a host copy, upload,
 * synchronize, allocation or free in the captured region breaks it), then
 * replayed for 200 steps with new inputs written into the same buffers,
 * across rounds, admissions and retirements (made eagerly between
 * replays). Three engines run the same program:
 *
 *   A  the emulated device, kve_state_append_device called eagerly
 *   B  the emulated device, the captured step replayed
 *   C  the CPU backend, kve_state_append over the active rows only
 *
 * A and B must agree bit for bit on slot mappings, move lists, caches,
 * tables, sequence infos and running digests; A and C on everything but
 * the padding (A's padded tokens map to -1). A's launch log is the same
 * for every step, whichever rows round. The refusals the planner makes on
 * the device (and on the CPU) leave the state as it was.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_backend.h"
#include "emu_suite.h"
#include "kve_backend.h"
#include "kve_test_util.h"

enum {
    KG_ROWS = 5,
    KG_LAYERS = 3,
    KG_HEADS = 2,
    KG_CAP = 12, /* P <= 6, B = 8, W = 2, r = 4 */
    KG_R = 4,
    KG_PAGE = 4,
    KG_BPR = KG_CAP / KG_PAGE,
    KG_ENTRY = 16,
    KG_PROMPT_MAX = 6,
    KG_STEPS = 200,
    KG_LOG = 64
};

#define KG_LISTS ((size_t)KG_LAYERS * KG_ROWS * KG_HEADS)
#define KG_CACHE ((size_t)KG_ROWS * KG_CAP * KG_HEADS * KG_ENTRY)
#define KG_SRC ((size_t)KG_PROMPT_MAX * KG_ROWS * KG_HEADS * KG_ENTRY)

/* One engine: its state and its buffers (backend memory). */
typedef struct kve_rig {
    kve_context *ctx;
    kve_state *st;
    uint32_t *rows, *n_new;    /* [KG_ROWS] */
    int32_t *token_row, *bt;   /* [KG_PROMPT_MAX * KG_ROWS], [KG_ROWS * KG_BPR] */
    int32_t *move_row;         /* [KG_ROWS]: a host append's call rows */
    unsigned char *src, *kv;   /* K then V sources; K then V caches */
    kve_step_buffers out;
} kve_rig;

static void kg_rig_init(kve_rig *g, kve_context *ctx)
{
    memset(g, 0, sizeof *g);
    g->ctx = ctx;
    kve_state_desc d = {{2609, 0, 8, 2, KG_R}, KG_ROWS, KG_LAYERS, KG_HEADS, 0, 0, KG_CAP, 0, 0,
                        0};
    ck_assert_int_eq(kve_state_create(ctx, &d, NULL, 0, &g->st), KVE_OK);
    g->rows = (uint32_t *)kt_alloc(ctx, KG_ROWS * 4);
    g->n_new = (uint32_t *)kt_alloc(ctx, KG_ROWS * 4);
    g->token_row = (int32_t *)kt_alloc(ctx, KG_PROMPT_MAX * KG_ROWS * 4);
    g->bt = (int32_t *)kt_alloc(ctx, KG_ROWS * KG_BPR * 4);
    g->move_row = (int32_t *)kt_alloc(ctx, KG_ROWS * 4);
    g->src = (unsigned char *)kt_alloc(ctx, 2 * KG_SRC);
    g->kv = (unsigned char *)kt_alloc(ctx, 2 * KG_CACHE);
    int32_t bt[KG_ROWS * KG_BPR];
    for (int i = 0; i < KG_ROWS * KG_BPR; i++) /* pages scattered */
        bt[i] = (i * 7) % (KG_ROWS * KG_BPR);
    kt_put(ctx, g->bt, bt, sizeof bt);
    unsigned char *zero = (unsigned char *)calloc(1, 2 * KG_CACHE);
    kt_put(ctx, g->kv, zero, 2 * KG_CACHE);
    free(zero);
    uint32_t ids[KG_ROWS];
    for (uint32_t i = 0; i < KG_ROWS; i++)
        ids[i] = i;
    kt_put(ctx, g->rows, ids, sizeof ids);
    g->out.max_tokens = KG_PROMPT_MAX * KG_ROWS;
    g->out.max_rows = KG_ROWS;
    g->out.max_moves = KG_R * 2; /* prefills of up to 6 tokens: kve_state_max_moves(6) */
    g->out.slot_mapping = (int64_t *)kt_alloc(ctx, KG_LAYERS * (size_t)g->out.max_tokens *
                                                       KG_HEADS * 8);
    g->out.moves = (int32_t *)kt_alloc(ctx, KG_LISTS * g->out.max_moves * 8);
    g->out.n_moves = (uint32_t *)kt_alloc(ctx, KG_LISTS * 4);
}

static void kg_rig_fini(kve_rig *g)
{
    void *bufs[] = {g->rows, g->n_new,           g->token_row, g->bt,  g->move_row, g->src,
                    g->kv,   g->out.slot_mapping, g->out.moves, g->out.n_moves};
    ck_assert_int_eq(kve_context_synchronize(g->ctx), KVE_OK);
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        ck_assert_int_eq(kve_free(g->ctx, bufs[i]), KVE_OK);
    ck_assert_int_eq(kve_state_destroy(g->st), KVE_OK);
}

/* Layer @p l's cache write of @p n_tokens tokens (the step's mapping, its
 * moves, K and V from g->src); the call's @p n_calls rows are the state's
 * rows 0.. (a planned call) or g->move_row (@p listed). */
static kve_status kg_write(kve_rig *g, uint32_t l, uint32_t n_tokens, uint32_t n_calls,
                           int listed)
{
    kve_cache_write_desc d;
    memset(&d, 0, sizeof d);
    size_t per_layer = (size_t)g->out.max_tokens * KG_HEADS, lists = (size_t)KG_ROWS * KG_HEADS;
    d.n_tokens = n_tokens;
    d.n_heads = KG_HEADS;
    d.entry_bytes = KG_ENTRY;
    d.n_caches = 2;
    d.src[0] = g->src;
    d.src[1] = g->src + KG_SRC;
    d.dst[0] = g->kv;
    d.dst[1] = g->kv + KG_CACHE;
    d.layout = KVE_LAYOUT_NHD;
    d.pages.page_size = KG_PAGE;
    d.pages.n_pages = KG_ROWS * KG_BPR;
    d.slots = g->out.slot_mapping + l * per_layer;
    d.slots_stride_token = KG_HEADS;
    d.slots_stride_head = 1;
    d.token_row = g->token_row;
    d.pages.n_rows = KG_ROWS;
    d.pages.kind = KVE_PAGES_BLOCK_TABLE;
    d.pages.block_table = g->bt;
    d.pages.blocks_per_row = KG_BPR;
    d.moves = g->out.moves + l * lists * g->out.max_moves * 2;
    d.n_moves = g->out.n_moves + l * lists;
    d.n_move_rows = n_calls;
    d.move_row = listed ? g->move_row : NULL;
    d.max_moves = g->out.max_moves;
    d.moves_stride_row = KG_HEADS;
    d.moves_stride_head = 1;
    return kve_cache_write(g->ctx, &d);
}

/* The captured step: the planned append of one token a row, every layer's
 * write of the whole shape (KG_ROWS tokens, padding mapped to -1). */
static kve_status kg_step_device(kve_rig *g)
{
    kve_status st = kve_state_append_device(g->st, KG_ROWS, g->rows, g->n_new, 1, &g->out);
    for (uint32_t l = 0; st == KVE_OK && l < KG_LAYERS; l++)
        st = kg_write(g, l, KG_ROWS, KG_ROWS, 0);
    return st;
}

/* An eager host append of rows[0..n) (n_new each, their K/V in @p src),
 * with the writes it drives. */
static void kg_append_host(kve_rig *g, uint32_t n, const uint32_t *rows, const uint32_t *n_new,
                           const unsigned char *src)
{
    int32_t tr[KG_PROMPT_MAX * KG_ROWS];
    uint32_t t = 0;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < n_new[i]; k++)
            tr[t++] = (int32_t)rows[i];
    if (t)
        kt_put(g->ctx, g->token_row, tr, t * 4);
    if (n)
        kt_put(g->ctx, g->move_row, rows, n * 4);
    kt_put(g->ctx, g->src, src, 2 * KG_SRC);
    ck_assert_int_eq(kve_state_append(g->st, n, rows, n_new, &g->out), KVE_OK);
    for (uint32_t l = 0; l < KG_LAYERS; l++)
        ck_assert_int_eq(kg_write(g, l, t, n, 1), KVE_OK);
}

/* Host copies of an engine's outputs and state after a step. */
typedef struct kve_snap {
    int64_t map[KG_LAYERS * KG_PROMPT_MAX * KG_ROWS * KG_HEADS];
    int32_t moves[KG_LISTS * KG_R * 2 * 2];
    uint32_t n_moves[KG_LISTS];
    unsigned char kv[2 * KG_CACHE];
    int32_t slots[KG_ROWS][KG_LAYERS * KG_HEADS * KG_CAP];
    uint64_t digest[KG_ROWS];
    kve_state_seq_info info[KG_ROWS];
} kve_snap;

static void kg_snap(kve_rig *g, kve_snap *s)
{
    kve_status sync = kve_context_synchronize(g->ctx);
    ck_assert_msg(sync == KVE_OK, "synchronize: %d: %s", sync,
                  g->ctx == kve_emu ? kve_emu_context_message() : kve_last_error());
    memset(s, 0, sizeof *s);
    kt_get(g->ctx, s->map, g->out.slot_mapping, sizeof s->map);
    kt_get(g->ctx, s->moves, g->out.moves, sizeof s->moves);
    kt_get(g->ctx, s->n_moves, g->out.n_moves, sizeof s->n_moves);
    kt_get(g->ctx, s->kv, g->kv, sizeof s->kv);
    for (uint32_t i = 0; i < KG_ROWS; i++) {
        ck_assert_int_eq(kve_state_get_seq(g->st, i, &s->info[i]), KVE_OK);
        if (!s->info[i].active)
            continue;
        ck_assert_int_eq(kve_state_read_slots(g->st, i, s->slots[i], KG_LAYERS * KG_HEADS * KG_CAP),
                         KVE_OK);
        ck_assert_int_eq(kve_state_read_digest(g->st, i, &s->digest[i]), KVE_OK);
    }
}

/* Move list (layer l, call row i, head h) of a snapshot: its pairs. */
static const int32_t *kg_list(const kve_snap *s, uint32_t l, uint32_t i, uint32_t h,
                              uint32_t *n)
{
    size_t list = ((size_t)l * KG_ROWS + i) * KG_HEADS + h;
    *n = s->n_moves[list];
    return s->moves + list * KG_R * 2 * 2;
}

static void kg_lifecycle(uint64_t *rng, kve_rig *const rigs[3], uint64_t *next_seq,
                         uint32_t *admits, uint32_t *retires)
{
    for (uint32_t i = 0; i < KG_ROWS; i++) {
        kve_state_seq_info info;
        ck_assert_int_eq(kve_state_get_seq(rigs[0]->st, i, &info), KVE_OK);
        if (info.active && kve_rand_below(rng, 40) == 0) {
            for (int k = 0; k < 3; k++)
                ck_assert_int_eq(kve_state_retire(rigs[k]->st, i), KVE_OK);
            ++*retires;
        } else if (!info.active && kve_rand_below(rng, 3) == 0) {
            uint32_t p = kve_rand_below(rng, KG_PROMPT_MAX + 1);
            unsigned char src[2 * KG_SRC];
            for (size_t b = 0; b < sizeof src; b++)
                src[b] = (unsigned char)kve_rand_below(rng, 256);
            for (int k = 0; k < 3; k++) {
                ck_assert_int_eq(kve_state_admit(rigs[k]->st, i, *next_seq, p), KVE_OK);
                if (p)
                    kg_append_host(rigs[k], 1, &i, &p, src);
            }
            ++*next_seq;
            ++*admits;
        }
    }
}

START_TEST(test_graph_replay)
{
    kve_emu_context_device_plan(32);
    kve_rig a, b, c;
    kg_rig_init(&a, kve_emu);
    kg_rig_init(&b, kve_emu);
    kg_rig_init(&c, kve_ref);
    kve_rig *const rigs[3] = {&a, &b, &c};
    static kve_snap sa, sb, sc;
    kve_emu_graph *graph = NULL;
    kve_emu_launch_rec first[KG_LOG], log[KG_LOG];
    uint32_t n_first = 0, admits = 0, retires = 0, round_steps = 0, quiet_steps = 0;
    uint64_t rng = 0x9a4f0038, next_seq = 100;
    for (int step = 0; step < KG_STEPS; step++) {
        kg_lifecycle(&rng, rigs, &next_seq, &admits, &retires);
        uint32_t n_new[KG_ROWS], active[KG_ROWS], ones[KG_ROWS], n_active = 0, rounds_before = 0;
        int32_t tr[KG_ROWS] = {0};
        for (uint32_t i = 0; i < KG_ROWS; i++) {
            kve_state_seq_info info;
            ck_assert_int_eq(kve_state_get_seq(a.st, i, &info), KVE_OK);
            n_new[i] = info.active;
            rounds_before += info.round;
            if (info.active) {
                tr[n_active] = (int32_t)i;
                ones[n_active] = 1;
                active[n_active++] = i;
            }
        }
        unsigned char src[2 * KG_SRC];
        memset(src, 0, sizeof src);
        for (uint32_t t = 0; t < KG_ROWS; t++) /* token t's K and V, both caches */
            for (size_t e = 0; e < KG_HEADS * KG_ENTRY; e++) {
                src[t * KG_HEADS * KG_ENTRY + e] = (unsigned char)kve_rand_below(&rng, 256);
                src[KG_SRC + t * KG_HEADS * KG_ENTRY + e] = (unsigned char)kve_rand_below(&rng, 256);
            }
        for (int k = 0; k < 2; k++) { /* the step's inputs, into the same buffers */
            kt_put(kve_emu, rigs[k]->n_new, n_new, sizeof n_new);
            kt_put(kve_emu, rigs[k]->token_row, tr, sizeof tr);
            kt_put(kve_emu, rigs[k]->src, src, sizeof src);
        }
        /* A: eager, its launches logged */
        kve_emu_log_start(n_first ? log : first, KG_LOG);
        ck_assert_int_eq(kg_step_device(&a), KVE_OK);
        uint32_t n_log = kve_emu_log_stop();
        ck_assert_uint_le(n_log, KG_LOG);
        kve_emu_log_same_step(first, &n_first, log, n_log, step, "planned step");
        /* B: captured at its first step, replayed from then on */
        if (!graph) {
            graph = kve_emu_capture_begin();
            ck_assert_int_eq(kg_step_device(&b), KVE_OK);
            uint32_t nodes;
            const char *broken = kve_emu_capture_end(graph, &nodes);
            ck_assert_msg(!broken, "the captured step made %s", broken ? broken : "");
            ck_assert_uint_eq(nodes, n_first); /* every launch A made, none else */
        }
        ck_assert_int_eq(kve_emu_graph_replay(kve_emu, graph), KVE_OK);
        /* C: the host API over the active rows */
        kg_append_host(&c, n_active, active, ones, src);
        kg_snap(&a, &sa);
        kg_snap(&b, &sb);
        kg_snap(&c, &sc);
        ck_assert_mem_eq(sa.map, sb.map, sizeof sa.map);
        ck_assert_mem_eq(sa.n_moves, sb.n_moves, sizeof sa.n_moves);
        ck_assert_mem_eq(sa.kv, sb.kv, sizeof sa.kv);
        ck_assert_mem_eq(sa.kv, sc.kv, sizeof sa.kv);
        for (uint32_t i = 0; i < KG_ROWS; i++)
            ck_assert_msg(!memcmp(&sa.info[i], &sb.info[i], sizeof sa.info[i]),
                          "step %d row %u: A %u/%u/%u/%u B %u/%u/%u/%u", step, i,
                          sa.info[i].active, sa.info[i].n_tokens, sa.info[i].round,
                          sa.info[i].n_valid, sb.info[i].active, sb.info[i].n_tokens,
                          sb.info[i].round, sb.info[i].n_valid);
        ck_assert_mem_eq(sa.info, sc.info, sizeof sa.info);
        ck_assert_mem_eq(sa.slots, sb.slots, sizeof sa.slots);
        ck_assert_mem_eq(sa.slots, sc.slots, sizeof sa.slots);
        ck_assert_mem_eq(sa.digest, sb.digest, sizeof sa.digest);
        ck_assert_mem_eq(sa.digest, sc.digest, sizeof sa.digest);
        size_t per_layer = (size_t)a.out.max_tokens * KG_HEADS;
        for (uint32_t l = 0; l < KG_LAYERS; l++) {
            for (uint32_t t = 0; t < KG_ROWS; t++) /* A's padding: -1 */
                for (uint32_t h = 0; h < KG_HEADS; h++) {
                    int64_t want = t < n_active ? sc.map[l * per_layer + t * KG_HEADS + h] : -1;
                    ck_assert_int_eq(sa.map[l * per_layer + t * KG_HEADS + h], want);
                }
            for (uint32_t k = 0; k < n_active; k++) /* call row active[k] here, k there */
                for (uint32_t h = 0; h < KG_HEADS; h++) {
                    uint32_t na, nb, nc;
                    const int32_t *pa = kg_list(&sa, l, active[k], h, &na);
                    const int32_t *pb = kg_list(&sb, l, active[k], h, &nb);
                    const int32_t *pc = kg_list(&sc, l, k, h, &nc);
                    ck_assert_uint_eq(na, nc);
                    ck_assert_uint_eq(nb, nc);
                    ck_assert_mem_eq(pa, pc, na * 8);
                    ck_assert_mem_eq(pb, pc, na * 8);
                }
        }
        uint32_t rounds_after = 0;
        for (uint32_t i = 0; i < KG_ROWS; i++)
            rounds_after += sa.info[i].round;
        if (rounds_after > rounds_before)
            round_steps++;
        else
            quiet_steps++;
    }
    kve_emu_graph_destroy(graph);
    /* the program covered rounds, quiet steps, admissions and retirements */
    ck_assert_uint_gt(round_steps, 10);
    ck_assert_uint_gt(quiet_steps, 10);
    ck_assert_uint_gt(admits, KG_ROWS);
    ck_assert_uint_gt(retires, 2);
    kg_rig_fini(&a);
    kg_rig_fini(&b);
    kg_rig_fini(&c);
    kve_emu_context_device_plan(0);
}
END_TEST

/* A captured region that would copy or synchronize is refused. */
START_TEST(test_graph_capture_refuses_host_work)
{
    kve_emu_context_device_plan(32);
    kve_rig a;
    kg_rig_init(&a, kve_emu);
    uint32_t row = 0, one = 1;
    ck_assert_int_eq(kve_state_admit(a.st, 0, 7, 2), KVE_OK);
    kve_emu_graph *g = kve_emu_capture_begin();
    /* the host API uploads its rows: not capturable */
    ck_assert_int_ne(kve_state_append(a.st, 1, &row, &one, NULL), KVE_OK);
    uint32_t nodes;
    const char *broken = kve_emu_capture_end(g, &nodes);
    ck_assert_ptr_nonnull(broken);
    ck_assert_int_eq(kve_emu_graph_replay(kve_emu, g), KVE_ERR_INVALID);
    kve_emu_graph_destroy(g);
    kg_rig_fini(&a);
    kve_emu_context_device_plan(0);
}
END_TEST

/* Each refusal of the planner: the state as it was, the call's mapping -1
 * and its move lists empty (on the CPU too); reported at synchronize on the
 * device, returned on the CPU, with the same status. */
START_TEST(test_graph_refusals)
{
    kve_emu_context_device_plan(64);
    for (int dev = 0; dev < 2; dev++) {
        kve_context *ctx = dev ? kve_emu : kve_ref;
        kve_rig g;
        kg_rig_init(&g, ctx);
        ck_assert_int_eq(kve_state_admit(g.st, 0, 7, 2), KVE_OK);
        ck_assert_int_eq(kve_state_admit(g.st, 1, 8, 6), KVE_OK);
        static const struct {
            uint32_t rows[2], n_new[2], max_new, reason;
        } cases[] = {{{0, 9}, {1, 1}, 1, KVE_PLAN_ROW_RANGE},
                     {{0, 2}, {1, 1}, 1, KVE_PLAN_INACTIVE},
                     {{1, 1}, {1, 1}, 1, KVE_PLAN_TWICE},
                     {{0, 1}, {1, 3}, 2, KVE_PLAN_TOO_MANY},
                     {{0, 1}, {1, 1}, 1, KVE_PLAN_TOKENS}, /* out.max_tokens = 1 below */
                     {{0, 1}, {0, 1}, 0, KVE_PLAN_TOO_MANY}, /* no wave: its token still -1 */
                     {{0, 1}, {2, 2}, 2, KVE_PLAN_OK}, /* the control: accepted */
                     {{0, 1}, {1, 0}, 1, KVE_PLAN_OK}};
        for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
            kve_snap before, after;
            kg_snap(&g, &before);
            ck_assert_int_eq(kve_context_synchronize(ctx), KVE_OK);
            kt_put(ctx, g.rows, cases[k].rows, 8);
            kt_put(ctx, g.n_new, cases[k].n_new, 8);
            static int64_t stale_map[KG_LAYERS * KG_PROMPT_MAX * KG_ROWS * KG_HEADS];
            static uint32_t stale_n[KG_LISTS];
            for (size_t e = 0; e < sizeof stale_map / sizeof *stale_map; e++)
                stale_map[e] = 5; /* a previous step's outputs */
            for (size_t e = 0; e < KG_LISTS; e++)
                stale_n[e] = 1;
            kt_put(ctx, g.out.slot_mapping, stale_map, sizeof stale_map);
            kt_put(ctx, g.out.n_moves, stale_n, sizeof stale_n);
            g.out.max_tokens = cases[k].reason == KVE_PLAN_TOKENS ? 1 : KG_PROMPT_MAX * KG_ROWS;
            kve_status st = kve_state_append_device(g.st, 2, g.rows, g.n_new, cases[k].max_new,
                                                    &g.out);
            kve_status sync = kve_context_synchronize(ctx);
            kve_status got = dev ? sync : st;
            const char *msg = dev ? kve_emu_context_message() : kve_last_error();
            if (cases[k].reason == KVE_PLAN_OK) {
                ck_assert_int_eq(st, KVE_OK);
                ck_assert_int_eq(sync, KVE_OK);
                continue;
            }
            ck_assert_int_ne(got, KVE_OK);
            /* one status per reason, the device's as the CPU's */
            ck_assert_msg(got == kve_plan_refusal_status(cases[k].reason),
                          "case %zu %s: %s, want %s", k, dev ? "device" : "CPU",
                          kve_status_string(got),
                          kve_status_string(kve_plan_refusal_status(cases[k].reason)));
            char want[64];
            if (dev)
                snprintf(want, sizeof want, "reason %u", cases[k].reason);
            else
                snprintf(want, sizeof want, "rows[%u]", cases[k].reason == KVE_PLAN_TWICE ? 0u : 1u);
            ck_assert_msg(strstr(msg, want), "case %zu: '%s' lacks '%s'", k, msg, want);
            size_t call_tokens = g.out.max_tokens; /* the mapping's layout in the call */
            g.out.max_tokens = KG_PROMPT_MAX * KG_ROWS;
            kg_snap(&g, &after);
            ck_assert_mem_eq(before.info, after.info, sizeof before.info);
            ck_assert_mem_eq(before.slots, after.slots, sizeof before.slots);
            ck_assert_mem_eq(before.digest, after.digest, sizeof before.digest);
            { /* the call's jobs ran as no-ops; the CPU wrote the same outputs (issue 47) */
                for (uint32_t l = 0; l < KG_LAYERS; l++)
                    for (uint32_t i = 0; i < 2 * KG_HEADS; i++) /* call rows 0, 1 */
                        ck_assert_uint_eq(after.n_moves[(size_t)l * KG_ROWS * KG_HEADS + i], 0);
                size_t per_layer = call_tokens * KG_HEADS;
                size_t tokens = cases[k].max_new ? 2 * cases[k].max_new : 1;
                tokens = tokens < call_tokens ? tokens : call_tokens;
                for (uint32_t l = 0; l < KG_LAYERS; l++)
                    for (size_t e = 0; e < tokens * KG_HEADS; e++)
                        ck_assert_msg(after.map[l * per_layer + e] == -1,
                                      "case %zu %s: layer %u entry %zu maps to %lld", k,
                                      dev ? "device" : "CPU", l, e,
                                      (long long)after.map[l * per_layer + e]);
            }
        }
        kg_rig_fini(&g);
    }
    kve_emu_context_device_plan(0);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(graph_replay, test_graph_replay),
        KVE_TEST(graph_replay, test_graph_capture_refuses_host_work),
        KVE_TEST(graph_refusals, test_graph_refusals),
    };
    const kve_suite_spec spec = {"emu_graph", 1200, 0, kve_emu_fixture_setup,
                                  kve_emu_fixture_teardown};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
