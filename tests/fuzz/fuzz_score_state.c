/*
 * fuzz_score_state.c — the fuzz_score harness's part on kve_state_score: a
 * small KVE_SCORED state (1-3 rows, 1-2 layers and heads, shared heads or
 * layers, a NONE, block-table or flat key cache, sometimes a slot or page
 * short) driven by appends; each step scores one table layer (exactly
 * sized, bad rows, layers, strides and NULLs sometimes) and must write what
 * kve_score writes over the same tables, rows and keys, then scores every
 * table layer and appends with those scores. kve_state_score_device (issue
 * 39) takes the same calls and the planned append (kve_state_append_device)
 * half the appends.
 */
#include <math.h>

#include "fuzz_score.h"

/* The header's timing: rounds a row of capacity @p c with @p v valid slots
 * runs over @p n new tokens (a token that finds it full first evicts r),
 * and the tokens the call brings before the first. */
static uint32_t fz_rounds(uint32_t c, uint32_t v, uint32_t n, uint32_t r, uint32_t *before)
{
    uint32_t rounds = 0;
    *before = c - v;
    for (uint32_t i = 0; i < n; i++) {
        if (v == c) {
            rounds++;
            v = c - r;
        }
        v++;
    }
    return rounds;
}

typedef struct {
    kve_state *st;
    kve_state_layout lay;
    kve_schedule sch;
    uint32_t n_heads;
    kve_score_desc d;
    void *keys;
    int32_t *blocks;
    float *q_mean, *q_abs;
    uint32_t score_group; /* desc.score_group resolved: 0 is 1 for a scored state */
} fz_scored_state;

/* Issue 46 item 3: kve_state_score_device scores a group up to the state's
 * desc.score_group (its scratch sized at creation), and refuses more. */
static int fz_group_fits(const fz_scored_state *s, const kve_score_desc *d)
{
    return d->scorer != KVE_SCORER_TRIATTENTION || d->tri.group <= s->score_group;
}

/* The scored state of a few rows, layers and heads the input asks for,
 * created; its desc, for the sizes the key cache needs. */
static kve_state_desc fz_state_create(fz_bytes *in, kve_context *ctx, fz_scored_state *s,
                                      uint64_t *mix, uint8_t go)
{
    kve_state_desc sd;
    memset(&sd, 0, sizeof sd);
    sd.schedule.seed = fz_mix(mix);
    sd.schedule.flags = KVE_SCORED | (go & 1 ? KVE_SHARED_HEADS : 0) | (go & 2 ? KVE_SHARED_LAYERS : 0);
    sd.schedule.budget = fz_below(in, 7);
    sd.schedule.window = fz_below(in, 5);
    sd.schedule.interval = 1 + fz_below(in, 3);
    sd.max_seqs = 1 + fz_below(in, 3);
    sd.n_layers = 1 + fz_below(in, 2);
    sd.n_heads = 1 + fz_below(in, 2);
    uint32_t pw = 5 + sd.schedule.window; /* prompts of at most 5 tokens */
    sd.max_slots = (sd.schedule.budget > pw ? sd.schedule.budget : pw) + sd.schedule.interval;
    sd.score_group = (uint32_t)(fz_mix(mix) % 3); /* TriAttention's group below: 1 or 2 */
    s->score_group = sd.score_group ? sd.score_group : 1;
    kve_status st = kve_state_create(ctx, &sd, NULL, 0, &s->st);
    FZ_CHECK(st == KVE_OK, "kve_state_create of a valid scored state: %s", kve_status_string(st));
    FZ_CHECK(kve_state_get_layout(s->st, &s->lay) == KVE_OK, "kve_state_get_layout");
    s->sch = sd.schedule;
    s->n_heads = sd.n_heads;
    return sd;
}

/* A key cache holding max_seqs page-table rows of max_slots slots
 * (sometimes one slot or page short, sometimes a bad page id). */
