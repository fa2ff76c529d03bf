# ngx_feed_module
#
#   make run     install what is missing, build, start Redis, the MongoDB
#                stand-in and nginx with conf/nginx.conf on 127.0.0.1:8080
#   make test    install what is missing, build, run the suite in t/
#   make bench   the benchmarks (docs/benchmarks.md)

SHELL       := /bin/bash
NGX_SRC     ?= /usr/share/nginx/src
BUILD       := $(CURDIR)/build
MODULE      := $(BUILD)/ngx_http_feed_module.so
SOURCES     := config $(wildcard ngx_feed_module/*.c ngx_feed_module/*.h)
PROVE_JOBS  ?= 2

.PHONY: all deps build run test bench clean

all: build

deps:
	@sh tools/deps

build: deps $(MODULE)

# configure once against a private copy of Debian's nginx source tree,
# with the exact flags of Debian's binary, so the module's ABI matches
$(BUILD)/nginx/objs/Makefile: config
	rm -rf $(BUILD)/nginx
	mkdir -p $(BUILD)
	cp -r $(NGX_SRC) $(BUILD)/nginx
	cd $(BUILD)/nginx && . ./conf_flags && \
	    ./configure "$${NGX_CONF_FLAGS[@]}" \
	        --add-dynamic-module=$(CURDIR) > $(BUILD)/configure.log 2>&1 \
	    || { tail -20 $(BUILD)/configure.log; exit 1; }

$(MODULE): $(BUILD)/nginx/objs/Makefile $(SOURCES)
	$(MAKE) -C $(BUILD)/nginx -f objs/Makefile modules \
	    CFLAGS_EXTRA= > $(BUILD)/make.log 2>&1 \
	    || { grep -E 'error|warning' $(BUILD)/make.log | head -30; exit 1; }
	@# a new inode: a running nginx keeps the old file mapped
	cp $(BUILD)/nginx/objs/ngx_http_feed_module.so $(MODULE).tmp
	mv -f $(MODULE).tmp $(MODULE)
	@echo "built $(MODULE)"

run: build
	@bash tools/run

test: build
	prove -j$(PROVE_JOBS) -r t/

bench: build
	@bash bench/run

clean:
	rm -rf $(BUILD)
