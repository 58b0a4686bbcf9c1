/*
 * fuzz_cache_write_parts.c — fuzz_cache_write's per-cache parts
 * (kve_cache_part): their decoding from the input's last bytes, each
 * cache's geometry resolved as the header says with the verdict on the
 * parts, and the converting sources' edge values.
 */
#include "fuzz_cache_write.h"
#include "../state/kve_convert_ref.h"

/* An element type: mostly a float type, sometimes raw bytes, rarely no
 * kve_dtype at all. */
static kve_dtype pick_dtype(fz_bytes *b)
{
    uint8_t sel = fz_u8(b);
    if (sel < 224)
        return (kve_dtype)(1 + fz_below(b, 5));
    if (sel < 250)
        return KVE_DTYPE_RAW;
    static const uint32_t bad[] = {6, 7, 0x7fffffffu, 0xffffffffu};
    return (kve_dtype)bad[sel & 3];
}

/* A part's own byte stride: 0 (the desc-wide one, else the dense one),
 * dense + whole elements, rarely dense + bytes (misaligned) or shrunk. */
static size_t pick_part_stride(fz_bytes *b, size_t dense, size_t unit)
{
    uint8_t sel = fz_u8(b);
    if (sel < 64)
        return 0;
    if (sel < 240)
        return dense + unit * fz_below(b, 3);
    if (sel < 248)
        return dense + fz_below(b, 4);
    return fz_below(b, (uint32_t)dense + 1);
}

/* A scale: ordinary values, random ones of either sign, and the edges the
 * header's formula (an IEEE division) decides: 0, -0, NaN, inf, subnormal. */
static float pick_scale(fz_bytes *b)
{
    uint8_t sel = fz_u8(b);
    static const float plain[8] = {1.0f, 0.5f, 2.0f, 0.37f, 3.0f, 1.0f / 1024, 0.0125f, 1.0f / 3};
    if (sel < 160)
        return plain[fz_below(b, 8)];
    if (sel < 208)
        return kr_f32((fz_u32(b) & 0x807fffffu) | ((118u + fz_below(b, 20)) << 23));
    static const uint32_t edge[16] = {0x00000000u, 0x80000000u, 0xbf800000u, 0xbf000000u,
                                      0x7fc00000u, 0xffc00000u, 0x7f800000u, 0xff800000u,
                                      0x00000001u, 0x7f7fffffu, 0x0da24260u, 0x7149f2cau,
                                      0x7fa00001u, 0xc0000000u, 0x00800000u, 0x477fe000u};
    return kr_f32(edge[fz_below(b, 16)]);
}

/* Parts (decoded last; none once the input runs out, and none for about
 * half the inputs): per cache a zeroed part, or types (mostly a valid
 * pair), convert, dim, its own strides, a scale; entry_bytes sometimes 0
 * after all (valid when every part sets dim). Geometry is resolved after. */
