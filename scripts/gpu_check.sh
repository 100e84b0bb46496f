#!/usr/bin/env bash
# On a GPU node: the checks CI cannot run (it has no GPU), with a log per part in one folder.
#   1. the GPU-marked tests (tests/gpu; GPU_CHECK_TESTS picks some, e.g. "tests/gpu/test_x.py");
#   2. chapters 00-06 and 09 (GPU_CHECK_CHAPTERS picks some) in quick mode under nbval as CI runs
#      them, each notebook in its own pytest, all at once on the node's cores; their logs are
#      packed into chapters.tgz;
#   3. alone on the GPU, the benchmarks with GPU goals (GPU_CHECK_BENCH, default all three).
# Usage: bash scripts/gpu_check.sh [LOG_DIR]   (default gpu-check/; PYTHON picks the interpreter)
# Each part has a time limit in seconds (GPU_CHECK_TESTS_S, GPU_CHECK_NB_S, GPU_CHECK_BENCH_S)
# so that the whole ends inside a short lease; what a part printed before its limit stays in its
# log, a notebook cell stuck longer than GPU_CHECK_CELL_S fails with nbval's timeout, and every
# process a part started (Jupyter kernels and ranks too) is ended before the next part starts.
set -u
out=${1:-gpu-check}
py=${PYTHON:-python3}
mkdir -p "$out"
export HPCLAB_QUICK=1 CI=true PLOTLY_RENDERER=plotly_mimetype PYTHONUNBUFFERED=1
tests=${GPU_CHECK_TESTS:-tests/gpu}
chapters=${GPU_CHECK_CHAPTERS:-$(echo notebooks/0[0-6]_*.ipynb notebooks/09_*.ipynb)}
benches=${GPU_CHECK_BENCH-ddp_gpu topology gemm}  # set and empty: none
tag="gpu-check-$$"

reap() {  # every process that inherited this run's tag, however it detached
    local e p
    for e in /proc/[0-9]*/environ; do
        p=${e#/proc/}
        p=${p%/environ}
        grep -qz "^GPU_CHECK_TAG=$tag$" "$e" 2>/dev/null && kill -9 "$p" 2>/dev/null
    done
    return 0
}

since() { echo "$(($(date +%s) - $1)) s"; }

{
    date -u
    nvidia-smi -L || echo "nvidia-smi: not found"
    "$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda,
        'devices', torch.cuda.device_count(),
        torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA device')"
    echo "cores: $(nproc)"
} >"$out/env.txt" 2>&1

t0=$(date +%s)
# shellcheck disable=SC2086  # $tests: several paths
GPU_CHECK_TAG=$tag timeout -k 5 "${GPU_CHECK_TESTS_S:-200}" "$py" -m pytest $tests -m gpu \
    -p no:cacheprovider -rA --timeout 150 --durations=15 >"$out/gpu_tests.log" 2>&1
echo "gpu tests: exit $? after $(since "$t0")" >>"$out/env.txt"
reap

t0=$(date +%s)
mkdir -p "$out/chapters"
for nb in $chapters; do
    name=$(basename "$nb" .ipynb)
    (
        GPU_CHECK_TAG=$tag timeout -k 5 "${GPU_CHECK_NB_S:-240}" "$py" -m pytest "$nb" \
            -p no:cacheprovider -v --tb=short --durations=5 --nbval-lax \
            --nbval-sanitize-with tests/sanitize.cfg --nbval-cell-timeout "${GPU_CHECK_CELL_S:-150}" \
            >"$out/chapters/$name.log" 2>&1
        echo "$name: exit $? after $(since "$t0")" >>"$out/chapters/summary.txt"
    ) &
done
wait
reap
sort "$out/chapters/summary.txt" >>"$out/env.txt"
tar -czf "$out/chapters.tgz" -C "$out" chapters && rm -rf "$out/chapters"

for bench in $benches; do
    t0=$(date +%s)
    # as documented: no arguments, not in quick mode (gemm runs its chapter quick itself)
    GPU_CHECK_TAG=$tag timeout -k 5 "${GPU_CHECK_BENCH_S:-90}" env -u HPCLAB_QUICK -u CI \
        "$py" "benchmarks/$bench.py" \
        >"$out/bench_$bench.log" 2>&1
    echo "benchmark $bench: exit $? after $(since "$t0")" >>"$out/env.txt"
    reap
done
cat "$out/env.txt"
