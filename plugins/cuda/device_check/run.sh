#!/usr/bin/env bash
# The flcuda device check as one command, run from anywhere in the checkout:
#
#   bash plugins/cuda/device_check/run.sh [device_check.py run options]
#
# Builds the bridge and the plugin into a pip --target directory (the
# machine's python3 and its torch stay untouched), then runs every stage of
# device_check.py within its time budget. Results: $OUT (default
# ./device_check_out): device_check.json, device_check.md, the logs, the
# conformance summary. Wheels in <repo>/.whl (e.g. expecttest, which the
# conformance suite's OpInfo sweep imports) are installed into the same
# directory first, for machines without a package index.
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../../.." && pwd)"
OUT="${OUT:-$PWD/device_check_out}"
PY="${PYTHON:-python3}"
SITE="${FLCUDA_SITE:-${TMPDIR:-/tmp}/flcuda_site}"
mkdir -p "$OUT" "$SITE"
export OUT PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if compgen -G "$REPO/.whl/*.whl" > /dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$SITE" "$REPO"/.whl/*.whl \
    || echo "installing the carried wheels failed; going on without them"
fi
"$PY" "$HERE/device_check.py" run --out "$OUT" --site "$SITE" "$@" 2>&1 | tee "$OUT/run.log"
exit "${PIPESTATUS[0]}"
