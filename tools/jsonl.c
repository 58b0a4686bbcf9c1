/* jsonl.c — the JSON reader behind `kvevict diff` (see jsonl.h). */
#include "jsonl.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KVE_JSON_MAX_DEPTH 32

typedef struct {
    kve_jdoc *doc;
    const char *p, *start;
} kve_jparser;

static int kve_jfail(kve_jparser *j, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(j->doc->err, sizeof j->doc->err, "byte %zu: ", (size_t)(j->p - j->start));
    vsnprintf(j->doc->err + n, sizeof j->doc->err - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static void kve_jws(kve_jparser *j)
{
    while (*j->p == ' ' || *j->p == '\t' || *j->p == '\r' || *j->p == '\n')
        j->p++;
}

static int32_t kve_jnew(kve_jparser *j, kve_jkind kind)
{
    kve_jdoc *d = j->doc;
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 64;
        if (cap > INT32_MAX)
            return kve_jfail(j, "too many values");
        kve_jnode *grown = (kve_jnode *)realloc(d->nodes, cap * sizeof *grown);
        if (!grown)
            return kve_jfail(j, "out of memory for %zu values (%zu bytes)", cap,
                             cap * sizeof *grown);
        d->nodes = grown;
        d->cap = cap;
    }
    kve_jnode *n = &d->nodes[d->n];
    memset(n, 0, sizeof *n);
    n->kind = kind;
    n->first = n->next = -1;
    return (int32_t)d->n++;
}

/* A string's raw text between the quotes (escapes kept as written). */
static int kve_jstring(kve_jparser *j, const char **s, size_t *len)
{
    const char *q = ++j->p;
    while (*j->p && *j->p != '"') {
        if ((unsigned char)*j->p < 0x20)
            return kve_jfail(j, "control character in a string");
        if (*j->p == '\\' && j->p[1])
            j->p++;
        j->p++;
    }
    if (*j->p != '"')
        return kve_jfail(j, "unterminated string");
    *s = q;
    *len = (size_t)(j->p - q);
    j->p++;
    return 0;
}

static int kve_jvalue(kve_jparser *j, int depth);

/* Parses the members or elements of a container node after its bracket. */
static int kve_jchildren(kve_jparser *j, int32_t self, int object, int depth)
{
    char close = object ? '}' : ']';
    kve_jws(j);
    if (*j->p == close) {
        j->p++;
        return 0;
    }
    int32_t last = -1;
    for (;;) {
        const char *key = NULL;
        size_t klen = 0;
        kve_jws(j);
        if (object) {
            if (*j->p != '"')
                return kve_jfail(j, "expected a member name");
            if (kve_jstring(j, &key, &klen))
                return -1;
            kve_jws(j);
            if (*j->p != ':')
                return kve_jfail(j, "expected ':'");
            j->p++;
        }
        int32_t child = (int32_t)j->doc->n;
        if (kve_jvalue(j, depth + 1))
            return -1;
        kve_jnode *nodes = j->doc->nodes;
        nodes[child].key = key;
        nodes[child].klen = klen;
        if (last < 0)
            nodes[self].first = child;
        else
            nodes[last].next = child;
        last = child;
        nodes[self].count++;
        kve_jws(j);
        if (*j->p == ',') {
            j->p++;
            continue;
        }
        if (*j->p == close) {
            j->p++;
            return 0;
        }
        return kve_jfail(j, "expected ',' or '%c'", close);
    }
}

/* A string value at j->p (its opening quote). */
static int kve_jstring_value(kve_jparser *j)
{
    int32_t self = kve_jnew(j, KVE_J_STR);
    if (self < 0)
        return -1;
    const char *s = NULL;
    size_t len = 0;
    if (kve_jstring(j, &s, &len))
        return -1;
    j->doc->nodes[self].s = s;
    j->doc->nodes[self].slen = len;
    return 0;
}

/* An integer at j->p (a '-' or a digit): 64 bits and a sign, nothing else. */
static int kve_jinteger(kve_jparser *j)
{
    int neg = *j->p == '-';
    const char *d = j->p + neg;
    if (!isdigit((unsigned char)*d))
        return kve_jfail(j, "expected a digit");
    uint64_t u = 0;
    for (; isdigit((unsigned char)*d); d++) {
        unsigned digit = (unsigned)(*d - '0');
        if (u > (UINT64_MAX - digit) / 10)
            return kve_jfail(j, "integer beyond 64 bits");
        u = u * 10 + digit;
    }
    if (*d == '.' || *d == 'e' || *d == 'E')
        return kve_jfail(j, "only integers are expected");
    int32_t self = kve_jnew(j, KVE_J_INT);
    if (self < 0)
        return -1;
    j->doc->nodes[self].neg = neg && u;
    j->doc->nodes[self].u = u;
    j->p = d;
    return 0;
}

/* null, false or true at j->p; 1 when none of them is there. */
static int kve_jword(kve_jparser *j)
{
    static const char *const words[] = {"null", "false", "true"};
    for (int w = 0; w < 3; w++) {
        size_t len = strlen(words[w]);
        if (!strncmp(j->p, words[w], len)) {
            int32_t self = kve_jnew(j, w ? KVE_J_BOOL : KVE_J_NULL);
            if (self < 0)
                return -1;
            j->doc->nodes[self].u = w == 2;
            j->p += len;
            return 0;
        }
    }
    return 1;
}

static int kve_jvalue(kve_jparser *j, int depth)
{
    if (depth > KVE_JSON_MAX_DEPTH)
        return kve_jfail(j, "nested deeper than %d", KVE_JSON_MAX_DEPTH);
    kve_jws(j);
    char c = *j->p;
    if (c == '{' || c == '[') {
        int32_t self = kve_jnew(j, c == '{' ? KVE_J_OBJ : KVE_J_ARR);
        if (self < 0)
            return -1;
        j->p++;
        return kve_jchildren(j, self, c == '{', depth);
    }
    if (c == '"')
        return kve_jstring_value(j);
    if (c == '-' || isdigit((unsigned char)c))
        return kve_jinteger(j);
    int got = kve_jword(j);
    if (got <= 0)
        return got;
    if (!c)
        return kve_jfail(j, "unexpected end of the line");
    return kve_jfail(j, "unexpected character '%c'", c);
}

int kve_json_parse(kve_jdoc *doc, const char *text)
{
    memset(doc, 0, sizeof *doc);
    kve_jparser j = {doc, text, text};
    if (kve_jvalue(&j, 0))
        return -1;
    kve_jws(&j);
    if (*j.p)
        return kve_jfail(&j, "trailing characters after the value");
    return 0;
}

void kve_json_free(kve_jdoc *doc)
{
    free(doc->nodes);
    doc->nodes = NULL;
    doc->n = doc->cap = 0;
}

const kve_jnode *kve_json_get(const kve_jdoc *doc, const kve_jnode *obj, const char *name)
{
    if (!obj || obj->kind != KVE_J_OBJ)
        return NULL;
    size_t len = strlen(name);
    for (int32_t i = obj->first; i >= 0; i = doc->nodes[i].next)
        if (doc->nodes[i].klen == len && !memcmp(doc->nodes[i].key, name, len))
            return &doc->nodes[i];
    return NULL;
}

const kve_jnode *kve_json_at(const kve_jdoc *doc, const kve_jnode *arr, uint32_t i)
{
    if (!arr || (arr->kind != KVE_J_ARR && arr->kind != KVE_J_OBJ) || i >= arr->count)
        return NULL;
    int32_t c = arr->first;
    while (i-- && c >= 0)
        c = doc->nodes[c].next;
    return c >= 0 ? &doc->nodes[c] : NULL;
}
