/*
 * main.c -- ratelimit-fcgi: command line, configuration, socket, pool.
 *
 * Read as a checklist: parse flags, load and (with -t) test the
 * configuration, open or inherit the listening socket, start the pool.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "service.h"

#define DEFAULT_CONFIG "/etc/ratelimit-fcgi/ratelimit.conf"

/* The options in short; ratelimit-fcgi.8 describes the rest (the keys,
 * the signals, the files). */
static void
usage(FILE *fp)
{
    fprintf(fp,
"Usage: ratelimit-fcgi [-c FILE] [-t | -T | -C]\n"
"       ratelimit-fcgi -h | -v | -K\n"
"  -c, --config FILE  configuration file (default " DEFAULT_CONFIG ")\n"
"  -t, --test         test the configuration file and exit (0 valid, 1 not)\n"
"  -T, --test-dump    like -t, then print every key with its value\n"
"  -C, --check-setup  like -t, then connect to PostgreSQL and Redis as this\n"
"                     user and check the schema, grants, script and socket\n"
"                     directory (one line per failure with its fix)\n"
"  -h, --help         show this help and exit\n"
"  -v, --version      show the version and exit\n"
"  -K, --keys         print each key's name, type, default, min, max, unit\n"
"                     and choices, tab-separated, and exit\n"
"The configuration keys, signals and files: man ratelimit-fcgi\n");
}

/* Who the pool will run as: the uid and gid of "user" and "group", or -1
 * to keep them. */
struct main_identity {
    uid_t uid;
    gid_t gid;
};

/*
 * Decides, before anything is opened, who the pool runs as, and whether
 * that is allowed: started as root, "user" names the account to switch to
 * and without it we refuse (unless allow_root = on); started as anyone
 * else, "user" and "group" can only name who we already are.  Returns 0,
 * 1 (a warning in err: root is allowed), or -1 with the reason in err.
 */
static int
main_identity(const struct rl_config *cfg, struct main_identity *id,
    char *err, size_t errlen)
{
    struct passwd *pw = NULL;
    struct group *gr;
    int allow = strcmp(cfg->allow_root, "on") == 0;

    id->uid = (uid_t)-1;
    id->gid = (gid_t)-1;
    if (cfg->user[0] != '\0') {
        if ((pw = getpwnam(cfg->user)) == NULL) {
            snprintf(err, errlen, "user: no user \"%s\"", cfg->user);
            return -1;
        }
        id->uid = pw->pw_uid;
        id->gid = pw->pw_gid;
    }
    if (cfg->group[0] != '\0') {
        if ((gr = getgrnam(cfg->group)) == NULL) {
            snprintf(err, errlen, "group: no group \"%s\"", cfg->group);
            return -1;
        }
        id->gid = gr->gr_gid;
    }
    if (geteuid() != 0) {
        if ((id->uid != (uid_t)-1 && id->uid != geteuid()) ||
            (id->gid != (gid_t)-1 && id->gid != getegid())) {
            snprintf(err, errlen, "user = %s, group = %s: only a master "
                "started as root can switch to them (running as uid %ld, "
                "gid %ld)", cfg->user[0] ? cfg->user : "(empty)",
                cfg->group[0] ? cfg->group : "(empty)", (long)geteuid(),
                (long)getegid());
            return -1;
        }
        id->uid = (uid_t)-1;    /* already there: nothing to switch */
        id->gid = (gid_t)-1;
        return 0;
    }
    if (id->uid == (uid_t)-1 || id->uid == 0) {
        if (!allow) {
            snprintf(err, errlen, "started as root%s: the workers would "
                "serve requests as root; set \"user\" to the account they "
                "should run as (user = ratelimit), or allow_root = on",
                id->uid == 0 ? " with user = root" : " without \"user\"");
            return -1;
        }
        snprintf(err, errlen, "the workers run as root (allow_root = on)");
        return 1;
    }
    return 0;
}

/*
 * Switches to id for good: supplementary groups, gid, then uid, and makes
 * sure root cannot be regained.  Returns 0 or -1 with the reason in err.
 */
