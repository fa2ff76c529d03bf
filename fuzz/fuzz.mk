# ngx_feed_module: libFuzzer targets (docs/fuzzing.md), included by the
# Makefile.
#
#   make fuzz          each target for FUZZ_SECONDS over its corpus (the
#                      seeds in t/fuzz/<target>/ and what it kept before
#                      in build/fuzz/corpus/<target>/); FUZZ_TARGETS: some
#   make fuzz-build    the targets only, in build/fuzz/bin/
#
# clang (Debian's, 14) builds nginx's core (tools/fuzz-nginx), the module
# and the targets with libFuzzer, AddressSanitizer and UBSan.

FUZZ_TARGETS  ?= post_input cursor timeline_args fallback redis_reply \
                 redis_cluster str_hash json_squeeze
FUZZ_SECONDS  ?= 300
FUZZ_DIR      := $(BUILD)/fuzz
FUZZ_BIN      := $(FUZZ_DIR)/bin
FUZZ_NGX      := $(FUZZ_DIR)/nginx
FUZZ_GEN      := $(FUZZ_DIR)/gen

# nginx's core: UBSan reports recoverable, so that fuzz/ubsan.supp can name
# those known in nginx; the module and the targets: none recoverable
FUZZ_NGXFLAGS := -g -O1 -fno-omit-frame-pointer \
                 -fsanitize=fuzzer-no-link,address,undefined
FUZZ_SAN      := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS   := -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link \
                 $(FUZZ_SAN)
# the module's pool allocations each a heap block: ASan sees an overrun
FUZZ_MODFLAGS := -DNGX_HTTP_FEED_EXACT_ALLOC=1
FUZZ_WARN     := -Wall -Wextra -Wpointer-arith -Wno-unused-parameter -Werror
FUZZ_INCS     := -I$(CURDIR)/fuzz $(addprefix -I$(CURDIR)/,$(LAYERS)) \
                 -I$(FUZZ_GEN) \
                 $(addprefix -I$(FUZZ_NGX)/, src/core src/event \
                     src/event/modules src/os/unix src/http \
                     src/http/modules objs)

FUZZ_SRCS     := $(foreach d,$(LAYERS),$(wildcard $(d)/*.c))
FUZZ_MODULE   := $(addprefix $(FUZZ_DIR)/mod/,$(notdir $(FUZZ_SRCS:.c=.o)))
# a module object: its own source and every header; a target: every
# source too (the targets include some of the module's .c files)
FUZZ_HDRS     := $(foreach d,$(LAYERS),$(wildcard $(d)/*.h)) \
                 fuzz/ngx_http_feed_fuzz.h \
                 $(FUZZ_GEN)/ngx_http_feed_keys.h \
                 $(FUZZ_GEN)/ngx_http_feed_scripts.h
FUZZ_DEPS     := $(FUZZ_SRCS) $(FUZZ_HDRS)

.PHONY: fuzz fuzz-build fuzz-deps
.SECONDARY:

fuzz-deps:
	@FEED_EXTRA_PKGS="clang libclang-rt-14-dev dpkg-dev xz-utils binutils \
	    $(FEED_EXTRA_PKGS)" sh tools/deps

fuzz-build: fuzz-deps $(addprefix $(FUZZ_BIN)/,$(FUZZ_TARGETS))

# every target runs, whatever the others found
fuzz: fuzz-build
	@fail=; for t in $(FUZZ_TARGETS); do \
	    sh tools/fuzz-run $(FUZZ_BIN)/$$t t/fuzz/$$t $(FUZZ_DIR)/corpus/$$t \
	        -max_total_time=$(FUZZ_SECONDS) || fail="$$fail $$t"; \
	done; \
	[ -z "$$fail" ] || { echo "fuzz: findings in:$$fail" >&2; exit 1; }

# nginx's core, from Debian's source: built again only when the script
# changes, downloaded once
$(FUZZ_DIR)/libngx.a: tools/fuzz-nginx
	@rm -f $@
	sh tools/fuzz-nginx $(FUZZ_DIR) "$(FUZZ_NGXFLAGS)"

# the keys' and the scripts' headers, as config makes them for nginx's
# build
$(FUZZ_GEN)/ngx_http_feed_keys.h: $(KEYS2H) $(KEYS)
	@mkdir -p $(@D)
	sh $(KEYS2H) $@ $(KEYS)

$(FUZZ_GEN)/ngx_http_feed_scripts.h: $(LUA2H) $(KEYS2H) $(KEYS) $(SCRIPTS)
	@mkdir -p $(@D)
	sh $(LUA2H) $@ ngx_feed_module/scripts

# a module object from its layer's folder: make finds the source in them
vpath ngx_http_feed_%.c $(LAYERS)

$(FUZZ_DIR)/mod/%.o: %.c $(FUZZ_HDRS) $(FUZZ_DIR)/libngx.a
	@mkdir -p $(@D)
	@echo "fuzz cc $<"
	@clang -c $(FUZZ_CFLAGS) $(FUZZ_MODFLAGS) $(FUZZ_WARN) $(FUZZ_INCS) \
	    `pkg-config --cflags hiredis libmongoc-1.0 libbson-1.0` -o $@ $<

$(FUZZ_DIR)/libfeed.a: $(FUZZ_MODULE)
	@rm -f $@
	@ar rcs $@ $^

$(FUZZ_DIR)/obj/%.o: fuzz/%.c $(FUZZ_DEPS) $(FUZZ_DIR)/libngx.a
	@mkdir -p $(@D)
	@echo "fuzz cc $<"
	@clang -c $(FUZZ_CFLAGS) $(FUZZ_MODFLAGS) $(FUZZ_WARN) $(FUZZ_INCS) \
	    `pkg-config --cflags hiredis libmongoc-1.0 libbson-1.0` -o $@ $<

# a target that includes a module source for its static functions links
# it once: the archive's copy is then not pulled in
$(FUZZ_BIN)/%: $(FUZZ_DIR)/obj/fuzz_%.o $(FUZZ_DIR)/obj/ngx_http_feed_fuzz.o \
               $(FUZZ_DIR)/libfeed.a $(FUZZ_DIR)/libngx.a
	@mkdir -p $(@D)
	@echo "fuzz link $@"
	@clang -fsanitize=fuzzer $(FUZZ_SAN) -o $@ $(filter %.o,$^) \
	    -Wl,--start-group $(FUZZ_DIR)/libfeed.a $(FUZZ_DIR)/libngx.a \
	    -Wl,--end-group \
	    `pkg-config --libs hiredis libmongoc-1.0 libbson-1.0` \
	    `cat $(FUZZ_DIR)/libngx.libs` -lm
