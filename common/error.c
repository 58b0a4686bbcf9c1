/* error.c — status names and the thread-local last-error message. */
#include <stdarg.h>
#include <stdio.h>

#include "kve_error.h"

static _Thread_local char kve_error_message[512];

kve_status kve_error_set(kve_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(kve_error_message, sizeof kve_error_message, fmt, ap);
    va_end(ap);
    return status;
}

void kve_error_clear(void) { kve_error_message[0] = '\0'; }

const char *kve_last_error(void) { return kve_error_message; }

const char *kve_status_string(kve_status status)
{
    switch (status) {
    case KVE_OK: return "KVE_OK";
    case KVE_ERR_NULL: return "KVE_ERR_NULL";
    case KVE_ERR_RANGE: return "KVE_ERR_RANGE";
    case KVE_ERR_OVERFLOW: return "KVE_ERR_OVERFLOW";
    case KVE_ERR_ALIAS: return "KVE_ERR_ALIAS";
    case KVE_ERR_DUPLICATE: return "KVE_ERR_DUPLICATE";
    case KVE_ERR_INVALID: return "KVE_ERR_INVALID";
    case KVE_ERR_UNAVAILABLE: return "KVE_ERR_UNAVAILABLE";
    case KVE_ERR_NOMEM: return "KVE_ERR_NOMEM";
    case KVE_ERR_WORKSPACE: return "KVE_ERR_WORKSPACE";
    case KVE_ERR_DEVICE: return "KVE_ERR_DEVICE";
    case KVE_ERR_ENV: return "KVE_ERR_ENV";
    case KVE_ERR_INTERNAL: return "KVE_ERR_INTERNAL";
    }
    return "KVE_ERR_UNKNOWN_STATUS";
}

kve_status kve_version(uint32_t *out_version)
{
    KVE_RETURN_ERROR_IF(!out_version, KVE_ERR_NULL, "out_version is NULL");
    *out_version = KVE_VERSION_MAJOR * 10000u + KVE_VERSION_MINOR * 100u + KVE_VERSION_PATCH;
    return KVE_OK;
}
