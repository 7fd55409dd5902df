#!/usr/bin/env bash
# rdma-core's own test suite (python3-pyverbs, /usr/share/doc/rdma-core/tests)
# over softrdma, inside the Debian 13 chroot of tests/distro/run.sh: one
# test module per process (pyverbs 56 on Python 3.13 crashes at the end of
# a long single run, on rxe too), each under `softrdma exec` on device
# softrdma0, GID index 0, loaded as run_tests.py loads it by
# pyverbs_run.py, which records every outcome with its reason. Prints the counts per outcome and, for skips,
# failures and errors, per reason; writes them to $LOG/pyverbs/summary.txt
# ("outcome COUNT" lines, then "reason OUTCOME COUNT TEXT" lines).
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

python3 - "$OUT" "${PYVERBS_EXPECT:-}" <<'EOF'
import collections, json, os, re, sys

out, expect = sys.argv[1], sys.argv[2]
totals = collections.Counter()
reasons = collections.Counter()
outcome_of = {}
rows = []
for name in sorted(os.listdir(out)):
    if not name.endswith(".log"):
        continue
    m = name[:-4]
    text = open(os.path.join(out, name), errors="replace").read()
    rc, secs = open(os.path.join(out, m + ".status")).read().split()
    c = collections.Counter()
    results = os.path.join(out, m + ".jsonl")
    for line in open(results) if os.path.exists(results) else []:
        r = json.loads(line)
        c[r["outcome"]] += 1
        outcome_of[r["test"]] = r["outcome"]
        if r["outcome"] in ("skip", "fail", "error"):
            reasons[(r["outcome"], r["reason"][:200])] += 1
    ran = sum(c.values())
    status = "ok"
    if rc == "124" or rc == "137":
        status = "timeout"
    elif int(rc) >= 128:
        status = "signal %d" % (int(rc) - 128)
    elif int(rc) != 0:
        status = "exit %s" % rc
    elif not re.search(r"^Ran \d+ tests?", text, re.M):
        status = "did not finish"
    if status != "ok":
        c["process"] += 1
        reasons[("process", "%s: %s" % (m, status))] += 1
    totals.update(c)
    totals["ran"] += ran
    rows.append((m, ran, c, secs, status))

print("%-26s %4s %4s %4s %4s %4s %6s  %s" % ("module", "ran", "ok", "skip", "fail", "err", "secs", "process"))
for m, ran, c, secs, status in rows:
    print("%-26s %4d %4d %4d %4d %4d %6s  %s" % (m, ran, c["ok"], c["skip"], c["fail"], c["error"], secs, status))
print("total: ran %d: ok %d, skipped %d, fail %d, error %d, expected failure %d, unexpected success %d; "
      "modules whose process did not end well: %d" % (totals["ran"], totals["ok"], totals["skip"], totals["fail"],
      totals["error"], totals["xfail"], totals["xpass"], totals["process"]))
for kind in ("fail", "error", "process", "skip"):
    items = sorted(((n, r) for (k, r), n in reasons.items() if k == kind), reverse=True)
    if items:
        print("%s, by reason:" % kind)
        for n, r in items:
            print("  %4d  %s" % (n, r))
with open(os.path.join(out, "summary.txt"), "w") as f:
    for k in ("ran", "ok", "skip", "fail", "error", "xfail", "xpass", "process"):
        f.write("%s %d\n" % (k, totals[k]))
    for (k, r), n in sorted(reasons.items()):
        f.write("reason %s %d %s\n" % (k, n, r))

bad = []
if expect:
    ops = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, "==": lambda a, b: a == b}
    for line in open(expect):
        line = line.split("#")[0].strip()
        if not line:
            continue
        w = line.split()
        if w[0] == "pass" and len(w) == 2:
            got = outcome_of.get(w[1], "not run")
            if got != "ok":
                bad.append("%s: %s, want ok" % (w[1], got))
            continue
        k, op, n = w
        if not ops[op](totals[k], int(n)):
            bad.append("%s is %d, want %s %s" % (k, totals[k], op, n))
    for b in bad:
        print("EXPECTATION NOT MET: " + b)
    print("expectations (%s): %s" % (expect, "all met" if not bad else "%d not met" % len(bad)))
sys.exit(1 if bad else 0)
EOF
