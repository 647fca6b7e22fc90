#!/bin/sh
# test_titles.sh -- what ps and the log show of the pool: process titles
# ("ratelimit-fcgi: master process (CONFIG)", "ratelimit-fcgi: worker
# (CONFIG)") and the comm, also after a takeover; a stop the master asked
# for is an info line per worker, not a warning, also when ^C reaches the
# whole process group; the source location (file:line) only at
# log_level = debug; and, when stderr is the journal's stream
# (JOURNAL_STREAM), lines with the sd-daemon priority prefix and without a
# time or pid of their own.
#
# Applications of their own on Unix sockets (workers = 2); nothing in
# front of them: their processes and logs are what is looked at.
set -u
# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

serve_dir ratelimit-titles

# title_of PID: the command line (title) ps shows for PID.
title_of() {
    ps -o args= -p "$1" 2>/dev/null | sed 's/ *$//'
}

# comm_of PID: the command name (comm) of PID.
comm_of() {
    ps -o comm= -p "$1" 2>/dev/null | tr -d ' '
}

# gone PID: the process has ended (and was reaped, or is a zombie).
# shellcheck disable=SC2317 # called through retry
gone() {
    ! alive "$1"
}

# not_matches_lines TEXT ERE: no line of TEXT matches ERE.
# shellcheck disable=SC2317 # called through check
not_matches_lines() {
    ! printf '%s\n' "$1" | grep -Eq -- "$2"
}

# renewed PID BEFORE: PID has 2 workers again, not the list BEFORE.
# shellcheck disable=SC2317 # called through retry
renewed() {
    [ "$(workers_of "$1" | tr '\n' ' ')" != "$2" ] && has_workers "$1" 2
}

# lines_after FILE MARK: the lines of FILE after its first MARK lines.
lines_after() {
    tail -n +"$(($2 + 1))" "$1"
}

# A source location ends a line: " (src/master.c:123)".
WHERE=' \(src/[a-z_]+\.c:[0-9]+\)$'

# ---------------------------------------------------------------- titles

app_conf "$D/app.conf" "listen=unix:$D/app.sock" workers=2 \
    "pid_file=$D/app.pid"
# Its own process group, as a pool started from a terminal is: ^C reaches
# the master and every worker at once.  (setsid does not fork: a
# background job of a shell without job control leads no group.)
setsid "$BUILD/ratelimit-fcgi" -c "$D/app.conf" >"$D/app.log" 2>&1 &
MASTER=$!
PIDS="$PIDS $MASTER"
check "the application starts with 2 workers" wait_workers "$MASTER" 2
check "ps: the master is \"ratelimit-fcgi: master process ($D/app.conf)\" ($(title_of "$MASTER"))" \
    eq "$(title_of "$MASTER")" "ratelimit-fcgi: master process ($D/app.conf)"
for w in $(workers_of "$MASTER"); do
    check "ps: worker $w is \"ratelimit-fcgi: worker ($D/app.conf)\" ($(title_of "$w"))" \
        eq "$(title_of "$w")" "ratelimit-fcgi: worker ($D/app.conf)"
done
check "comm: the master and its workers are ratelimit-fcgi ($(for p in "$MASTER" $(workers_of "$MASTER"); do comm_of "$p"; done | sort -u | tr '\n' ' '))" \
    eq "$(for p in "$MASTER" $(workers_of "$MASTER"); do comm_of "$p"; done |
        sort -u)" ratelimit-fcgi
pool=$( { echo "$MASTER"; workers_of "$MASTER"; } | sort -n | tr '\n' ' ')
found=$(pgrep -f "$D/app.conf" | sort -n | tr '\n' ' ')
check "pgrep -f CONFIG finds the master and both workers ($found = $pool)" \
    eq "$found" "$pool"
found=$(pgrep -f 'ratelimit-fcgi: master process' | grep -x "$MASTER")
check "pgrep -f 'ratelimit-fcgi: master process' finds the master" \
    eq "$found" "$MASTER"
found=$(pgrep -P "$MASTER" -f 'ratelimit-fcgi: worker' | wc -l)
check "pgrep -f 'ratelimit-fcgi: worker' finds both workers ($found)" \
    eq "$found" 2

# ---------------------------------------------------------------- the level

check "at log_level = info no line names a source location ($(grep -cE "$WHERE" "$D/app.log") of $(wc -l <"$D/app.log"))" \
    eq "$(grep -cE "$WHERE" "$D/app.log")" 0
