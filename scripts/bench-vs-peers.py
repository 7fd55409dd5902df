#!/usr/bin/env python3
"""softrdma next to its peers on this machine, in one sitting.

Every comparison runs softrdma and its peer alternately (the order flips each
round) for ROUNDS rounds, then prints the median of each side, the median of
the per-round ratios (each round's pair ran back to back, so its ratio sees
the same machine load) and every raw figure. Figures on shared 2-core VMs
vary by 30 % or more from run to run: read the ratios, not the absolutes.

Rows (two processes unless the name says --loopback). The rows of issue 22's
targets (lat, bw, cpu, qps) run softrdma's two processes each on an address
of its own (a free loopback address, SOFTRDMA_SHARE=0, SOFTRDMA_ADDR unset)
with the same-host path off (SOFTRDMA_SAME_HOST=udp): every packet goes
through the kernel's UDP, as between hosts.
- 8 B WRITE latency (median one-way) vs kernel UDP ping-pong with busy
  polling (sockperf --nonblocked, median); target <= 1.5x;
- WRITE 1 MiB vs softrdma-io's udp_bw example, gso-gro row (4 KiB RoCE-sized
  datagrams, GSO send and GRO receive, two threads of one process: what the
  kernel's UDP moves on one core pair; UDP_BW, default
  target/release/examples/udp_bw); target >= 0.8x;
- WRITE 64 KiB and 1 MiB vs UCX over TCP (ucx_perftest tag_bw), READ 1 MiB vs
  UCX over TCP ucp_get (target >= 5x); also the --loopback figures (both ends
  in one process);
- CPU-seconds per GB moved (user + system of both processes, from wait4),
  for softrdma and UCX over TCP; target at WRITE 1 MiB <= 1x;
- ib_write_bw -q 1000 vs -q 1 over `softrdma exec` (4 KiB; target >= 0.8x),
  and the same with `softrdma perf`;
- the main job's curve (`softrdma perf write-bw --loopback -a`): the median
  per size and whether every size from 4 KiB up reaches the 4 KiB figure;
- UCX over softrdma (rc_verbs) vs UCX over TCP: tag_bw 64 KiB, 1 MiB and
  tag_lat 8 B between two processes;
- the same-host path (issue 19): 8 B WRITE latency and WRITE 1 MiB between
  two processes sharing one device address (SAME_HOST_ADDR, default
  127.64.10.1), the path on (SOFTRDMA_SAME_HOST=shm) vs off (=udp, through
  the device process and the kernel) vs the peers (kernel UDP busy-poll
  ping-pong, UCX over TCP tag_bw), and UCX over softrdma (rc_verbs) with the
  path on vs UCX over TCP: tag_bw 1 MiB and tag_lat 8 B;
  also the path vs UCX's own shared memory with cross memory attach
  (UCX_TLS=posix,cma,self: one process_vm_readv per message), no target:
  what one kernel copy per byte gives on this machine;
- Open MPI, 2 ranks on one host, NetPIPE (NPopenmpi) at 1 MiB: pml ucx over
  softrdma (rc_verbs, both ranks on SH_ADDR: the same-host path on) vs pml
  ucx over TCP and vs
  Open MPI's own TCP BTL (ob1).

Units: GB/s = 10^9 bytes/s (ucx_perftest's and perftest's "MB/s" are MiB/s
and are converted). Latencies are one-way, half the round trip.

Environment: ROUNDS (default 3), DURATION seconds per point (default 3),
ONLY=name[,name] (rows: lat, bw, cpu, qps, curve, ucx, samehost, mpi), SR (the softrdma
binary; default $CARGO_TARGET_DIR or target, then release/softrdma), UDP_BW
(the udp_bw example, release/examples/udp_bw),
MARKDOWN=1 (also print the table as markdown for README, headed by the date,
the machine, the kernel and the load average).
"""

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
SR = os.environ.get("SR", os.path.join(TARGET, "release/softrdma"))
UDP_BW = os.environ.get("UDP_BW", os.path.join(TARGET, "release/examples/udp_bw"))
MARKDOWN = os.environ.get("MARKDOWN", "") not in ("", "0")
ROUNDS = int(os.environ.get("ROUNDS", "3"))
D = int(os.environ.get("DURATION", "3"))
ONLY = set(filter(None, os.environ.get("ONLY", "").split(",")))
_port = [int(os.environ.get("PORT", "13370"))]


def port():
    _port[0] += 1
    return _port[0]


