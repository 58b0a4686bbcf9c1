/*
 * fuzz_api — the small entry points no other harness calls: names and their
 * parsing, availability, a context's settings and getters, the memory
 * helpers, kve_keys, kve_schedule_capacity and kve_version, and the
 * handle checks (issue 60: destroyed handles, a context passed as a state
 * and back, buffers of another context, another thread's churn). A program of
 * up to 32 calls on one fresh CPU context; each call's status against the
 * header's rules, its answer against a plain reference (kve_keys against
 * fuzz_ref.h's libxxhash key), every error with a message, and every array
 * exactly as long as the call needs.
 */
#include <ctype.h>
#include <pthread.h>

#include "fuzz_common.h"
#include "fuzz_ref.h"

/* A string of up to 15 bytes from the input, NUL-terminated, in a buffer of
 * exactly its size; mostly one of the names (in random case), else bytes. */
static char *decode_name(fz_bytes *in)
{
    static const char *const names[] = {"auto", "cpu", "cuda", "hip", "scalar", "avx2", "avx512"};
    char tmp[16];
    size_t n;
    if (fz_u8(in) < 160) {
        const char *w = names[fz_below(in, 7)];
        n = strlen(w) & 15; /* at most 6: the bound for gcc's -Wstringop-overflow */
        for (size_t i = 0; i < n; i++)
            tmp[i] = (char)(fz_u8(in) & 1 ? toupper((unsigned char)w[i]) : w[i]);
        if (fz_u8(in) >= 240 && n < 15)
            tmp[n++] = (char)fz_u8(in); /* a trailing byte: no longer the name */
    } else {
        n = fz_below(in, 16);
        for (size_t i = 0; i < n; i++)
            tmp[i] = (char)fz_u8(in);
    }
    char *s = (char *)fz_alloc(n + 1, 0);
    memcpy(s, tmp, n);
    s[n] = '\0';
    return s;
}

/* The header's lower-case name of value @p v among @p names, or NULL. */
static int name_index(const char *s, const char *const *names, int count)
{
    for (int i = 0; i < count; i++) {
        size_t k = 0;
        while (names[i][k] && s[k] && tolower((unsigned char)s[k]) == names[i][k])
            k++;
        if (!names[i][k] && !s[k])
            return i;
    }
    return -1;
}

static const char *const kBackends[] = {"auto", "cpu", "cuda", "hip"};
static const char *const kIsas[] = {"auto", "scalar", "avx2", "avx512"};

static void op_names(fz_bytes *in)
{
    char *s = decode_name(in);
    kve_backend b = (kve_backend)77;
    kve_status st = kve_backend_from_name(s, &b);
    int want = name_index(s, kBackends, 4);
    FZ_CHECK(want < 0 ? st == KVE_ERR_INVALID : st == KVE_OK && (int)b == want,
             "kve_backend_from_name(\"%s\"): %s, %d", s, kve_status_string(st), (int)b);
    if (st != KVE_OK)
        FZ_CHECK_ERROR_MESSAGE(st);
    kve_cpu_isa isa = (kve_cpu_isa)77;
    st = kve_cpu_isa_from_name(s, &isa);
    want = name_index(s, kIsas, 4);
    FZ_CHECK(want < 0 ? st == KVE_ERR_INVALID : st == KVE_OK && (int)isa == want,
             "kve_cpu_isa_from_name(\"%s\"): %s, %d", s, kve_status_string(st), (int)isa);
    if (st != KVE_OK)
        FZ_CHECK_ERROR_MESSAGE(st);
    FZ_CHECK(kve_backend_from_name(NULL, &b) == KVE_ERR_NULL &&
                 kve_backend_from_name(s, NULL) == KVE_ERR_NULL &&
                 kve_cpu_isa_from_name(NULL, &isa) == KVE_ERR_NULL &&
                 kve_cpu_isa_from_name(s, NULL) == KVE_ERR_NULL,
             "a NULL argument of a name parser accepted");
    free(s);
}

