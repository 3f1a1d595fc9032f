#!/bin/bash
# Whole-suite A/A: record RECORDINGS runs of one framework's performance suite into an empty baseline
# folder, then judge N more runs of the same code against them; a failed A/A run is a false alarm.
# Run it alone on the machine, from the repository root, with that framework's tox environment built:
#   ENV=.tox/torch N=5 bash bench/aa_suite.sh /tmp/aa-out
# Then: python bench/aa_margins.py /tmp/aa-out
set -u
OUT=${1:?usage: bench/aa_suite.sh OUTPUT_FOLDER}
ENV=${ENV:-.tox/torch}; N=${N:-5}; RECORDINGS=${RECORDINGS:-3}
BL=$OUT/baselines
rm -rf "$OUT"; mkdir -p "$OUT"
export PATH=$PWD/$ENV/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
run() {  # name, extra pytest arguments...
  local name=$1 start; shift; start=$(date +%s)
  pytest perf_tests -p no:cacheprovider --baseline-dir "$BL" --junitxml="$OUT/$name.xml" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  echo "$name exit $rc $(( $(date +%s) - start )) s: $(grep -o '[0-9]* metrics compared.*' "$OUT/$name.log" | head -1)" \
    >> "$OUT/summary.txt"
}
for i in $(seq 1 "$RECORDINGS"); do run "record-$i" --update-baselines; done
for i in $(seq 1 "$N"); do run "aa-$i"; done
