/* cpu_isa.c — the CPU backend's settings: detect once what the CPU and the OS
 * support, pick the ISA (kve_context_set_cpu_isa, KVE_CPU_ISA), name it, and
 * OpenMP's default thread count. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <cpuid.h>

#include "kve_cpu_isa.h"
#include "kve_cpu_kernels.h"
#include "kve_error.h"
#include "kve_names.h"

static kve_cpu_isa kve_best_isa = KVE_CPU_ISA_SCALAR;
static int kve_near_plain, kve_near_plain_forced = -1; /* kve_cpu_near_moves_plain */
static pthread_once_t kve_isa_once = PTHREAD_ONCE_INIT;

static unsigned long long kve_xgetbv0(void)
{
    unsigned int lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((unsigned long long)hi << 32) | lo;
}

/* AMD Zen 3: family 19h (base 0Fh + extended 0Ah), models 00h-0Fh and
 * 20h-5Fh (10h-1Fh and 60h-AFh are Zen 4). @p vendor_b: cpuid 0's ebx;
 * @p sig: cpuid 1's eax. */
static int kve_is_zen3(unsigned int vendor_b, unsigned int sig)
{
    unsigned int family = ((sig >> 8) & 0xf) + ((sig >> 20) & 0xff);
    unsigned int model = ((sig >> 4) & 0xf) | ((sig >> 12) & 0xf0);
    return vendor_b == 0x68747541u /* "Auth" of AuthenticAMD */ && family == 0x19 &&
           (model < 0x10 || (model >= 0x20 && model < 0x60));
}

static void kve_detect_isa(void)
{
    unsigned int a, b, c, d, max_leaf, vendor_b;
    if (!__get_cpuid(0, &max_leaf, &vendor_b, &c, &d) || !__get_cpuid(1, &a, &b, &c, &d))
        return;
    kve_near_plain = kve_is_zen3(vendor_b, a);
    int osxsave = (c >> 27) & 1, avx = (c >> 28) & 1, popcnt = (c >> 23) & 1;
    if (!osxsave || !avx || !popcnt) /* the ISA files are built with -mpopcnt */
        return;
    unsigned long long xcr0 = kve_xgetbv0();
    int ymm_on = (xcr0 & 0x6) == 0x6;           /* SSE + AVX state */
    int zmm_on = ymm_on && (xcr0 & 0xe0) == 0xe0; /* opmask + ZMM state */
    if (!ymm_on || !__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return;
    int avx2 = (b >> 5) & 1, bmi = (b >> 3) & 1, bmi2 = (b >> 8) & 1;
    int avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1, avx512bw = (b >> 30) & 1,
        avx512vl = (b >> 31) & 1;
    if (avx2 && bmi && bmi2)
        kve_best_isa = KVE_CPU_ISA_AVX2;
    if (zmm_on && kve_best_isa == KVE_CPU_ISA_AVX2 && avx512f && avx512dq && avx512bw && avx512vl)
        kve_best_isa = KVE_CPU_ISA_AVX512;
}

kve_cpu_isa kve_cpu_isa_best(void)
{
    pthread_once(&kve_isa_once, kve_detect_isa);
    return kve_best_isa;
}

int kve_cpu_near_moves_plain(void)
{
    pthread_once(&kve_isa_once, kve_detect_isa);
    return kve_near_plain_forced >= 0 ? kve_near_plain_forced : kve_near_plain;
}

void kve_cpu_near_moves_plain_force(int value)
{
    kve_near_plain_forced = value < 0 ? -1 : value != 0;
}

/* kve_cpu_isa's names, by value (kve_names.h). */
static const char *const kve_isa_names[] = {"auto", "scalar", "avx2", "avx512"};
enum { KVE_N_ISA_NAMES = sizeof kve_isa_names / sizeof kve_isa_names[0] };
_Static_assert(KVE_N_ISA_NAMES == KVE_CPU_ISA_AVX512 + 1, "a name for every kve_cpu_isa");

const char *kve_cpu_isa_name(kve_cpu_isa isa)
{
    return kve_name_of(kve_isa_names, KVE_N_ISA_NAMES, (int)isa);
}

kve_status kve_cpu_isa_from_name(const char *name, kve_cpu_isa *out)
{
    KVE_RETURN_ERROR_IF(!name, KVE_ERR_NULL, "name is NULL");
    KVE_RETURN_ERROR_IF(!out, KVE_ERR_NULL, "out is NULL");
    int v = 0;
    KVE_TRY(kve_name_parse(kve_isa_names, KVE_N_ISA_NAMES, KVE_ERR_INVALID, "ISA name ", name, &v));
    *out = (kve_cpu_isa)v;
    return KVE_OK;
}

/* Built into this library and runnable on this CPU. */
static int kve_isa_runs(kve_cpu_isa isa)
{
    return isa >= KVE_CPU_ISA_SCALAR && isa <= kve_cpu_isa_best() && kve_cpu_kernels_get(isa);
}

kve_status kve_cpu_isa_available(kve_cpu_isa isa, int *out_available)
{
    KVE_RETURN_ERROR_IF(!out_available, KVE_ERR_NULL, "out_available is NULL");
    KVE_RETURN_ERROR_IF(isa < KVE_CPU_ISA_AUTO || isa > KVE_CPU_ISA_AVX512, KVE_ERR_INVALID,
                        "isa = %d: not a kve_cpu_isa value", (int)isa);
    *out_available = isa == KVE_CPU_ISA_AUTO || kve_isa_runs(isa);
    return KVE_OK;
}

kve_status kve_cpu_isa_resolve(kve_cpu_isa requested, kve_cpu_isa *out)
{
    KVE_RETURN_ERROR_IF(requested < KVE_CPU_ISA_AUTO || requested > KVE_CPU_ISA_AVX512,
                        KVE_ERR_INVALID, "isa = %d: not a kve_cpu_isa value", (int)requested);
    if (requested == KVE_CPU_ISA_AUTO) {
        const char *env = getenv("KVE_CPU_ISA");
        if (env && *env) {
            int v = 0;
            KVE_TRY(kve_name_parse(kve_isa_names, KVE_N_ISA_NAMES, KVE_ERR_ENV, "KVE_CPU_ISA=", env,
                                   &v));
            kve_cpu_isa named = (kve_cpu_isa)v;
            KVE_RETURN_ERROR_IF(named != KVE_CPU_ISA_AUTO && !kve_isa_runs(named), KVE_ERR_ENV,
                                "KVE_CPU_ISA=\"%s\": this CPU (best: %s) or build cannot run it",
                                env, kve_cpu_isa_name(kve_cpu_isa_best()));
            if (named != KVE_CPU_ISA_AUTO) {
                *out = named;
                return KVE_OK;
            }
        }
        kve_cpu_isa best = kve_cpu_isa_best();
        while (!kve_cpu_kernels_get(best))
            best = (kve_cpu_isa)(best - 1);
        *out = best;
        return KVE_OK;
    }
    KVE_RETURN_ERROR_IF(!kve_isa_runs(requested), KVE_ERR_UNAVAILABLE,
                        "isa = %s: this CPU (best: %s) or build cannot run it",
                        kve_cpu_isa_name(requested), kve_cpu_isa_name(kve_cpu_isa_best()));
    *out = requested;
    return KVE_OK;
}

int kve_cpu_default_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}