static void fz_state_key_cache(fz_bytes *in, fz_scored_state *s, const kve_state_desc *sd,
                               uint64_t *mix)
{
    kve_key_cache *k = &s->d.keys;
    static const kve_dtype types[] = {KVE_DTYPE_F32, KVE_DTYPE_F16, KVE_DTYPE_BF16};
    k->dtype = types[fz_below(in, 3)];
    k->head_dim = 2 * (1 + fz_below(in, 4));
    k->n_heads = sd->n_heads + (fz_u8(in) > 250); /* not the state's: the header does not say */
    k->layout = (kve_cache_layout)fz_below(in, 2);
    uint8_t pt = fz_u8(in);
    uint32_t short_by = pt >= 240; /* a slot or a page short: some candidates not in the cache */
    k->pages.n_rows = sd->max_seqs;
    if (pt % 3 == 1) {
        k->pages.kind = KVE_PAGES_BLOCK_TABLE;
        k->pages.page_size = 1 + fz_below(in, 4);
        k->pages.blocks_per_row = (sd->max_slots + k->pages.page_size - 1) / k->pages.page_size - short_by;
        if (!k->pages.blocks_per_row)
            k->pages.blocks_per_row = 1;
        k->pages.n_pages = k->pages.n_rows * k->pages.blocks_per_row;
        s->blocks = (int32_t *)fz_alloc((size_t)k->pages.n_pages * 4, 0);
        for (uint32_t i = 0; i < k->pages.n_pages; i++)
            s->blocks[i] = (int32_t)(fz_mix(mix) % k->pages.n_pages);
        if (pt >= 230 && pt < 240)
            s->blocks[fz_below(in, k->pages.n_pages)] = (int32_t)k->pages.n_pages; /* not a page */
        k->pages.block_table = s->blocks;
    } else {
        k->pages.kind = pt % 3 ? KVE_PAGES_FLAT : KVE_PAGES_NONE;
        k->pages.page_size = sd->max_slots - (short_by && sd->max_slots > 1);
        k->pages.n_pages = k->pages.n_rows;
    }
    size_t es = fz_dtype_size(k->dtype), bytes = (size_t)k->pages.n_pages * k->pages.page_size * k->n_heads *
                                                   k->head_dim * es;
    s->keys = fz_alloc(bytes, 0);
    for (size_t i = 0; i < bytes; i++)
        ((uint8_t *)s->keys)[i] =
            (uint8_t)(i % es == es - 1 ? 0x3c ^ (fz_mix(mix) & 0x81) : fz_mix(mix));
    k->base = s->keys;
}

/* TriAttention statistics of modest values for every query head. */
static void fz_state_tri(fz_bytes *in, fz_scored_state *s, uint64_t *mix)
{
    const kve_key_cache *k = &s->d.keys;
    kve_triattention_params *t = &s->d.tri;
    t->group = 1 + fz_below(in, 2);
    size_t nq = (size_t)k->n_heads * t->group, nf = k->head_dim / 2;
    s->q_mean = (float *)fz_alloc(nq * nf * 8, 0);
    s->q_abs = (float *)fz_alloc(nq * nf * 4, 0);
    for (size_t i = 0; i < nq * nf; i++) {
        s->q_mean[2 * i] = (float)((int)(fz_mix(mix) % 257) - 128) / 64.0f;
        s->q_mean[2 * i + 1] = (float)((int)(fz_mix(mix) % 257) - 128) / 64.0f;
        s->q_abs[i] = (float)(fz_mix(mix) % 257) / 64.0f;
    }
    t->q_mean = s->q_mean;
    t->q_abs_mean = s->q_abs;
    t->rope_theta = 10000.0;
}

/* A scored state, its key cache and scorer, and some rows admitted. 0 when
 * the input asks for none. */
static int fz_state_setup(fz_bytes *in, kve_context *ctx, fz_scored_state *s, uint64_t *mix)
{
    uint8_t go = fz_u8(in);
    if (go < 64)
        return 0;
    kve_state_desc sd = fz_state_create(in, ctx, s, mix, go);
    kve_score_desc *d = &s->d;
    d->scorer = go & 4 ? KVE_SCORER_TRIATTENTION : KVE_SCORER_KNORM;
    d->flags = fz_below(in, 4);
    d->weight = (float)fz_below(in, 3) * 0.5f;
    fz_state_key_cache(in, s, &sd, mix);
    fz_state_tri(in, s, mix);
    for (uint32_t r = 0; r < sd.max_seqs; r++)
        if (fz_u8(in) < 220) {
            kve_status st = kve_state_admit(s->st, r, 1000 + r, fz_below(in, 6));
            FZ_CHECK(st == KVE_OK, "kve_state_admit of row %u: %s", r, kve_status_string(st));
        }
    return 1;
}

static void fz_state_free(fz_scored_state *s)
{
    kve_state_destroy(s->st);
    free(s->keys);
    free(s->blocks);
    free(s->q_mean);
    free(s->q_abs);
}

/* One step's kve_state_score call as decoded: the rows (active ones, or
 * spoilt), their new tokens, the rounds due and the tokens before the
 * first, the table layer, the buffer's strides and the desc. */
typedef struct {
    kve_state_seq_info info[3];
    uint32_t rows[4], n_new[4], due[4], before[4];
    uint32_t n_call, tl, max_cap;
    uint8_t bad;          /* above 240: a bad argument (bad & 3 says which) */
    int invalid, unsure;  /* the header refuses the call; it leaves it open */
    size_t stride_t, stride_r;
    kve_score_desc d;
    int32_t cache_rows[4];
} fz_state_call;

