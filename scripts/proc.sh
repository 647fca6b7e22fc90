# shellcheck shell=sh
# Process helpers shared by scripts/dev-stack.sh, bench/bench.sh and the
# integration tests (t/integration/lib.sh), which source this file: finding
# the processes a server started and stopping them within bounded waits.
# Variable names carry a per-function prefix, since POSIX sh has no local
# variables.

# Prints the pid in file $1 if that process is alive; returns 1 otherwise.
pid_alive() {
    [ -f "$1" ] || return 1
    pa_pid=$(head -n 1 "$1" 2>/dev/null || true)
    case $pa_pid in
    '' | *[!0-9]*) return 1 ;;
    esac
    kill -0 "$pa_pid" 2>/dev/null || return 1
    echo "$pa_pid"
}

# Waits up to $2 tenths of a second for process $1 to exit.  Returns 1 if
# it is still there.
wait_gone() {
    wg_n=0
    while kill -0 "$1" 2>/dev/null; do
        wg_n=$((wg_n + 1))
        [ "$wg_n" -gt "$2" ] && return 1
        sleep 0.1
    done
    return 0
}

# Ends processes $@: SIGTERM to all, up to 5 s for each, then SIGKILL.
end_pids() {
    for ep_p in "$@"; do
        kill -TERM "$ep_p" 2>/dev/null || true
    done
    for ep_p in "$@"; do
        if ! wait_gone "$ep_p" 50; then
            kill -KILL "$ep_p" 2>/dev/null || true
            wait_gone "$ep_p" 20 || true
        fi
    done
}

# Prints the pids of every descendant of process $1.
descendants() {
    ps -e -o pid= -o ppid= | awk -v root="$1" '
        { parent[$1] = $2; pids[NR] = $1 }
        END {
            for (i = 1; i <= NR; i++) {
                p = pids[i]; q = parent[p]; hops = 0
                while (q != "" && q != 0 && q != root && hops++ < 64)
                    q = parent[q]
                if (q == root && p != root)
                    print p
            }
        }'
}
