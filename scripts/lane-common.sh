# shellcheck shell=bash
# shellcheck disable=SC2154,SC2034 # the lane script sets lane_name, lane_env, tests and started, and uses vmlinuz, test_limit…
# What the two VM lanes share, sourced by scripts/vm-lane (the cgroup v2
# lane) and scripts/node-lane (the production-node lane): their paths, the
# kernel and busybox they download from apt, the initramfs, the test
# binaries and the plan, the time limits, and the report of each plan line.
#
# The sourcing script sets, before it sources this file:
#   lane_name  its name in messages and its directory under the target dir
#              (vm-lane, node-lane)
#   lane_env   the prefix of its environment variables (VM_LANE, NODE_LANE):
#              ${lane_env}_DIR, _TESTS, _THREADS, _ARGS, _KEEP, _SCALE,
#              _TEST_TIMEOUT, _TIMEOUT, _MAX_SECONDS
# and runs from the checkout's top directory.
#
# The plan (run/plan, one line per test target, read by scripts/lane-plan.sh
# in the VM): NAME LIMIT_SECONDS EXECUTABLE [FILTER…] --test-threads=N [ARGS…]
# The VM writes run/NAME.log and run/NAME.rc ("RC SECONDS LIMIT") for each,
# and run/done once the plan is through.

say() { echo "$lane_name: $*"; }
die() { echo "$lane_name: $*" >&2; exit 1; }

# The lane's setting NAME (${lane_env}_NAME), or DEFAULT when unset or empty.
lane_var() { # NAME DEFAULT
  local var=${lane_env}_$1
  echo "${!var:-$2}"
}

