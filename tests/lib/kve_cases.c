/* kve_cases.c — random problems for the emulated and device tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kve_cases.h"
#include "kve_engine_cases.h"

enum { B_SEQS, B_SLOTS, B_EVICTED, B_NEVICTED, B_NKEPT, B_FLAGS, B_KEPT, B_DIGEST, B_RUN };
enum { C_SLOTS, C_EVICTED, C_NEVICTED, C_CACHES };

uint32_t kve_rand_below(uint64_t *s, uint32_t bound)
{
    return bound ? (uint32_t)(kve_splitmix64(s) % bound) : 0;
}

int kve_chance(uint64_t *s, uint32_t percent) { return kve_rand_below(s, 100) < percent; }

void kve_rand_perm(uint64_t *s, uint32_t *a, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) { /* inside-out Fisher-Yates */
        uint32_t j = kve_rand_below(s, i + 1);
        a[i] = a[j];
        a[j] = i;
    }
}

int kve_case_add(kve_case *c, size_t bytes)
{
    int i = c->n_bufs++;
    c->bytes[i] = bytes;
    c->master[i] = (unsigned char *)aligned_alloc(256, (bytes + 256) & ~(size_t)255);
    if (!c->master[i])
        return -1;
    memset(c->master[i], 0xee, bytes);
    return 0;
}

void kve_case_free(kve_case *c)
{
    for (int i = 0; i < c->n_bufs; i++)
        free(c->master[i]);
    memset(c, 0, sizeof *c);
}

static int kve_cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* One head's table: m distinct positions from [base, base + span), placed
 * in random slots (or in order), -1 elsewhere. */
static void kve_fill_head(int32_t *row, uint32_t n, uint64_t *rng, uint32_t *scratch,
                          uint32_t *out_base, uint32_t *out_span)
{
    uint32_t m = kve_chance(rng, 35) ? n : kve_rand_below(rng, n + 1);
    uint32_t span = m + (kve_chance(rng, 40) ? 0 : kve_rand_below(rng, 2 * m + 4));
    uint32_t base = 0;
    if (kve_chance(rng, 15))
        base = 0x7fffffffu - span - kve_rand_below(rng, 1000);
    else if (kve_chance(rng, 30))
        base = kve_rand_below(rng, 1u << 20);
    for (uint32_t i = 0; i < span; i++)
        scratch[i] = i;
    for (uint32_t i = 0; i < m; i++) { /* partial Fisher-Yates: m of span */
        uint32_t j = i + kve_rand_below(rng, span - i), t = scratch[i];
        scratch[i] = scratch[j];
        scratch[j] = t;
    }
    uint32_t *slot = scratch + span;
    for (uint32_t i = 0; i < n; i++)
        slot[i] = i;
    int in_order = kve_chance(rng, 30);
    for (uint32_t i = 0; i < n && !in_order; i++) {
        uint32_t j = i + kve_rand_below(rng, n - i), t = slot[i];
        slot[i] = slot[j];
        slot[j] = t;
    }
    for (uint32_t i = 0; i < n; i++)
        row[i] = -1;
    if (in_order) { /* ascending positions in ascending slots, holes between */
        qsort(scratch, m, sizeof *scratch, kve_cmp_u32);
        uint32_t at = 0;
        for (uint32_t i = 0; i < m; i++) {
            at += kve_rand_below(rng, n - at - (m - i) + 1) * kve_chance(rng, 20);
            row[at++] = (int32_t)(base + scratch[i]);
        }
    } else {
        for (uint32_t i = 0; i < m; i++)
            row[slot[i]] = (int32_t)(base + scratch[i]);
    }
    *out_base = base;
    *out_span = span;
}

/* Break one head's table: a value below -1, or a position twice. */
static void kve_break_head(int32_t *row, uint32_t n, uint64_t *rng)
{
    uint32_t t = kve_rand_below(rng, n);
    if (kve_chance(rng, 40) || n < 2) {
        static const int32_t bad[] = {-2, -3, -1000, INT32_MIN};
        row[t] = bad[kve_rand_below(rng, 4)];
        return;
    }
    for (uint32_t k = 0; k < n; k++) {
        uint32_t u = (t + 1 + k) % n;
        if (u != t && row[u] >= 0) {
            row[t] = row[u];
            return;
        }
    }
    row[t] = -7; /* no valid slot to copy: make it a range error */
}

