#!/bin/sh
# Leases released by the web servers' own end-of-request hook, in
# authorizer mode, with each real server in front of a backend that sleeps
# as long as the request asks (?ms=N) and answers X-RateLimit-Cost when
# asked (?cost=N):
#   nginx     auth_request + access_log to ratelimit-release's syslog socket
#   lighttpd  the Authorizer role + a piped access log to ratelimit-release
#   Apache    mod_authnz_fcgi + a piped CustomLog to ratelimit-release
# each with the configuration of doc/deployment.md, "Leases released by the
# web server", run as it is written (paths and ports changed).  For each:
# N slow requests hold the N slots of a concurrency limit and the next one
# gets 429 at once; when they end, the slots are free again within 100 ms
# of the backend's answer; a client that disconnects mid-request still
# releases; a reader that is stopped (a lost release) leaves the slots to
# the lease's ttl.  Also: the actual cost logged from the backend's header
# is settled; a release Redis cannot take at once is retried, and one it
# never takes is left to its ttl, as the log says; bad lines are counted
# and logged once an interval.  The application, the backend and the
# servers are this file's, on 127.0.0.1, PORT+241 to PORT+245; PostgreSQL
# and Redis are the stack's.  Run by t/integration/run.sh.
# shellcheck disable=SC2317 # helpers called through `check` and traps

# shellcheck source-path=SCRIPTDIR
. "$(dirname "$0")/lib.sh"
require_stack

NGINX=${NGINX:-/usr/sbin/nginx}
APACHE=${APACHE:-/usr/sbin/apache2}
MODULES=${APACHE_MODULES:-/usr/lib/apache2/modules}
P_APP=$((PORT + 241))
P_BACK=$((PORT + 242))
P_NGX=$((PORT + 243))
P_LT=$((PORT + 244))
P_AP=$((PORT + 245))
GROUP=$(id -gn nobody 2>/dev/null || echo nogroup)
# The concurrency limit: MAX in flight, leases of TTL_S seconds.
MAX=3
TTL_S=3
DEPLOY=doc/deployment.md

serve_dir rl-lease-hooks
NGX_PID=
HTTPD_PID=
READER_PID=

# ---------------------------------------------------------------- helpers

# The backend: a thread per request, which sleeps ?ms=N milliseconds,
# answers 200 (with X-RateLimit-Cost: N for ?cost=N) and notes in
# $D/backend.log "start ID MS" and "end ID MS" (wall milliseconds; "gone"
# when the front end had closed the connection).
cat >"$D/backend.py" <<'EOF'
import sys, threading, time
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
from urllib.parse import urlparse, parse_qs

LOCK = threading.Lock()

def note(what, rid):
    with LOCK, open(sys.argv[2], "a") as f:
        f.write("%s %s %d\n" % (what, rid, time.time() * 1000))

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        q = parse_qs(urlparse(self.path).query)
        rid = q.get("id", ["-"])[0]
        note("start", rid)
        time.sleep(min(int(q.get("ms", ["0"])[0]), 10000) / 1000.0)
        body = b"slept\n"
        try:
            self.send_response(200)
            if "cost" in q:
                self.send_header("X-RateLimit-Cost", q["cost"][0])
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self.wfile.flush()
            note("end", rid)
        except OSError:
            note("gone", rid)

    def log_message(self, *args):
        pass

ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
EOF

# The client: hold URL KEY TAG SLEEP_MS [ABORT_MS [POLL_MAX_MS [POLL_EVERY_MS]]]
#   MAX requests for SLEEP_MS at once (given up by the client after
#   ABORT_MS when given), then, once the backend has them all, one more
#   (?ms=0).  From 100 ms before the MAX are due to end (or to be given
#   up), requests of ?ms=0 every POLL_EVERY_MS (5), in a thread of their
#   own, until one is allowed, for POLL_MAX_MS (3000) after that at most.
#   Prints NAME=VALUE lines: held (the MAX statuses, "abort" for one given
#   up), extra (the next one's status), extra_ms (its time), first_start
#   (the first of the MAX reached the backend), end (the last of the MAX
#   answered by the backend; for given-up ones, when the client gave up),
#   first_end (the backend's first answer to them), backend_end (its last
#   answer to them, however late), freed
#   (when the first allowed poll reached the backend: its slot was taken
#   just before; -1 when none was allowed), polls, poll_other (statuses
#   other than 200 and 429), all_free (when Redis first held no live
#   lease in COUNTER, the concurrency limit's sorted set, read with ZCOUNT
#   on REDIS_PORT every 5 ms over the same span as the polls; -1 if
#   never).  Times in wall ms, the backend's clock, which is Redis's.
cat >"$D/hold.py" <<'EOF'
import http.client, socket, sys, threading, time

