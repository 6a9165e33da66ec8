# The two commands of the README: `make demo` and `make test`. Both install missing Debian build
# dependencies first (scripts/deps.sh), then build with CMake.
BUILD ?= build
ASAN_BUILD ?= build-asan
JOBS ?= 2
PREFIX ?= /usr/local
CMAKE_FLAGS ?=

.PHONY: all deps build test test-fast test-asan demo install bench fuzz clean format

all: build

deps:
	@scripts/deps.sh

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=$(PREFIX) $(CMAKE_FLAGS)

build: deps $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

# Every test: the normal build, then the whole suite again under ASan+UBSan.
test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)
	$(MAKE) test-asan

test-fast: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_COMPILER=clang \
	  -DEZ_SANITIZE=address,undefined -DEZ_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j$(JOBS)

demo: build
	@bash examples/demo.sh $(BUILD)

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) build-tsan build-fuzz build-notel

format:
	clang-format -i include/ezmsg/*.h src/*.[ch] tools/ezmsg/*.[ch] tests/*.[ch] examples/*.c bench/*.c

# Benchmarks: ezmsg-c vs ZeroMQ vs the machine; writes bench/RESULTS.md (bench/run.sh also builds
# $(BUILD)-notel, the same tree with telemetry compiled out).
bench: build
	bash bench/run.sh $(BUILD)

# Fuzzing: builds the libFuzzer targets (clang, ASan + UBSan) into build-fuzz and runs each for
# FUZZ_SECONDS (default 60) on a scratch copy of fuzz/corpus/<target>/, then prints a summary.
# `make fuzz FUZZ_TARGETS="server wire"` runs only those. See fuzz/README.md.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?=
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_BUILD=$(CURDIR)/build-fuzz FUZZ_JOBS=$(JOBS) \
	  bash fuzz/run.sh $(FUZZ_TARGETS)
