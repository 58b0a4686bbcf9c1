/* digest.c — docs/SPEC.md "Digest": XXH3-64 (seed 0) streamed over every
 * head's kept positions, ascending, in (sequence, layer, head) order. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "kve_digest.h"
#include "kve_error.h"

static void kve_put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static int kve_cmp_pos(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

kve_status kve_digest_host(const kve_batch *b, const kve_seq *seqs,
                           const int32_t *slot_pos, const int32_t *evicted, size_t evicted_stride,
                           const uint32_t *n_evicted, uint64_t *out_digest)
{
    XXH3_state_t *state = XXH3_createState();
    /* kept positions of one head, then their LE32 bytes (none without heads:
     * a batch of no head may still say n_slots = 2^31-1) */
    size_t cap = b->n_seqs && b->n_layers && b->n_heads ? (size_t)b->n_slots + 1 : 1;
    int32_t *kept = (int32_t *)malloc(cap * sizeof *kept);
    unsigned char *bytes = (unsigned char *)malloc(cap * 4);
    if (!state || !kept || !bytes) {
        XXH3_freeState(state);
        free(kept);
        free(bytes);
        return kve_error_set(KVE_ERR_NOMEM,
                             "cannot allocate the digest's scratch for %u slots (%zu bytes and "
                             "an XXH3 state)",
                             b->n_slots, ((size_t)b->n_slots + 1) * 8);
    }
    XXH3_64bits_reset(state);
    size_t i = 0;
    for (uint32_t s = 0; s < b->n_seqs; s++)
        for (uint32_t l = 0; l < b->n_layers; l++)
            for (uint32_t h = 0; h < b->n_heads; h++, i++) {
                uint32_t ne = n_evicted ? n_evicted[i] : 0, e = 0, count = 0;
                /* Empty rows may have a NULL base and any stride: no offset. */
                const int32_t *row = b->n_slots ? slot_pos + i * b->slot_pos_stride : slot_pos;
                const int32_t *ev = evicted && ne ? evicted + i * evicted_stride : evicted;
                if (ne > b->n_slots || ne > evicted_stride) {
                    XXH3_freeState(state);
                    free(kept);
                    free(bytes);
                    return kve_error_set(KVE_ERR_RANGE,
                                         "evicted.n_evicted[%zu] = %u: exceeds n_slots %u or "
                                         "evicted_stride %zu",
                                         i, ne, b->n_slots, evicted_stride);
                }
                for (uint32_t t = 0; t < b->n_slots; t++) {
                    if (e < ne && ev[e] == (int32_t)t) {
                        e++;
                        continue;
                    }
                    if (row[t] >= 0)
                        kept[count++] = row[t];
                }
                qsort(kept, count, sizeof *kept, kve_cmp_pos);
                unsigned char head[20];
                uint64_t id = seqs[s].seq_id;
                kve_put_le32(head, (uint32_t)id);
                kve_put_le32(head + 4, (uint32_t)(id >> 32));
                kve_put_le32(head + 8, b->layer_offset + l);
                kve_put_le32(head + 12, b->head_offset + h);
                kve_put_le32(head + 16, count);
                XXH3_64bits_update(state, head, sizeof head);
                for (uint32_t k = 0; k < count; k++)
                    kve_put_le32(bytes + 4 * k, (uint32_t)kept[k]);
                XXH3_64bits_update(state, bytes, (size_t)count * 4);
            }
    *out_digest = XXH3_64bits_digest(state);
    XXH3_freeState(state);
    free(kept);
    free(bytes);
    return KVE_OK;
}
