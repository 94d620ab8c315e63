# shellcheck shell=sh
# The plan runner both VM lanes share, sourced inside the VM by
# scripts/vm-runner (the cgroup v2 lane's PID 1) and scripts/node-runner
# (the node lane's systemd unit): runs each test binary of the plan (see
# scripts/lane-common.sh) in a cgroup of its own, under its time limit, and
# writes `<name>.log` and `<name>.rc` beside the plan, then `done`.

# Whether `timeout` is there: without it the tests run without a time limit
# of their own (the runner says so in what the lane reports of the guest).
has_timeout=
command -v timeout >/dev/null 2>&1 && has_timeout=1

# Hands every controller of a cgroup v2 directory to its children.
delegate() { # cgroup directory
  while read -r controllers; do
    for controller in $controllers; do
      echo "+$controller" >"$1/cgroup.subtree_control" 2>/dev/null || true
    done
  done <"$1/cgroup.controllers"
}

run_plan() { # results directory (holding the plan), cgroup parent (delegated), the runner's name
  results=$1 parent=$2 runner=$3
  # Each plan line: NAME LIMIT_SECONDS EXECUTABLE [ARGS...]
  while read -r name limit exe args; do
    [ -n "$name" ] || continue
    log=$results/$name.log
    start=$(date +%s)
    if [ ! -f "$exe" ] || [ ! -x "$exe" ]; then
      echo "$runner: the test executable $exe is not there (or not executable) in the VM" >"$log"
      echo "127 0 $limit" >"$results/$name.rc"
      sync
      continue
    fi
    cgroup=$parent/$name
    mkdir -p "$cgroup"
    # SIGTERM at the limit, SIGKILL 30 s later; the test's cgroup goes after.
    # shellcheck disable=SC2086,SC2016 # ARGS are the test filter and harness flags; $$ is the inner sh's.
    if [ -n "$has_timeout" ]; then
      timeout -k 30 "$limit" sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cgroup" "$exe" $args >"$log" 2>&1 </dev/null
    else
      sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$cgroup" "$exe" $args >"$log" 2>&1 </dev/null
    fi
    rc=$?
    secs=$(($(date +%s) - start))
    if [ -n "$has_timeout" ] && { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && [ "$secs" -ge "$limit" ]; then
      echo "$runner: $name timed out after ${secs}s (limit ${limit}s)" >>"$log"
      rc=124
    fi
    # Whatever the test left running (daemons, monitors, containers) goes
    # before the next one starts.
    if [ -e "$cgroup/cgroup.kill" ]; then
      echo 1 >"$cgroup/cgroup.kill" 2>/dev/null || true
    fi
    echo "$rc $secs $limit" >"$results/$name.rc"
    sync
  done <"$results/plan"
  echo finished >"$results/done"
}
