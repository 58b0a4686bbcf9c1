/* plan_refusal.c — the words of the planner's refusal reasons
 * (kve_plan_refusal, kve_backend.h), for the messages that name them. */
#include "kve_backend.h"

const char *kve_plan_refusal_text(uint32_t why)
{
    static const char *const text[] = {"accepted",
                                       "must be 0..max_seqs-1",
                                       "holds no sequence",
                                       "is listed twice among the call's rows with tokens",
                                       "has n_new[i] > max_new",
                                       "would pass position 2^31-1",
                                       "brings the call past out->max_tokens tokens",
                                       /* (parenthesized: one element, for clang's
                                        * -Wstring-concatenation) */
                                       ("would run two rounds, or take more than the window W "
                                        "of its tokens before its round (a KVE_SCORED state)")};
    return why < sizeof text / sizeof *text ? text[why] : "refused";
}
