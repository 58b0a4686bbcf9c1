/*
 * cmd_diff.c — `kvevict diff A B`: compare two logs of JSON lines (from
 * `kvevict replay`, or an engine's per-request digests) and name the first
 * request, round, layer and head where they part, with the positions.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "jsonl.h"

static const char kve_diff_usage[] =
    "usage: kvevict diff A B\n"
    "Compare two logs of JSON lines, one record per line:\n"
    "  {\"seq_id\":N,\"round\":K,\"round_digest\":\"0x..\",\"running_digest\":\"0x..\",\n"
    "   \"heads\":[{\"layer\":L,\"head\":H,\"evicted\":[pos,...]},...]}   (kvevict replay)\n"
    "  {\"seq_id\":N,\"running_digest\":\"0x..\"}                          (one per request)\n"
    "  {\"seq_id\":N,\"rounds\":K,\"running_digest\":\"0x..\"}         (replay --summary)\n"
    "Records pair by (seq_id, round). Prints the first difference in A's order —\n"
    "request, round, layer, head and the positions only one side evicted, or a\n"
    "field only one side has — and exits 1; prints `equal: N records` and exits 0\n"
    "when every record matches; exit 2 for unreadable input (also a record with\n"
    "nothing to compare, a field given twice or unknown, a head or a position\n"
    "listed twice). Every field is compared: none is ignored.\n";

typedef struct {
    uint32_t layer, head, n;
    int32_t *pos; /* ascending */
} kve_diff_head;

typedef struct {
    uint64_t seq_id;
    int64_t round; /* -1: a per-request record */
    int has_round_digest, has_running, has_heads, has_rounds;
    uint64_t round_digest, running, rounds;
    uint32_t n_heads;
    kve_diff_head *heads;
    size_t line;
} kve_diff_rec;

typedef struct {
    const char *path;
    kve_diff_rec *recs;
    size_t n, cap;
} kve_diff_log;

static void kve_diff_log_free(kve_diff_log *l)
{
    for (size_t i = 0; i < l->n; i++) {
        for (uint32_t h = 0; h < l->recs[i].n_heads; h++)
            free(l->recs[i].heads[h].pos);
        free(l->recs[i].heads);
    }
    free(l->recs);
}

static int kve_diff_bad(const kve_diff_log *l, size_t line, const char *what)
{
    fprintf(stderr, "kvevict: diff: %s:%zu: %s\n", l->path, line, what);
    return 2;
}

static int kve_diff_u64(const kve_jnode *n, uint64_t max, uint64_t *out)
{
    if (!n || n->kind != KVE_J_INT || n->neg || n->u > max)
        return -1;
    *out = n->u;
    return 0;
}

