#!/bin/sh
# Installs the Debian packages that ratelimit-fcgi needs, in one of three
# sets:
#   install-deps.sh            building, running and testing it (`make deps`;
#                              `make run`, `make test` and `make bench` depend
#                              on it).  Services that the packages start on
#                              the system are stopped again: the dev stack and
#                              the tests run their own private servers.
#   install-deps.sh --build    only building it and its Debian package
#                              (`make deps-build`); no server.
#   install-deps.sh --runtime  only running it, for `make install`
#                              (`make deps-runtime`): the shared libraries,
#                              PostgreSQL and Redis, whose services are left
#                              running: they are what it will use.
# When everything is present it prints nothing and exits 0 at once.  As
# root it installs what is missing; otherwise it prints the command to run
# and exits 1.
set -eu

MODE=all
case ${1:-} in
'') ;;
--build) MODE=build ;;
--runtime) MODE=runtime ;;
*)
    echo "usage: install-deps.sh [--build | --runtime]" >&2
    exit 2
    ;;
esac

BUILD_PACKAGES="build-essential pkg-config libfcgi-dev libhiredis-dev libpq-dev
libjson-c-dev libssl-dev debhelper dpkg-dev git"
RUNTIME_PACKAGES="libfcgi0ldbl libhiredis0.14 libpq5 libjson-c5 libssl3
postgresql redis-server"

# Everything for development and the tests: add new ones here.
PACKAGES="build-essential pkg-config libfcgi-dev libhiredis-dev libpq-dev
libjson-c-dev libssl-dev check libsubunit-dev redis-server postgresql
lighttpd curl wrk procps nginx-light apache2 libapache2-mod-fcgid spawn-fcgi
python3 clang shellcheck cppcheck mandoc nodejs npm prometheus chromium logrotate
valgrind strace gnuplot-nox debhelper dpkg-dev lintian"

case $MODE in
build) PACKAGES=$BUILD_PACKAGES ;;
runtime) PACKAGES=$RUNTIME_PACKAGES ;;
esac

# Packages that start a system-wide service when installed: the package,
# its service and the pid files the Debian package uses, as "pkg:svc:glob".
SERVICES="redis-server:redis-server:/run/redis/redis-server.pid
lighttpd:lighttpd:/run/lighttpd.pid
nginx-light:nginx:/run/nginx.pid
apache2:apache2:/run/apache2/apache2.pid
postgresql:postgresql:/run/postgresql/*.pid
prometheus:prometheus:/run/prometheus/*.pid"

# One dpkg-query call for all packages; unknown ones are simply not listed.
# shellcheck disable=SC2086
installed=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' $PACKAGES \
    2>/dev/null | awk '$2 == "ii" { print $1 }') || true

# Packages whose command may come from elsewhere, as "pkg:command": a
# nodejs from another repository (NodeSource's, say) brings npm itself and
# conflicts with Debian's npm package, so a working command is enough.
COMMANDS="nodejs:node npm:npm"

missing=""
for pkg in $PACKAGES; do
    if ! printf '%s\n' "$installed" | grep -qx -- "$pkg"; then
        for entry in $COMMANDS; do
            if [ "${entry%%:*}" = "$pkg" ] &&
                command -v "${entry#*:}" >/dev/null 2>&1; then
                continue 2
            fi
        done
        missing="$missing $pkg"
    fi
done
missing=${missing# }
[ -z "$missing" ] && exit 0

if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: missing Debian packages: $missing" >&2
    echo "install-deps: run as root:" >&2
    echo "  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing" >&2
    exit 1
fi

echo "install-deps: installing $missing"
apt-get update
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
    $missing

# Stop the services that were just installed (and started by their
# maintainer scripts), so that nothing system-wide lingers; not for
# --runtime, whose servers are the ones to use.  Services that were
# installed before are left alone.
[ "$MODE" = runtime ] && exit 0
for entry in $SERVICES; do
    pkg=${entry%%:*}
    rest=${entry#*:}
    svc=${rest%%:*}
    pidglob=${rest#*:}
    case " $missing " in
    *" $pkg "*) ;;
    *) continue ;;
    esac
    if command -v service >/dev/null 2>&1; then
        service "$svc" stop >/dev/null 2>&1 || true
    fi
    # Without an init system `service` may do nothing: fall back to the
    # package's own pid files.
    for pidfile in $pidglob; do
        [ -f "$pidfile" ] || continue
        pid=$(head -n 1 "$pidfile" 2>/dev/null || true)
        case $pid in
        '' | *[!0-9]*) continue ;;
        esac
        kill "$pid" 2>/dev/null || true
    done
done
exit 0
