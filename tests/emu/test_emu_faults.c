/*
 * test_emu_faults.c — device error paths on the emulated device context
 * (emu_backend.h): a failed launch, a bad slot under KVE_TRUSTED_SLOTS and
 * a page id out of range, each injected into one call. Each must surface
 * at kve_context_synchronize() as its status with its message (the call
 * itself returns KVE_OK, as a queued GPU call does), touch no output it
 * should not, and leave the context working: the next call's results equal
 * the scalar CPU reference's, and its synchronize reports nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emu_backend.h"
#include "emu_suite.h"
#include "kve_test_util.h"

/* The message the emulated synchronize reported contains @p want. */
static void expect_sync(kve_status st, const char *want)
{
    kve_status got = kve_context_synchronize(kve_emu);
    ck_assert_msg(got == st, "synchronize: %s (%s), expected %s", kve_status_string(got),
                  kve_emu_context_message(), kve_status_string(st));
    ck_assert_msg(st == KVE_OK || strstr(kve_emu_context_message(), want),
                  "synchronize: \"%s\" does not say \"%s\"", kve_emu_context_message(), want);
}

/* ---- kve_evict ------------------------------------------------------------- */

typedef struct {
    kve_seq seqs[2];
    int32_t slots[2 * 3 * 70];
    kve_batch b;
} evict_case;

/* 2 sequences x 3 heads of up to 70 distinct positions, some slots empty. */
static void evict_case_make(uint64_t *rng, evict_case *e)
{
    uint32_t n = 8 + kt_below(rng, 63);
    for (int s = 0; s < 2; s++)
        e->seqs[s] = (kve_seq){kt_next(rng), kt_below(rng, 20), kt_below(rng, 4)};
    for (size_t h = 0; h < 6; h++)
        kt_random_table(rng, e->slots + h * n, n, n - kt_below(rng, 4), 3 * n);
    e->b = (kve_batch){kt_next(rng), 0, 2, e->seqs, 1, 3, 0, 0, n, kt_below(rng, n), 4, e->slots, n, NULL, 0};
}

/* Evicts on the emulator with caller workspace (kve_evict then does not
 * synchronize itself), and returns kve_evict's status. */
static kve_status emu_evict(const kve_batch *b, kt_out *o)
{
    size_t ws_bytes = 0;
    void *ws = NULL;
    KT_OK(kve_evict_workspace_size(kve_emu, b, &ws_bytes));
    if (ws_bytes)
        KT_OK(kve_alloc(kve_emu, ws_bytes, &ws));
    kt_out_init(o, b);
    kve_evict_out v = kt_out_view(o);
    kve_status st = kve_evict(kve_emu, b, &v, ws, ws_bytes);
    KT_OK(kve_free(kve_emu, ws));
    return st;
}

static void expect_same(const kt_out *a, const kt_out *b, const char *what)
{
    ck_assert_msg(!memcmp(a->n_evicted, b->n_evicted, a->heads * 4) &&
                      !memcmp(a->n_kept, b->n_kept, a->heads * 4) &&
                      !memcmp(a->flags, b->flags, a->heads) &&
                      !memcmp(a->evicted, b->evicted, a->heads * a->ev_stride * 4) &&
                      !memcmp(a->kept, b->kept, a->heads * a->kept_stride * 4),
                  "%s: outputs differ from the CPU reference", what);
}

/* The call after a fault: KVE_OK, nothing at synchronize, the reference's outputs. */
static void expect_recovered(const kve_batch *b, const kt_out *ref)
{
    kt_out o;
    KT_OK(emu_evict(b, &o));
    expect_sync(KVE_OK, "");
    expect_same(&o, ref, "the call after the fault");
    kt_out_free(&o);
}