static int
main_drop_privileges(const struct rl_config *cfg,
    const struct main_identity *id, char *err, size_t errlen)
{
    if (id->gid != (gid_t)-1) {
        if ((id->uid != (uid_t)-1 ?
            initgroups(cfg->user, id->gid) : setgroups(1, &id->gid)) == -1 ||
            setgid(id->gid) == -1) {
            snprintf(err, errlen, "cannot switch to group %ld: %s",
                (long)id->gid, strerror(errno));
            return -1;
        }
    }
    if (id->uid != (uid_t)-1) {
        if (setuid(id->uid) == -1) {
            snprintf(err, errlen, "cannot switch to user %s: %s", cfg->user,
                strerror(errno));
            return -1;
        }
        if (id->uid != 0 && (setuid(0) != -1 || seteuid(0) != -1 ||
            geteuid() == 0 || getuid() == 0)) {
            snprintf(err, errlen, "switched to user %s, but root can be "
                "regained: refusing to run", cfg->user);
            return -1;
        }
    }
    if (id->gid != (gid_t)-1 && id->gid != 0 &&
        (setgid(0) != -1 || getegid() == 0)) {
        snprintf(err, errlen, "switched to group %ld, but gid 0 can be "
            "regained: refusing to run", (long)id->gid);
        return -1;
    }
    return 0;
}

/* The pid a pid file names, or 0 when it names none. */
static pid_t
main_pid_read(const char *path)
{
    char buf[32];
    ssize_t n;
    int fd;

    if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) == -1)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return (pid_t)atol(buf);
}

/* Whether process pid is dead but not yet reaped by its parent (a
 * zombie), from the state in /proc/PID/stat. */
static int
main_pid_zombie(pid_t pid)
{
    char path[64], buf[512], *p;
    ssize_t n;
    int fd;

    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    /* "PID (COMM) STATE ...": COMM may hold anything, ')' too. */
    if ((p = strrchr(buf, ')')) == NULL || p[1] != ' ')
        return 0;
    return p[2] == 'Z' || p[2] == 'X';
}

/* Whether pid is a running ratelimit-fcgi.  A pid reused by another
 * program since a crash does not count, nor a master killed under a
 * parent that has not reaped it yet (the worker that takes its place
 * finds it a zombie, see master.c). */
static int
main_pid_running(pid_t pid)
{
    char path[64], comm[32];
    ssize_t n;
    int fd;

    if (pid <= 0 || pid == getpid() || (kill(pid, 0) == -1 &&
        errno == ESRCH) || main_pid_zombie(pid))
        return 0;
    snprintf(path, sizeof(path), "/proc/%ld/comm", (long)pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) == -1)
        return 1;
    n = read(fd, comm, sizeof(comm) - 1);
    close(fd);
    if (n <= 0)
        return 1;
    comm[n] = '\0';
    comm[strcspn(comm, "\n")] = '\0';
    return strcmp(comm, "ratelimit-fcgi") == 0;
}

/*
 * Writes our pid to cfg->pid_file, owned by id (so that the master can
 * still remove or rewrite it after dropping privileges).  A file naming a
 * running master refuses the start; one left by a crash is replaced.  With
 * id NULL it only checks.  Returns 0 or -1 with the reason in err.
 */