/* 1 to 3 distinct active rows in random order; 0 when no row is active. */
static uint32_t fz_pick_rows(fz_bytes *in, const fz_scored_state *s, fz_state_call *c)
{
    uint32_t active[3], n_active = 0;
    for (uint32_t r = 0; r < s->lay.max_seqs; r++) {
        FZ_CHECK(kve_state_get_seq(s->st, r, &c->info[r]) == KVE_OK, "kve_state_get_seq");
        if (c->info[r].active)
            active[n_active++] = r;
    }
    if (!n_active)
        return 0;
    c->n_call = 1 + fz_below(in, n_active);
    for (uint32_t i = 0; i < c->n_call; i++) {
        uint32_t j = fz_below(in, n_active - i);
        c->rows[i] = active[j];
        active[j] = active[n_active - i - 1];
        active[n_active - i - 1] = c->rows[i];
    }
    return c->n_call;
}

/* The table layer, and sometimes a row twice, a free or missing row or a
 * layer past the last: the call is then invalid. */
static void fz_spoil_rows(fz_bytes *in, const fz_scored_state *s, fz_state_call *c)
{
    uint32_t max_seqs = s->lay.max_seqs, n_call = c->n_call;
    uint8_t bad = c->bad = fz_u8(in);
    c->tl = fz_below(in, s->lay.table_layers);
    if (bad <= 240)
        return;
    c->invalid = 1;
    switch (bad & 3) {
    case 0: /* twice, or no row */
        c->rows[n_call > 1 ? n_call - 1 : 0] = n_call > 1 ? c->rows[0] : max_seqs;
        break;
    case 1: { /* a free row, or none */
        c->rows[0] = max_seqs + (bad & 4);
        for (uint32_t r = 0; r < max_seqs; r++)
            if (!c->info[r].active)
                c->rows[0] = r;
        break;
    }
    case 2: c->tl = s->lay.table_layers + (bad & 4); break;
    default: break; /* a NULL, in fz_check_state_score */
    }
}

/* Each row's new tokens, the rounds they run and the tokens before the
 * first; the harness models one round at most, inside the window. */
static void fz_new_tokens(fz_bytes *in, const fz_scored_state *s, fz_state_call *c)
{
    for (uint32_t i = 0; i < c->n_call; i++) {
        const kve_state_seq_info *q = c->rows[i] < s->lay.max_seqs ? &c->info[c->rows[i]] : &c->info[0];
        c->n_new[i] = fz_u8(in) < 160 ? 1 + fz_below(in, s->sch.window + 1)
                                      : 1 + fz_below(in, q->capacity + 2);
        uint32_t k = fz_rounds(q->capacity, q->n_valid, c->n_new[i], s->sch.interval, &c->before[i]);
        c->due[i] = k;
        c->unsure |= k > 1 || (k && c->before[i] > s->sch.window);
        c->max_cap = q->capacity > c->max_cap ? q->capacity : c->max_cap;
    }
}

/* The buffer's strides (padded, sometimes below what a row needs) and the
 * desc's flags, cache rows and the fields the header says are ignored. */
static void fz_call_layout(fz_bytes *in, const fz_scored_state *s, fz_state_call *c)
{
    size_t tables = (size_t)s->lay.table_layers * s->lay.table_heads;
    uint32_t max_cap = c->max_cap;
    uint8_t sz = fz_u8(in);
    c->stride_t = max_cap + (sz & 3);
    c->stride_r = tables * c->stride_t + ((sz >> 2) & 3);
    if (sz >= 0xf0 && c->stride_t)
        c->stride_t = max_cap - 1, c->unsure = 1; /* below a row's capacity */
    if (sz >= 0xe0 && sz < 0xf0 && c->stride_r)
        c->stride_r = tables * c->stride_t - 1, c->unsure = 1;
    kve_score_desc *d = &c->d;
    *d = s->d;
    uint8_t cr = fz_u8(in);
    if (cr & 1) { /* each call row's keys in page-table row rows[i] */
        for (uint32_t i = 0; i < c->n_call; i++)
            c->cache_rows[i] = (int32_t)(c->rows[i] < s->lay.max_seqs ? c->rows[i] : 0);
        d->cache_rows = c->cache_rows;
    }
    d->flags = (d->flags & ~(uint32_t)3) | ((cr >> 1) & 3);
    /* The header: desc's heads_per_table, rows, slot_pos, scores and strides
     * are ignored (the state's and the call's are used). */
    d->heads_per_table = (cr >> 3) & 3;
    d->n_rows = cr >> 5;
    d->scores_stride_table = d->slot_pos_stride_table = (cr >> 5) & 1;
    c->unsure |= d->keys.n_heads != s->n_heads;
}

