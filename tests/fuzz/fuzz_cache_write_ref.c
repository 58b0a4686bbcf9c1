/*
 * fuzz_cache_write_ref.c — fuzz_cache_write's reference write (moves from
 * the cache as it was, then the tokens' entries, converted by
 * tests/state/kve_convert_ref.h), the brute-force checks of the destination
 * strides, and the library's answer held against the reference.
 */
#include "fuzz_cache_write.h"
#include "../state/kve_convert_ref.h"

/* Brute force: do two elements of cache k's destination (of one entry or
 * of two: dim elements of ds bytes, d_elem apart, in each) share a byte? */
static int dst_overlaps(const cw_case *c, uint32_t k)
{
    const cw_cache *g = &c->g[k];
    size_t ps = c->d.pages.page_size, H = c->d.n_heads;
    size_t n = c->d.pages.n_pages * ps * H * g->dim, i = 0;
    size_t *off = (size_t *)malloc((n + 1) * sizeof *off);
    for (size_t p = 0; p < c->d.pages.n_pages; p++)
        for (size_t s = 0; s < ps; s++)
            for (size_t h = 0; h < H; h++)
                for (size_t e = 0; e < g->dim; e++)
                    off[i++] = p * g->d_page + s * g->d_slot + h * g->d_head + e * g->d_elem;
    qsort(off, n, sizeof *off, fz_cmp_size);
    int overlap = 0;
    for (size_t j = 1; j < n; j++)
        overlap |= off[j] - off[j - 1] < g->ds;
    free(off);
    return overlap;
}

/* Brute force: does an element of cache 1, inside cache 0's tensor, share
 * a byte with one of cache 0? */
static int shared_overlaps(const cw_case *c)
{
    size_t ps = c->d.pages.page_size, H = c->d.n_heads, P = c->d.pages.n_pages;
    size_t n = P * ps * H * (c->g[0].dim + c->g[1].dim), i = 0;
    size_t(*el)[2] = malloc((n + 1) * sizeof *el); /* start, end */
    for (uint32_t k = 0; k < 2; k++) {
        const cw_cache *g = &c->g[k];
        size_t base = k ? c->shared_off : 0;
        for (size_t p = 0; p < P; p++)
            for (size_t s = 0; s < ps; s++)
                for (size_t h = 0; h < H; h++)
                    for (size_t e = 0; e < g->dim; e++) {
                        el[i][0] = base + p * g->d_page + s * g->d_slot + h * g->d_head +
                                   e * g->d_elem;
                        el[i][1] = el[i][0] + g->ds;
                        i++;
                    }
    }
    qsort(el, n, sizeof *el, fz_cmp_size); /* by start */
    int overlap = 0;
    size_t end = 0;
    for (size_t j = 0; j < n; j++) {
        overlap |= j && el[j][0] < end;
        end = el[j][1] > end ? el[j][1] : end;
    }
    free(el);
    return overlap;
}

/* Whether cache k's destination strides nest (the four dims page, slot,
 * head and elem, each, in increasing order, stepping past every element
 * inside it): the layouts the library must accept (docs/FUZZING.md: it may
 * refuse some interleaved ones that do not overlap). */
static int dst_nested(const cw_case *c, uint32_t k)
{
    const cw_cache *g = &c->g[k];
    size_t ext[4] = {c->d.pages.n_pages, c->d.pages.page_size, c->d.n_heads, g->dim},
           st[4] = {g->d_page, g->d_slot, g->d_head, g->d_elem};
    int used[4] = {0, 0, 0, 0};
    size_t span = g->ds;
    for (int n = 0; n < 4; n++) {
        int best = -1;
        for (int i = 0; i < 4; i++)
            if (!used[i] && (best < 0 || st[i] < st[best]))
                best = i;
        used[best] = 1;
        if (ext[best] <= 1)
            continue;
        if (st[best] < span)
            return 0;
        span += (ext[best] - 1) * st[best];
    }
    return 1;
}

/* What the caches' allocation decides: typed elements loaded whole need
 * aligned bases and strides (kve_cache_part: dst[c] and its strides, the
 * element stride among them, multiples of its element size, src[c] and its
 * strides of its source's, else refused; sources only where they are read,
 * not with src_slots), nested strides, and overlapping elements (brute
 * force). */
