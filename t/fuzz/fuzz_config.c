/*
 * fuzz_config.c -- config_load() on any file, and the round trip of what
 * it accepted through config_dump().
 *
 * Each input is written to a scratch file and loaded over the defaults.
 * Promises checked: a refusal gives a "FILE:LINE: ..." or "FILE: ..."
 * reason; an accepted file dumps (config_dump) to a file that loads again,
 * and dumps to exactly the same text -- the dump is "a loadable file".
 */
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "ratelimit.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);

static char fuzz_in[64], fuzz_dump[64];

/* Creates a scratch file (removed when the process ends) in TMPDIR, or
 * else in memory (/dev/shm, several times faster than a disk), or /tmp. */
static int
fuzz_scratch(char *path, size_t len)
{
    const char *dir = getenv("TMPDIR");
    int fd;

    if (dir == NULL || *dir == '\0' || strlen(dir) > len - 16)
        dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(path, len, "%s/rlfuzz.XXXXXX", dir);
    if ((fd = mkstemp(path)) == -1)
        return -1;
    close(fd);
    return 0;
}

static void
fuzz_cleanup(void)
{
    unlink(fuzz_in);
    unlink(fuzz_dump);
}

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    if (fuzz_scratch(fuzz_in, sizeof(fuzz_in)) == -1 ||
        fuzz_scratch(fuzz_dump, sizeof(fuzz_dump)) == -1) {
        perror("fuzz_config: mkstemp");
        exit(1);
    }
    atexit(fuzz_cleanup);
    return 0;
}

/* Writes n bytes to path, replacing it.  Returns 0 or -1. */
static int
fuzz_write(const char *path, const void *p, size_t n)
{
    FILE *fp = fopen(path, "w");
    int rc;

    if (fp == NULL)
        return -1;
    rc = fwrite(p, 1, n, fp) == n ? 0 : -1;
    return fclose(fp) == 0 ? rc : -1;
}

/* The dump of cfg, as a malloc()ed string (NULL when out of memory). */
static char *
fuzz_dump_text(const struct rl_config *cfg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&text, &len);

    if (fp == NULL)
        return NULL;
    config_dump(cfg, fp);
    fclose(fp);
    return text;
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct rl_config cfg, again;
    char err[700], *first, *second;

    if (fuzz_write(fuzz_in, data, size) == -1)
        return 0;
    config_defaults(&cfg);
    err[0] = '\0';
    if (config_load(&cfg, fuzz_in, err, sizeof(err)) == -1) {
        fuzz_assert(strncmp(err, fuzz_in, strlen(fuzz_in)) == 0 &&
            err[strlen(fuzz_in)] == ':');
        return 0;
    }
    if ((first = fuzz_dump_text(&cfg)) == NULL)
        return 0;
    fuzz_assert(fuzz_write(fuzz_dump, first, strlen(first)) == 0);
    config_defaults(&again);
    err[0] = '\0';
    if (config_load(&again, fuzz_dump, err, sizeof(err)) == -1) {
        fprintf(stderr, "the dump does not load: %s\n--- dump:\n%s", err,
            first);
        abort();
    }
    second = fuzz_dump_text(&again);
    fuzz_assert(second != NULL && strcmp(first, second) == 0);
    free(first);
    free(second);
    return 0;
}
