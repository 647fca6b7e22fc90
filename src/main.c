/*
 * main.c -- ratelimit-fcgi: command line, configuration, socket, pool.
 *
 * Read as a checklist: parse flags, load and (with -t) test the
 * configuration, open or inherit the listening socket, start the pool.
 */
#include <fcntl.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "service.h"

#define DEFAULT_CONFIG "/etc/ratelimit-fcgi/ratelimit.conf"

/* The options in short; ratelimit-fcgi.8 describes the rest (the keys,
 * the signals, the files). */
static void
usage(FILE *fp)
{
    fprintf(fp,
"Usage: ratelimit-fcgi [-c FILE] [-t | -T]\n"
"       ratelimit-fcgi -h | -v\n"
"  -c, --config FILE  configuration file (default " DEFAULT_CONFIG ")\n"
"  -t, --test         test the configuration file and exit (0 valid, 1 not)\n"
"  -T, --test-dump    like -t, then print every key with its value\n"
"  -h, --help         show this help and exit\n"
"  -v, --version      show the version and exit\n"
"The configuration keys, signals and files: man ratelimit-fcgi\n");
}

int
main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "config", required_argument, NULL, 'c' },
        { "test", no_argument, NULL, 't' },
        { "test-dump", no_argument, NULL, 'T' },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'v' },
        { NULL, 0, NULL, 0 },
    };
    static struct rl_config cfg;
    const char *path = DEFAULT_CONFIG;
    const char *inherited;
    char err[4096], *line;
    int ch, test = 0, fd, rc;

    while ((ch = getopt_long(argc, argv, "c:tThv", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            path = optarg;
            break;
        case 't':
            test = 1;
            break;
        case 'T':
            test = 2;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'v':
            printf("ratelimit-fcgi %s\n", RL_VERSION);
            return 0;
        default:
            fprintf(stderr, "Try 'ratelimit-fcgi --help'.\n");
            return 2;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "ratelimit-fcgi: unexpected argument \"%s\"\n"
            "Try 'ratelimit-fcgi --help'.\n", argv[optind]);
        return 2;
    }

    config_defaults(&cfg);
    if (config_load(&cfg, path, err, sizeof(err)) == -1) {
        /* One line per error of the file. */
        for (line = strtok(err, "\n"); line != NULL;
            line = strtok(NULL, "\n"))
            fprintf(stderr, "ratelimit-fcgi: %s\n", line);
        if (test)
            fprintf(stderr, "ratelimit-fcgi: configuration file %s test "
                "failed\n", path);
        return 1;
    }
    if (test) {
        if (test == 2)
            config_dump(&cfg, stdout);
        fprintf(stderr, "ratelimit-fcgi: configuration file %s test is "
            "successful\n", path);
        return 0;
    }

    log_init("ratelimit-fcgi", cfg.log_target, cfg.log_level);
    master_set_argv(argv);
    /* A worker whose master died starts us with the socket still open. */
    if ((inherited = getenv("RATELIMIT_FCGI_LISTEN_FD")) != NULL) {
        fd = atoi(inherited);
        unsetenv("RATELIMIT_FCGI_LISTEN_FD");
        if (fd < 0 || fcntl(fd, F_GETFD) == -1) {
            log_error("RATELIMIT_FCGI_LISTEN_FD: %s is not an open file",
                inherited);
            return 1;
        }
        fcntl(fd, F_SETFD, FD_CLOEXEC);
    } else if ((fd = listen_open(&cfg, err, sizeof(err))) == -1) {
        log_error("%s", err);
        return 1;
    }
    log_info("ratelimit-fcgi %s: listening on %s, %ld workers, redis %s",
        RL_VERSION, cfg.listen[0] ? cfg.listen : "fd 0", cfg.workers,
        cfg.redis);
    rc = master_run(&cfg, fd);
    if (fd != 0)
        listen_cleanup(&cfg);
    return rc;
}
