/*
 * listen.c -- the listening socket.
 *
 * With "listen" empty the socket is inherited on fd 0, as the FastCGI
 * specification has it (lighttpd bin-path, spawn-fcgi, systemd with
 * StandardInput=socket, mod_fcgid).  Otherwise we bind it ourselves rather
 * than use FCGX_OpenSocket, which unlinks a path another instance is
 * serving, knows no IPv6, sets no mode and calls exit() on failure:
 *
 *   unix:/path      mode listen_mode, owner listen_owner:listen_group; a
 *                   path still answered by a live instance is refused, a
 *                   stale one is replaced
 *   host:port       IPv4 or [IPv6]; meant for 127.0.0.1 or [::1]
 */
#include <errno.h>
#include <grp.h>
#include <netdb.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "service.h"

static int
listen_inherited(char *err, size_t errlen)
{
    int on = 0;
    socklen_t len = sizeof(on);

    if (getsockopt(0, SOL_SOCKET, SO_ACCEPTCONN, &on, &len) == -1 || !on) {
        snprintf(err, errlen, "fd 0 is not a listening socket: start me "
            "from a web server (bin-path), spawn-fcgi or systemd, or set "
            "\"listen\" in the configuration");
        return -1;
    }
    return 0;
}

static int
listen_unix(const struct rl_config *cfg, char *err, size_t errlen)
{
    const char *path = cfg->listen + 5;
    struct sockaddr_un sun;
    struct stat st;
    struct passwd *pw;
    struct group *gr;
    uid_t uid = (uid_t)-1;
    gid_t gid = (gid_t)-1;
    int fd, probe;

    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sun.sun_path)) {
        snprintf(err, errlen, "listen: path is too long for a Unix socket");
        return -1;
    }
    memcpy(sun.sun_path, path, strlen(path) + 1);
    if (cfg->listen_owner[0] != '\0') {
        if ((pw = getpwnam(cfg->listen_owner)) == NULL) {
            snprintf(err, errlen, "listen_owner: no user \"%s\"",
                cfg->listen_owner);
            return -1;
        }
        uid = pw->pw_uid;
    }
    if (cfg->listen_group[0] != '\0') {
        if ((gr = getgrnam(cfg->listen_group)) == NULL) {
            snprintf(err, errlen, "listen_group: no group \"%s\"",
                cfg->listen_group);
            return -1;
        }
        gid = gr->gr_gid;
    }
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            snprintf(err, errlen, "listen: %s exists and is not a socket",
                path);
            return -1;
        }
        probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe != -1 && connect(probe, (struct sockaddr *)&sun,
            sizeof(sun)) == 0) {
            close(probe);
            snprintf(err, errlen, "listen: %s is in use by a running "
                "instance", path);
            return -1;
        }
        if (probe != -1)
            close(probe);
        unlink(path);           /* stale: nobody answers on it */
    }
    if ((fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) == -1)
        goto fail;
    if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) == -1)
        goto fail;
    if (chmod(path, cfg->listen_mode) == -1 ||
        ((uid != (uid_t)-1 || gid != (gid_t)-1) &&
        chown(path, uid, gid) == -1) ||
        listen(fd, (int)cfg->listen_backlog) == -1) {
        unlink(path);
        goto fail;
    }
    return fd;
fail:
    snprintf(err, errlen, "listen: %s: %s", path, strerror(errno));
    if (fd != -1)
        close(fd);
    return -1;
}

static int
listen_tcp(const struct rl_config *cfg, char *err, size_t errlen)
{
    char host[256], port[8];
    struct addrinfo hints, *res, *ai;
    int fd = -1, on = 1, rc, portnum;

    if (util_split_hostport(cfg->listen, host, sizeof(host), &portnum) ==
        -1) {
        snprintf(err, errlen, "listen: \"%s\" is not host:port",
            cfg->listen);
        return -1;
    }
    snprintf(port, sizeof(port), "%d", portnum);
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    if ((rc = getaddrinfo(host, port, &hints, &res)) != 0) {
        snprintf(err, errlen, "listen: %s: %s", cfg->listen,
            gai_strerror(rc));
        return -1;
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, 0);
        if (fd == -1)
            continue;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
            listen(fd, (int)cfg->listen_backlog) == 0)
            break;
        close(fd);
        fd = -1;
    }
    if (fd == -1)
        snprintf(err, errlen, "listen: %s: %s", cfg->listen,
            strerror(errno));
    freeaddrinfo(res);
    return fd;
}

int
listen_open(const struct rl_config *cfg, char *err, size_t errlen)
{
    if (cfg->listen[0] == '\0')
        return listen_inherited(err, errlen) == 0 ? 0 : -1;
    if (strncmp(cfg->listen, "unix:", 5) == 0)
        return listen_unix(cfg, err, errlen);
    return listen_tcp(cfg, err, errlen);
}

void
listen_cleanup(const struct rl_config *cfg)
{
    if (strncmp(cfg->listen, "unix:", 5) == 0)
        unlink(cfg->listen + 5);
}
