/*
 * test_emu_capture.c — the emulated device's graph capture follows CUDA's
 * stream capture in its global mode (issue 46; emu_backend.h), rule by
 * rule:
 *
 *   stream    what the context queues on the capturing stream is recorded,
 *             not run, and a replay runs it (kve_emu_capture_begin_stream,
 *             and kve_emu_capture_begin for the default stream); the C
 *             form of docs/INTEGRATION.md "CUDA graphs": the context's
 *             stream set to the capturing one, restored after
 *   other     a launch on another stream runs at once and the capture's
 *             end reports it (CUDA would not capture it); the graph
 *             replays without it
 *   refused   an allocation and a free (on any stream), a synchronize and
 *             a copy to or from host memory (on the capturing stream)
 *             break the capture, each named at its end; the graph cannot
 *             replay
 *   allowed   a synchronize and a host copy on another stream are not
 *             refused (the copy runs, reported as outside the graph)
 *   copy      a backend-to-backend copy on the capturing stream is a
 *             node: not run at capture, run at each replay with the
 *             source as it is then
 */
#include <check.h>
#include <stdint.h>
#include <string.h>

#include "emu_backend.h"
#include "emu_suite.h"
#include "kve_test_util.h"

/* Two stream handles: opaque to the emulated device, as cudaStream_t. */
static int kc_streams[2];
#define KC_CAPTURE ((void *)&kc_streams[0])
#define KC_OTHER ((void *)&kc_streams[1])

enum { KC_ROWS = 2, KC_CAP = 8 };

/* A state of two rows (one layer, one head), both admitted with empty
 * prompts, and a planned append's buffers: every call row one token. */
typedef struct kc_rig {
    kve_state *st;
    uint32_t *rows, *n_new;
    kve_step_buffers out;
} kc_rig;

static void kc_init(kc_rig *g)
{
    kve_emu_context_device_plan(32); /* the GPU's own launch plan */
    kve_state_desc d = {{46, 0, 4, 1, 2}, KC_ROWS, 1, 1, 0, 0, KC_CAP, 0, 0, 0};
    ck_assert_int_eq(kve_state_create(kve_emu, &d, NULL, 0, &g->st), KVE_OK);
    for (uint32_t r = 0; r < KC_ROWS; r++)
        ck_assert_int_eq(kve_state_admit(g->st, r, 100 + r, 0), KVE_OK);
    uint32_t rows[KC_ROWS] = {0, 1}, n_new[KC_ROWS] = {1, 1};
    g->rows = (uint32_t *)kt_alloc(kve_emu, sizeof rows);
    g->n_new = (uint32_t *)kt_alloc(kve_emu, sizeof n_new);
    kt_put(kve_emu, g->rows, rows, sizeof rows);
    kt_put(kve_emu, g->n_new, n_new, sizeof n_new);
    uint32_t max_moves = 0;
    ck_assert_int_eq(kve_state_max_moves(g->st, 1, &max_moves), KVE_OK);
    g->out.max_tokens = KC_ROWS;
    g->out.max_rows = KC_ROWS;
    g->out.max_moves = max_moves;
    g->out.slot_mapping = (int64_t *)kt_alloc(kve_emu, KC_ROWS * 8);
    g->out.moves = (int32_t *)kt_alloc(kve_emu, (size_t)KC_ROWS * max_moves * 8 + 8);
    g->out.n_moves = (uint32_t *)kt_alloc(kve_emu, KC_ROWS * 4);
}

static void kc_fini(kc_rig *g)
{
    void *bufs[] = {g->rows, g->n_new, g->out.slot_mapping, g->out.moves, g->out.n_moves};
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++)
        ck_assert_int_eq(kve_free(kve_emu, bufs[i]), KVE_OK);
    ck_assert_int_eq(kve_state_destroy(g->st), KVE_OK);
    ck_assert_int_eq(kve_context_set_stream(kve_emu, NULL), KVE_OK);
    kve_emu_context_device_plan(0);
}

/* Tokens row 0 holds (read back: outside any capture). */
static uint32_t kc_tokens(const kc_rig *g)
{
    kve_state_seq_info info;
    ck_assert_int_eq(kve_state_get_seq(g->st, 0, &info), KVE_OK);
    return info.n_tokens;
}

static kve_status kc_step(kc_rig *g)
{
    return kve_state_append_device(g->st, KC_ROWS, g->rows, g->n_new, 1, &g->out);
}

/* Ends @p graph; its message (NULL: none) must contain @p want (NULL:
 * must be NULL). Returns the node count. */