check "... and the lines are there (the start's info lines)" \
    grep -q 'info: master [0-9]*: starting 2 workers$' "$D/app.log"

# ---------------------------------------------------------------- takeover

# The master SIGKILLed: the worker that takes its place executes
# ratelimit-fcgi again (through /proc/self/exe, which would name the
# process "exe") and shows the master's title.
# shellcheck disable=SC2317 # called through retry
took_over() {
    to_pid=$(cat "$D/app.pid" 2>/dev/null)
    [ -n "$to_pid" ] && [ "$to_pid" != "$1" ] && alive "$to_pid" &&
        has_workers "$to_pid" 2
}
kill -KILL "$MASTER"
retry 100 took_over "$MASTER"
check "takeover: pid_file names a new master with 2 workers" eq "$?" 0
NEW=$(cat "$D/app.pid" 2>/dev/null)
PIDS="$PIDS $NEW"
check "takeover: the new master's title ($(title_of "$NEW"))" \
    eq "$(title_of "$NEW")" "ratelimit-fcgi: master process ($D/app.conf)"
check "takeover: the new master's comm is ratelimit-fcgi ($(comm_of "$NEW"))" \
    eq "$(comm_of "$NEW")" ratelimit-fcgi
for w in $(workers_of "$NEW"); do
    check "takeover: worker $w's title ($(title_of "$w"))" \
        eq "$(title_of "$w")" "ratelimit-fcgi: worker ($D/app.conf)"
done
"$BUILD/ratelimit-fcgi" -c "$D/app.conf" >"$D/second.log" 2>&1
check "takeover: a second start with the same pid_file is refused as the new master's ($(head -c 300 "$D/second.log"))" \
    grep -q "names process $NEW, a running ratelimit-fcgi" "$D/second.log"

# ---------------------------------------------------------------- stops

# SIGTERM to the master: it stops its workers with SIGTERM; each is an
# info line, no warning.
mark=$(wc -l <"$D/app.log")
stopped=$(workers_of "$NEW" | tr '\n' ' ')
kill -TERM "$NEW"
retry 50 gone "$NEW"
check "SIGTERM: the pool stops" eq "$?" 0
after=$(lines_after "$D/app.log" "$mark")
check "SIGTERM: no warn or error line ($(printf '%s' "$after" | grep -E ' (warn|error): ' | head -n 2 | tr '\n' '|'))" \
    not_matches_lines "$after" ' (warn|error): '
for w in $stopped; do
    check "SIGTERM: worker $w's stop is an info line" \
        matches "$after" "info: worker $w stopped by signal 15 "
done

# ^C in a terminal: SIGINT to the process group, master and workers at
# once.  The workers end before the master has sent them anything.
app_conf "$D/grp.conf" "listen=unix:$D/grp.sock" workers=2
setsid "$BUILD/ratelimit-fcgi" -c "$D/grp.conf" >"$D/grp.log" 2>&1 &
GRP=$!
PIDS="$PIDS $GRP"
check "^C: a pool in a process group of its own starts" \
    wait_workers "$GRP" 2
check "^C: the master leads its process group ($(ps -o pgid= -p "$GRP" | tr -d ' '))" \
    eq "$(ps -o pgid= -p "$GRP" | tr -d ' ')" "$GRP"
mark=$(wc -l <"$D/grp.log")
stopped=$(workers_of "$GRP" | tr '\n' ' ')
kill -INT "-$GRP"
retry 50 gone "$GRP"
check "^C: the pool stops" eq "$?" 0
after=$(lines_after "$D/grp.log" "$mark")
check "^C: no warn or error line ($(printf '%s' "$after" | grep -E ' (warn|error): ' | head -n 2 | tr '\n' '|'))" \
    not_matches_lines "$after" ' (warn|error): '
for w in $stopped; do
    check "^C: worker $w's stop is an info line" \
        matches "$after" "info: worker $w stopped"
done

# SIGHUP: the workers are replaced; no warning either.
app_conf "$D/hup.conf" "listen=unix:$D/hup.sock" workers=2
app_start hup "$D/hup.conf"
HUP=$APP_PID
check "SIGHUP: a pool starts" wait_workers "$HUP" 2
mark=$(wc -l <"$D/hup.log")
before=$(workers_of "$HUP" | tr '\n' ' ')
kill -HUP "$HUP"
check "SIGHUP: the workers are replaced ($before)" \
    retry 50 renewed "$HUP" "$before"
