/*
 * kve_keystream — raw keys of the spec (kve_keys on the CPU backend) as
 * binary on stdout, for `dieharder -g 200` (docs/STATISTICS.md).
 *
 *   kve_keystream ORDER [--seed S] [--count N]
 *
 * ORDER says which coordinate runs consecutively, every other one fixed:
 *   pos    positions 0, 1, 2, ... of one head (layer 0, head 0, round 0)
 *   head   heads 0, 1, 2, ... at one position
 *   round  rounds 0, 1, 2, ... of one token
 *   seq    seq_ids 0, 1, 2, ... at one token
 * A u32 coordinate that wraps after 2^32 keys moves the next fixed one
 * (layer) on, so the stream never repeats. Keys go out as 8 little-endian
 * bytes each, until --count keys (default: forever, until stdout closes).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvevict.h"

enum { KEYS_PER_CALL = 1 << 14 };

typedef enum { ORDER_POS, ORDER_HEAD, ORDER_ROUND, ORDER_SEQ } key_order;

static int parse_order(const char *name, key_order *out)
{
    static const char *const names[] = {"pos", "head", "round", "seq"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0) {
            *out = (key_order)i;
            return 0;
        }
    return -1;
}

/* The i-th coordinate of the stream (i counts keys from 0). */
static kve_coord coord_at(key_order order, uint64_t i)
{
    kve_coord c = {.seq_id = 1, .layer = 0, .head = 0, .pos = 0, .round = 0};
    uint32_t low = (uint32_t)i, high = (uint32_t)(i >> 32);
    switch (order) {
    case ORDER_POS: c.pos = low; c.layer = high; break;
    case ORDER_HEAD: c.head = low; c.layer = high; break;
    case ORDER_ROUND: c.round = low; c.layer = high; break;
    case ORDER_SEQ: c.seq_id = i; break;
    }
    return c;
}

static int usage(void)
{
    fprintf(stderr, "usage: kve_keystream pos|head|round|seq [--seed S] [--count N]\n");
    return 2;
}

int main(int argc, char **argv)
{
    key_order order;
    uint64_t seed = 42, count = UINT64_MAX;
    if (argc < 2 || parse_order(argv[1], &order) != 0)
        return usage();
    for (int a = 2; a < argc; a++) {
        if (a + 1 >= argc)
            return usage();
        char *end;
        errno = 0;
        uint64_t v = strtoull(argv[a + 1], &end, 0);
        if (errno || *end || end == argv[a + 1])
            return usage();
        if (strcmp(argv[a], "--seed") == 0)
            seed = v;
        else if (strcmp(argv[a], "--count") == 0)
            count = v;
        else
            return usage();
        a++;
    }
    kve_context *ctx;
    kve_status st = kve_context_create(KVE_BACKEND_CPU, &ctx);
    if (st != KVE_OK) {
        fprintf(stderr, "kve_keystream: %s: %s\n", kve_status_string(st), kve_last_error());
        return 1;
    }
    /* One thread: the battery, not the generator, is the slow side. */
    st = kve_context_set_threads(ctx, 1);
    if (st != KVE_OK) {
        fprintf(stderr, "kve_keystream: %s: %s\n", kve_status_string(st), kve_last_error());
        kve_context_destroy(ctx);
        return 1;
    }
    static kve_coord coords[KEYS_PER_CALL];
    static unsigned char bytes[KEYS_PER_CALL * 8];
    static uint64_t keys[KEYS_PER_CALL];
    for (uint64_t done = 0; done < count;) {
        size_t n = count - done < KEYS_PER_CALL ? (size_t)(count - done) : KEYS_PER_CALL;
        for (size_t k = 0; k < n; k++)
            coords[k] = coord_at(order, done + k);
        st = kve_keys(ctx, seed, 0, coords, n, keys);
        if (st != KVE_OK) {
            fprintf(stderr, "kve_keystream: %s: %s\n", kve_status_string(st), kve_last_error());
            kve_context_destroy(ctx);
            return 1;
        }
        /* Little-endian bytes whatever the host, so the stream is the spec's. */
        for (size_t k = 0; k < n; k++)
            for (int b = 0; b < 8; b++)
                bytes[8 * k + b] = (unsigned char)(keys[k] >> (8 * b));
        if (fwrite(bytes, 8, n, stdout) != n)
            break; /* the reader closed the pipe: it has all it wants */
        done += n;
    }
    kve_context_destroy(ctx);
    return 0;
}