void check_geometry(cw_case *c)
{
    for (uint32_t k = 0; k < c->d.n_caches; k++) {
        const cw_cache *g = &c->g[k];
        size_t src_all = (size_t)(uintptr_t)c->src[k] | g->s_tok | g->s_head,
               dst_all = (size_t)(uintptr_t)c->dst[k] | g->d_page | g->d_slot | g->d_head |
                         g->d_elem;
        c->misaligned |= (!c->d.src_slots && src_all % g->ss) || dst_all % g->ds;
        c->exact &= dst_nested(c, k);
        c->dst_overlap |= dst_overlaps(c, k);
    }
    if (c->shared) { /* two caches in one tensor: their elements must not meet; accepted
                      * where the header's documentation says so, or where the spans are
                      * apart */
        int apart = c->shared_off >= c->g[0].dst_span || !c->g[1].dst_span;
        c->dst_overlap |= shared_overlaps(c);
        c->exact &= c->shared_doc || apart;
    }
    c->bad |= c->misaligned;
}

/* The page of (row, slot s) by the reference's reading of the table, or -1
 * when the table cannot give one (an error). */
static int64_t ref_page(const cw_case *c, int32_t row, int64_t s)
{
    const kve_cache_write_desc *d = &c->d;
    if (d->pages.kind == KVE_PAGES_INDPTR) {
        int32_t lo = c->indptr[row], hi = c->indptr[row + 1];
        if (lo < 0 || hi < lo || (hi > lo && (c->last[row] < 1 || (uint32_t)c->last[row] > d->pages.page_size)))
            return -1;
    }
    if (s < 0 || s >= c->row_limit[row])
        return -1;
    int64_t page = row;
    if (d->pages.kind == KVE_PAGES_BLOCK_TABLE)
        page = c->block_table[(size_t)row * d->pages.blocks_per_row + (size_t)(s / d->pages.page_size)];
    else if (d->pages.kind == KVE_PAGES_INDPTR) {
        /* indices holds indptr[n_rows] ids: a row past them is an error */
        int64_t k = c->indptr[row] + s / (int64_t)d->pages.page_size;
        if (k >= c->indptr[d->pages.n_rows])
            return -1;
        page = c->indices[k];
    }
    return page < 0 || page >= d->pages.n_pages ? -1 : page;
}

/* Logical entry (page, in-page slot, head): what conflicts are counted in. */
static size_t entry_index(const cw_case *c, int64_t page, int64_t s, size_t h)
{
    return ((size_t)page * c->d.pages.page_size + (size_t)(s % c->d.pages.page_size)) * c->d.n_heads + h;
}

/* Byte offset of that entry (its element 0) in cache k. */
static size_t entry_at(const cw_case *c, uint32_t k, int64_t page, int64_t s, size_t h)
{
    const cw_cache *g = &c->g[k];
    return (size_t)page * g->d_page + (size_t)(s % c->d.pages.page_size) * g->d_slot + h * g->d_head;
}

/* An entry of cache k, stored bytes as they are (its dim elements, d_elem
 * apart in both), from @p from to @p to. */
static void copy_entry(const cw_cache *g, uint8_t *to, const uint8_t *from)
{
    for (size_t i = 0; i < g->dim; i++)
        memcpy(to + i * g->d_elem, from + i * g->d_elem, g->ds);
}

/* The reference's moves: every valid pair's entry, in every cache (its
 * stored bytes, whatever the part's types), from the cache as it was before
 * the call; c->bad for what the library must refuse, c->amb for each entry
 * whose outcome would depend on the order (one moved to twice, or from one
 * also moved to, itself included). */
static void reference_moves(cw_case *c, uint8_t *hit, size_t n_entries)
{
    const kve_cache_write_desc *d = &c->d;
    if (!d->moves || c->bad)
        return;
    if (!d->n_moves) {
        c->bad = d->n_tokens || d->n_move_rows;
        return;
    }
    /* max_moves = 0: lists of no pair (every count 0; more is bad below) */
    size_t n_pairs = 0, max_pairs = (size_t)d->n_move_rows * d->n_heads * d->max_moves;
    size_t *pairs = (size_t *)malloc((max_pairs + 1) * 2 * sizeof *pairs);
    for (uint32_t i = 0; i < d->n_move_rows && !c->bad; i++) {
        int32_t row = c->move_row ? c->move_row[i] : (int32_t)i;
        /* a move row whose lists are all empty (a planned call's padding
         * row) is not checked (issue 47 item 2) */
        uint32_t any = 0;
        for (uint32_t h = 0; h < d->n_heads; h++)
            any |= d->n_moves[i * d->moves_stride_row + h * d->moves_stride_head];
        c->bad |= any && d->pages.kind != KVE_PAGES_FLAT &&
                  (row < 0 || (uint32_t)row >= d->pages.n_rows);
        for (uint32_t h = 0; h < d->n_heads && !c->bad; h++) {
            size_t l = i * d->moves_stride_row + h * d->moves_stride_head;
            uint32_t n = d->n_moves[l];
            c->bad |= n > d->max_moves;
            for (uint32_t k = 0; k < n && !c->bad; k++) {
                const int32_t *pair = c->moves + 2 * (l * d->max_moves + k);
                int64_t ps = ref_page(c, row, pair[0]), pd = ref_page(c, row, pair[1]);
                if (ps < 0 || pd < 0) {
                    c->bad = 1;
                    break;
                }
                size_t a = entry_index(c, ps, pair[0], h), b = entry_index(c, pd, pair[1], h);
                c->amb[b] |= hit[b];
                hit[b] = 1;
                pairs[2 * n_pairs] = a;
                pairs[2 * n_pairs++ + 1] = b;
                for (uint32_t q = 0; q < d->n_caches; q++)
                    copy_entry(&c->g[q], c->ref[q] + entry_at(c, q, pd, pair[1], h),
                               c->before[q] + entry_at(c, q, ps, pair[0], h));
            }
        }
    }
    for (size_t x = 0; x < n_pairs; x++)
        c->amb[pairs[2 * x + 1]] |= hit[pairs[2 * x]];
    memset(hit, 0, n_entries + 1); /* the writes then overwrite what they hit */
    free(pairs);
}