/* The extent the header lets the call write: due rows, table layer tl. */
static size_t fz_call_extent(const fz_scored_state *s, const fz_state_call *c)
{
    size_t ext = 0, th_n = s->lay.table_heads;
    for (uint32_t i = 0; i < c->n_call && !c->invalid; i++)
        if (c->due[i]) {
            size_t e = i * c->stride_r + ((size_t)(c->tl + 1) * th_n - 1) * c->stride_t +
                       c->info[c->rows[i]].capacity;
            ext = e > ext ? e : ext;
        }
    return ext;
}

/* kve_score's desc for the rows the call scores, as the header describes
 * them: the state's tables of layer tl, rows' windows less the tokens
 * before the round, round_start the triggering token, output at strides
 * @p st, @p sr. kve_state_score (@p device 0): the due rows of a valid call,
 * keys at desc.cache_rows; kve_state_score_device (1): each call row in
 * range, active, due once and within the window (padding, free rows and
 * rows past the scored rules skipped, a row listed twice scored twice), its
 * keys page-table row i. */
static kve_score_desc fz_rows_desc(const fz_scored_state *s, const fz_state_call *c, int device,
                                   size_t st, size_t sr, kve_score_row rows[4])
{
    uint32_t th_n = s->lay.table_heads, tl = c->tl;
    kve_score_desc rd = c->d;
    rd.heads_per_table = th_n == 1 ? s->n_heads : 1;
    rd.n_rows = 0;
    rd.rows = rows;
    rd.slot_pos = s->lay.slot_pos;
    rd.slot_pos_stride_table = 0;
    rd.scores_stride_table = st;
    rd.cache_rows = NULL;
    for (uint32_t i = 0; i < c->n_call && !(c->invalid && !device); i++) {
        uint32_t before = c->before[i], window = s->sch.window;
        if (device ? c->rows[i] >= s->lay.max_seqs || !c->info[c->rows[i]].active ||
                         c->due[i] != 1 || before > window
                   : !c->due[i])
            continue;
        const kve_state_seq_info *q = &c->info[c->rows[i]];
        kve_score_row *r = &rows[rd.n_rows++];
        memset(r, 0, sizeof *r);
        r->table_offset = q->table_offset + (uint64_t)tl * th_n * q->capacity;
        r->scores_offset = (uint64_t)i * sr + (uint64_t)tl * th_n * st;
        r->n_slots = q->capacity;
        r->table_stride = q->capacity;
        r->prompt_len = q->prompt_len;
        r->window = window - (before < window ? before : window);
        r->round_start = q->n_tokens + before;
        r->cache_row = c->d.cache_rows && !device ? c->d.cache_rows[i] : (int32_t)i;
    }
    return rd;
}

/* The call's arguments, one of them NULL when it is spoilt so (c->bad). */
typedef struct {
    kve_state *st;
    const uint32_t *rows, *n_new;
    const kve_score_desc *desc;
    float *buf;
} fz_state_args;

static fz_state_args fz_args_of(const fz_scored_state *s, const fz_state_call *c,
                                const kve_score_desc *desc, float *buf)
{
    fz_state_args a = {s->st, c->rows, c->n_new, desc, buf};
    uint8_t bad = c->bad;
    if (bad > 240 && (bad & 3) == 3) {
        switch ((bad >> 2) & 3) {
        case 0: a.rows = NULL; break;
        case 1: a.n_new = NULL; break;
        case 2: a.buf = NULL; break;
        default: a.desc = (bad & 16) ? NULL : a.desc, a.st = (bad & 16) ? a.st : NULL; break;
        }
    }
    return a;
}

/* The call, some argument NULL when it is spoilt so, into @p buf (@p ext
 * elements, @p was before): checked against the header, and its due rows
 * against kve_score over the same rows and keys. Returns the verdict. */
