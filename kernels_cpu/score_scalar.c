/*
 * score_scalar.c — kve_score's reference kernels: the device body's order
 * of operations exactly (common/score_body.h), so the CPU's scalar
 * ISA and the emulated device agree on every raw score.
 */
#include <math.h>

#include "kve_cpu_kernels.h"
#include "score_body.h"

static void kve_scalar_score_load(const unsigned char *key, uint32_t dtype, uint32_t dim,
                                  float *out)
{
    for (uint32_t e = 0; e < dim; e++)
        out[e] = kve_score_elem(key, dtype, e);
}

static void kve_scalar_score_group(const float *coef, const float *key, float *mag, uint32_t nf,
                                   uint32_t group, float *raw)
{
    for (uint32_t f = 0; f < nf; f++)
        mag[f] = sqrtf(key[f] * key[f] + key[f + nf] * key[f + nf]);
    for (uint32_t j = 0; j < group; j++) {
        const float *re = coef + (size_t)j * 3 * nf, *im = re + nf, *b = im + nf;
        float acc = 0.0f;
        for (uint32_t f = 0; f < nf; f++)
            acc += re[f] * key[f] + im[f] * key[f + nf] + b[f] * mag[f];
        raw[j] = acc;
    }
}

static float kve_scalar_score_knorm(const float *key, uint32_t dim)
{
    float acc = 0.0f;
    for (uint32_t e = 0; e < dim; e++)
        acc += key[e] * key[e];
    return -sqrtf(acc);
}

const kve_score_kernels kve_score_kernels_scalar = {
    .isa = KVE_CPU_ISA_SCALAR,
    .load = kve_scalar_score_load,
    .group = kve_scalar_score_group,
    .knorm = kve_scalar_score_knorm,
    .cands = kve_score_window_cands,
};
