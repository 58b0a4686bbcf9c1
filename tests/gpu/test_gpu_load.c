/*
 * test_gpu_load.c — loads a GPU backend library the way frontend/registry.c
 * does and checks what the core relies on: the entry symbol, the ABI
 * handshake, a complete table, and a probe that answers (0 on a machine
 * without the driver or a device) instead of failing. It runs on every
 * machine, GPU or not, and agrees with kve_backend_available().
 *
 * usage: test_gpu_load cuda|hip path/to/libkvevict_<backend>.so
 *        test_gpu_load --missing cuda|hip
 *
 * A library that was not built (gpu_check.sh builds only the targets it
 * needs) is a skip, exit 77, with the reason; one that is there but cannot
 * be loaded here (the HIP library on an NVIDIA machine: no libamdhip64) is
 * a pass when the core says "not available" with the loader's reason.
 * --missing checks that path of the core with no library to find.
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "kve_backend.h"
#include "kve_expect.h"



static kve_status kve_test_set_error(kve_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "  backend message: ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return status;
}

/* The core's answer for a backend it cannot use: not available, and a
 * context refused with KVE_ERR_UNAVAILABLE whose message contains @p why. */
static void kve_expect_unavailable(kve_backend kind, const char *why)
{
    int core_says = -1;
    KVE_EXPECT(kve_backend_available(kind, &core_says) == KVE_OK && core_says == 0,
               "kve_backend_available says %d", core_says);
    kve_context *ctx = NULL;
    kve_status st = kve_context_create(kind, &ctx);
    KVE_EXPECT(st == KVE_ERR_UNAVAILABLE, "kve_context_create: %s", kve_status_string(st));
    KVE_EXPECT(strstr(kve_last_error(), why) != NULL, "the reason \"%s\" does not say \"%s\"",
               kve_last_error(), why);
    kve_context_destroy(ctx);
    printf("not available, as the core says: %s\n", kve_last_error());
}

int main(int argc, char **argv)
{
    kve_backend kind;
    if (argc == 3 && strcmp(argv[1], "--missing") == 0 &&
        kve_backend_from_name(argv[2], &kind) == KVE_OK) {
        /* The caller points KVE_BACKEND_DIR at a folder without the library;
         * the loader's path must not have it either. */
        kve_expect_unavailable(kind, kind == KVE_BACKEND_CUDA ? "libkvevict_cuda.so cannot be loaded"
                                                              : "libkvevict_hip.so cannot be loaded");
        return kve_failures ? 1 : 0;
    }
    if (argc != 3 || kve_backend_from_name(argv[1], &kind) != KVE_OK) {
        fprintf(stderr, "usage: test_gpu_load cuda|hip LIBRARY | --missing cuda|hip\n");
        return 2;
    }
    if (access(argv[2], F_OK) != 0) {
        printf("SKIP: %s was not built in this tree (build its target to test it)\n", argv[2]);
        return 77;
    }
    /* RTLD_NOW: any symbol the library expects from the core fails here. */
    void *lib = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        /* Built but not loadable here, e.g. its GPU runtime is missing: the
         * core must say so rather than fail. */
        const char *why = dlerror();
        printf("%s cannot be loaded here: %s\n", argv[2], why ? why : "?");
        kve_expect_unavailable(kind, "cannot be loaded");
        return kve_failures ? 1 : 0;
    }
    kve_backend_entry_fn entry = NULL;
    *(void **)&entry = dlsym(lib, KVE_BACKEND_ENTRY_SYMBOL);
    KVE_EXPECT(entry != NULL, "no %s in %s", KVE_BACKEND_ENTRY_SYMBOL, argv[2]);
    if (!entry)
        return 1;
    kve_host_services wrong = {KVE_BACKEND_ABI_VERSION + 1, kve_test_set_error};
    KVE_EXPECT(entry(&wrong) == NULL, "a wrong host ABI version was accepted");
    KVE_EXPECT(entry(NULL) == NULL, "a NULL host was accepted");
    kve_host_services host = {KVE_BACKEND_ABI_VERSION, kve_test_set_error};
    const kve_backend_ops *ops = entry(&host);
    KVE_EXPECT(ops != NULL, "entry returned NULL");
    if (!ops)
        return 1;
    KVE_EXPECT(ops->abi_version == KVE_BACKEND_ABI_VERSION, "abi_version %u", ops->abi_version);
    KVE_EXPECT(ops->kind == kind, "kind %d", (int)ops->kind);
    KVE_EXPECT(ops->name && strcmp(ops->name, argv[1]) == 0, "name %s", ops->name);
    KVE_EXPECT(ops->host_memory == 0, "a GPU backend's memory is not host memory");
    KVE_EXPECT(ops->probe && ops->context_init && ops->context_fini && ops->set_device &&
                   ops->alloc && ops->free && ops->copy && ops->synchronize && ops->keys &&
                   ops->evict_workspace_size && ops->evict && ops->compact &&
                   ops->state_update && ops->cache_write,
               "the table lacks an operation");
    int available = -1, core_says = -1;
    KVE_EXPECT(ops->probe(&available) == KVE_OK, "probe failed");
    KVE_EXPECT(available == 0 || available == 1, "probe said %d", available);
    KVE_EXPECT(kve_backend_available(kind, &core_says) == KVE_OK, "kve_backend_available");
    KVE_EXPECT(core_says == available, "kve_backend_available says %d, the probe %d", core_says,
               available);
    kve_context *ctx = NULL;
    kve_status st = kve_context_create(kind, &ctx);
    KVE_EXPECT(available ? st == KVE_OK : st == KVE_ERR_UNAVAILABLE, "kve_context_create: %s",
               kve_status_string(st));
    /* No device: the probe's reason reaches the user, in the vendor's words. */
    const char *vendor = kind == KVE_BACKEND_CUDA ? "CUDA: " : "HIP: ";
    KVE_EXPECT(available || strstr(kve_last_error(), vendor) != NULL,
               "unavailable without the probe's reason: \"%s\"", kve_last_error());
    if (!available)
        printf("reason: %s\n", kve_last_error());
    kve_context_destroy(ctx);
    printf("%s: loaded, ABI %u, device available: %s\n", argv[2], ops->abi_version,
           available ? "yes" : "no");
    return kve_failures ? 1 : 0;
}