static int fz_check_state_score(kve_context *ctx, const fz_scored_state *s, const fz_state_call *c,
                                float *buf, const float *was, size_t ext)
{
    fz_state_args a = fz_args_of(s, c, &c->d, buf);
    kve_score_row sr[4];
    kve_score_desc rd = fz_rows_desc(s, c, 0, c->stride_t, c->stride_r, sr);
    int valid = c->invalid ? 0 : c->unsure ? -1 : rd.n_rows ? fz_score_valid(&rd) : 1;
    kve_status rc = kve_state_score(a.st, c->n_call, a.rows, a.n_new, c->tl, a.desc, a.buf,
                                    c->stride_r, c->stride_t);
    if (valid == 1)
        FZ_CHECK(rc == KVE_OK, "a valid kve_state_score call was refused: %s", kve_status_string(rc));
    if (valid == 0)
        FZ_CHECK(rc != KVE_OK, "an invalid kve_state_score call was accepted");
    if (rc != KVE_OK) {
        FZ_CHECK_ERROR_MESSAGE(rc);
        FZ_CHECK(memcmp(buf, was, ext * 4) == 0, "a refused kve_state_score changed the scores");
    } else if (rd.n_rows && !c->unsure) {
        float *ref = (float *)fz_dup(was, ext * 4);
        rd.scores = ref;
        kve_status rr = kve_score(ctx, &rd);
        FZ_CHECK(rr == KVE_OK, "kve_state_score accepted rows kve_score refuses: %s",
                 kve_status_string(rr));
        fz_check_result(&rd, rr, was, ext, valid);
        FZ_CHECK(memcmp(buf, ref, ext * 4) == 0,
                 "kve_state_score differs from kve_score over the same rows and keys");
        free(ref);
    } else if (!rd.n_rows) {
        FZ_CHECK(memcmp(buf, was, ext * 4) == 0, "kve_state_score wrote rows whose round is not due");
    }
    return valid;
}

/* Issue 39: kve_state_score_device over the same call (its rows, tokens,
 * layer and desc; spoilt the same way), with strides for any row (the
 * call's own ones sometimes, below max_slots; a huge scores_stride_row
 * sometimes) and desc.cache_rows NULL but sometimes: checked against the
 * header's rules, and a valid call against kve_score over the rows the
 * device scores (fz_rows_desc), bit for bit in an exactly sized buffer,
 * with the same status (kve_score's content checks); a refused call writes
 * nothing. */
static void fz_check_state_score_device(kve_context *ctx, const fz_scored_state *s,
                                        const fz_state_call *c, uint64_t *mix)
{
    size_t tables = (size_t)s->lay.table_layers * s->lay.table_heads, th_n = s->lay.table_heads;
    uint64_t v = fz_mix(mix);
    size_t st = v & 3 ? s->lay.max_slots + ((v >> 2) & 1) : c->stride_t;
    size_t sr = v & 3 ? tables * st + ((v >> 3) & 1) : c->stride_r;
    if ((v & 0x30) == 0x30 && c->n_call > 1)
        sr = fz_huge_stride((uint32_t)(v >> 8));
    kve_score_desc d = c->d;
    if ((v & 0xc0) != 0xc0)
        d.cache_rows = NULL;
    kve_score_row rows[4];
    kve_score_desc rd = fz_rows_desc(s, c, 1, st, sr, rows);
    unsigned __int128 ext = 0, span = fz_span128(c->n_call, sr, tables * st, 1);
    for (uint32_t k = 0; k < rd.n_rows; k++) {
        unsigned __int128 e = (unsigned __int128)rows[k].scores_offset + (th_n - 1) * st +
                              rows[k].n_slots;
        ext = e > ext ? e : ext;
    }
    fz_state_args a = fz_args_of(s, c, &d, NULL);
    int args_ok = a.st && a.desc && a.rows && a.n_new && (c->bad <= 240 || (c->bad & 15) != 11) &&
                  c->tl < s->lay.table_layers && d.keys.n_heads == s->n_heads && !d.cache_rows &&
                  (d.keys.pages.kind == KVE_PAGES_FLAT || d.keys.pages.n_rows >= c->n_call) &&
                  st >= s->lay.max_slots && (c->n_call < 2 || sr >= tables * st) &&
                  span * 4 <= SIZE_MAX;
    int group_only = args_ok && !fz_group_fits(s, &d); /* refused for its group alone */
    args_ok = args_ok && !group_only;
    if (ext > ((size_t)1 << 24)) { /* a huge stride with a later row due: no such buffer */
        if (args_ok)
            return;
        ext = 0, rd.n_rows = 0; /* refused: nothing written */
    }
    float *buf = (float *)fz_alloc((size_t)ext * 4, 0);
    if (!buf)
        return;
    fz_fill_scores(buf, 0, (size_t)ext, d.flags);
    float *was = (float *)fz_dup(buf, (size_t)ext * 4);
    a = fz_args_of(s, c, &d, buf);
    kve_status rc = kve_state_score_device(a.st, c->n_call, a.rows, a.n_new, c->tl, a.desc, a.buf,
                                           sr, st);
    char rc_msg[512];
    snprintf(rc_msg, sizeof rc_msg, "%s", kve_last_error());
    if (!args_ok) {
        FZ_CHECK(rc != KVE_OK, "an invalid kve_state_score_device call was accepted");
        float *ref = group_only && rd.n_rows ? (float *)fz_dup(was, (size_t)ext * 4) : NULL;
        rd.scores = ref;
        if (ref && kve_score(ctx, &rd) == KVE_OK) /* a desc kve_score takes: the group's refusal */
            FZ_CHECK(rc == KVE_ERR_RANGE && strstr(rc_msg, "desc.score_group"),
                     "a group past desc.score_group = %u: %s (%s)", s->score_group,
                     kve_status_string(rc), rc_msg);
        free(ref);
    } else {
        float *ref = (float *)fz_dup(was, (size_t)ext * 4);
        rd.scores = ref;
        kve_status rr = rd.n_rows ? kve_score(ctx, &rd) : KVE_OK;
        FZ_CHECK(rc == rr, "kve_state_score_device: %s, kve_score over its rows: %s",
                 kve_status_string(rc), kve_status_string(rr));
        FZ_CHECK(memcmp(buf, ref, (size_t)ext * 4) == 0,
                 "kve_state_score_device differs from kve_score over the rows it scores");
        free(ref);
    }
    if (rc != KVE_OK) {
        FZ_CHECK_ERROR_MESSAGE(rc);
        FZ_CHECK(memcmp(buf, was, (size_t)ext * 4) == 0,
                 "a refused kve_state_score_device changed the scores");
    }
    free(buf);
    free(was);
}