/* Entry (t, h) of cache k into the reference at byte @p at: each element
 * (dense in the source, d_elem apart in the cache) copied, or converted
 * (kve_convert_ref.h: dst = convert(float(src) / scale), the division only
 * with a scale). */
static void reference_entry(cw_case *c, uint32_t k, size_t t, size_t h, size_t at)
{
    const cw_cache *g = &c->g[k];
    const uint8_t *src = c->src[k] + t * g->s_tok + h * g->s_head;
    uint8_t *dst = c->ref[k] + at;
    if (!g->conv) {
        for (uint32_t i = 0; i < g->dim; i++)
            memcpy(dst + (size_t)i * g->d_elem, src + (size_t)i * g->ss, g->ds);
        return;
    }
    float scale = g->scale ? g->scale[c->d.part[k].scale_per_head ? h : 0] : 1.0f;
    for (uint32_t i = 0; i < g->dim; i++)
        kr_store(dst + (size_t)i * g->d_elem, g->ds,
                 kr_convert(kr_load(src + (size_t)i * g->ss, g->ss), g->st, g->dt, g->scale != NULL,
                            scale));
}

/* Every entry a move of the call writes (valid pairs of valid lists), in
 * @p dest. */
static void mark_move_dests(const cw_case *c, uint8_t *dest)
{
    const kve_cache_write_desc *d = &c->d;
    if (!d->moves || !d->n_moves || c->bad)
        return;
    for (uint32_t i = 0; i < d->n_move_rows; i++) {
        int32_t row = c->move_row ? c->move_row[i] : (int32_t)i;
        uint32_t any = 0;
        for (uint32_t h = 0; h < d->n_heads; h++)
            any |= d->n_moves[i * d->moves_stride_row + h * d->moves_stride_head];
        if (!any)
            continue; /* a padding move row: nothing moves, its row is not read */
        if (d->pages.kind != KVE_PAGES_FLAT && (row < 0 || (uint32_t)row >= d->pages.n_rows))
            return;
        for (uint32_t h = 0; h < d->n_heads; h++) {
            size_t l = i * d->moves_stride_row + h * d->moves_stride_head;
            for (uint32_t k = 0; k < d->n_moves[l] && k < d->max_moves; k++) {
                const int32_t *pair = c->moves + 2 * (l * d->max_moves + k);
                int64_t pd = ref_page(c, row, pair[1]);
                if (pd >= 0)
                    dest[entry_index(c, pd, pair[1], h)] = 1;
            }
        }
    }
}

