# The summary of a per-module run of rdma-core's suite (tests/distro/pyverbs.sh
# over softrdma, tests/rxe-vm/rdma-core-suite.sh on rxe): reads OUT/MODULE.log,
# .status ("RC SECONDS") and .jsonl (pyverbs_run.py's outcomes), prints the
# per-module table and the counts per outcome and reason, writes
# OUT/summary.txt ("outcome COUNT" lines, then "reason OUTCOME COUNT TEXT")
# and OUT/passed.txt (one "pass TEST_ID" line per test that passed, sorted),
# then checks the expectation file EXPECT if one is given (see pyverbs.sh);
# exits 1 if one of its lines does not hold. A comment line "# pending
# ISSUE: pass TEST_ID" is no requirement, but a NOTE says when that test
# passes already.
#
#   python3 pyverbs_summary.py OUT [EXPECT]
import collections, json, os, re, sys

out = sys.argv[1]
expect = sys.argv[2] if len(sys.argv) > 2 else ""
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

with open(os.path.join(out, "passed.txt"), "w") as f:
    for t in sorted(t for t, o in outcome_of.items() if o == "ok"):
        f.write("pass %s\n" % t)

bad = []
if expect:
    ops = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, "==": lambda a, b: a == b}
    notes = []
    for line in open(expect):
        # "# pending issue N: pass TEST_ID": required once issue N lands;
        # say so when it passes already (uncomment it then).
        m = re.match(r"#\s*pending ([^:]+):\s*pass\s+(\S+)", line.strip())
        if m and outcome_of.get(m.group(2)) == "ok":
            notes.append("%s passes now (pending %s): uncomment its line" % (m.group(2), m.group(1)))
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
    for n in notes:
        print("NOTE: " + n)
    for b in bad:
        print("EXPECTATION NOT MET: " + b)
    print("expectations (%s): %s" % (expect, "all met" if not bad else "%d not met" % len(bad)))
sys.exit(1 if bad else 0)