sleep 0.3
after=$(lines_after "$D/hup.log" "$mark")
check "SIGHUP: no warn or error line ($(printf '%s' "$after" | grep -E ' (warn|error): ' | head -n 2 | tr '\n' '|'))" \
    not_matches_lines "$after" ' (warn|error): '
for w in $before; do
    check "SIGHUP: worker $w's stop is an info line" \
        matches "$after" "info: worker $w stopped, as the master asked"
done
stop_process "$HUP" TERM

# ---------------------------------------------------------------- debug

app_conf "$D/dbg.conf" "listen=unix:$D/dbg.sock" workers=2 log_level=debug
app_start dbg "$D/dbg.conf"
DBG=$APP_PID
check "log_level = debug: a pool starts" wait_workers "$DBG" 2
stop_process "$DBG" TERM
check "log_level = debug: every line names its source location ($(grep -cvE "$WHERE" "$D/dbg.log") of $(wc -l <"$D/dbg.log") do not: $(grep -vE "$WHERE" "$D/dbg.log" | head -n 2 | tr '\n' '|'))" \
    eq "$(grep -cvE "$WHERE" "$D/dbg.log")" 0
check "log_level = debug: ... for instance the master's start" \
    grep -qE "info: master [0-9]+: starting 2 workers \(src/master\.c:[0-9]+\)$" \
    "$D/dbg.log"

# ---------------------------------------------------------------- journal

# JOURNAL_STREAM names the device and inode of the file stderr is: what
# systemd sets for StandardError=journal.
app_conf "$D/jnl.conf" "listen=unix:$D/jnl.sock" workers=2
: >"$D/jnl.log"
stream=$(stat -c '%d:%i' "$D/jnl.log")
app_start jnl "$D/jnl.conf" "JOURNAL_STREAM=$stream"
JNL=$APP_PID
check "journal: a pool starts" wait_workers "$JNL" 2
stop_process "$JNL" TERM
check "journal: the file is the one named ($(stat -c '%d:%i' "$D/jnl.log") = $stream)" \
    eq "$(stat -c '%d:%i' "$D/jnl.log")" "$stream"
check "journal: there are lines ($(wc -l <"$D/jnl.log"))" \
    ge "$(wc -l <"$D/jnl.log")" 4
check "journal: every line starts with a priority, <3> <4> <6> or <7> ($(grep -cvE '^<[3467]>(error|warn|info|debug): ' "$D/jnl.log") do not: $(grep -vE '^<[3467]>' "$D/jnl.log" | head -n 2 | tr '\n' '|'))" \
    eq "$(grep -cvE '^<[3467]>(error|warn|info|debug): ' "$D/jnl.log")" 0
check "journal: the priorities match the levels (<6>info, <4>warn)" \
    sh -c "! grep -E '^<6>' '$D/jnl.log' | grep -qv '^<6>info: ' &&
        ! grep -E '^<4>' '$D/jnl.log' | grep -qv '^<4>warn: ' &&
        grep -q '^<6>info: master [0-9]*: starting 2 workers$' '$D/jnl.log'"
check "journal: no line carries a time or a pid ($(grep -cE '[0-9]{4}-[0-9]{2}-[0-9]{2}T|ratelimit-fcgi\[[0-9]+\]' "$D/jnl.log"))" \
    eq "$(grep -cE '[0-9]{4}-[0-9]{2}-[0-9]{2}T|ratelimit-fcgi\[[0-9]+\]' "$D/jnl.log")" 0

# A JOURNAL_STREAM that names another file (stderr redirected by whoever
# started us): the ordinary lines.
app_conf "$D/other.conf" "listen=unix:$D/other.sock" workers=2
app_start other "$D/other.conf" "JOURNAL_STREAM=$stream"
OTHER=$APP_PID
check "journal elsewhere: a pool starts" wait_workers "$OTHER" 2
stop_process "$OTHER" TERM
check "journal elsewhere: lines with a time and a pid, no priority prefix" \
    sh -c "grep -qE '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z ratelimit-fcgi\[$OTHER\]: info: ' '$D/other.log' &&
        ! grep -qE '^<[0-9]>' '$D/other.log'"

finish
