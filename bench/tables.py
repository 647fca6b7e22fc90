#!/usr/bin/env python3
"""The arithmetic and the tables of `make bench` (bench/bench.sh).

bench.sh runs things and records what it measured, raw, one line per
measurement in a file (build/bench-raw.txt): a kind, then name=value
fields, separated by tabs.  This program reads that file and does every
computation the report needs: each target's median round, the ratios of
every round and their median, CPU per check, the tiers of the open loop
and whether each rate was held.  The kinds:

  meta       the run's settings and what bench.sh noted once (date,
             commit, CPUs, clock ticks per second, load averages, ...);
             several lines add up, a later value winning
  run        one target's timed run in one round: wrk's requests,
             duration and percentiles, its errors, Redis's EVALSHA count
             and time, PostgreSQL statements, CPU ticks of the front end,
             the application and Redis, wrk's own CPU seconds before and
             after, the machine's busy ticks; failed=1 when none completed;
             for target j also the checks given a lease, the releases
             answered "released" and the other answers, as wrk's Lua
             counted them
  rss        the workers' VmRSS ("pid:kB ...") before or after a run
  tier       one constant-rate tier: the target, the offered rate and
             rategen's RATE line (empty when it printed none)
  ratenote   what a tier's errors were, from rategen's stderr
  wake       wakelag's WAKE line
  mem        Redis memory per counter of one algorithm
  rsssample  one worker's memory at one moment of the memory run
  rssrun     rategen's RATE line of the memory run
  leaseexact the releases counted alone after the rounds: checks sent,
             leases they were given, releases answered 200, Redis's
             EVALSHA and other commands during the releases, and its
             EVALSHA usec during the checks and during the releases, and
             during as many token-bucket checks sent the same way before

Usage:
  tables.py report RAW        prints the tables (what build/bench.txt holds)
  tables.py held RATEFILE     exit 0 when the RATE line in RATEFILE held
                              its rate (98% achieved, no error, p99 < 10 ms)
  tables.py plot RAW DIR      writes DIR/rate.T.dat (offered p50 p99, ms)
                              for gnuplot, T each tier target's letter
Exits 2 on bad usage or an unreadable file.
"""

import sys


def num(text):
    """A field as a number the way awk reads one: "-" or "" is 0."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return 0.0


def fields(words):
    """NAME=VALUE words as a dict."""
    out = {}
    for word in words:
        name, _, value = word.partition("=")
        out[name] = value
    return out


def read_raw(path):
    """The raw file as (meta dict, list of (kind, fields))."""
    meta, records = {}, []
    with open(path, encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            if not parts[0]:
                continue
            rec = fields(parts[1:])
            if parts[0] == "meta":
                meta.update(rec)
            else:
                records.append((parts[0], rec))
    return meta, records


def median_index(values):
    """The position of the median of VALUES (the lower middle for an even
    count), sorting positions by value as bench.sh always has."""
    idx = list(range(len(values)))
    for i in range(len(idx)):
        for j in range(i + 1, len(idx)):
            if values[idx[j]] < values[idx[i]]:
                idx[i], idx[j] = idx[j], idx[i]
    return idx[(len(idx) + 1) // 2 - 1]


def rate_result(line):
    """rategen's RATE line as its fields, or None."""
    if not line or not line.startswith("RATE "):
        return None
    return fields(line.split()[1:])


def tier_row(target, offered, line):
    """One tier as a row of strings: offered, achieved, p50, p95, p99, max
    (ms), errors, held ("yes"/"no")."""
    f = rate_result(line)
    if f is None:
        return [offered, "-", "-", "-", "-", "-", "failed", "no"]
    errors = int(num(f.get("status_errors")) + num(f.get("socket_errors")) +
                 num(f.get("timeouts")))
    achieved = num(f.get("achieved"))
    held = (errors == 0 and achieved >= 0.98 * num(f.get("offered")) and
            num(f.get("p99_us")) < 10000)
    return ["%d" % num(f.get("offered")), "%.0f" % achieved,
            "%.2f" % (num(f.get("p50_us")) / 1000),
            "%.2f" % (num(f.get("p95_us")) / 1000),
            "%.2f" % (num(f.get("p99_us")) / 1000),
            "%.2f" % (num(f.get("max_us")) / 1000), "%d" % errors,
            "yes" if held else "no"]


