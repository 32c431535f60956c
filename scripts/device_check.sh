#!/usr/bin/env bash
# The GPU run as one command: the device tests, then the synthetic GPU benchmark (docs/gpu.md).
#
#   bash scripts/device_check.sh [--out DIR]   on a CUDA machine: tests/test_cuda.py (pytest, or
#                                              tests/cuda_checks.py where pytest is missing), then
#                                              `python -m bench.gpu` -> DIR/gpu.md + gpu.json (default docs/),
#                                              then the tree verify cost v(N) in float32 and bfloat16
#                                              (`python -m bench.verify_cost`, a section of gpu.md)
#   bash scripts/device_check.sh --cpu-smoke   the same code on the CPU with tiny shapes, in under a
#                                              minute; the report goes to a new temporary folder
#   bash scripts/device_check.sh --prepare     (here, with a package registry) fetch the pinned
#                                              transformers wheel into .whl/ for a GPU machine whose
#                                              own transformers is another version
#
# The GPU machine needs only Python with torch and transformers (pytest optional) and this
# repository's files: no internet, no model hub, no model file (the models are random weights
# built from configs), nothing from .venv. If a folder .whl/ with wheels came along, they are
# installed (no index, no dependencies) into a temporary folder first and put on PYTHONPATH.
# Designed to finish within 10 minutes on one GPU: the tests are cut off at 180 s, the benchmark
# skips what is left after 200 s, and the verify cost is cut off at 90 s. Exit status: 0 all
# passed, 1 a test or a benchmark failed, 2 no CUDA device (use --cpu-smoke), 3 this Python cannot
# import specviz.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

mode=gpu
out=""
use_pytest=auto
while [ $# -gt 0 ]; do
  case "$1" in
    --cpu-smoke) mode=cpu ;;
    --prepare) mode=prepare ;;
    --out) out="$2"; shift ;;
    --out=*) out="${1#--out=}" ;;
    --no-pytest) use_pytest=no ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "device_check: unknown argument $1 (see --help)" >&2; exit 64 ;;
  esac
  shift
done

if [ -z "${PYTHON:-}" ]; then
  if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
export PYTHONUNBUFFERED=1
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
say() { echo "[device_check] $*"; }

if [ "$mode" = prepare ]; then
  want=$(sed -n 's/^transformers==\([^ ]*\).*/\1/p' requirements.txt)
  mkdir -p .whl
  if [ -d .git ] && ! grep -qx '/.whl/' .git/info/exclude 2>/dev/null; then echo '/.whl/' >> .git/info/exclude; fi
  say "fetching transformers==$want (pure Python) into .whl/; carry .whl with the run"
  exec "$PYTHON" -m pip download -q --no-deps --only-binary=:all: -d .whl "transformers==$want"
fi

if [ "$mode" = gpu ] && compgen -G ".whl/*.whl" >/dev/null; then
  site=$(mktemp -d /tmp/specviz-site.XXXXXX)
  trap 'rm -rf "$site"' EXIT
  say "installing the carried wheels into $site: $(cd .whl && ls *.whl | tr '\n' ' ')"
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl || exit 3
  export PYTHONPATH="$site:$PYTHONPATH"
fi

# ---------------------------------------------------------------- preflight
"$PYTHON" - "$mode" <<'EOF'
import importlib.util, platform, sys
mode = sys.argv[1]
try:
    import torch, transformers
except ImportError as exc:
    sys.exit(f"[device_check] this Python ({sys.executable}) lacks {exc.name}: it needs torch and transformers")
pins = {}
for line in open("requirements.txt"):
    if "==" in line and not line.startswith("#"):
        name, version = line.split("#")[0].strip().split("==")
        pins[name] = version
print(f"[device_check] Python {platform.python_version()} ({sys.executable}); torch {torch.__version__} "
      f"(pinned {pins.get('torch')}); transformers {transformers.__version__} (pinned {pins.get('transformers')})")
if torch.cuda.is_available():
    props = torch.cuda.get_device_properties(0)
    print(f"[device_check] CUDA {torch.version.cuda}: {props.name}, {props.total_memory / 2**30:.0f} GiB")
elif mode == "gpu":
    print("[device_check] torch sees no CUDA device: this is not a GPU machine. "
          "`bash scripts/device_check.sh --cpu-smoke` runs the same code on the CPU.")
    sys.exit(2)
try:
    import specviz  # noqa: F401
    from specviz.kv import create_cache  # noqa: F401  (the transformers cache API specviz subclasses)