static uint32_t kc_end(kve_emu_graph *graph, const char *want)
{
    uint32_t nodes = 0;
    const char *got = kve_emu_capture_end(graph, &nodes);
    if (!want)
        ck_assert_msg(!got, "the capture reported '%s'", got);
    else
        ck_assert_msg(got && strstr(got, want), "the capture reported '%s', not '%s'",
                      got ? got : "nothing", want);
    return nodes;
}

/* The C form of a captured step: the context's stream set to the
 * capturing stream, the step captured, the stream restored. Recorded, not
 * run; each replay runs it. kve_emu_capture_begin() captures the default
 * stream. */
START_TEST(test_capture_stream)
{
    for (int dflt = 0; dflt < 2; dflt++) {
        kc_rig g;
        kc_init(&g);
        void *saved = (void *)&g;
        ck_assert_int_eq(kve_context_set_stream(kve_emu, KC_OTHER), KVE_OK);
        ck_assert_int_eq(kve_context_get_stream(kve_emu, &saved), KVE_OK);
        ck_assert_ptr_eq(saved, KC_OTHER);
        ck_assert_int_eq(kve_context_set_stream(kve_emu, dflt ? NULL : KC_CAPTURE), KVE_OK);
        kve_emu_graph *graph = dflt ? kve_emu_capture_begin() : kve_emu_capture_begin_stream(KC_CAPTURE);
        ck_assert_ptr_nonnull(graph);
        ck_assert_int_eq(kc_step(&g), KVE_OK);
        uint32_t nodes = kc_end(graph, NULL);
        ck_assert_int_eq(kve_context_set_stream(kve_emu, saved), KVE_OK);
        ck_assert_uint_gt(nodes, 0);
        ck_assert_uint_eq(kc_tokens(&g), 0); /* recorded, not run */
        for (uint32_t k = 1; k <= 3; k++) {
            ck_assert_int_eq(kve_emu_graph_replay(kve_emu, graph), KVE_OK);
            ck_assert_int_eq(kve_context_synchronize(kve_emu), KVE_OK);
            ck_assert_uint_eq(kc_tokens(&g), k);
        }
        kve_emu_graph_destroy(graph);
        kc_fini(&g);
    }
}
END_TEST

/* A step launched on another stream than the capturing one runs at once
 * and is not in the graph: the capture's end names it. */
START_TEST(test_capture_other_stream)
{
    kc_rig g;
    kc_init(&g);
    ck_assert_int_eq(kve_context_set_stream(kve_emu, KC_OTHER), KVE_OK);
    kve_emu_graph *graph = kve_emu_capture_begin_stream(KC_CAPTURE);
    ck_assert_int_eq(kc_step(&g), KVE_OK);
    ck_assert_uint_eq(kc_end(graph, "a launch of kve_state_plan_kernel on stream"), 0);
    ck_assert_uint_eq(kc_tokens(&g), 1); /* it ran */
    ck_assert_int_eq(kve_emu_graph_replay(kve_emu, graph), KVE_OK); /* without it */
    ck_assert_uint_eq(kc_tokens(&g), 1);
    kve_emu_graph_destroy(graph);
    kc_fini(&g);
}
END_TEST

/* Each refusal in its own capture, named at the capture's end; the graph
 * cannot replay. */
START_TEST(test_capture_refused)
{
    unsigned char host[64] = {0};
    void *mem = kt_alloc(kve_emu, sizeof host);
    static const char *const wants[] = {
        "an allocation", "a free", "an allocation", "a free", "a synchronize",
        "a copy from pageable host memory", "a copy to pageable host memory"};
    for (int k = 0; k < (int)KVE_COUNT(wants); k++) {
        /* cases 2, 3: the context on another stream (global mode: refused too) */
        ck_assert_int_eq(kve_context_set_stream(kve_emu, k == 2 || k == 3 ? KC_OTHER : KC_CAPTURE),
                         KVE_OK);
        kve_emu_graph *graph = kve_emu_capture_begin_stream(KC_CAPTURE);
        void *p = NULL;
        kve_status st = k == 0 || k == 2 ? kve_alloc(kve_emu, 64, &p)
                        : k == 1 || k == 3 ? kve_free(kve_emu, mem)
                        : k == 4           ? kve_context_synchronize(kve_emu)
                        : k == 5 ? kve_copy(kve_emu, mem, host, sizeof host, KVE_COPY_HOST_TO_BACKEND)
                                 : kve_copy(kve_emu, host, mem, sizeof host, KVE_COPY_BACKEND_TO_HOST);
        ck_assert_msg(st == KVE_ERR_DEVICE, "case %d (%s): status %d", k, wants[k], (int)st);
        kc_end(graph, wants[k]);
        ck_assert_int_eq(kve_emu_graph_replay(kve_emu, graph), KVE_ERR_INVALID);
        kve_emu_graph_destroy(graph);
    }
    ck_assert_int_eq(kve_context_set_stream(kve_emu, NULL), KVE_OK);
    kt_put(kve_emu, mem, host, sizeof host); /* mem is still held: the free was refused */
    ck_assert_int_eq(kve_free(kve_emu, mem), KVE_OK);
}
END_TEST

