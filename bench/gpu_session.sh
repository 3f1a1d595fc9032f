#!/usr/bin/env bash
# One lent GPU session, as one command: record the torch GPU tests into the machine's baseline file and
# run the GPU tests that have never run on a GPU, each pytest run sized to the time left, so that a
# cut-off run loses only itself. Usage (device machine, repository root): bench/gpu_session.sh SECONDS
# Everything lands in $OUT: session.log (all output), the baseline file, the JUnit files.
set -u
budget=${1:-540}
out=${OUT:-/tmp/gpu-session}
mkdir -p "$out"
start=$(date +%s)
log="$out/session.log"

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH="/tmp/site:$PWD/src" PYTHONUNBUFFERED=1

# where the package is not installed (the device machine), load the plugin by name
plugin=(-p pytest_dlperf.plugin.hooks)
python3 -c "import importlib.metadata as m; m.distribution('pytest-dlperf')" 2>/dev/null && plugin=()

left() { echo $((budget - ($(date +%s) - start))); }

# step NAME MIN_SECONDS PYTEST-ARGS...: runs only if MIN_SECONDS are left, and is stopped 10 s before the end.
step() {
    local name=$1 need=$2
    shift 2
    local l
    l=$(left)
    if [ "$l" -lt "$need" ]; then
        echo "=== $name: not started, $l s left (needs about $need)" | tee -a "$log"
        return
    fi
    echo "=== $name: started at +$(($(date +%s) - start)) s, limit $((l - 10)) s" | tee -a "$log"
    timeout -k 5 $((l - 10)) python3 -m pytest "${plugin[@]}" -p no:cacheprovider -rA \
        --junitxml="$out/$name.xml" "$@" >>"$log" 2>&1
    echo "=== $name: rc $? at +$(($(date +%s) - start)) s" | tee -a "$log"
    cp baselines/gpu-*.json "$out/" 2>/dev/null
}

{
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem,power.limit \
        --format=csv
    python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda, torch.backends.cudnn.version())"
    nproc
} >>"$log" 2>&1

# The noise model now judges a GPU's device-bound figures on their own runs: judge ResNet-18 AMP with it.
step judged-resnet18-amp 90 perf_tests -m gpu -k "test_amp_fp16_is_at_least_1_8x_fp32_on_gpu and resnet18"
echo "=== done at +$(($(date +%s) - start)) s" | tee -a "$log"
tail -c 9000 "$log"
