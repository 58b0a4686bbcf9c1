/*
 * registry.c — which backends exist here. The CPU backend is linked in; GPU
 * backends are shared objects loaded on first use, kept only when their ABI
 * matches and their probe finds a device.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kve_backend.h"
#include "kve_registry.h"
#include "kve_error.h"
#include "kve_names.h"

static const kve_host_services kve_services = {KVE_BACKEND_ABI_VERSION, kve_error_set};

/* kve_backend's names, by value (kve_names.h). */
static const char *const kve_backend_names[] = {"auto", "cpu", "cuda", "hip"};
enum { KVE_N_BACKEND_NAMES = sizeof kve_backend_names / sizeof kve_backend_names[0] };
_Static_assert(KVE_N_BACKEND_NAMES == KVE_BACKEND_HIP + 1, "a name for every kve_backend");

typedef struct {
    kve_backend kind;
    const char *library; /* soname dlopen looks for */
    const kve_backend_ops *ops;
    pthread_once_t once;
    char reason[512]; /* why ops is NULL, once loading was tried */
} kve_gpu_slot;

static kve_gpu_slot kve_gpu_slots[] = {
    {KVE_BACKEND_CUDA, "libkvevict_cuda.so", NULL, PTHREAD_ONCE_INIT, ""},
    {KVE_BACKEND_HIP, "libkvevict_hip.so", NULL, PTHREAD_ONCE_INIT, ""},
};

/* dlopen of @p library in @p dir (a folder, without the trailing '/');
 * NULL with @p why set to the loader's message. *found says whether the
 * file is there, so that a library that exists but cannot be loaded (a
 * runtime it links is missing) is reported as such and not looked up again
 * elsewhere. */
static void *kve_open_in(const char *dir, size_t dir_len, const char *library, int *found,
                         char *why, size_t why_size)
{
    char path[4096];
    *found = 0;
    if (dir_len + strlen(library) + 2 > sizeof path) {
        snprintf(why, why_size, "%.*s/%s: path too long", (int)(dir_len > 256 ? 256 : dir_len),
                 dir, library);
        return NULL;
    }
    snprintf(path, sizeof path, "%.*s/%s", (int)dir_len, dir, library);
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *err = dlerror();
        *found = access(path, F_OK) == 0;
        snprintf(why, why_size, "%s", err ? err : "not found");
    }
    return handle;
}

/* @p library, looked for (docs/GPU.md "Loading at run time"): only in
 * $KVE_BACKEND_DIR when that is set (tests point it at a build tree);
 * otherwise next to the core library this code was loaded from (dladdr;
 * the program itself when the core is linked statically), where the build
 * and cmake --install put the backends, then on the loader's path. NULL
 * with @p why set to the reason of the last place that had the file, or of
 * the last place tried. */
static void *kve_open_backend(const char *library, char *why, size_t why_size)
{
    int found = 0;
    const char *dir = getenv("KVE_BACKEND_DIR");
    if (dir && *dir)
        return kve_open_in(dir, strlen(dir), library, &found, why, why_size);
    Dl_info self;
    const char *slash = NULL;
    if (dladdr(kve_gpu_slots, &self) && self.dli_fname)
        slash = strrchr(self.dli_fname, '/');
    if (slash) {
        void *handle = kve_open_in(self.dli_fname, (size_t)(slash - self.dli_fname), library,
                                   &found, why, why_size);
        if (handle || found)
            return handle;
    }
    void *handle = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *err = dlerror();
        snprintf(why, why_size, "%s", err ? err : "not found");
    }
    return handle;
}

/* The table of @p slot's library, or NULL with slot->reason saying why: the
 * loader's message (no library, or a runtime it links is missing), a
 * missing entry point, another ABI, or what the backend's probe said (it
 * reports through the error service: no driver, an old one, no device). */
