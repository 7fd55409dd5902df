#!/bin/bash
# rdma-core's own test suite (python3-pyverbs' tests/, run_tests.py's way) on
# the Linux kernel's rxe, in one Debian guest of rig.sh (default Debian 13:
# kernel 6.12, rdma-core 56, python3-pyverbs 56): the baseline that
# tests/distro/pyverbs-expect.txt holds softrdma to.
#
#   rdma-core-suite.sh [OUT] [MODULE...]     e.g. rdma-core-suite.sh /tmp/s test_qp test_mr
#
# Builds the image if needed (rig.sh build; non-bookworm guests carry
# python3-pyverbs), boots one guest (rxe0 on eth0, 198.18.1.2/24, IPv6 off),
# copies the suite from the very python3-pyverbs .deb the image was built
# from (the image drops /usr/share/doc) plus tests/distro/pyverbs_run.py
# into it, and runs each module (all test_*.py, or those named) in its own
# process, as tests/distro/pyverbs.sh does over softrdma: pyverbs 56 on
# Python 3.13 crashes at the end of a long single run, on rxe too. Device
# rxe0, port 1, the GID index of eth0's IPv4 address (RoCE v2; softrdma's
# GID 0 is the same kind); rdma_cm tests use eth0's address.
#
# Prints the per-module table, the counts per outcome and reason, then the
# passing test ids; leaves in OUT (default $RIG_DIR/rdma-core-suite):
#   MODULE.log / .status / .jsonl  each module's output, "RC SECONDS", outcomes
#   summary.txt   counts ("outcome N", "reason OUTCOME N TEXT")
#   passed.txt    "pass TEST_ID" lines: paste into tests/distro/pyverbs-expect.txt
#   versions.txt  kernel, rdma-core and pyverbs of the guest, date, command
#   dmesg.txt     the guest's kernel log after the run (rxe's complaints)
#
# Environment: RIG_DIR (default ~/.cache/rxe-vm-trixie), RIG_SUITE (default
# trixie), RIG_EXTRA_PKGS, RIG_MEM (default 1024 here), RIG_SMP as for rig.sh;
# SUITE_MODULE_LIMIT seconds per module (default 1800; TCG is slow);
# RIG_PEER_NS / RIG_PEER_TAP (default rigsuite / rigsuitetap: apart from
# rig.sh's peer guest). Root. Takes ~10.5 min under TCG (README).
set -eu -o pipefail
HERE=$(dirname "$(readlink -f "$0")")
DISTRO=$HERE/../distro
export RIG_SUITE=${RIG_SUITE:-trixie}
export RIG_DIR=${RIG_DIR:-${HOME:-/root}/.cache/rxe-vm-trixie}
export RIG_MEM=${RIG_MEM:-1024}
export RIG_PEER_NS=${RIG_PEER_NS:-rigsuite} RIG_PEER_TAP=${RIG_PEER_TAP:-rigsuitetap}
LIMIT=${SUITE_MODULE_LIMIT:-1800}
OUT=${1:-$RIG_DIR/rdma-core-suite}
[ $# -gt 0 ] && shift
RIG=$HERE/rig.sh
log() { printf '[suite %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root"
[ "$RIG_SUITE" != bookworm ] || die "bookworm guests have no python3-pyverbs in the image; use RIG_SUITE=trixie"
t0=$SECONDS

"$RIG" build
deb=$(ls -t "$RIG_DIR"/cache/debootstrap/python3-pyverbs_*.deb 2>/dev/null | head -n1)
want=$(awk '$2 == "python3-pyverbs" {print $3}' "$RIG_DIR/build/versions.txt" 2>/dev/null || true)
[ -n "$deb" ] || die "no python3-pyverbs .deb in $RIG_DIR/cache/debootstrap (rig.sh build --clean)"
case $deb in *"_${want//:/%3a}_"*) ;; *) die "$deb is not the image's python3-pyverbs $want";; esac

stopped=0
stop() { [ $stopped = 1 ] || { stopped=1; "$RIG" peer-stop || true; }; }
trap stop EXIT
"$RIG" peer-start
SHARE=$RIG_DIR/run/peer        # the guest's /rig
rm -rf "$SHARE/suite"; mkdir -p "$SHARE/suite/out"
dpkg-deb -x "$deb" "$SHARE/suite/pkg"
cp -r "$SHARE/suite/pkg/usr/share/doc/rdma-core/tests" "$SHARE/suite/tests"
gunzip -f "$SHARE"/suite/tests/*.gz
cp "$DISTRO/pyverbs_run.py" "$SHARE/suite/tests/"
if [ $# -gt 0 ]; then modules="$*"; else
  modules=$(cd "$SHARE/suite/tests" && ls test_*.py | sed 's/\.py$//' | tr '\n' ' ')
fi
log "modules: $modules"

# In the guest: the suite runs from tmpfs; results go straight to /rig.
# shellcheck disable=SC2016
"$RIG" peer-exec --timeout $(( (LIMIT + 30) * $(wc -w <<< "$modules") + 120 )) '
set -u
cp -r /rig/suite/tests /tmp/t && cd /tmp/t || exit 1
O=/rig/suite/out
{ echo "kernel $(uname -r)"; dpkg-query -W rdma-core libibverbs1 python3-pyverbs iproute2; python3 --version
  echo "device rxe0 port 1 gid $G ($(cat /sys/class/infiniband/rxe0/ports/1/gids/$G))"
  ip -br addr show eth0; } > $O/guest.txt 2>&1
for m in '"$modules"'; do
  s=$(cut -d. -f1 /proc/uptime)
  PYVERBS_RESULTS=$O/$m.jsonl timeout -k 10 '"$LIMIT"' \
    python3 pyverbs_run.py --dev rxe0 --port 1 --gid $G "tests.$m" > $O/$m.log 2>&1
  rc=$?
  echo "$rc $(( $(cut -d. -f1 /proc/uptime) - s ))" > $O/$m.status
  echo "$m rc=$rc $(( $(cut -d. -f1 /proc/uptime) - s ))s"
done
dmesg > $O/dmesg.txt 2>&1
' || log "peer-exec ended with status $? (the table below says which modules ran)"
stop

rm -rf "$OUT"; mkdir -p "$OUT"
cp "$SHARE"/suite/out/* "$OUT/"
{ echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "command RIG_SUITE=$RIG_SUITE $0 ${*:-(all modules)}"
  cat "$OUT/guest.txt"
  echo "elapsed $((SECONDS - t0)) s"; } > "$OUT/versions.txt"
set +e
python3 "$DISTRO/pyverbs_summary.py" "$OUT"
echo "---- tests that passed on rxe ($(wc -l < "$OUT/passed.txt")): $OUT/passed.txt"
cat "$OUT/passed.txt"
echo "----"
cat "$OUT/versions.txt"
