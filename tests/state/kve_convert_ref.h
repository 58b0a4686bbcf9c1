/* kve_convert_ref.h — a reference of kve_cache_write's element conversions
 * written from the formats' definitions rather than from bit tricks: every
 * value of a format is decoded with ldexp, and a binary32 value narrows to
 * the nearest of them (a binary search over the sorted table), ties to the
 * even code; fp8 saturates at its largest value as vLLM's __NV_SATFINITE
 * conversion does, f16/bf16 round to inf as IEEE 754 says (from the
 * midpoint between the largest value and the next power of two up). NaN
 * becomes the all-ones NaN with the sign clear. */
#ifndef KVE_CONVERT_REF_H
#define KVE_CONVERT_REF_H

#include <math.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "kvevict.h"

typedef struct {
    int ebits, mbits, no_inf, saturate;
    uint32_t n_pos;  /* positive finite codes 0 .. n_pos-1, in increasing order */
    double *vals;    /* [n_pos] */
} kr_format;

static inline uint32_t kr_size(kve_dtype t)
{
    return t == KVE_DTYPE_F32 ? 4 : (t == KVE_DTYPE_F16 || t == KVE_DTYPE_BF16) ? 2 : 1;
}

static inline float kr_f32(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static inline uint32_t kr_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

/* The value of positive code @p c of a format (e exponent, m mantissa bits). */
static inline double kr_decode_pos(uint32_t c, int ebits, int mbits)
{
    int bias = (1 << (ebits - 1)) - 1;
    uint32_t e = c >> mbits, m = c & ((1u << mbits) - 1);
    if (e == 0)
        return ldexp((double)m, 1 - bias - mbits);
    return ldexp((double)(m + (1u << mbits)), (int)e - bias - mbits);
}

/* The format of type @p t, its table built once (tests run single-threaded). */
static inline kr_format kr_format_of(kve_dtype t)
{
    static kr_format cache[6];
    if (cache[t].vals)
        return cache[t];
    kr_format f = {5, 10, 0, 0, 0, NULL};
    if (t == KVE_DTYPE_BF16)
        f.ebits = 8, f.mbits = 7;
    if (t == KVE_DTYPE_FP8_E4M3)
        f.ebits = 4, f.mbits = 3, f.no_inf = 1, f.saturate = 1;
    if (t == KVE_DTYPE_FP8_E5M2)
        f.ebits = 5, f.mbits = 2, f.saturate = 1;
    /* E4M3 uses the all-ones exponent for values (all but mantissa 111) */
    f.n_pos = f.no_inf ? (1u << (f.ebits + f.mbits)) - 1 : ((1u << f.ebits) - 1) << f.mbits;
    f.vals = (double *)malloc(f.n_pos * sizeof(double));
    for (uint32_t c = 0; c < f.n_pos; c++)
        f.vals[c] = kr_decode_pos(c, f.ebits, f.mbits);
    cache[t] = f;
    return f;
}

/* Any element of type @p t as binary32 bits (NaN: 0x7FFFFFFF). */
static inline uint32_t kr_widen(uint32_t v, kve_dtype t)
{
    if (t == KVE_DTYPE_F32)
        return isnan(kr_f32(v)) ? 0x7fffffffu : v;
    kr_format f = kr_format_of(t);
    uint32_t sign = (v >> (f.ebits + f.mbits)) & 1, mag = v & ((1u << (f.ebits + f.mbits)) - 1);
    double x;
    if (mag < f.n_pos)
        x = f.vals[mag];
    else if (!f.no_inf && mag == f.n_pos)
        x = INFINITY;
    else
        x = NAN;
    if (isnan(x))
        return 0x7fffffffu;
    return kr_bits((float)(sign ? -x : x));
}

/* Binary32 value @p x narrowed to type @p t. */
static inline uint32_t kr_narrow(float x, kve_dtype t)
{
    if (t == KVE_DTYPE_F32)
        return isnan(x) ? 0x7fffffffu : kr_bits(x);
    kr_format f = kr_format_of(t);
    uint32_t all = (1u << (f.ebits + f.mbits)) - 1, sign = signbit(x) ? all + 1 : 0, code;
    double a = fabs((double)x), top = f.vals[f.n_pos - 1];
    /* IEEE: inf from the midpoint between the largest value and 2^(emax+1) */
    double half_ulp = ldexp(1.0, (int)((f.n_pos - 1) >> f.mbits) - ((1 << (f.ebits - 1)) - 1) -
                                     f.mbits - 1);
    if (isnan(x))
        return all;
    if (a > top) {
        if (f.saturate || a < top + half_ulp)
            code = f.n_pos - 1;
        else
            code = f.n_pos; /* inf */
    } else {
        uint32_t lo = 0, hi = f.n_pos - 1; /* largest code with vals <= a */
        while (lo < hi) {
            uint32_t mid = (lo + hi + 1) / 2;
            if (f.vals[mid] <= a)
                lo = mid;
            else
                hi = mid - 1;
        }
        code = lo;
        if (f.vals[lo] != a) {
            double below = a - f.vals[lo], above = f.vals[lo + 1] - a;
            if (above < below || (above == below && (lo & 1)))
                code = lo + 1;
        }
    }
    return sign | code;
}

/* One element from type @p st to @p dt, divided by @p scale first when
 * @p scaled (vLLM's stored = convert(src / scale)). */
static inline uint32_t kr_convert(uint32_t v, kve_dtype st, kve_dtype dt, int scaled, float scale)
{
    float x = kr_f32(kr_widen(v, st));
    if (scaled)
        x = x / scale;
    return kr_narrow(x, dt);
}

static inline uint32_t kr_load(const unsigned char *p, uint32_t size)
{
    uint32_t v = 0;
    memcpy(&v, p, size); /* little-endian, as the library's targets */
    return v;
}

static inline void kr_store(unsigned char *p, uint32_t size, uint32_t v) { memcpy(p, &v, size); }

#endif
