#!/usr/bin/env bash
# softrdma <-> Linux Soft-RoCE (rxe) interop suite.
#
#   sudo tests/rxe-vm/interop.sh            # everything (~7 min on 2 cores, TCG)
#   sudo tests/rxe-vm/interop.sh rc_ write  # only cases whose name matches
#
# A small Debian VM whose kernel runs rxe (rig.sh, copied from the
# workplace's shared rxe-vm) runs unmodified rdma-core examples and
# perftest; this machine runs the same programs over softrdma, through
# softrdma's libibverbs.so.1 (`softrdma exec`), in the network namespace
# rigpeer (host 198.18.1.1 <-> guest 198.18.1.2 on tap rigtap0). Every
# program runs once with softrdma as server and once as client, at MTU 1024
# with 64 B and 8 KiB messages, then write/read/send bandwidth with `tc
# netem loss 3%` on the VM's link, then the RC pingpong and write/read/send
# bandwidth at MTU 4096 (the VM's link at 4200) with 16 KiB messages.
# rdma_cm programs (rping, ucmatose, udaddy: both directions; ib_send_bw
# -R, ib_read_lat -R: softrdma as server) connect over the IB CM on QP 1,
# IPv4, at MTU 1024; rping, ucmatose and udaddy also over IPv6.
# Memory windows (verbs_ops.c's mw_type1, mw_local_inv, send_inv: a
# window bound on one side, WRITE and READ through it from the other, then
# an unbound or invalidated window refused with NAK remote access error),
# both directions, at MTU 1024. UD multicast (mckey over rdma_cm, IPv4
# group 239.67.1.1), softrdma receiving and rxe receiving. XRC has no
# case: rxe has no XRC.
# Every exchange is captured by softrdma (SOFTRDMA_PCAP) and checked:
# each packet softrdma sent has a valid ICRC and decodes in tshark
# (`-d udp.port==4791,infiniband`) with no malformed-packet warning.
#
# Needs root and /dev/net/tun (KVM is optional: without it the VM runs
# under TCG, slowly). It fails loudly when it cannot start the VM.
# Artefacts: target/interop/ (logs and captures of every case).
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
RIG="$ROOT/tests/rxe-vm/rig.sh"
OUT="$ROOT/target/interop"
FILTER=("$@")
HOST_IP=198.18.1.1
GUEST_IP=198.18.1.2
: "${RIG_DIR:=$HOME/.cache/rxe-vm}"
export RIG_DIR
PEER_DIR="$RIG_DIR/run/peer"

fail() { echo "INTEROP FAILED: $*" >&2; exit 1; }
say() { echo "[interop $(date +%H:%M:%S)] $*"; }

# --- preflight: say loudly why the VM cannot run ---------------------------
[ "$(id -u)" = 0 ] || fail "needs root (network namespaces, taps); run with sudo"
[ -c /dev/net/tun ] || fail "no /dev/net/tun: the VM's tap cannot be created"
[ -e /dev/kvm ] || say "no /dev/kvm: the VM runs under TCG (slow, still correct)"
command -v tshark >/dev/null || fail "tshark missing (apt-get install tshark)"

