/*
 * fuzz_diff — `kvevict diff A B` (tools/cmd_diff.c) on two logs decoded
 * from the input: A's records, and B as A with fields removed, given
 * twice, positions or heads repeated, dropped or changed, digests changed,
 * lists reordered. Held against a plain model of what the usage promises
 * (issue 36): malformed input (a record with nothing to compare, a member
 * given twice, a head or an evicted position listed twice, a (seq_id,
 * round) twice) exits 2; otherwise equal (exit 0, "equal: N records")
 * exactly when every record pairs with one that has the same fields with
 * the same values, heads and positions as sets; else exit 1 with a
 * "differ:" line that names something. Issue 60: `replay --summary`'s
 * "rounds" is compared like the digests, and an unknown field (in a record
 * or a head) exits 2: no field is ignored. The command's static functions
 * are reached by including its file.
 */
#include "cli_common.c" /* tools/, on the include path */
#include "cmd_diff.c"
#include "jsonl.c"
#include "fuzz_common.h"

#include <unistd.h>

enum { FD_RECS = 4, FD_HEADS = 4, FD_POS = 8 };

typedef struct {
    uint32_t layer, head, n;
    int32_t pos[FD_POS + 4]; /* up to 3 edits repeat a position */
} fd_head;

typedef struct {
    uint64_t seq, rd, run;
    uint32_t round, n_heads, rounds;
    int has_round, has_rd, has_run, has_heads, twice; /* twice: a member given twice */
    int has_rounds, unknown; /* unknown: 1 a field diff does not know, 2 one in a head */
    fd_head heads[FD_HEADS];
} fd_rec;

typedef struct {
    fd_rec r[FD_RECS];
    uint32_t n;
} fd_log;

static void fd_decode(fz_bytes *in, fd_log *a)
{
    a->n = 1 + fz_below(in, 3);
    for (uint32_t i = 0; i < a->n; i++) {
        fd_rec *r = &a->r[i];
        uint8_t f = fz_u8(in);
        r->seq = fz_below(in, 4);
        r->has_round = f & 1;
        r->round = fz_below(in, 3);
        r->has_rd = (f >> 1) & 1;
        r->has_run = (f >> 2) & 1;
        r->has_heads = (f >> 3) & 1;
        r->has_rounds = (f >> 4) & 1;
        r->rounds = fz_below(in, 4);
        r->rd = fz_below(in, 4);
        r->run = fz_below(in, 4);
        r->n_heads = fz_below(in, FD_HEADS);
        for (uint32_t h = 0; h < r->n_heads; h++) {
            fd_head *x = &r->heads[h];
            x->layer = fz_below(in, 2);
            x->head = fz_below(in, 3);
            x->n = fz_below(in, FD_POS);
            for (uint32_t k = 0; k < x->n; k++)
                x->pos[k] = (int32_t)fz_below(in, 12);
        }
    }
}

/* One edit of B; the model decides what it makes of the pair. */
static void fd_mutate(fz_bytes *in, fd_log *b)
{
    fd_rec *r = &b->r[fz_below(in, b->n)];
    fd_head *x = r->n_heads ? &r->heads[fz_below(in, r->n_heads)] : NULL;
    switch (fz_below(in, 11)) {
    case 0: /* a field removed */
        switch (fz_below(in, 5)) {
        case 4: r->has_rounds = 0; break;
        case 0: r->has_rd = 0; break;
        case 1: r->has_run = 0; break;
        case 2: r->has_heads = 0; break;
        default: r->has_round = 0; break;
        }
        break;
    case 1: r->twice = 1; break;
    case 2: /* a position twice */
        if (x && x->n) {
            int32_t p = x->pos[fz_below(in, x->n)];
            x->pos[x->n++] = p;
        }
        break;
    case 3: r->rd ^= 1 + fz_below(in, 3); break;
    case 4: r->run ^= 1 + fz_below(in, 3); break;
    case 5:
        if (x && x->n)
            x->pos[fz_below(in, x->n)] += 1 + (int32_t)fz_below(in, 3);
        break;
    case 6: /* a record dropped */
        if (b->n > 1)
            *r = b->r[--b->n];
        break;
    case 7: /* the lists reversed: equal as sets */
        for (uint32_t h = 0; h < r->n_heads / 2; h++) {
            fd_head t = r->heads[h];
            r->heads[h] = r->heads[r->n_heads - 1 - h];
            r->heads[r->n_heads - 1 - h] = t;
        }
        for (uint32_t k = 0; x && k < x->n / 2; k++) {
            int32_t t = x->pos[k];
            x->pos[k] = x->pos[x->n - 1 - k];
            x->pos[x->n - 1 - k] = t;
        }
        break;
    case 9: /* rounds changed, or given */
        r->rounds += r->has_rounds ? 1 + fz_below(in, 3) : 0;
        r->has_rounds = 1;
        break;
    case 10: r->unknown = x && fz_below(in, 2) ? 2 : 1; break;
    default: /* a head removed */
        if (x)
            *x = r->heads[--r->n_heads];
        break;
    }
}

