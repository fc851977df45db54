# mutexd: the two commands a new user needs are `make run` and `make test`; `make check` is
# the everyday loop of whoever changes the code. All install what is missing (Debian
# packages) and build with CMake.

BUILD     ?= build
# `make run` builds the server alone, as shipped (no unit tests, no fault seam), in its
# own folder so that it never reconfigures the test build in $(BUILD).
RUN_BUILD ?= build-run
# `make install` and `make deb` build the shipped configuration too (Release, no unit test,
# no fault seam), each in a folder of its own.
INSTALL_BUILD ?= build-install
DEB_BUILD     ?= build-deb
# make install PREFIX=/usr DESTDIR=/tmp/stage: the usual two. PREFIX is the installed
# programs' prefix (CMake's CMAKE_INSTALL_PREFIX); DESTDIR, if set, a folder the tree is laid
# out in instead of /, for packaging.
PREFIX    ?= /usr/local
DESTDIR   ?=
JOBS      ?= $(shell nproc 2>/dev/null || echo 2)
ARGS      ?=
# cmake --build runs make again: without this, each level prints its folder.
MAKEFLAGS += --no-print-directory

# cmake with its output kept in a log, shown only when configuring fails: a missing
# package is then named, not hidden. $(1): build folder, $(2): options.
define configure
	@mkdir -p $(1)
	@cmake -S . -B $(1) $(2) >$(1)/configure.log 2>&1 || { \
	    cat $(1)/configure.log >&2; \
	    echo "make: configuring $(1) failed (the log above is in $(1)/configure.log)" >&2; \
	    exit 1; }
endef

# Two makes at once in one build folder (two terminals running `make run` on a fresh
# checkout) would each run cmake there, and one build would break the other's files
# ("ar: unable to copy file"): the second waits for the first, and says so.
# $(1): build folder, $(2): the target to make while holding its lock.
define locked
	@mkdir -p $(1)
	@flock -n -E 75 $(1)/.lock $(MAKE) $(2); rc=$$?; \
	if [ $$rc -eq 75 ]; then \
	    echo "make: another make is building $(1)/; waiting for it to finish" >&2; \
	    flock $(1)/.lock $(MAKE) $(2); rc=$$?; \
	fi; exit $$rc
endef

.PHONY: all build build-locked server server-locked run install install-locked uninstall deb \
	deb-locked azurite azurite-stop diagram screenshots check test bench fuzz fmt clean java

all: build

# Everything in the default configuration (the server, mutexctl, the unit tests).
build:
	$(call locked,$(BUILD),build-locked)

build-locked:
	@scripts/deps.sh build
	$(call configure,$(BUILD),-DCMAKE_BUILD_TYPE=RelWithDebInfo)
	@cmake --build $(BUILD) -j $(JOBS)

# The server `make run` starts, and mutexctl beside it (build-run/clients/c/mutexctl).
server:
	$(call locked,$(RUN_BUILD),server-locked)

server-locked:
	@scripts/deps.sh build
	$(call configure,$(RUN_BUILD),-DCMAKE_BUILD_TYPE=RelWithDebInfo -DMUTEXD_TESTS=OFF \
	    -DMUTEXD_FAULT_INJECTION=OFF)
	@cmake --build $(RUN_BUILD) -j $(JOBS) --target mutexd mutexctl

# Starts the server in the foreground on 127.0.0.1:8080 with its data in ./data.
# Pass flags with ARGS, for example: make run ARGS="--listen 127.0.0.1:9000"
run: server
	exec $(RUN_BUILD)/mutexd $(ARGS)

# Builds the shipped configuration in $(INSTALL_BUILD)/ and installs it under $(PREFIX):
# sbin/mutexd, bin/mutexctl, libmutexd with mutexd.h and mutexd.pc, the man pages, the
# systemd unit, mutexctl's bash completion (cmake/packaging.cmake lists where each goes).
# For a system prefix, as root: sudo make install (after a make install as yourself with
# the same PREFIX, it only copies).
install:
	$(call locked,$(INSTALL_BUILD),install-locked)

install-locked:
	@scripts/deps.sh build
	$(call configure,$(INSTALL_BUILD),-DCMAKE_BUILD_TYPE=Release -DMUTEXD_TESTS=OFF \
	    -DMUTEXD_FAULT_INJECTION=OFF -DCMAKE_INSTALL_PREFIX=$(PREFIX))
	@cmake --build $(INSTALL_BUILD) -j $(JOBS)
	DESTDIR="$(DESTDIR)" cmake --install $(INSTALL_BUILD)

# Removes what the last `make install` installed: the files listed in
# $(INSTALL_BUILD)/install_manifest.txt (without DESTDIR: give the same DESTDIR as to the
# install; the list's last line has no newline). Folders stay.
uninstall:
	@test -f $(INSTALL_BUILD)/install_manifest.txt || { \
	    echo "make: no $(INSTALL_BUILD)/install_manifest.txt: nothing installed from here" >&2; \
	    exit 1; }
	@while IFS= read -r f || [ -n "$$f" ]; do \
	    f="$(DESTDIR)$$f"; \
	    if [ -e "$$f" ] || [ -L "$$f" ]; then rm -f "$$f" && echo "removed $$f"; fi; \
	done <$(INSTALL_BUILD)/install_manifest.txt

