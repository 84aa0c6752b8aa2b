#!/usr/bin/env bash
# Renders autoshard's HTML pages to the PNGs the README and
# docs/observability.md show (docs/img/plan.png, report.png, timeline.png), with
# Debian's headless Chromium, so a person can look at what the pages draw.
# A development script, not run by CI (Chromium is big: it is installed
# here when missing, or by scripts/setup.sh with AUTOSHARD_WITH_CHROMIUM=1).
#
#   tools/render_pages.sh [BUILD_DIR]      (default: build)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
cli="$build/autoshard"
[ -x "$cli" ] || { echo "render_pages.sh: no $cli; build autoshard first" >&2; exit 1; }

if ! command -v chromium >/dev/null; then
  sudo_cmd=""
  [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
    chromium fonts-dejavu-core
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export AUTOSHARD_HOME="$work/home"  # the default cpu cluster, not this machine's calibration

# Chromium's screenshot of the page's top WIDTHxHEIGHT CSS pixels.
shoot() {
  chromium --headless --disable-gpu --no-sandbox --hide-scrollbars --no-first-run \
    --user-data-dir="$work/profile" --window-size="$3" --screenshot="$2" "file://$1" \
    >"$work/chromium.log" 2>&1 || { cat "$work/chromium.log" >&2; exit 1; }
}

# The plan: a small GPT-2 on 2 x 3 devices (3 does not divide every
# dimension: uneven blocks show), priced on an A100 cluster.
"$cli" plan --model tiny --mesh data=2,model=3 --batch 8 --seq 64 --cluster a100-80g \
  --html "$work/plan.html" >/dev/null
shoot "$work/plan.html" "$root/docs/img/plan.png" 1330,1500

# Training curves: two short runs of the test model at two learning rates.
for lr in 3e-3 1e-2; do
  "$cli" train --model tiny --steps 60 --batch 8 --seq 32 --lr "$lr" --sample 0 --log "$work/lr=$lr.jsonl" \
    2>/dev/null
done
"$cli" report "$work/lr=3e-3.jsonl" "$work/lr=1e-2.jsonl" --html "$work/report.html"
shoot "$work/report.html" "$root/docs/img/report.png" 1330,820

# Timelines: one step of GPT-2 "mini" on model=2 as it ran and as the
# cost model predicts it (this machine's calibration, when there is one),
# drawn by tools/trace_picture.py (Perfetto itself is a web app).
args=(--model mini --mesh model=2 --batch 8 --seq 64)
"$cli" train "${args[@]}" --steps 3 --sample 0 --trace "$work/measured.json" --trace-steps 3 \
  >/dev/null 2>&1
"$cli" plan "${args[@]}" --predict --trace "$work/predicted.json" >/dev/null
python3 "$root/tools/trace_picture.py" "$work/measured.json" "$work/predicted.json" \
  "$work/timeline.html"
shoot "$work/timeline.html" "$root/docs/img/timeline.png" 1380,250

ls -l "$root/docs/img/plan.png" "$root/docs/img/report.png" "$root/docs/img/timeline.png"