int kve_case_evict(kve_case *c, uint64_t *rng, const kve_case_limits *lim)
{
    memset(c, 0, sizeof *c);
    kve_batch *b = &c->batch;
    uint32_t dim = lim->max_dim ? lim->max_dim : 1;
    b->n_seqs = 1 + kve_rand_below(rng, dim);
    b->n_layers = 1 + kve_rand_below(rng, dim);
    b->n_heads = 1 + kve_rand_below(rng, dim);
    uint32_t cap = lim->max_slots;
    b->n_slots = kve_chance(rng, 10) ? 1 + kve_rand_below(rng, cap)
                 : kve_chance(rng, 50) ? 1 + kve_rand_below(rng, cap / 8 + 1)
                                       : 1 + kve_rand_below(rng, 48);
    uint32_t n = b->n_slots;
    b->seed = kve_splitmix64(rng);
    b->flags =
        kve_rand_below(rng, 8) | (kve_chance(rng, 20) && !lim->errors ? KVE_TRUSTED_SLOTS : 0);
    b->layer_offset =
        kve_chance(rng, 10) ? 0xffffffffu - b->n_layers + 1 : kve_rand_below(rng, 100);
    b->head_offset = kve_chance(rng, 10) ? 0xffffffffu - b->n_heads + 1 : kve_rand_below(rng, 100);
    b->budget = kve_chance(rng, 5)   ? 0
                : kve_chance(rng, 5) ? 0x7fffffffu
                                     : kve_rand_below(rng, n + 3);
    b->window = kve_chance(rng, 10)  ? 0
                : kve_chance(rng, 5) ? 0x7fffffffu
                                     : kve_rand_below(rng, n + 3);
    b->slot_pos_stride = n + (kve_chance(rng, 30) ? kve_rand_below(rng, 9) : 0);
    c->heads = (size_t)b->n_seqs * b->n_layers * b->n_heads;
    size_t max_ev = n > b->budget ? n - b->budget : 0;
    c->out.evicted_stride =
        (max_ev ? max_ev : 1) + (kve_chance(rng, 30) ? kve_rand_below(rng, 5) : 0);
    c->out.kept_stride = n + (kve_chance(rng, 30) ? kve_rand_below(rng, 5) : 0);
    int want_flags = kve_chance(rng, 70), want_kept = kve_chance(rng, 70);
    int want_digest = kve_chance(rng, 70);
    size_t rows = (c->heads - 1) * b->slot_pos_stride + n;
    if (kve_case_add(c, b->n_seqs * sizeof(kve_seq)) || kve_case_add(c, rows * 4) ||
        kve_case_add(c, c->heads * c->out.evicted_stride * 4) || kve_case_add(c, c->heads * 4) ||
        kve_case_add(c, c->heads * 4) || kve_case_add(c, want_flags ? c->heads : 0) ||
        kve_case_add(c, want_kept ? c->heads * c->out.kept_stride * 4 : 0) ||
        kve_case_add(c, want_digest ? c->heads * 8 : 0) ||
        kve_case_add(c, kve_chance(rng, 50) ? b->n_seqs * 8 : 0))
        return -1;
    c->out.run_digest_weight = kve_chance(rng, 50) ? 0 : kve_splitmix64(rng);
    uint32_t *scratch = (uint32_t *)malloc((4 * (size_t)n + 8) * sizeof *scratch);
    if (!scratch)
        return -1;
    kve_seq *seqs = (kve_seq *)c->master[B_SEQS];
    int32_t *slots = (int32_t *)c->master[B_SLOTS];
    uint32_t base = 0, span = 0;
    for (size_t h = 0; h < c->heads; h++)
        kve_fill_head(slots + h * b->slot_pos_stride, n, rng, scratch, &base, &span);
    for (uint32_t s = 0; s < b->n_seqs; s++) {
        seqs[s].seq_id = kve_splitmix64(rng);
        seqs[s].round = kve_chance(rng, 10) ? 0xffffffffu : kve_rand_below(rng, 5);
        /* prompts around the last head's positions, sometimes none or all */
        seqs[s].prompt_len = kve_chance(rng, 15)   ? 0
                             : kve_chance(rng, 10) ? 0xffffffffu
                                                   : base + kve_rand_below(rng, span + 2);
    }
    if (lim->errors) {
        uint32_t broken = 1 + kve_rand_below(rng, 2);
        for (uint32_t k = 0; k < broken; k++)
            kve_break_head(slots + kve_rand_below(rng, (uint32_t)c->heads) * b->slot_pos_stride, n,
                           rng);
    }
    free(scratch);
    snprintf(c->label, sizeof c->label,
             "evict: %ux%ux%u heads, n_slots %u (stride %zu), B %u, W %u, flags 0x%x, offsets "
             "%u/%u, evicted_stride %zu, kept %d, flags %d",
             b->n_seqs, b->n_layers, b->n_heads, n, b->slot_pos_stride, b->budget, b->window,
             b->flags, b->layer_offset, b->head_offset, c->out.evicted_stride, want_kept,
             want_flags);
    return 0;
}

