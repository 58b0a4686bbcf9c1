/*
 * test_api_marks.c — include/kvevict.h's experimental mark (issue 49): a
 * program that does not define KVE_EXPERIMENTAL sees no experimental
 * declaration, and one that does sees them all (test_api_marks_exp.c).
 *
 * This file is compiled without KVE_EXPERIMENTAL (it links kvevict alone, not
 * kve_testlib, which defines it). The two statics below take the names of the
 * experimental functions: they compile only when the header declares no such
 * function, and main() checks at run time that they are the ones it reads.
 */
#ifdef KVE_EXPERIMENTAL
#error "test_api_marks.c must be compiled without KVE_EXPERIMENTAL"
#endif
#include <kvevict.h>
#include <stdio.h>

#ifdef KVEVICT_H_EXPERIMENTAL
#error "include/kvevict.h opened its experimental section without KVE_EXPERIMENTAL"
#endif

static int kve_state_draft = 1;
static int kve_state_score_device = 2;

/* test_api_marks_exp.c: 0 when the experimental functions are declared there. */
int kve_marks_experimental_declared(void);

int main(void)
{
    int fails = 0;
    if (kve_state_draft != 1 || kve_state_score_device != 2) {
        printf("FAIL: the experimental names are not this file's own\n");
        fails++;
    }
    /* The stable API stays declared without the opt-in. */
    kve_status (*append)(kve_state *, uint32_t, const uint32_t *, const uint32_t *,
                         const kve_step_buffers *) = kve_state_append;
    kve_status (*score)(kve_state *, uint32_t, const uint32_t *, const uint32_t *, uint32_t,
                        const kve_score_desc *, float *, size_t, size_t) = kve_state_score;
    if (append == NULL || score == NULL) {
        printf("FAIL: the stable API's addresses\n");
        fails++;
    }
    if (kve_marks_experimental_declared() != 0) {
        printf("FAIL: with KVE_EXPERIMENTAL the experimental functions are not declared\n");
        fails++;
    }
    printf("%s: without KVE_EXPERIMENTAL nothing experimental is declared; with it, "
           "kve_state_draft and kve_state_score_device are\n", fails ? "FAIL" : "ok");
    return fails ? 1 : 0;
}