url, key, tag, sleep_ms = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
abort_ms = int(sys.argv[5]) if len(sys.argv) > 5 and sys.argv[5] != "-" else 0
poll_max = int(sys.argv[6]) if len(sys.argv) > 6 else 3000
poll_every = int(sys.argv[7]) if len(sys.argv) > 7 else 5
n, backend_log = int(sys.argv[8]), sys.argv[9]
redis_port, counter = int(sys.argv[10]), sys.argv[11]
host, port = url.split("/")[2].split(":")
path = "/" + url.split("/", 3)[3]
now = lambda: int(time.time() * 1000)

def get(query, timeout):
    c = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        c.request("GET", path + "?" + query, headers={"X-API-Key": key})
        r = c.getresponse()
        r.read()
        return str(r.status)
    finally:
        c.close()

def lines(what, prefix):
    out = {}
    try:
        for line in open(backend_log):
            f = line.split()
            if len(f) == 3 and f[0] in what and f[1].startswith(prefix):
                out[f[1]] = int(f[2])
    except OSError:
        pass
    return out

held, gave_up = [None] * n, [0] * n
def one(i):
    try:
        held[i] = get("ms=%d&id=%s-%d" % (sleep_ms, tag, i),
                      abort_ms / 1000.0 if abort_ms else 30)
    except OSError:
        held[i] = "abort"
        gave_up[i] = now()

polled = {"first": None, "n": 0, "other": []}
def poll(start, deadline):
    while now() < start:
        time.sleep(0.002)
    while now() < deadline:
        polled["n"] += 1
        pid = "%s-p%d" % (tag, polled["n"])
        try:
            st = get("ms=0&id=" + pid, 5)
        except OSError:
            st = "error"
        if st == "200":
            polled["first"] = pid
            return
        if st != "429":
            polled["other"].append(st)
        time.sleep(poll_every / 1000.0)

# Live leases in the counter: ZCOUNT from now, as ratelimitctl counts.
def live(sock, f):
    args = ["ZCOUNT", counter, "(%d" % now(), "+inf"]
    sock.sendall(("*%d\r\n" % len(args) + "".join(
        "$%d\r\n%s\r\n" % (len(a), a) for a in args)).encode())
    line = f.readline().decode()
    return int(line[1:]) if line.startswith(":") else -1

freeing = {"at": -1}
def watch(start, deadline):
    while now() < start:
        time.sleep(0.002)
    with socket.create_connection(("127.0.0.1", redis_port), 5) as sock:
        f = sock.makefile("rb")
        while now() < deadline:
            if live(sock, f) == 0:
                freeing["at"] = now()
                return
            time.sleep(0.005)

t_held = now()
threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
for t in threads:
    t.start()
deadline = now() + 5000
while len(lines(("start",), tag + "-")) < n and now() < deadline:
    time.sleep(0.005)
t0 = now()
try:
    extra = get("ms=0&id=%s-x" % tag, 10)
except OSError:
    extra = "error"
extra_ms = now() - t0
due = t_held + (min(sleep_ms, abort_ms) if abort_ms else sleep_ms)
poller = threading.Thread(target=poll, args=(due - 100, due + poll_max))
watcher = threading.Thread(target=watch, args=(due - 100, due + poll_max))
poller.start()
watcher.start()
for t in threads:
    t.join()
poller.join()
watcher.join()
deadline = now() + sleep_ms + 2000
while len(lines(("end", "gone"), tag + "-")) < n + 1 + polled["n"] and now() < deadline:
    time.sleep(0.01)
ends = lines(("end", "gone"), tag + "-")
starts = lines(("start",), tag + "-")
end = max([ends.get("%s-%d" % (tag, i), 0) for i in range(n) if not gave_up[i]]
          + gave_up)
freed = -1
if polled["first"] is not None:
    freed = starts.get(polled["first"], -1)
print("held=%s" % ",".join(held))
print("extra=%s" % extra)
print("extra_ms=%d" % extra_ms)
print("first_start=%d" % min([starts.get("%s-%d" % (tag, i), 0) for i in range(n)]))
print("end=%d" % end)
print("first_end=%d" % min([ends.get("%s-%d" % (tag, i), 0) for i in range(n)]))
print("backend_end=%d" % max([ends.get("%s-%d" % (tag, i), 0) for i in range(n)]))
print("freed=%d" % freed)
print("polls=%d" % polled["n"])
print("poll_other=%s" % ",".join(polled["other"]))
print("all_free=%d" % freeing["at"])
EOF