void decode_parts(fz_bytes *in, cw_case *c)
{
    kve_cache_write_desc *d = &c->d;
    uint32_t H = d->n_heads;
    if (fz_u8(in) < 128)
        return;
    c->has_parts = 1;
    int all_dims = 1;
    for (uint32_t k = 0; k < d->n_caches; k++) {
        kve_cache_part *p = &d->part[k];
        if (fz_u8(in) < 32) { /* zeroed: desc-wide entry and strides, bytes */
            all_dims = 0;
            continue;
        }
        p->src_dtype = pick_dtype(in);
        p->dst_dtype = fz_u8(in) < 64 ? p->src_dtype : pick_dtype(in);
        int raw = p->src_dtype == KVE_DTYPE_RAW || p->dst_dtype == KVE_DTYPE_RAW;
        uint8_t cs = fz_u8(in);
        uint32_t natural = !raw && (p->src_dtype != p->dst_dtype || (cs & 1));
        static const uint32_t bad_convert[3] = {2, 3, 0xffffffffu};
        p->convert = cs < 250 ? natural : cs < 253 ? !natural : bad_convert[cs - 253];
        p->dim = fz_u8(in) < 96 ? 0 : 1 + fz_below(in, 8);
        all_dims &= p->dim != 0;
        uint32_t ss = kr_size(p->src_dtype), ds = kr_size(p->dst_dtype);
        /* sizes as a valid part would have them (an invalid one is refused before use) */
        size_t dim = p->dim ? p->dim : d->entry_bytes / ds;
        size_t se = dim * ss, de = dim * ds;
        if (fz_u8(in) >= 144) { /* its own strides, each nested on the resolved inner ones */
            int nhd = d->layout == KVE_LAYOUT_NHD;
            size_t n_inner = nhd ? H : d->pages.page_size, n_mid = nhd ? d->pages.page_size : H;
            p->src_stride_head = pick_part_stride(in, se, ss);
            size_t sh = p->src_stride_head   ? p->src_stride_head
                        : d->src_stride_head ? d->src_stride_head
                                             : se;
            p->src_stride_token = pick_part_stride(in, (H - 1) * sh + se, ss);
            size_t *st_inner = nhd ? &p->dst_stride_head : &p->dst_stride_slot;
            size_t *st_mid = nhd ? &p->dst_stride_slot : &p->dst_stride_head;
            size_t d_inner = nhd ? d->dst_stride_head : d->dst_stride_slot;
            size_t d_mid = nhd ? d->dst_stride_slot : d->dst_stride_head;
            *st_inner = pick_part_stride(in, de, ds);
            size_t vi = *st_inner ? *st_inner : d_inner ? d_inner : de;
            *st_mid = pick_part_stride(in, (n_inner - 1) * vi + de, ds);
            size_t vm = *st_mid ? *st_mid : d_mid ? d_mid : n_inner * de;
            p->dst_stride_page =
                pick_part_stride(in, (n_mid - 1) * vm + (n_inner - 1) * vi + de, ds);
        }
        int fp8 = p->dst_dtype == KVE_DTYPE_FP8_E4M3 || p->dst_dtype == KVE_DTYPE_FP8_E5M2;
        uint8_t sc = fz_u8(in);
        uint32_t per_head = fz_u8(in) & 1;
        if (p->convert == 1 && fp8 ? sc >= 64 : sc >= 232) {
            uint32_t n = per_head ? H : 1;
            float *scale = c->scale[k] = (float *)fz_alloc(n * sizeof(float), 0);
            for (uint32_t h = 0; h < n; h++)
                scale[h] = pick_scale(in);
            p->scale = scale;
        }
        uint8_t ph = fz_u8(in);
        p->scale_per_head = ph < 250 ? per_head : ph < 253 ? 2 : 0xffffffffu;
    }
    if (fz_u8(in) >= (all_dims ? 160 : 250))
        d->entry_bytes = 0;
}

/* Each cache's part resolved as the header says, and the verdict on the
 * parts (kve_cache_part, kve_check_part's rules as documented): known
 * types, convert 0 or 1, equal types without conversion, no raw bytes to
 * convert, a scale only to convert to fp8, scale_per_head 0 or 1, and
 * without dim a whole number of the cache's elements in entry_bytes >= 1. */
