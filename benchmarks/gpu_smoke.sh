#!/usr/bin/env bash
# The first run on a GPU machine: every GPU path of trainperf once, in one database, then a
# checklist of what ran, what failed and what was absent (and why).
#
#   benchmarks/gpu_smoke.sh [DB]          # default DB: gpu-smoke.db (a fresh one each run)
#   benchmarks/gpu_smoke.sh --list        # print the steps, run nothing
#   benchmarks/gpu_smoke.sh --only REGEX  # only the steps whose names match (grep -E)
#
# Paths: a zoo case in fp32, tf32, bf16 and fp16; channels-last; torch.compile; DDP and
# FSDP2 over all visible GPUs; a JAX case (when jax[cuda] is installed); micro gemm (with
# fp8 on Hopper), conv, memory, p2p (2+ GPUs) and collective; a profile; energy (read from
# the results: NVML's counter); a largest-batch search; a Llama case at 8,192 tokens. Each
# step has its own time limit; the whole script stays under 10 minutes on one H100.
# Needs trainperf installed (TRAINPERF, default .venv/bin/trainperf, then `trainperf`).
set -u

TRAINPERF=${TRAINPERF:-}
if [ -z "$TRAINPERF" ]; then
    if [ -x .venv/bin/trainperf ]; then TRAINPERF=.venv/bin/trainperf; else TRAINPERF=trainperf; fi
fi
LIST=0
DB=gpu-smoke.db
ONLY=""
while [ $# -gt 0 ]; do
    case "$1" in
        --list) LIST=1 ;;
        --only) ONLY=${2:?--only needs a pattern}; shift ;;
        -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
        *) DB=$1 ;;
    esac
    shift
done