int kve_case_host_copy(const kve_case *c, kve_case_bufs *out)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < c->n_bufs; i++) {
        out->p[i] = (unsigned char *)aligned_alloc(256, (c->bytes[i] + 256) & ~(size_t)255);
        if (!out->p[i])
            return -1;
        memcpy(out->p[i], c->master[i], c->bytes[i]);
    }
    return 0;
}

void kve_case_host_free(const kve_case *c, kve_case_bufs *bufs)
{
    for (int i = 0; i < c->n_bufs; i++)
        free(bufs->p[i]);
    memset(bufs, 0, sizeof *bufs);
}

void kve_case_bind_evict(const kve_case *c, const kve_case_bufs *bufs, kve_batch *b,
                         kve_evict_out *o)
{
    *b = c->batch;
    b->seqs = (const kve_seq *)bufs->p[B_SEQS];
    b->slot_pos = (const int32_t *)bufs->p[B_SLOTS];
    *o = c->out;
    o->evicted = (int32_t *)bufs->p[B_EVICTED];
    o->n_evicted = (uint32_t *)bufs->p[B_NEVICTED];
    o->n_kept = (uint32_t *)bufs->p[B_NKEPT];
    o->head_flags = c->bytes[B_FLAGS] ? (uint8_t *)bufs->p[B_FLAGS] : NULL;
    o->kept = c->bytes[B_KEPT] ? (int32_t *)bufs->p[B_KEPT] : NULL;
    o->round_digest = c->bytes[B_DIGEST] ? (uint64_t *)bufs->p[B_DIGEST] : NULL;
    o->run_digest = c->bytes[B_RUN] ? (uint64_t *)bufs->p[B_RUN] : NULL;
    if (!o->kept)
        o->kept_stride = 0;
}

/* Cache layouts: head-major ([.., H, T, D], HF) or token-major ([T, H, D]),
 * with optional padding; the base at offset 0 or at a misalignment. */
static void kve_random_view(uint64_t *rng, const kve_compact_desc *d, kve_cache_view *v,
                            size_t *bytes, size_t *offset)
{
    size_t e = d->entry_bytes, pad = kve_chance(rng, 30) ? kve_rand_below(rng, 3) * 16 : 0;
    if (kve_chance(rng, 10))
        pad += kve_rand_below(rng, 5);
    if (kve_chance(rng, 50)) {
        v->stride_slot = e + pad;
        v->stride_head = d->n_slots * v->stride_slot + pad;
        v->stride_layer = d->n_heads * v->stride_head;
    } else {
        v->stride_head = e + pad;
        v->stride_slot = d->n_heads * v->stride_head + pad;
        v->stride_layer = d->n_slots * v->stride_slot;
    }
    v->stride_seq = d->n_layers * v->stride_layer;
    static const size_t offsets[] = {0, 0, 0, 16, 4, 1};
    *offset = offsets[kve_rand_below(rng, 6)];
    *bytes = *offset + d->n_seqs * v->stride_seq;
}

/* The slot tables and evicted lists of @p ev after its eviction on
 * @p reference: compaction's first three buffers. 0, or -1. */
static int kve_compact_tables(kve_case *c, const kve_case *ev, kve_context *reference)
{
    kve_case_bufs eb_host;
    kve_batch b;
    kve_evict_out o;
    if (kve_case_host_copy(ev, &eb_host))
        return -1;
    kve_case_bind_evict(ev, &eb_host, &b, &o);
    b.flags &= ~(uint32_t)KVE_TRUSTED_SLOTS;
    int rc = kve_evict(reference, &b, &o, NULL, 0) != KVE_OK ||
             kve_case_add(c, ev->bytes[B_SLOTS]) || kve_case_add(c, ev->bytes[B_EVICTED]) ||
             kve_case_add(c, ev->bytes[B_NEVICTED]);
    if (!rc) {
        memcpy(c->master[C_SLOTS], eb_host.p[B_SLOTS], ev->bytes[B_SLOTS]);
        memcpy(c->master[C_EVICTED], eb_host.p[B_EVICTED], ev->bytes[B_EVICTED]);
        memcpy(c->master[C_NEVICTED], eb_host.p[B_NEVICTED], ev->bytes[B_NEVICTED]);
    }
    kve_case_host_free(ev, &eb_host);
    return rc ? -1 : 0;
}

