# The two commands of the README: `make demo` and `make test`. Both install missing Debian build
# dependencies first (scripts/deps.sh), then build with CMake.
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= 2
PREFIX ?= /usr/local
CMAKE_FLAGS ?=

.PHONY: all deps build test-build test test-fast test-asan test-tsan test-notel demo install bench fuzz clean format

all: build

deps:
	@scripts/deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

# Warnings are errors in the test builds (and so in CI), not in a plain build: a packager's
# compiler may warn where ours does not (EZ_WERROR is OFF by default in CMakeLists.txt).
WERROR = -DEZ_WERROR=ON

test-build: deps $(BUILD)/CMakeCache.txt
	cmake -S . -B $(BUILD) $(WERROR) >/dev/null
	cmake --build $(BUILD) -j$(JOBS)

# Every test: the normal build, then the whole suite again under ASan+UBSan, then the threaded
# tests under ThreadSanitizer (die_after_fork=0: tests fork children that start threads; each
# child is a fresh process for TSan's purposes).
test: test-build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)
	$(MAKE) test-asan
	$(MAKE) test-tsan
	$(MAKE) test-notel

test-fast: test-build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
	  -DEZ_SANITIZE=address,undefined -DEZ_BENCH=OFF $(WERROR) $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j$(JOBS)

TSAN_BUILD ?= build-tsan
test-tsan: deps
	cmake -S . -B $(TSAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
	  -DEZ_SANITIZE=thread -DEZ_BENCH=OFF $(WERROR) $(CMAKE_FLAGS)
	cmake --build $(TSAN_BUILD) -j$(JOBS)
	cd $(TSAN_BUILD) && TSAN_OPTIONS=halt_on_error=1:die_after_fork=0 \
	  ctest --output-on-failure -j$(JOBS) -E 'fuzz_replay|sh_install|sh_multihost'

# The whole suite once more with telemetry compiled out (-DEZ_TELEMETRY=OFF): that build takes
# no time stamps at all on the message path, so it runs different code there.
NOTEL_TEST_BUILD ?= build-notel-test
test-notel: deps
	cmake -S . -B $(NOTEL_TEST_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DEZ_TELEMETRY=OFF \
	  -DEZ_BENCH=OFF $(WERROR) $(CMAKE_FLAGS)
	cmake --build $(NOTEL_TEST_BUILD) -j$(JOBS)
	cd $(NOTEL_TEST_BUILD) && ctest --output-on-failure -j$(JOBS)

demo: build
	@bash examples/demo.sh $(BUILD)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-tsan build-fuzz build-notel build-notel-al build-lay-on build-lay-off $(NOTEL_TEST_BUILD)

format:
	clang-format -i include/ezmsg/*.h src/*/*.[ch] tools/ezmsg/*.[ch] tests/*.[ch] examples/*.c bench/*.c bench/profile/*.c fuzz/*.[ch]

# Benchmarks: ezmsg-c vs ZeroMQ vs the machine; writes bench/RESULTS.md (bench/run.sh also builds
# $(BUILD)-notel, the same tree with telemetry compiled out), then the fan-out / fan-in sweeps,
# bench/FANOUT.md with its plots in bench/plots (bench/fan.sh).
# Then fixed-rate CPU per message and the 8-process pipeline, bench/RATE.md (bench/rate.sh; the
# Python reference too with EZMSG_PY=<a PYTHONPATH holding ezmsg>).
# Then the graph server from 100 to 10 000 topics, bench/GRAPHSIZE.md (bench/graphsize.sh).
bench: build
	@scripts/deps.sh bench
	cmake -S . -B $(BUILD) -DEZ_BENCH=ON >/dev/null
	cmake --build $(BUILD) -j$(JOBS)
	bash bench/run.sh $(BUILD)
	bash bench/fan.sh $(BUILD)
	bash bench/rate.sh $(BUILD)
	bash bench/graphsize.sh $(BUILD)

# Fuzzing: builds the libFuzzer targets (clang, ASan + UBSan) into build-fuzz and runs each for
# FUZZ_SECONDS (default 60) on a scratch copy of fuzz/corpus/<target>/, then prints a summary.
# `make fuzz FUZZ_TARGETS="server wire"` runs only those. See fuzz/README.md.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_BUILD=$(CURDIR)/build-fuzz FUZZ_JOBS=$(JOBS) \
	  bash fuzz/run.sh $(FUZZ_TARGETS)
