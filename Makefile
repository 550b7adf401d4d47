# The two set-up commands (README.md): `make run` and `make test`.
BUILD ?= build
ASAN ?= build-asan
MESON_FLAGS ?=
ifeq ($(CI),true)
MESON_FLAGS += -Dwerror=true
endif

.PHONY: deps build run test test-unit test-asan fuzz clean

deps:
	./tools/install-deps.sh

$(BUILD)/build.ninja:
	meson setup $(BUILD) $(MESON_FLAGS)

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD)

run: build
	./tools/run-demo.sh $(BUILD)

test: build
	meson test -C $(BUILD) --print-errorlogs --suite unit --suite integration
	$(MAKE) test-asan
	$(MAKE) fuzz

$(ASAN)/build.ninja:
	meson setup $(ASAN) -Dcuda=disabled -Dbuildtype=debugoptimized \
		-Db_sanitize=address,undefined -Db_lundef=false $(MESON_FLAGS)

test-asan: deps $(ASAN)/build.ninja
	ninja -C $(ASAN)
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	meson test -C $(ASAN) --print-errorlogs --suite unit
	# the gRPC server under ASan+UBSan: leak check at each server's graceful exit
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	meson test -C $(ASAN) --print-errorlogs server fuzz_grpc_driver

# libFuzzer (clang) on the gRPC framing and request decoding, 60 s (tests/fuzz_grpc.c)
fuzz: deps
	[ -f build-fuzz/build.ninja ] || CC=clang meson setup build-fuzz -Dcuda=disabled \
		-Dbuildtype=debugoptimized -Db_sanitize=address,undefined -Db_lundef=false
	ninja -C build-fuzz tests/fuzz_grpc
	meson test -C build-fuzz --no-rebuild --suite fuzz --print-errorlogs

clean:
	rm -rf $(BUILD) $(ASAN) build-fuzz