static void fd_write(FILE *f, const fd_log *l)
{
    for (uint32_t i = 0; i < l->n; i++) {
        const fd_rec *r = &l->r[i];
        fprintf(f, "{\"seq_id\":%llu", (unsigned long long)r->seq);
        if (r->has_round)
            fprintf(f, ",\"round\":%u", r->round);
        if (r->has_rounds)
            fprintf(f, ",\"rounds\":%u", r->rounds);
        if (r->unknown == 1)
            fputs(",\"tokens\":3", f);
        if (r->has_rd)
            fprintf(f, ",\"round_digest\":\"0x%016llx\"", (unsigned long long)r->rd);
        if (r->has_run)
            fprintf(f, ",\"running_digest\":\"0x%llx\"", (unsigned long long)r->run);
        if (r->has_heads) {
            fputs(",\"heads\":[", f);
            for (uint32_t h = 0; h < r->n_heads; h++) {
                const fd_head *x = &r->heads[h];
                fprintf(f, "%s{\"layer\":%u,\"head\":%u,%s\"evicted\":[", h ? "," : "",
                        x->layer, x->head, r->unknown == 2 ? "\"kept\":[]," : "");
                for (uint32_t k = 0; k < x->n; k++)
                    fprintf(f, "%s%d", k ? "," : "", x->pos[k]);
                fputs("]}", f);
            }
            fputs("]", f);
        }
        if (r->twice)
            fprintf(f, ",\"seq_id\":%llu", (unsigned long long)r->seq);
        fputs("}\n", f);
    }
}

/* The model: a record's heads as sorted sets. */
static int fd_i32_cmp(const void *a, const void *b) { return kve_diff_i32_cmp(a, b); }

static void fd_canon(fd_rec *r)
{
    for (uint32_t h = 0; h < r->n_heads; h++)
        qsort(r->heads[h].pos, r->heads[h].n, sizeof(int32_t), fd_i32_cmp);
    for (uint32_t h = 1; h < r->n_heads; h++) /* insertion sort by (layer, head) */
        for (uint32_t j = h; j > 0 && (r->heads[j].layer * 8 + r->heads[j].head <
                                       r->heads[j - 1].layer * 8 + r->heads[j - 1].head);
             j--) {
            fd_head t = r->heads[j];
            r->heads[j] = r->heads[j - 1];
            r->heads[j - 1] = t;
        }
}

static int fd_same_key(const fd_rec *x, const fd_rec *y)
{
    return x->seq == y->seq && x->has_round == y->has_round &&
           (!x->has_round || x->round == y->round);
}