static const kve_backend_ops *kve_load_gpu(kve_gpu_slot *slot)
{
    const char *library = slot->library;
    char why[400];
    void *handle = kve_open_backend(library, why, sizeof why);
    if (!handle) {
        snprintf(slot->reason, sizeof slot->reason, "%s cannot be loaded: %s", library, why);
        return NULL;
    }
    kve_backend_entry_fn entry = NULL;
    *(void **)&entry = dlsym(handle, KVE_BACKEND_ENTRY_SYMBOL);
    const kve_backend_ops *ops = entry ? entry(&kve_services) : NULL;
    int available = 0;
    if (!entry || !ops || ops->abi_version != KVE_BACKEND_ABI_VERSION || !ops->probe)
        snprintf(slot->reason, sizeof slot->reason,
                 "%s is not a kvevict backend of ABI %u (no %s, or another ABI)", library,
                 KVE_BACKEND_ABI_VERSION, KVE_BACKEND_ENTRY_SYMBOL);
    else {
        kve_error_clear();
        kve_status st = ops->probe(&available);
        const char *said = kve_last_error();
        if (st == KVE_OK && available) {
            kve_error_clear();
            return ops; /* the handle stays open for the life of the process */
        }
        snprintf(slot->reason, sizeof slot->reason, "%s", *said ? said : "its probe found no device");
        kve_error_clear();
    }
    dlclose(handle);
    return NULL;
}

static void kve_load_cuda(void) { kve_gpu_slots[0].ops = kve_load_gpu(&kve_gpu_slots[0]); }
static void kve_load_hip(void) { kve_gpu_slots[1].ops = kve_load_gpu(&kve_gpu_slots[1]); }

const char *kve_registry_reason(kve_backend backend)
{
    if (!kve_registry_get(backend)) {
        for (size_t i = 0; i < sizeof kve_gpu_slots / sizeof kve_gpu_slots[0]; i++)
            if (kve_gpu_slots[i].kind == backend)
                return kve_gpu_slots[i].reason;
    }
    return "";
}

const kve_backend_ops *kve_registry_get(kve_backend backend)
{
    switch (backend) {
    case KVE_BACKEND_CPU: return kve_cpu_backend_ops();
    case KVE_BACKEND_CUDA:
        pthread_once(&kve_gpu_slots[0].once, kve_load_cuda);
        return kve_gpu_slots[0].ops;
    case KVE_BACKEND_HIP:
        pthread_once(&kve_gpu_slots[1].once, kve_load_hip);
        return kve_gpu_slots[1].ops;
    case KVE_BACKEND_AUTO: break;
    }
    return NULL;
}

kve_status kve_registry_resolve(kve_backend requested, kve_backend *out)
{
    if (requested != KVE_BACKEND_AUTO) {
        *out = requested;
        return KVE_OK;
    }
    const char *env = getenv("KVE_BACKEND");
    if (env && *env) {
        int v = 0;
        KVE_TRY(kve_name_parse(kve_backend_names, KVE_N_BACKEND_NAMES, KVE_ERR_ENV, "KVE_BACKEND=",
                               env, &v));
        kve_backend named = (kve_backend)v;
        if (named != KVE_BACKEND_AUTO) {
            *out = named;
            return KVE_OK;
        }
    }
    static const kve_backend order[] = {KVE_BACKEND_CUDA, KVE_BACKEND_HIP, KVE_BACKEND_CPU};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        if (kve_registry_get(order[i])) {
            *out = order[i];
            return KVE_OK;
        }
    }
    return kve_error_set(KVE_ERR_INTERNAL, "no backend available (the CPU backend is missing)");
}

const char *kve_backend_name(kve_backend backend)
{
    return kve_name_of(kve_backend_names, KVE_N_BACKEND_NAMES, (int)backend);
}

kve_status kve_backend_from_name(const char *name, kve_backend *out)
{
    KVE_RETURN_ERROR_IF(!name, KVE_ERR_NULL, "name is NULL");
    KVE_RETURN_ERROR_IF(!out, KVE_ERR_NULL, "out is NULL");
    int v = 0;
    KVE_TRY(kve_name_parse(kve_backend_names, KVE_N_BACKEND_NAMES, KVE_ERR_INVALID, "backend name ",
                           name, &v));
    *out = (kve_backend)v;
    return KVE_OK;
}

kve_status kve_backend_available(kve_backend backend, int *out_available)
{
    KVE_RETURN_ERROR_IF(!out_available, KVE_ERR_NULL, "out_available is NULL");
    KVE_RETURN_ERROR_IF(backend < KVE_BACKEND_AUTO || backend > KVE_BACKEND_HIP, KVE_ERR_INVALID,
                        "backend = %d: not a kve_backend value", (int)backend);
    *out_available = backend == KVE_BACKEND_AUTO || kve_registry_get(backend) != NULL;
    return KVE_OK;
}