/* Names of enum values, their round trip, and availability. */
static void op_values(fz_bytes *in)
{
    int v = fz_u8(in) < 200 ? (int)fz_below(in, 5) : (int)fz_u32(in);
    const char *bn = kve_backend_name((kve_backend)v), *in_ = kve_cpu_isa_name((kve_cpu_isa)v);
    int known = v >= 0 && v < 4;
    FZ_CHECK(bn && in_ && !strcmp(bn, known ? kBackends[v] : "?") &&
                 !strcmp(in_, known ? kIsas[v] : "?"),
             "names of %d: \"%s\", \"%s\"", v, bn ? bn : "(null)", in_ ? in_ : "(null)");
    int ok = 7;
    kve_status st = kve_backend_available((kve_backend)v, &ok);
    FZ_CHECK(known ? st == KVE_OK && (ok == 0 || ok == 1) && (v > 1 || ok == 1)
                   : st == KVE_ERR_INVALID,
             "kve_backend_available(%d): %s, %d", v, kve_status_string(st), ok);
    ok = 7;
    st = kve_cpu_isa_available((kve_cpu_isa)v, &ok);
    FZ_CHECK(known ? st == KVE_OK && (ok == 0 || ok == 1) && (v > 1 || ok == 1)
                   : st != KVE_OK,
             "kve_cpu_isa_available(%d): %s, %d", v, kve_status_string(st), ok);
    if (st != KVE_OK)
        FZ_CHECK_ERROR_MESSAGE(st);
    FZ_CHECK(kve_backend_available(KVE_BACKEND_CPU, NULL) == KVE_ERR_NULL &&
                 kve_cpu_isa_available(KVE_CPU_ISA_SCALAR, NULL) == KVE_ERR_NULL,
             "availability with a NULL out accepted");
}

/* A context's settings, each read back. */
static void op_settings(fz_bytes *in, kve_context *ctx)
{
    uint8_t which = fz_u8(in) % 5;
    int32_t v = fz_u8(in) < 200 ? (int32_t)fz_below(in, 8) - 2 : (int32_t)fz_u32(in);
    kve_status st;
    int got = -5;
    if (which == 0) {
        st = kve_context_set_threads(ctx, v);
        FZ_CHECK((v >= 0 && v <= 1024) == (st == KVE_OK), "set_threads(%d): %s", v,
                 kve_status_string(st));
        int before = got;
        FZ_CHECK(kve_context_get_threads(ctx, &got) == KVE_OK && got >= 1 && got <= 1024 &&
                     (st != KVE_OK || v == 0 || got == v),
                 "threads %d after set_threads(%d) (%d)", got, v, before);
    } else if (which == 1) {
        int avail = 0;
        kve_status sa = kve_cpu_isa_available((kve_cpu_isa)v, &avail);
        st = kve_context_set_cpu_isa(ctx, (kve_cpu_isa)v);
        FZ_CHECK((sa == KVE_OK && avail) == (st == KVE_OK), "set_cpu_isa(%d): %s (available %d)",
                 v, kve_status_string(st), avail);
        kve_cpu_isa isa = KVE_CPU_ISA_AUTO;
        FZ_CHECK(kve_context_get_cpu_isa(ctx, &isa) == KVE_OK && isa >= KVE_CPU_ISA_SCALAR &&
                     isa <= KVE_CPU_ISA_AVX512 && (st != KVE_OK || v == 0 || (int)isa == v),
                 "isa %d after set_cpu_isa(%d)", (int)isa, v);
    } else if (which == 2) {
        st = kve_context_set_device(ctx, v);
        FZ_CHECK((v == 0) == (st == KVE_OK), "set_device(%d) on the CPU: %s", v,
                 kve_status_string(st));
        FZ_CHECK(kve_context_get_device(ctx, &got) == KVE_OK && got == 0, "device %d", got);
    } else if (which == 3) {
        void *stream = (void *)(uintptr_t)(fz_u8(in) & 1 ? fz_u64(in) : 0);
        st = kve_context_set_stream(ctx, stream);
        void *back = (void *)1;
        FZ_CHECK(st == KVE_OK && kve_context_get_stream(ctx, &back) == KVE_OK,
                 "set_stream / get_stream on the CPU: %s", kve_status_string(st));
    } else {
        kve_backend b = KVE_BACKEND_AUTO;
        st = kve_context_synchronize(ctx);
        FZ_CHECK(st == KVE_OK && kve_context_get_backend(ctx, &b) == KVE_OK && b == KVE_BACKEND_CPU,
                 "synchronize / get_backend: %s, %d", kve_status_string(st), (int)b);
    }
    if (st != KVE_OK)
        FZ_CHECK_ERROR_MESSAGE(st);
    FZ_CHECK(kve_context_get_threads(ctx, NULL) == KVE_ERR_NULL &&
                 kve_context_get_cpu_isa(ctx, NULL) == KVE_ERR_NULL &&
                 kve_context_get_device(ctx, NULL) == KVE_ERR_NULL &&
                 kve_context_get_stream(ctx, NULL) == KVE_ERR_NULL &&
                 kve_context_get_backend(ctx, NULL) == KVE_ERR_NULL &&
                 kve_context_get_threads(NULL, &got) == KVE_ERR_NULL &&
                 kve_context_set_threads(NULL, 1) == KVE_ERR_NULL,
             "a getter or setter with a NULL argument accepted");
}

