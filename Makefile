# ratelimit-fcgi -- see README.md.  GNU make.

PREFIX ?= /usr/local
DESTDIR ?=
BUILD ?= build
CC ?= cc

PKGS = fcgi hiredis libpq json-c libssl libcrypto
WARNINGS = -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
	-Wwrite-strings -Wpointer-arith
OPT ?= -O2 -g
CFLAGS ?= $(OPT)
ALL_CFLAGS = -std=gnu11 $(WARNINGS) $(CFLAGS) -Isrc -I$(BUILD) \
	$(shell pkg-config --cflags $(PKGS) 2>/dev/null)
LIBS = $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lm

# Pure modules (no network), shared by the service, the admin tool and the
# unit tests.
CORE = config log util buf request algo rules cache limiter response addr fcgi shm keyfilter arena decide authorizer validate cluster stats release_line lease redis_reply
# The Redis client (redis.h), which both programs link.
REDIS_CLIENT = redis_call redis_topology redis_node redis_tls
SERVICE = main master worker api service views status $(REDIS_CLIENT) pg_store listen scoreboard observe lease_call lease_api
CTL = ctl ctl_args ctl_db ctl_migrate ctl_tenant ctl_guard ctl_rule ctl_limit ctl_counter ctl_apply ctl_usage

# The Redis script, in this order: what the call needs (lua/need.lua), the
# algorithms, the clock and the driver (see lua/check.lua).
# $(BUILD)/check.lua, the script embedded, reads only Redis TIME
# (lua/clock.lua); $(BUILD)/check_test.lua, which the Lua tests and
# scripts/accuracy load, has lua/clock_test.lua in its place, which also
# takes a time given as a last "__now_us=" argument.
LUA = lua/need.lua lua/token_bucket.lua lua/sliding_window.lua lua/gcra.lua \
	lua/fixed_window.lua lua/concurrency.lua lua/budget.lua lua/clock.lua \
	lua/lease.lua lua/check.lua
LUA_TEST = $(patsubst lua/clock.lua,lua/clock_test.lua,$(LUA))
MIGRATIONS = $(sort $(wildcard schema/[0-9]*.sql))

