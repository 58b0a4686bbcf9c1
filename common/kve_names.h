/* kve_names.h — the names of the public enums that count from 0 with no
 * gap (kve_backend, kve_cpu_isa): one table per enum, value i named
 * names[i], read both ways. */
#ifndef KVE_NAMES_H
#define KVE_NAMES_H

#include <stdio.h>
#include <strings.h>

#include "kve_error.h"

/* names[value], or "?" outside the table. */
static inline const char *kve_name_of(const char *const *names, int n, int value)
{
    return value >= 0 && value < n ? names[value] : "?";
}

/* *out = the value named @p name (in any case); else @p status with the
 * message "<what>"<name>": expected a, b, c or d" (the table's names). */
static inline kve_status kve_name_parse(const char *const *names, int n, kve_status status,
                                        const char *what, const char *name, int *out)
{
    for (int i = 0; i < n; i++)
        if (strcasecmp(name, names[i]) == 0) {
            *out = i;
            return KVE_OK;
        }
    char list[128] = "";
    size_t len = 0;
    for (int i = 0; i < n && len < sizeof list; i++)
        len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
                                i == 0 ? "" : i == n - 1 ? " or " : ", ", names[i]);
    return kve_error_set(status, "%s\"%s\": expected %s", what, name, list);
}

#endif