/* kve_alloc, kve_copy both ways and within, kve_free: the bytes survive. */
static void op_memory(fz_bytes *in, kve_context *ctx)
{
    uint8_t sel = fz_u8(in);
    size_t bytes = sel < 240 ? fz_below(in, 4096) : sel < 250 ? SIZE_MAX - fz_below(in, 300) : 0;
    void *a = (void *)1, *b = NULL;
    kve_status st = kve_alloc(ctx, bytes, &a);
    if (bytes == 0 || bytes > SIZE_MAX - 300) { /* 0, or beyond any memory */
        FZ_CHECK(bytes == 0                ? st == KVE_ERR_RANGE
                 : bytes > SIZE_MAX - 255 ? st == KVE_ERR_OVERFLOW
                                          : st == KVE_ERR_NOMEM,
                 "kve_alloc(%zu): %s", bytes, kve_status_string(st));
        FZ_CHECK_ERROR_MESSAGE(st);
        FZ_CHECK(kve_alloc(ctx, 16, NULL) == KVE_ERR_NULL, "kve_alloc with out NULL accepted");
        return;
    }
    FZ_CHECK(st == KVE_OK && a && ((uintptr_t)a & 255) == 0, "kve_alloc(%zu): %s", bytes,
             kve_status_string(st));
    FZ_CHECK(kve_alloc(ctx, bytes, &b) == KVE_OK, "second kve_alloc(%zu)", bytes);
    uint8_t *src = (uint8_t *)fz_alloc(bytes, 0), *back = (uint8_t *)fz_alloc(bytes, 0xee);
    uint64_t rng = fz_u64(in);
    for (size_t i = 0; i < bytes; i++)
        src[i] = (uint8_t)fz_mix(&rng);
    FZ_CHECK(kve_copy(ctx, a, src, bytes, KVE_COPY_HOST_TO_BACKEND) == KVE_OK &&
                 kve_copy(ctx, b, a, bytes, KVE_COPY_BACKEND_TO_BACKEND) == KVE_OK &&
                 kve_copy(ctx, back, b, bytes, KVE_COPY_BACKEND_TO_HOST) == KVE_OK &&
                 !memcmp(src, back, bytes),
             "kve_copy of %zu bytes: the bytes differ", bytes);
    int kind = fz_u8(in) < 250 ? 3 + (int)fz_below(in, 4) : -1;
    st = kve_copy(ctx, back, a, bytes, (kve_copy_kind)kind);
    FZ_CHECK(st != KVE_OK, "kve_copy with kind %d accepted", kind);
    FZ_CHECK_ERROR_MESSAGE(st);
    FZ_CHECK(kve_copy(ctx, NULL, a, bytes, KVE_COPY_BACKEND_TO_HOST) == KVE_ERR_NULL &&
                 kve_copy(ctx, back, NULL, bytes, KVE_COPY_BACKEND_TO_HOST) == KVE_ERR_NULL,
             "kve_copy with a NULL pointer accepted");
    FZ_CHECK(kve_copy(ctx, back, a, 0, KVE_COPY_BACKEND_TO_HOST) == KVE_OK, "a copy of 0 bytes");
    FZ_CHECK(kve_free(ctx, a) == KVE_OK && kve_free(ctx, b) == KVE_OK && kve_free(ctx, NULL) == KVE_OK,
             "kve_free");
    free(src);
    free(back);
}

