#!/bin/sh
# Starts ratelimit-fcgi for Apache mod_fcgid (see conf/apache-fcgid.conf).
#
# mod_fcgid runs an FcgidAccessChecker program by its bare path, without
# arguments, so the configuration file is named here.  Install it as
# /usr/local/lib/ratelimit-fcgi/fcgid-wrapper, mode 0755, after filling in:
#   @BINARY@   the application, e.g. /usr/local/bin/ratelimit-fcgi
#   @CONFIG@   its configuration for mod_fcgid, e.g.
#              /etc/ratelimit-fcgi/fcgid.conf, with "listen" empty (the
#              socket mod_fcgid puts on fd 0) and "workers = 0"
# exec keeps the process mod_fcgid started as the one it manages.
exec @BINARY@ -c @CONFIG@