# hold URL TAG SLEEP_MS [ABORT_MS [POLL_MAX_MS [POLL_EVERY_MS]]]: runs
# hold.py with the tenant's key; its fields become H_held, H_extra...
hold() {
    hd_url=$1
    hd_tag=$2
    hd_sleep=$3
    hd_abort=${4:--}
    hd_max=${5:-3000}
    hd_every=${6:-5}
    H_held='' H_extra='' H_extra_ms='' H_first_start='' H_end=''
    H_first_end='' H_backend_end='' H_freed='' H_polls='' H_poll_other=''
    H_all_free=''
    python3 "$D/hold.py" "$hd_url" "$KEY" "$hd_tag" "$hd_sleep" "$hd_abort" \
        "$hd_max" "$hd_every" "$MAX" "$D/backend.log" "$REDIS_PORT" \
        "$CC_KEY" >"$T_TMP/hold.out" 2>&1
    # shellcheck disable=SC2034 # hd_value is read through eval
    while IFS='=' read -r hd_name hd_value; do
        case $hd_name in
        held | extra | extra_ms | first_start | end | first_end | \
            backend_end | freed | polls | poll_other | all_free)
            eval "H_$hd_name=\$hd_value"
            ;;
        esac
    done <"$T_TMP/hold.out"
    [ -n "$H_freed" ] || sed 's/^/    hold.py: /' "$T_TMP/hold.out"
}

# all_held LIST: every one of the MAX statuses is 200.
all_held() {
    [ "$1" = "$(printf '200,%.0s' $(seq "$MAX") | sed 's/,$//')" ]
}

# The three scenarios for one front end at URL (its name in WHO); STOP and
# CONT are the commands that stop and continue its reader.
lease_scenarios() {
    ls_who=$1
    ls_url=$2
    ls_stop=$3
    ls_cont=$4

    # N slow requests in flight, the next one refused at once; the slots
    # free within 100 ms of the backend's answer.
    hold "$ls_url" "$ls_who-slow" 1000
    check "$ls_who: $MAX slow requests are let through ($H_held)" \
        all_held "$H_held"
    check "$ls_who: the next one gets 429 ($H_extra)" eq "$H_extra" 429
    check "$ls_who: ... at once (${H_extra_ms} ms)" le "$H_extra_ms" 500
    check "$ls_who: a slot is free again after they end (freed $H_freed)" \
        ne "$H_freed" -1
    # The MAX end a few ms apart: the first slot freed is the first one's.
    ls_after=$((H_freed - H_first_end))
    check "$ls_who: the slots stay taken until the backend answers (the first allowed poll $ls_after ms after its first answer)" \
        ge "$ls_after" 0
    check "$ls_who: a slot is free within 100 ms of the backend's answer ($ls_after ms)" \
        le "$ls_after" 100
    check "$ls_who: no poll got anything but 200 or 429 ($H_poll_other)" \
        eq "$H_poll_other" ""
    # Every slot, not only the first: Redis holds no live lease of the
    # limit within 100 ms of the backend's last answer (the allowed poll's
    # own lease included).
    ls_all=$((H_all_free - H_backend_end))
    check "$ls_who: Redis saw every slot free ($H_all_free)" \
        ne "$H_all_free" -1
    check "$ls_who: ... not while the requests were still sleeping ($((H_all_free - H_first_start)) ms after the first began, which slept 1000)" \
        ge "$((H_all_free - H_first_start))" 1000
    check "$ls_who: ... within 100 ms of it ($ls_all ms; Redis read every 5 ms)" \
        le "$ls_all" 100
    echo "    $ls_who: a slot free $ls_after ms after the backend's first answer, polled every 5 ms ($H_polls polls; the $MAX answers $((H_end - H_first_end)) ms apart)"

    # Clients that give up after 300 ms of a 1500 ms request: the slot is
    # freed when the web server ends the request, at the latest as the
    # backend answers.
    hold "$ls_url" "$ls_who-gone" 1500 300
    check "$ls_who: the clients gave up ($H_held)" \
        eq "$H_held" "$(printf 'abort,%.0s' $(seq "$MAX") | sed 's/,$//')"
    check "$ls_who: while they were in flight the next one got 429 ($H_extra)" \
        eq "$H_extra" 429
    check "$ls_who: the slots of the requests given up are freed (freed $H_freed)" \
        ne "$H_freed" -1
    ls_after=$((H_freed - H_backend_end))
    check "$ls_who: ... by 100 ms after the backend's answer ($ls_after ms)" \
        le "$ls_after" 100
    ls_all=$((H_all_free - H_backend_end))
    check "$ls_who: all $MAX slots of the requests given up are free by 100 ms after the backend's last answer ($ls_all ms)" \
        le "$ls_all" 100
    check "$ls_who: ... as Redis read them ($H_all_free)" ne "$H_all_free" -1
    echo "    $ls_who: a client gone: slots free $((H_freed - H_end)) ms after it left, $ls_after ms after the backend's answer"
    if [ "$ls_who" = nginx ]; then
        check "nginx: ends the request when the client leaves: freed before the backend answered ($ls_after ms)" \
            lt_num "$ls_after" 0
    fi

    # A lost release: the reader stopped, the requests end, their slots
    # stay taken until the ttl (from the check), not longer.
    $ls_stop
    hold "$ls_url" "$ls_who-lost" 300 - $((TTL_S * 1000 + 2000)) 20
    $ls_cont
    check "$ls_who, reader stopped: $MAX requests served ($H_held)" \
        all_held "$H_held"
    ls_held=$((H_freed - H_end))
    ls_life=$((H_freed - H_first_start))
    check "$ls_who, reader stopped: the slots stay taken after the requests end ($ls_held ms)" \
        ge "$ls_held" 1000
    check "$ls_who, reader stopped: freed at the ttl, ${TTL_S} s after the check ($ls_life ms)" \
        ge "$ls_life" $((TTL_S * 1000 - 100))
    check "$ls_who, reader stopped: ... not much later ($ls_life ms)" \
        le "$ls_life" $((TTL_S * 1000 + 600))
    echo "    $ls_who: reader stopped: slots freed ${ls_life} ms after the check (ttl ${TTL_S} s)"

    cost_settled "$ls_who" "$ls_url"
}

