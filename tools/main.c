/* main.c — the kvevict command line: one subcommand per job. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char kve_usage[] =
    "usage: kvevict <command> [options]   (kvevict <command> --help for each)\n"
    "Random per-head KV-cache eviction with keep-sets identical on every backend.\n"
    "\n"
    "commands:\n"
    "  demo      simulated long-reasoning decode under the paper's schedule\n"
    "  select    evict for one configuration, one JSON line per head\n"
    "  key       the spec's key for coordinates\n"
    "  digest    the keep-sets' digest on each backend; fails when they disagree\n"
    "  vectors   the golden vectors of docs/SPEC.md, checked on this machine\n"
    "  replay    one request's rounds and running digest from ids alone, JSON lines\n"
    "  diff      compare two replay (or digest) logs; name the first divergence\n"
    "  version   library and spec versions, backends available here\n";

static int kve_cmd_version(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "--help")) {
        puts("usage: kvevict version\nThe library and spec versions, and each backend and CPU "
             "ISA: available here,\nor why not.");
        return 0;
    }
    if (argc > 1)
        return kve_cli_usage_error("version: unexpected argument \"%s\" (it takes none)", argv[1]);
    uint32_t v = 0;
    kve_version(&v);
    printf("kvevict %u.%u.%u (keep-set spec v%d)\n", v / 10000, v / 100 % 100, v % 100,
           KVE_SPEC_VERSION);
    static const kve_backend all[] = {KVE_BACKEND_CPU, KVE_BACKEND_CUDA, KVE_BACKEND_HIP};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
        int avail = 0;
        kve_backend_available(all[i], &avail);
        if (avail) {
            printf("backend %-5s available\n", kve_backend_name(all[i]));
            continue;
        }
        /* The context the backend refuses says why (library, driver, device). */
        kve_context *ctx = NULL;
        kve_context_create(all[i], &ctx);
        kve_context_destroy(ctx);
        printf("backend %-5s not available: %s\n", kve_backend_name(all[i]), kve_last_error());
    }
    for (int isa = KVE_CPU_ISA_SCALAR; isa <= KVE_CPU_ISA_AVX512; isa++) {
        int avail = 0;
        kve_cpu_isa_available((kve_cpu_isa)isa, &avail);
        printf("cpu isa %-7s %s\n", kve_cpu_isa_name((kve_cpu_isa)isa),
               avail ? "available" : "not available");
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
        !strcmp(argv[1], "help")) {
        fputs(kve_usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    argc--;
    argv++;
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version"))
        return kve_cmd_version(argc, argv);
    static const struct {
        const char *name;
        int (*run)(int argc, char **argv);
    } commands[] = {{"select", kve_cmd_select}, {"key", kve_cmd_key},
                    {"digest", kve_cmd_digest}, {"vectors", kve_cmd_vectors},
                    {"replay", kve_cmd_replay}, {"diff", kve_cmd_diff},
                    {"demo", kve_cmd_demo}};
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(cmd, commands[i].name))
            return commands[i].run(argc, argv);
    fprintf(stderr, "kvevict: unknown command \"%s\"\n%s", cmd, kve_usage);
    return 2;
}
