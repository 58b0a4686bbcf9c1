/*
 * fake_backend.c — a GPU backend library with no GPU behind it, for the
 * install check (check_install.sh): copied as libkvevict_cuda.so next to an
 * installed libkvevict.so, it must be the one the core loads (common/
 * registry.c looks beside itself before the loader's path), and its probe's
 * answer, "no device", the reason `kvevict version` prints.
 */
#include <stddef.h>

#include "kve_backend.h"

static const kve_host_services *kve_fake_host;

static kve_status kve_fake_probe(int *out_available)
{
    *out_available = 0;
    return kve_fake_host->set_error(KVE_ERR_UNAVAILABLE,
                                    "fake CUDA backend of the install check: no device");
}

static const kve_backend_ops kve_fake_ops = {
    .abi_version = KVE_BACKEND_ABI_VERSION,
    .kind = KVE_BACKEND_CUDA,
    .name = "cuda",
    .probe = kve_fake_probe,
};

__attribute__((visibility("default"))) const kve_backend_ops *
kve_backend_entry_v1(const kve_host_services *host)
{
    if (!host || host->abi_version != KVE_BACKEND_ABI_VERSION)
        return NULL;
    kve_fake_host = host;
    return &kve_fake_ops;
}