# tokens_used: what the daily quota of the key has counted so far.
tokens_used() {
    ctl counter show "$TENANT" /api/x --key "$KEY_ID" --json 2>/dev/null |
        python3 -c '
import json, sys
try:
    for c in json.load(sys.stdin)["counters"]:
        if c["limit"] == "tokens":
            print(c["state"].get("cur", 0))
except (ValueError, KeyError):
    pass'
}

# tokens_are N: the quota has counted N.
tokens_are() {
    [ "$(tokens_used)" = "$1" ]
}

# cost_settled WHO URL: a request whose backend answers X-RateLimit-Cost:
# 50 is charged 1 at the check and 49 more when its lease is released.
cost_settled() {
    cs_before=$(tokens_used)
    fetch "$2?ms=0&cost=50&id=$1-cost" -H "X-API-Key: $KEY"
    check "$1: a request with a cost in its answer is served ($STATUS)" \
        eq "$STATUS" 200
    check "$1: the lease id does not reach the client ($(header X-RateLimit-Lease))" \
        eq "$(header X-RateLimit-Lease)" ""
    retry 30 tokens_are $((cs_before + 50))
    check "$1: the cost the backend answered is settled at the release ($cs_before -> $(tokens_used), 50 wanted)" \
        eq "$(tokens_used)" $((cs_before + 50))
}

# reader_said FILE ERE: the reader's log has a line matching ERE (within
# 3 s).
reader_said() {
    retry 30 grep -Eq -- "$2" "$1" 2>/dev/null
}

# localize: the doc's block with this file's paths and ports.
localize() {
    sed -e "s|/etc/nginx/sites-available/ratelimit-leases|$D/nginx-site.conf|" \
        -e "s|/etc/lighttpd/conf-available/05-ratelimit-leases.conf|$D/lt-site.conf|" \
        -e "s|/etc/apache2/conf-available/ratelimit-leases.conf|$D/ap-site.conf|" \
        -e "s|/run/ratelimit/release.sock|$D/release.sock|g" \
        -e "s|listen 80;|listen 127.0.0.1:$P_NGX;|" \
        -e "s|127.0.0.1:8000|127.0.0.1:$P_BACK|g" \
        -e "s|\"port\" => 8000|\"port\" => $P_BACK|" \
        -e "s|unix:/run/ratelimit/fcgi.sock|127.0.0.1:$P_APP|" \
        -e "s|\"socket\" *=> \"/run/ratelimit/fcgi.sock\",|\"host\" => \"127.0.0.1\", \"port\" => $P_APP,|" \
        -e "s|fcgi://127.0.0.1:9001/|fcgi://127.0.0.1:$P_APP/|" \
        -e "s|/usr/bin/ratelimit-release -c /etc/ratelimit-fcgi/ratelimit.conf|$BUILD/ratelimit-release -i 1 -c $D/reader-$1.conf|" \
        -e "s|^ratelimit-release -c /etc/ratelimit-fcgi/ratelimit.conf|\"\$BUILD/ratelimit-release\" -i 1 -c $D/reader-$1.conf|" \
        -e "s|-g www-data|-g $GROUP|"
}