void resolve_parts(cw_case *c)
{
    kve_cache_write_desc *d = &c->d;
    size_t H = d->n_heads, ps = d->pages.page_size;
    int nhd = d->layout == KVE_LAYOUT_NHD;
    for (uint32_t k = 0; k < d->n_caches; k++) {
        const kve_cache_part *p = &d->part[k];
        cw_cache *g = &c->g[k];
        int st_ok = (uint32_t)p->src_dtype <= KVE_DTYPE_FP8_E5M2,
            dt_ok = (uint32_t)p->dst_dtype <= KVE_DTYPE_FP8_E5M2;
        g->st = st_ok ? p->src_dtype : KVE_DTYPE_RAW;
        g->dt = dt_ok ? p->dst_dtype : KVE_DTYPE_RAW;
        g->ss = kr_size(g->st);
        g->ds = kr_size(g->dt);
        int raw = g->st == KVE_DTYPE_RAW || g->dt == KVE_DTYPE_RAW;
        int fp8 = g->dt == KVE_DTYPE_FP8_E4M3 || g->dt == KVE_DTYPE_FP8_E5M2;
        c->bad |= !st_ok || !dt_ok || p->convert > 1 || (!p->convert && g->st != g->dt) ||
                  (p->convert && raw) || (p->scale && (p->convert != 1 || !fp8)) ||
                  p->scale_per_head > 1 ||
                  (!p->dim && (!d->entry_bytes || d->entry_bytes % g->ds));
        g->conv = p->convert == 1;
        g->dim = p->dim ? p->dim : (uint32_t)(d->entry_bytes / g->ds);
        g->scale = p->scale;
        g->se = (size_t)g->dim * g->ss;
        g->de = (size_t)g->dim * g->ds;
#define CW_OR(a, b) ((a) ? (a) : (b))
        g->s_head = CW_OR(p->src_stride_head, CW_OR(d->src_stride_head, g->se));
        g->s_tok = CW_OR(p->src_stride_token, CW_OR(d->src_stride_token, H * g->se));
        g->d_head = CW_OR(p->dst_stride_head, CW_OR(d->dst_stride_head, nhd ? g->de : ps * g->de));
        g->d_slot = CW_OR(p->dst_stride_slot, CW_OR(d->dst_stride_slot, nhd ? H * g->de : g->de));
        g->d_page = CW_OR(p->dst_stride_page, CW_OR(d->dst_stride_page, ps * H * g->de));
        g->d_elem = CW_OR(p->dst_stride_elem, g->ds); /* no desc-wide one */
#undef CW_OR
        /* an entry's elements: dim of ds bytes, d_elem apart (none for dim 0) */
        g->e_span = g->dim ? (g->dim - 1) * g->d_elem + g->ds : 0;
        size_t T = d->n_tokens;
        g->src_span = T ? (T - 1) * g->s_tok + (H - 1) * g->s_head + g->se : 0;
        g->dst_span = (d->pages.n_pages - 1) * g->d_page + (ps - 1) * g->d_slot +
                      (H - 1) * g->d_head + g->e_span;
    }
}

/* Sources of converting caches: besides the seed's random bits (mostly
 * NaN, inf or out of every narrow format's range for f32 and bf16), values
 * near the narrow formats' ranges, and exact ties of their roundings. The
 * choice and its seed are read here, where the harness always read them;
 * style_sources applies them once the sources are filled. */
void decode_style(fz_bytes *in, cw_case *c)
{
    if (!c->has_parts || !(fz_u8(in) & 1))
        return;
    c->styled = 1;
    c->style_rng = fz_u64(in);
}

void style_sources(cw_case *c)
{
    if (!c->styled)
        return;
    uint64_t rng = c->style_rng;
    static const uint32_t tie[4] = {13, 16, 20, 21}; /* f16, bf16, e4m3, e5m2 from f32 */
    for (uint32_t k = 0; k < c->d.n_caches; k++) {
        const cw_cache *g = &c->g[k];
        if (!g->conv || (g->st != KVE_DTYPE_F32 && g->st != KVE_DTYPE_BF16))
            continue;
        for (size_t i = 0; i + g->ss <= g->src_span; i += g->ss) {
            uint64_t r = fz_mix(&rng);
            uint32_t m = (uint32_t)r & 0x7fffffu, e = 127u - 30 + (uint32_t)((r >> 23) % 48);
            if ((r >> 40) % 4 == 0) {
                uint32_t b = tie[(r >> 42) & 3];
                m = (m & ~((1u << b) - 1)) | (1u << (b - 1));
            }
            if ((r >> 44) % 16 == 0)
                e = (uint32_t)((r >> 48) % 3); /* binary32 subnormals and the smallest normals */
            uint32_t v = (uint32_t)(r >> 63) << 31 | e << 23 | m;
            kr_store(c->src[k] + i, g->ss, g->st == KVE_DTYPE_F32 ? v : v >> 16);
        }
    }
}

/* A destination dim's padding past the span inside it, in elements: mostly
 * none, a few, or as much again (room for a second cache's block beside
 * this one, as vLLM's CPU cache keeps V beside the transposed K). */
static size_t pick_pad(fz_bytes *b, size_t span, size_t ds)
{
    uint8_t sel = fz_u8(b);
    if (sel < 176)
        return 0;
    if (sel < 232)
        return ds * (1 + fz_below(b, 2));
    return span;
}

/* All four destination strides (page, slot, head, elem: @p st, extents
 * @p ext), nested inner to outer in @p order: each steps past the span of
 * those inside it (from one element of @p ds bytes), padded now and then. */
static void nest_strides(fz_bytes *in, size_t *st, const size_t *ext, const int *order, size_t ds)
{
    size_t span = ds;
    for (int n = 0; n < 4; n++) {
        int i = order[n];
        st[i] = span + pick_pad(in, span, ds);
        span += (ext[i] - 1) * st[i];
    }
}

