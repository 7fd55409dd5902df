#!/usr/bin/env bash
# softrdma next to its peers, on loopback, in one sitting, with ratios.
#
#   scripts/bench-vs-peers.sh            # ~3 minutes
#   DURATION=5 scripts/bench-vs-peers.sh
#   ONLY=ucx ROUNDS=7 scripts/bench-vs-peers.sh   # only UCX over softrdma vs UCX over TCP
#
# Peers (installed with apt if missing): UCX over TCP (ucx_perftest with
# UCX_TLS=tcp: tag_bw, ucp_put_bw, ucp_get, ucp_put_lat) and kernel UDP
# ping-pong with busy polling (sockperf ping-pong --nonblocked). softrdma
# runs `softrdma perf … --loopback` (both ends in one process, separate
# devices and progress threads, real UDP sockets on 127.0.0.x).
#
# Then UCX over softrdma next to UCX over TCP, the same ucx_perftest UCP
# tests (tag_bw 64 KiB and 1 MiB, tag_lat 8 B) between two processes:
# `softrdma exec` with UCX_TLS=rc_v,self UCX_NET_DEVICES=softrdma0:1
# against UCX_TLS=tcp, alternated in ROUNDS rounds (default 5); medians
# and their ratio.
#
# Units: GB/s = 10^9 bytes/s. ucx_perftest prints MB/s meaning MiB/s; it is
# converted. Latencies are one-way (half the round trip), the convention of
# perftest, ucx_perftest and sockperf alike.
set -euo pipefail
cd "$(dirname "$0")/.."

D=${DURATION:-3}
PORT=${PORT:-13370}

need=()
command -v ucx_perftest >/dev/null || need+=(ucx-utils)
command -v sockperf >/dev/null || need+=(sockperf)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need[@]}" >/dev/null
fi

cargo build --release -q -p softrdma-cli -p softrdma-ibverbs -p softrdma-preload
SR=target/release/softrdma

# ucx_perftest TEST SIZE -> "overall bandwidth (MiB/s) | typical latency (us)"
ucx() {
  local test=$1 size=$2 iters=$3 port=$((PORT++))
  UCX_TLS=tcp timeout 120 ucx_perftest -t "$test" -s "$size" -n "$iters" -p "$port" >/dev/null 2>&1 &
  local srv=$!
  sleep 1
  local out
  out=$(UCX_TLS=tcp timeout 120 ucx_perftest 127.0.0.1 -t "$test" -s "$size" -n "$iters" -p "$port" 2>&1 | grep '^Final:' || true)
  wait "$srv" 2>/dev/null || true
  # Final: iters 50%ile avg overall bw_avg bw_overall rate_avg rate_overall
  echo "$out" | awk '{print $7, $3}'
}

# sockperf ping-pong SIZE -> average one-way latency (us)
sockperf_pp() {
  local size=$1 port=$((PORT++))
  timeout 60 sockperf server -i 127.0.0.1 -p "$port" --nonblocked >/dev/null 2>&1 &
  local srv=$!
  sleep 1
  local out
  out=$(timeout 60 sockperf ping-pong -i 127.0.0.1 -p "$port" -m "$size" -t "$D" --nonblocked 2>&1 || true)
  kill "$srv" 2>/dev/null || true
  wait "$srv" 2>/dev/null || true
  echo "$out" | sed -n 's/.*avg-latency= *\([0-9.]*\).*/\1/p' | head -1
}

# softrdma perf TOOL ARGS... -> the JSON document
srp() {
  local tool=$1
  shift
  timeout 300 "$SR" perf "$tool" --loopback --json -D "$D" "$@" 2>/dev/null
}

py() { python3 -c "$1"; }

# --- UCX over softrdma vs UCX over TCP -------------------------------------
# ucx_perftest over TRANSPORT (tcp | softrdma) TEST SIZE ITERS
#   -> "overall bandwidth (MiB/s) typical latency (us)"
ucx_over() {
  local over=$1 test=$2 size=$3 iters=$4 port=$((PORT++))
  local -a run env
  if [ "$over" = softrdma ]; then
    run=("$SR" exec --)
    env=(UCX_TLS=rc_v,self UCX_NET_DEVICES=softrdma0:1)
  else
    run=()
    env=(UCX_TLS=tcp)
  fi
  env "${env[@]}" "${run[@]}" timeout 120 ucx_perftest -t "$test" -s "$size" -n "$iters" -p "$port" >/dev/null 2>&1 &
  local srv=$!
  sleep 1
  local out
  out=$(env "${env[@]}" "${run[@]}" timeout 120 ucx_perftest 127.0.0.1 -t "$test" -s "$size" -n "$iters" -p "$port" 2>&1 | grep '^Final:' || true)
  wait "$srv" 2>/dev/null || true
  echo "$out" | awk '{print $7, $3}'
}

median() { python3 -c 'import sys,statistics; v=[float(x) for x in sys.argv[1:]]; print("%.2f" % statistics.median(v) if v else "nan")' "$@"; }