def want(group):
    return not ONLY or group in ONLY


class Run:
    """Output and CPU time of one client/server pair."""

    def __init__(self, out, cpu_s):
        self.out = out
        self.cpu_s = cpu_s


def _wait(p, timeout):
    """Waits for p with wait4: returns (exit code, user+system seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid:
            p.returncode = os.waitstatus_to_exitcode(status)
            return p.returncode, ru.ru_utime + ru.ru_stime
        if time.monotonic() > deadline:
            p.kill()
            pid, status, ru = os.wait4(p.pid, 0)
            p.returncode = -9
            return -9, ru.ru_utime + ru.ru_stime
        time.sleep(0.01)


def listening(tcp_port):
    """Whether some socket listens on tcp_port (read from /proc: a probing
    connect would be taken for the client by perftest-style servers)."""
    want = f":{tcp_port:04X}"
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = open(f).read().splitlines()[1:]
        except OSError:
            continue
        for l in lines:
            c = l.split()
            if c[1].endswith(want) and c[3] == "0A":
                return True
    return False


def pair(server, client, env=None, tcp_port=None, settle=1.0, timeout=180, server_ends=True):
    """Starts server, waits for its TCP port (or `settle` s), runs client.
    Returns Run(client stdout, CPU-seconds of both) or raises."""
    e = dict(os.environ, **(env or {}))
    # None in env: the variable is removed.
    e = {k: v for k, v in e.items() if v is not None}
    # The server writes to a file: a pipe nobody reads while the client runs
    # would fill (perftest prints a line per QP) and stop it.
    slog = tempfile.TemporaryFile(mode="w+")
    s = subprocess.Popen(server, env=e, stdout=slog, stderr=subprocess.STDOUT, text=True)
    t0 = time.monotonic()
    if tcp_port is not None:
        while not listening(tcp_port):
            if time.monotonic() - t0 > 20 or s.poll() is not None:
                s.kill()
                slog.seek(0)
                raise RuntimeError(f"server never listened: {' '.join(server)}\n{slog.read()}")
            time.sleep(0.05)
    else:
        time.sleep(settle)
    c = subprocess.Popen(client, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    cout = c.stdout.read()
    crc, ccpu = _wait(c, timeout)
    if not server_ends:
        s.terminate()
    src, scpu = _wait(s, 30)
    slog.seek(0)
    srv_out = slog.read()
    if crc != 0 or (server_ends and src != 0):
        raise RuntimeError(
            f"failed (client {crc}, server {src}): {' '.join(client)}\n{cout[-2000:]}\n--- server\n{srv_out[-2000:]}"
        )
    return Run(cout, ccpu + scpu)


# ---------------------------------------------------------------- softrdma --
SH_ADDR = os.environ.get("SAME_HOST_ADDR", "127.64.10.1")
# Issue 22's rows: each process on an exclusive address of its own, the
# same-host path off, so that every packet crosses the kernel's UDP.
WIRE_ENV = {"SOFTRDMA_SAME_HOST": "udp", "SOFTRDMA_SHARE": "0", "SOFTRDMA_ADDR": None}


def sr_two(tool, args, same_host=None):
    """softrdma perf TOOL between two processes -> (JSON results[0], cpu, doc).
    With same_host ("shm" or "udp"): both on the one shared address SH_ADDR,
    SOFTRDMA_SAME_HOST=same_host. Without: each on a free loopback address
    of its own, the same-host path off (WIRE_ENV)."""
    p = port()
    srv = [SR, "perf", tool, "-p", str(p), "--json"]
    cli = [SR, "perf", tool, SH_ADDR if same_host else "127.0.0.1", "-p", str(p), "--json", "-D", str(D)] + args
    env = WIRE_ENV
    if same_host:
        srv += ["-d", SH_ADDR]
        cli += ["-d", SH_ADDR]
        env = {"SOFTRDMA_SAME_HOST": same_host, "SOFTRDMA_BIN": SR}
    r = pair(srv, cli, env=env, tcp_port=p)
    doc = json.loads(r.out)
    return doc["results"][0], r.cpu_s, doc


def sr_loop(tool, args, secs=None):
    cmd = [SR, "perf", tool, "--loopback", "--json", "-D", str(secs or D)] + args
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise RuntimeError(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return json.loads(r.stdout)


def gbps(mib_s):
    return mib_s * 1048576 / 1e9


def sr_bw(tool, size, same_host=None):
    res, cpu, _ = sr_two(tool, ["-s", str(size)], same_host)
    moved = res["bytes"] * res["iterations"]
    return gbps(res["bw_average_mib_s"]), cpu / (moved / 1e9)


def sr_lat(same_host=None):
    res, _, _ = sr_two("write-lat", ["-s", "8"], same_host)
    return res["t_typical_us"]


# --------------------------------------------------------------------- UCX --
def ucx(test, size, iters, over="tcp", same_host=None):
    """ucx_perftest between two processes -> (GB/s or None, typical us, CPU-s/GB).
    same_host: SOFTRDMA_SAME_HOST for UCX over softrdma (None: the default, on)."""
    p = port()
    if over == "tcp":
        env, pre = {"UCX_TLS": "tcp"}, []
    elif over == "cma":
        # UCX's shared memory with cross memory attach (process_vm_readv of
        # a whole message in its rendezvous): what one kernel copy gives.
        env, pre = {"UCX_TLS": "posix,cma,self"}, []
    else:
        env, pre = {"UCX_TLS": "rc_v,self", "UCX_NET_DEVICES": "softrdma0:1"}, [SR, "exec", "--"]
        if same_host:
            # Both processes on the one shared address (the path runs
            # between members of device processes; `softrdma exec` alone
            # gives each process an exclusive loopback address of its own).
            env["SOFTRDMA_SAME_HOST"] = same_host
            env["SOFTRDMA_ADDR"] = SH_ADDR
    base = pre + ["ucx_perftest", "-t", test, "-s", str(size), "-n", str(iters), "-p", str(p)]
    r = pair(base, base[: len(pre)] + ["ucx_perftest", "127.0.0.1"] + base[len(pre) + 1 :], env=env, tcp_port=p)
    final = [l for l in r.out.splitlines() if l.startswith("Final:")]
    if not final:
        raise RuntimeError(f"ucx_perftest {test} over {over}: no Final line\n{r.out[-2000:]}")
    # Final: iters typical avg overall bw_avg(MiB/s) bw_overall rate_avg rate_overall
    f = final[0].split()
    bw = gbps(float(f[6]))
    moved = size * int(f[1])
    return bw, float(f[2]), r.cpu_s / (moved / 1e9)


# ---------------------------------------------------------------- sockperf --
def sockperf_lat():
    p = port()
    r = pair(
        ["sockperf", "server", "-i", "127.0.0.1", "-p", str(p), "--nonblocked"],
        ["sockperf", "ping-pong", "-i", "127.0.0.1", "-p", str(p), "-m", "14", "-t", str(D), "--nonblocked"],
        settle=1.0,
        server_ends=False,
    )
    m = re.search(r"percentile 50\.000 =\s*([0-9.]+)", r.out)
    if not m:
        raise RuntimeError(f"sockperf: no median in\n{r.out[-2000:]}")
    return float(m.group(1))


# ------------------------------------------------------------------ udp_bw --
def udp_bw_gso_gro():
    """softrdma-io's udp_bw example, gso-gro row -> GB/s of payload (4 KiB
    datagrams, GSO send, GRO receive, sender and receiver threads of one
    process)."""
    cmd = [UDP_BW, "--only", "gso-gro", "--secs", str(D)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    m = re.search(r"gso-gro:\s*([0-9.]+) GB/s payload", r.stdout)
    if r.returncode != 0 or not m:
        raise RuntimeError(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}")
    return float(m.group(1))


# ---------------------------------------------------------------- perftest --
def perftest_bw(qps):
    """ib_write_bw -q QPS -s 4096 over softrdma exec -> GB/s. By count
    (~800 MB in all): perftest's duration mode prints no result with
    hundreds of QPs."""
    p = port()
    n = str(200000 // qps)
    args = ["ib_write_bw", "-q", str(qps), "-s", "4096", "-n", n, "-F", "-p", str(p)]
    r = pair([SR, "exec", "--"] + args, [SR, "exec", "--"] + args + ["127.0.0.1"], env=WIRE_ENV, tcp_port=p)
    rows = [l.split() for l in r.out.splitlines() if re.match(r"^\s*4096\s+\d+\s", l)]
    if not rows:
        raise RuntimeError(f"ib_write_bw -q {qps}: no result row\n{r.out[-2000:]}")
    return gbps(float(rows[-1][3]))


def sr_qps(qps):
    res, _, _ = sr_two("write-bw", ["-s", "4096", "-q", str(qps)])
    return gbps(res["bw_average_mib_s"])


def netpipe(over):
    """NetPIPE between 2 Open MPI ranks on this host at 1 MiB: GB/s, the mean
    of its three points (1 MiB - 3, 1 MiB, 1 MiB + 3). `over`: "softrdma"
    (pml ucx, rc_verbs, under `softrdma exec`), "ucx-tcp" (pml ucx over
    UCX's TCP transport) or "ob1-tcp" (Open MPI's TCP BTL)."""
    mpirun = ["mpirun", "--allow-run-as-root", "-np", "2", "--mca", "mtl", "^ofi"]
    if over == "softrdma":
        # Both ranks on the one shared address, so the same-host path
        # carries their traffic.
        cmd = [SR, "exec", "--addr", SH_ADDR, "--"] + mpirun + ["--mca", "pml", "ucx", "--mca", "btl", "self",
                                              "-x", "UCX_TLS=rc_v,self", "-x", "UCX_NET_DEVICES=softrdma0:1"]
    elif over == "ucx-tcp":
        cmd = mpirun + ["--mca", "pml", "ucx", "--mca", "pml_ucx_tls", "any", "--mca", "pml_ucx_devices", "any",
                        "--mca", "btl", "self", "-x", "UCX_TLS=tcp,self"]
    else:
        cmd = mpirun + ["--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo"]
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "np.out")
        subprocess.run(cmd + ["NPopenmpi", "-l", "1048576", "-u", "1048576", "-o", out],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=180, check=True)
        mbps = [float(l.split()[1]) for l in open(out) if l.strip()]
    if not mbps:
        raise RuntimeError(f"NetPIPE over {over} printed nothing")
    return statistics.mean(mbps) / 8e3


# ------------------------------------------------------------------ report --
def med(v):
    return statistics.median(v) if v else float("nan")


class Table:
    def __init__(self):
        self.rows = []

    def pair(self, name, ours, peer, peer_name, target, higher_better=True):
        ratios = [a / b for a, b in zip(ours, peer) if b]
        r = med(ratios)
        ok = ""
        if target is not None:
            ok = "met" if (r >= target if higher_better else r <= target) else "NOT met"
            ok = f"target {'>=' if higher_better else '<='} {target}x: {ok}"
        self.rows.append(
            (name, f"{med(ours):.3f}", f"{med(peer):.3f}", f"{r:.2f}x", f"{peer_name}; {ok}",
             " ".join(f"{x:.3g}" for x in ours) + " / " + " ".join(f"{x:.3g}" for x in peer),
             peer_name, ok)
        )

    def single(self, name, ours, note):
        self.rows.append((name, f"{med(ours):.3f}", "", "", note, " ".join(f"{x:.3g}" for x in ours), note, ""))

    def print(self):
        print(f"{'metric':<40} {'softrdma':>9} {'peer':>9} {'ratio':>7}  peer; target   [runs softrdma / peer]")
        for n, a, b, r, note, raw, _, _ in self.rows:
            print(f"{n:<40} {a:>9} {b:>9} {r:>7}  {note}   [{raw}]")

    def markdown(self, head):
        """The table as markdown, for README."""
        print(f"\n{head}\n")
        print("| metric | softrdma | peer | ratio | target |")
        print("| --- | --- | --- | --- | --- |")
        for n, a, b, r, _, raw, peer_name, ok in self.rows:
            peer = f"{peer_name} {b}" if b else peer_name
            target = ok.removeprefix("target ") if ok else ""
            print(f"| {n.strip()} | {a} | {peer} | {r} | {target} |")


def alternate(*fs):
    """ROUNDS rounds of each of fs, the order reversing each round -> one
    list of figures per function. A round in which one of them failed is
    left out of every list (the ratios pair figures of one round)."""
    vs = [[] for _ in fs]
    for i in range(ROUNDS):
        order = list(range(len(fs))) if i % 2 == 0 else list(reversed(range(len(fs))))
        got = {}
        for j in order:
            try:
                got[j] = fs[j]()
            except Exception as e:  # noqa: BLE001 - report and go on
                print(f"  a run failed: {e}", file=sys.stderr)
        if len(got) == len(fs):
            for j, v in enumerate(vs):
                v.append(got[j])
    return vs


def main():
    for tool in ["ucx_perftest", "sockperf", "ib_write_bw"]:
        if not shutil.which(tool):
            sys.exit(f"{tool} missing: apt-get install -y ucx-utils sockperf perftest")
    cpus = os.cpu_count()
    model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    load0 = os.getloadavg()[0]
    t_start = time.monotonic()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    head = f"softrdma vs peers, {started}, {cpus} CPUs ({model}), kernel {os.uname().release}"
    print(head)
    print(f"{ROUNDS} rounds alternated, {D} s per point; medians; ratio = median of per-round ratios\n")
    t = Table()

    if want("lat"):
        ours, peer = alternate(sr_lat, sockperf_lat)
        t.pair("8 B WRITE lat, median one-way (us)", ours, peer, "UDP busy-poll ping-pong median", 1.5, False)
        loop = [sr_loop("write-lat", ["-s", "8"])["results"][0]["t_typical_us"] for _ in range(ROUNDS)]
        t.single("8 B WRITE lat --loopback (us)", loop, "both ends in one process")

    cpu_rows = []
    if want("bw") or want("cpu"):
        for name, tool, size, test, target in [
            ("WRITE 64 KiB (GB/s)", "write-bw", 65536, "tag_bw", 2.0),
            ("WRITE 1 MiB (GB/s)", "write-bw", 1048576, "tag_bw", 1.0),
            ("READ 1 MiB (GB/s)", "read-bw", 1048576, "ucp_get", 5.0),
        ]:
            iters = 20000 if size <= 65536 else 3000
            if name.startswith("WRITE 1 MiB"):
                # Issue 22's first target: the kernel's UDP on one core
                # pair (udp_bw gso-gro) in the same rounds.
                ours, peer, wire = alternate(lambda: sr_bw(tool, size), lambda: ucx(test, size, iters), udp_bw_gso_gro)
                t.pair(name, [o[0] for o in ours], wire, "udp_bw gso-gro", 0.8)
                t.pair("  same vs UCX over TCP", [o[0] for o in ours], [p[0] for p in peer], f"UCX tcp {test}", None)
            else:
                ours, peer = alternate(lambda: sr_bw(tool, size), lambda: ucx(test, size, iters))
                t.pair(name, [o[0] for o in ours], [p[0] for p in peer], f"UCX tcp {test}", target)
            cpu_rows.append((name, [o[1] for o in ours], [p[2] for p in peer], test))
            loop = [gbps(sr_loop(tool, ["-s", str(size)])["results"][0]["bw_average_mib_s"]) for _ in range(ROUNDS)]
            t.single(f"  same, --loopback", loop, "both ends in one process")
        for name, ours, peer, test in cpu_rows:
            target = 1.0 if name.startswith("WRITE 1 MiB") else None
            t.pair(f"CPU-s per GB, {name.split(' (')[0]}", ours, peer, f"UCX tcp {test} (lower is better)", target, False)

    if want("qps"):
        one, many = alternate(lambda: perftest_bw(1), lambda: perftest_bw(1000))
        t.pair("ib_write_bw 4 KiB -q 1000 (GB/s)", many, one, "the same with -q 1", 0.8)
        one, many = alternate(lambda: sr_qps(1), lambda: sr_qps(1000))
        t.pair("softrdma perf write-bw 4 KiB -q 1000", many, one, "the same with -q 1", 0.8)

    if want("curve"):
        curves = []
        for _ in range(ROUNDS):
            doc = sr_loop("write-bw", ["-a"], secs=1)
            curves.append({r["bytes"]: gbps(r["bw_average_mib_s"]) for r in doc["results"]})
        sizes = sorted(curves[0])
        meds = {s: med([c[s] for c in curves if s in c]) for s in sizes}
        base = meds.get(4096)
        print("main job: softrdma perf write-bw --loopback -a (GB/s, median of rounds)")
        print("  " + "  ".join(f"{s if s < 1024 else str(s // 1024) + 'K'}:{meds[s]:.2f}" for s in sizes))
        big = [s for s in sizes if s >= 4096]
        worst = min(big, key=lambda s: meds[s])
        print(
            f"  every size >= 4 KiB at least the 4 KiB figure ({base:.2f}): "
            f"{'yes' if meds[worst] >= base * 0.95 else 'NO'} (lowest {worst} B: {meds[worst]:.2f}, "
            f"{meds[worst] / base:.2f}x of 4 KiB)\n"
        )
        t.single(
            "main job --loopback -a, lowest size >= 4 KiB (GB/s)",
            [meds[worst]],
            f"{worst} B, {meds[worst] / base:.2f}x of the 4 KiB {base:.2f} GB/s (target: no size below 4 KiB's)",
        )

    if want("ucx"):
        for name, test, size, iters, idx, target, hb in [
            ("UCX tag_bw 64 KiB (GB/s)", "tag_bw", 65536, 20000, 0, 1.0, True),
            ("UCX tag_bw 1 MiB (GB/s)", "tag_bw", 1048576, 2000, 0, 1.0, True),
            ("UCX tag_lat 8 B (us)", "tag_lat", 8, 50000, 1, None, False),
        ]:
            ours, peer = alternate(lambda: ucx(test, size, iters, "softrdma"), lambda: ucx(test, size, iters))
            t.pair(name + " over softrdma", [o[idx] for o in ours], [p[idx] for p in peer], "UCX over TCP", target, hb)

    if want("samehost"):
        on, peer = alternate(lambda: sr_lat("shm"), sockperf_lat)
        t.pair("same-host 8 B WRITE lat, path on (us)", on, peer, "UDP busy-poll ping-pong median", 1.0, False)
        off, peer2 = alternate(lambda: sr_lat("udp"), sockperf_lat)
        t.pair("same-host 8 B WRITE lat, path off (us)", off, peer2, "UDP busy-poll ping-pong median", None, False)
        on2, off2 = alternate(lambda: sr_lat("shm"), lambda: sr_lat("udp"))
        t.pair("same-host 8 B WRITE lat, on vs off (us)", on2, off2, "the path off (udp)", None, False)
        on, peer = alternate(lambda: sr_bw("write-bw", 1048576, "shm"), lambda: ucx("tag_bw", 1048576, 3000))
        t.pair("same-host WRITE 1 MiB, path on (GB/s)", [o[0] for o in on], [p[0] for p in peer], "UCX tcp tag_bw", 1.5)
        off, peer2 = alternate(lambda: sr_bw("write-bw", 1048576, "udp"), lambda: ucx("tag_bw", 1048576, 3000))
        t.pair("same-host WRITE 1 MiB, path off (GB/s)", [o[0] for o in off], [p[0] for p in peer2], "UCX tcp tag_bw", None)
        on3, cma = alternate(lambda: sr_bw("write-bw", 1048576, "shm"), lambda: ucx("tag_bw", 1048576, 3000, "cma"))
        t.pair("same-host WRITE 1 MiB, path on vs UCX cma (GB/s)", [o[0] for o in on3], [c[0] for c in cma],
               "UCX posix+cma tag_bw", None)
        on2, off2 = alternate(lambda: sr_bw("write-bw", 1048576, "shm"), lambda: sr_bw("write-bw", 1048576, "udp"))
        t.pair("same-host WRITE 1 MiB, on vs off (GB/s)", [o[0] for o in on2], [o[0] for o in off2], "the path off (udp)", None)
        # UCX over softrdma (rc_verbs) with the path on, both processes on
        # the one shared address SH_ADDR, vs UCX over TCP.
        for name, test, size, iters, idx, target, hb in [
            ("same-host UCX tag_bw 1 MiB over softrdma, path on (GB/s)", "tag_bw", 1048576, 2000, 0, 1.0, True),
            ("same-host UCX tag_lat 8 B over softrdma, path on (us)", "tag_lat", 8, 50000, 1, 1.0, False),
        ]:
            ours, peer = alternate(lambda: ucx(test, size, iters, "softrdma", "shm"), lambda: ucx(test, size, iters))
            t.pair(name, [o[idx] for o in ours], [p[idx] for p in peer], "UCX over TCP", target, hb)

    if want("mpi"):
        if not shutil.which("NPopenmpi"):
            sys.exit("NPopenmpi missing: apt-get install -y netpipe-openmpi")
        ours, peer = alternate(lambda: netpipe("softrdma"), lambda: netpipe("ucx-tcp"))
        t.pair("Open MPI 2 ranks NetPIPE 1 MiB (GB/s)", ours, peer, "pml ucx over TCP", 1.0)
        ours, peer = alternate(lambda: netpipe("softrdma"), lambda: netpipe("ob1-tcp"))
        t.pair("  same vs Open MPI's TCP BTL (GB/s)", ours, peer, "ob1 btl tcp", 1.0)

    t.print()
    took = time.monotonic() - t_start
    load1 = os.getloadavg()[0]
    print(f"\ntook {took / 60:.1f} min; load average {load0:.1f} at the start, {load1:.1f} at the end")
    if MARKDOWN:
        t.markdown(f"{head}, load average {load0:.1f}-{load1:.1f}, `ROUNDS={ROUNDS} DURATION={D}`")


if __name__ == "__main__":
    main()