GPUS=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
[ "$GPUS" -ge 1 ] 2>/dev/null || GPUS=0
RANKS=$(( GPUS > 0 ? GPUS : 1 ))  # every visible GPU (one, to list the steps without any)
OUT=$(mktemp -d "${TMPDIR:-/tmp}/trainperf-smoke.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
STEPS=()   # name|limit seconds|condition|command (run with the database appended)

step() { STEPS+=("$1|$2|$3|$4"); }

CASE="run --runs 1 --steps fixed:2:6 --device cuda --json"
step "doctor" 60 gpu "doctor --strict --json"
step "case resnet50 fp32" 120 gpu "$CASE -m resnet50 -b 64 --precision fp32"
step "case resnet50 tf32" 90 gpu "$CASE -m resnet50 -b 64 --precision tf32"
step "case resnet50 bf16" 90 gpu "$CASE -m resnet50 -b 128 --precision bf16"
step "case resnet50 fp16" 90 gpu "$CASE -m resnet50 -b 128 --precision fp16"
step "channels-last" 90 gpu "$CASE -m resnet50 -b 128 --precision bf16 --channels-last"
step "torch.compile" 240 gpu "$CASE -m resnet18 -b 128 --precision bf16 --compile"
step "ddp x$RANKS" 150 gpu "$CASE -m resnet50 -b 64 --precision bf16 --devices $RANKS --parallel ddp"
step "fsdp2 x$RANKS" 150 gpu "$CASE -m llama3.2-1b -b 1 --seq-len 2048 --precision bf16 --devices $RANKS --parallel fsdp"
step "jax" 180 jax "$CASE -m resnet50 -b 64 --precision bf16 --framework jax"
step "llama 8192 tokens" 180 gpu "$CASE -m llama3.2-1b -b 1 --seq-len 8192 --precision bf16"
step "micro gemm" 120 gpu "micro gemm --dtype fp32,tf32,bf16,fp8 --shapes square --limit 4 --device cuda --json"
step "micro conv" 90 gpu "micro conv --dtype bf16 --model resnet50 --limit 6 --device cuda --json"
step "micro memory" 60 gpu "micro memory --device cuda --json"
step "micro p2p" 120 two "micro p2p --bytes 64M --json"
step "micro collective" 120 gpu "micro collective --devices $RANKS --ops all_reduce,all_gather --max-bytes 256M --device cuda --json"
step "profile" 120 gpu "profile resnet50 -b 64 --precision bf16 --device cuda --steps fixed:3:5 --json"
step "profile ddp x$RANKS" 150 gpu "profile resnet50 -b 64 --precision bf16 --device cuda --devices $RANKS --parallel ddp --steps fixed:3:5 --json"
step "maxbatch" 180 gpu "maxbatch resnet18 --precision bf16 --image-size 112 --limit 2048 --device cuda --json"

if [ "$LIST" = 1 ]; then
    for s in "${STEPS[@]}"; do
        IFS='|' read -r name limit cond cmd <<<"$s"
        if [ -n "$ONLY" ] && ! grep -qE -- "$ONLY" <<<"$name"; then continue; fi
        printf '%-22s %4ss  %-4s trainperf %s --db %s\n' "$name" "$limit" "$cond" "$cmd" "$DB"
    done
    exit 0
fi

rm -f "$DB" "$DB-wal" "$DB-shm"
PY=$(dirname "$(command -v "$TRAINPERF")")/python
HAVE_JAX=$(XLA_PYTHON_CLIENT_PREALLOCATE=false "$PY" -c \
    'import jax; print(int(any(d.platform == "gpu" for d in jax.devices())))' 2>/dev/null || echo 0)
CHECKLIST=()
started=$(date +%s)
for s in "${STEPS[@]}"; do
    IFS='|' read -r name limit cond cmd <<<"$s"
    if [ -n "$ONLY" ] && ! grep -qE -- "$ONLY" <<<"$name"; then
        continue
    fi
    why=""
    [ "$cond" != jax ] && [ "$GPUS" -lt 1 ] && why="no GPU visible to nvidia-smi"
    [ "$cond" = two ] && [ "$GPUS" -lt 2 ] && why="needs 2 GPUs, $GPUS visible"
    [ "$cond" = jax ] && [ "$HAVE_JAX" = 0 ] && why="no jax[cuda] installed (pip install 'jax[cuda12]')"
    if [ -n "$why" ]; then
        CHECKLIST+=("absent  $name: $why")
        continue
    fi
    echo "== $name: trainperf $cmd --db $DB" >&2
    t0=$(date +%s)
    # shellcheck disable=SC2086  # the command line is split on purpose
    timeout "$limit" "$TRAINPERF" $cmd --db "$DB" >"$OUT/out.json" 2>"$OUT/err.txt"
    rc=$?
    took=$(( $(date +%s) - t0 ))
    if [ "$rc" = 0 ]; then
        CHECKLIST+=("ok      $name (${took} s)")
    else
        last=$(tail -n 1 "$OUT/err.txt" | cut -c1-120)
        [ "$rc" = 124 ] && last="killed after ${limit} s"
        sed 's/^/    /' <(tail -n 12 "$OUT/err.txt") >&2  # the failure's own words, in the log
        CHECKLIST+=("FAILED  $name (exit $rc, ${took} s): $last")
    fi
done

# Energy and the attention kernels, read back from the stored results.
energy=$("$TRAINPERF" results --db "$DB" --json 2>/dev/null | python3 -c '
import json, sys
rows = json.load(sys.stdin)["results"]
joules = [r["metrics"].get("energy_j_total") for r in rows if r["status"] == "ok"]
kernels = sorted({r["metrics"].get("attention_backend") for r in rows} - {None})
read = sum(j is not None for j in joules)
reasons = {r["metrics"].get("energy_absent_reason") for r in rows if r["status"] == "ok"} - {None}
print(f"{read} of {len(joules)} ok results with NVML energy" + (f" ({sorted(reasons)[0]})" if reasons else ""))
print("attention kernels: " + (", ".join(kernels) or "none recorded"))
' 2>/dev/null)

echo
echo "trainperf GPU smoke test on $GPUS GPU(s): $DB, $(( $(date +%s) - started )) s"
printf '  %s\n' "${CHECKLIST[@]}"
[ -n "$energy" ] && printf '  %s\n' "$energy"
"$TRAINPERF" results --db "$DB" 2>/dev/null
printf '%s\n' "${CHECKLIST[@]}" | grep -q '^FAILED' && exit 1
exit 0
