/* test_near_moves.c — in-place compaction of per-head rows large enough to
 * stream (16 MiB), with plain stores for runs that move near and with
 * streaming ones (kve_cpu_near_moves_plain forced either way), on every ISA
 * and 1 and 2 threads, held to a direct per-entry reference; and the CPU
 * rule itself (Zen 3 only) against /proc/cpuinfo. Forces a library switch,
 * so it links the static library. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kve_cpu_isa.h"
#include "kve_suite.h"
#include "kve_test_util.h"

enum { HEADS = 8, SLOTS = 2048, CACHES = 2 };

/* The rule of kve_cpu_near_moves_plain read from /proc/cpuinfo's first
 * processor: AuthenticAMD, cpu family 25, model 0-15 or 32-95. */
static int zen3_from_cpuinfo(void)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    ck_assert_msg(f != NULL, "/proc/cpuinfo");
    char line[512];
    int amd = -1, family = -1, model = -1;
    while (fgets(line, sizeof line, f) && (amd < 0 || family < 0 || model < 0)) {
        if (!strncmp(line, "vendor_id", 9))
            amd = strstr(line, "AuthenticAMD") != NULL;
        else if (!strncmp(line, "cpu family", 10))
            family = atoi(strchr(line, ':') + 1);
        else if (!strncmp(line, "model\t", 6))
            model = atoi(strchr(line, ':') + 1);
    }
    fclose(f);
    ck_assert_msg(amd >= 0 && family >= 0 && model >= 0, "vendor_id, cpu family, model");
    return amd && family == 25 && (model < 16 || (model >= 32 && model < 96));
}

START_TEST(near_rule_matches_cpuinfo)
{
    kve_cpu_near_moves_plain_force(-1);
    ck_assert_int_eq(kve_cpu_near_moves_plain(), zen3_from_cpuinfo());
    kve_cpu_near_moves_plain_force(1);
    ck_assert_int_eq(kve_cpu_near_moves_plain(), 1);
    kve_cpu_near_moves_plain_force(0);
    ck_assert_int_eq(kve_cpu_near_moves_plain(), 0);
    kve_cpu_near_moves_plain_force(-1);
}
END_TEST

/* e-byte entries, 16 MiB of rows in place: evictions one slot in @p every
 * (near: at most 2048 / every slots down; every 3: farther than
 * KVE_NEAR_MOVE_BYTES, so streamed either way), the source off 16-byte
 * alignment by @p off. */
static void near_case(uint64_t *rng, size_t e, uint32_t every, size_t off)
{
    size_t row = (size_t)SLOTS * e, bytes = HEADS * row * CACHES;
    int32_t *pos = malloc(HEADS * SLOTS * 4), *slots = malloc(HEADS * SLOTS * 4);
    int32_t *ev = malloc(HEADS * SLOTS * 4);
    uint32_t n_ev[HEADS];
    for (uint32_t h = 0; h < HEADS; h++) {
        n_ev[h] = 0;
        for (uint32_t t = 0; t < SLOTS; t++) {
            pos[h * SLOTS + t] = (int32_t)(t * HEADS + h);
            if (t > 0 && kt_below(rng, every) == 0)
                ev[h * SLOTS + n_ev[h]++] = (int32_t)t;
        }
    }
    char *orig = malloc(bytes), *mem = malloc(bytes + off), *kv = mem + off;
    for (size_t i = 0; i < bytes; i += 8) {
        uint64_t v = kt_next(rng);
        memcpy(orig + i, &v, 8);
    }
    int tables = 0;
    for (int isa = KVE_CPU_ISA_SCALAR; isa <= KVE_CPU_ISA_AVX512; isa++) {
        int avail = 0;
        KT_OK(kve_cpu_isa_available((kve_cpu_isa)isa, &avail));
        for (int run = 0; avail && run < 4; run++) { /* plain or not x 1 or 2 threads */
            kve_context *ctx = NULL;
            KT_OK(kve_context_create(KVE_BACKEND_CPU, &ctx));
            KT_OK(kve_context_set_cpu_isa(ctx, (kve_cpu_isa)isa));
            KT_OK(kve_context_set_threads(ctx, 1 + run / 2));
            kve_cpu_near_moves_plain_force(run % 2);
            memcpy(kv, orig, bytes);
            memcpy(slots, pos, HEADS * SLOTS * 4);
            kve_compact_desc d;
            memset(&d, 0, sizeof d);
            d.n_seqs = 1, d.n_layers = 1, d.n_heads = HEADS, d.n_slots = SLOTS;
            d.slot_pos = slots, d.slot_pos_stride = SLOTS;
            d.evicted = ev, d.evicted_stride = SLOTS, d.n_evicted = n_ev;
            d.entry_bytes = e, d.n_caches = CACHES;
            for (uint32_t c = 0; c < CACHES; c++)
                d.src[c] = (kve_cache_view){kv + c * HEADS * row, 0, row, row, e};
            KT_OK(kve_compact(ctx, &d));
            kve_cpu_near_moves_plain_force(-1);
            for (uint32_t h = 0; h < HEADS; h++) {
                uint32_t j = 0, x = 0;
                for (uint32_t t = 0; t < SLOTS; t++) {
                    if (x < n_ev[h] && ev[h * SLOTS + x] == (int32_t)t) {
                        x++;
                        continue;
                    }
                    ck_assert_msg(slots[h * SLOTS + j] == pos[h * SLOTS + t],
                                  "isa %d run %d every %u: head %u slot %u", isa, run, every, h, j);
                    for (uint32_t c = 0; c < CACHES; c++) {
                        size_t base = c * HEADS * row + h * row;
                        ck_assert_msg(!memcmp(kv + base + j * e, orig + base + t * e, e),
                                      "isa %d run %d every %u: head %u entry %u of cache %u", isa,
                                      run, every, h, j, c);
                    }
                    j++;
                }
                for (; j < SLOTS; j++)
                    ck_assert_int_eq(slots[h * SLOTS + j], -1);
            }
            kve_context_destroy(ctx);
            tables++;
        }
    }
    ck_assert_int_ge(tables, 4);
    free(pos);
    free(slots);
    free(ev);
    free(orig);
    free(mem);
}

START_TEST(near_moves_exact)
{
    uint64_t rng = 2027;
    near_case(&rng, 512, 40, 0);
    near_case(&rng, 512, 40, 8);
    near_case(&rng, 512, 3, 0);
    near_case(&rng, 1024, 200, 8);
}
END_TEST

int main(void)
{
    const kve_suite_test tests[] = {
        KVE_TEST(near, near_rule_matches_cpuinfo),
        KVE_TEST(near, near_moves_exact),
    };
    const kve_suite_spec spec = {"cpu_near_moves", 600, 1, NULL, NULL};
    return kve_suite_main(&spec, tests, KVE_COUNT(tests));
}
