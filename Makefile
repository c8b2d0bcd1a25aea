# ncclprobe - build, demo, tests, benchmarks and packaging.
#
#   make            build build/ncclprobe
#   make demo       build the demo workload and record it
#   make test       every test (needs root for the BPF ones)
#   make check TEST=NAME   one test or unit group (README.md, "Running one test")
#   make check-layers   every include and call points down the data flow
#   make bench      benchmarks (bench/README.md)
#   make bench-cost the per-launch cost benchmark alone (bench/cost.sh)
#   make SAN=1 ...  the same with AddressSanitizer + UBSan (build/san/)
#   make format     clang-format every C file

CC      ?= gcc
CLANG   ?= clang
BPFTOOL ?= bpftool
CUDA_HOME ?= /usr/local/cuda
PYTHON  ?= /usr/bin/python3

ifeq ($(SAN),1)
BUILD   ?= build/san
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
# The CUPTI library runs inside programs built without ASan (whose runtime must
# load first): UBSan only, which a dlopen()ed library can bring along.
CUPTI_SANFLAGS := -fsanitize=undefined -fno-sanitize-recover=undefined
else
BUILD   ?= build
SANFLAGS :=
CUPTI_SANFLAGS :=
endif

WARN     := -Wall -Wextra -Werror
CFLAGS   ?= -O2 -g
CPPFLAGS := -Iinclude -Isrc -I$(BUILD) -I$(BUILD)/gen
LIBS     := -lbpf -ldw -lelf -lz -lcjson -lprotobuf-c -lmicrohttpd -lstdc++ -lpthread