/* Break one head's inputs as the device checks must catch: n_evicted too
 * large, an evicted slot out of range, a list out of order, or a slot
 * position below -1. */
static void kve_compact_break(kve_case *c, uint64_t *rng)
{
    const kve_compact_desc *d = &c->desc;
    size_t h = kve_rand_below(rng, (uint32_t)c->heads);
    uint32_t *nev = (uint32_t *)c->master[C_NEVICTED];
    int32_t *row = (int32_t *)c->master[C_EVICTED] + h * d->evicted_stride;
    int32_t *slots = (int32_t *)c->master[C_SLOTS] + h * d->slot_pos_stride;
    switch (kve_rand_below(rng, 4)) {
    case 0: nev[h] = d->n_slots + 1 + kve_rand_below(rng, 3); break;
    case 1:
        nev[h] = nev[h] ? nev[h] : 1;
        row[kve_rand_below(rng, nev[h])] = kve_chance(rng, 50) ? -1 : (int32_t)d->n_slots;
        break;
    case 2:
        if (nev[h] >= 2) {
            row[1] = row[0];
            break;
        }
        __attribute__((fallthrough)); /* too short to disorder */
    default:
        slots[kve_rand_below(rng, d->n_slots)] = -2 - (int32_t)kve_rand_below(rng, 9);
        break;
    }
}

int kve_case_compact(kve_case *c, const kve_case *ev, kve_context *reference, uint64_t *rng,
                     const kve_case_limits *lim)
{
    memset(c, 0, sizeof *c);
    c->is_compact = 1;
    kve_compact_desc *d = &c->desc;
    const kve_batch *eb = &ev->batch;
    d->n_seqs = eb->n_seqs;
    d->n_layers = eb->n_layers;
    d->n_heads = eb->n_heads;
    d->n_slots = eb->n_slots;
    d->slot_pos_stride = eb->slot_pos_stride;
    d->evicted_stride = ev->out.evicted_stride;
    c->heads = ev->heads;
    static const size_t entry_sizes[] = {16, 32, 256, 48, 4, 12, 8, 3, 1, 2};
    d->entry_bytes = entry_sizes[kve_rand_below(rng, 10)];
    d->n_caches = 1 + kve_rand_below(rng, 3);
    int out_of_place = kve_chance(rng, 40);
    size_t offset[2][KVE_MAX_CACHES], bytes[2][KVE_MAX_CACHES];
    for (uint32_t k = 0; k < d->n_caches; k++)
        for (int side = 0; side <= out_of_place; side++)
            kve_random_view(rng, d, side ? &d->dst[k] : &d->src[k], &bytes[side][k],
                            &offset[side][k]);
    if (kve_compact_tables(c, ev, reference)) /* the eviction itself, on the reference */
        return -1;
    for (int side = 0; side <= out_of_place; side++)
        for (uint32_t k = 0; k < d->n_caches; k++) {
            kve_cache_view *v = side ? &d->dst[k] : &d->src[k];
            if (kve_case_add(c, bytes[side][k]))
                return -1;
            unsigned char *m = c->master[c->n_bufs - 1];
            for (size_t i = 0; i < bytes[side][k]; i++)
                m[i] = (unsigned char)kve_splitmix64(rng);
            v->base = (void *)offset[side][k]; /* an offset until bound */
        }
    if (lim->errors)
        kve_compact_break(c, rng);
    snprintf(c->label, sizeof c->label,
             "compact: %ux%ux%u heads, n_slots %u, entry %zu bytes, %u caches, %s, src stride "
             "slot %zu head %zu, base +%zu",
             d->n_seqs, d->n_layers, d->n_heads, d->n_slots, d->entry_bytes, d->n_caches,
             out_of_place ? "out of place" : "in place", d->src[0].stride_slot,
             d->src[0].stride_head, offset[0][0]);
    return 0;
}