/* A digest written as "0x" + hex digits. */
static int kve_diff_hex(const kve_jnode *n, uint64_t *out)
{
    if (!n || n->kind != KVE_J_STR || n->slen < 3 || n->slen > 18 || n->s[0] != '0' ||
        (n->s[1] != 'x' && n->s[1] != 'X'))
        return -1;
    uint64_t v = 0;
    for (size_t i = 2; i < n->slen; i++) {
        char c = n->s[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return 0;
}

static int kve_diff_i32_cmp(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static int kve_diff_head_cmp(const void *a, const void *b)
{
    const kve_diff_head *x = (const kve_diff_head *)a, *y = (const kve_diff_head *)b;
    if (x->layer != y->layer)
        return x->layer < y->layer ? -1 : 1;
    return (x->head > y->head) - (x->head < y->head);
}

/* The next child after @p n (children in order; kve_json_at from the first
 * each time would make long lists quadratic). */
static const kve_jnode *kve_diff_next(const kve_jdoc *d, const kve_jnode *n)
{
    return n && n->next >= 0 ? &d->nodes[n->next] : NULL;
}

/* NULL when no member name of object @p o is given twice, else the name. */
static const char *kve_diff_twice(const kve_jdoc *d, const kve_jnode *o, char *buf, size_t size)
{
    const kve_jnode *f = o->first >= 0 ? &d->nodes[o->first] : NULL;
    for (const kve_jnode *x = f; x; x = kve_diff_next(d, x))
        for (const kve_jnode *y = kve_diff_next(d, x); y; y = kve_diff_next(d, y))
            if (x->klen == y->klen && !memcmp(x->key, y->key, x->klen)) {
                snprintf(buf, size, "\"%.*s\" given twice in one object", (int)x->klen, x->key);
                return buf;
            }
    return NULL;
}

/* The first member of object @p o not named in @p known (NULL-ended), or
 * NULL: a field diff would not compare is refused, never ignored. */
static const kve_jnode *kve_diff_unknown(const kve_jdoc *d, const kve_jnode *o,
                                         const char *const *known)
{
    for (const kve_jnode *x = o->first >= 0 ? &d->nodes[o->first] : NULL; x;
         x = kve_diff_next(d, x)) {
        const char *const *k = known;
        while (*k && !(strlen(*k) == x->klen && !memcmp(*k, x->key, x->klen)))
            k++;
        if (!*k)
            return x;
    }
    return NULL;
}

/* One head {layer, head, evicted}: its positions sorted, each once. */
static const char *kve_diff_read_head(const kve_jdoc *d, const kve_jnode *h, kve_diff_head *o,
                                 char *why, size_t size)
{
    static const char shape[] = "\"heads\" is not a list of {layer, head, evicted: [positions]}";
    const kve_jnode *ev = kve_json_get(d, h, "evicted");
    uint64_t l, hd;
    if (kve_diff_u64(kve_json_get(d, h, "layer"), UINT32_MAX, &l) ||
        kve_diff_u64(kve_json_get(d, h, "head"), UINT32_MAX, &hd) || !ev || ev->kind != KVE_J_ARR)
        return shape;
    if (kve_diff_twice(d, h, why, size))
        return why;
    static const char *const known[] = {"layer", "head", "evicted", NULL};
    const kve_jnode *u = kve_diff_unknown(d, h, known);
    if (u) {
        snprintf(why, size, "unknown field \"%.*s\" in a head: a head has layer, head and evicted",
                 (int)(u->klen > 40 ? 40 : u->klen), u->key);
        return why;
    }
    o->layer = (uint32_t)l;
    o->head = (uint32_t)hd;
    o->pos = (int32_t *)malloc((ev->count ? ev->count : 1) * sizeof *o->pos);
    if (!o->pos)
        return "out of memory for the positions";
    const kve_jnode *e = ev->first >= 0 ? &d->nodes[ev->first] : NULL;
    for (; e; e = kve_diff_next(d, e)) {
        uint64_t p;
        if (kve_diff_u64(e, INT32_MAX, &p))
            return shape;
        o->pos[o->n++] = (int32_t)p;
    }
    qsort(o->pos, o->n, sizeof *o->pos, kve_diff_i32_cmp);
    for (uint32_t k = 1; k < o->n; k++)
        if (o->pos[k] == o->pos[k - 1]) {
            snprintf(why, size, "layer %u head %u: position %d listed twice in \"evicted\"",
                     o->layer, o->head, o->pos[k]);
            return why;
        }
    return NULL;
}

/* The record's heads, sorted by (layer, head), each once. */
static const char *kve_diff_heads(const kve_jdoc *d, const kve_jnode *arr, kve_diff_rec *r,
                                  char *why, size_t size)
{
    if (arr->kind != KVE_J_ARR)
        return "\"heads\" is not a list of {layer, head, evicted: [positions]}";
    r->heads = (kve_diff_head *)calloc(arr->count ? arr->count : 1, sizeof *r->heads);
    if (!r->heads)
        return "out of memory for the heads";
    const kve_jnode *h = arr->first >= 0 ? &d->nodes[arr->first] : NULL;
    for (; h; h = kve_diff_next(d, h)) {
        const char *bad = kve_diff_read_head(d, h, &r->heads[r->n_heads++], why, size);
        if (bad)
            return bad;
    }
    qsort(r->heads, r->n_heads, sizeof *r->heads, kve_diff_head_cmp);
    for (uint32_t k = 1; k < r->n_heads; k++)
        if (!kve_diff_head_cmp(&r->heads[k - 1], &r->heads[k])) {
            snprintf(why, size, "layer %u head %u listed twice in \"heads\"", r->heads[k].layer,
                     r->heads[k].head);
            return why;
        }
    return NULL;
}

static int kve_diff_parse_line(kve_diff_log *l, const char *text, size_t line)
{
    kve_jdoc d;
    if (kve_json_parse(&d, text)) {
        char msg[200];
        snprintf(msg, sizeof msg, "not JSON (%s)", d.err);
        kve_json_free(&d);
        return kve_diff_bad(l, line, msg);
    }
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        kve_diff_rec *grown = (kve_diff_rec *)realloc(l->recs, cap * sizeof *grown);
        if (!grown) {
            kve_json_free(&d);
            return kve_diff_bad(l, line, "out of memory for the records");
        }
        l->recs = grown;
        l->cap = cap;
    }
    kve_diff_rec *r = &l->recs[l->n++];
    memset(r, 0, sizeof *r);
    r->line = line;
    r->round = -1;
    const kve_jnode *root = &d.nodes[0], *n = NULL;
    const char *bad = NULL;
    char why[160];
    uint64_t v;
    if (root->kind != KVE_J_OBJ)
        bad = "expected an object";
    else if (kve_diff_twice(&d, root, why, sizeof why))
        bad = why;
    else if (kve_diff_u64(kve_json_get(&d, root, "seq_id"), UINT64_MAX, &r->seq_id))
        bad = "\"seq_id\" missing or not an unsigned integer";
    else if ((n = kve_json_get(&d, root, "round")) && kve_diff_u64(n, UINT32_MAX, &v))
        bad = "\"round\" is not an unsigned 32-bit integer";
    static const char *const known[] = {"seq_id", "round", "rounds", "round_digest",
                                        "running_digest", "heads", NULL};
    const kve_jnode *u = bad ? NULL : kve_diff_unknown(&d, root, known);
    if (u) {
        snprintf(why, sizeof why,
                 "unknown field \"%.*s\": diff compares seq_id, round, rounds, round_digest, "
                 "running_digest and heads",
                 (int)(u->klen > 40 ? 40 : u->klen), u->key);
        bad = why;
    }
    if (!bad && n)
        r->round = (int64_t)v;
    if (!bad && (n = kve_json_get(&d, root, "rounds"))) {
        r->has_rounds = 1;
        if (kve_diff_u64(n, UINT32_MAX, &r->rounds))
            bad = "\"rounds\" is not an unsigned 32-bit integer";
    }
    if (!bad && (n = kve_json_get(&d, root, "round_digest"))) {
        r->has_round_digest = 1;
        if (kve_diff_hex(n, &r->round_digest))
            bad = "\"round_digest\" is not a \"0x...\" hex string";
    }
    if (!bad && (n = kve_json_get(&d, root, "running_digest"))) {
        r->has_running = 1;
        if (kve_diff_hex(n, &r->running))
            bad = "\"running_digest\" is not a \"0x...\" hex string";
    }
    if (!bad && (n = kve_json_get(&d, root, "heads"))) {
        r->has_heads = 1;
        bad = kve_diff_heads(&d, n, r, why, sizeof why);
    }
    if (!bad && !r->has_round_digest && !r->has_running && !r->has_heads)
        bad = "nothing to compare: no \"round_digest\", \"running_digest\" or \"heads\"";
    kve_json_free(&d);
    return bad ? kve_diff_bad(l, line, bad) : 0;
}

static int kve_diff_read(kve_diff_log *l)
{
    FILE *f = fopen(l->path, "r");
    if (!f) {
        fprintf(stderr, "kvevict: diff: cannot open %s: %s\n", l->path, strerror(errno));
        return 2;
    }
    char *buf = NULL;
    size_t cap = 0, line = 0;
    ssize_t len;
    int rc = 0;
    int err = 0;
    while (!rc) {
        errno = 0;
        if ((len = getline(&buf, &cap, f)) < 0) {
            err = errno;
            break;
        }
        line++;
        size_t i = 0;
        while (buf[i] == ' ' || buf[i] == '\t' || buf[i] == '\r' || buf[i] == '\n')
            i++;
        if (buf[i])
            rc = kve_diff_parse_line(l, buf, line);
    }
    if (!rc && ferror(f)) { /* a directory, or a read error: not an empty log */
        fprintf(stderr, "kvevict: diff: cannot read %s: %s\n", l->path,
                strerror(err ? err : EIO));
        rc = 2;
    }
    free(buf);
    fclose(f);
    return rc;
}

static int kve_diff_key_cmp(const kve_diff_rec *a, const kve_diff_rec *b)
{
    if (a->seq_id != b->seq_id)
        return a->seq_id < b->seq_id ? -1 : 1;
    return (a->round > b->round) - (a->round < b->round);
}

static int kve_diff_ptr_cmp(const void *a, const void *b)
{
    return kve_diff_key_cmp(*(const kve_diff_rec *const *)a, *(const kve_diff_rec *const *)b);
}

static void kve_diff_where(const kve_diff_rec *r)
{
    printf("differ: request seq_id=%llu", (unsigned long long)r->seq_id);
    if (r->round >= 0)
        printf(" round=%lld", (long long)r->round);
}

static void kve_diff_only(const char *side, const kve_diff_head *x, const kve_diff_head *y)
{
    printf(" only in %s: [", side);
    for (uint32_t i = 0, j = 0, first = 1; i < x->n; i++) {
        while (j < y->n && y->pos[j] < x->pos[i])
            j++;
        if (j == y->n || y->pos[j] != x->pos[i]) {
            printf("%s%d", first ? "" : ",", x->pos[i]);
            first = 0;
        }
    }
    printf("]");
}

/* A field only one side has: a difference (never equal without comparing). */
static int kve_diff_lacks(const kve_diff_rec *a, int in_a, int in_b, const char *field)
{
    if (in_a == in_b)
        return 0;
    kve_diff_where(a);
    printf(": \"%s\" only in %s (the other record lacks it)\n", field, in_a ? "A" : "B");
    return 1;
}

/* The heads of both records, merged by (layer, head); 1 at the first
 * difference (a head only one side lists, or other positions). */
static int kve_diff_heads_pair(const kve_diff_rec *a, const kve_diff_rec *b)
{
    uint32_t i = 0, j = 0;
    while (i < a->n_heads || j < b->n_heads) {
        const kve_diff_head *x = i < a->n_heads ? &a->heads[i] : NULL,
                            *y = j < b->n_heads ? &b->heads[j] : NULL;
        int c = !x ? 1 : !y ? -1 : kve_diff_head_cmp(x, y);
        if (c) {
            const kve_diff_head *only = c < 0 ? x : y;
            kve_diff_where(a);
            printf(" layer=%u head=%u: only in %s (%u positions)\n", only->layer, only->head,
                   c < 0 ? "A" : "B", only->n);
            return 1;
        }
        i++;
        j++;
        if (x->n == y->n && !memcmp(x->pos, y->pos, x->n * sizeof *x->pos))
            continue;
        kve_diff_where(a);
        printf(" layer=%u head=%u:", x->layer, x->head);
        kve_diff_only("A", x, y);
        kve_diff_only("B", y, x);
        printf("\n");
        return 1;
    }
    return 0;
}

/* 0 when equal, else prints where and returns 1. */
static int kve_diff_pair(const kve_diff_rec *a, const kve_diff_rec *b)
{
    if (kve_diff_lacks(a, a->has_heads, b->has_heads, "heads") ||
        kve_diff_lacks(a, a->has_round_digest, b->has_round_digest, "round_digest") ||
        kve_diff_lacks(a, a->has_running, b->has_running, "running_digest") ||
        kve_diff_lacks(a, a->has_rounds, b->has_rounds, "rounds"))
        return 1;
    if (a->has_rounds && a->rounds != b->rounds) {
        kve_diff_where(a);
        printf(": rounds %llu in A, %llu in B\n", (unsigned long long)a->rounds,
               (unsigned long long)b->rounds);
        return 1;
    }
    if (kve_diff_heads_pair(a, b))
        return 1;
    if (a->has_round_digest && a->round_digest != b->round_digest) {
        kve_diff_where(a);
        printf(": round_digest 0x%016llx in A, 0x%016llx in B\n",
               (unsigned long long)a->round_digest, (unsigned long long)b->round_digest);
        return 1;
    }
    if (a->has_running && a->running != b->running) {
        kve_diff_where(a);
        printf(": running_digest 0x%016llx in A, 0x%016llx in B\n",
               (unsigned long long)a->running, (unsigned long long)b->running);
        return 1;
    }
    return 0;
}

static const kve_diff_rec *kve_diff_find(kve_diff_rec *const *sorted, size_t n,
                                         const kve_diff_rec *key)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = kve_diff_key_cmp(sorted[mid], key);
        if (c == 0)
            return sorted[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Every record of @p x in file order against @p y; 1 at the first difference. */
static int kve_diff_walk(const kve_diff_log *x, const kve_diff_log *y, kve_diff_rec **ysorted,
                         int x_is_a)
{
    for (size_t i = 0; i < x->n; i++) {
        const kve_diff_rec *r = &x->recs[i];
        const kve_diff_rec *o = kve_diff_find(ysorted, y->n, r);
        if (!o) {
            kve_diff_where(r);
            printf(": only in %s (%s:%zu)\n", x_is_a ? "A" : "B", x->path, r->line);
            return 1;
        }
        if (x_is_a && kve_diff_pair(r, o))
            return 1;
    }
    return 0;
}

static kve_diff_rec **kve_diff_sorted(const kve_diff_log *l)
{
    kve_diff_rec **s = (kve_diff_rec **)malloc((l->n ? l->n : 1) * sizeof *s);
    if (!s)
        return NULL;
    for (size_t i = 0; i < l->n; i++)
        s[i] = &l->recs[i];
    qsort(s, l->n, sizeof *s, kve_diff_ptr_cmp);
    return s;
}

int kve_cmd_diff(int argc, char **argv)
{
    if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(kve_diff_usage, stdout);
        return 0;
    }
    if (argc != 3) {
        fputs(kve_diff_usage, stderr);
        return 2;
    }
    kve_diff_log a = {argv[1], NULL, 0, 0}, b = {argv[2], NULL, 0, 0};
    int rc = kve_diff_read(&a);
    if (!rc)
        rc = kve_diff_read(&b);
    kve_diff_rec **as = rc ? NULL : kve_diff_sorted(&a), **bs = rc ? NULL : kve_diff_sorted(&b);
    if (!rc && (!as || !bs))
        rc = kve_cli_usage_error("diff: out of memory for %zu + %zu records", a.n, b.n);
    for (size_t i = 1; !rc && i < a.n; i++)
        if (!kve_diff_key_cmp(as[i - 1], as[i]))
            rc = kve_diff_bad(&a, as[i]->line, "a second record of this (seq_id, round)");
    for (size_t i = 1; !rc && i < b.n; i++)
        if (!kve_diff_key_cmp(bs[i - 1], bs[i]))
            rc = kve_diff_bad(&b, bs[i]->line, "a second record of this (seq_id, round)");
    if (!rc)
        rc = kve_diff_walk(&a, &b, bs, 1);
    if (!rc)
        rc = kve_diff_walk(&b, &a, as, 0);
    if (!rc)
        printf("equal: %zu records\n", a.n);
    free(as);
    free(bs);
    kve_diff_log_free(&a);
    kve_diff_log_free(&b);
    return rc;
}
