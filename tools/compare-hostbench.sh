#!/bin/sh
# Compare dmasim's host measurement with the plain-C reference loop, run after run.
#
# Usage: tools/compare-hostbench.sh [RUNS] [-- hostbench options]
#   default: 3 runs of --buffer 10M --entry 4K --iterations 50 --instruction clflushopt
# For each run it prints both reductions (100 * (1 - batched / per_entry), medians) and their
# relative difference; the check is that dmasim's reduction agrees with the C loop's within 15 %
# (relative) and batched is faster in both. Exit 1 if any run disagrees, 2 on a setup problem.
set -eu
cd "$(dirname "$0")/.."
runs=${1:-3}
[ $# -gt 0 ] && shift
[ "${1:-}" = "--" ] && shift
[ $# -eq 0 ] && set -- --buffer 10M --entry 4K --iterations 50 --instruction clflushopt

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -Wall -o "$tmp/hostbench_ref" tools/hostbench_ref.c || exit 2
cargo build --quiet --release || exit 2
rust="target/release/dmasim hostbench --format json"

fail=0
i=1
while [ "$i" -le "$runs" ]; do
	"$tmp/hostbench_ref" "$@" >"$tmp/c.json" || exit 2
	$rust "$@" >"$tmp/rust.json" || exit 2
	python3 - "$tmp/c.json" "$tmp/rust.json" "$i" <<'PY' || fail=1
import json, sys
c, r = (json.load(open(p)) for p in sys.argv[1:3])
def modes(x):
    return {m["mode"]: m["median_ns"] for m in x["modes"]}
mc, mr = modes(c), modes(r)
rel = abs(r["reduction_pct"] - c["reduction_pct"]) / abs(c["reduction_pct"]) * 100
ok = rel <= 15 and mc["batched"] < mc["per-entry"] and mr["batched"] < mr["per-entry"]
print(f"run {sys.argv[3]}: C per-entry {mc['per-entry']/1e3:.1f} us batched {mc['batched']/1e3:.1f} us "
      f"reduction {c['reduction_pct']:.1f} % | dmasim per-entry {mr['per-entry']/1e3:.1f} us "
      f"batched {mr['batched']/1e3:.1f} us reduction {r['reduction_pct']:.1f} % | "
      f"relative difference {rel:.1f} % {'ok' if ok else 'DISAGREE'}")
sys.exit(0 if ok else 1)
PY
	i=$((i + 1))
done
exit $fail