START_TEST(fault_evict_launch)
{
    uint64_t rng = 0xfa17;
    for (int i = 0; i < 40; i++) {
        kve_emu_context_use(kve_serial_pools[i % KVE_N_SHAPES], 1 + kt_below(&rng, 4),
                            kve_pools[kve_pick_shape(&rng)]);
        evict_case e;
        evict_case_make(&rng, &e);
        kt_out ref, o;
        KT_OK(kt_evict(kve_ref, &e.b, &ref));
        kve_emu_inject(&(kve_emu_fault){KVE_EMU_FAULT_LAUNCH, 0, 0});
        KT_OK(emu_evict(&e.b, &o));
        ck_assert(!kve_emu_fault_pending());
        expect_sync(KVE_ERR_DEVICE, "kve_evict_kernel: launch failed");
        for (size_t h = 0; h < o.heads; h++) /* the kernel never ran */
            ck_assert(o.n_evicted[h] == 0 && o.n_kept[h] == 0);
        kt_out_free(&o);
        expect_recovered(&e.b, &ref);
        kt_out_free(&ref);
    }
}
END_TEST

START_TEST(fault_evict_trusted_bad_slot)
{
    uint64_t rng = 0xfa18;
    static const int32_t bad[] = {-2, -3, -1000, INT32_MIN};
    for (int i = 0; i < 60; i++) {
        kve_emu_context_use(kve_serial_pools[0], 1, kve_pools[kve_pick_shape(&rng)]);
        evict_case e;
        evict_case_make(&rng, &e);
        e.b.flags = KVE_TRUSTED_SLOTS;
        kt_out ref, o;
        KT_OK(kt_evict(kve_ref, &e.b, &ref));
        uint32_t head = kt_below(&rng, 6), slot = kt_below(&rng, e.b.n_slots);
        int32_t before = e.slots[head * e.b.n_slots + slot];
        kve_emu_inject(&(kve_emu_fault){KVE_EMU_FAULT_SLOT, (size_t)head * e.b.n_slots + slot,
                                        bad[i % 4]});
        KT_OK(emu_evict(&e.b, &o));
        ck_assert(!kve_emu_fault_pending());
        char want[64];
        snprintf(want, sizeof want, "batch.slot_pos[head %u][slot %u] < -1", head, slot);
        expect_sync(KVE_ERR_RANGE, want);
        ck_assert_int_eq(e.slots[head * e.b.n_slots + slot], before); /* a copy was hit */
        kt_out_free(&o);
        expect_recovered(&e.b, &ref);
        kt_out_free(&ref);
    }
}
END_TEST

/* ---- kve_cache_write ------------------------------------------------------- */

enum { T = 3, H = 2, E = 8, PS = 2, PAGES = 6, ROWS = 2, BPR = 3 };

typedef struct {
    unsigned char src[T * H * E], k[PAGES * PS * H * E], v[PAGES * PS * H * E];
    int64_t slots[T * H];
    int32_t token_row[T], block_table[ROWS * BPR];
    kve_cache_write_desc d;
} write_case;

/* Three tokens of two heads into a vLLM-style paged NHD cache over a random
 * page table: token t goes to row t % 2, head 0 at slot t and head 1 at
 * slot 5 - t, so no two (token, head) pairs share a destination. */
static void write_case_make(uint64_t *rng, write_case *w)
{
    for (size_t i = 0; i < sizeof w->src; i++)
        w->src[i] = (unsigned char)kt_next(rng);
    memset(w->k, 0, sizeof w->k);
    memset(w->v, 0, sizeof w->v);
    int32_t pages[PAGES] = {0, 1, 2, 3, 4, 5};
    for (int i = PAGES - 1; i > 0; i--) { /* a random page table */
        int j = (int)kt_below(rng, (uint32_t)i + 1), t = pages[i];
        pages[i] = pages[j];
        pages[j] = t;
    }
    memcpy(w->block_table, pages, sizeof w->block_table);
    for (int t = 0; t < T; t++) {
        w->token_row[t] = t % ROWS;
        w->slots[t * H] = t;                  /* head 0 */
        w->slots[t * H + 1] = BPR * PS - 1 - t; /* head 1: other slots of the row */
    }
    w->d = (kve_cache_write_desc){.n_tokens = T, .n_heads = H, .entry_bytes = E, .n_caches = 2,
                                  .src = {w->src, w->src}, .dst = {w->k, w->v},
                                  .layout = KVE_LAYOUT_NHD, .pages.page_size = PS, .pages.n_pages = PAGES,
                                  .slots = w->slots, .slots_stride_token = H,
                                  .slots_stride_head = 1, .token_row = w->token_row,
                                  .pages.n_rows = ROWS, .pages.kind = KVE_PAGES_BLOCK_TABLE,
                                  .pages.block_table = w->block_table, .pages.blocks_per_row = BPR};
}

