# kvwire build. `make` builds the library and every program into bin/;
# `make test` checks that the tests can fail (mk/check-tests.sh), builds,
# then runs the unit tests, the model check (`make model`: the room
# protocol's Promela model with spin, docs/MODEL.md) and the Python tests
# (tests/python/, ending with pytest's own summary line) side by side, then
# the bats tests; `make demo`
# runs the main job. `make test-loaded` runs the unit and bats tests under
# a CPU hog of every core (mk/loaded.sh). SANITIZE=address,undefined or
# SANITIZE=thread builds a separate tree under build/<variant>/ (binaries
# in build/<variant>/bin).

comma := ,
SANITIZE ?=
ifeq ($(SANITIZE),)
VARIANT := default
BINDIR := bin
LIBDIR := lib
else
VARIANT := $(subst $(comma),-,$(SANITIZE))
BINDIR := build/$(VARIANT)/bin
LIBDIR := build/$(VARIANT)/lib
endif
B := build/$(VARIANT)

CC ?= cc
WARN := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
	-Wmissing-prototypes -Wcast-qual -Wsign-compare
OPT ?= -O2 -g
CPPFLAGS += -Ilib -Icmd -D_GNU_SOURCE
# Hidden by default: libkvwire.so exports only what lib/api.h marks KVW_API.
CFLAGS += -std=c17 $(OPT) $(WARN) -fPIC -pthread -fvisibility=hidden
LDLIBS += -lzmq -lsodium -lcrypto -lxxhash -lbsd -ldl -lrt -lm -pthread
ifneq ($(SANITIZE),)
CFLAGS += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer
LDFLAGS += -fsanitize=$(SANITIZE)
endif

# The library by layer (docs/ARCHITECTURE.md): base, then wire, table, plan
# and mem (which never include each other), then xport (over mem), then
# roles, then the engine API on top. A layer's sources may sit one folder
# deeper (lib/xport/tcp/, lib/roles/sender/). cmd/common/ is what the
# programs share (flags, readiness for systemd): linked into programs, not
# into libkvwire; every other folder of cmd/ is one program.
LAYERS := base wire table plan mem xport roles
LIB_SRC := $(sort $(wildcard lib/*.c $(LAYERS:%=lib/%/*.c) $(LAYERS:%=lib/%/*/*.c)))
LIB_OBJ := $(LIB_SRC:%.c=$(B)/%.o)
CLI_SRC := $(sort $(wildcard cmd/common/*.c))
CLI_OBJ := $(CLI_SRC:%.c=$(B)/%.o)
# kv-bench's code without its main(), for its unit test.
BENCH_LIB_OBJ := $(patsubst %.c,$(B)/%.o,$(filter-out cmd/kv-bench/main.c,$(wildcard cmd/kv-bench/*.c)))
CMDS := $(filter-out common,$(notdir $(wildcard cmd/*)))
PROGS := $(CMDS:%=$(BINDIR)/%)
UNIT_SRC := $(sort $(wildcard tests/unit/test_*.c))
UNITS := $(UNIT_SRC:tests/unit/%.c=$(B)/tests/%)
BENCH_SRC := $(sort $(wildcard tests/bench/*.c))
BENCHES := $(BENCH_SRC:tests/bench/%.c=$(B)/bench/%)
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZERS := $(FUZZ_SRC:tests/fuzz/%.c=build/fuzz/%)
DEPS_OK := build/.deps-ok

.PHONY: all deps test test-loaded unit bats model pytest demo fuzz bench seeds checktests clean man cuda-decl mutants soak
# Keep objects of tests and programs: they are not throwaway intermediates.
.SECONDARY:
all: $(LIBDIR)/libkvwire.a $(LIBDIR)/libkvwire.so $(PROGS) $(if $(SANITIZE),,man)

KVWCLI := $(B)/libkvwcli.a

# Installs missing Debian packages (as root) once; delete the stamp to recheck.
$(DEPS_OK): mk/deps.sh
	@./mk/deps.sh
	@mkdir -p $(@D) && touch $@
deps: $(DEPS_OK)

$(B)/%.o: %.c | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c -o $@ $<

$(LIBDIR)/libkvwire.a: $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(KVWCLI): $(CLI_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(LIBDIR)/libkvwire.so: $(LIB_OBJ)
	@mkdir -p $(@D)
	$(CC) -shared $(LDFLAGS) -o $@ $^ $(LDLIBS)

.SECONDEXPANSION:
$(BINDIR)/%: $$(subst .c,.o,$$(addprefix $(B)/,$$(wildcard cmd/$$*/*.c))) $(KVWCLI) $(LIBDIR)/libkvwire.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(KVWCLI) $(LIBDIR)/libkvwire.a $(LDLIBS)