/* The rows' infos of a call, for "unchanged" and "advanced". */
static void fz_call_infos(const fz_scored_state *s, const fz_state_call *c,
                          kve_state_seq_info *info)
{
    for (uint32_t i = 0; i < c->n_call; i++)
        FZ_CHECK(kve_state_get_seq(s->st, c->rows[i], &info[i]) == KVE_OK, "get_seq");
}

/* A planned append of @p news tokens a call row, with @p scores, that
 * must be refused with KVE_ERR_INVALID naming @p why: with a mapping and
 * move lists holding a previous step's values, the refusal maps the shape
 * to -1 and empties the lists, as a device does (issue 47 item 1; issue 60
 * item 1: a NaN's refusal too), and changes no row. */
static void fz_refused_planned(const fz_scored_state *s, const fz_state_call *c,
                               const uint32_t *news, const float *scores,
                               const kve_step_buffers *out, const char *why)
{
    kve_state_seq_info before[4], after[4];
    fz_call_infos(s, c, before);
    kve_step_buffers ro = *out;
    uint32_t max_new = 0;
    uint64_t total = 0;
    for (uint32_t i = 0; i < c->n_call; i++) {
        total += news[i];
        max_new = news[i] > max_new ? news[i] : max_new;
    }
    uint64_t shape = (uint64_t)c->n_call * max_new;
    ro.scores = scores;
    ro.max_tokens = (uint32_t)(total > shape ? total : shape);
    size_t map_n = (size_t)s->lay.table_layers * ro.max_tokens * s->lay.table_heads;
    size_t lists = (size_t)s->lay.table_layers * c->n_call * s->lay.table_heads;
    FZ_CHECK(kve_state_max_moves(s->st, max_new, &ro.max_moves) == KVE_OK, "max_moves");
    ro.slot_mapping = (int64_t *)fz_alloc(map_n * 8, 0);
    ro.moves = (int32_t *)fz_alloc(lists * ro.max_moves * 8 + 8, 0);
    ro.n_moves = (uint32_t *)fz_alloc(lists * 4, 0);
    for (size_t k = 0; k < map_n; k++)
        ro.slot_mapping[k] = 5;
    for (size_t k = 0; k < lists; k++)
        ro.n_moves[k] = 1;
    kve_status rb = kve_state_append_device(s->st, c->n_call, c->rows, news, max_new, &ro);
    FZ_CHECK(rb == KVE_ERR_INVALID && strstr(kve_last_error(), why),
             "a planned append that %s: %s %s", why, kve_status_string(rb), kve_last_error());
    for (size_t k = 0; k < map_n; k++)
        FZ_CHECK(ro.slot_mapping[k] == -1, "a refused planned append (%s) left mapping entry %zu "
                 "at %lld, not -1", why, k, (long long)ro.slot_mapping[k]);
    for (size_t k = 0; k < lists; k++)
        FZ_CHECK(ro.n_moves[k] == 0, "a refused planned append (%s) left move list %zu with %u "
                 "pairs", why, k, ro.n_moves[k]);
    free(ro.slot_mapping);
    free(ro.moves);
    free(ro.n_moves);
    fz_call_infos(s, c, after);
    FZ_CHECK(memcmp(before, after, c->n_call * sizeof *after) == 0,
             "a refused planned append (%s) changed a row", why);
}

/* Issue 60 item 1: NaN over every table of the lowest due call row (a due
 * row has candidates: it evicts r of them) and over the rows that are not
 * due (never read): the planned append is refused as a NaN's. */