static int fd_malformed(fd_log *l)
{
    for (uint32_t i = 0; i < l->n; i++) {
        fd_rec *r = &l->r[i];
        fd_canon(r);
        if (r->twice || !(r->has_rd || r->has_run || r->has_heads))
            return 1;
        if (r->unknown == 1 || (r->unknown == 2 && r->has_heads && r->n_heads))
            return 1;
        for (uint32_t j = 0; j < i; j++)
            if (fd_same_key(r, &l->r[j]))
                return 1;
        for (uint32_t h = 0; r->has_heads && h < r->n_heads; h++) {
            const fd_head *x = &r->heads[h];
            if (h && x->layer == r->heads[h - 1].layer && x->head == r->heads[h - 1].head)
                return 1;
            for (uint32_t k = 1; k < x->n; k++)
                if (x->pos[k] == x->pos[k - 1])
                    return 1;
        }
    }
    return 0;
}

static int fd_rec_equal(const fd_rec *x, const fd_rec *y)
{
    if (x->has_rd != y->has_rd || x->has_run != y->has_run || x->has_heads != y->has_heads ||
        (x->has_rd && x->rd != y->rd) || (x->has_run && x->run != y->run) ||
        x->has_rounds != y->has_rounds || (x->has_rounds && x->rounds != y->rounds))
        return 0;
    if (!x->has_heads)
        return 1;
    if (x->n_heads != y->n_heads)
        return 0;
    for (uint32_t h = 0; h < x->n_heads; h++) {
        const fd_head *a = &x->heads[h], *b = &y->heads[h];
        if (a->layer != b->layer || a->head != b->head || a->n != b->n ||
            memcmp(a->pos, b->pos, a->n * sizeof(int32_t)))
            return 0;
    }
    return 1;
}

/* 0 equal, 1 differ, 2 malformed. */
static int fd_model(fd_log a, fd_log b)
{
    if (fd_malformed(&a) || fd_malformed(&b))
        return 2;
    if (a.n != b.n)
        return 1;
    for (uint32_t i = 0; i < a.n; i++) {
        const fd_rec *o = NULL;
        for (uint32_t j = 0; j < b.n && !o; j++)
            o = fd_same_key(&a.r[i], &b.r[j]) ? &b.r[j] : NULL;
        if (!o || !fd_rec_equal(&a.r[i], o))
            return 1;
    }
    return 0;
}

static char *fd_temp(const fd_log *l)
{
    char *path = strdup("/tmp/fuzz_diff_XXXXXX");
    int fd = path ? mkstemp(path) : -1;
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        free(path);
        return NULL;
    }
    fd_write(f, l);
    fclose(f);
    return path;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_bytes in = {data, size};
    static fd_log a, b;
    memset(&a, 0, sizeof a);
    fd_decode(&in, &a);
    b = a;
    for (uint32_t m = fz_below(&in, 4); m; m--)
        fd_mutate(&in, &b);
    char *pa = fd_temp(&a), *pb = fd_temp(&b);
    FILE *out = tmpfile();
    static FILE *devnull;
    if (!devnull)
        devnull = fopen("/dev/null", "w");
    if (pa && pb && out && devnull) {
        char *argv[] = {"diff", pa, pb, NULL};
        FILE *saved_out = stdout, *saved_err = stderr;
        stdout = out;
        stderr = devnull; /* the command's messages; sanitizers write to fd 2 */
        int rc = kve_cmd_diff(3, argv);
        fflush(out);
        stdout = saved_out;
        stderr = saved_err;
        char text[4096] = "";
        rewind(out);
        size_t got = fread(text, 1, sizeof text - 1, out);
        text[got] = '\0';
        int want = fd_model(a, b);
        FZ_CHECK(rc == want, "diff exits %d, the model says %d; stdout \"%s\"", rc, want, text);
        char equal[64];
        snprintf(equal, sizeof equal, "equal: %u records\n", a.n);
        FZ_CHECK(rc != 0 || !strcmp(text, equal), "equal, but stdout \"%s\"", text);
        FZ_CHECK(rc != 1 || (!strncmp(text, "differ: ", 8) &&
                             !strstr(text, "only in A: [] only in B: []")),
                 "a difference that names nothing: \"%s\"", text);
    }
    if (out)
        fclose(out);
    if (pa)
        unlink(pa);
    if (pb)
        unlink(pb);
    free(pa);
    free(pb);
    return 0;
}