/* Element strides (kve_cache_part.dst_stride_elem), read from the input's
 * last bytes so that inputs made before they were drawn decode as they
 * did (an input that runs out draws none). Per cache (any part, a zeroed
 * one too: raw bytes, each byte an element): mostly vLLM's CPU layout (K
 * transposed in a block: slot stride one element, elem stride page_size
 * elements, the head's block, perhaps with room for V beside it, then the
 * page; or head outside page), else the four dims nested in any order, an
 * elem stride past the whole (page, slot, head) lattice (one plane per
 * element) or a few elements on the desc's own strides (mostly entries that
 * interleave or overlap), or a nested layout broken: one stride shrunk
 * (overlap) or off by bytes (misaligned). Now and then a page, slot or head
 * stride is left 0 (desc-wide or dense), and an elem stride of one element
 * written 0. Each cache resolved again after. */
void decode_elem_strides(fz_bytes *in, cw_case *c)
{
    kve_cache_write_desc *d = &c->d;
    if (fz_u8(in) < 64)
        return;
    enum { PAGE, SLOT, HEAD, ELEM };
    for (uint32_t k = 0; k < d->n_caches; k++) {
        kve_cache_part *p = &d->part[k];
        const cw_cache *g = &c->g[k];
        size_t ds = g->ds;
        size_t ext[4] = {d->pages.n_pages, d->pages.page_size, d->n_heads, g->dim ? g->dim : 1};
        size_t st[4] = {g->d_page, g->d_slot, g->d_head, g->d_elem};
        uint8_t sel = fz_u8(in);
        if (sel < 40)
            continue;
        if (sel < 190) {
            int order[4] = {SLOT, ELEM, HEAD, PAGE};
            if (sel < 150) { /* vLLM's CPU layout: slot one element, elem page_size */
                if (fz_u8(in) >= 224)
                    order[2] = PAGE, order[3] = HEAD;
            } else { /* any order */
                uint32_t perm = fz_below(in, 24);
                int left[4] = {PAGE, SLOT, HEAD, ELEM};
                for (int n = 0, m = 4; n < 4; n++, m--) {
                    int j = (int)(perm % (uint32_t)m);
                    perm /= (uint32_t)m;
                    order[n] = left[j];
                    left[j] = left[m - 1];
                }
            }
            nest_strides(in, st, ext, order, ds);
            uint8_t brk = fz_u8(in);
            if (brk >= 216) { /* broken: a dim that matters shrunk, or misaligned */
                int i = (int)fz_below(in, 4);
                if (brk < 240 || ds == 1)
                    st[i] = ds * fz_below(in, (uint32_t)(st[i] / ds)); /* 0: its default */
                else
                    st[i] += 1 + fz_below(in, ds - 1);
            }
        } else if (sel < 210) { /* elem past the lattice, one plane per element */
            st[ELEM] = (ext[PAGE] - 1) * st[PAGE] + (ext[SLOT] - 1) * st[SLOT] +
                       (ext[HEAD] - 1) * st[HEAD] + ds;
            st[ELEM] += pick_pad(in, st[ELEM], ds);
        } else if (sel < 240) { /* a few elements on the desc's own strides */
            st[ELEM] = ds * (1 + fz_below(in, 2 * (uint32_t)ext[SLOT] + 1));
        } else { /* misaligned, or under one element */
            st[ELEM] = ds > 1 ? ds * fz_below(in, 9) + 1 + fz_below(in, ds - 1) : 0;
        }
        uint8_t z = fz_u8(in);
        p->dst_stride_page = st[PAGE];
        p->dst_stride_slot = st[SLOT];
        p->dst_stride_head = st[HEAD];
        p->dst_stride_elem = st[ELEM] == ds && (z & 1) ? 0 : st[ELEM];
        if (z >= 224) /* one stride from the desc-wide value or the dense one */
            *(z & 2 ? &p->dst_stride_head : z & 4 ? &p->dst_stride_slot : &p->dst_stride_page) = 0;
    }
    resolve_parts(c);
}

size_t dst_len(const cw_case *c, uint32_t k)
{
    if (!c->shared)
        return c->g[k].dst_span;
    return k == 0 ? c->shared_len : 0;
}

