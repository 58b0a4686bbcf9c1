/*
 * fuzz_score.h — what the files of the fuzz_score harness share.
 * fuzz_score.c decodes the kve_score calls and drives the rest;
 * fuzz_score_model.c holds the header's validity model of a kve_score call
 * and the checks of its result; fuzz_score_state.c the kve_state_score part;
 * fuzz_score_stats.c the kve_triattention_stats_load part. Each part reads
 * the same fz_bytes in the order fuzz_score.c calls them.
 */
#ifndef KVE_FUZZ_SCORE_H
#define KVE_FUZZ_SCORE_H

#include "fuzz_common.h"

/* What an output element holds before a storing (not accumulating) call: a
 * NaN, so a candidate's finite score after it was written by the call. */
#define FZ_CANARY 0x7fa5a5a5u

/* Elements [from, to) of @p sc as a call with @p flags finds them: the
 * canary, or small numbers when accumulating. */
void fz_fill_scores(float *sc, size_t from, size_t to, uint32_t flags);

/* Bytes of one key element (f32 4, f16 and bf16 2). */
size_t fz_dtype_size(kve_dtype t);

/* The key of head @p h at in-page slot @p in of page @p page. */
const unsigned char *fz_key_at(const kve_key_cache *k, size_t page, size_t in, uint32_t h);

/* What the header says of @p d: 1 valid (must be accepted), 0 invalid (must
 * be refused), -1 where the header leaves it open or the harness does not
 * model it. */
int fz_score_valid(const kve_score_desc *d);

/* The checks of a kve_score call's status @p st and outputs, @p before the
 * @p n scores as they were before it, @p valid what fz_score_valid said. */
void fz_check_result(const kve_score_desc *d, kve_status st, const float *before, size_t n,
                     int valid);

/* A small KVE_SCORED state, when the input asks for one, scored and appended
 * to for a few steps. */
void fz_scored_state_run(fz_bytes *in, kve_context *ctx, uint64_t *mix);

/* kve_triattention_stats_load on the input's tail, or on a calibration file
 * written from decoded sizes and values. */
void fz_stats_file(fz_bytes *in, uint64_t *mix);

#endif
