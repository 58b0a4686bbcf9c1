/*
 * replay_main — runs a harness over files and folders without libFuzzer,
 * so the ordinary builds (gcc, the sanitize preset) replay every corpus
 * file, the issue reproducers among them, as a ctest test. Fails when it
 * found no input: a corpus that vanished must not pass.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", path);
        return -1;
    }
    size_t cap = 1 << 16, n = 0, got;
    uint8_t *buf = (uint8_t *)malloc(cap);
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0)
        if ((n += got) == cap)
            buf = (uint8_t *)realloc(buf, cap *= 2);
    fclose(f);
    if (!buf)
        return -1;
    /* exactly n bytes, as libFuzzer gives them */
    uint8_t *exact = (uint8_t *)malloc(n ? n : 1);
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 1;
}

int main(int argc, char **argv)
{
    long inputs = 0;
    for (int a = 1; a < argc; a++) {
        struct stat st;
        if (stat(argv[a], &st) != 0) {
            fprintf(stderr, "no such input: %s\n", argv[a]);
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (replay_file(argv[a]) < 0)
                return 1;
            inputs++;
            continue;
        }
        DIR *dir = opendir(argv[a]);
        struct dirent *e;
        while (dir && (e = readdir(dir)) != NULL) {
            if (e->d_name[0] == '.')
                continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[a], e->d_name);
            if (replay_file(path) < 0)
                return 1;
            inputs++;
        }
        if (dir)
            closedir(dir);
    }
    printf("replayed %ld inputs\n", inputs);
    return inputs > 0 ? 0 : 1;
}