/* Not refused on another stream: a synchronize, and a host copy (it runs,
 * outside the graph). */
START_TEST(test_capture_other_stream_allowed)
{
    unsigned char a[96], got[96];
    for (int i = 0; i < 96; i++)
        a[i] = (unsigned char)(i * 7 + 1);
    void *src = kt_alloc(kve_emu, sizeof a);
    kt_put(kve_emu, src, a, sizeof a);
    ck_assert_int_eq(kve_context_set_stream(kve_emu, KC_OTHER), KVE_OK);
    kve_emu_graph *graph = kve_emu_capture_begin_stream(KC_CAPTURE);
    ck_assert_int_eq(kve_context_synchronize(kve_emu), KVE_OK);
    ck_assert_uint_eq(kc_end(graph, NULL), 0);
    kve_emu_graph_destroy(graph);
    graph = kve_emu_capture_begin_stream(KC_CAPTURE);
    ck_assert_int_eq(kve_copy(kve_emu, got, src, sizeof got, KVE_COPY_BACKEND_TO_HOST), KVE_OK);
    ck_assert_mem_eq(got, a, sizeof a);
    ck_assert_uint_eq(kc_end(graph, "a copy to pageable host memory on stream"), 0);
    kve_emu_graph_destroy(graph);
    ck_assert_int_eq(kve_context_set_stream(kve_emu, NULL), KVE_OK);
    ck_assert_int_eq(kve_free(kve_emu, src), KVE_OK);
}
END_TEST

/* A backend-to-backend copy on the capturing stream is a node: not run at
 * capture, run at each replay with the source as it is then. */
START_TEST(test_capture_device_copy)
{
    unsigned char a[96], b[96], got[96];
    for (int i = 0; i < 96; i++)
        a[i] = (unsigned char)(i * 7 + 1), b[i] = (unsigned char)(200 - i);
    void *src = kt_alloc(kve_emu, sizeof a), *dst = kt_alloc(kve_emu, sizeof b);
    kt_put(kve_emu, src, a, sizeof a);
    kt_put(kve_emu, dst, b, sizeof b);
    ck_assert_int_eq(kve_context_set_stream(kve_emu, KC_CAPTURE), KVE_OK);
    kve_emu_graph *graph = kve_emu_capture_begin_stream(KC_CAPTURE);
    ck_assert_int_eq(kve_copy(kve_emu, dst, src, sizeof a, KVE_COPY_BACKEND_TO_BACKEND), KVE_OK);
    ck_assert_uint_eq(kc_end(graph, NULL), 1);
    kt_get(kve_emu, got, dst, sizeof got);
    ck_assert_mem_eq(got, b, sizeof b); /* not run at capture */
    for (int i = 0; i < 96; i++)
        a[i] ^= 0x5a;
    kt_put(kve_emu, src, a, sizeof a);
    ck_assert_int_eq(kve_emu_graph_replay(kve_emu, graph), KVE_OK);
    kt_get(kve_emu, got, dst, sizeof got);
    ck_assert_mem_eq(got, a, sizeof a); /* the source as it is at the replay */
    kve_emu_graph_destroy(graph);
    ck_assert_int_eq(kve_context_set_stream(kve_emu, NULL), KVE_OK);
    ck_assert_int_eq(kve_free(kve_emu, src), KVE_OK);
    ck_assert_int_eq(kve_free(kve_emu, dst), KVE_OK);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(capture, test_capture_stream),
        KVE_TEST(capture, test_capture_other_stream),
        KVE_TEST(capture, test_capture_refused),
        KVE_TEST(capture, test_capture_other_stream_allowed),
        KVE_TEST(capture, test_capture_device_copy),
    };
    const kve_suite_spec spec = {"emu_capture", 300, 1, kve_emu_fixture_setup,
                                 kve_emu_fixture_teardown};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