void kve_case_bind_compact(const kve_case *c, const kve_case_bufs *bufs, kve_compact_desc *d)
{
    *d = c->desc;
    d->slot_pos = (int32_t *)bufs->p[C_SLOTS];
    d->evicted = (const int32_t *)bufs->p[C_EVICTED];
    d->n_evicted = (const uint32_t *)bufs->p[C_NEVICTED];
    int out_of_place = c->n_bufs > C_CACHES + (int)c->desc.n_caches;
    for (uint32_t k = 0; k < c->desc.n_caches; k++) {
        d->src[k].base = bufs->p[C_CACHES + k] + (size_t)c->desc.src[k].base;
        d->dst[k].base =
            out_of_place ? bufs->p[C_CACHES + c->desc.n_caches + k] + (size_t)c->desc.dst[k].base
                         : NULL;
    }
}

int kve_case_compare(const kve_case *c, const kve_case_bufs *x, const kve_case_bufs *y, char *why,
                     size_t why_bytes)
{
    if (!c->is_compact && !c->is_cache_write) {
        const uint32_t *ne_x = (const uint32_t *)x->p[B_NEVICTED],
                       *ne_y = (const uint32_t *)y->p[B_NEVICTED];
        const uint32_t *nk_x = (const uint32_t *)x->p[B_NKEPT],
                       *nk_y = (const uint32_t *)y->p[B_NKEPT];
        for (size_t h = 0; h < c->heads; h++)
            if (ne_x[h] != ne_y[h] || nk_x[h] != nk_y[h]) {
                snprintf(why, why_bytes, "head %zu: n_evicted %u vs %u, n_kept %u vs %u", h,
                         ne_x[h], ne_y[h], nk_x[h], nk_y[h]);
                return 1;
            }
    }
    static const char *const evict_names[] = {"seqs", "slot_pos", "evicted", "n_evicted",
                                              "n_kept", "head_flags", "kept", "round_digest",
                                              "run_digest"};
    for (int i = 0; i < c->n_bufs; i++) {
        if (!c->bytes[i] || !memcmp(x->p[i], y->p[i], c->bytes[i]))
            continue;
        size_t at = 0;
        while (x->p[i][at] == y->p[i][at])
            at++;
        snprintf(why, why_bytes, "buffer %s differs at byte %zu (0x%02x vs 0x%02x)",
                 c->is_cache_write ? "cache"
                 : c->is_compact
                     ? (i == C_SLOTS ? "slot_pos" : i < C_CACHES ? "evicted" : "cache")
                     : evict_names[i],
                 at, x->p[i][at], y->p[i][at]);
        return 1;
    }
    return 0;
}

/* The "head N" a kve_last_error()-style message names, or -1; "token N"
 * for a cache write. */
static long long kve_message_head(const kve_case *c, const char *msg)
{
    if (c->is_cache_write)
        return kve_message_token(msg);
    const char *p = strstr(msg, "[head ");
    if (p)
        return strtoll(p + 6, NULL, 10);
    p = strstr(msg, "n_evicted[");
    return p ? strtoll(p + 10, NULL, 10) : -1;
}

kve_status kve_case_run(kve_context *ctx, const kve_case *c, const kve_case_bufs *bufs,
                        void *workspace, size_t workspace_bytes)
{
    if (c->is_compact) {
        kve_compact_desc d;
        kve_case_bind_compact(c, bufs, &d);
        return kve_compact(ctx, &d);
    }
    if (c->is_cache_write) {
        kve_cache_write_desc d;
        kve_case_bind_cache_write(c, bufs, &d);
        return kve_cache_write(ctx, &d);
    }
    kve_batch b;
    kve_evict_out o;
    kve_case_bind_evict(c, bufs, &b, &o);
    return kve_evict(ctx, &b, &o, workspace, workspace_bytes);
}

int kve_case_verdict(const kve_case *c, kve_status st_a, const char *msg_a,
                     const kve_case_bufs *a, kve_status st_b, const char *msg_b,
                     const kve_case_bufs *b, char *why, size_t why_bytes)
{
    if (st_a != st_b) {
        snprintf(why, why_bytes, "status %s (%s) vs %s (%s)", kve_status_string(st_a), msg_a,
                 kve_status_string(st_b), msg_b);
        return 1;
    }
    if (st_a != KVE_OK) {
        long long ha = kve_message_head(c, msg_a), hb = kve_message_head(c, msg_b);
        if (ha == hb || (c->is_cache_write && (ha < 0 || hb < 0)))
            return 0;
        snprintf(why, why_bytes, "\"%s\" vs \"%s\": not the same head", msg_a, msg_b);
        return 1;
    }
    return kve_case_compare(c, a, b, why, why_bytes);
}
