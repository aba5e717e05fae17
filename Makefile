# Rescale's two commands, and the rest of the developer loop.
#
#   make run             install missing deps, build Release, start rescaled
#                        on 127.0.0.1:50051 (extra flags: make run ARGS="...")
#   make test            install missing deps, build, run every test (ctest)
#   make test-sanitize   the tests under ASan+UBSan, concurrency tests under TSan
#   make bench           build and run rescale-bench
#   make bench-python    the Python reporter's overhead on a training loop
#   make demo            train examples/pytorch under rescale-launch, sized by rescaled
#   make docker          build docker/Dockerfile (needs a container engine)
#   make format          clang-format every C++ file (.clang-format: Google, 100 columns)
#   make check-thread-safety  build the tree with clang -Wthread-safety -Werror (build-tsa/):
#                        every ABSL_GUARDED_BY / ABSL_EXCLUSIVE_LOCKS_REQUIRED is checked
#   make fuzz            build the libFuzzer targets (clang) and run each FUZZ_RUNS times
#                        (tests/fuzz/README.md)
#
# Build trees: build/ (Release), build-asan/, build-tsan/, build-tsa/, build-fuzz/.

JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
ARGS ?=
CTEST := ctest --output-on-failure -j $(JOBS) --timeout 300

.PHONY: all deps build run test demo bench-python test-sanitize test-asan test-tsan check-thread-safety fuzz bench docker format clean

all: build

deps:
	@scripts/install-deps.sh

build: deps
	@cmake -S . -B build -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > /dev/null
	@cmake --build build -j $(JOBS)

run: build
	./build/rescaled $(ARGS)

test: build
	cd build && $(CTEST)

test-asan: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DRESCALE_SANITIZE=address,undefined \
		-DRESCALE_BUILD_BENCH=OFF $(CMAKE_FLAGS) > /dev/null
	@cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 \
		LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp UBSAN_OPTIONS=print_stacktrace=1 $(CTEST)

# TSan instruments our code, not the Debian gRPC libraries, so it runs the
# concurrency-labelled tests, whose threads live in our code: the metrics
# store, the board, the engine's timer and the gRPC watch reactor. gRPC's own
# synchronisation is invisible to TSan: tests/tsan.supp says what is
# suppressed for it, and why.
test-tsan: deps
	@cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DRESCALE_SANITIZE=thread \
		-DRESCALE_BUILD_BENCH=OFF $(CMAKE_FLAGS) > /dev/null
	@cmake --build build-tsan -j $(JOBS) --target core_tests server_tests
	cd build-tsan && TSAN_OPTIONS="halt_on_error=1 ignore_noninstrumented_modules=1 history_size=7 \
		suppressions=$(CURDIR)/tests/tsan.supp" $(CTEST) -L concurrency

test-sanitize: test-asan test-tsan

demo: build
	scripts/demo.sh

bench-python: build
	PYTHONPATH=build/python /usr/bin/python3 bench/python/reporter_overhead.py

# Clang's thread-safety analysis over every target (libraries, programs,
# tests, benchmarks): the annotations of rescale/mutex.h are checked, and a
# member read or written without its lock fails the build. Not optimised:
# only the compiler's analysis matters here.
check-thread-safety: deps
	@CC=clang CXX=clang++ cmake -S . -B build-tsa -DCMAKE_BUILD_TYPE=Debug \
		-DRESCALE_THREAD_SAFETY=ON $(CMAKE_FLAGS) > /dev/null
	@cmake --build build-tsa -j $(JOBS)

# Each target replays its committed corpus (tests/fuzz/corpus/<target>, read
# only: libFuzzer adds what it finds to the first directory, a scratch one
# in build-fuzz/) and then mutates for the rest of FUZZ_RUNS executions.
# Crash inputs go to build-fuzz/fuzz/artifacts/<target>/, not the repo.
FUZZ_RUNS ?= 20000
FUZZ_FLAGS ?= -max_len=4096 -timeout=10 -rss_limit_mb=2048
FUZZ_TARGETS := agent_log_line rescalectl_manifest kubeconfig pytorchjob sim_workload queue_file \
	proto_job_spec proto_sample_batch

fuzz: deps
	@cmake -S . -B build-fuzz -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Fuzz \
		-DRESCALE_FUZZ=ON -DRESCALE_BUILD_BENCH=OFF $(CMAKE_FLAGS) > /dev/null
	@cmake --build build-fuzz -j $(JOBS) --target fuzz_targets
	@for target in $(FUZZ_TARGETS); do \
		mkdir -p build-fuzz/fuzz/scratch/$$target build-fuzz/fuzz/artifacts/$$target; \
		log=build-fuzz/fuzz/$$target.log; \
		ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		./build-fuzz/fuzz_$$target -runs=$(FUZZ_RUNS) $(FUZZ_FLAGS) -print_final_stats=1 \
			-artifact_prefix=build-fuzz/fuzz/artifacts/$$target/ \
			build-fuzz/fuzz/scratch/$$target tests/fuzz/corpus/$$target > $$log 2>&1 \
			|| { tail -n 80 $$log; echo "fuzz: $$target failed (log: $$log)" >&2; exit 1; }; \
		echo "fuzz: $$target: $$(grep -h -E 'stat::(number_of_executed_units|average_exec_per_sec)' $$log \
			| tr '\n' ' ')"; \
	done

bench: build
	./build/rescale-bench $(ARGS)

format:
	@command -v clang-format > /dev/null || { echo "make format needs clang-format (Debian: apt-get install clang-format)" >&2; exit 1; }
	@find include src server client bench tests -name '*.cc' -o -name '*.h' | xargs clang-format -i

docker:
	docker build -f docker/Dockerfile -t rescale:dev .

clean:
	rm -rf build build-asan build-tsan build-tsa build-fuzz
