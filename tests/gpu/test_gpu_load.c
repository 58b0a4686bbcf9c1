/*
 * test_gpu_load.c — loads a GPU backend library the way backends/registry.c
 * does and checks what the core relies on: the entry symbol, the ABI
 * handshake, a complete table, and a probe that answers (0 on a machine
 * without the driver or a device) instead of failing. It runs on every
 * machine, GPU or not, and agrees with kve_backend_available().
 *
 * usage: test_gpu_load cuda|hip path/to/libkvevict_<backend>.so
 */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "kve_backend_impl.h"

static int kve_failures;

#define KVE_EXPECT(cond, ...)                                                                    \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                 \
            fprintf(stderr, __VA_ARGS__);                                                        \
            fputc('\n', stderr);                                                                 \
            kve_failures++;                                                                      \
        }                                                                                        \
    } while (0)

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

int main(int argc, char **argv)
{
    kve_backend kind;
    if (argc != 3 || kve_backend_from_name(argv[1], &kind) != KVE_OK) {
        fprintf(stderr, "usage: test_gpu_load cuda|hip LIBRARY\n");
        return 2;
    }
    /* RTLD_NOW: any symbol the library expects from the core fails here. */
    void *lib = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "FAIL dlopen %s: %s\n", argv[2], dlerror());
        return 1;
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
    kve_context_destroy(ctx);
    printf("%s: loaded, ABI %u, device available: %s\n", argv[2], ops->abi_version,
           available ? "yes" : "no");
    return kve_failures ? 1 : 0;
}