/* The first (token, head) whose slot lies in block @p index of the table. */
static int first_user(const write_case *w, size_t index, uint32_t *tok, uint32_t *head)
{
    for (uint32_t t = 0; t < T; t++)
        for (uint32_t h = 0; h < H; h++)
            if ((size_t)w->token_row[t] * BPR + (size_t)(w->slots[t * H + h] / PS) == index) {
                *tok = t;
                *head = h;
                return 1;
            }
    return 0;
}

static void expect_write_recovered(write_case *w)
{
    write_case ref = *w;
    ref.d.src[0] = ref.d.src[1] = ref.src;
    ref.d.dst[0] = ref.k;
    ref.d.dst[1] = ref.v;
    ref.d.slots = ref.slots;
    ref.d.token_row = ref.token_row;
    ref.d.pages.block_table = ref.block_table;
    memset(w->k, 0, sizeof w->k);
    memset(w->v, 0, sizeof w->v);
    KT_OK(kve_cache_write(kve_ref, &ref.d));
    KT_OK(kve_cache_write(kve_emu, &w->d));
    expect_sync(KVE_OK, "");
    ck_assert(!memcmp(w->k, ref.k, sizeof w->k) && !memcmp(w->v, ref.v, sizeof w->v));
}

START_TEST(fault_cache_write_launch)
{
    uint64_t rng = 0xfa19;
    for (int i = 0; i < 30; i++) {
        kve_emu_context_use(kve_serial_pools[i % KVE_N_SHAPES], 1 + kt_below(&rng, 4), NULL);
        static write_case w;
        write_case_make(&rng, &w);
        kve_emu_inject(&(kve_emu_fault){KVE_EMU_FAULT_LAUNCH, 0, 0});
        KT_OK(kve_cache_write(kve_emu, &w.d));
        ck_assert(!kve_emu_fault_pending());
        expect_sync(KVE_ERR_DEVICE, "kve_cache_write_kernel: launch failed");
        static const unsigned char zero[sizeof w.k];
        ck_assert(!memcmp(w.k, zero, sizeof w.k)); /* nothing written */
        expect_write_recovered(&w);
    }
}
END_TEST

START_TEST(fault_cache_write_bad_page)
{
    uint64_t rng = 0xfa1a;
    static const int32_t bad[] = {PAGES, PAGES + 7, -1, INT32_MIN, INT32_MAX};
    unsigned raised = 0;
    for (int i = 0; i < 40; i++) {
        kve_emu_context_use(kve_serial_pools[i % KVE_N_SHAPES], 1 + kt_below(&rng, 4), NULL);
        static write_case w;
        write_case_make(&rng, &w);
        size_t index = kt_below(&rng, ROWS * BPR);
        uint32_t tok = 0, head = 0;
        int used = first_user(&w, index, &tok, &head);
        int32_t before = w.block_table[index];
        kve_emu_inject(&(kve_emu_fault){KVE_EMU_FAULT_PAGE, index, bad[i % 5]});
        KT_OK(kve_cache_write(kve_emu, &w.d));
        ck_assert(!kve_emu_fault_pending());
        char want[64];
        snprintf(want, sizeof want, "desc.slots[token %u][head %u]: its page", tok, head);
        expect_sync(used ? KVE_ERR_RANGE : KVE_OK, want);
        raised += used;
        ck_assert_int_eq(w.block_table[index], before);
        expect_write_recovered(&w);
    }
    ck_assert_uint_ge(raised, 10);
}
END_TEST