# The Debian package, $(DEB_BUILD)/mutexd_<version>_<arch>.deb: CPack's DEB generator on the
# shipped configuration, installed under /usr, compiled with Debian's hardening flags
# (dpkg-buildflags, all of them: bindnow too), and with libsystemd (MUTEXD_SYSTEMD=ON): the
# package's unit waits for the server's readiness notification, so a server built without it
# must fail the build, not every start. Install it with:
# sudo apt install ./$(DEB_BUILD)/mutexd_*.deb
deb:
	$(call locked,$(DEB_BUILD),deb-locked)

DEB_FLAGS = DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --get
deb-locked:
	@scripts/deps.sh deb
	$(call configure,$(DEB_BUILD),-DCMAKE_BUILD_TYPE=Release -DMUTEXD_TESTS=OFF \
	    -DMUTEXD_FAULT_INJECTION=OFF -DMUTEXD_DEB=ON -DMUTEXD_SYSTEMD=ON \
	    -DCMAKE_INSTALL_PREFIX=/usr \
	    -DCMAKE_C_FLAGS="$$($(DEB_FLAGS) CFLAGS) $$($(DEB_FLAGS) CPPFLAGS)" \
	    -DCMAKE_EXE_LINKER_FLAGS="$$($(DEB_FLAGS) LDFLAGS)" \
	    -DCMAKE_SHARED_LINKER_FLAGS="$$($(DEB_FLAGS) LDFLAGS)")
	@cmake --build $(DEB_BUILD) -j $(JOBS)
	@rm -f $(DEB_BUILD)/mutexd_*.deb
	@cd $(DEB_BUILD) && cpack -G DEB >cpack.log 2>&1 || { cat cpack.log >&2; exit 1; }
	@ls $(DEB_BUILD)/mutexd_*.deb

# The Java client, $(BUILD)/mutexd-client.jar: javac and jar from the JDK 17, nothing
# downloaded (clients/java/pom.xml is for those who build with Maven).
java:
	@command -v javac >/dev/null || scripts/deps.sh test
	@mkdir -p $(BUILD)
	clients/java/build.sh $(BUILD)/mutexd-client.jar
	@echo "the Java client: $(BUILD)/mutexd-client.jar"

# Azurite, the Azure Storage emulator (blob service only, in memory), in the background on
# 127.0.0.1:10000: what the connection string UseDevelopmentStorage=true names. Its PID and
# log are in data-azurite/; `make azurite-stop` stops it.
AZURITE_DIR ?= data-azurite
azurite:
	@scripts/deps.sh azurite
	@scripts/azurite.sh install
	@scripts/azurite.sh start $(AZURITE_DIR) 10000
	@echo "Azurite answers on 127.0.0.1:10000 (UseDevelopmentStorage=true); make azurite-stop stops it"

azurite-stop:
	@scripts/azurite.sh stop $(AZURITE_DIR)

# The README's diagram, drawn by Graphviz from its source.
diagram: docs/architecture.svg
docs/architecture.svg: docs/architecture.dot
	@scripts/deps.sh docs
	dot -Tsvg -o $@ $<

# docs/dashboard.png: the dashboard of a real server holding a few leases, taken by headless
# Chromium at 1280x800 (tests/browser/screenshot.mjs; playwright-core from its lock file, no
# browser downloaded).
screenshots: build
	@scripts/deps.sh check
	@PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 scripts/npm-deps.sh tests/browser
	MUTEXD_BIN=$(BUILD)/mutexd node tests/browser/screenshot.mjs docs/dashboard.png

# The everyday loop, a few minutes: the build, the checks, the unit tests, the OpenAPI
# check and the integration tests but the long ones (marked heavy or examples). No
# container, no sanitizer, no root but for installing missing packages.
check:
	@scripts/test.sh --quick

# Every test: what `make check` runs, all the integration tests, the sanitizer builds,
# chaos, client, container and fuzz tests.
test:
	@scripts/test.sh

# Benchmarks: run on demand, not part of `make test`.
bench: build
	@scripts/bench.sh

# Each fuzzer for FUZZ_SECONDS (default 60); make test runs them for 30 s each.
FUZZ_SECONDS ?= 60
fuzz:
	@scripts/fuzz.sh $(FUZZ_SECONDS)

fmt:
	clang-format -i $$(git ls-files '*.c' '*.h')

# Every build folder (.gitignore: /build*/): build/, build-run/, build-install/, build-deb/
# (and its .deb), and the sanitizer, fuzz, configuration and packaging builds of make test.
clean:
	rm -rf $(BUILD) build-*/ $(RUN_BUILD) $(INSTALL_BUILD) $(DEB_BUILD)