/* The reference write, and its verdict on every row, slot and page. */
void reference_write(cw_case *c)
{
    const kve_cache_write_desc *d = &c->d;
    size_t H = d->n_heads, n_entries = c->n_entries = (size_t)d->pages.n_pages * d->pages.page_size * H;
    uint8_t *hit = (uint8_t *)calloc(n_entries + 1, 1);
    c->amb = (uint8_t *)calloc(n_entries + 1, 1);
    uint8_t *dest = (uint8_t *)calloc(n_entries + 1, 1); /* every entry the call writes */
    size_t *from = d->src_slots ? (size_t *)malloc((d->n_tokens * H + 1) * 2 * sizeof *from) : NULL;
    size_t n_from = 0;
    reference_moves(c, hit, n_entries);
    mark_move_dests(c, dest);
    for (size_t t = 0; t < d->n_tokens && !c->bad; t++) {
        int32_t row = c->token_row[t];
        int padding = 1; /* every slot -1: vLLM's padding, whose row is never read */
        for (size_t h = 0; h < H; h++) {
            size_t at = t * d->slots_stride_token + h * d->slots_stride_head;
            padding &= c->slots[at] == -1; /* a -1 source skips the write, not the checks */
        }
        if (padding)
            continue;
        if (row < 0 || (uint32_t)row >= d->pages.n_rows) {
            c->bad = 1;
            break;
        }
        for (size_t h = 0; h < H && !c->bad; h++) {
            int64_t s = c->slots[t * d->slots_stride_token + h * d->slots_stride_head];
            if (s == -1)
                continue; /* -1 in slots: the entry is skipped, unread */
            int64_t page = ref_page(c, row, s);
            if (page < 0) {
                c->bad = 1;
                break;
            }
            if (d->src_slots &&
                c->src_slots[t * d->slots_stride_token + h * d->slots_stride_head] == -1)
                continue; /* -1 in src_slots: checked as above, not written */
            size_t e = entry_index(c, page, s, h);
            if (d->src_slots) { /* the entry's bytes from the row's own slot, as stored */
                int64_t f = c->src_slots[t * d->slots_stride_token + h * d->slots_stride_head];
                int64_t fp = ref_page(c, row, f);
                if (fp < 0) {
                    c->bad = 1;
                    break;
                }
                c->amb[e] = hit[e];
                hit[e] = 1;
                dest[e] = 1;
                from[2 * n_from] = entry_index(c, fp, f, h);
                from[2 * n_from++ + 1] = e;
                for (uint32_t k = 0; k < d->n_caches; k++)
                    copy_entry(&c->g[k], c->ref[k] + entry_at(c, k, page, s, h),
                               c->before[k] + entry_at(c, k, fp, f, h));
                continue;
            }
            c->amb[e] = hit[e]; /* a write replaces a move; two tokens' order is open */
            hit[e] = 1;
            dest[e] = 1;
            for (uint32_t k = 0; k < d->n_caches; k++)
                reference_entry(c, k, t, h, entry_at(c, k, page, s, h));
        }
    }
    /* @pre: a source slot the call also writes leaves its copy's bytes open */
    for (size_t x = 0; x < n_from; x++)
        c->amb[from[2 * x + 1]] |= dest[from[2 * x]];
    free(from);
    free(dest);
    free(hit);
}

/* The library's answer against the reference's verdicts and bytes (every
 * byte but those of entries two tokens wrote). */
void check_write(cw_case *c, kve_status st)
{
    /* checked even when nothing is written (issue 36) */
    FZ_CHECK(st != KVE_OK || !c->dst_overlap,
             "destination strides with overlapping entries or elements were accepted");
    if (c->misaligned)
        FZ_CHECK(st != KVE_OK, "a base or stride not a multiple of its element size was accepted");
    if (c->refuse)
        FZ_CHECK(st != KVE_OK, "slots or move lists past SIZE_MAX bytes, or an indptr not from 0 "
                               "or decreasing, were accepted");
    if (!c->unsure) {
        if (c->bad)
            FZ_CHECK(st != KVE_OK, "an invalid write was accepted");
        else if (c->exact && !c->dst_overlap)
            FZ_CHECK(st == KVE_OK, "a valid write was rejected: %s", kve_status_string(st));
    }
    if (st != KVE_OK) {
        FZ_CHECK_ERROR_MESSAGE(st);
        for (uint32_t k = 0; k < c->d.n_caches; k++)
            FZ_CHECK(!memcmp(c->before[k], c->dst[k], dst_len(c, k)),
                     "an error (%s) wrote cache %u", kve_status_string(st), k);
    }
    if (st != KVE_OK || c->bad)
        return;
    /* every cache's open entries first: cache 1 may lie inside cache 0's tensor */
    for (uint32_t k = 0; k < c->d.n_caches; k++)
        for (size_t e = 0; e < c->n_entries; e++)
            if (c->amb[e]) {
                size_t h = e % c->d.n_heads, ps = c->d.pages.page_size;
                size_t at = entry_at(c, k, (int64_t)(e / c->d.n_heads / ps),
                                     (int64_t)(e / c->d.n_heads % ps), h);
                copy_entry(&c->g[k], c->ref[k] + at, c->dst[k] + at);
            }
    for (uint32_t k = 0; k < c->d.n_caches; k++)
        if (memcmp(c->ref[k], c->dst[k], dst_len(c, k))) {
            size_t x = 0;
            while (c->ref[k][x] == c->dst[k][x])
                x++;
            FZ_FAIL("cache %u differs from the reference write at byte %zu: 0x%02x, want "
                    "0x%02x (types %d -> %d, convert %u, dim %u)",
                    k, x, c->dst[k][x], c->ref[k][x], (int)c->g[k].st, (int)c->g[k].dt,
                    c->d.part[k].convert, c->g[k].dim);
        }
}
