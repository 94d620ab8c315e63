# nidus: `make run` builds and starts the runtime with embedded defaults;
# `make test` installs what the tests need and runs the whole suite (as root),
# on this host's cgroups, then in a cgroup v2 VM (`make test-v2` alone), then
# in a Debian VM with systemd, AppArmor and cgroup v2 only, with the package
# installed (`make test-node` alone); `make test-kubelet` runs a small
# cluster on nidus (not part of `make test`);
# `make deb` builds the Debian package (the binaries and the systemd unit);
# `make bench` compares nidus with containerd + runc (bench/, as root), and
# `make bench-node` the cgroup drivers in the node lane's VM;
# `make fuzz` runs the cargo-fuzz targets of fuzz/ (not part of `make test`).

CARGO ?= cargo
# Integration tests each start a daemon; a few at a time suits a 2-core machine.
TEST_THREADS ?= 4
# The daemon imports the archives here at start (`[image] import_dir`).
IMPORT_DIR ?= /var/lib/nidus/import

.PHONY: all build run deb test test-v2 test-node test-kubelet test-deps bench bench-node lint fuzz clean

all: build

build:
	$(CARGO) build --release --bins

run: build
	@[ -e $(IMPORT_DIR)/busybox ] || ./scripts/busybox-image $(IMPORT_DIR)/busybox || echo "no busybox image: apt-get install busybox"
	./target/release/nidus serve

# target/debian/nidus_<version>_amd64.deb, made with dpkg-deb from the
# release build (see scripts/build-deb); lintian checks it when installed.
deb:
	./scripts/build-deb >/dev/null

test-deps:
	./scripts/install-test-deps

# A one-off build keeps no incremental state (gigabytes across the test crates).
test: test-deps
	CARGO_INCREMENTAL=0 $(CARGO) build --workspace --all-targets
	CARGO_INCREMENTAL=0 $(CARGO) test --workspace --all-targets -- --test-threads=$(TEST_THREADS)
	CARGO_INCREMENTAL=0 ./scripts/vm-lane
	deb=$$(CARGO_INCREMENTAL=0 DEB_PROFILE=debug DEB_LINTIAN=0 ./scripts/build-deb) && \
	  CARGO_INCREMENTAL=0 NODE_LANE_DEBS="$$deb" ./scripts/node-lane

# The cgroup v2 lane alone: the resource and v2-sensitive lifecycle tests in a
# throwaway qemu VM with a pure cgroup v2 kernel (see scripts/vm-lane).
test-v2:
	./scripts/vm-lane

# The production-node lane: Debian's kernel booting a Debian 12 image made
# with mmdebstrap (cached in target/node-lane) with systemd as PID 1,
# AppArmor enabled and cgroup v2 only, the tests run from a systemd unit
# (see scripts/node-lane), with the package of `make deb` installed first
# for tests/service.rs. `make test` runs it with the package of the debug
# build it has made (DEB_PROFILE=debug), this target with the release one.
test-node:
	deb=$$(DEB_LINTIAN=0 ./scripts/build-deb) && NODE_LANE_DEBS="$$deb" ./scripts/node-lane

# The kubelet lane: Kubernetes 1.20.2 built from Debian's source (cached in
# target/kubelet-lane), a control plane and two kubelet nodes on nidus in a
# network namespace of their own, a kubectl scenario (see scripts/kubelet-lane).
# It installs what it needs from apt itself. KUBELET_LANE_NODES=1 runs one node.
test-kubelet: build
	./scripts/kubelet-lane

# BENCH_N (iterations, default 50), BENCH_DENSITY (pods, default 500) and
# BENCH_SCALE (the scale step's pod counts, default 10,110) size the run;
# BENCH_ONLY=scale runs the scale step alone; results go to bench-results/
# (latest.json, latest.md, the scale step's SVG charts).
bench:
	$(CARGO) build --release --bins
	$(CARGO) build --release -p nidus-bench
	$${CARGO_TARGET_DIR:-target}/release/nidus-bench

# The benchmark's cgroup-driver step (BENCH_ONLY=drivers) in the node lane's
# VM (systemd as PID 1, cgroup v2): nidus's systemd driver against its
# cgroupfs driver, and containerd + runc with SystemdCgroup = true, in one
# run; BENCH_N (default 20 here) and BENCH_CONCURRENCY size it. Results in
# bench-results/node/ (see scripts/node-lane, docs/benchmarks.md).
bench-node:
	$(CARGO) build --release --bins -p nidus -p nidus-bench
	BENCH_N=$${BENCH_N:-20} NODE_LANE_BENCH=1 ./scripts/node-lane

# cargo-fuzz targets (fuzz/, its own workspace), built together then run one
# after another in one process each, FUZZ_SECONDS (default 60) apiece;
# FUZZ_TARGETS picks some. cargo-fuzz passes nightly-only flags to rustc
# (-Z sanitizer, -C passes=sancov-module): RUSTC_BOOTSTRAP=1 lets the stable
# toolchain take them. FUZZ_SANITIZER=none builds without AddressSanitizer.
# New inputs go to fuzz/corpus/<target> (seeded from fuzz/seeds/<target>),
# crashes to fuzz/artifacts/<target>; neither is kept in git: a finding
# becomes a unit test in the module it is about.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS ?= cri_requests seccomp_profile image_metadata layer_unpack checkpoint_archive authority_frames
FUZZ_SANITIZER ?= address
FUZZ_MAX_LEN ?= 65536
# Scratch space of the targets that write files (tmpfs: the image store fsyncs).
FUZZ_TMP ?= /dev/shm/nidus-fuzz
FUZZ_ENV = RUSTC_BOOTSTRAP=1 NIDUS_FUZZ_TMP=$(FUZZ_TMP)

fuzz:
	@$(CARGO) fuzz --version >/dev/null 2>&1 || $(CARGO) install cargo-fuzz --locked
	@command -v c++ >/dev/null 2>&1 || { apt-get update && apt-get install -y g++; }
	cd fuzz && $(FUZZ_ENV) $(CARGO) fuzz build -s $(FUZZ_SANITIZER)
	@set -e; cd fuzz; for target in $(FUZZ_TARGETS); do \
		dict=dicts/$$target.dict; [ -f $$dict ] || dict=dicts/tar.dict; \
		mkdir -p corpus/$$target $(FUZZ_TMP); \
		echo "== $$target: $(FUZZ_SECONDS) s"; \
		$(FUZZ_ENV) $(CARGO) fuzz run -s $(FUZZ_SANITIZER) $$target corpus/$$target seeds/$$target -- \
			-max_total_time=$(FUZZ_SECONDS) -max_len=$(FUZZ_MAX_LEN) -timeout=30 -rss_limit_mb=4096 \
			-dict=$$dict -print_final_stats=1; \
		rm -rf $(FUZZ_TMP); \
	done

# The layering check reads docs/design.md's module map and src/ (no root needed).
lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) test --test layering

clean:
	$(CARGO) clean