static int
main_pid_write(const struct rl_config *cfg, const struct main_identity *id,
    char *err, size_t errlen)
{
    char buf[32];
    pid_t old;
    int fd, n;

    if (cfg->pid_file[0] == '\0')
        return 0;
    old = main_pid_read(cfg->pid_file);
    if (main_pid_running(old)) {
        snprintf(err, errlen, "pid_file: %s names process %ld, a running "
            "ratelimit-fcgi: stop it first (or remove the file if it is "
            "not ours)", cfg->pid_file, (long)old);
        return -1;
    }
    if (id == NULL)
        return 0;
    if (old > 0)
        log_info("pid_file: %s named process %ld, which is gone; replacing "
            "it", cfg->pid_file, (long)old);
    fd = open(cfg->pid_file, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
        0644);
    if (fd == -1) {
        snprintf(err, errlen, "pid_file: %s: %s", cfg->pid_file,
            strerror(errno));
        return -1;
    }
    n = snprintf(buf, sizeof(buf), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) == -1 || write(fd, buf, (size_t)n) != n ||
        ((id->uid != (uid_t)-1 || id->gid != (gid_t)-1) &&
        fchown(fd, id->uid, id->gid) == -1)) {
        snprintf(err, errlen, "pid_file: %s: %s", cfg->pid_file,
            strerror(errno));
        close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

/* Removes the pid file at exit, if it is still ours; when its directory
 * does not let us (we are no longer root), empties it instead. */
static void
main_pid_remove(const struct rl_config *cfg)
{
    int fd;

    if (cfg->pid_file[0] == '\0' || main_pid_read(cfg->pid_file) !=
        getpid())
        return;
    if (unlink(cfg->pid_file) == 0)
        return;
    if ((fd = open(cfg->pid_file, O_WRONLY | O_TRUNC | O_CLOEXEC |
        O_NOFOLLOW)) != -1)
        close(fd);
}

/* Log files are created as root, then handed to the user we switch to,
 * so that the workers and a SIGUSR1 can open them again by name. */
static void
main_chown_logs(const struct rl_config *cfg, const struct main_identity *id)
{
    const char *const files[] = { cfg->log_target, cfg->access_log };
    size_t i;
    int fd;

    if (id->uid == (uid_t)-1 && id->gid == (gid_t)-1)
        return;
    for (i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        if (files[i][0] != '/')
            continue;
        fd = open(files[i], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC |
            O_NOFOLLOW, 0640);
        if (fd == -1 || fchown(fd, id->uid, id->gid) == -1)
            log_warn("%s: cannot hand it to user %s: %s", files[i],
                cfg->user[0] ? cfg->user : cfg->group, strerror(errno));
        if (fd != -1)
            close(fd);
    }
}

/*
 * ratelimit-fcgi -C: what the service needs beyond a valid file, checked
 * as the user running the test: the file readable, PostgreSQL (connect,
 * schema version, grants: pg_store_selftest), Redis (PING, TIME, the
 * script loaded) and, for a unix: listen, a writable socket directory.
 * Prints one line per failure with its fix, or one "ok" line.  Returns the
 * exit status: 0 when everything passed, else 1.
 */
static int
main_check_setup(const struct rl_config *cfg, const char *path)
{
    static const char prefix[] = "ratelimit-fcgi: ";
    static const char *const cmds[] = { "PING", "TIME", "SCRIPT" };
    static struct redis_store rs;
    static struct rl_counters counters;
    const char *argv[3];
    size_t argvlen[3];
    struct redisReply *r;
    char dir[sizeof(cfg->listen)], *slash;
    int bad = 0, i;

    if (access(path, R_OK) != 0) {
        fprintf(stderr, "%s%s: %s; fix: make it readable by uid %ld\n",
            prefix, path, strerror(errno), (long)geteuid());
        bad++;
    }
    bad += pg_store_selftest(cfg, stderr, prefix);

    /* Redis: the service's own connection code, quiet (each failure is
     * one line here, not a log line too). */
    log_set_level(-1);
    redis_store_init(&rs, cfg, &counters);
    for (i = 0; i < 3; i++) {
        argv[0] = cmds[i];
        argv[1] = "LOAD";
        argv[2] = embedded_check_lua;
        argvlen[0] = strlen(cmds[i]);
        argvlen[1] = 4;
        argvlen[2] = strlen(embedded_check_lua);
        r = redis_store_command(&rs, "ratelimit-fcgi:check-setup",
            i == 2 ? 3 : 1, argv, argvlen);
        if (r == NULL) {
            fprintf(stderr, "%sredis: %s failed (%s); fix: check redis "
                "(and redis_type, redis_password) in %s and that Redis "
                "runs and listens there\n", prefix, i == 2 ? "SCRIPT LOAD" :
                cmds[i], rs.error[0] ? rs.error : "no answer", path);
            bad++;
            break;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            fprintf(stderr, "%sredis: %s answered: %s; fix: check "
                "redis_user and redis_password, and that the ACL allows "
                "PING, TIME, SCRIPT and EVALSHA\n", prefix, i == 2 ?
                "SCRIPT LOAD" : cmds[i], r->str);
            bad++;
        }
        freeReplyObject(r);
    }
    redis_store_close(&rs);

    if (strncmp(cfg->listen, "unix:", 5) == 0) {
        util_copy(dir, sizeof(dir), cfg->listen + 5);
        if ((slash = strrchr(dir, '/')) == NULL)
            snprintf(dir, sizeof(dir), ".");
        else if (slash == dir)
            dir[1] = '\0';
        else
            *slash = '\0';
        if (access(dir, W_OK | X_OK) != 0) {
            fprintf(stderr, "%slisten: the socket directory %s: %s; fix: %s "
                "(the user that starts the service creates the socket "
                "there)\n", prefix, dir, strerror(errno), errno == ENOENT ?
                "create it" : "make it writable by this user");
            bad++;
        }
    }
    if (bad > 0)
        return 1;
    fprintf(stderr, "%sok: %s, postgresql, redis%s: setup test is "
        "successful\n", prefix, path, cfg->listen[0] != '\0' &&
        strncmp(cfg->listen, "unix:", 5) == 0 ? ", socket directory" : "");
    return 0;
}

int
main(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "config", required_argument, NULL, 'c' },
        { "test", no_argument, NULL, 't' },
        { "test-dump", no_argument, NULL, 'T' },
        { "check-setup", no_argument, NULL, 'C' },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'v' },
        { "keys", no_argument, NULL, 'K' },
        { NULL, 0, NULL, 0 },
    };
    static struct rl_config cfg;
    struct main_identity id;
    const char *path = DEFAULT_CONFIG;
    const char *inherited;
    char err[4096], secrets[2048], insecure[512], *line;
    int ch, test = 0, fd, rc, exposed, unverified, pid_ok = 1;

    while ((ch = getopt_long(argc, argv, "c:tTChvK", longopts, NULL)) != -1) {
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
        case 'C':
            test = 3;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case 'v':
            printf("ratelimit-fcgi %s\n", RL_VERSION);
            return 0;
        case 'K':
            config_keys_print(stdout);
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
    /* Every error of the file, the service's own checks included. */
    rc = config_load(&cfg, path, err, sizeof(err));
    if (config_check_process(&cfg, err, sizeof(err)) == -1 || rc == -1) {
        /* One line per error of the file. */
        for (line = strtok(err, "\n"); line != NULL;
            line = strtok(NULL, "\n"))
            fprintf(stderr, "ratelimit-fcgi: %s\n", line);
        if (test)
            fprintf(stderr, "ratelimit-fcgi: configuration file %s test "
                "failed\n", path);
        return 1;
    }
    rc = main_identity(&cfg, &id, err, sizeof(err));
    /* A password in a file that others may read: a warning, not an error
     * (the file is what the service needs; who else reads it is not). */
    exposed = config_check_secrets(&cfg, secrets, sizeof(secrets));
    unverified = config_check_insecure(&cfg, insecure, sizeof(insecure));
    if (test) {
        /* Who starts the pool decides this; the file can be right for a
         * systemd unit with User= and still be tested by root. */
        if (rc == -1 && geteuid() == 0 && strncmp(err, "started as root",
            15) == 0)
            fprintf(stderr, "ratelimit-fcgi: warning: %s: %s\n", path, err);
        else if (rc == -1) {
            fprintf(stderr, "ratelimit-fcgi: %s: %s\n"
                "ratelimit-fcgi: configuration file %s test failed\n", path,
                err, path);
            return 1;
        }
        if (exposed)
            fprintf(stderr, "ratelimit-fcgi: warning: %s\n", secrets);
        if (unverified)
            fprintf(stderr, "ratelimit-fcgi: warning: %s\n", insecure);
        if (test == 2)
            config_dump(&cfg, stdout);
        fprintf(stderr, "ratelimit-fcgi: configuration file %s test is "
            "successful\n", path);
        return test == 3 ? main_check_setup(&cfg, path) : 0;
    }

    if (rc == -1) {
        fprintf(stderr, "ratelimit-fcgi: %s: %s\n", path, err);
        return 1;
    }
    /* A log file that cannot be opened stops the start, as nginx does:
     * the message is on stderr, the only place left to say it. */
    if (log_init("ratelimit-fcgi", cfg.log_target, cfg.log_level) == -1)
        return 1;
    if (rc == 1)
        log_warn("%s", err);
    if (exposed)
        log_warn("%s", secrets);
    if (unverified)
        log_warn("%s", insecure);
    master_set_argv(argv);
    /* A worker whose master died starts us with the socket still open
     * (a takeover, see master.c): the pool must go on, so a pid_file it
     * cannot have is only a warning then. */
    inherited = getenv("RATELIMIT_FCGI_LISTEN_FD");
    /* A running master named by pid_file: refused before the socket. */
    if (main_pid_write(&cfg, NULL, err, sizeof(err)) == -1) {
        if (inherited == NULL) {
            log_error("%s", err);
            return 1;
        }
        log_warn("%s; taking over without it", err);
        pid_ok = 0;
    }
    if (inherited != NULL) {
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
    /* What must be opened as root is open: the socket, the pid file, the
     * log; then we become the user, before any worker exists.  A master
     * that took over rewrites the pid file, which then names it: whatever
     * signals the pool through pid_file (SIGHUP, logrotate's SIGUSR1)
     * reaches it, although its parent is no longer the one that started
     * the pool. */
    if (pid_ok && main_pid_write(&cfg, &id, err, sizeof(err)) == -1) {
        if (inherited != NULL)
            log_warn("%s; taking over without it", err);
        else {
            log_error("%s", err);
            if (fd != 0)
                listen_cleanup(&cfg);
            return 1;
        }
    }
    main_chown_logs(&cfg, &id);
    if (main_drop_privileges(&cfg, &id, err, sizeof(err)) == -1) {
        log_error("%s", err);
        main_pid_remove(&cfg);
        if (fd != 0)
            listen_cleanup(&cfg);
        return 1;
    }
    log_info("ratelimit-fcgi %s: listening on %s, %ld workers, redis %s, "
        "as uid %ld gid %ld", RL_VERSION, cfg.listen[0] ? cfg.listen :
        "fd 0", cfg.workers, cfg.redis, (long)getuid(), (long)getgid());
    rc = master_run(&cfg, fd);
    main_pid_remove(&cfg);
    if (fd != 0)
        listen_cleanup(&cfg);
    return rc;
}