CORE_OBJ = $(CORE:%=$(BUILD)/%.o) $(BUILD)/embedded.o
SERVICE_OBJ = $(SERVICE:%=$(BUILD)/%.o)
CTL_OBJ = $(CTL:%=$(BUILD)/%.o)
RELEASE_OBJ = $(BUILD)/release_main.o
HEADERS = $(wildcard src/*.h)

UNIT_SRC = $(wildcard t/check_*.c)

.PHONY: all deps deps-build deps-runtime test unit lua-test integration run stop bench bench-rate bench-scale profile install uninstall deb \
	asan clean test-faults fuzz asan-test lint

all: $(BUILD)/ratelimit-fcgi $(BUILD)/ratelimitctl $(BUILD)/ratelimit-release

$(BUILD):
	@mkdir -p $(BUILD)

$(BUILD)/check.lua: $(LUA) | $(BUILD)
	cat $(LUA) > $@.tmp && mv $@.tmp $@

$(BUILD)/check_test.lua: $(LUA_TEST) | $(BUILD)
	cat $(LUA_TEST) > $@.tmp && mv $@.tmp $@

$(BUILD)/embedded.c: $(BUILD)/check.lua $(MIGRATIONS) www/dashboard.html \
		scripts/embed.sh | $(BUILD)
	sh scripts/embed.sh $(BUILD)/check.lua "$(MIGRATIONS)" \
		www/dashboard.html > $@.tmp && mv $@.tmp $@

# Each object depends on the headers it includes, as the compiler lists
# them (-MMD -MP: $(BUILD)/NAME.d, read back below).  An object without its
# .d (built before this rule, or the .d removed) is built again.
$(BUILD)/%.o: src/%.c $(BUILD)/%.d | $(BUILD)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c -o $@ $<

DEPFILES = $(patsubst %.o,%.d,$(SERVICE_OBJ) $(CTL_OBJ) $(RELEASE_OBJ) \
	$(filter-out $(BUILD)/embedded.o,$(CORE_OBJ)))
$(DEPFILES): ;
-include $(wildcard $(DEPFILES))

$(BUILD)/embedded.o: $(BUILD)/embedded.c src/ratelimit.h
	$(CC) $(ALL_CFLAGS) -c -o $@ $<

$(BUILD)/ratelimit-fcgi: $(SERVICE_OBJ) $(CORE_OBJ)
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(LIBS)

# (the Redis client: the counter and usage commands reach Redis as the
# service does)
$(BUILD)/ratelimitctl: $(CTL_OBJ) $(CORE_OBJ) $(REDIS_CLIENT:%=$(BUILD)/%.o)
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(LIBS)

# The reader of the web servers' end-of-request lines (leases released
# through the service's Redis client, as ratelimitctl reaches Redis).
$(BUILD)/ratelimit-release: $(RELEASE_OBJ) $(CORE_OBJ) $(BUILD)/lease_call.o \
		$(REDIS_CLIENT:%=$(BUILD)/%.o)
	$(CC) $(ALL_CFLAGS) -o $@ $^ $(LIBS)

# One Check binary: t/check_main.c registers the suites of t/check_*.c.
$(BUILD)/check_all: $(UNIT_SRC) t/fixtures.c t/check.h t/fixtures.h \
		$(CORE_OBJ) $(HEADERS)
	$(CC) $(ALL_CFLAGS) -It $(shell pkg-config --cflags check) -o $@ \
		$(UNIT_SRC) t/fixtures.c $(CORE_OBJ) $(LIBS) $(shell pkg-config --libs check)

deps:
	@sh scripts/install-deps.sh

# Only what building the binaries and the Debian package needs (no server
# is installed, none is stopped); only what running an installed copy needs
# (the libraries, PostgreSQL and Redis, left running).
deps-build:
	@sh scripts/install-deps.sh --build

deps-runtime:
	@sh scripts/install-deps.sh --runtime

# The README's test command: unit tests, Lua tests against a real Redis,
# and the integration tests against a private stack, in that order; the
# first group that fails stops it.
test: deps
	$(MAKE) all $(BUILD)/check_all
	$(MAKE) unit
	$(MAKE) lua-test
	$(MAKE) integration

# The Check unit tests (one binary, t/check_main.c).
unit: $(BUILD)/check_all
	$(BUILD)/check_all

# The Redis scripts against a private redis-server (LUA_TEST_REDIS_PORT).
lua-test: $(BUILD)/check.lua $(BUILD)/check_test.lua
	sh t/lua_test.sh

# The integration tests against a private stack built from $(BUILD); TESTS,
# PORT, REDIS_PORT, PG_PORT, WORKERS and KEEP_VAR are taken from the
# environment or the command line (see t/integration/run.sh).  The whole
# suite runs in two shards at once, each with its stack (SHARDS=1: one).
SHARDS ?= 2
integration: all $(BUILD)/rategen $(BUILD)/wakelag $(BUILD)/check_test.lua
	BUILD="$(BUILD)" SHARDS="$(SHARDS)" sh t/integration/run.sh

# The fault scenarios against the real stack, with their table.
test-faults: deps
	$(MAKE) all
	TESTS="faults hostile pgfaults" sh t/integration/run.sh

# libFuzzer harnesses of the pure parsers (t/fuzz/), FUZZ_SECONDS (15) each
# against the modules of CORE; needs clang.  See t/fuzz/run.sh.
fuzz:
	CORE="$(CORE)" PKGS="$(PKGS)" sh t/fuzz/run.sh

# The sanitizer build (ASAN_BUILD) through the unit tests (Check not
# forking, so that leaks are found), the Lua tests and the integration
# tests ASAN_TESTS.  Any AddressSanitizer or LeakSanitizer report from any
# process of ours (ASAN_OPTIONS log_path, ASAN_BUILD/sanitizer/), and any
# UndefinedBehaviorSanitizer report (which halts the process; gcc's runtime
# writes it to stderr, so the stack's logs are kept and searched), fails
# it; the reports are shown at the end.
ASAN_BUILD ?= build-asan
ASAN_OPT = -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer
ASAN_TESTS ?= api ctl_strict
asan-test: deps
	$(MAKE) BUILD=$(ASAN_BUILD) OPT="$(ASAN_OPT)" all $(ASAN_BUILD)/check_all
	rm -rf $(ASAN_BUILD)/sanitizer
	mkdir -p $(ASAN_BUILD)/sanitizer
	@san=$$(cd $(ASAN_BUILD)/sanitizer && pwd); rc=0; \
	export ASAN_OPTIONS="log_path=$$san/asan:detect_leaks=1" \
	    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"; \
	CK_FORK=no $(ASAN_BUILD)/check_all || rc=1; \
	sh t/lua_test.sh || rc=1; \
	KEEP_VAR=1 BUILD=$(ASAN_BUILD) TESTS="$(ASAN_TESTS)" \
	    sh t/integration/run.sh 2>&1 | tee "$$san/integration.out"; \
	tail -n 1 "$$san/integration.out" | grep -q ' 0 failed$$' || rc=1; \
	var=$$(sed -n 's/^run.sh: kept //p' "$$san/integration.out"); \
	mv "$$san/integration.out" "$$san/../integration.out"; \
	if [ -n "$$var" ] && [ -d "$$var" ]; then \
	    grep -h -A 12 'runtime error:' "$$var"/*.log >"$$san/ubsan" || \
	        rm -f "$$san/ubsan"; \
	    sh scripts/pg.sh destroy "$$var" >/dev/null 2>&1; rm -rf "$$var"; \
	fi; \
	for f in "$$san"/*; do \
	    [ -f "$$f" ] || continue; \
	    echo "asan-test: sanitizer report $$f:"; cat "$$f"; rc=1; \
	done; \
	[ "$$rc" = 0 ] && echo "asan-test: passed, no sanitizer report"; \
	exit $$rc

# The development stack (scripts/dev-stack.sh) under VAR (var/): PORT,
# PG_PORT, REDIS_PORT and REDIS_TYPE = single (default), cluster (3
# primaries and 3 replicas on REDIS_CLUSTER_PORT..+5, 7000) or sentinel (a
# master on REDIS_PORT, its replica +1, sentinels +2..+4); `make stop`
# stops what was started, whatever its type.
run: deps
	$(MAKE) all
	sh scripts/dev-stack.sh start

stop:
	sh scripts/dev-stack.sh stop

# The benchmark's yardstick: a libfcgi responder answering a fixed 200, or
# that plus one EVALSHA (see bench/bench.sh).
PROBE_PKGS = fcgi hiredis
$(BUILD)/bench_probe: bench/bench_probe.c | $(BUILD)
	$(CC) -std=gnu11 $(WARNINGS) $(CFLAGS) \
		$(shell pkg-config --cflags $(PROBE_PKGS) 2>/dev/null) -o $@ $< \
		$(shell pkg-config --libs $(PROBE_PKGS) 2>/dev/null)

# The open-loop generator of the benchmark's constant-rate tiers.
$(BUILD)/rategen: bench/rategen.c | $(BUILD)
	$(CC) -std=gnu11 $(WARNINGS) $(CFLAGS) -o $@ $< -lm

# How late the machine wakes a sleeping process (printed by the benchmark).
$(BUILD)/wakelag: bench/wakelag.c | $(BUILD)
	$(CC) -std=gnu11 $(WARNINGS) $(CFLAGS) -o $@ $<

bench: deps
	$(MAKE) all $(BUILD)/bench_probe $(BUILD)/rategen $(BUILD)/wakelag
	BUILD="$(BUILD)" sh bench/bench.sh

# Only the constant-rate tiers of the benchmark.
bench-rate: deps
	$(MAKE) all $(BUILD)/bench_probe $(BUILD)/rategen $(BUILD)/wakelag
	BENCH_ONLY=rate BUILD="$(BUILD)" sh bench/bench.sh

# A check of a tenant with 10,000 rules against one of a tenant with one
# (see bench/bench-scale.sh).
bench-scale: deps
	$(MAKE) all $(BUILD)/rategen
	BUILD="$(BUILD)" sh bench/bench-scale.sh

# Instructions and system calls per check, for us and the EVALSHA probe
# (see bench/profile.sh).
profile: deps
	$(MAKE) all $(BUILD)/bench_probe
	BUILD="$(BUILD)" sh bench/profile.sh

asan:
	$(MAKE) BUILD=build-asan OPT="$(ASAN_OPT)" all

# shellcheck over every shell script of the tree, cppcheck over src/.  A
# finding that is a false positive is silenced where it is, with a comment
# (shellcheck disable=..., cppcheck-suppress ...).  shellcheck runs on
# four files at a time, one such run per CPU (xargs exits 123 when any
# of them found something).
SHELL_SCRIPTS = $(wildcard scripts/*.sh bench/*.sh t/*.sh t/integration/*.sh \
	t/fuzz/run.sh conf/*.sh .ci/run)
lint:
	@for tool in shellcheck cppcheck; do \
	    command -v $$tool >/dev/null 2>&1 || \
	        { echo "lint: $$tool is missing: run make deps (as root)" >&2; \
	          exit 1; }; \
	done
	@printf '%s\n' $(SHELL_SCRIPTS) | \
	    xargs -P "$$(nproc 2>/dev/null || echo 1)" -n 4 shellcheck -x
	@echo "shellcheck: $(words $(SHELL_SCRIPTS)) scripts, no finding"
	cppcheck --enable=warning,portability,performance --error-exitcode=1 \
		--inline-suppr -q --std=c11 -I src src/

# make install [DESTDIR=...] [PREFIX=/usr/local] [SYSCONFDIR=/etc]
# [SYSTEMDDIR=/lib/systemd/system]: the binaries (ratelimit-release, the
# lease reader, too), the manual pages, the
# example configuration (and /etc/ratelimit-fcgi/ratelimit.conf when there
# is none: an existing one is never overwritten), the systemd units and the
# mod_fcgid wrapper with this PREFIX's paths, and bash completion.
SYSCONFDIR ?= /etc
SYSTEMDDIR ?= /lib/systemd/system
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/ratelimit-fcgi \
		$(DESTDIR)$(PREFIX)/share/man/man8 \
		$(DESTDIR)$(PREFIX)/lib/ratelimit-fcgi \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(SYSCONFDIR)/ratelimit-fcgi $(DESTDIR)$(SYSTEMDDIR) \
		$(DESTDIR)$(SYSCONFDIR)/logrotate.d
	install -m 755 $(BUILD)/ratelimit-fcgi $(BUILD)/ratelimitctl \
		$(BUILD)/ratelimit-release $(DESTDIR)$(PREFIX)/bin/
	install -m 644 conf/ratelimit.conf $(DESTDIR)$(PREFIX)/share/ratelimit-fcgi/
	install -m 644 src/ratelimit-fcgi.8 src/ratelimitctl.8 src/ratelimit-release.8 \
		$(DESTDIR)$(PREFIX)/share/man/man8/
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/ratelimit-fcgi/ratelimit.conf ]; then \
	    echo "install: keeping $(DESTDIR)$(SYSCONFDIR)/ratelimit-fcgi/ratelimit.conf (the example is in $(PREFIX)/share/ratelimit-fcgi)"; \
	else \
	    install -m 640 conf/ratelimit.conf $(DESTDIR)$(SYSCONFDIR)/ratelimit-fcgi/ratelimit.conf; \
	fi
	for unit in ratelimit-fcgi.service ratelimit-fcgi.socket \
	    ratelimit-release.service ratelimit-release.socket; do \
	    sed -e 's|/usr/local/bin/|$(PREFIX)/bin/|g' \
	        -e 's|/etc/ratelimit-fcgi/|$(SYSCONFDIR)/ratelimit-fcgi/|g' \
	        conf/$$unit >$(DESTDIR)$(SYSTEMDDIR)/$$unit.tmp && \
	    chmod 644 $(DESTDIR)$(SYSTEMDDIR)/$$unit.tmp && \
	    mv $(DESTDIR)$(SYSTEMDDIR)/$$unit.tmp $(DESTDIR)$(SYSTEMDDIR)/$$unit; \
	done
	sed -e 's|@BINARY@|$(PREFIX)/bin/ratelimit-fcgi|' \
	    -e 's|@CONFIG@|$(SYSCONFDIR)/ratelimit-fcgi/fcgid.conf|' \
	    conf/apache-fcgid-wrapper.sh >$(DESTDIR)$(PREFIX)/lib/ratelimit-fcgi/fcgid-wrapper
	chmod 755 $(DESTDIR)$(PREFIX)/lib/ratelimit-fcgi/fcgid-wrapper
	install -m 644 conf/ratelimitctl.bash-completion \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions/ratelimitctl
	install -m 644 conf/ratelimit-fcgi.logrotate \
		$(DESTDIR)$(SYSCONFDIR)/logrotate.d/ratelimit-fcgi
	install -m 644 conf/lighttpd-authorizer.conf \
		$(DESTDIR)$(PREFIX)/share/ratelimit-fcgi/05-ratelimit-fcgi.conf

# make uninstall, with the same DESTDIR, PREFIX, SYSCONFDIR and SYSTEMDDIR
# as make install: removes what it installed, and the directories of ours
# that are then empty.  ratelimit.conf goes only when it is still the
# example as shipped; an edited one is kept, and said so.
uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/ratelimit-fcgi $(DESTDIR)$(PREFIX)/bin/ratelimitctl \
		$(DESTDIR)$(PREFIX)/bin/ratelimit-release \
		$(DESTDIR)$(PREFIX)/share/man/man8/ratelimit-release.8 \
		$(DESTDIR)$(PREFIX)/share/ratelimit-fcgi/ratelimit.conf \
		$(DESTDIR)$(PREFIX)/share/ratelimit-fcgi/05-ratelimit-fcgi.conf \
		$(DESTDIR)$(PREFIX)/share/man/man8/ratelimit-fcgi.8 \
		$(DESTDIR)$(PREFIX)/share/man/man8/ratelimitctl.8 \
		$(DESTDIR)$(PREFIX)/lib/ratelimit-fcgi/fcgid-wrapper \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions/ratelimitctl \
		$(DESTDIR)$(SYSCONFDIR)/logrotate.d/ratelimit-fcgi \
		$(DESTDIR)$(SYSTEMDDIR)/ratelimit-fcgi.service \
		$(DESTDIR)$(SYSTEMDDIR)/ratelimit-fcgi.socket \
		$(DESTDIR)$(SYSTEMDDIR)/ratelimit-release.service \
		$(DESTDIR)$(SYSTEMDDIR)/ratelimit-release.socket
	@conf=$(DESTDIR)$(SYSCONFDIR)/ratelimit-fcgi/ratelimit.conf; \
	if [ -e "$$conf" ] && cmp -s conf/ratelimit.conf "$$conf"; then \
	    rm -f "$$conf"; \
	elif [ -e "$$conf" ]; then \
	    echo "uninstall: keeping $$conf (changed since make install)"; \
	fi
	-rmdir $(DESTDIR)$(PREFIX)/share/ratelimit-fcgi \
		$(DESTDIR)$(PREFIX)/lib/ratelimit-fcgi \
		$(DESTDIR)$(SYSCONFDIR)/ratelimit-fcgi 2>/dev/null

# make deb: the Debian package, built by dpkg-buildpackage from a copy of
# the tree (tracked and new files, not the build directories) in
# $(BUILD)/deb/, where it leaves ratelimit-fcgi_VERSION_ARCH.deb.
# DEB_BUILD_OPTIONS (nocheck, parallel=N) is passed on.
DEB_VERSION = $(shell dpkg-parsechangelog -l debian/changelog -S Version 2>/dev/null)
DEB_ARCH = $(shell dpkg --print-architecture 2>/dev/null)
deb:
	rm -rf $(BUILD)/deb
	mkdir -p $(BUILD)/deb/src
	git ls-files -co --exclude-standard -z | \
	    xargs -0 sh -c 'for f; do [ -e "$$f" ] && printf "%s\0" "$$f"; done' sh | \
	    tar --null -T - -cf - | tar -xf - -C $(BUILD)/deb/src
	cd $(BUILD)/deb/src && dpkg-buildpackage -b -us -uc
	@echo "deb: $(BUILD)/deb/ratelimit-fcgi_$(DEB_VERSION)_$(DEB_ARCH).deb"

clean:
	rm -rf build build-asan
