# mutexd: the two commands a new user needs are `make run` and `make test`.
# Both install what is missing (Debian packages) and build with CMake.

BUILD    ?= build
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
ARGS     ?=

.PHONY: all build run test bench fuzz fmt clean

all: build

build:
	@scripts/deps.sh build
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

# Starts the server in the foreground on 127.0.0.1:8080 with its data in ./data.
# Pass flags with ARGS, for example: make run ARGS="--listen 127.0.0.1:9000"
run: build
	exec $(BUILD)/mutexd $(ARGS)

# Every test: unit tests, the sanitizer builds, integration, chaos and client tests.
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

clean:
	rm -rf build build-tsan build-asan build-fuzz
