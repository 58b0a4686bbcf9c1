/* cmd_vectors.c — `kvevict vectors`: the golden vectors of docs/SPEC.md,
 * recomputed here and compared with the recorded answers. */
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "golden_vectors.h"

static const char kve_vectors_usage[] =
    "usage: kvevict vectors [--backend NAME]\n"
    "Recompute every golden key and keep-set of docs/SPEC.md on this machine and\n"
    "print each with ok or MISMATCH; exit 1 on any mismatch.\n";

static int kve_same_list(const int32_t *a, uint32_t na, const int32_t *b, uint32_t nb)
{
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

int kve_cmd_vectors(int argc, char **argv)
{
    const char *backend = "cpu";
    kve_cli_seen seen = {{0}, 0};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            fputs(kve_vectors_usage, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "--backend") && i + 1 < argc) {
            if (kve_cli_once("vectors", "backend", &seen))
                return 2;
            backend = argv[++i];
        } else
            return kve_cli_usage_error("vectors: unexpected argument \"%s\"\n%s", argv[i],
                                       kve_vectors_usage);
    }
    kve_context *ctx = NULL;
    int rc = kve_cli_context(backend, NULL, 0, &ctx);
    if (rc)
        return rc;
    int bad = 0;
    printf("keys (seed, seq_id, layer, head, pos, round, flags -> key)\n");
    for (size_t i = 0; i < KVE_GOLDEN_N_KEYS; i++) {
        const kve_golden_key *g = &kve_golden_keys[i];
        kve_coord c = {g->seq_id, g->layer, g->head, g->pos, g->round};
        uint64_t key = 0;
        kve_status st = kve_cli_keys(ctx, g->seed, g->flags, &c, 1, &key);
        if (st != KVE_OK) {
            kve_context_destroy(ctx);
            return kve_cli_fail("vectors", st);
        }
        int ok = key == g->key;
        bad += !ok;
        printf("  0x%016llx 0x%016llx %u %u %u %u %u -> 0x%016llx %s\n",
               (unsigned long long)g->seed, (unsigned long long)g->seq_id, g->layer, g->head,
               g->pos, g->round, g->flags, (unsigned long long)key, ok ? "ok" : "MISMATCH");
    }
    printf("keep-sets\n");
    for (size_t i = 0; i < KVE_GOLDEN_N_CASES; i++) {
        const kve_golden_case *g = &kve_golden_cases[i];
        kve_cli_config cfg;
        memset(&cfg, 0, sizeof cfg);
        cfg.seed = g->seed;
        cfg.seq_id = g->seq_id;
        cfg.layers = cfg.heads = 1;
        cfg.layer_offset = g->layer;
        cfg.head_offset = g->head;
        cfg.prompt = g->prompt;
        cfg.window = g->window;
        cfg.budget = g->budget;
        cfg.round = g->round;
        cfg.flags = g->flags;
        cfg.n_slots = g->n_slots;
        cfg.slot_pos = (int32_t *)g->slot_pos;
        kve_cli_result r;
        kve_status st = kve_cli_evict(ctx, &cfg, &r);
        if (st != KVE_OK) {
            kve_context_destroy(ctx);
            return kve_cli_fail(g->name, st);
        }
        int over = (r.head_flags[0] & KVE_HEAD_OVER_BUDGET) != 0;
        int ok = kve_same_list(r.evicted, r.n_evicted[0], g->evicted, g->n_evicted) &&
                 kve_same_list(r.kept, r.n_kept[0], g->kept, g->n_kept) && over == g->over_budget;
        bad += !ok;
        printf("  %-28s slots %2u P %2u W %2u B %2u -> evict %u keep %u%s %s\n", g->name,
               g->n_slots, g->prompt, g->window, g->budget, r.n_evicted[0], r.n_kept[0],
               over ? " (over budget)" : "", ok ? "ok" : "MISMATCH");
        kve_cli_result_free(&r);
    }
    kve_context_destroy(ctx);
    printf("%s: %zu vectors, %d mismatches\n", bad ? "FAIL" : "ok",
           KVE_GOLDEN_N_KEYS + KVE_GOLDEN_N_CASES, bad);
    return bad ? 1 : 0;
}
