/*
 * convert_body.h — element conversions of kve_cache_write (kve_cache_part),
 * written once for the CPU backend, CUDA, HIP and the host emulator.
 *
 * Everything goes through IEEE binary32 bits: a source element is widened
 * to float exactly (every type here fits in binary32), optionally divided
 * by the scale (the one floating-point operation, an IEEE division on
 * every target: nothing here is built with fast math or flush-to-zero), and
 * narrowed by integer rounding, so each backend writes the same bytes
 * whatever its FPU or intrinsics do with NaN payloads, subnormals and ties.
 *
 * Narrowing rounds to nearest, ties to even. fp8 saturates as vLLM's
 * __NV_SATFINITE conversion does (inf and overflow give +-max); f16 and bf16
 * overflow to +-inf as IEEE and torch do. A NaN becomes the destination's
 * all-ones NaN with the sign clear, as CUDA's conversions give.
 */
#ifndef KVE_CONVERT_BODY_H
#define KVE_CONVERT_BODY_H

#include "kve_device.h"
#include "kvevict.h"

#define KVE_F32_NAN 0x7fffffffu

/* The conversion loops are specialised per (source, cache) type pair
 * (kve_convert_entry): with the types constant, the formats fold into the
 * code and an element costs a few integer operations (one generic loop was
 * 60x slower on the CPU). The GPU's KVE_FN already forces inlining. */
#ifdef KVE_ON_GPU
#define KVE_CV_FN KVE_FN
#else
#define KVE_CV_FN static inline __attribute__((always_inline))
#endif


/* Bytes per element of a kve_dtype (RAW: 1). */
KVE_HD_FN uint32_t kve_dtype_size(uint32_t t)
{
    return t == KVE_DTYPE_F32 ? 4u : (t == KVE_DTYPE_F16 || t == KVE_DTYPE_BF16) ? 2u : 1u;
}

/* A small float format: exponent and mantissa bits; fn = no inf, all ones
 * is the only NaN (E4M3); sat = saturate instead of reaching inf. */
typedef struct kve_fmt {
    uint32_t ebits, mbits, fn, sat;
} kve_fmt;

KVE_CV_FN kve_fmt kve_fmt_of(uint32_t t)
{
    kve_fmt f = {5, 10, 0, 0}; /* F16 */
    if (t == KVE_DTYPE_BF16)
        f.ebits = 8, f.mbits = 7;
    else if (t == KVE_DTYPE_FP8_E4M3)
        f.ebits = 4, f.mbits = 3, f.fn = 1, f.sat = 1;
    else if (t == KVE_DTYPE_FP8_E5M2)
        f.ebits = 5, f.mbits = 2, f.sat = 1;
    return f;
}

/* Exact widening of a small-format value to binary32 bits. */
KVE_CV_FN uint32_t kve_small_to_f32(uint32_t v, kve_fmt f)
{
    uint32_t emask = (1u << f.ebits) - 1, mmask = (1u << f.mbits) - 1;
    uint32_t sign = (v >> (f.ebits + f.mbits)) & 1u, e = (v >> f.mbits) & emask, m = v & mmask;
    int32_t bias = (int32_t)(1u << (f.ebits - 1)) - 1;
    if (e == emask && (!f.fn || m == mmask)) {
        if (m != 0 || f.fn)
            return KVE_F32_NAN;
        return (sign << 31) | 0x7f800000u; /* inf */
    }
    if (e == 0) {
        if (m == 0)
            return sign << 31;
        int32_t ex = 1; /* subnormal: normalise into binary32's wider exponent */
        while (!(m & (1u << f.mbits))) {
            m <<= 1;
            ex--;
        }
        return (sign << 31) | ((uint32_t)(ex - bias + 127) << 23) | ((m & mmask) << (23 - f.mbits));
    }
    return (sign << 31) | ((uint32_t)((int32_t)e - bias + 127) << 23) | (m << (23 - f.mbits));
}

/* m >> shift (1 <= shift <= 24), rounded to nearest, ties to even. */
KVE_CV_FN uint32_t kve_round_shift(uint32_t m, uint32_t shift)
{
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    return q + (rem > half || (rem == half && (q & 1u)));
}

/* Narrowing of binary32 bits @p x to a small format. */
KVE_CV_FN uint32_t kve_f32_to_small(uint32_t x, kve_fmt f)
{
    uint32_t emask = (1u << f.ebits) - 1, mmask = (1u << f.mbits) - 1;
    uint32_t nan = (1u << (f.ebits + f.mbits)) - 1;
    uint32_t max = f.fn ? nan - 1 : ((emask - 1) << f.mbits) | mmask, inf = emask << f.mbits;
    uint32_t sign = (x >> 31) << (f.ebits + f.mbits), ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u)
        return nan;
    uint32_t over = f.sat ? sign | max : f.fn ? nan : sign | inf;
    if (ax == 0x7f800000u)
        return over;
    int32_t fe = (int32_t)(ax >> 23), bias = (int32_t)(1u << (f.ebits - 1)) - 1;
    uint32_t m = ax & 0x7fffffu;
    int32_t e = fe - 127;
    if (fe == 0)
        e = -126; /* binary32 subnormal: no implicit bit */
    else
        m |= 0x800000u;
    int32_t emin = 1 - bias;
    uint32_t code;
    if (e >= emin) /* normal: the rounding may carry into the exponent */
        code = ((uint32_t)(e + bias - 1) << f.mbits) + kve_round_shift(m, 23 - f.mbits);
    else {
        uint32_t shift = 23 - f.mbits + (uint32_t)(emin - e);
        code = shift > 24 ? 0 : kve_round_shift(m, shift); /* below half the least: 0 */
    }
    return code > max ? over : sign | code;
}