/* Now and then (two caches; the input's last bytes, after the element
 * strides) both caches in one tensor, cache 1 at dst[0] + shared_off:
 * vLLM's CPU layout (docs/INTEGRATION.md: in each (page, head) block K
 * transposed, then V, both with the tensor's page and head strides; checked
 * block by block, so accepted), now and then broken (V one element early,
 * or the head's block too short: overlap); or cache 1 with cache 0's
 * strides (one tensor, checked entry by entry), at any element offset, or
 * FlashInfer's [pages, 2, ...] (page stride doubled, V half a page on);
 * or anywhere in or just past cache 0 with strides of its own, where only
 * the overlap (brute force) is asserted. An offset not a multiple of
 * cache 1's element size makes a misaligned base. Resolved again after. */
void decode_shared(fz_bytes *in, cw_case *c)
{
    kve_cache_write_desc *d = &c->d;
    if (d->n_caches != 2 || fz_u8(in) < 128)
        return;
    const cw_cache *g0 = &c->g[0], *g1 = &c->g[1];
    kve_cache_part *p0 = &d->part[0], *p1 = &d->part[1];
    size_t ds0 = g0->ds, ds1 = g1->ds, ps = d->pages.page_size, H = d->n_heads;
    uint8_t sel = fz_u8(in);
    c->shared = 1;
    int vllm = sel < 112 && ds0 == ds1 && g0->dim == g1->dim && g0->dim;
    if (vllm) {
        size_t D = g0->dim, ds = ds0, blk = ps * D * ds;
        size_t head = 2 * blk + pick_pad(in, 2 * blk, ds), page;
        if (fz_u8(in) < 224) /* page outside head (vLLM's) */
            page = H * head + pick_pad(in, H * head, ds);
        else { /* head outside page */
            page = head;
            head = d->pages.n_pages * page + pick_pad(in, d->pages.n_pages * page, ds);
        }
        uint8_t z = fz_u8(in);
        p0->dst_stride_page = p1->dst_stride_page = page;
        p0->dst_stride_head = p1->dst_stride_head = head;
        p0->dst_stride_slot = ds;     /* K: [D][page_size] */
        p0->dst_stride_elem = z & 1 && ps == 1 ? 0 : ps * ds;
        p1->dst_stride_slot = D * ds; /* V: [page_size][D] */
        p1->dst_stride_elem = z & 2 ? 0 : ds;
        c->shared_off = blk;
        c->shared_doc = 1;
        uint8_t brk = fz_u8(in);
        if (brk >= 232) { /* V one element early, or a block too short for K and V */
            c->shared_doc = 0;
            if (brk & 1)
                c->shared_off = blk - ds;
            else
                *(page < head ? &p0->dst_stride_page : &p0->dst_stride_head) =
                    *(page < head ? &p1->dst_stride_page : &p1->dst_stride_head) =
                        2 * blk - ds * (1 + fz_below(in, 2));
        }
    } else if (sel < 192) { /* cache 1 with cache 0's strides */
        p1->dst_stride_page = g0->d_page;
        p1->dst_stride_slot = g0->d_slot;
        p1->dst_stride_head = g0->d_head;
        p1->dst_stride_elem = g0->d_elem;
        if (sel < 144) { /* FlashInfer's [pages, 2, ...]: V half a page on */
            p0->dst_stride_page = p1->dst_stride_page = 2 * g0->d_page;
            c->shared_off = g0->d_page;
        } else
            c->shared_off = ds1 * fz_below(in, (uint32_t)(g0->dst_span / ds1 + 1));
        if (fz_u8(in) >= 240)
            c->shared_off += 1 + fz_below(in, 3);
        c->shared_doc = 1; /* if the dims are equal too: below */
    } else {
        c->shared_off = fz_below(in, (uint32_t)(g0->dst_span + 2 * ds1));
        if (fz_u8(in) < 192)
            c->shared_off -= c->shared_off % ds1;
    }
    resolve_parts(c);
    c->shared_doc &= vllm || (g0->dim == g1->dim && g0->d_page == g1->d_page &&
                              g0->d_slot == g1->d_slot && g0->d_head == g1->d_head &&
                              g0->d_elem == g1->d_elem);
    size_t end = c->shared_off + g1->dst_span;
    c->shared_len = end > g0->dst_span ? end : g0->dst_span;
}
