#!/usr/bin/env bash
# The GPU checks in one run: the CUDA tests (serially), then the GPU targets, each step under
# its own time limit so that one slow step leaves the others their time. Logs and JSON rows go
# to OUT (default ./gpu_check), written as they are measured.
#
#   bash benchmarks/gpu_check.sh [TARGETS] [LARGE_N] [LARGE_MAXITER]
#   TARGETS: comma-separated targets of gpu_targets.py, each with its time limit in seconds
#   (default objective:100,float32:60,predict:60,svgp:120,exact:90; large has none by default)
set -u
OUT=${OUT:-gpu_check}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
TARGETS=${1:-objective:100,float32:60,predict:60,svgp:120,exact:90}
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $PY -c "import torch, sparsegp; print('torch', torch.__version__, 'sparsegp', sparsegp.__version__)"
  date -u; } 2>&1 | tee "$OUT/machine.txt"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  timeout "${TEST_SECONDS:-180}" $PY -m pytest -q -p no:cacheprovider tests/test_cuda.py 2>&1 \
    | tee "$OUT/test_cuda.txt"
fi
for spec in ${TARGETS//,/ }; do
  t=${spec%%:*}; limit=${spec#*:}; [ "$limit" = "$spec" ] && limit=300
  timeout "$limit" $PY benchmarks/gpu_targets.py --device cuda --only "$t" \
    --large-n "${2:-1000000}" --large-maxiter "${3:-100}" --out "$OUT/targets.jsonl" 2>&1 \
    | grep -v "^|" | tee -a "$OUT/targets.log"
  echo "[$t done $(date -u +%T)]"
done
echo; echo "| target | case | measured | goal | |"; echo "|---|---|---|---|---|"
[ -f "$OUT/targets.jsonl" ] && $PY - "$OUT/targets.jsonl" <<'PYEOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"| {r['target']} | {r['case']} | {r['measured']:.3g} {r['unit']} | {r['goal']:.3g} | "
          f"{'met' if r['met'] else 'NOT met'} | {r.get('error', '')}")
PYEOF