/* An element of type @p t (its bits in the low bytes) as binary32 bits. */
KVE_CV_FN uint32_t kve_to_f32(uint32_t v, uint32_t t)
{
    if (t == KVE_DTYPE_F32)
        return (v & 0x7fffffffu) > 0x7f800000u ? KVE_F32_NAN : v;
    if (t == KVE_DTYPE_BF16)
        return ((v & 0x7fffu) > 0x7f80u) ? KVE_F32_NAN : v << 16;
    return kve_small_to_f32(v, kve_fmt_of(t));
}

/* Binary32 bits as an element of type @p t. */
KVE_CV_FN uint32_t kve_from_f32(uint32_t x, uint32_t t)
{
    if (t == KVE_DTYPE_F32)
        return (x & 0x7fffffffu) > 0x7f800000u ? KVE_F32_NAN : x;
    return kve_f32_to_small(x, kve_fmt_of(t));
}

KVE_CV_FN float kve_f32_of_bits(uint32_t b)
{
    union {
        uint32_t u;
        float f;
    } c;
    c.u = b;
    return c.f;
}

KVE_CV_FN uint32_t kve_bits_of_f32(float f)
{
    union {
        uint32_t u;
        float f;
    } c;
    c.f = f;
    return c.u;
}

/* Load and store one element of @p size bytes (aligned: the host checks). */
KVE_CV_FN uint32_t kve_load_elem(const unsigned char *p, uint32_t size)
{
    return size == 4 ? *(const uint32_t *)p : size == 2 ? *(const uint16_t *)p : *p;
}

KVE_CV_FN void kve_store_elem(unsigned char *p, uint32_t size, uint32_t v)
{
    if (size == 4)
        *(uint32_t *)p = v;
    else if (size == 2)
        *(uint16_t *)p = (uint16_t)v;
    else
        *p = (unsigned char)v;
}


/* Elements lane, lane + step, ... below @p n of one entry, converted from
 * @p st to @p dt, each divided by *scale first when @p scale is not NULL;
 * the source dense, the destination's elements @p ds bytes apart. */
KVE_CV_FN void kve_convert_run(unsigned char *dst, size_t ds, uint32_t dt,
                               const unsigned char *src, uint32_t st, const float *scale,
                               uint32_t n, uint32_t lane, uint32_t step)
{
    uint32_t ss = kve_dtype_size(st), dsz = kve_dtype_size(dt);
    if (scale) {
        float s = *scale;
        for (uint32_t i = lane; i < n; i += step) {
            float x = kve_f32_of_bits(kve_to_f32(kve_load_elem(src + (size_t)i * ss, ss), st));
            kve_store_elem(dst + (size_t)i * ds, dsz, kve_from_f32(kve_bits_of_f32(x / s), dt));
        }
        return;
    }
    for (uint32_t i = lane; i < n; i += step)
        kve_store_elem(dst + (size_t)i * ds, dsz,
                       kve_from_f32(kve_to_f32(kve_load_elem(src + (size_t)i * ss, ss), st), dt));
}

/* CALL(T) with the float type @p t as the constant T. */
#define KVE_DTYPE_SWITCH(t, CALL)                                                                \
    switch (t) {                                                                                 \
    case KVE_DTYPE_F32: CALL(KVE_DTYPE_F32); break;                                              \
    case KVE_DTYPE_F16: CALL(KVE_DTYPE_F16); break;                                              \
    case KVE_DTYPE_BF16: CALL(KVE_DTYPE_BF16); break;                                            \
    case KVE_DTYPE_FP8_E4M3: CALL(KVE_DTYPE_FP8_E4M3); break;                                    \
    default: CALL(KVE_DTYPE_FP8_E5M2); break;                                                    \
    }

/* kve_convert_run with the source type made a constant. */
KVE_CV_FN void kve_convert_from(unsigned char *dst, size_t ds, uint32_t dt,
                                const unsigned char *src, uint32_t st, const float *scale,
                                uint32_t n, uint32_t lane, uint32_t step)
{
#define KVE_RUN_FROM(S) kve_convert_run(dst, ds, dt, src, S, scale, n, lane, step)
    KVE_DTYPE_SWITCH(st, KVE_RUN_FROM)
#undef KVE_RUN_FROM
}

/* One entry's share (lane, lane + step, ...) converted: the types made
 * constants (validated: both are float types); the destination's elements
 * @p ds bytes apart. */
KVE_FN void kve_convert_entry(unsigned char *dst, size_t ds, uint32_t dt,
                              const unsigned char *src, uint32_t st, const float *scale,
                              uint32_t n, uint32_t lane, uint32_t step)
{
#define KVE_RUN_TO(D) kve_convert_from(dst, ds, D, src, st, scale, n, lane, step)
    KVE_DTYPE_SWITCH(dt, KVE_RUN_TO)
#undef KVE_RUN_TO
}

#endif /* KVE_CONVERT_BODY_H */