/* kve_keys of up to 40 coordinates, exactly sized, against the reference. */
static void op_keys(fz_bytes *in, kve_context *ctx)
{
    uint64_t seed = fz_u8(in) & 1 ? fz_u64(in) : fz_u8(in);
    uint8_t fsel = fz_u8(in);
    uint32_t flags = fsel < 240 ? fsel & KVE_KEY_FLAGS : fz_u32(in);
    size_t n = fz_below(in, 41);
    kve_coord *c = (kve_coord *)fz_alloc(n * sizeof *c, 0);
    uint64_t *keys = (uint64_t *)fz_alloc(n * 8, 0x11);
    for (size_t i = 0; i < n; i++) {
        c[i].seq_id = fz_u8(in) & 1 ? fz_u64(in) : fz_u8(in);
        c[i].layer = fz_count(in, 64);
        c[i].head = fz_count(in, 64);
        c[i].pos = fz_count(in, 4096);
        c[i].round = fz_count(in, 64);
    }
    int null_sel = fz_u8(in) >= 248;
    kve_status st = kve_keys(ctx, seed, flags, null_sel && n ? NULL : c, n, keys);
    int bad = (flags & ~(uint32_t)KVE_KEY_FLAGS) || (null_sel && n);
    FZ_CHECK(bad ? st != KVE_OK : st == KVE_OK, "kve_keys(flags 0x%x, %zu coords): %s", flags, n,
             kve_status_string(st));
    if (st != KVE_OK)
        FZ_CHECK_ERROR_MESSAGE(st);
    for (size_t i = 0; st == KVE_OK && i < n; i++) {
        uint64_t want = ref_key(seed, flags, c[i].seq_id, c[i].layer, c[i].head, c[i].pos, c[i].round);
        FZ_CHECK(keys[i] == want, "kve_keys[%zu]: %llx, the spec %llx", i,
                 (unsigned long long)keys[i], (unsigned long long)want);
    }
    free(c);
    free(keys);
}

/* kve_schedule_capacity against max(B, P + W) + r and the header's errors. */
static void op_capacity(fz_bytes *in)
{
    kve_schedule s;
    s.seed = fz_u8(in);
    uint8_t fsel = fz_u8(in);
    s.flags = fsel < 230 ? fsel & (KVE_KEY_FLAGS | KVE_SCORED) : fz_u32(in);
    s.budget = fz_count(in, 64);
    s.window = fz_count(in, 64);
    s.interval = fz_count(in, 9);
    uint32_t prompt = fz_count(in, 64), out = 12345;
    kve_status st = kve_schedule_capacity(&s, prompt, &out);
    uint64_t protect = (uint64_t)prompt + s.window;
    uint64_t cap = (protect > s.budget ? protect : s.budget) + s.interval;
    kve_status want = (s.flags & ~(uint32_t)(KVE_KEY_FLAGS | KVE_SCORED)) ||
                              ((s.flags & KVE_SCORED) && (s.flags & KVE_PERSISTENT))
                          ? KVE_ERR_INVALID
                      : s.budget > 0x7fffffffu || s.window > 0x7fffffffu || s.interval == 0 ||
                              s.interval > 0x7fffffffu
                          ? KVE_ERR_RANGE
                      : cap > 0x7fffffffu ? KVE_ERR_OVERFLOW
                                          : KVE_OK;
    FZ_CHECK(st == want && (st != KVE_OK || out == cap),
             "kve_schedule_capacity(B %u, W %u, r %u, flags 0x%x, P %u): %s %u, want %s %llu",
             s.budget, s.window, s.interval, s.flags, prompt, kve_status_string(st), out,
             kve_status_string(want), (unsigned long long)cap);
    if (st != KVE_OK)
        FZ_CHECK_ERROR_MESSAGE(st);
    FZ_CHECK(kve_schedule_capacity(NULL, prompt, &out) == KVE_ERR_NULL &&
                 kve_schedule_capacity(&s, prompt, NULL) == KVE_ERR_NULL,
             "kve_schedule_capacity with a NULL argument accepted");
}

/* Another thread's context: @p arg (a count) states created and destroyed. */
static void *churn(void *arg)
{
    kve_context *c = NULL;
    if (kve_context_create(KVE_BACKEND_CPU, &c) != KVE_OK)
        return NULL;
    kve_state_desc d = {{1, 0, 8, 2, 2}, 1, 1, 1, 0, 0, 12, 0, 0, 0};
    for (uintptr_t i = 0; i < (uintptr_t)arg; i++) {
        kve_state *st = NULL;
        if (kve_state_create(c, &d, NULL, 0, &st) == KVE_OK)
            kve_state_destroy(st);
    }
    kve_context_destroy(c);
    return NULL;
}

/* Handles of both kinds, live and destroyed by this thread (at most 64
 * destroys ago: all of them are), passed as either kind: a live handle of
 * the right kind is accepted, a destroyed one refused as destroyed, one of
 * the other kind refused naming its kind; nothing is read through them
 * (ASan). A buffer is freed only by its context, once; one left allocated
 * is freed with its context (LSan). Now and then another thread destroys
 * more states than the quarantine holds first. */
