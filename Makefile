# ngx_feed_module
#
#   make run     install what is missing, build, start Redis, the MongoDB
#                stand-in and nginx with conf/nginx.conf on 127.0.0.1:8080;
#                FEED_REDIS_CLUSTER=1 on a local Redis Cluster,
#                FEED_REDIS_SENTINEL=1 on a local primary, replica and
#                three sentinels (tools/run)
#   make test    install what is missing, build, run the suite in t/
#   make test-asan  the same suite, the module built with AddressSanitizer
#                and UndefinedBehaviorSanitizer (docs/testing.md)
#   make bench   the benchmarks (docs/benchmarks.md)
#   make chaos   CHAOS_MINUTES (10) of clients under faults, then every
#                promise checked (docs/testing.md); CHAOS_SEED=N replays a
#                run, FEED_REDIS_CLUSTER=1 runs it on a Redis Cluster
#   make fuzz    the libFuzzer targets, FUZZ_SECONDS each (docs/fuzzing.md)
#   make deb     the Debian package, build/libnginx-mod-http-feed_*.deb, and
#                lintian on it (docs/packaging.md)

SHELL       := /bin/bash
LUA2H       := ngx_feed_module/scripts/lua2h
KEYS2H      := ngx_feed_module/scripts/keys2h
KEYS        := ngx_feed_module/scripts/keys
SCRIPTS     := $(wildcard ngx_feed_module/scripts/*.lua \
                          ngx_feed_module/scripts/lib/*.lua)
NGX_SRC     ?= /usr/share/nginx/src
BUILD       := $(CURDIR)/build
MODULE      := $(BUILD)/ngx_http_feed_module.so
# the wiring, then the layers' folders (docs/architecture.md)
LAYERS      := ngx_feed_module ngx_feed_module/core ngx_feed_module/stores \
               ngx_feed_module/features
SOURCES     := config $(foreach d,$(LAYERS),$(wildcard $(d)/*.c $(d)/*.h)) \
               $(LUA2H) $(KEYS2H) $(KEYS) $(SCRIPTS)
# three test files at a time on 2 cores: a file waits on its servers much
# of the time (faults, failovers, sleeps), and two left the cores idle 40%
# of the suite (816 s against 528 s, docs/testing.md); the sanitizer's
# build, slower, stays at two
PROVE_JOBS  ?= 3
ASAN_PROVE_JOBS ?= 2

# the sanitizer build: its own directory, so build/ stays as it is; loaded
# into Debian's (uninstrumented) nginx with libasan preloaded by the harness
ASAN_BUILD  := $(CURDIR)/build-asan
ASAN_MODULE := $(ASAN_BUILD)/ngx_http_feed_module.so
ASAN_FLAGS  ?= -fsanitize=address,undefined -fno-omit-frame-pointer
# NGX_HTTP_FEED_EXACT_ALLOC: a heap block of its own for each pool
# allocation of the module, so that ASan sees past its end (module.h);
# -z nodelete: a worker unloads its modules before it exits, and the leak
# report written at exit could not name the module's functions otherwise
ASAN_CONFIGURE = \
    --with-cc-opt="$(ASAN_FLAGS) -DNGX_HTTP_FEED_EXACT_ALLOC=1" \
    --with-ld-opt="$(ASAN_FLAGS) -Wl,-z,nodelete"

.PHONY: all deps asan-deps openapi-deps sse-deps browser-deps deb-deps build \
        build-asan run test test-asan bench chaos deb clean FORCE

include fuzz/fuzz.mk

all: build

deps:
	@sh tools/deps

build: deps $(MODULE)

build-asan: asan-deps $(ASAN_MODULE)

# and gcc 12's sanitizer runtimes (gcc pulls them in; named for a clean
# machine all the same)
asan-deps:
	@FEED_EXTRA_PKGS="libasan8 libubsan1" sh tools/deps

# the OpenAPI validator t/openapi.t runs on docs/openapi.yaml: npm ci into
# tools/openapi/node_modules (not in git), again only when package-lock.json
# is not the one installed
OPENAPI := tools/openapi

openapi-deps: deps
	@cmp -s $(OPENAPI)/package-lock.json $(OPENAPI)/node_modules/.feed-lock \
	    || { cd $(OPENAPI) && rm -f node_modules/.feed-lock \
	         && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null \
	         && cp package-lock.json node_modules/.feed-lock \
	         && echo "installed $(OPENAPI)/node_modules"; }

# the npm eventsource client of the streaming tests (t/js/sse_client.mjs,
# t/lib/FeedTest/SSE.pm): npm ci into t/js/node_modules (not in git), again
# only when package-lock.json is not the one installed
SSE_JS := t/js

sse-deps: deps
	@cmp -s $(SSE_JS)/package-lock.json $(SSE_JS)/node_modules/.feed-lock \
	    || { cd $(SSE_JS) && rm -f node_modules/.feed-lock \
	         && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null \
	         && cp package-lock.json node_modules/.feed-lock \
	         && echo "installed $(SSE_JS)/node_modules"; }

# Debian's Chromium, the browser of the streaming tests (FeedTest::SSE::
# browser, headless): for the tests only, so not in tools/deps' own list
browser-deps: deps
	@FEED_EXTRA_PKGS="chromium" sh tools/deps

# configure once against a private copy of Debian's nginx source tree,
# with the exact flags of Debian's binary, so the module's ABI matches;
# $(1): the build directory, $(2): extra ./configure options
define configure
	rm -rf $(1)/nginx
	mkdir -p $(1)
	cp -r $(NGX_SRC) $(1)/nginx
	cd $(1)/nginx && . ./conf_flags && \
	    ./configure "$${NGX_CONF_FLAGS[@]}" $(2) \
	        --add-dynamic-module=$(CURDIR) > $(1)/configure.log 2>&1 \
	    || { tail -20 $(1)/configure.log; exit 1; }
endef

# $(1): the build directory; the keys' and the scripts' headers made again
# first (config made them at ./configure time): unchanged, they compile
# nothing again
define compile
	sh $(KEYS2H) \
	    $(1)/nginx/objs/addon/ngx_feed_module/ngx_http_feed_keys.h $(KEYS)
	sh $(LUA2H) \
	    $(1)/nginx/objs/addon/ngx_feed_module/ngx_http_feed_scripts.h \
	    ngx_feed_module/scripts
	$(MAKE) -C $(1)/nginx -f objs/Makefile modules \
	    CFLAGS_EXTRA= > $(1)/make.log 2>&1 \
	    || { grep -E 'error|warning' $(1)/make.log | head -30; exit 1; }
	@# a new inode: a running nginx keeps the old file mapped
	cp $(1)/nginx/objs/ngx_http_feed_module.so $(1)/ngx_http_feed_module.so.tmp
	mv -f $(1)/ngx_http_feed_module.so.tmp $(1)/ngx_http_feed_module.so
	@echo "built $(1)/ngx_http_feed_module.so"
endef

$(BUILD)/nginx/objs/Makefile: config
	$(call configure,$(BUILD))

$(MODULE): $(BUILD)/nginx/objs/Makefile $(SOURCES)
	$(call compile,$(BUILD))

# configured again when the options change (make test-asan ASAN_FLAGS=...)
$(ASAN_BUILD)/flags: FORCE
	@mkdir -p $(ASAN_BUILD)
	@echo '$(ASAN_CONFIGURE)' | cmp -s - $@ \
	    || echo '$(ASAN_CONFIGURE)' > $@

$(ASAN_BUILD)/nginx/objs/Makefile: config $(ASAN_BUILD)/flags
	$(call configure,$(ASAN_BUILD),$(ASAN_CONFIGURE))

$(ASAN_MODULE): $(ASAN_BUILD)/nginx/objs/Makefile $(SOURCES)
	$(call compile,$(ASAN_BUILD))

run: build
	@bash tools/run

test: build openapi-deps sse-deps browser-deps
	prove -j$(PROVE_JOBS) -r t/

# the whole suite with the sanitizer build; any sanitizer report fails the
# test file whose nginx wrote it (t/lib/FeedTest.pm)
test-asan: build-asan openapi-deps sse-deps browser-deps
	FEED_MODULE=$(ASAN_MODULE) FEED_TEST_ASAN=1 prove -j$(ASAN_PROVE_JOBS) -r t/

bench: build
	@bash bench/run

# two nginx nodes, Redis and the MongoDB stand-in under a fault every 10 to
# 20 s; one line of summary, the details in build/chaos/<time>-seed<N>/;
# fails on any broken promise (tools/chaos)
CHAOS_MINUTES ?= 10

chaos: build
	@perl tools/chaos --minutes $(CHAOS_MINUTES) \
	    $(if $(CHAOS_SEED),--seed $(CHAOS_SEED))

# The Debian package, built by dpkg-buildpackage (debian/) on a copy of
# what goes into it, in build/deb/: nothing is written into the tree.  The
# version is that of debian/changelog's first entry.
DEB_VERSION := $(shell sed -n '1s/^[^(]*(\([^)]*\)).*/\1/p' debian/changelog)
DEB_ARCH    := $(shell dpkg --print-architecture)
DEB_BASE    := libnginx-mod-http-feed_$(DEB_VERSION)_$(DEB_ARCH)
DEB         := $(BUILD)/$(DEB_BASE).deb
DEB_FILES   := config ngx_feed_module conf docs README.md debian
DEB_INPUTS  := $(shell find $(DEB_FILES) -type f)

deb: deb-deps $(DEB)

# the packaging tools, with build-essential that dpkg-buildpackage checks
deb-deps:
	@FEED_EXTRA_PKGS="build-essential debhelper dpkg-dev fakeroot lintian" \
	    sh tools/deps

# lintian fails the build on an error or a warning not overridden in
# debian/libnginx-mod-http-feed.lintian-overrides; then the .deb (and its
# -dbgsym, .changes, .buildinfo) go to build/
$(DEB): $(DEB_INPUTS)
	rm -rf $(BUILD)/deb
	mkdir -p $(BUILD)/deb/src
	cp -r $(DEB_FILES) $(BUILD)/deb/src/
	cd $(BUILD)/deb/src && dpkg-buildpackage -b --no-sign \
	    > $(BUILD)/deb/build.log 2>&1 \
	    || { tail -30 $(BUILD)/deb/build.log; exit 1; }
	lintian --info --fail-on error,warning $(BUILD)/deb/$(DEB_BASE).changes
	mv $(BUILD)/deb/*.deb $(BUILD)/deb/*.changes $(BUILD)/deb/*.buildinfo \
	    $(BUILD)/
	@echo "built $(DEB)"

clean:
	rm -rf $(BUILD) $(ASAN_BUILD)
