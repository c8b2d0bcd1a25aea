# fuzz/fuzz.mk - the coverage-guided fuzzers (libFuzzer, clang 14, ASan+UBSan).
#
#   make fuzz FUZZ_SECONDS=N   each harness N seconds (default 60) on a copy of
#                              its seed corpus (fuzz/corpus/NAME); figures in
#                              build/fuzz/results.md
#   make fuzz-smoke            each harness a few seconds: part of make test
#
# The whole tree is built again by clang into build/fuzz with coverage
# instrumentation (-fsanitize=fuzzer-no-link); each harness fuzz/NAME_fuzz.c
# links the objects it calls, as the unit tests do.
FUZZ_BUILD   := build/fuzz
FUZZ_NAMES   := config ctl gpu_wire pycode elf folded trace recording ingest
FUZZ_SECONDS ?= 60
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer

.PHONY: fuzz fuzz-smoke fuzz-build fuzz-harnesses
ifeq ($(FUZZ),1)
fuzz-harnesses: $(FUZZ_NAMES:%=$(BUILD)/fuzz/%_fuzz)

$(BUILD)/fuzz/%_fuzz: fuzz/%_fuzz.c fuzz/fuzz_util.c fuzz/fuzz.h \
		$(UNIT_SRCS:src/%.c=$(BUILD)/obj/%.o) $(PROTO_OBJ)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(FUZZ_SAN) -fsanitize=fuzzer $(WARN) $(CPPFLAGS) -Ifuzz -o $@ \
		$(filter %.c %.o,$^) $(LIBS)
endif

fuzz-build:
	$(MAKE) FUZZ=1 BUILD=$(FUZZ_BUILD) CC=clang \
		SANFLAGS="-fsanitize=fuzzer-no-link $(FUZZ_SAN)" fuzz-harnesses

fuzz: fuzz-build
	tools/run-fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS) $(FUZZ_NAMES)

# A fixed seed: the same mutations on every run of the same build.
fuzz-smoke: fuzz-build
	FUZZ_SEED=1 tools/run-fuzz.sh $(FUZZ_BUILD) 4 $(FUZZ_NAMES)
