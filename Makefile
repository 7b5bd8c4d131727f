# A thin layer over CMake. `make run` and `make test` work on a fresh Debian 12 machine: they
# install what is missing (scripts/install-deps.sh), configure, build and run.
#   make build CMAKE_ARGS='-DREFIT_WERROR=ON'     extra CMake options (reconfigures when changed)
#   make asan / make ubsan                        sanitizer builds and their tests
#   make sanitize                                 ASan+UBSan together: unit and CLI tests (CI)
#   make fuzz FUZZ_SECONDS=60 FUZZ_SEED=1         each libFuzzer target for a bounded time

BUILD_TYPE ?= RelWithDebInfo
CMAKE_ARGS ?=
NPROC := $(shell nproc 2>/dev/null || echo 2)
CTEST := ctest --output-on-failure

# Open MPI refuses to start as root unless told; containers and CI run as root.
ifeq ($(shell id -u),0)
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
endif

.PHONY: all deps build run test install asan ubsan sanitize fuzz format format-check clean

all: build

deps:
	@scripts/install-deps.sh

# configure DIR, EXTRA-ARGS: runs CMake when DIR has never been configured or when the
# arguments differ from last time; otherwise `cmake --build` reruns CMake itself as needed.
define configure
	@args='-DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(2) $(CMAKE_ARGS)'; \
	if [ ! -f $(1)/CMakeCache.txt ] || \
	   [ "$$(cat $(1)/.refit-cmake-args 2>/dev/null)" != "$$args" ]; then \
	  cmake -S . -B $(1) $$args && echo "$$args" > $(1)/.refit-cmake-args; \
	fi
endef

build:
	$(call configure,build,)
	@ln -sfn build/compile_commands.json compile_commands.json
	cmake --build build -j$(NPROC)

# librefit.so, include/refit.h, refit.pc, the refit binary and its model and cluster files under
# PREFIX (default /usr/local): make install PREFIX=$$HOME/.local. A model given by name is looked
# up in REFIT_MODEL_DIR, the source tree, then the prefix CMake was configured with.
PREFIX ?= /usr/local
install: build
	cmake --install build --prefix $(PREFIX)

# The demo (configs/demo.json): Llama-3.2-1B from trainer fsdp=2 to rollout tp=2 over the
# transport --transport auto chooses (shm on one node of host memory, ipc on a GPU), all three
# modes, on 4 ranks (oversubscribed: it runs on a 2-core machine), appended to results/demo.h5.
run: deps
	@$(MAKE) --no-print-directory build
	mpirun --oversubscribe -np 4 build/refit run --config configs/demo.json

# Sequential: the MPI tests already oversubscribe small machines, and timeouts are part of
# what they check.
test: deps
	@$(MAKE) --no-print-directory build
	$(CTEST) --test-dir build

# Open MPI keeps allocations until exit on purpose; the suppressions name its libraries, and
# LeakSanitizer needs full unwinding to see them in the stacks of its dlopen'ed components
# (about twice as slow as the default). use_tls=0: on Debian 12's GCC 12 LeakSanitizer reads a
# bogus dynamic-TLS range for a module Open MPI loads ("DTLS 10 at 0x3b70-0x400004c72" with
# verbosity=1) and its tracer dies of signal 11 at every exit on kernel 6.18 machines. Not
# scanning TLS can only report more leaks, never hide one; lsan.supp suppresses HDF5, whose
# per-thread state (held only through pthread keys) this surfaces.
LSAN := suppressions=$(CURDIR)/scripts/lsan.supp:print_suppressions=0:fast_unwind_on_malloc=0:use_tls=0

asan: deps
	$(call configure,build-asan,-DREFIT_ASAN=ON)
	cmake --build build-asan -j$(NPROC)
	LSAN_OPTIONS=$(LSAN) $(CTEST) --test-dir build-asan

ubsan: deps
	$(call configure,build-ubsan,-DREFIT_UBSAN=ON)
	cmake --build build-ubsan -j$(NPROC)
	$(CTEST) --test-dir build-ubsan

# Both sanitizers in one build, without the GPU code (CI has no GPU): the unit tests (with the
# fuzz targets' corpus and regression replays) and the CLI tests. The mpi, gpu, slurm and
# browser tests are left to the plain build. Unit tests are single processes and run NPROC at
# a time (14 instead of 18 minutes on a 2-core VM); CLI tests start MPI jobs of up to 6 ranks
# on an oversubscribed host and run one at a time.
SANITIZE_ENV := LSAN_OPTIONS=$(LSAN) UBSAN_OPTIONS=print_stacktrace=1 REFIT_TEST_SLACK=30 \
  REFIT_TEST_REPEATS=5
sanitize: deps
	$(call configure,build-sanitize,-DREFIT_ASAN=ON -DREFIT_UBSAN=ON -DREFIT_CUDA=OFF)
	cmake --build build-sanitize -j$(NPROC)
	$(SANITIZE_ENV) $(CTEST) --test-dir build-sanitize -L unit -j$(NPROC)
	$(SANITIZE_ENV) $(CTEST) --test-dir build-sanitize -L cli

# The libFuzzer targets of tests/fuzz/ (clang), each run for FUZZ_SECONDS from its seed corpus
# with a fixed FUZZ_SEED, so that a run can be repeated; scripts/fuzz.sh says what it keeps.
FUZZ_SECONDS ?= 60
FUZZ_SEED ?= 1
fuzz: deps
	$(call configure,build-fuzz,-DCMAKE_C_COMPILER=clang -DREFIT_FUZZ=ON -DREFIT_TESTS=OFF -DREFIT_CUDA=OFF)
	cmake --build build-fuzz -j$(NPROC)
	scripts/fuzz.sh build-fuzz $(FUZZ_SECONDS) $(FUZZ_SEED)

# The C and CUDA sources that clang-format keeps (.clang-format); format-check is what CI runs.
FORMATTED = find src include tests bench -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh'

format:
	$(FORMATTED) | xargs clang-format -i

format-check:
	$(FORMATTED) | xargs clang-format --dry-run -Werror

clean:
	rm -rf build build-asan build-ubsan build-sanitize build-fuzz compile_commands.json
