/* kve_registry.h — the backends this build can reach (frontend/registry.c):
 * the CPU backend linked in, the GPU backends loaded at run time. */
#ifndef KVE_REGISTRY_H
#define KVE_REGISTRY_H

#include "kve_backend.h"

/* The table of @p backend (not AUTO) or NULL when it cannot be loaded here. */
const kve_backend_ops *kve_registry_get(kve_backend backend);
/* Why kve_registry_get(@p backend) is NULL ("" when it is not): which
 * library, runtime, driver or device is missing. */
const char *kve_registry_reason(kve_backend backend);
/* Resolve AUTO ($KVE_BACKEND, then the first available). */
kve_status kve_registry_resolve(kve_backend requested, kve_backend *out);

#endif
