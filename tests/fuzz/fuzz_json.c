/*
 * fuzz_json — the CLI's JSON reader of slot tables (`kvevict select
 * --slots-stdin`, tools/cli_common.c), on arbitrary text as stdin. Besides
 * memory safety, whatever it accepts must be what a plain reference parser
 * of the same grammar reads: one array of int32 for every head, or
 * layers x heads arrays of one length; whitespace around tokens; nothing
 * after. The reader's static functions are reached by including its file.
 */
#include <ctype.h>
#include <errno.h>

#include "cli_common.c" /* tools/, on the include path */
#include "fuzz_common.h"

typedef struct {
    const char *p;
} ref_text;

static void ref_ws(ref_text *t)
{
    while (isspace((unsigned char)*t->p))
        t->p++;
}

/* "[int, ...]": appends to out, returns the count or -1. */
static long ref_array(ref_text *t, int32_t *out, size_t cap, size_t *len)
{
    ref_ws(t);
    if (*t->p++ != '[')
        return -1;
    ref_ws(t);
    if (*t->p == ']') {
        t->p++;
        return 0;
    }
    for (long count = 1;; count++) {
        ref_ws(t);
        char *end;
        errno = 0;
        long long v = strtoll(t->p, &end, 10);
        if (end == t->p || errno || v < INT32_MIN || v > INT32_MAX || *len == cap)
            return -1;
        out[(*len)++] = (int32_t)v;
        t->p = end;
        ref_ws(t);
        if (*t->p == ']') {
            t->p++;
            return count;
        }
        if (*t->p++ != ',')
            return -1;
    }
}

/* The reference reading: 1 and the tables (heads rows of *width), or 0. */
static int ref_read(const char *text, size_t heads, int32_t *out, size_t cap, uint32_t *width)
{
    ref_text t = {text};
    size_t len = 0;
    ref_ws(&t);
    const char *after = t.p + (*t.p != '\0');
    while (isspace((unsigned char)*after))
        after++;
    if (*t.p == '[' && *after == '[') {
        t.p = after;
        long w = -1;
        size_t rows = 0;
        for (;;) {
            long c = ref_array(&t, out, cap, &len);
            if (c < 0 || (w >= 0 && c != w))
                return 0;
            w = c;
            rows++;
            ref_ws(&t);
            if (*t.p == ']')
                break;
            if (*t.p++ != ',')
                return 0;
        }
        t.p++;
        if (rows != heads)
            return 0;
        *width = (uint32_t)w;
    } else {
        long c = ref_array(&t, out, cap, &len);
        if (c < 0)
            return 0;
        *width = (uint32_t)c;
        for (size_t h = 1; h < heads; h++)
            memcpy(out + h * (size_t)c, out, (size_t)c * 4);
    }
    ref_ws(&t);
    return *t.p == '\0';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > 4096)
        return 0;
    kve_cli_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.layers = 1 + data[0] % 3;
    cfg.heads = 1 + (data[0] >> 2) % 3;
    size_t heads = (size_t)cfg.layers * cfg.heads;
    FILE *in = fmemopen((void *)(data + 1), size - 1 ? size - 1 : 1, "r");
    if (!in)
        return 0;
    if (size == 1)
        fgetc(in); /* fmemopen cannot open 0 bytes: consume the 1 */
    static FILE *devnull;
    if (!devnull)
        devnull = fopen("/dev/null", "w");
    FILE *saved_in = stdin, *saved_err = stderr;
    stdin = in;
    stderr = devnull; /* the reader's usage messages; sanitizers write to fd 2 */
    int rc = kve_cli_read_stdin_slots(&cfg);
    stdin = saved_in;
    stderr = saved_err;
    fclose(in);

    /* The reference reads the same bytes up to the first NUL, as the
     * reader's C string does. */
    char *text = (char *)malloc(size);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    size_t cap = heads * (size + 1);
    int32_t *want = (int32_t *)malloc(cap * 4);
    uint32_t width = 0;
    int ok = ref_read(text, heads, want, cap, &width);
    FZ_CHECK((rc == 0) == ok, "reader %s, reference %s", rc ? "rejects" : "accepts",
             ok ? "accepts" : "rejects");
    if (ok) {
        FZ_CHECK(cfg.n_slots == width, "width %u, reference %u", cfg.n_slots, width);
        FZ_CHECK(cfg.slot_pos && !memcmp(cfg.slot_pos, want, heads * width * 4), "tables differ");
    }
    free(text);
    free(want);
    free(cfg.slot_pos);
    return 0;
}