/* The indptr = {0, 5, 3} on the device: row 0 claims pages past the
 * 3 entries of indices (an exact-size heap block: ASan watches), so the
 * kernel must refuse the token instead of reading indices[4]. */
START_TEST(device_indptr_within_indices)
{
    kve_emu_context_use(kve_serial_pools[0], 1, NULL);
    unsigned char src[4] = {1, 2, 3, 4}, k[8 * 4] = {0};
    int64_t slots[1] = {4};
    int32_t token_row[1] = {0}, indptr[3] = {0, 5, 3}, last[2] = {1, 1};
    int32_t *indices = (int32_t *)malloc(3 * sizeof *indices);
    for (int i = 0; i < 3; i++)
        indices[i] = i;
    kve_cache_write_desc d = {.n_tokens = 1, .n_heads = 1, .entry_bytes = 4, .n_caches = 1,
                              .src = {src}, .dst = {k}, .layout = KVE_LAYOUT_NHD, .pages.page_size = 1,
                              .pages.n_pages = 8, .slots = slots, .slots_stride_token = 1,
                              .token_row = token_row, .pages.n_rows = 2,
                              .pages.kind = KVE_PAGES_INDPTR, .pages.indptr = indptr,
                              .pages.indices = indices, .pages.last_page_len = last};
    KT_OK(kve_cache_write(kve_emu, &d));
    expect_sync(KVE_ERR_RANGE, "desc.slots[token 0][head 0]: must be -1 or a slot");
    indptr[2] = 5; /* now indices needs 5 entries */
    free(indices);
    indices = (int32_t *)malloc(5 * sizeof *indices);
    for (int i = 0; i < 5; i++)
        indices[i] = 7 - i;
    d.pages.indices = indices;
    KT_OK(kve_cache_write(kve_emu, &d));
    expect_sync(KVE_OK, "");
    ck_assert(!memcmp(k + 3 * 4, src, 4)); /* slot 4 is page indices[4] = 3 */
    free(indices);
}
END_TEST

/* A move past its indptr row's length on the device: the pair is skipped
 * and reported as the move it is, while a pair within the row moves. */
START_TEST(device_move_past_indptr)
{
    kve_emu_context_use(kve_serial_pools[0], 1, NULL);
    unsigned char src[4] = {9, 9, 9, 9}, k[4 * 2 * 4];
    for (int i = 0; i < (int)sizeof k; i++)
        k[i] = (unsigned char)i;
    int64_t slots[1] = {-1}; /* no token written: the moves alone */
    int32_t token_row[1] = {0}, indptr[2] = {0, 2}, indices[2] = {1, 3}, last[1] = {2};
    int32_t mv[4] = {2, 0, 0, 0};
    uint32_t n_mv[1] = {1};
    kve_cache_write_desc d = {.n_tokens = 1, .n_heads = 1, .entry_bytes = 4, .n_caches = 1,
                              .src = {src}, .dst = {k}, .layout = KVE_LAYOUT_NHD, .pages.page_size = 2,
                              .pages.n_pages = 4, .slots = slots, .slots_stride_token = 1,
                              .token_row = token_row, .pages.n_rows = 1,
                              .pages.kind = KVE_PAGES_INDPTR, .pages.indptr = indptr,
                              .pages.indices = indices, .pages.last_page_len = last, .moves = mv,
                              .n_moves = n_mv, .n_move_rows = 1, .max_moves = 2};
    KT_OK(kve_cache_write(kve_emu, &d));
    expect_sync(KVE_OK, "");
    /* slot 2 (page indices[1] = 3, entry 0) moved to slot 0 (page 1, entry 0) */
    ck_assert(!memcmp(k + (1 * 2 + 0) * 4, (unsigned char[]){24, 25, 26, 27}, 4));
    last[0] = 1; /* the row holds slots 0..2 now: slot 3 is past it */
    mv[0] = 3;
    KT_OK(kve_cache_write(kve_emu, &d));
    expect_sync(KVE_ERR_RANGE, "desc.moves[move row 0][head 0]: n_moves must be <= max_moves");
    ck_assert(!memcmp(k + (1 * 2 + 0) * 4, (unsigned char[]){24, 25, 26, 27}, 4)); /* skipped */
    n_mv[0] = 3; /* more than max_moves */
    KT_OK(kve_cache_write(kve_emu, &d));
    expect_sync(KVE_ERR_RANGE, "desc.moves[move row 0][head 0]");
    /* max_moves = 0 (kve_state_max_moves of a step without tokens) is a
     * list of no pair: accepted, and a count past 0 still raised (issue 36) */
    d.max_moves = 0;
    n_mv[0] = 1;
    KT_OK(kve_cache_write(kve_emu, &d));
    expect_sync(KVE_ERR_RANGE, "desc.moves[move row 0][head 0]");
    n_mv[0] = 0;
    KT_OK(kve_cache_write(kve_emu, &d));
    expect_sync(KVE_OK, "");
}
END_TEST

