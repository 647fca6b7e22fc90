#!/bin/sh
# The benchmark of a big tenant (`make bench-scale`): the latency of a
# check for a tenant with one rule and for a tenant with 10,000 rules (the
# bound a tenant may have), side by side in one run, at a constant rate.
#
#   one    a rule "*"                             route /x
#   many   9,999 rules "/r/N/*" and a "*" catch-all route /r/9000/x
#   churn  many, while a key is created in the other tenant every second
#          (each one a change notification every worker reads)
#
# Both rules are token buckets that never deny, so every check is one
# EVALSHA; what differs is the matching of the route against the tenant's
# rules (src/rules.c, its index).  The targets alternate for
# BENCH_SCALE_ROUNDS rounds of BENCH_SCALE_SECONDS each at
# BENCH_SCALE_RATE checks a second (bench/rategen.c, open loop), and the
# table gives each round's p50 and p99 and the median ratios of the p99s
# (many against one, churn against many).
#
# Environment: BENCH_SCALE_RATE [500], BENCH_SCALE_SECONDS [10],
# BENCH_SCALE_ROUNDS [3], BENCH_SCALE_PORT [29080] (Redis +300,
# PostgreSQL +353), BUILD [build].  Everything listens on 127.0.0.1 only.
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
case $BUILD in
/*) ;;
*) BUILD=$ROOT/$BUILD ;;
esac
RATE=${BENCH_SCALE_RATE:-500}
SECONDS_EACH=${BENCH_SCALE_SECONDS:-10}
ROUNDS=${BENCH_SCALE_ROUNDS:-3}
PORT=${BENCH_SCALE_PORT:-29080}
REDIS_PORT=$((PORT + 300))
PG_PORT=$((PORT + 353))
CTL=$BUILD/ratelimitctl
VAR=$(mktemp -d "${TMPDIR:-/tmp}/ratelimit-bench-scale.XXXXXX")
ROWS=$VAR/rows

stack() {
    VAR=$VAR PORT=$PORT REDIS_PORT=$REDIS_PORT PG_PORT=$PG_PORT \
        BUILD=$BUILD WORKERS=4 EXTRA_CONF="log_level = warn
max_requests = 0
key_cache_ttl = 3600
rule_cache_ttl = 3600" sh scripts/dev-stack.sh "$@"
}

# shellcheck disable=SC2317  # reached from the EXIT trap
cleanup() {
    trap - EXIT INT TERM
    stack stop >/dev/null 2>&1 || true
    sh scripts/pg.sh destroy "$VAR" >/dev/null 2>&1 || true
    rm -rf "$VAR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

sql() {
    psql -X -q -tA -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" \
        -U ratelimit -d ratelimit "$@"
}

ctl() {
    "$CTL" -c "$VAR/ratelimit.conf" "$@"
}

echo "bench-scale: starting PostgreSQL, Redis and lighttpd -> ratelimit-fcgi in $VAR"
stack start >"$VAR/stack.out" 2>&1 || {
    cat "$VAR/stack.out"
    exit 1
}

# tenant NAME: a new tenant; prints its id.
tenant() {
    ctl tenant add "$1" | awk '$1 == "id" { print $2; exit }'
}

# key TENANT: a new check key of TENANT; prints it.
key() {
    ctl key create "$1" | awk '$1 == "key" { print $2; exit }'
}

# rules TENANT_ID PATTERN_SQL FROM TO: rules of a bucket that never denies.
rules() {
    sql -c "WITH r AS (INSERT INTO rules (tenant_id, route_pattern)
        SELECT '$1'::uuid, $2 FROM generate_series($3, $4) i RETURNING id)
      INSERT INTO limits (rule_id, algorithm, bucket_capacity, refill_rate)
      SELECT id, 'token_bucket', 1000000000, 100000000 FROM r;"
}

ONE_ID=$(tenant bench-one)
MANY_ID=$(tenant bench-many)
rules "$ONE_ID" "'*'" 1 1
rules "$MANY_ID" "'/r/' || i || '/*'" 1 9999
rules "$MANY_ID" "'*'" 1 1
ONE_KEY=$(key bench-one)
MANY_KEY=$(key bench-many)
echo "bench-scale: bench-one has $(sql -c "SELECT count(*) FROM rules WHERE tenant_id = '$ONE_ID'") rule, bench-many $(sql -c "SELECT count(*) FROM rules WHERE tenant_id = '$MANY_ID'")"

# run LABEL KEY ROUTE: one round; appends "label p50 p99 achieved errors".
run() {
    "$BUILD/rategen" -r "$RATE" -d "$SECONDS_EACH" -w 1 -c 64 -t 2000 \
        -H "X-API-Key: $2" -H "Content-Type: application/json" \
        -b "{\"route\":\"$3\",\"subject\":\"bench\"}" \
        "http://127.0.0.1:$PORT/v1/check" >"$VAR/out" 2>"$VAR/err" || true
    awk -v label="$1" '$1 == "RATE" {
            for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
            printf "%s %.3f %.3f %.0f %d\n", label, f["p50_us"] / 1000,
                f["p99_us"] / 1000, f["achieved"],
                f["status_errors"] + f["socket_errors"] + f["timeouts"]
        }' "$VAR/out" >>"$ROWS"
}

# Warm both tenants' caches, then alternate.
run warm-one "$ONE_KEY" /x
run warm-many "$MANY_KEY" /r/9000/x
: >"$ROWS"
n=1
while [ "$n" -le "$ROUNDS" ]; do
    run one "$ONE_KEY" /x
    run many "$MANY_KEY" /r/9000/x
    (
        i=0
        while [ "$i" -lt "$SECONDS_EACH" ]; do
            ctl key create bench-one >/dev/null 2>&1
            sleep 1
            i=$((i + 1))
        done
    ) &
    run churn "$MANY_KEY" /r/9000/x
    wait
    n=$((n + 1))
done

echo
echo "bench-scale: $RATE checks/s for ${SECONDS_EACH} s a round, $ROUNDS rounds, 4 workers ($(date -u '+%Y-%m-%d %H:%M UTC'))"
printf '%-6s %9s %9s %9s %7s\n' tenant "p50 ms" "p99 ms" "req/s" errors
awk '{ printf "%-6s %9.3f %9.3f %9d %7d\n", $1, $2, $3, $4, $5 }' "$ROWS"
# ratio A B TEXT: the median over the rounds of B's p99 / A's p99.
ratio() {
    awk -v a="$1" -v b="$2" -v text="$3" '
        $1 == a { x[++na] = $3 } $1 == b { y[++nb] = $3 }
        END {
            for (i = 1; i <= na && i <= nb; i++)
                r[i] = x[i] > 0 ? y[i] / x[i] : 0
            n = i - 1
            for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
                if (r[j] < r[i]) { t = r[i]; r[i] = r[j]; r[j] = t }
            printf "%s, median of %d rounds: %.2f\n", text, n,
                n % 2 ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2
        }' "$ROWS"
}
ratio one many "p99 of 10,000 rules / p99 of 1 rule"
ratio many churn "p99 with a key created elsewhere every second / without"
