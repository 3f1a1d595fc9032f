#!/usr/bin/env bash
# Does a child's peak host memory depend on where its tox environment lives? (#45)
#
#   bash bench/memory_by_checkout.sh ROUNDS CHECKOUT_A CHECKOUT_B
#
# Runs the torch accuracy test (one child, about 10 s) in each checkout's own tox torch environment,
# alternating A and B ROUNDS times under a bare environment (env -i), and prints each run's peak host
# memory from its JUnit report: a difference between the checkouts shows as one side's values above
# the other's, noise as both sides spread alike. Each checkout needs its .tox/torch (tox -e torch).
set -euo pipefail
rounds="$1"; shift
test="perf_tests/test_accuracy.py::test_core_reaches_stated_accuracy_on_suite_data[torch]"
out="$(mktemp -d "${TMPDIR:-/tmp}/memory-by-checkout-XXXXXX")"
for i in $(seq 1 "$rounds"); do
  for side in "$@"; do
    name="$(basename "$side")-$i"
    (cd "$side" && env -i HOME="$HOME" PATH="$side/.tox/torch/bin:/usr/bin:/bin" PYTHONDONTWRITEBYTECODE=1 \
      PYTHONUNBUFFERED=1 pytest "$test" -p no:cacheprovider -q --junitxml="$out/$name.xml" >"$out/$name.log" 2>&1) || true
    value="$(grep -o 'train_and_eval.peak_host_memory" value="[^"]*' "$out/$name.xml" | head -1 | sed 's/.*value="//')"
    echo "$side run $i: peak_host_memory ${value:-missing (see $out/$name.log)}"
  done
done