BPF_SRC  := bpf/ncclprobe.bpf.c
# src/cupti/ is the injection library that runs inside the target, not part of the daemon;
# so is src/inject/stub.c, the injector's stub (built alone: "the injector's stub" below).
SRCS     := $(sort $(filter-out src/cupti/% src/inject/stub.c,$(wildcard src/*/*.c)))
CUPTI_SRCS := $(sort $(wildcard src/cupti/*.c))
# pprof's profile.proto (src/writers/profile.proto, from github.com/google/pprof),
# compiled by protobuf-c into $(BUILD)/gen.
PROTO_OBJ := $(BUILD)/obj/gen/profile.pb-c.o
OBJS     := $(SRCS:src/%.c=$(BUILD)/obj/%.o) $(PROTO_OBJ)
HEADERS  := $(wildcard include/ncclprobe/*.h src/*/*.h)

# The CUPTI injection library, when the toolkit's headers are there (src/cupti/).
ifneq ($(wildcard $(CUDA_HOME)/include/cupti.h),)
CUPTI_LIB := $(BUILD)/libncclprobe_cupti.so
endif

.PHONY: all demo test test-unit test-e2e check check-layers bench format format-check clean
all: $(BUILD)/ncclprobe $(CUPTI_LIB)

# vmlinux.h is generated from the running kernel's BTF at build time: it then
# matches the kernel we load on, and no 3 MB generated header sits in git.
$(BUILD)/vmlinux.h:
	@mkdir -p $(@D)
	$(BPFTOOL) btf dump file /sys/kernel/btf/vmlinux format c > $@.tmp && mv $@.tmp $@

$(BUILD)/ncclprobe.bpf.o: $(BPF_SRC) include/ncclprobe/events.h $(BUILD)/vmlinux.h
	$(CLANG) -g -O2 -target bpf -D__TARGET_ARCH_x86 $(WARN) -Wno-unused-function -Wno-unused-parameter \
		-Iinclude -I$(BUILD) -c $< -o $@

$(BUILD)/ncclprobe.skel.h: $(BUILD)/ncclprobe.bpf.o
	$(BPFTOOL) gen skeleton $< name ncclprobe_bpf > $@.tmp && mv $@.tmp $@

# The --nccl-flows probes: an object of their own, loaded only with the option.
$(BUILD)/nccl_flows.bpf.o: bpf/nccl_flows.bpf.c include/ncclprobe/flows.h $(BUILD)/vmlinux.h
	$(CLANG) -g -O2 -target bpf -D__TARGET_ARCH_x86 $(WARN) -Wno-unused-function -Wno-unused-parameter \
		-Iinclude -I$(BUILD) -c $< -o $@

$(BUILD)/nccl_flows.skel.h: $(BUILD)/nccl_flows.bpf.o
	$(BPFTOOL) gen skeleton $< name nccl_flows_bpf > $@.tmp && mv $@.tmp $@

# The daemon's process discovery (exec and library mmap notifications).
$(BUILD)/discover.bpf.o: bpf/discover.bpf.c include/ncclprobe/discover.h $(BUILD)/vmlinux.h
	$(CLANG) -g -O2 -target bpf -D__TARGET_ARCH_x86 $(WARN) -Wno-unused-function -Wno-unused-parameter \
		-Iinclude -I$(BUILD) -c $< -o $@

$(BUILD)/discover.skel.h: $(BUILD)/discover.bpf.o
	$(BPFTOOL) gen skeleton $< name discover_bpf > $@.tmp && mv $@.tmp $@

$(BUILD)/gen/profile.pb-c.c $(BUILD)/gen/profile.pb-c.h: src/writers/profile.proto
	@mkdir -p $(BUILD)/gen
	protoc-c --proto_path=src/writers --c_out=$(BUILD)/gen src/writers/profile.proto

$(PROTO_OBJ): $(BUILD)/gen/profile.pb-c.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(SANFLAGS) -I$(BUILD)/gen -c $< -o $@

# The flame graph's stylesheet and script, files of their own, built in as C arrays.
FLAME_ASSETS := src/writers/flamegraph.css src/writers/flamegraph.js
$(BUILD)/gen/flamegraph_assets.h: $(FLAME_ASSETS) tools/embed-asset.sh
	@mkdir -p $(@D)
	tools/embed-asset.sh $(FLAME_ASSETS) > $@.tmp && mv $@.tmp $@
$(BUILD)/obj/writers/flamegraph.o: $(BUILD)/gen/flamegraph_assets.h

$(BUILD)/obj/%.o: src/%.c $(HEADERS) $(BUILD)/ncclprobe.skel.h $(BUILD)/discover.skel.h \
		$(BUILD)/nccl_flows.skel.h $(BUILD)/gen/profile.pb-c.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(SANFLAGS) $(WARN) $(CPPFLAGS) -c $< -o $@

$(BUILD)/ncclprobe: $(OBJS)
	$(CC) $(CFLAGS) $(SANFLAGS) -o $@ $^ $(LIBS)

# ---- libncclprobe_cupti.so -------------------------------------------------
# Loaded into the target with CUDA_INJECTION64_PATH. Built against the
# toolkit's CUPTI headers; CUPTI itself is dlopen()ed at run time.

# One object per file (tools/check-layers.py reads what each calls).
CUPTI_OBJS := $(CUPTI_SRCS:src/%.c=$(BUILD)/obj/%.o)

$(CUPTI_OBJS): $(BUILD)/obj/cupti/%.o: src/cupti/%.c $(wildcard src/cupti/*.h) include/ncclprobe/gpu_wire.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(CUPTI_SANFLAGS) $(WARN) -fPIC -fvisibility=hidden -Iinclude -Isrc \
		-I$(CUDA_HOME)/include -c $< -o $@

$(BUILD)/libncclprobe_cupti.so: $(CUPTI_OBJS)
	$(CC) $(CFLAGS) $(CUPTI_SANFLAGS) -shared -o $@ $^ -ldl -lpthread

# ---- the injector's stub (src/inject/, docs/inject.md) ----------------------
# The code np_inject_agent runs inside a target: freestanding and position
# independent, linked flat by stub.lds (data, bss, GOT or relocations fail the
# link) and built into the injector as np_stub_blob[] (stub_blob.c, .incbin).
# Only pc-relative relocations may appear before the link: the blob runs
# wherever the code cave is. Not the sanitizers' flags: it runs in the target.
STUB_C := src/inject/stub.c
# The stub is built by gcc even when CC is clang (make fuzz): its flags are gcc's.
STUB_CC ?= gcc
STUB_DIR := $(BUILD)/stub
STUB_CFLAGS := -Os -fPIE -ffreestanding -fno-builtin -nostdlib -fno-stack-protector \
	-fno-asynchronous-unwind-tables -fno-unwind-tables -fcf-protection=none -fno-jump-tables \
	-fno-tree-loop-distribute-patterns -fno-exceptions -mno-red-zone $(WARN) -Isrc

$(STUB_DIR)/stub.o: $(STUB_C) src/inject/stub_abi.h
	@mkdir -p $(@D)
	$(STUB_CC) $(STUB_CFLAGS) -c $< -o $@

$(STUB_DIR)/stub_entry.o: src/inject/stub_entry.S src/inject/stub_abi.h
	@mkdir -p $(@D)
	$(STUB_CC) $(STUB_CFLAGS) -c $< -o $@

$(STUB_DIR)/stub.bin: $(STUB_DIR)/stub_entry.o $(STUB_DIR)/stub.o src/inject/stub.lds
	@if readelf -rW $(STUB_DIR)/stub_entry.o $(STUB_DIR)/stub.o | \
		grep -E '^[0-9a-f]+ ' | grep -vE 'R_X86_64_(PC32|PLT32)'; then \
		echo "stub: an absolute relocation" >&2; exit 1; fi
	ld -nostdlib -static -T src/inject/stub.lds --orphan-handling=error --no-undefined \
		-o $(STUB_DIR)/stub.elf $(STUB_DIR)/stub_entry.o $(STUB_DIR)/stub.o
	objcopy -O binary -j .stub $(STUB_DIR)/stub.elf $@

$(BUILD)/obj/inject/stub_blob.o: $(STUB_DIR)/stub.bin
$(BUILD)/obj/inject/stub_blob.o: CPPFLAGS += -DNP_STUB_BIN='"$(STUB_DIR)/stub.bin"'

# ---- workloads -------------------------------------------------------------
$(BUILD)/progs/.built: $(wildcard tests/progs/*)
	$(MAKE) -C tests/progs O=$(abspath $(BUILD))/progs CUDA_HOME=$(CUDA_HOME)
	@touch $@

$(BUILD)/demo/.built: $(wildcard tools/demo/* tools/demo/*/*)
	$(MAKE) -C tools/demo O=$(abspath $(BUILD))/demo CUDA_HOME=$(CUDA_HOME)
	@touch $@

demo: $(BUILD)/ncclprobe $(BUILD)/demo/.built
	tools/run-demo.sh $(BUILD)

# ---- tests -------------------------------------------------------------------
UNIT_SRCS := $(filter-out src/cli/main.c,$(SRCS))
$(BUILD)/unit_tests: tests/unit/unit_tests.c tests/unit/check.h $(UNIT_SRCS:src/%.c=$(BUILD)/obj/%.o) $(PROTO_OBJ)
	$(CC) $(CFLAGS) $(SANFLAGS) $(WARN) $(CPPFLAGS) -o $@ $(filter-out %.h,$^) $(LIBS)

# Checks the CPython line-table decoders against the interpreters (tests/test_pylines.py).
$(BUILD)/pyline_check: tests/progs/pyline_check.c $(UNIT_SRCS:src/%.c=$(BUILD)/obj/%.o) $(PROTO_OBJ)
	$(CC) $(CFLAGS) $(SANFLAGS) $(WARN) $(CPPFLAGS) -o $@ $^ $(LIBS)

# The injector alone, with a test library (tests/test_inject.py): a test driver, not a command.
# Linked with the objects of inject's level and below (inject, attach, lib: check-layers).
INJECT_CHECK_OBJS := $(filter $(BUILD)/obj/inject/% $(BUILD)/obj/attach/% $(BUILD)/obj/lib/%,$(OBJS))
$(BUILD)/inject_check: tests/progs/inject_check.c $(INJECT_CHECK_OBJS)
	$(CC) $(CFLAGS) $(SANFLAGS) $(WARN) $(CPPFLAGS) -o $@ $^ $(LIBS)

# What --nccl-flows reads from a libnccl, printed (tests/test_nccl_flow_versions.py): a test
# driver, not a command. Linked with the objects of attach's level and below (check-layers).
FLOW_LAYOUT_CHECK_OBJS := $(filter $(BUILD)/obj/attach/% $(BUILD)/obj/lib/%,$(OBJS))
$(BUILD)/flow_layout_check: tests/progs/flow_layout_check.c $(FLOW_LAYOUT_CHECK_OBJS)
	$(CC) $(CFLAGS) $(SANFLAGS) $(WARN) $(CPPFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/unwind_bench: bench/unwind_bench.c $(UNIT_SRCS:src/%.c=$(BUILD)/obj/%.o) $(PROTO_OBJ)
	$(CC) $(CFLAGS) $(WARN) $(CPPFLAGS) -o $@ $^ $(LIBS)

# The offline merge's matcher alone (src/merge/match.c).
$(BUILD)/merge_unit: tests/unit/merge_unit.c tests/unit/check.h $(UNIT_SRCS:src/%.c=$(BUILD)/obj/%.o) $(PROTO_OBJ)
	$(CC) $(CFLAGS) $(SANFLAGS) $(WARN) $(CPPFLAGS) -o $@ $(filter-out %.h,$^) $(LIBS)

# The daemon's configuration parser and its control socket, alone.
$(BUILD)/config_unit: tests/unit/config_unit.c tests/unit/check.h $(UNIT_SRCS:src/%.c=$(BUILD)/obj/%.o) $(PROTO_OBJ)
	$(CC) $(CFLAGS) $(SANFLAGS) $(WARN) $(CPPFLAGS) -o $@ $(filter-out %.h,$^) $(LIBS)

$(BUILD)/ctl_unit: tests/unit/ctl_unit.c tests/unit/check.h $(UNIT_SRCS:src/%.c=$(BUILD)/obj/%.o) $(PROTO_OBJ)
	$(CC) $(CFLAGS) $(SANFLAGS) $(WARN) $(CPPFLAGS) -o $@ $(filter-out %.h,$^) $(LIBS)

# Failure paths, with realloc wrapped so that a test can make it fail.
$(BUILD)/fault_unit: tests/unit/fault_unit.c tests/unit/check.h $(UNIT_SRCS:src/%.c=$(BUILD)/obj/%.o) $(PROTO_OBJ)
	$(CC) $(CFLAGS) $(SANFLAGS) $(WARN) $(CPPFLAGS) -Wl,--wrap=realloc -o $@ $(filter-out %.h,$^) $(LIBS)

# The recording reader alone (src/recording/), on directories it writes.
$(BUILD)/recording_unit: tests/unit/recording_unit.c tests/unit/check.h $(UNIT_SRCS:src/%.c=$(BUILD)/obj/%.o) $(PROTO_OBJ)
	$(CC) $(CFLAGS) $(SANFLAGS) $(WARN) $(CPPFLAGS) -o $@ $(filter-out %.h,$^) $(LIBS)

# The CUPTI socket's server on connections handed over, and NAMES frames.
$(BUILD)/gpu_socket_unit: tests/unit/gpu_socket_unit.c tests/unit/check.h $(UNIT_SRCS:src/%.c=$(BUILD)/obj/%.o) $(PROTO_OBJ)
	$(CC) $(CFLAGS) $(SANFLAGS) $(WARN) $(CPPFLAGS) -o $@ $(filter-out %.h,$^) $(LIBS)

# The HTTP endpoints' exposition, arguments, addresses, token checks, feed, live profiles.
$(BUILD)/http_unit: tests/unit/http_unit.c tests/unit/check.h $(UNIT_SRCS:src/%.c=$(BUILD)/obj/%.o) $(PROTO_OBJ)
	$(CC) $(CFLAGS) $(SANFLAGS) $(WARN) $(CPPFLAGS) -o $@ $(filter-out %.h,$^) $(LIBS)

test-unit: $(BUILD)/unit_tests $(BUILD)/merge_unit $(BUILD)/config_unit $(BUILD)/ctl_unit \
		$(BUILD)/fault_unit $(BUILD)/recording_unit $(BUILD)/gpu_socket_unit $(BUILD)/http_unit
	$(BUILD)/unit_tests
	$(BUILD)/merge_unit
	$(BUILD)/config_unit
	$(BUILD)/ctl_unit
	$(BUILD)/fault_unit
	$(BUILD)/recording_unit
	$(BUILD)/gpu_socket_unit
	$(BUILD)/http_unit

E2E_DEPS := $(BUILD)/ncclprobe $(CUPTI_LIB) $(BUILD)/progs/.built $(BUILD)/demo/.built \
	$(BUILD)/pyline_check $(BUILD)/inject_check $(BUILD)/flow_layout_check

# The runtime matrix tests (tests/test_runtimes_*.py) write what each library
# version does into $(BUILD)/runtimes/; docs/compatibility.md is made from that.
test-e2e: $(E2E_DEPS)
	rm -f $(BUILD)/runtimes/*.json
	NCCLPROBE_BUILD=$(abspath $(BUILD)) $(PYTHON) -m pytest -q -rs tests/
	$(PYTHON) tools/compat-doc.py $(BUILD)/runtimes docs/compatibility.md

# make check TEST=NAME [SAN=1]: one test. NAME is a C unit group (tests/unit/NAME.c:
# unit_tests, merge_unit, ...), a pytest file or node id (tests/test_pprof.py,
# tests/test_pprof.py::test_x), or else a pytest -k expression ("hostile and not svg").
ifeq ($(TEST),)
check:
	@echo "usage: make check TEST=NAME (a unit group, a pytest node id or file, a -k expression)" >&2
	@exit 2
else ifneq ($(wildcard tests/unit/$(TEST).c),)
check: $(BUILD)/$(TEST)
	$(BUILD)/$(TEST)
else
check: $(E2E_DEPS)
	NCCLPROBE_BUILD=$(abspath $(BUILD)) $(PYTHON) -m pytest -q -rs \
		$(if $(or $(findstring ::,$(TEST)),$(wildcard $(TEST))),'$(TEST)',-k '$(TEST)')
endif

# Unit and end-to-end tests, on the normal build and again on the
# AddressSanitizer/UBSan build (LeakSanitizer fails a run that leaks), then
# each fuzzer a few seconds on its seed corpus (fuzz/fuzz.mk).
# Every include and call points down the data flow (tools/check-layers.py:
# lib < wire formats < attach < unwind/symbolize < ingest < correlate <
# writers/recording/report/merge < session < cli/daemon).
check-layers: $(BUILD)/ncclprobe $(CUPTI_LIB)
	$(PYTHON) tools/check-layers.py --build $(BUILD)

test: check-layers test-unit test-e2e
	$(MAKE) SAN=1 test-unit test-e2e
	$(MAKE) fuzz-smoke

$(BUILD)/join_bench: bench/join_bench.c src/correlate/gpu.c src/lib/hashmap.c $(HEADERS)
	$(CC) $(CFLAGS) $(WARN) $(CPPFLAGS) -o $@ bench/join_bench.c src/correlate/gpu.c src/lib/hashmap.c

$(BUILD)/marker_loop: bench/marker_loop.c
	$(CC) $(CFLAGS) $(WARN) -o $@ $< -ldl

$(BUILD)/graph_loop: bench/graph_loop.c
	$(CC) $(CFLAGS) $(WARN) -o $@ $< -ldl

$(BUILD)/nccl_loop: bench/nccl_loop.c
	$(CC) $(CFLAGS) $(WARN) -o $@ $< -ldl

bench: $(BUILD)/ncclprobe $(BUILD)/progs/.built $(BUILD)/unwind_bench $(BUILD)/join_bench \
		$(BUILD)/marker_loop $(BUILD)/nccl_loop $(BUILD)/graph_loop $(CUPTI_LIB)
	bench/run.sh $(BUILD)
	bench/unwind.sh $(BUILD)
	bench/gpu.sh $(BUILD)
	bench/nccl.sh $(BUILD)
	bench/daemon.sh $(BUILD)
	bench/merge.sh $(BUILD)
	$(PYTHON) bench/inject.py --build $(BUILD)
	$(PYTHON) bench/graphs.py --build $(BUILD)
	bench/cost.sh $(BUILD)

# What each launch costs the launching thread (BPF run time, added latency) against a bare
# uprobe, per workload; BENCH_AGAINST=REV adds that revision's build (bench/README.md).
.PHONY: bench-cost
bench-cost: $(BUILD)/ncclprobe $(BUILD)/progs/.built
	bench/cost.sh $(BUILD)

FORMATTED := $(BPF_SRC) bpf/discover.bpf.c bpf/nccl_flows.bpf.c $(SRCS) $(STUB_C) $(HEADERS) $(CUPTI_SRCS) tests/unit/*.[ch] fuzz/*.[ch] $(wildcard tests/progs/*.[ch] \
	tests/progs/*.cc tools/demo/*.[ch] tools/demo/standin/*.[ch] bench/*.c)

format:
	clang-format -i $(FORMATTED)

format-check:
	clang-format --dry-run --Werror $(FORMATTED)

clean:
	rm -rf build

# make deb, make install: packaging/packaging.mk
include packaging/packaging.mk


# make fuzz, make fuzz-smoke: fuzz/fuzz.mk
include fuzz/fuzz.mk