ucx_vs_tcp() {
  local rounds=${ROUNDS:-5}
  # name test size iters field(1 = bandwidth MiB/s, 2 = latency us)
  local -a cases=("tag_bw 64 KiB (GB/s)|tag_bw|65536|20000|1"
                  "tag_bw 1 MiB (GB/s)|tag_bw|1048576|2000|1"
                  "tag_lat 8 B (us, one way)|tag_lat|8|50000|2")
  declare -A vals
  local r c name test size iters field over v first second
  for ((r = 0; r < rounds; r++)); do
    for c in "${cases[@]}"; do
      IFS='|' read -r name test size iters field <<<"$c"
      # Alternate which one goes first.
      if ((r % 2)); then first=tcp second=softrdma; else first=softrdma second=tcp; fi
      for over in "$first" "$second"; do
        v=$(ucx_over "$over" "$test" "$size" "$iters" | awk -v f="$field" '{print $f}')
        [ -n "$v" ] || { echo "ucx_perftest $test $size over $over failed" >&2; continue; }
        if [ "$field" = 1 ]; then v=$(python3 -c "print('%.3f' % ($v*1048576/1e9))"); fi
        vals["$name|$over"]+=" $v"
      done
    done
  done
  echo "UCX 1.13 ucx_perftest (UCP, two processes on loopback): over softrdma (rc_v) vs over TCP"
  echo "$rounds rounds alternated, medians; $(nproc) CPUs"
  printf '%-28s %12s %12s %8s   %s\n' "test" "softrdma" "tcp" "ratio" "all runs softrdma / tcp"
  for c in "${cases[@]}"; do
    IFS='|' read -r name test size iters field <<<"$c"
    local s t
    # shellcheck disable=SC2086
    s=$(median ${vals["$name|softrdma"]})
    # shellcheck disable=SC2086
    t=$(median ${vals["$name|tcp"]})
    printf '%-28s %12s %12s %8s   %s /%s\n' "$name" "$s" "$t" \
      "$(python3 -c "print('%.2fx' % ($s/$t))")" "${vals["$name|softrdma"]}" "${vals["$name|tcp"]}"
  done
}

if [ "${ONLY:-}" = ucx ]; then
  ucx_vs_tcp
  exit 0
fi

echo "softrdma vs peers on loopback, ${D}s per point, $(nproc) CPUs, $(uname -r)"
echo

declare -a rows

row() { rows+=("$(printf '%-34s %12s %12s %8s   %s' "$@")"); }

# --- bandwidth -------------------------------------------------------------
for size in 65536 1048576; do
  j=$(srp write-bw -s "$size")
  ours=$(py "import json,sys; d=json.loads('''$j'''); print('%.2f' % (d['results'][0]['bw_average_mib_s']*1048576/1e9))")
  read -r tag _ < <(ucx tag_bw "$size" $((size > 65536 ? 2000 : 20000)))
  read -r put _ < <(ucx ucp_put_bw "$size" $((size > 65536 ? 2000 : 20000)))
  tag_gb=$(py "print('%.2f' % ($tag*1048576/1e9))")
  put_gb=$(py "print('%.2f' % ($put*1048576/1e9))")
  row "WRITE bw $((size / 1024)) KiB (GB/s)" "$ours" "$tag_gb" "$(py "print('%.2fx' % ($ours/$tag_gb))")" "vs UCX tcp tag_bw; target >= 2x"
  row "WRITE bw $((size / 1024)) KiB (GB/s)" "$ours" "$put_gb" "$(py "print('%.2fx' % ($ours/$put_gb))")" "vs UCX tcp ucp_put_bw; target >= 2x"
done

j=$(srp read-bw -s 1048576)
ours=$(py "import json; d=json.loads('''$j'''); print('%.2f' % (d['results'][0]['bw_average_mib_s']*1048576/1e9))")
read -r get _ < <(ucx ucp_get 1048576 2000)
get_gb=$(py "print('%.2f' % ($get*1048576/1e9))")
row "READ bw 1 MiB (GB/s)" "$ours" "$get_gb" "$(py "print('%.2fx' % ($ours/$get_gb))")" "vs UCX tcp ucp_get; target >= 5x"

j=$(srp write-bw -s 8)
rate=$(py "import json; d=json.loads('''$j'''); print('%.3f' % d['results'][0]['msg_rate_mpps'])")
row "WRITE 8 B message rate (M/s)" "$rate" "1.000" "$(py "print('%.2fx' % ($rate/1.0))")" "target >= 1 M/s"

# --- latency ---------------------------------------------------------------
j=$(srp write-lat -s 8)
lat=$(py "import json; d=json.loads('''$j'''); print('%.2f' % d['results'][0]['t_typical_us'])")
read -r _ putlat < <(ucx ucp_put_lat 8 100000)
udp=$(sockperf_pp 14) # sockperf's smallest message
row "WRITE lat 8 B (us, one way)" "$lat" "$udp" "$(py "print('%.2fx' % ($lat/$udp))")" "vs kernel UDP busy-poll ping-pong; target <= 1.5x"
row "WRITE lat 8 B (us, one way)" "$lat" "$putlat" "$(py "print('%.2fx' % ($lat/$putlat))")" "vs UCX tcp ucp_put_lat; target < 1x"

printf '%-34s %12s %12s %8s   %s\n' "metric" "softrdma" "peer" "ratio" "peer / target"
printf '%s\n' "${rows[@]}"

echo
ucx_vs_tcp