# Libraries only some programs link: libmicrohttpd for kv-stat --serve,
# libsystemd (sd_notify) for the control programs.
$(BINDIR)/kv-stat: LDLIBS += -lmicrohttpd
$(BINDIR)/kv-sender $(BINDIR)/kv-receiver $(BINDIR)/kv-bootstrap $(BINDIR)/kv-heartbeat: LDLIBS += -lsystemd

# Unit tests may include a program's own headers ("kv-bench/bench.h").
# Every test under its own bound (tests/unit/unit_bound.h).
$(B)/tests/unit/%.o: CPPFLAGS += -include tests/unit/unit_bound.h
$(B)/tests/test_bench: $(BENCH_LIB_OBJ)
$(B)/tests/%: $(B)/tests/unit/%.o $(KVWCLI) $(LIBDIR)/libkvwire.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(filter $(BENCH_LIB_OBJ),$^) $(KVWCLI) $(LIBDIR)/libkvwire.a -lcmocka $(LDLIBS)

$(B)/bench/%: $(B)/tests/bench/%.o $(LIBDIR)/libkvwire.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBDIR)/libkvwire.a $(LDLIBS)

# TSAN cannot see inside the uninstrumented libzmq: suppress its reports.
export TSAN_OPTIONS ?= suppressions=$(CURDIR)/mk/tsan.supp halt_on_error=1 second_deadlock_stack=1
export ASAN_OPTIONS ?= detect_leaks=1 abort_on_error=1
export UBSAN_OPTIONS ?= print_stacktrace=1 halt_on_error=1

# A CPU stand-in for libcudart (tests/fakecuda/): tests load it with
# KVW_CUDART to run the cuda plumbing without a GPU; it proves no GPU.
FAKECUDA := $(B)/tests/libfakecudart.so
$(FAKECUDA): tests/fakecuda/fakecudart.c | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) -std=c17 $(OPT) $(WARN) -fPIC -shared -o $@ $< -pthread
$(B)/tests/test_xport_cuda $(B)/tests/test_mem $(B)/tests/test_rdma_gpu \
	$(B)/tests/test_receiver_rdma: $(FAKECUDA)

unit: $(UNITS)
	@./tests/unit/run.sh $(UNITS)

bats: all $(FAKECUDA)
	@KVW_BIN=$(CURDIR)/$(BINDIR) ./tests/bats/run.sh

# The Python package (python/kvwire) on live groups, with Debian's python3
# (numpy, pytest and pyzmq come from mk/deps.sh).
pytest: all $(FAKECUDA)
	@cd tests/python && KVW_BIN=$(CURDIR)/$(BINDIR) PYTHONDONTWRITEBYTECODE=1 \
		/usr/bin/python3 -m pytest -q -p no:cacheprovider

# Checks that the tests can fail (mk/check-tests.sh): first, it is quick.
checktests:
	@./mk/check-tests.sh

# make test: first everything its stages run, built with every core (one
# file at a time, a fresh clone's build was a minute of it); then the unit,
# model and Python stages side by side (mk/beside.sh: their output follows
# each whole), then the bats stage. -j1 for the stages whatever -j make test
# got: beside.sh decides what runs at once.
NPROC := $(shell nproc 2>/dev/null || echo 1)
test: checktests
	@$(MAKE) --no-print-directory -j$(NPROC) all $(UNITS) $(FAKECUDA) $(MODEL_B)/tables.pml
	@./mk/beside.sh '$(MAKE) --no-print-directory -j1 unit' \
		'$(MAKE) --no-print-directory -j1 model' '$(MAKE) --no-print-directory -j1 pytest'
	@$(MAKE) --no-print-directory -j1 bats

# A tcp group driven for KVW_SOAK_SECS (default 600) with 20 % aborts:
# every room terminal and intact, the tables empty after, memory and fds
# flat (tests/soak/run.sh; issue 34). Not part of `make test`.
soak: all
	@KVW_BIN=$(CURDIR)/$(BINDIR) ./tests/soak/run.sh

# Breaks one promise at a time (tests/mutants/list) in a scratch copy of
# the tree and runs the tests listed with it: each must fail
# (tests/mutants/run.sh; ends "mutants: N killed, N survived").
mutants: all $(UNITS) $(FAKECUDA)
	@./tests/mutants/run.sh

# The unit and bats stages while stress-ng keeps every core busy (issue
# 30: no test passes or fails with the machine's load); -k: the bats
# stage runs also when a unit test failed. mk/loaded.sh
# starts the hog and always stops it; KVW_HOG_CPUS=N for another count.
test-loaded: all $(UNITS) $(FAKECUDA) | $(DEPS_OK)
	@./mk/loaded.sh $(MAKE) -k --no-print-directory unit bats