class Run:
    """One target's timed run in one round, with what the tables show."""

    def __init__(self, rec, tick):
        self.name = rec["target"]
        self.letter = self.name[:1]
        self.failed = rec.get("failed") == "1"
        if self.failed:
            self.row = [self.name, "-", "-", "-", "failed", "-", "-"]
            return
        req = int(rec["requests"])
        dur = int(rec["duration_us"])
        over = rec.get("over") == "1"
        status = 0 if over else int(rec["status_errors"])
        sock = int(rec["socket_errors"])
        evalsha = int(rec["evalsha"])
        rt = "-"
        if over or evalsha > 0 or rec.get("ours") == "1":
            rt = "%.3f" % (evalsha / req)
        self.row = [self.name, "%.0f" % (req / (dur / 1e6)),
                    "%.2f" % (num(rec["p50_us"]) / 1000),
                    "%.2f" % (num(rec["p99_us"]) / 1000),
                    "%d%s" % (status, "" if sock == 0 else "/%d" % sock),
                    rt, rec.get("pg", "-")]
        wrk = "%.0f" % ((num(rec["wrk_cpu_after"]) -
                         num(rec["wrk_cpu_before"])) * tick)
        usec = int(rec.get("evalsha_usec") or 0)
        # lighttpd (the front end), app, redis, wrk, machine ticks;
        # duration; requests; Redis's time per EVALSHA.
        self.cpu = [int(rec["front_ticks"]), int(rec["app_ticks"]),
                    int(rec["redis_ticks"]), int(wrk),
                    int(rec["machine_ticks"]), dur, req]
        self.in_script = "%.1f" % (usec / evalsha) if evalsha > 0 else "-"
        self.evalsha = evalsha
        self.checks = int(num(rec.get("checks")))
        self.releases = int(num(rec.get("releases")))

    @property
    def rps(self):
        return num(self.row[1])