# repo, target_dir, lane (its directory), cache and run (the last run's).
lane_paths() {
  repo=$(pwd)
  target_dir=${CARGO_TARGET_DIR:-$repo/target}
  [[ $target_dir == /* ]] || target_dir=$repo/$target_dir
  lane=$(lane_var DIR "$target_dir/$lane_name")
  [[ $lane == /* ]] || lane=$repo/$lane
  cache=$lane/cache
  run=$lane/run
}

# A path the VM sees as it is: the host's root shows through everywhere but
# the VM's own kernel and runtime filesystems; the plan, the kernel command
# line and qemu's -virtfs take it unquoted.
visible_path() { # what, path
  local real
  real=$(realpath -m -- "$2")
  case $real in
    /proc | /proc/* | /sys | /sys/* | /dev | /dev/* | /run | /run/*)
      die "$1 $2 ($real) is under /proc, /sys, /dev or /run, which the VM mounts its own; use a checkout or CARGO_TARGET_DIR elsewhere" ;;
  esac
  [[ $2 != *[[:space:],]* ]] || die "$1 '$2' has a space or a comma, which the lane's plan and qemu's options cannot carry"
}

# Installs from apt the packages whose command is missing.
lane_need() { # command package [command package…]
  local need=()
  while (($#)); do
    command -v "$1" >/dev/null || need+=("$2")
    shift 2
  done
  if ((${#need[@]})); then
    say "installing from apt: ${need[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
}

# A package downloaded and extracted into $cache/$package (never installed:
# the static busybox package would replace the dynamic one the tests build
# images from).
fetch() { # package → extracted into $cache/$package
  local package=$1
  if [[ ! -e $cache/$package/.done ]]; then
    say "downloading $package (apt)"
    local tmp
    tmp=$(mktemp -d)
    chmod 755 "$tmp"
    (cd "$tmp" && apt-get download -q "$package" >/dev/null 2>&1) || die "apt-get download $package failed"
    rm -rf "${cache:?}/$package"
    dpkg-deb -x "$tmp"/*.deb "$cache/$package"
    rm -rf "$tmp"
    touch "$cache/$package/.done"
  fi
}

# Debian's kernel (what linux-image-amd64 depends on now) and a static
# busybox: kernel_package, vmlinuz, modules (its /lib/modules/VERSION).
lane_kernel() {
  mkdir -p "$cache"
  kernel_package=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  [[ -n $kernel_package ]] || die "cannot tell which kernel linux-image-amd64 depends on (apt-get update?)"
  fetch "$kernel_package"
  fetch busybox-static
  vmlinuz=$(ls "$cache/$kernel_package"/boot/vmlinuz-*)
  modules=$(ls -d "$cache/$kernel_package"/lib/modules/*)
}

# The modules the initramfs loads, each after what its `depends=` names
# (read from the modules themselves: the order changes between kernels).
module_order() { # modules dir, wanted modules → "name file" lines, in load order
  python3 - "$@" <<'EOF'
import os, sys
modules_dir, wanted = sys.argv[1], sys.argv[2:]
files = {}
for root, _, names in os.walk(modules_dir):
    for name in names:
        if name.endswith(".ko"):
            files[name[:-3].replace("-", "_")] = os.path.join(root, name)
def depends(name):
    with open(files[name], "rb") as f:
        for field in f.read().split(b"\0"):
            if field.startswith(b"depends="):
                return [d for d in field[len("depends="):].decode().split(",") if d]
    return []
order, placing = [], set()
def place(name):
    name = name.replace("-", "_")
    if name not in files or name in order:
        return  # built into this kernel, or placed already
    if name in placing:
        sys.exit(f"module dependency cycle at {name}")
    placing.add(name)
    for dep in depends(name):
        place(dep)
    order.append(name)
for name in wanted:
    place(name)
for name in order:
    print(name, files[name])
EOF
}

# A busybox initramfs: the static busybox as /bin/busybox, INIT as /init and
# the wanted modules (with what they depend on) in /lib/modules, listed in
# load order in /lib/modules/order. Made again when INIT, the lane's script
# or this file is newer than it.
lane_initrd() { # output, init script, wanted modules…
  local out=$1 init=$2
  shift 2
  if [[ ! -e $out || $init -nt $out || scripts/$lane_name -nt $out || scripts/lane-common.sh -nt $out ]]; then
    say "building the initramfs"
    local root order module file
    root=$(mktemp -d)
    mkdir -p "$root"/{bin,proc,sys,dev,lib/modules}
    cp "$cache/busybox-static/bin/busybox" "$root/bin/busybox"
    cp "$init" "$root/init"
    order=$(module_order "$modules" "$@") || die "cannot order the kernel modules"
    while read -r module file; do
      cp "$file" "$root/lib/modules/$module.ko"
      echo "$module" >>"$root/lib/modules/order"
    done <<<"$order"
    (cd "$root" && find . | cpio -o -H newc --quiet | gzip -1 >"$out.tmp")
    mv "$out.tmp" "$out"
    rm -rf "$root"
  fi
}

# The test binaries of $tests (target[:filter,filter…] words; a word of the
# list that starts with `--` is a flag for the test binary, such as
# `--include-ignored`, not a filter), built here, and the plan that runs
# them: run/plan, plan_names, filters_of.
lane_plan() { # threads
  local threads=$1 targets=() t target filter word filters flags exe name i
  for t in $tests; do targets+=(--test "${t%%:*}"); done
  say "building the test binaries (${tests})"
  "${CARGO:-cargo}" test --no-run --message-format=json "${targets[@]}" >"$lane/build.json" 2>"$lane/build.log" \
    || { cat "$lane/build.log" >&2; die "cargo test --no-run failed"; }
  rm -rf "$run"
  mkdir -p "$run"
  declare -gA filters_of=()
  plan_names=()
  for t in $tests; do
    target=${t%%:*}
    filter=
    [[ $t == *:* ]] && filter=${t#*:}
    filters='' flags=''
    for word in ${filter//,/ }; do
      if [[ $word == --* ]]; then flags+=" $word"; else filters+=" $word"; fi
    done
    filters=${filters# } flags=${flags# }
    filter=${filters// /,}
    exe=$(lane_executable "$target")
    [[ -n $exe ]] || die "no test executable for $target"
    visible_path "the test executable" "$exe"
    [[ -x $exe ]] || die "the test executable $exe for $target is not there"
    name=$target${filter:+-${filter%%,*}}
    i=1
    while [[ -n ${filters_of[$name]+set} ]]; do
      i=$((i + 1))
      name=$target${filter:+-${filter%%,*}}-$i
    done
    filters_of[$name]=$filters
    plan_names+=("$name")
    echo "$name @LIMIT@ $exe $filters $flags --test-threads=$threads $(lane_var ARGS '')" >>"$run/plan"
  done
}
lane_executable() { # test target → its freshly built executable
  python3 - "$lane/build.json" "$1" <<'EOF'
import json, sys
found = None
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == sys.argv[2] \
            and "test" in m["target"]["kind"] and m.get("executable"):
        found = m["executable"]
print(found or "")
EOF
}

# --- time limits -------------------------------------------------------------
# All multiplied by a speed factor measured just before boot (this machine's
# CPU speed against the one the lanes were tuned on, and how busy it is:
# qemu's two vCPU threads share it with whatever else runs; at least 1, at
# most 8), so that a slow or loaded machine gets more time and a test that
# runs out of it fails by name (rc 124), never silently.
speed() { # → "factor (details)"
  python3 - <<'EOF'
import os, statistics, time
def bench():
    t, x = time.perf_counter(), 0
    for i in range(10_000_000):
        x += i * i
    return time.perf_counter() - t
REFERENCE = 0.30  # seconds, on the idle 2-core machine the lane was tuned on
cpu = statistics.median(bench() for _ in range(3)) / REFERENCE
cpus = os.cpu_count() or 1
load = os.getloadavg()[0]
busy = (load + 2) / cpus  # qemu's two vCPU threads among what runs already
factor = min(8.0, max(1.0, cpu, busy))
print(f"{factor:.2f} (cpu {cpu:.2f}, load {load:.2f} on {cpus} cpus)")
EOF
}
scaled() { # seconds → seconds × the speed factor, rounded up
  awk -v s="$1" -v f="$scale" 'BEGIN { v = s * f; if (v != int(v)) v = int(v) + 1; print v }'
}
# scale, test_limit, timeout_secs (the whole VM's); the plan gets its limit.
lane_limits() {
  local lines
  if [[ -n $(lane_var SCALE '') ]]; then
    scale=$(lane_var SCALE '')
    scale_why="(${lane_env}_SCALE)"
  else
    read -r scale scale_why < <(speed) || die "cannot measure the machine's speed"
  fi
  lines=${#plan_names[@]}
  test_limit=$(scaled "$(lane_var TEST_TIMEOUT 600)")
  timeout_secs=$(scaled "$(lane_var TIMEOUT $((1500 + 300 * (lines > 5 ? lines - 5 : 0))))")
  max_secs=$(lane_var MAX_SECONDS 4200)
  [[ $test_limit =~ ^[0-9]+$ && $test_limit -gt 0 && $timeout_secs =~ ^[0-9]+$ && $timeout_secs -gt 0 &&
    $max_secs =~ ^[0-9]+$ && $max_secs -gt 0 ]] ||
    die "bad time limits: check ${lane_env}_TEST_TIMEOUT, ${lane_env}_TIMEOUT, ${lane_env}_SCALE and ${lane_env}_MAX_SECONDS"
  ((timeout_secs <= max_secs)) || timeout_secs=$max_secs
  ((test_limit <= timeout_secs)) || test_limit=$timeout_secs
  sed -i "s/ @LIMIT@ / $test_limit /" "$run/plan"
  say "speed factor $scale $scale_why: ${test_limit}s for each of the $lines test targets, ${timeout_secs}s for the VM"
}

# --- the report --------------------------------------------------------------
# No early exit from here on (errexit off): every plan line gets its verdict,
# by name, and the exit status is 1 when any failed.
failed=()
passed=0
fail() { # name, why
  say "FAILED $1: $2"
  failed+=("$1")
}
show() { # name, lines → indented under the name
  local line
  [[ -z $2 ]] || while IFS= read -r line; do printf '  %s | %s\n' "$1" "$line"; done <<<"$2"
}
lane_qemu_said() { # qemu's exit status
  if (($1 == 124)); then
    say "the VM ran out of its ${timeout_secs}s and was stopped"
  elif (($1 != 0)); then
    say "qemu exited with $1"
  fi
}
# One verdict for each plan line: ok, or FAILED with why (timed out, failed,
# never finished, ran no test, a filter that ran nothing).
lane_verdicts() { # qemu's exit status, seconds the VM took, the runner's name
  local qemu_rc=$1 vm_secs=$2 runner=$3 name log rc secs limit results summary ran unmatched filter
  for name in "${plan_names[@]}"; do
    log=$run/$name.log
    rc='' secs='' limit=''
    [[ -s $run/$name.rc ]] && read -r rc secs limit <"$run/$name.rc"
    if [[ -z $rc ]]; then
      fail "$name" "never finished (qemu exit $qemu_rc after ${vm_secs}s; serial console in $lane/console.log)"
      [[ -e $log ]] && show "$name" "$(tail -n 40 "$log")"
      continue
    fi
    # "test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 9 filtered out; finished in 4.20s"
    results=$(grep -a -E '^test result:' "$log" 2>/dev/null)
    summary=$(tail -n 1 <<<"$results")
    ran=$(awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^(passed|failed);$/) n += $(i - 1) } END { print n + 0 }' <<<"$results")
    # Each filter has to have run a test: "test NAME ... ok" lines.
    unmatched=()
    for filter in ${filters_of[$name]}; do
      grep -a -E '^test ' "$log" 2>/dev/null | grep -v -E '^test result:' | grep -q -F -- "$filter" || unmatched+=("$filter")
    done
    if [[ $rc == 124 ]]; then
      fail "$name" "timed out after ${secs}s (limit ${limit}s) ${summary}"
      show "$name" "$(grep -a -E "^test .* \\.\\.\\. |panicked at|^$runner:" "$log" 2>/dev/null | tail -n 20)"
    elif [[ $rc != 0 ]]; then
      fail "$name" "exit $rc after ${secs}s ${summary}"
      show "$name" "$(grep -a -E "^$runner:|^test .* FAILED\$|panicked at" "$log" 2>/dev/null)"
    elif [[ -z $summary ]]; then
      fail "$name" "ran no test (no 'test result:' line in its log; exit 0 after ${secs}s)"
      show "$name" "$(tail -n 20 "$log" 2>/dev/null)"
    elif ((ran == 0)); then
      fail "$name" "ran no test (${summary})"
    elif ((${#unmatched[@]})); then
      fail "$name" "ran no test for ${unmatched[*]} (${summary})"
    else
      say "ok     $name (${secs}s) ${summary}"
      passed=$((passed + 1))
      continue
    fi
    say "full log: $log"
  done
}
# Whether the VM got through its plan, the time taken, and the exit status.
lane_close() { # seconds the VM took, the console lines worth showing (an ERE)
  if [[ ! -e $run/done ]]; then
    say "the VM did not finish its plan (serial console in $lane/console.log):"
    grep -a -E "$2" "$lane/console.log" 2>/dev/null | tail -n 20 | sed 's/^/  console | /'
    ((${#failed[@]})) || failed+=("(the VM)")
  fi
  say "VM $1s, lane $(($(date +%s) - started))s in all"
  if ((${#failed[@]})); then
    say "FAILED: ${failed[*]} ($passed of ${#plan_names[@]} passed)"
    exit 1
  fi
  say "all ${#plan_names[@]} passed"
  [[ -n $(lane_var KEEP '') ]] || rm -f "$run"/*.log
  exit 0
}