# The model's tables come from the compiled C table (lib/table/rtab_rules.c
# over rtab_states.def), generated here so they cannot go stale.
MODEL_B := build/model
$(MODEL_B)/tables: model/tables.c lib/table/rtab_rules.c lib/table/rtab.h \
		lib/table/rtab_states.def lib/base/kvw.h | $(DEPS_OK)
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -std=c17 $(WARN) -o $@ model/tables.c lib/table/rtab_rules.c
$(MODEL_B)/tables.pml: $(MODEL_B)/tables
	$< >$@.tmp && mv $@.tmp $@

model: $(MODEL_B)/tables.pml
	@./model/check.sh $(MODEL_B)

bench: $(BENCHES)

# TRANSPORT=tcp runs the same job over loopback tcp; XPYD=2x2 runs it
# over two prefill and two decode instances of one cluster (kv-demo --help).
demo: all
	@KVW_TRANSPORT=$(TRANSPORT) KVW_XPYD=$(XPYD) ./bin/kv-demo

# Fuzz seeds from today's encoder (tests/fuzz/mkseeds.c): `make seeds`
# rewrites tests/fuzz/corpus/; check the result in. test_seeds decodes them.
SEEDGEN := $(B)/tests/mkseeds
$(SEEDGEN): $(B)/tests/fuzz/mkseeds.o $(LIBDIR)/libkvwire.a
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -o $@ $< $(LIBDIR)/libkvwire.a $(LDLIBS)
seeds: $(SEEDGEN)
	rm -f tests/fuzz/corpus/*/*
	$(SEEDGEN) tests/fuzz/corpus

# libFuzzer targets: clang, every lib source compiled into each target.
FUZZ_CFLAGS := -std=c17 -g -O1 -Ilib -Icmd -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined
fuzz: $(FUZZERS)
# (not cmd/common/notify.c: it needs libsystemd, and no fuzz target calls it)
build/fuzz/%: tests/fuzz/%.c $(LIB_SRC) $(CLI_SRC) $(wildcard lib/*.h lib/*/*.h lib/*/*/*.h) | $(DEPS_OK)
	@mkdir -p $(@D)
	clang $(FUZZ_CFLAGS) -o $@ $< $(LIB_SRC) $(filter-out cmd/common/notify.c,$(CLI_SRC)) $(LDLIBS)

# Manual pages from each program's --help (mk/help2mdoc.sh: one source,
# they cannot drift), into build/man/man1.
MAN_PROGS := $(CMDS) kv-up kv-demo
MANS := $(MAN_PROGS:%=build/man/man1/%.1)
build/man/man1/%.1: bin/% mk/help2mdoc.sh
	@mkdir -p $(@D)
	./mk/help2mdoc.sh $< >$@.tmp && mv $@.tmp $@
man: $(MANS)
# The shell programs are sources, not built by the programs' pattern rule.
bin/kv-up bin/kv-demo: ;

include mk/install.mk

# The cuda transport never needs CUDA headers (lib/mem/cuda_rt.h declares
# the runtime by hand). Where the headers exist, this proves the hand-made
# declarations match them (tests/cuda/decl_check.c) and that the cuda files
# also build with the headers in view; without them, that they build alone.
CUDA_HOME ?= /usr/local/cuda
CUDA_SRC := lib/mem/cuda_rt.c lib/mem/gpool.c lib/mem/gpool_map.c lib/xport/cuda/xport_cuda.c \
	lib/mem/mem.c lib/mem/mem_cuda.c lib/xport/rdma/rdma_gpu.c
cuda-decl: | $(DEPS_OK)
	$(CC) $(CPPFLAGS) -std=c17 $(WARN) -fsyntax-only tests/cuda/decl_check.c
	@for f in $(CUDA_SRC); do $(CC) $(CPPFLAGS) $(CFLAGS) -fsyntax-only $$f || exit 1; done
	@if [ -f $(CUDA_HOME)/include/cuda_runtime_api.h ]; then \
		$(CC) $(CPPFLAGS) -std=c17 $(WARN) -I$(CUDA_HOME)/include -DKVW_CUDA_HEADERS \
			-fsyntax-only tests/cuda/decl_check.c || exit 1; \
		for f in $(CUDA_SRC); do $(CC) $(CPPFLAGS) $(CFLAGS) -I$(CUDA_HOME)/include \
			-include cuda_runtime_api.h -fsyntax-only $$f || exit 1; done; \
		echo "cuda-decl: declarations match $(CUDA_HOME)/include/cuda_runtime_api.h; cuda files build with and without it"; \
	else \
		echo "cuda-decl: no CUDA headers under $(CUDA_HOME): cuda files build without them"; \
	fi

clean:
	rm -rf build lib/libkvwire.a lib/libkvwire.so $(CMDS:%=bin/%)

-include $(shell find build -name '*.d' 2>/dev/null)
