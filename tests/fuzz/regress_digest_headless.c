/*
 * regress_digest_headless — found by fuzz_evict: kve_digest of a batch with
 * no head but n_slots = 2^31-1 (valid) allocated 2 x 8 GiB of scratch, so it
 * failed with KVE_ERR_NOMEM (or took the memory). Under a 1 GiB allocation
 * cap it must succeed with the digest of no head: XXH3-64 of nothing.
 */
#include <stdio.h>
#include <sys/resource.h>
#include <xxhash.h>

#include "kvevict.h"

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define UNDER_ASAN 1
#endif
#endif

int main(void)
{
#ifndef UNDER_ASAN /* ASan caps through max_allocation_size_mb (CMakeLists) */
    struct rlimit cap = {1u << 30, 1u << 30};
    if (setrlimit(RLIMIT_AS, &cap) != 0)
        return 1;
#endif
    kve_context *ctx;
    if (kve_context_create(KVE_BACKEND_CPU, &ctx) != KVE_OK)
        return 1;
    kve_batch b = {.seed = 1, .n_seqs = 0, .n_layers = 1, .n_heads = 1, .n_slots = 0x7fffffffu,
                   .slot_pos_stride = 0x7fffffffu};
    uint64_t d = 0;
    kve_status st = kve_digest(ctx, &b, NULL, &d);
    kve_context_destroy(ctx);
    if (st != KVE_OK || d != XXH3_64bits(NULL, 0)) {
        printf("kve_digest of no head: %s (%s), digest 0x%llx\n", kve_status_string(st),
               kve_last_error(), (unsigned long long)d);
        return 1;
    }
    puts("digest of a headless batch: ok, no scratch");
    return 0;
}
