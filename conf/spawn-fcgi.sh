#!/bin/sh
# Starts ratelimit-fcgi under spawn-fcgi on a Unix socket.  The command it
# runs, with the defaults below, is:
#
#   spawn-fcgi -n -s /run/ratelimit/fcgi.sock -M 0660 \
#       -u ratelimit -g ratelimit -G www-data \
#       -- /usr/local/bin/ratelimit-fcgi -c /etc/ratelimit-fcgi/ratelimit.conf
#
# spawn-fcgi binds the socket (mode 0660, owner the -u user, group www-data
# so that the web server can connect), drops to the -u/-g user and execs
# the application with the listening socket on fd 0; keep "listen" empty in
# ratelimit.conf.  Point the web server at the socket (for lighttpd:
# conf/lighttpd-socket.conf).  The directory of the socket must exist.
#
# Why -n (no fork): the application is then this very process, so the
# supervisor that runs this script (runit, daemontools, s6, systemd) sees
# its exit, restarts it and gets its log on stderr.  Without -n, spawn-fcgi
# forks, puts the child in its own session with stdout and stderr on
# /dev/null and exits at once: nothing restarts the pool if it dies, and
# its log is lost unless ratelimit.conf says `log = syslog` (and -P FILE
# keeps the pid for `kill -HUP`).  Never use -F: our master already forks
# `workers` processes on the socket, and spawn-fcgi's copies would each
# start a pool of their own.
#
# Signals go to the application: SIGQUIT stops it gracefully (requests in
# hand complete), SIGTERM fast, SIGHUP re-reads ratelimit.conf.
#
# Every setting can be given in the environment.  Run as a user other than
# root, set RL_USER and RL_SOCKET_GROUP empty: spawn-fcgi can change
# neither then, and the socket gets that user's own group.
set -eu

RL_SOCKET=${RL_SOCKET:-/run/ratelimit/fcgi.sock}
RL_USER=${RL_USER-ratelimit}
RL_GROUP=${RL_GROUP:-ratelimit}
RL_SOCKET_GROUP=${RL_SOCKET_GROUP-www-data}
RL_BIN=${RL_BIN:-/usr/local/bin/ratelimit-fcgi}
RL_CONF=${RL_CONF:-/etc/ratelimit-fcgi/ratelimit.conf}

set -- -n -s "$RL_SOCKET" -M 0660
if [ -n "$RL_USER" ]; then
    set -- "$@" -u "$RL_USER" -g "$RL_GROUP"
fi
if [ -n "$RL_SOCKET_GROUP" ]; then
    set -- "$@" -G "$RL_SOCKET_GROUP"
fi
exec spawn-fcgi "$@" -- "$RL_BIN" -c "$RL_CONF"