except Exception as exc:  # noqa: BLE001
    print(f"[device_check] specviz does not import with this transformers: {type(exc).__name__}: {exc}\n"
          "[device_check] fix: `bash scripts/device_check.sh --prepare` on a machine with a package registry, "
          "then carry .whl/ along (the pinned transformers is installed from it, without the network)")
    sys.exit(3)
print(f"[device_check] pytest: {'present' if importlib.util.find_spec('pytest') else 'missing (the plain runner is used)'}")
EOF
status=$?
[ $status -eq 0 ] || exit $status

if [ "$mode" = cpu ]; then
  export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  out=${out:-$(mktemp -d /tmp/specviz-gpu-smoke.XXXXXX)}
else
  out=${out:-docs}
fi
mkdir -p "$out"
log="$out/device_tests.log"
[ "$out" != docs ] || log=$(mktemp /tmp/specviz-device-tests.XXXXXX.log)  # only the report goes into docs/
start=$SECONDS

# ---------------------------------------------------------------- 1. device tests
if [ "$mode" = cpu ]; then
  say "tests: tests/cuda_checks.py --device cpu --quick (the plain runner, with the checks on the CPU)"
  timeout 120 "$PYTHON" tests/cuda_checks.py --device cpu --quick --json "$out/device_tests.json" 2>&1 | tee "$log"
  tests_rc=${PIPESTATUS[0]}
elif [ "$use_pytest" = auto ] && "$PYTHON" -c "import pytest" 2>/dev/null; then
  say "tests: pytest tests/test_cuda.py and the CUDA parity test of tests/test_kv_parity.py"
  timeout 180 "$PYTHON" -m pytest -q -p no:cacheprovider -o addopts="" -rfEs \
    tests/test_cuda.py "tests/test_kv_parity.py::test_parity_on_cuda" 2>&1 | tee "$log"
  tests_rc=${PIPESTATUS[0]}
else
  say "tests: pytest is missing here; running the same checks with tests/cuda_checks.py --device cuda"
  timeout 180 "$PYTHON" tests/cuda_checks.py --device cuda --json "$out/device_tests.json" 2>&1 | tee "$log"
  tests_rc=${PIPESTATUS[0]}
fi
summary=$(grep -E '[0-9]+ (passed|failed)' "$log" | tail -1 | sed -E 's/^=+ //; s/ =+$//')
[ $tests_rc -eq 124 ] && summary="cut off after 180 s: ${summary:-nothing finished}"
[ -n "$summary" ] || summary="no result (exit status $tests_rc)"
say "tests: $summary (exit status $tests_rc, $((SECONDS - start)) s)"

# ---------------------------------------------------------------- 2. the synthetic benchmark
bench_start=$SECONDS
if [ "$mode" = cpu ]; then
  timeout 120 "$PYTHON" -m bench.gpu --tiny --device cpu --out "$out" --tests-summary "$summary (CPU, quick)"
else
  timeout 260 "$PYTHON" -m bench.gpu --device cuda --out "$out" --budget-s 200 --tests-summary "$summary"
fi
bench_rc=$?
say "benchmark: exit status $bench_rc ($((SECONDS - bench_start)) s); total $((SECONDS - start)) s"

# ---------------------------------------------------------------- 3. verify cost v(N), float32 and bfloat16
# One target forward over N = 1..32 new tokens under the engine's tree mask, both dtypes interleaved
# per round (bench/verify_cost.py); its table goes into gpu.md / gpu.json as its own section.
vc_start=$SECONDS
if [ "$mode" = cpu ]; then
  timeout 90 "$PYTHON" -m bench.verify_cost --shape tiny --device cpu --threads 1 --reps 3 --min-reps 1 \
    --report gpu --into "$out"
else
  timeout 90 "$PYTHON" -m bench.verify_cost --shape smollm2-1.7b --device cuda --past 512 --reps 30 \
    --budget-s 40 --report gpu --into "$out"
fi
vc_rc=$?
[ -f "$out/gpu.md" ] || vc_rc=1  # its section belongs in the report bench.gpu wrote
say "verify cost: exit status $vc_rc ($((SECONDS - vc_start)) s); total $((SECONDS - start)) s"
say "report: $out/gpu.md, $out/gpu.json; test log: $log"
if [ "$mode" = cpu ]; then
  say "this was a CPU smoke: nothing in it is a GPU measurement, and docs/ was left alone"
fi
[ $tests_rc -eq 0 ] && [ $bench_rc -eq 0 ] && [ $vc_rc -eq 0 ] || exit 1
