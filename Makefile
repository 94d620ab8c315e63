# nidus: `make run` builds and starts the runtime with embedded defaults;
# `make test` installs what the tests need and runs the whole suite (as root),
# on this host's cgroups and then in a cgroup v2 VM (`make test-v2` alone);
# `make bench` compares nidus with containerd + runc (bench/, as root).

CARGO ?= cargo
# Integration tests each start a daemon; a few at a time suits a 2-core machine.
TEST_THREADS ?= 4
# The daemon imports the archives here at start (`[image] import_dir`).
IMPORT_DIR ?= /var/lib/nidus/import

.PHONY: all build run test test-v2 test-deps bench lint clean

all: build

build:
	$(CARGO) build --release --bins

run: build
	@[ -e $(IMPORT_DIR)/busybox ] || ./scripts/busybox-image $(IMPORT_DIR)/busybox || echo "no busybox image: apt-get install busybox"
	./target/release/nidus serve

test-deps:
	./scripts/install-test-deps

test: test-deps
	$(CARGO) build --workspace --all-targets
	$(CARGO) test --workspace --all-targets -- --test-threads=$(TEST_THREADS)
	./scripts/vm-lane

# The cgroup v2 lane alone: the resource and v2-sensitive lifecycle tests in a
# throwaway qemu VM with a pure cgroup v2 kernel (see scripts/vm-lane).
test-v2:
	./scripts/vm-lane

# BENCH_N (iterations, default 50) and BENCH_DENSITY (pods, default 500) size
# the run; results go to bench-results/ (latest.json, latest.md).
bench:
	$(CARGO) build --release --bins
	$(CARGO) build --release -p nidus-bench
	./target/release/nidus-bench

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

clean:
	$(CARGO) clean