# no_system_path FILE: nothing of the system's paths or ports is left.
no_system_path() {
    ! grep -Eq '/run/ratelimit|/etc/(ratelimit|nginx|lighttpd|apache2)|:8000|=> 8000|:9001|/usr/bin/' "$1"
}

# ---------------------------------------------------------------- data

TENANT=$(uniq_name lease-hooks)
new_tenant "$TENANT"
KEY=$(new_key "$TENANT")
# The rule: MAX in flight, and 100000 a day, charged 1 at the check and
# settled at the release to the cost the backend answered.
ctl rule add "$TENANT" --route '/api/*' --algorithm concurrency \
    --max "$MAX" --lease-ttl "${TTL_S}s" >"$T_TMP/rule.out" 2>&1 &&
    ctl limit add "$(awk '$1 == "id" { print $2 }' "$T_TMP/rule.out")" \
        --name tokens --algorithm sliding_window --limit 100000 \
        --window 1d >"$T_TMP/limit.out" 2>&1
rc=$?
check "a rule with a concurrency limit of $MAX (ttl ${TTL_S} s) and a daily quota" \
    eq "$rc" 0
[ "$rc" = 0 ] || cat "$T_TMP/rule.out" "$T_TMP/limit.out"
KEY_ID=$(key_id "$KEY")
# The Redis key of the key's concurrency counter, where hold.py counts
# the live leases.
CC_KEY=$(ctl counter show "$TENANT" /api/x --key "$KEY_ID" --json 2>/dev/null |
    python3 -c '
import json, sys
for c in json.load(sys.stdin)["counters"]:
    if c["algorithm"] == "concurrency":
        print(c["key"])')
check "the concurrency counter's Redis key is known ($CC_KEY)" \
    test -n "$CC_KEY"
# The daily quota's counter must not roll over while this file runs.
avoid_edge 86400 180

# ---------------------------------------------------------------- start

app_conf_lines "$D/app.conf" "listen = 127.0.0.1:$P_APP" "workers = 4"
app_start app "$D/app.conf"
python3 "$D/backend.py" "$P_BACK" "$D/backend.log" >"$D/backend.out" 2>&1 &
PIDS="$PIDS $!"
# The readers' configuration: the stack's, with a log of their own and,
# when run as root, the user they switch to.
as_user=
[ "$(id -u)" = 0 ] && as_user="user = nobody"
for who in ngx lt ap; do
    app_conf_lines "$D/reader-$who.conf" "log = $D/reader-$who.log" \
        ${as_user:+"$as_user"}
    : >"$D/reader-$who.log"
    chmod 666 "$D/reader-$who.log"
done

# served URL: a quick request through a front end is let through.
served() {
    [ "$(curl -s -o /dev/null -m 2 -w '%{http_code}' -H "X-API-Key: $KEY" \
        "$1?ms=0&id=ready")" = 200 ]
}

# reader_user WHO PID: started as root, the reader runs as the "user" of
# its configuration.
reader_user() {
    [ -n "$as_user" ] || return 0
    retry 30 eq "$(ps -o user= -p "$2" | tr -d ' ')" nobody
    check "$1: the reader switched to the configuration's user ($(ps -o user= -p "$2" | tr -d ' '))" \
        eq "$(ps -o user= -p "$2" | tr -d ' ')" nobody
}

# reader_pid CONF: the pid of the ratelimit-release reading with CONF.
reader_pid() {
    ps -e -o pid= -o comm= -o args= | awk -v conf="$1" '
        $2 == "ratelimit-relea" && index($0, conf) { print $1; exit }'
}

# ---------------------------------------------------------------- nginx

if [ -x "$NGINX" ]; then
    doc_block "$DEPLOY" "Lease release: nginx" | localize ngx >"$T_TMP/ngx.sh"
    sh "$T_TMP/ngx.sh"
    check "nginx: the doc's site written, with this file's paths" \
        no_system_path "$D/nginx-site.conf"
    doc_block "$DEPLOY" "Lease release: nginx" 2 | localize ngx \
        >"$T_TMP/ngx-reader.sh"
    # shellcheck disable=SC1091 # the doc's command, localized
    . "$T_TMP/ngx-reader.sh"
    READER_PID=$!
    PIDS="$PIDS $READER_PID"
    retry 50 test -S "$D/release.sock"
    reader_user nginx "$READER_PID"
    check "nginx: the reader binds its socket, mode 0660, nginx's group ($(stat -c '%a %G' "$D/release.sock" 2>&1))" \
        eq "$(stat -c '%a %G' "$D/release.sock" 2>&1)" "660 $GROUP"
    nginx_conf "$D/nginx.conf" user="nobody $GROUP" workers=2 \
        log_level=info "$D/nginx-site.conf"
    "$NGINX" -c "$D/nginx.conf" -e "$D/nginx-error.log" -g 'daemon off;' \
        >>"$D/nginx-start.log" 2>&1 &
    NGX_PID=$!
    PIDS="$PIDS $NGX_PID"
    NGX_URL=http://127.0.0.1:$P_NGX/api/x
    if retry 50 served "$NGX_URL"; then
        pass "nginx: the doc's site answers"
        lease_scenarios nginx "$NGX_URL" "kill -STOP $READER_PID" \
            "kill -CONT $READER_PID"
        check "nginx: the late releases find their leases expired (reader's log)" \
            reader_said "$D/reader-ngx.log" 'unknown or expired [1-9]'
    else
        fail "nginx: the doc's site answers" "$(tail -n 5 "$D/nginx-start.log" "$D/nginx-error.log" 2>&1)"
    fi
else
    fail "nginx is installed ($NGINX)"
fi

# ---------------------------------------------------------------- lighttpd

doc_block "$DEPLOY" "Lease release: lighttpd" | localize lt >"$T_TMP/lt.sh"
sh "$T_TMP/lt.sh"
check "lighttpd: the doc's file written, with this file's paths" \
    no_system_path "$D/lt-site.conf"
cat >"$D/lt.conf" <<LT
server.port = $P_LT
server.bind = "127.0.0.1"
server.document-root = "$D"
server.errorlog = "$D/lt-error.log"
server.pid-file = "$D/lt.pid"
include "$D/lt-site.conf"
LT
LT_URL=http://127.0.0.1:$P_LT/api/x
if lighttpd_start "$D/lt.conf" "$D/lt-error.log" "$P_LT" &&
    retry 50 served "$LT_URL"; then
    pass "lighttpd: the doc's file answers"
    rp=$(reader_pid "$D/reader-lt.conf")
    check "lighttpd: started the reader ($rp)" ne "$rp" ""
    reader_user lighttpd "$rp"
    lease_scenarios lighttpd "$LT_URL" "kill -STOP $rp" "kill -CONT $rp"
    check "lighttpd: the late releases find their leases expired (reader's log)" \
        reader_said "$D/reader-lt.log" 'unknown or expired [1-9]'
else
    fail "lighttpd: the doc's file answers" "$(tail -n 5 "$D/lt-error.log" 2>&1)"
fi
stop_process "$LT_PID" TERM

# ---------------------------------------------------------------- Apache

doc_block "$DEPLOY" "Lease release: Apache" | localize ap >"$T_TMP/ap.sh"
sh "$T_TMP/ap.sh"
check "Apache: the doc's file written, with this file's paths" \
    no_system_path "$D/ap-site.conf"
if [ -x "$APACHE" ]; then
    mkdir -p "$D/run"
    # (the doc's ProxyPass needs mod_proxy_http besides what apache_conf
    # loads)
    echo "LoadModule proxy_http_module $MODULES/mod_proxy_http.so" \
        >"$D/ap-mods.conf"
    # Enough idle children for MAX slow requests and the one after them.
    apache_conf "$D/httpd.conf" listen="$P_AP" user="nobody $GROUP" \
        error_log="$D/ap-error.log" servers="8 8 12 16" \
        "$D/ap-mods.conf" "$D/ap-site.conf"
    "$APACHE" -t -f "$D/httpd.conf" >>"$D/ap-start.log" 2>&1
    check "Apache: apache2 -t takes the doc's file" eq "$?" 0
    # Its own session: Apache signals its whole process group on shutdown.
    setsid "$APACHE" -f "$D/httpd.conf" -D FOREGROUND >>"$D/ap-start.log" 2>&1 &
    HTTPD_PID=$!
    PIDS="$PIDS $HTTPD_PID"
    AP_URL=http://127.0.0.1:$P_AP/api/x
    if retry 50 served "$AP_URL"; then
        pass "Apache: the doc's file answers"
        rp=$(reader_pid "$D/reader-ap.conf")
        check "Apache: started the reader ($rp)" ne "$rp" ""
        reader_user Apache "$rp"
        lease_scenarios Apache "$AP_URL" "kill -STOP $rp" "kill -CONT $rp"
        check "Apache: the late releases find their leases expired (reader's log)" \
            reader_said "$D/reader-ap.log" 'unknown or expired [1-9]'
    else
        fail "Apache: the doc's file answers" "$(tail -n 5 "$D/ap-start.log" "$D/ap-error.log" 2>&1)"
    fi
    stop_process "$HTTPD_PID" TERM
else
    fail "apache2 is installed ($APACHE)"
fi

# ---------------------------------------------------------------- the reader

# Bad lines: counted, the first of an interval logged with its reason;
# a line too long is one bad line, and the reader goes on.
{
    printf 'garbage %s\n' 1 2 3 4
    head -c 5000 /dev/zero | tr '\0' x
    printf '\nlease=- cost=-\nlease=abc cost=7\n'
} | "$BUILD/ratelimit-release" -n -i 1 >"$T_TMP/dry.out" 2>"$T_TMP/dry.err"
check "reader -n: exits 0 at the end of its input ($?)" eq "$?" 0
check "reader -n: what each line means ($(tr '\n' '|' <"$T_TMP/dry.out"))" \
    eq "$(tr '\n' '|' <"$T_TMP/dry.out")" \
    "bad line: a field that is not NAME=VALUE|bad line: a field that is not NAME=VALUE|bad line: a field that is not NAME=VALUE|bad line: a field that is not NAME=VALUE|bad line: longer than the longest line taken|no lease|release abc cost 7|"
check "reader: one bad line logged in the interval ($(grep -c 'bad line (' "$T_TMP/dry.err"))" \
    eq "$(grep -c 'bad line (' "$T_TMP/dry.err")" 1
check "reader: the counts say 5 bad lines" grep -q 'bad lines 5,' "$T_TMP/dry.err"

# The doc's example of -n.
doc_block "$DEPLOY" "The reader: ratelimit-release" |
    sed "s|ratelimit-release -n|\"\$BUILD/ratelimit-release\" -n|" >"$T_TMP/dry.sh"
out=$(sh "$T_TMP/dry.sh" 2>/dev/null | tr '\n' '|')
check "the doc's example of -n prints what the doc says ($out)" \
    eq "$out" "no lease|release 0d3c5e4a-1b2c-4d5e-8f90-a1b2c3d4e5f6.00112233445566778899aabbccddeeff cost 350|"

# The socket: one reader at a time; a file that is not a socket is left
# alone.
if [ -S "$D/release.sock" ]; then
    "$BUILD/ratelimit-release" -n -s "$D/release.sock" >/dev/null \
        2>"$T_TMP/inuse.err"
    rc=$?
    check "reader: a socket another reader is bound to is refused (exit $rc)" \
        eq "$rc/$(grep -c 'in use by a running reader' "$T_TMP/inuse.err")" 1/1
fi
echo keep >"$D/not-a-socket"
"$BUILD/ratelimit-release" -n -s "$D/not-a-socket" >/dev/null \
    2>"$T_TMP/file.err"
rc=$?
check "reader: a file that is not a socket is refused and kept (exit $rc)" \
    eq "$rc/$(cat "$D/not-a-socket")" 1/keep
"$BUILD/ratelimit-release" -r 0 >/dev/null 2>&1
check "reader: -r 0 is refused (exit $?)" eq "$?" 1

# Every long option of --help is in the manual page.
missing=
for opt in $("$BUILD/ratelimit-release" --help | grep -o -- '--[a-z-]*' | sort -u); do
    grep -Eq -- "^\.It Fl .* -${opt#--}( |\$)" "$ROOT/src/ratelimit-release.8" ||
        missing="$missing $opt"
done
check "ratelimit-release.8 describes every option of --help (missing:$missing)" \
    eq "$missing" ""

# A lease id of another shape than the service's is a bad line too.
app_conf_lines "$D/reader-z.conf" "log = $D/reader-z.log"
printf 'lease=abc cost=7\n' | "$BUILD/ratelimit-release" -i 1 -c "$D/reader-z.conf"
check "reader: a lease id not of the service's shape is a bad line ($?)" \
    grep -q 'bad lines 1,' "$D/reader-z.log"

# A release Redis never takes: tried -r times, then left to its ttl.
app_conf_lines "$D/reader-x.conf" "log = $D/reader-x.log"
stop_redis
t0=$(now_ms)
printf 'lease=0d3c5e4a-1b2c-4d5e-8f90-a1b2c3d4e5f6.00112233445566778899aabbccddeeff\n' |
    "$BUILD/ratelimit-release" -r 3 -i 1 -c "$D/reader-x.conf"
rc=$?
t1=$(now_ms)
start_redis
check "reader, Redis down: exits 0 at the end of its input ($rc)" eq "$rc" 0
check "reader, Redis down: the release is left to its ttl after 3 tries, as logged" \
    grep -q 'not released after 3 tries (Redis unavailable): left to its ttl' \
    "$D/reader-x.log"
check "reader, Redis down: ... after the pauses (50 + 100 ms; took $((t1 - t0)) ms)" \
    ge $((t1 - t0)) 150
stack_touch

# A release Redis refuses at first (an error: the script may not run for
# now) is tried again, and released once Redis takes it.
check_req "$KEY" '{"route":"/api/x","subject":"retry"}'
lease=$(json_field lease)
check "a check through the API takes a lease ($STATUS)" matches "$lease" '^[0-9a-f-]{36}\.[0-9a-f]{32}$'
app_conf_lines "$D/reader-y.conf" "log = $D/reader-y.log"
rcli ACL SETUSER default -evalsha -eval >/dev/null
printf 'lease=%s\n' "$lease" |
    "$BUILD/ratelimit-release" -r 8 -i 1 -c "$D/reader-y.conf" &
ry=$!
sleep 0.4
rcli ACL SETUSER default +evalsha +eval >/dev/null
wait "$ry"
check "reader, Redis refusing for 0.4 s: exits 0 at the end of its input ($?)" eq "$?" 0
check "reader, Redis refusing for 0.4 s: tried again and released" \
    grep -Eq 'released 1, .* retries [1-9]' "$D/reader-y.log"
req POST /v1/release "{\"lease\":\"$lease\"}" "X-API-Key: $KEY" \
    "Content-Type: application/json"
check "... a release after it is told the lease was released ($STATUS $(json_field error))" \
    eq "$STATUS" 409

# The systemd units: valid, and the socket handed on fd 0 as
# ratelimit-release.socket says is read as datagrams.
mkdir -p "$D/sd"
for unit in ratelimit-release.socket ratelimit-release.service; do
    sed -e "s#/usr/local/bin/ratelimit-release#$BUILD/ratelimit-release#g" \
        -e "s#/etc/ratelimit-fcgi/ratelimit.conf#$D/reader-sd.conf#g" \
        -e "s#/run/ratelimit/release.sock#$D/sd/release.sock#g" \
        "$ROOT/conf/$unit" >"$D/sd/$unit"
done
if command -v systemd-analyze >/dev/null 2>&1; then
    rc=0
    (cd "$D/sd" && systemd-analyze verify --man=no \
        ./ratelimit-release.socket ./ratelimit-release.service) \
        >"$D/verify.out" 2>&1 || rc=$?
    check "systemd-analyze verify: the reader's units are valid ($rc: $(head -c 300 "$D/verify.out"))" \
        eq "$rc/$(wc -c <"$D/verify.out" | tr -d ' ')" 0/0
else
    echo "# skip: no systemd-analyze here; the units are not verified"
fi
app_conf_lines "$D/reader-sd.conf" "log = $D/reader-sd.log"
exec_start=$(sed -n 's/^ExecStart=//p' "$D/sd/ratelimit-release.service")
listen=$(sed -n 's/^ListenDatagram=//p' "$D/sd/ratelimit-release.socket")
mode=$(sed -n 's/^SocketMode=//p' "$D/sd/ratelimit-release.socket")
# shellcheck disable=SC2086 # ExecStart is split at blanks, as systemd does
python3 - "$listen" "$mode" "$D/reader-sd.pid" $exec_start <<'PY' &
import os, socket, sys
path, mode, pidfile, argv = sys.argv[1], int(sys.argv[2], 8), sys.argv[3], sys.argv[4:]
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(path)
os.chmod(path, mode)
os.dup2(s.fileno(), 0)
with open(pidfile, "w") as f:
    f.write(str(os.getpid()))
os.execv(argv[0], argv)
PY
retry 30 test -s "$D/reader-sd.pid"
sd_pid=$(cat "$D/reader-sd.pid")
PIDS="$PIDS $sd_pid"
check "systemd: the reader takes the socket on fd 0 as datagrams" \
    reader_said "$D/reader-sd.log" 'reading datagrams on stdin'
check "systemd: the socket's mode is the unit's ($(stat -c %a "$listen"))" \
    eq "0$(stat -c %a "$listen")" "$mode"
python3 -c '
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
for m in (b"<190>Dec  5 17:59:00 ratelimit: lease=- cost=-", b"junk"):
    s.sendto(m, sys.argv[1])' "$listen"
sleep 0.3
stop_process "$sd_pid" TERM
check "systemd: one datagram without a lease, one bad, counted at the stop" \
    grep -q 'no lease 1, bad lines 1,' "$D/reader-sd.log"

finish