static void op_handles(fz_bytes *in)
{
    enum { N = 4 };
    kve_context *c[N] = {NULL};
    kve_state *st[N] = {NULL};
    int dead[N] = {0};
    kve_state_desc d = {{1, 0, 8, 2, 2}, 1, 1, 1, 0, 0, 12, 0, 0, 0};
    for (int i = 0; i < N; i++) {
        FZ_CHECK(kve_context_create(KVE_BACKEND_CPU, &c[i]) == KVE_OK, "kve_context_create");
        FZ_CHECK(kve_state_create(c[i], &d, NULL, 0, &st[i]) == KVE_OK, "kve_state_create");
    }
    void *buf = NULL;
    uint32_t owner = fz_below(in, N);
    FZ_CHECK(kve_alloc(c[owner], 1 + fz_below(in, 512), &buf) == KVE_OK, "kve_alloc");
    for (int i = 0; i < N; i++)
        if (fz_u8(in) & 1) {
            dead[i] = 1; /* the context, and with it its state and maybe the buffer */
            FZ_CHECK(kve_context_destroy(c[i]) == KVE_OK, "kve_context_destroy");
        } else if (fz_u8(in) & 1) {
            dead[i] = 2; /* the state alone */
            FZ_CHECK(kve_state_destroy(st[i]) == KVE_OK, "kve_state_destroy");
        }
    if (fz_u8(in) < 32) { /* another thread churns past the quarantine's 64 */
        pthread_t t;
        if (pthread_create(&t, NULL, churn, (void *)(uintptr_t)(65 + fz_below(in, 40))) == 0)
            pthread_join(t, NULL);
    }
    for (int k = 0; k < 8; k++) {
        uint32_t i = fz_below(in, N), as = fz_u8(in) % 3;
        kve_state_seq_info info;
        kve_backend b;
        const void *h = fz_u8(in) & 1 ? (const void *)st[i] : (const void *)c[i];
        int is_state = h == (const void *)st[i], gone = is_state ? dead[i] != 0 : dead[i] == 1;
        kve_status s = as == 0 ? kve_state_get_seq((kve_state *)(uintptr_t)h, 0, &info)
                       : as == 1 ? kve_context_get_backend((kve_context *)(uintptr_t)h, &b)
                                 : kve_free(c[i], buf);
        if (as == 2) { /* the buffer: its owner's live context takes it, once */
            int ok = dead[i] != 1 && (i == owner || !buf); /* NULL: any live context */
            FZ_CHECK(ok ? s == KVE_OK : s == KVE_ERR_INVALID, "kve_free of context %u's buffer "
                     "by context %u (dead %d): %s %s", owner, i, dead[i], kve_status_string(s),
                     kve_last_error());
            buf = ok ? NULL : buf;
            continue;
        }
        int right = (as == 0) == is_state;
        const char *want = !right ? (is_state ? "a kve_state" : "a kve_context")
                           : gone ? "was destroyed" : NULL;
        if (!right && gone)
            want = is_state ? "a destroyed kve_state" : "a destroyed kve_context";
        FZ_CHECK(want ? s == KVE_ERR_INVALID && strstr(kve_last_error(), want) : s == KVE_OK,
                 "a %s%s passed as a %s: %s %s (expected %s)", gone ? "destroyed " : "",
                 is_state ? "state" : "context", as == 0 ? "state" : "context",
                 kve_status_string(s), kve_last_error(), want ? want : "KVE_OK");
    }
    for (int i = 0; i < N; i++)
        if (dead[i] != 1)
            FZ_CHECK(kve_context_destroy(c[i]) == KVE_OK, "kve_context_destroy");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fz_bytes in = {data, size};
    uint32_t version = 0;
    FZ_CHECK(kve_version(&version) == KVE_OK &&
                 version == KVE_VERSION_MAJOR * 10000u + KVE_VERSION_MINOR * 100u + KVE_VERSION_PATCH,
             "kve_version: %u", version);
    kve_context *ctx = NULL;
    FZ_CHECK(kve_context_create(KVE_BACKEND_CPU, &ctx) == KVE_OK && ctx, "kve_context_create");
    for (int step = 0; step < 32 && in.n; step++) {
        switch (fz_u8(&in) % 7) {
        case 6: op_handles(&in); break;
        case 0: op_names(&in); break;
        case 1: op_values(&in); break;
        case 2: op_settings(&in, ctx); break;
        case 3: op_memory(&in, ctx); break;
        case 4: op_keys(&in, ctx); break;
        default: op_capacity(&in); break;
        }
    }
    FZ_CHECK(kve_context_destroy(ctx) == KVE_OK && kve_context_destroy(NULL) == KVE_OK,
             "kve_context_destroy");
    return 0;
}
