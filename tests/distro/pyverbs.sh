#!/usr/bin/env bash
# rdma-core's own test suite (python3-pyverbs, /usr/share/doc/rdma-core/tests)
# over softrdma, inside the Debian 13 chroot of tests/distro/run.sh: one
# test module per process (pyverbs 56 on Python 3.13 crashes at the end of
# a long single run, on rxe too), each under `softrdma exec` on device
# softrdma0, GID index 0, loaded as run_tests.py loads it by
# pyverbs_run.py, which records every outcome with its reason. Prints the counts per outcome and, for skips,
# failures and errors, per reason; writes them to $LOG/pyverbs/summary.txt
# ("outcome COUNT" lines, then "reason OUTCOME COUNT TEXT" lines) and the
# tests that passed to $LOG/pyverbs/passed.txt (pyverbs_summary.py).
#
# With an expectation file ($PYVERBS_EXPECT; # comments), every line must
# hold or the script exits 1: "OUTCOME OP COUNT" (`ok >= 68`, `fail == 0`,
# `error <= 11`; OUTCOME is ran, ok, skip, fail, error, xfail, xpass or
# process, OP >=, <= or ==) or "pass TEST_ID" (that test must pass, e.g.
# one that passes on rxe). Without one it only reports.
set -u
LOG=${LOG:-/ci/log}
OUT=$LOG/pyverbs
T=/ci/pyverbs-tests
PER_MODULE_LIMIT=${PYVERBS_MODULE_LIMIT:-600}
rm -rf "$OUT" "$T"
mkdir -p "$OUT"
cp -r /usr/share/doc/rdma-core/tests "$T"
gunzip -f "$T"/*.gz
cp /ci/pyverbs_run.py "$T/"
cd "$T" || exit 1
VERSION=$(dpkg-query -W -f='${Version}' python3-pyverbs)
echo "rdma-core's suite from python3-pyverbs $VERSION, $(python3 --version)"

t0=$SECONDS
for f in test_*.py; do
  m=${f%.py}
  s=$SECONDS
  PYVERBS_RESULTS=$OUT/$m.jsonl timeout -k 10 "$PER_MODULE_LIMIT" \
    softrdma exec -- /usr/bin/python3 pyverbs_run.py --dev softrdma0 --gid 0 "tests.$m" \
    >"$OUT/$m.log" 2>&1
  echo "$? $((SECONDS - s))" >"$OUT/$m.status"
done
echo "$(ls test_*.py | wc -l) modules in $((SECONDS - t0)) s"

python3 /ci/pyverbs_summary.py "$OUT" "${PYVERBS_EXPECT:-}"