/* Issue 47 item 4 on the device: an entry whose desc.src_slots source is
 * -1 is not written, but its row and slot are checked as without src_slots
 * (the kernel skipped it unchecked). */
START_TEST(device_src_slots_entry_checked)
{
    kve_emu_context_use(kve_serial_pools[0], 1, NULL);
    unsigned char k[4 * 2 * 4];
    for (int i = 0; i < (int)sizeof k; i++)
        k[i] = (unsigned char)i;
    int64_t slots[2] = {1, 999}, from[2] = {0, -1};
    int32_t token_row[1] = {0}, bt[2] = {0, 1};
    kve_cache_write_desc d = {.n_tokens = 1, .n_heads = 2, .entry_bytes = 4, .n_caches = 1,
                              .dst = {k}, .layout = KVE_LAYOUT_NHD, .pages.page_size = 2,
                              .pages.n_pages = 2, .slots = slots, .slots_stride_token = 2,
                              .slots_stride_head = 1, .token_row = token_row, .pages.n_rows = 1,
                              .pages.kind = KVE_PAGES_BLOCK_TABLE, .pages.block_table = bt,
                              .pages.blocks_per_row = 2, .src_slots = from};
    KT_OK(kve_cache_write(kve_emu, &d));
    expect_sync(KVE_ERR_RANGE, "desc.slots[token 0][head 1]");
    slots[1] = 3;
    token_row[0] = 7;
    KT_OK(kve_cache_write(kve_emu, &d));
    expect_sync(KVE_ERR_RANGE, "desc.token_row[0]");
    token_row[0] = 0;
    KT_OK(kve_cache_write(kve_emu, &d));
    expect_sync(KVE_OK, "");
    /* head 0: slot 0 to slot 1; head 1 (source -1): slot 3 untouched */
    ck_assert(!memcmp(k + 8, (unsigned char[]){0, 1, 2, 3}, 4));
    ck_assert_uint_eq(k[3 * 8 + 4], 3 * 8 + 4);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(faults, fault_evict_launch),
        KVE_TEST(faults, fault_evict_trusted_bad_slot),
        KVE_TEST(faults, fault_cache_write_launch),
        KVE_TEST(faults, fault_cache_write_bad_page),
        KVE_TEST(faults, device_indptr_within_indices),
        KVE_TEST(faults, device_move_past_indptr),
        KVE_TEST(faults, device_src_slots_entry_checked),
    };
    const kve_suite_spec spec = {"emu_faults", 600, 0, kve_emu_fixture_setup,
                                  kve_emu_fixture_teardown};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