class Report:
    def __init__(self, meta, records):
        self.meta = meta
        self.tick = int(meta.get("tick") or 100)
        self.ncpu = int(meta.get("cpus") or 1)
        self.runs = [Run(rec, self.tick) for kind, rec in records
                     if kind == "run"]
        self.records = records
        self.out = []

    def p(self, text=""):
        self.out.append(text)

    def kind(self, name):
        return [rec for kind, rec in self.records if kind == name]

    # ------------------------------------------------------------ rounds

    def by_target(self):
        """Runs grouped by target letter, letters in order of first run."""
        groups = {}
        for run in self.runs:
            groups.setdefault(run.letter, []).append(run)
        return groups

    def median_runs(self):
        """Each target's median round by req/s."""
        return [runs[median_index([r.rps for r in runs])]
                for runs in self.by_target().values()]

    def ratio(self, field, x, y):
        """The median over the rounds of the ratio x / y of a row field (1
        req/s, 2 p50, 3 p99), and every round's: (median, [values]), each
        a string, "-" where a side is missing or zero."""
        groups = self.by_target()
        rounds = max((len(v) for v in groups.values()), default=0)
        vals = []
        for r in range(rounds):
            a = groups.get(x, [])
            b = groups.get(y, [])
            va = num(a[r].row[field]) if r < len(a) else 0
            vb = num(b[r].row[field]) if r < len(b) else 0
            vals.append(va / vb if va > 0 and vb > 0 else -1)
        shown = ["-" if v < 0 else "%.2f" % v for v in vals]
        if not vals:
            return "-", shown
        m = sorted(vals)[(rounds + 1) // 2 - 1]
        return ("-" if m < 0 else "%.2f" % m), shown

    def med(self, field, x, y, show=False):
        m, every = self.ratio(field, x, y)
        if show and len(every) > 1:
            return "%s (rounds: %s)" % (m, " ".join(every))
        return m

    def cpu_sums(self):
        """Per target name: the CPU columns added up over the rounds, and
        the mean of the rounds' time per EVALSHA."""
        sums, order = {}, []
        for run in self.runs:
            if run.failed:
                continue
            if run.name not in sums:
                sums[run.name] = [[0] * 7, []]
                order.append(run.name)
            s = sums[run.name]
            s[0] = [a + b for a, b in zip(s[0], run.cpu)]
            if run.in_script != "-":
                s[1].append(float(run.in_script))
        return [(name, sums[name][0],
                 "%.1f" % (sum(sums[name][1]) / len(sums[name][1]))
                 if sums[name][1] else "-") for name in order]

    # ------------------------------------------------------------ report

    def header(self):
        m = self.meta
        self.p("ratelimit-fcgi benchmark, %s, commit %s" %
               (m.get("date", "?"), m.get("commit", "?")))
        if m.get("only") != "rate":
            self.p("%s CPUs; wrk %s connections, %s threads, %s s per target "
                   "after %s s warm-up, %s rounds; %s workers each; load "
                   "average before: %s" %
                   (m["cpus"], m["connections"], m["threads"], m["seconds"],
                    m["warmup"], m["rounds"], m["workers"], m["loadavg"]))
        else:
            self.p("%s CPUs; %s workers each" % (m["cpus"], m["workers"]))
        self.p("ratelimit-fcgi: log_level warn, max_requests 0, cache TTLs "
               "3600 s (warm steady state)")
        if m.get("redis_type") == "cluster":
            self.p("Redis: a Cluster of 3 primaries and 3 replicas; the Redis "
                   "figures are those of the primary 127.0.0.1:%s, which owns "
                   "the demo tenant" % m["redis_port"])

    def closed_loop(self):
        m = self.meta
        self.p("ratios are ours / probe: for req/s higher is better, for "
               "latency lower")
        self.p()
        fmt = "%-31s %8s %7s %7s %8s %12s %8s"
        self.p(fmt % ("target", "req/s", "p50 ms", "p99 ms", "non-2xx",
                      "EVALSHA/req", "PG stmts"))
        for run in self.median_runs():
            self.p(fmt % tuple(run.row))
        self.p("each row: the target's median round; non-2xx: answers >= 400 (wrk's")
        self.p("count), then \"/socket errors\" if any; EVALSHA/req and PG stmts: in")
        self.p("Redis and PostgreSQL during that round's timed run (PG stmts leaves out")
        self.p("the batched write of last_used_at, each key at most once a minute)")
        self.p()
        self.p("ratios c (ours) / b (evalsha probe): req/s %s; p50 %s, p99 %s" %
               (self.med(1, "c", "b", True), self.med(2, "c", "b"),
                self.med(3, "c", "b")))
        self.p("ratios c (ours) / a (noop probe):    req/s %s; p50 %s, p99 %s" %
               (self.med(1, "c", "a", True), self.med(2, "c", "a"),
                self.med(3, "c", "a")))
        self.p("ratios d (new subjects) / c:          req/s %s" %
               self.med(1, "d", "c", True))
        self.p("ratios d (new subjects) / b:          req/s %s" %
               self.med(1, "d", "b", True))
        self.p("ratios e (over the limit) / b:        req/s %s" %
               self.med(1, "e", "b", True))
        self.p("ratios e (over the limit) / a:        req/s %s" %
               self.med(1, "e", "a", True))
        groups = self.by_target()
        if "f" in groups:
            self.p("ratios f (TLS to Redis) / c:          req/s %s; p50 %s, "
                   "p99 %s" % (self.med(1, "f", "c", True),
                               self.med(2, "f", "c"), self.med(3, "f", "c")))
        if "g" in groups and "h" in groups:
            self.p("ratios g (nginx) / c (lighttpd):      req/s %s; p99 %s" %
                   (self.med(1, "g", "c", True), self.med(3, "g", "c")))
            rps, p99 = self.ratio(1, "h", "g")[0], self.ratio(3, "h", "g")[0]
            self.p("ratios h (nginx keep-alive) / g:      req/s %s; p99 %s" %
                   (self.med(1, "h", "g", True), self.med(3, "h", "g", True)))
            met = rps != "-" and p99 != "-" and \
                float(rps) >= 1.2 and float(p99) <= 1
            self.p("goal, keep-alive at least 1.2x the req/s without and no "
                   "worse p99 (median rounds): %s" %
                   ("met" if met else "NOT met"))
        self.p()
        self.p("Where the time goes: CPU microseconds per request during the timed runs")
        self.p("of all rounds")
        self.p("(rest: the kernel outside these processes, and anything else running")
        self.p("on the machine; busy: of all %d CPUs; in script: time Redis reports" %
               self.ncpu)
        self.p("per EVALSHA, part of the redis column):")
        self.p("%-31s %8s %6s %6s %6s %6s %6s %6s %9s" %
               ("target", "lighttpd", "app", "redis", "wrk", "rest", "total",
                "busy", "in script"))
        cpu = self.cpu_sums()
        for name, (front, app, redis, wrk, machine, dur, req), insc in cpu:
            if req <= 0 or dur <= 0:
                continue
            us = 1e6 / self.tick / req
            rest = max(machine - front - app - redis - wrk, 0)
            self.p("%-31s %8.0f %6.0f %6.0f %6.0f %6.0f %6.0f %5.0f%% %9s" %
                   (name, front * us, app * us, redis * us, wrk * us,
                    rest * us, machine * us,
                    100 * machine / self.tick / (dur / 1e6) / self.ncpu, insc))
        self.p("(d builds every request in wrk's Lua, so its wrk column is higher)")
        if any(name[:1] == "j" for name, _, _ in cpu):
            self.p("(j: per request, a check or a release; its requests "
                   "are built in wrk's Lua)")
        if any(name[:1] in "gh" for name, _, _ in cpu):
            self.p("(g and h: the lighttpd column is nginx's, its master and "
                   "worker)")
        self.p()
        # Redis runs commands on one thread: its CPU per check bounds what
        # one server (or one Redis Cluster primary) can take.
        for name, (_, _, redis, _, _, _, req), _ in cpu:
            if req > 0 and redis > 0 and name[:2] in ("c ", "d "):
                us = redis * 1e6 / self.tick / req
                self.p("one Redis core at 100%%, %s: %.0f µs of Redis CPU per "
                       "check, about %.0f checks/s" % (name[0], us, 1e6 / us))
        self.probe_cost()
        self.tls_cost(cpu)
        self.lease_cost()
        self.p()
        self.worker_rss()
        self.p("Redis (reached over %s) after the run: %s keys, %s used" %
               (m.get("redis_transport"), m.get("redis_keys") or "?",
                m.get("redis_memory") or "?"))
        self.p()
        self.p("Redis memory per counter (%s checks of new subjects on a" %
               m.get("mem_counters"))
        self.p("one-limit rule; used_memory after minus before, per check answered")
        self.p("200: each made one counter; the reply slots, one per worker and")
        self.p("tenant, were there before and are only overwritten):")
        self.p("  %-16s %8s %8s %14s %15s" %
               ("algorithm", "200s", "new keys", "bytes in all",
                "bytes per check"))
        for rec in self.kind("mem"):
            ok, keys, nbytes = (int(num(rec[k])) for k in
                                ("ok", "keys", "bytes"))
            self.p("  %-16s %8d %8d %14d %15s" %
                   (rec["algorithm"], ok, keys, nbytes,
                    "%.0f" % (nbytes / ok) if ok > 0 else "-"))
        self.memory_run()

    def cpu_ratio(self, col, x, y):
        """CPU column col (1 app, 2 redis) per request of target x against
        target y's, round by round: (median, [values]) as strings, or None
        when no round has both."""
        groups = self.by_target()
        vals = []
        for a, b in zip(groups.get(x, []), groups.get(y, [])):
            if a.failed or b.failed or not a.cpu[6] or not b.cpu[6] or \
                    not b.cpu[col]:
                continue
            vals.append((a.cpu[col] / a.cpu[6]) / (b.cpu[col] / b.cpu[6]))
        if not vals:
            return None
        return ("%.2f" % sorted(vals)[(len(vals) + 1) // 2 - 1],
                ["%.2f" % v for v in vals])

    def probe_cost(self):
        """Redis's and the application's CPU per check of c (one sliding
        window), i, k and l (one, two and eight token buckets) against the
        EVALSHA probe's (b) in the same round: medians of the rounds, and
        the goals for a one-limit check (Redis at most 1.3x, the
        application at most 1.0x)."""
        names = [(t, n) for t, n in (("c", "c (sliding window)"),
                                     ("i", "i (token bucket)"),
                                     ("k", "k (2 token buckets)"),
                                     ("l", "l (8 token buckets)"))
                 if self.cpu_ratio(2, t, "b") is not None]
        if not names:
            return
        self.p()
        self.p("CPU per check against the EVALSHA probe's (b), the median of "
               "the rounds' ratios:")
        for col, what, goal, judged in ((2, "Redis", 1.3, "i"),
                                        (1, "application", 1.0, "c")):
            for t, label in names:
                r = self.cpu_ratio(col, t, "b")
                if r is None:
                    continue
                note = ""
                if t == judged:
                    note = "; goal at most %.1fx: %s" % (
                        goal, "met" if float(r[0]) <= goal else "NOT met")
                self.p("  %-11s %-20s %sx (rounds: %s%s)" %
                       (what, label, r[0], " ".join(r[1]), note))

    def tls_cost(self, cpu):
        """What TLS to Redis adds per check: f against c, application and
        Redis CPU over all rounds, and the rounds' ratios of the two
        together."""
        per = {name[:1]: (app, redis, req) for name, (_, app, redis, _, _,
                                                      _, req), _ in cpu}
        if "f" not in per or "c" not in per or not per["c"][2] or \
                not per["f"][2]:
            return
        us = {t: (per[t][0] * 1e6 / self.tick / per[t][2],
                  per[t][1] * 1e6 / self.tick / per[t][2]) for t in "cf"}

        def pct(new, old):
            return "%+.0f%%" % (100 * (new / old - 1)) if old > 0 else "-"
        both_c, both_f = sum(us["c"]), sum(us["f"])
        groups = self.by_target()
        rounds = []
        for c, f in zip(groups.get("c", []), groups.get("f", [])):
            if c.failed or f.failed or not c.cpu[6] or not f.cpu[6] or \
                    not c.cpu[1] + c.cpu[2]:
                rounds.append("-")
                continue
            rounds.append("%.2f" % (((f.cpu[1] + f.cpu[2]) / f.cpu[6]) /
                                    ((c.cpu[1] + c.cpu[2]) / c.cpu[6])))
        growth = 100 * (both_f / both_c - 1) if both_c > 0 else None
        self.p()
        self.p("TLS to Redis, f against c, CPU µs per check over all rounds:")
        self.p("  application %.0f -> %.0f (%s), Redis %.0f -> %.0f (%s);" %
               (us["c"][0], us["f"][0], pct(us["f"][0], us["c"][0]),
                us["c"][1], us["f"][1], pct(us["f"][1], us["c"][1])))
        self.p("  both %.0f -> %.0f (%s; goal at most +15%%: %s; f / c by "
               "round: %s)" %
               (both_c, both_f, pct(both_f, both_c),
                "met" if growth is not None and growth <= 15 else "NOT met",
                " ".join(rounds)))

    def lease_cost(self):
        """Target j against i: Redis CPU per check and release of a lease
        against that of a token-bucket check, over all rounds and by
        round; EVALSHA per release in j's runs and counted alone."""
        groups = self.by_target()
        pairs = [(i, j) for i, j in zip(groups.get("i", []),
                                        groups.get("j", []))
                 if not i.failed and not j.failed and i.cpu[6] and
                 j.cpu[6] and i.cpu[2]]
        exact = self.kind("leaseexact")
        if not pairs and not exact:
            return
        self.p()
        self.p("Leases, j (a check on a rule of one concurrency limit, then "
               "its release)")
        if pairs:
            # wrk's requests are the checks and the releases: a check and
            # its release are two of them.
            us = 1e6 / self.tick
            i_us = sum(i.cpu[2] for i, _ in pairs) * us / \
                sum(i.cpu[6] for i, _ in pairs)
            j_us = sum(j.cpu[2] for _, j in pairs) * us / \
                (sum(j.cpu[6] for _, j in pairs) / 2)
            rounds = ["%.2f" % ((j.cpu[2] / (j.cpu[6] / 2)) /
                                (i.cpu[2] / i.cpu[6])) for i, j in pairs]
            ratio = j_us / i_us if i_us > 0 else None
            self.p("against i (a check on a rule of one token bucket), "
                   "Redis CPU µs over all rounds:")
            self.p("  i %.0f per check, j %.0f per check and release: "
                   "%.2fx (goal at most 1.2x: %s;" %
                   (i_us, j_us, ratio or 0,
                    "met" if ratio is not None and ratio <= 1.2
                    else "NOT met"))
            self.p("  j / i by round: %s)" % " ".join(rounds))
            checks = sum(j.checks for _, j in pairs)
            releases = sum(j.releases for _, j in pairs)
            evalsha = sum(j.evalsha for _, j in pairs)
            self.p("  j's timed runs: %d checks given a lease, %d releases, "
                   "%d EVALSHA:" % (checks, releases, evalsha))
            if releases > 0:
                self.p("  %.3f EVALSHA per release, counting one per check "
                       "(up to one request per" %
                       ((evalsha - checks) / releases))
                self.p("  connection was still in flight when wrk "
                       "stopped counting)")
        for rec in exact:
            n = int(num(rec.get("released")))
            ev = int(num(rec.get("evalsha")))
            other = int(num(rec.get("other")))
            met = (n > 0 and ev == n and other == 0 and
                   rec.get("leases") == rec.get("checks") and
                   n == int(num(rec.get("checks"))))
            self.p("EVALSHA per release, counted alone: %s checks, %s "
                   "leases, %d released (200)," %
                   (rec.get("checks"), rec.get("leases"), n))
            self.p("  %d EVALSHA and %d other Redis commands: %s per "
                   "release (goal exactly one: %s)" %
                   (ev, other, "%.3f" % (ev / n) if n > 0 else "-",
                    "met" if met else "NOT met"))
            nc = int(num(rec.get("leases")))
            if "check_usec" in rec and nc > 0 and n > 0:
                tb = int(num(rec.get("tb_checks")))
                self.p("  time in the script (Redis's usec per EVALSHA, one "
                       "at a time): token-bucket")
                self.p("  check %s µs, lease check %.1f µs, release %.1f µs" %
                       ("%.1f" % (num(rec.get("tb_usec")) / tb) if tb > 0
                        else "-", num(rec["check_usec"]) / nc,
                        num(rec["release_usec"]) / n))

    def worker_rss(self):
        self.p("ratelimit-fcgi workers, VmRSS kB, around the last round's runs of c and d:")
        self.p("  pid       before c   after c  before d   after d")
        last = {}
        for rec in self.kind("rss"):
            last[(rec["target"], rec["when"])] = rec["workers"]
        values, order = {}, []
        for key in (("c", "before"), ("c", "after"), ("d", "before"),
                    ("d", "after")):
            for word in last.get(key, "").split():
                pid, sep, kb = word.partition(":")
                if not sep:
                    continue
                if pid not in values:
                    values[pid] = []
                    order.append(pid)
                values[pid].append(kb)
        for pid in order:
            self.p("  %-8s%s" % (pid, "".join(" %9s" % v for v in values[pid])))
        if any(len(values[pid]) != 4 for pid in order):
            self.p("  (workers changed during the runs)")
        if not order:
            self.p("  (no workers found)")

    def memory_run(self):
        samples = self.kind("rsssample")
        if not samples:
            return
        m = self.meta
        self.p()
        self.p("Worker memory (kB) over %s s of new subjects at %s req/s "
               "(VmRSS = RssAnon, the" % (m.get("rss_seconds"),
                                          m.get("rss_rate")))
        self.p("worker's own, + RssShmem, pages of the shared segment it has touched):")
        self.p("  %8s %8s %9s %9s %9s" %
               ("seconds", "pid", "VmRSS", "RssAnon", "RssShmem"))
        first, last = {}, {}
        for s in samples:
            self.p("  %8s %8s %9s %9s %9s" %
                   (s["seconds"], s["pid"], s["vmrss"], s["anon"],
                    s["shmem"]))
            if num(s["seconds"]) == 0:
                first[s["pid"]] = num(s["anon"])
            last[s["pid"]] = num(s["anon"])
        growth = max([last[p] - first[p] for p in first if p in last] + [0])
        self.p("  largest growth of a worker's RssAnon: %d kB" % growth)
        run = self.kind("rssrun")
        self.p("  %s" % (run[-1]["result"] if run else ""))

    def tiers(self):
        m = self.meta
        self.p()
        self.p("Constant-rate tiers (open loop: %s, %s s per" %
               (m.get("rategen"), m.get("rate_seconds")))
        self.p("tier after 1 s not counted, up to 256 connections; latency from")
        self.p("when each request was due; held = 98% of the rate achieved, no")
        self.p("error, p99 < 10 ms; load average before: %s):" %
               m.get("loadavg_rate", ""))
        wake = self.kind("wake")
        if wake and wake[-1]["result"]:
            f = fields(wake[-1]["result"].split()[1:])
            self.p("waking from a 1 ms sleep (%s sleeps in %s s, the stack "
                   "idle, just before):" % (f.get("sleeps"), f.get("seconds")))
            self.p("  late by > 1 ms %s times, > 2 ms %s, > 5 ms %s; at most "
                   "%.1f ms" % (f.get("late_1ms"), f.get("late_2ms"),
                                f.get("late_5ms"),
                                num(f.get("max_late_us")) / 1000))
        fmt = "%8s  %-18s %8s %7s %7s %7s %8s %7s %5s"
        self.p(fmt % ("offered", "target", "achieved", "p50 ms", "p95 ms",
                      "p99 ms", "max ms", "errors", "held"))
        best, order, goal = {}, [], None
        for rec in self.kind("tier"):
            label = rec["target"]
            row = tier_row(label, rec["offered"], rec.get("result", ""))
            offered, achieved, _, _, p99, _, errors, held = row
            self.p(fmt % (offered, label, achieved, row[2], row[3], p99,
                          row[5], errors, held))
            if held == "yes" and num(offered) > best.get(label, 0):
                best[label] = int(num(offered))
            if label not in order:
                order.append(label)
            if label[:1] == "c" and offered == "5000":
                met = (errors == "0" and num(p99) < 2 and
                       num(achieved) >= 0.98 * 5000)
                goal = ("met" if met else "NOT met", p99, errors)
        self.p("highest rate held with p99 < 10 ms:" + "".join(
            "%s %s %s" % (";" if i else "", label[:1],
                          "%d req/s" % best[label] if label in best
                          else "none")
            for i, label in enumerate(order)))
        if goal:
            self.p("goal, c at 5000 req/s with p99 < 2 ms and no error: %s "
                   "(p99 %s ms, %s errors)" % goal)
        notes = self.kind("ratenote")
        if notes:
            self.p("what the errors were:")
            for n in notes:
                self.p("  %s req/s, %s: %s" % (n["offered"], n["target"],
                                              n["note"]))
        if m.get("svg_drawn") == "1":
            self.p("latency against offered rate drawn in %s" % m.get("svg"))
        self.p("every request of each tier (due_us latency_us status lag_us): "
               "%s/" % m.get("traces"))

    def report(self):
        only = self.meta.get("only", "all")
        self.header()
        if only != "rate":
            self.closed_loop()
        if only != "closed":
            self.tiers()
        if self.meta.get("failed", "0") != "0":
            self.p()
            self.p("FAILED: a target failed, answered non-2xx or exceeded a "
                   "budget (see above)")
        return "\n".join(self.out) + "\n"


def usage():
    sys.stderr.write(__doc__.split("Usage:\n", 1)[1])
    sys.exit(2)


def main(argv):
    if len(argv) < 3:
        usage()
    try:
        if argv[1] == "report" and len(argv) == 3:
            sys.stdout.write(Report(*read_raw(argv[2])).report())
            return 0
        if argv[1] == "held" and len(argv) == 3:
            with open(argv[2], encoding="utf-8") as f:
                line = next((l.strip() for l in f if l.startswith("RATE ")),
                            "")
            return 0 if tier_row("", "", line)[7] == "yes" else 1
        if argv[1] == "plot" and len(argv) == 4:
            _, records = read_raw(argv[2])
            rows = {"a": [], "b": [], "c": []}
            for kind, rec in records:
                if kind == "tier":
                    row = tier_row(rec["target"], rec["offered"],
                                   rec.get("result", ""))
                    rows.setdefault(rec["target"][:1], []).append(
                        "%s %s %s\n" % (row[0], row[2], row[4]))
            for letter, lines in rows.items():
                with open("%s/rate.%s.dat" % (argv[3], letter), "w",
                          encoding="utf-8") as f:
                    f.writelines(lines)
            return 0
    except OSError as e:
        sys.stderr.write("tables.py: %s\n" % e)
        return 2
    usage()
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
