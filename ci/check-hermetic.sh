#!/usr/bin/env bash
# The proof that the tests leave the machine as they found it: `bash .ci/run` in this repository (and in
# every other clone named, all at once), with the user's ~/.cache/kernel-grader and the daemons the setup
# may start (dockerd, containerd, slurmctld, slurmd, munged) listed before and after. Fails if any run fails
# or if either listing changed; prints the difference.
#
#   bash ci/check-hermetic.sh                      # one run, in this clone
#   bash ci/check-hermetic.sh /tmp/clone-b         # this clone and /tmp/clone-b at once
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
clones=("$here" "$@")
cache=${HOME:?}/.cache/kernel-grader
out=$(mktemp -d "${TMPDIR:-/tmp}/check-hermetic.XXXXXX")

snapshot() {
  echo "# $cache"
  if [ -d "$cache" ]; then
    (cd "$cache" && find . -printf '%y %M %s %T@ %p\n' | sort -k5)
  else
    echo "(absent)"
  fi
  echo "# daemons"
  local daemon
  for daemon in dockerd containerd slurmctld slurmd munged; do
    pgrep -x "$daemon" | sed "s/^/$daemon /"
  done | sort
}

snapshot > "$out/before"
pids=()
for i in "${!clones[@]}"; do
  clone=${clones[$i]}
  log="$out/run-$i.log"
  echo "== bash $clone/.ci/run  (log: $log)"
  bash "$clone/.ci/run" > "$log" 2>&1 &
  pids+=($!)
done
failed=0
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then
    echo "${clones[$i]}: .ci/run passed: $(grep -E '(passed|failed|error).* in [0-9.]+s' "$out/run-$i.log" | tail -n 1)"
  else
    echo "${clones[$i]}: .ci/run FAILED; the log's end:"
    tail -n 30 "$out/run-$i.log"
    failed=1
  fi
done
snapshot > "$out/after"

if ! diff -u "$out/before" "$out/after"; then
  echo "NOT HERMETIC: the user's cache or the running daemons changed (diff above; listings in $out)"
  exit 1
fi
for clone in "${clones[@]}"; do
  if git -C "$clone" status --porcelain --ignored -- grades.sqlite grader-batch 2>/dev/null | grep -q .; then
    echo "NOT HERMETIC: the tests wrote a default store or batch folder into $clone"
    failed=1
  fi
done
[ "$failed" -eq 0 ] && echo "hermetic: $cache and the daemons are as they were; every run passed (logs in $out)"
exit "$failed"
