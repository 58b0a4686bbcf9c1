/* Evicts one small head through the installed library; exit 0 on the
 * expected counts. */
#include <stdio.h>

#include <kvevict.h>

int main(void)
{
    kve_context *ctx = NULL;
    if (kve_context_create(KVE_BACKEND_CPU, &ctx) != KVE_OK)
        return 1;
    int32_t slots[16], evicted[8], kept[16];
    for (int i = 0; i < 16; i++)
        slots[i] = i;
    kve_seq seq = {7, 4, 0};
    kve_batch b = {42, 0, 1, &seq, 1, 1, 0, 0, 16, 8, 2, slots, 16, NULL, 0};
    uint32_t n_evicted = 0, n_kept = 0;
    kve_evict_out out = {.evicted = evicted, .evicted_stride = 8, .n_evicted = &n_evicted,
                         .n_kept = &n_kept, .kept = kept, .kept_stride = 16};
    kve_status st = kve_evict(ctx, &b, &out, NULL, 0);
    printf("status %s, evicted %u, kept %u\n", kve_status_string(st), n_evicted, n_kept);
    kve_context_destroy(ctx);
    return st == KVE_OK && n_evicted == 8 && n_kept == 8 ? 0 : 1;
}