static void fz_nan_planned(const fz_scored_state *s, const fz_state_call *c, const float *dev,
                           size_t n_full, const kve_step_buffers *out)
{
    uint32_t due = UINT32_MAX;
    for (uint32_t i = 0; i < c->n_call && due == UINT32_MAX; i++)
        due = c->due[i] ? i : due;
    if (due == UINT32_MAX)
        return;
    float *nan_sc = (float *)fz_dup(dev, n_full * 4);
    if (!nan_sc)
        return;
    size_t sr = out->scores_stride_row, span = (size_t)s->lay.table_layers * s->lay.table_heads *
                                                   out->scores_stride_table;
    for (uint32_t i = 0; i < c->n_call; i++)
        for (size_t k = 0; (i == due || !c->due[i]) && k < span && i * sr + k < n_full; k++)
            nan_sc[i * sr + k] = NAN;
    fz_refused_planned(s, c, c->n_new, nan_sc, out, "has a NaN in out->scores at a candidate");
    free(nan_sc);
}

/* Issue 39: the scored append planned on the device (the CPU runs the
 * planner) with the scores kve_state_score_device wrote for every table
 * layer into @p dev, strides for any row: equal bit for bit to @p full,
 * kve_state_score's. A call with a row given two rounds' tokens first is
 * refused with reason 7 and changes nothing, as is one with a NaN at a due
 * row's candidates (reason 8); the call itself is accepted
 * when kve_state_append would accept it, and advances each row by its
 * tokens and its round. */
static void fz_scored_append_device(const fz_scored_state *s, const fz_state_call *c,
                                    const kve_score_desc *d, const float *full, float *dev,
                                    size_t n_full, kve_step_buffers *out, int valid, uint64_t *mix)
{
    size_t sr = out->scores_stride_row, st = out->scores_stride_table;
    for (uint32_t l = 0; l < s->lay.table_layers; l++)
        FZ_CHECK(kve_state_score_device(s->st, c->n_call, c->rows, c->n_new, l, d, dev, sr, st) ==
                     KVE_OK,
                 "kve_state_score_device of a call kve_state_score took: %s", kve_last_error());
    FZ_CHECK(memcmp(full, dev, n_full * 4) == 0,
             "kve_state_score_device differs from kve_state_score over every layer");
    uint32_t max_new = 0, news[4];
    kve_state_seq_info before[4], after[4];
    fz_call_infos(s, c, before);
    for (uint32_t i = 0; i < c->n_call; i++)
        max_new = c->n_new[i] > max_new ? c->n_new[i] : max_new;
    out->scores = dev;
    if (fz_mix(mix) & 1) { /* two rounds' tokens for row 0: refused, nothing changed */
        memcpy(news, c->n_new, sizeof news);
        news[0] = before[0].capacity + 2 * s->sch.interval;
        fz_refused_planned(s, c, news, dev, out, "would run two rounds");
    }
    if (valid == 1 && (fz_mix(mix) & 2))
        fz_nan_planned(s, c, dev, n_full, out);
    kve_status ra = kve_state_append_device(s->st, c->n_call, c->rows, c->n_new, max_new, out);
    FZ_CHECK(ra == KVE_OK || valid != 1, "the planned append of scored rows was refused: %s",
             kve_last_error());
    if (ra != KVE_OK)
        return;
    fz_call_infos(s, c, after);
    for (uint32_t i = 0; i < c->n_call; i++)
        FZ_CHECK(after[i].n_tokens == before[i].n_tokens + c->n_new[i] &&
                     after[i].round == before[i].round + c->due[i],
                 "the planned append advanced call row %u by %u tokens, %u rounds (%u, %u)", i,
                 after[i].n_tokens - before[i].n_tokens, after[i].round - before[i].round,
                 c->n_new[i], c->due[i]);
}

/* Issue 36: scores_stride_row near SIZE_MAX with a call row i >= 1 due, so
 * that row i's scores lie past SIZE_MAX bytes (by __int128, apart from the
 * library's kve_rows_span): the append is refused (KVE_ERR_OVERFLOW when the
 * call is otherwise valid) and changes nothing. */
