#!/usr/bin/env bash
# softrdma next to its peers on loopback, in one sitting: alternated rounds,
# medians, paired ratios, CPU-seconds per GB. The measuring is in
# scripts/bench-vs-peers.py (its docstring lists the rows); this installs
# the peers and builds softrdma first.
#
#   scripts/bench-vs-peers.sh                  # ~10 minutes with ROUNDS=3
#   ROUNDS=5 DURATION=5 scripts/bench-vs-peers.sh
#   ONLY=lat,ucx scripts/bench-vs-peers.sh     # rows: lat bw cpu qps curve ucx samehost mpi
#   MARKDOWN=1 scripts/bench-vs-peers.sh       # also the table as markdown for README
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v ucx_perftest >/dev/null || need+=(ucx-utils)
command -v sockperf >/dev/null || need+=(sockperf)
command -v ib_write_bw >/dev/null || need+=(perftest)
command -v python3 >/dev/null || need+=(python3)
if ((${#need[@]})); then
  echo "installing ${need[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi
cargo build --release -q -p softrdma-cli -p softrdma-ibverbs -p softrdma-preload
cargo build --release -q -p softrdma-io --example udp_bw
exec python3 scripts/bench-vs-peers.py