mkdir -p "$OUT"
rm -f "$OUT"/*.log "$OUT"/*.pcap "$OUT"/results.txt

say "building softrdma (release): the CLI and libibverbs.so.1"
(cd "$ROOT" && cargo build --release -q -p softrdma-cli -p softrdma-ibverbs) || fail "cargo build"
SR="$ROOT/target/release/softrdma"

say "building the VM image (idempotent)"
"$RIG" build >"$OUT/rig-build.log" 2>&1 || { tail -20 "$OUT/rig-build.log"; fail "rig.sh build"; }

stop_vm() { "$RIG" peer-stop >/dev/null 2>&1 || true; }
trap stop_vm EXIT

start_vm() { # MTU
  stop_vm
  say "booting the rxe VM (netdev MTU $1)"
  RIG_PEER_MTU=$1 "$RIG" peer-start >"$OUT/vm-$1.log" 2>&1 || { tail -30 "$OUT/vm-$1.log"; fail "the VM did not boot"; }
}

guest() { "$RIG" peer-exec --timeout "${T:-180}" "$@"; }

PORT=19000
PASS=0
FAILS=()

wanted() {
  [ ${#FILTER[@]} -eq 0 ] && return 0
  local f
  for f in "${FILTER[@]}"; do [[ $1 == *"$f"* ]] && return 0; done
  return 1
}

# Whether any of the cases named is wanted: sections whose cases a filter
# leaves out skip their setup too (an IPv6 address, netem, a second boot).
section_wanted() {
  local n
  for n in "$@"; do wanted "$n" && return 0; done
  return 1
}

# Checks a softrdma capture: every packet softrdma sent has a valid ICRC
# (softrdma dump verifies them all: the peer's too, with its IPv4
# identification solved), and tshark finds nothing malformed.
check_pcap() { # NAME PCAP
  local name=$1 pcap=$2 dump
  [ -s "$pcap" ] || { echo "no capture"; return 1; }
  dump=$("$SR" dump --quiet "$pcap" 2>&1) || { echo "dump failed: $dump"; return 1; }
  echo "$dump" > "$OUT/$name.dump.txt"
  if ! grep -q "ICRC bad 0," <<<"$dump"; then echo "bad ICRC in capture: $(grep -o 'ICRC bad [0-9]*' <<<"$dump")"; return 1; fi
  local ts
  # tshark's heuristic RPC-over-RDMA dissector claims the few-byte SENDs
  # of perftest's rdma_cm exchange (-R) and calls them malformed, rxe's as
  # well as ours: it is switched off, the InfiniBand dissector still runs.
  ts=$(tshark -r "$pcap" -d udp.port==4791,infiniband --disable-heuristic rpcrdma_infiniband \
    -T fields -e frame.number -e _ws.malformed -e _ws.expert.message 2>&1)
  if grep -qi "malformed" <<<"$ts"; then echo "tshark: malformed packet"; return 1; fi
  return 0
}

# run_case NAME ROLE GUEST_CMD HOST_CMD CHECK_REGEX [ENV...]
# ROLE: "host" = softrdma is the server, "guest" = rxe is the server.
# The server command gets no peer address; the client command gets it
# appended. CHECK_REGEX must match the client's output.
run_case() {
  local name=$1 role=$2 gcmd=$3 hcmd=$4 check=$5
  shift 5
  wanted "$name" || return 0
  local pcap="$OUT/$name.pcap" hlog="$OUT/$name.host.log" glog="$name.guest.log" rc=0 why=""
  # CASE_HOST_IP / CASE_GUEST_IP: other addresses (the IPv6 cases).
  local hip=${CASE_HOST_IP:-$HOST_IP} gip=${CASE_GUEST_IP:-$GUEST_IP}
  local henv=(SOFTRDMA_ADDR=$hip SOFTRDMA_PCAP="$pcap" SOFTRDMA_MTU="${SOFTRDMA_MTU_PORT:-1024}" "$@")
  local t0=$SECONDS
  rm -f "$PEER_DIR/$glog"
  if [ "$role" = host ]; then
    ip netns exec rigpeer env "${henv[@]}" timeout 150 "$SR" exec -- $hcmd >"$hlog" 2>&1 &
    local hp=$!
    sleep 1
    guest "$gcmd $hip > /rig/$glog 2>&1; echo RC=\$? >> /rig/$glog" >/dev/null 2>&1
    wait "$hp" || { rc=$?; why="softrdma server exited $rc"; }
    local out="$PEER_DIR/$glog"
    cp "$out" "$OUT/$glog" 2>/dev/null
    grep -q '^RC=0' "$out" 2>/dev/null || { rc=1; why="${why:+$why; }rxe client failed"; }
    grep -Eq "$check" "$out" 2>/dev/null || { rc=1; why="${why:+$why; }client output lacks /$check/"; }
  else
    guest "( timeout 150 $gcmd > /rig/$glog 2>&1; echo RC=\$? >> /rig/$glog ) &" >/dev/null 2>&1
    sleep 3 # the VM is slow to listen
    ip netns exec rigpeer env "${henv[@]}" timeout 150 "$SR" exec -- $hcmd $gip >"$hlog" 2>&1 || { rc=$?; why="softrdma client exited $rc"; }
    local i
    for i in $(seq 1 60); do grep -q '^RC=' "$PEER_DIR/$glog" 2>/dev/null && break; sleep 1; done
    cp "$PEER_DIR/$glog" "$OUT/$glog" 2>/dev/null
    grep -q '^RC=0' "$PEER_DIR/$glog" 2>/dev/null || { rc=1; why="${why:+$why; }rxe server failed"; }
    grep -Eq "$check" "$hlog" || { rc=1; why="${why:+$why; }client output lacks /$check/"; }
  fi
  if [ $rc = 0 ]; then
    local p
    p=$(check_pcap "$name" "$pcap") || { rc=1; why="$p"; }
  fi
  if [ $rc = 0 ]; then
    PASS=$((PASS + 1))
    printf '  ok    %-40s %3ss\n' "$name" $((SECONDS - t0)) | tee -a "$OUT/results.txt"
  else
    FAILS+=("$name: $why")
    printf '  FAIL  %-40s %3ss  %s\n' "$name" $((SECONDS - t0)) "$why" | tee -a "$OUT/results.txt"
  fi
}

# The perftest result row: bytes, iterations, then numbers.
BW_ROW='^[[:space:]]*[0-9]+[[:space:]]+[0-9]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+[[:space:]]+[0-9.]+'
LAT_ROW="$BW_ROW"
PP_ROW='iters in [0-9.]+ seconds'

both() { # NAME GUEST_CMD HOST_CMD CHECK [ENV...]: softrdma as server, then as client
  local name=$1 g=$2 h=$3 c=$4
  shift 4
  run_case "${name}_srv-softrdma" host "$g" "$h" "$c" "$@"
  run_case "${name}_srv-rxe" guest "$g" "$h" "$c" "$@"
}

suite() { # MTU SIZES...
  local mtu=$1
  shift
  local s
  for s in "$@"; do
    PORT=$((PORT + 10))
    both "rc_pingpong_${mtu}_$s" "ibv_rc_pingpong -d rxe0 -g 1 -m $mtu -s $s -n 100 -p $((PORT + 1))" \
      "ibv_rc_pingpong -d softrdma0 -g 0 -m $mtu -s $s -n 100 -p $((PORT + 1))" "$PP_ROW"
    both "uc_pingpong_${mtu}_$s" "ibv_uc_pingpong -d rxe0 -g 1 -m $mtu -s $s -n 100 -p $((PORT + 2))" \
      "ibv_uc_pingpong -d softrdma0 -g 0 -m $mtu -s $s -n 100 -p $((PORT + 2))" "$PP_ROW"
    if [ "$s" -le "$mtu" ]; then
      both "ud_pingpong_${mtu}_$s" "ibv_ud_pingpong -d rxe0 -g 1 -s $s -n 100 -p $((PORT + 3))" \
        "ibv_ud_pingpong -d softrdma0 -g 0 -s $s -n 100 -p $((PORT + 3))" "$PP_ROW"
    fi
    local t k=4
    for t in write_bw read_bw send_bw; do
      k=$((k + 1))
      both "${t}_${mtu}_$s" "ib_$t -d rxe0 -x 1 -m $mtu -F -s $s -n 100 -p $((PORT + k))" \
        "ib_$t -d softrdma0 -x 0 -m $mtu -F -s $s -n 100 -p $((PORT + k))" "$BW_ROW"
    done
    for t in write_lat read_lat send_lat; do
      k=$((k + 1))
      both "${t}_${mtu}_$s" "ib_$t -d rxe0 -x 1 -m $mtu -F -s $s -n 100 -p $((PORT + k))" \
        "ib_$t -d softrdma0 -x 0 -m $mtu -F -s $s -n 100 -p $((PORT + k))" "$LAT_ROW"
    done
  done
}

start_vm 1500
say "MTU 1024: pingpongs and perftest, 64 B and 8 KiB, softrdma as server and as client"
suite 1024 64 8192

if section_wanted mw_{type1,local_inv,send_inv}_srv-{softrdma,rxe}; then
  say "memory windows: bound on one side, used from the other (verbs_ops)"
  # One build for both sides: Debian 12's libibverbs 44, as in the VM; the
  # guest sees the peer folder as /rig.
  gcc -O2 -Wall -o "$PEER_DIR/verbs_ops" "$ROOT/tests/rxe-vm/src/verbs_ops.c" -libverbs ||
    fail "building verbs_ops"
  for c in mw_type1 mw_local_inv send_inv; do
    PORT=$((PORT + 3))
    both "mw_${c#mw_}" "/rig/verbs_ops -d rxe0 -g 1 -p $PORT $c" \
      "$PEER_DIR/verbs_ops -d softrdma0 -g 0 -p $PORT $c" "$c: ok"
  done
  # Deregistering a region under a bound window: softrdma must refuse it
  # with rxe's errno (IBA 10.6.7.2.6 says refuse, not which errno).
  dr() { grep -ho 'region under a bound window: [0-9-]*' "$@" 2>/dev/null | head -1; }
  ours=$(dr "$OUT"/mw_type1_srv-softrdma.host.log)
  theirs=$(dr "$OUT"/mw_type1_srv-rxe.guest.log)
  say "dereg of a region under a bound window: softrdma '${ours##*: }', rxe '${theirs##*: }'"
  if [ -n "$ours" ] && [ -n "$theirs" ] && [ "$ours" != "$theirs" ]; then
    FAILS+=("dereg under a bound window: softrdma ${ours##*: }, rxe ${theirs##*: }")
  fi
fi
if section_wanted placement_srv-{softrdma,rxe}; then
  # FLUSH and ATOMIC WRITE (IBA 1.5): rxe has them from Linux 6.2, its
  # provider's ibv_wr_flush from rdma-core 47. Debian 12's guest (6.1, 44)
  # has neither: RIG_SUITE=trixie RIG_DIR=<another cache> boots Debian 13's
  # 6.12 with rdma-core 56 (RIG_EXTRA_PKGS=tshark adds a Wireshark that
  # decodes both opcodes, 4.4; the host's 4.0 calls them unknown).
  kver=$(guest "uname -r" 2>/dev/null | tr -d '\r' | tail -1)
  if printf '%s\n%s\n' 6.2 "$kver" | sort -V -C; then
    say "FLUSH and ATOMIC WRITE against rxe of Linux $kver (verbs_ops placement)"
    gcc -O2 -Wall -o "$PEER_DIR/verbs_ops" "$ROOT/tests/rxe-vm/src/verbs_ops.c" -libverbs ||
      fail "building verbs_ops"
    PORT=$((PORT + 3))
    both placement "/rig/verbs_ops -d rxe0 -g 1 -p $PORT placement" \
      "$PEER_DIR/verbs_ops -d softrdma0 -g 0 -p $PORT placement" "placement: ok"
    if guest "command -v tshark" >/dev/null 2>&1; then
      for r in softrdma rxe; do
        cp "$OUT/placement_srv-$r.pcap" "$PEER_DIR/" 2>/dev/null || continue
        guest "tshark -r /rig/placement_srv-$r.pcap -d udp.port==4791,infiniband -V" \
          >"$OUT/placement_srv-$r.tshark.txt" 2>&1
        if grep -qi malformed "$OUT/placement_srv-$r.tshark.txt" ||
          ! grep -qi 'flush' "$OUT/placement_srv-$r.tshark.txt" ||
          ! grep -qi 'atomic write' "$OUT/placement_srv-$r.tshark.txt"; then
          FAILS+=("the guest's tshark does not decode placement_srv-$r.pcap (see its .tshark.txt)")
        fi
      done
    fi
  elif [ ${#FILTER[@]} -gt 0 ]; then
    FAILS+=("placement: the guest kernel $kver has no FLUSH/ATOMIC WRITE; boot RIG_SUITE=trixie")
  else
    # The whole suite on Debian 12's guest: said, and in results.txt.
    printf '  SKIP  %-40s       the guest kernel %s has no FLUSH/ATOMIC WRITE (RIG_SUITE=trixie)\n' \
      placement_srv-softrdma/rxe "$kver" | tee -a "$OUT/results.txt"
  fi
fi
for a in FETCH_AND_ADD CMP_AND_SWAP; do
  PORT=$((PORT + 3))
  both "atomic_bw_${a}" "ib_atomic_bw -d rxe0 -x 1 -m 1024 -F -A $a -n 100 -p $PORT" \
    "ib_atomic_bw -d softrdma0 -x 0 -m 1024 -F -A $a -n 100 -p $PORT" "$BW_ROW"
done

say "rdma_cm: rping, ucmatose, udaddy, ib_send_bw -R, ib_read_lat -R (the IB CM on QP 1)"
# cm_both NAME GUEST_SERVER GUEST_CLIENT HOST_SERVER HOST_CLIENT CHECK:
# softrdma as server (rxe's client), then rxe as server (softrdma's
# client). Client commands get the server's address appended.
cm_both() {
  run_case "${1}_srv-softrdma" host "$3" "$4" "$6"
  run_case "${1}_srv-rxe" guest "$2" "$5" "$6"
}
cm_both rdmacm_rping "rping -s -C 10 -V" "rping -c -C 10 -V -v -a" \
  "rping -s -C 10 -V" "rping -c -C 10 -V -v -a" 'rdma-ping-9: '
cm_both rdmacm_ucmatose "ucmatose" "ucmatose -s" "ucmatose" "ucmatose -s" 'return status 0'
cm_both rdmacm_udaddy "udaddy" "udaddy -s" "udaddy" "udaddy -s" 'return status 0'
# perftest -R only with softrdma as the server: its client connects the
# test QP right after the rdma_cm handshake, before a slow (TCG) rxe server
# has called rdma_listen, gets REJ 8, and perftest 4.5-0.17's retry then
# reuses the ids and node array rdma_cm_destroy_cma just freed
# (src/perftest_communication.c rdma_cm_client_connection), so it fails
# whatever the library (a client faster than the server loses that race).
PORT=$((PORT + 3))
run_case rdmacm_send_bw_srv-softrdma host "ib_send_bw -d rxe0 -x 1 -R -F -n 100 -p $PORT" \
  "ib_send_bw -d softrdma0 -x 0 -R -F -n 100 -p $PORT" "$BW_ROW"
PORT=$((PORT + 3))
run_case rdmacm_read_lat_srv-softrdma host "ib_read_lat -d rxe0 -x 1 -R -F -n 100 -p $PORT" \
  "ib_read_lat -d softrdma0 -x 0 -R -F -n 100 -p $PORT" "$LAT_ROW"

if section_wanted rdmacm_v6_{rping,ucmatose,udaddy}_srv-{softrdma,rxe}; then
say "rdma_cm over IPv6: host 2001:db8:1::1, guest 2001:db8:1::2"
ip netns exec rigpeer sysctl -qw net.ipv6.conf.all.disable_ipv6=0 \
  net.ipv6.conf.default.disable_ipv6=0 net.ipv6.conf.rigtap0.disable_ipv6=0
ip -n rigpeer addr del 2001:db8:1::1/64 dev rigtap0 2>/dev/null
ip -n rigpeer addr add 2001:db8:1::1/64 dev rigtap0 nodad || fail "IPv6 on the host side"
guest "sysctl -qw net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.default.disable_ipv6=0 \
  net.ipv6.conf.eth0.disable_ipv6=0 && ip -6 addr add 2001:db8:1::2/64 dev eth0 nodad && sleep 1" \
  >/dev/null 2>&1 || fail "IPv6 in the VM"
export CASE_HOST_IP=2001:db8:1::1 CASE_GUEST_IP=2001:db8:1::2
cm_both rdmacm_v6_rping "rping -s -a $CASE_GUEST_IP -C 10 -V" "rping -c -C 10 -V -v -a" \
  "rping -s -a $CASE_HOST_IP -C 10 -V" "rping -c -C 10 -V -v -a" 'rdma-ping-9: '
cm_both rdmacm_v6_ucmatose "ucmatose -b $CASE_GUEST_IP" "ucmatose -s" \
  "ucmatose -b $CASE_HOST_IP" "ucmatose -s" 'return status 0'
cm_both rdmacm_v6_udaddy "udaddy -b $CASE_GUEST_IP" "udaddy -s" \
  "udaddy -b $CASE_HOST_IP" "udaddy -s" 'return status 0'
unset CASE_HOST_IP CASE_GUEST_IP
ip -n rigpeer addr del 2001:db8:1::1/64 dev rigtap0 2>/dev/null
fi

# UD multicast over rdma_cm (mckey, rdmacm-utils): one side receives, the
# other sends 10 messages to the group (QPN 0xFFFFFF), each role on each
# side. rxe's rdma_cm joins the IP group for the RoCE v2 MGID
# ::ffff:239.x (cma_igmp_send); IPv6 groups it refuses on 6.1 (ENOTSUPP
# from cma_iboe_join_multicast), so only IPv4 here.
# mc_case NAME RECEIVER(softrdma|rxe) GROUP
mc_case() {
  local name=$1 rx=$2 grp=$3
  wanted "$name" || return 0
  local pcap="$OUT/$name.pcap" hlog="$OUT/$name.host.log" glog="$name.guest.log" rc=0 why="" i
  local henv=(SOFTRDMA_ADDR=$HOST_IP SOFTRDMA_PCAP="$pcap" SOFTRDMA_MTU=1024)
  local t0=$SECONDS
  rm -f "$PEER_DIR/$glog" "$hlog"
  # The sender starts once the receiver's join completed (its QP is
  # attached when mckey takes the MULTICAST_JOIN event and prints it):
  # UD multicast has no retransmission.
  if [ "$rx" = softrdma ]; then
    ip netns exec rigpeer env "${henv[@]}" timeout 150 "$SR" exec -- \
      mckey -m "$grp" -b $HOST_IP -C 10 >"$hlog" 2>&1 &
    local hp=$!
    for i in $(seq 1 60); do grep -q 'joined dgid' "$hlog" 2>/dev/null && break; sleep 1; done
    guest "timeout 120 mckey -m $grp -b $GUEST_IP -C 10 -s > /rig/$glog 2>&1; echo RC=\$? >> /rig/$glog" \
      >/dev/null 2>&1
    wait "$hp" || { rc=$?; why="softrdma receiver exited $rc"; }
  else
    guest "( timeout 150 mckey -m $grp -b $GUEST_IP -C 10 > /rig/$glog 2>&1; echo RC=\$? >> /rig/$glog ) &" \
      >/dev/null 2>&1
    for i in $(seq 1 60); do grep -q 'joined dgid' "$PEER_DIR/$glog" 2>/dev/null && break; sleep 1; done
    ip netns exec rigpeer env "${henv[@]}" timeout 120 "$SR" exec -- \
      mckey -m "$grp" -b $HOST_IP -C 10 -s >"$hlog" 2>&1 || { rc=$?; why="softrdma sender exited $rc"; }
    for i in $(seq 1 60); do grep -q '^RC=' "$PEER_DIR/$glog" 2>/dev/null && break; sleep 1; done
  fi
  cp "$PEER_DIR/$glog" "$OUT/$glog" 2>/dev/null
  grep -q '^RC=0' "$PEER_DIR/$glog" 2>/dev/null || { rc=1; why="${why:+$why; }rxe's mckey failed"; }
  local f
  for f in "$hlog" "$PEER_DIR/$glog"; do
    grep -q "joined dgid: ::ffff:$grp" "$f" 2>/dev/null &&
      grep -q 'data transfers complete' "$f" && grep -q 'return status 0' "$f" ||
      { rc=1; why="${why:+$why; }$(basename "$f") lacks the join or the transfers"; }
  done
  if [ $rc = 0 ]; then
    local p n
    p=$(check_pcap "$name" "$pcap") || { rc=1; why="$p"; }
    # The 10 messages, to the group's IP address and QPN 0xFFFFFF, in
    # softrdma's capture (sent, or received on the group's socket).
    n=$(tshark -r "$pcap" -d udp.port==4791,infiniband \
      -Y "ip.dst == $grp && infiniband.bth.destqp == 0xffffff" 2>/dev/null | wc -l)
    [ "$n" -ge 10 ] || { rc=1; why="${why:+$why; }$n packets to $grp QPN 0xFFFFFF in the capture"; }
  fi
  if [ $rc = 0 ]; then
    PASS=$((PASS + 1))
    printf '  ok    %-40s %3ss\n' "$name" $((SECONDS - t0)) | tee -a "$OUT/results.txt"
  else
    FAILS+=("$name: $why")
    printf '  FAIL  %-40s %3ss  %s\n' "$name" $((SECONDS - t0)) "$why" | tee -a "$OUT/results.txt"
  fi
}
if section_wanted mcast_mckey_rx-{softrdma,rxe}; then
  say "UD multicast: mckey over rdma_cm, 239.67.1.1, each side receiving"
  mc_case mcast_mckey_rx-softrdma softrdma 239.67.1.1
  mc_case mcast_mckey_rx-rxe rxe 239.67.1.1
fi
# XRC: rxe has none (no IBV_DEVICE_XRC, ibv_open_xrcd fails with
# EOPNOTSUPP; Linux 6.1 and 6.12 alike), so there is no interop case.

if section_wanted loss3_{write,read,send}_bw_8192_srv-{softrdma,rxe}; then
say "loss: tc netem loss 3% on the VM's link"
guest "tc qdisc replace dev eth0 root netem loss 3%" >/dev/null 2>&1 || fail "netem in the VM"
for t in write_bw read_bw send_bw; do
  PORT=$((PORT + 3))
  both "loss3_${t}_8192" "ib_$t -d rxe0 -x 1 -m 1024 -F -s 8192 -n 200 -p $PORT" \
    "ib_$t -d softrdma0 -x 0 -m 1024 -F -s 8192 -n 200 -p $PORT" "$BW_ROW"
done
# rxe's view of the loss (its hardware counters) and ours (in the captures).
guest "tc qdisc del dev eth0 root" >/dev/null 2>&1
guest "rdma statistic show link rxe0/1" >"$OUT/rxe-counters-after-loss.txt" 2>&1 || true
# softrdma's side: the flows it sent (source $HOST_IP) repeated packets
# (the loss is on the VM's egress, so softrdma retransmits when ACKs or
# responses are lost, or when rxe NAKs a gap the loss left).
# (Only when loss cases ran: a filtered run may have skipped them.)
if compgen -G "$OUT/loss3_*.dump.txt" >/dev/null &&
  ! cat "$OUT"/loss3_*.dump.txt 2>/dev/null | grep -E "^ *(req|resp) +$HOST_IP " | grep -q "repeats [1-9]"; then
  FAILS+=("softrdma retransmitted nothing during the 3% loss runs")
fi
if compgen -G "$OUT/loss3_*.dump.txt" >/dev/null &&
  [ -s "$OUT/rxe-counters-after-loss.txt" ] && ! grep -Eq "(seq_err|retry|duplicate_request|rcvd_seq_err)[a-z_]* [1-9]" "$OUT/rxe-counters-after-loss.txt"; then
  FAILS+=("rxe's counters show no retransmission after the loss runs")
fi
fi

if section_wanted {rc_pingpong,write_bw,read_bw,send_bw}_4096_16384_srv-{softrdma,rxe}; then
start_vm 4200
say "MTU 4096 (VM link MTU 4200): multi-packet at 4 KiB packets"
export SOFTRDMA_MTU_PORT=4096
PORT=$((PORT + 20))
both "rc_pingpong_4096_16384" "ibv_rc_pingpong -d rxe0 -g 1 -m 4096 -s 16384 -n 100 -p $((PORT + 1))" \
  "ibv_rc_pingpong -d softrdma0 -g 0 -m 4096 -s 16384 -n 100 -p $((PORT + 1))" "$PP_ROW"
k=1
for t in write_bw read_bw send_bw; do
  k=$((k + 1))
  both "${t}_4096_16384" "ib_$t -d rxe0 -x 1 -m 4096 -F -s 16384 -n 100 -p $((PORT + k))" \
    "ib_$t -d softrdma0 -x 0 -m 4096 -F -s 16384 -n 100 -p $((PORT + k))" "$BW_ROW"
done
fi

echo
say "$PASS cases passed, ${#FAILS[@]} failed; logs and captures in $OUT"
if [ ${#FAILS[@]} -gt 0 ]; then
  printf '  %s\n' "${FAILS[@]}"
  exit 1
fi