static void fz_huge_stride_row(const fz_scored_state *s, const fz_state_call *c,
                               kve_step_buffers *out, int valid)
{
    uint32_t due[4] = {0, 0, 0, 0}, last = 0;
    if (c->n_call > 4 || kve_state_rounds_due(s->st, c->n_call, c->rows, c->n_new, due) != KVE_OK)
        return;
    for (uint32_t i = 1; i < c->n_call; i++)
        last = due[i] ? i : last;
    if (!last)
        return;
    kve_state_seq_info before, after;
    FZ_CHECK(kve_state_get_seq(s->st, c->rows[0], &before) == KVE_OK, "get_seq");
    static const size_t huge[3] = {(size_t)1 << 63, ((size_t)1 << 62) + 1, SIZE_MAX / 4};
    for (int k = 0; k < 3; k++) {
        out->scores_stride_row = huge[k];
        unsigned __int128 bytes = ((unsigned __int128)last * huge[k] + out->scores_stride_table) * 4;
        if (bytes <= SIZE_MAX)
            continue;
        kve_status ra = kve_state_append(s->st, c->n_call, c->rows, c->n_new, out);
        FZ_CHECK(ra != KVE_OK && (valid != 1 || ra == KVE_ERR_OVERFLOW),
                 "scores_stride_row = %zu with call row %u due: %s", huge[k], last,
                 kve_status_string(ra));
        FZ_CHECK_ERROR_MESSAGE(ra);
    }
    FZ_CHECK(kve_state_get_seq(s->st, c->rows[0], &after) == KVE_OK &&
                 after.n_tokens == before.n_tokens,
             "a refused append changed the row");
}

/* The append these scores are for: every table layer scored, then used
 * (planned on the device half the time: its scores laid out for any row). */
static void fz_scored_append(const fz_scored_state *s, const fz_state_call *c, int valid,
                             uint64_t *mix)
{
    size_t tables = (size_t)s->lay.table_layers * s->lay.table_heads;
    int device = (fz_mix(mix) & 1) && fz_group_fits(s, &c->d);
    uint32_t max_cap = device ? s->lay.max_slots : c->max_cap;
    size_t sr_full = tables * max_cap, n_full = c->n_call * sr_full;
    float *full = (float *)fz_alloc(n_full * 4, 0);
    if (!full)
        return;
    kve_score_desc d = c->d;
    d.flags &= ~(uint32_t)KVE_SCORE_ACCUMULATE;
    if (device) /* call row i's keys in page-table row i, as the device reads them */
        d.cache_rows = NULL;
    int all_ok = 1;
    for (uint32_t l = 0; l < s->lay.table_layers && all_ok; l++)
        all_ok = kve_state_score(s->st, c->n_call, c->rows, c->n_new, l, &d, full, sr_full,
                                 max_cap) == KVE_OK;
    if (all_ok) {
        kve_step_buffers out;
        memset(&out, 0, sizeof out);
        out.max_rows = c->n_call;
        out.scores = full;
        out.scores_stride_row = sr_full;
        out.scores_stride_table = max_cap;
        fz_huge_stride_row(s, c, &out, valid);
        out.scores_stride_row = sr_full;
        float *dev = device ? (float *)fz_alloc(n_full * 4, 0) : NULL;
        if (dev) {
            fz_scored_append_device(s, c, &d, full, dev, n_full, &out, valid, mix);
        } else {
            kve_status ra = kve_state_append(s->st, c->n_call, c->rows, c->n_new, &out);
            FZ_CHECK(ra == KVE_OK || valid != 1, "the append of scored rows was refused: %s",
                     kve_status_string(ra));
        }
        free(dev);
    }
    free(full);
}

/* One step: kve_state_score for a table layer against the header and
 * kve_score, then the scores of every table layer and the append. */
static void fz_state_step(fz_bytes *in, kve_context *ctx, fz_scored_state *s, uint64_t *mix)
{
    fz_state_call c;
    memset(&c, 0, sizeof c);
    if (!fz_pick_rows(in, s, &c))
        return;
    fz_spoil_rows(in, s, &c);
    fz_new_tokens(in, s, &c);
    fz_call_layout(in, s, &c);
    size_t ext = fz_call_extent(s, &c);
    float *buf = (float *)fz_alloc(ext * 4, 0);
    if (!buf)
        return;
    fz_fill_scores(buf, 0, ext, c.d.flags);
    float *was = (float *)fz_dup(buf, ext * 4);
    int valid = fz_check_state_score(ctx, s, &c, buf, was, ext);
    free(buf);
    free(was);
    fz_check_state_score_device(ctx, s, &c, mix);
    if (c.invalid || c.unsure)
        return;
    fz_scored_append(s, &c, valid, mix);
}

void fz_scored_state_run(fz_bytes *in, kve_context *ctx, uint64_t *mix)
{
    fz_scored_state s;
    memset(&s, 0, sizeof s);
    if (fz_state_setup(in, ctx, &s, mix)) {
        uint32_t steps = 1 + fz_below(in, 8);
        for (uint32_t i = 0; i < steps; i++)
            fz_state_step(in, ctx, &s, mix);
        fz_state_free(&s);
    }
}
