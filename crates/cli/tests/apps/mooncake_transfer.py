"""Mooncake Transfer Engine (PyPI mooncake-transfer-engine-non-cuda) moving
bytes between two processes over RDMA, unmodified, with no hand-written
topology: the engine must find the RDMA device by itself.

    mooncake_transfer.py target LOCAL_IP
        registers a region whose second half holds pattern B, prints
        "READY SESSION ADDR LEN", then, when a line comes on stdin, checks
        that the initiator wrote pattern A into the first half and prints
        "target ok".
    mooncake_transfer.py initiator LOCAL_IP SESSION ADDR LEN
        writes pattern A into the target's first half (transfer_sync_write,
        in pieces of 4 MiB and one of the rest), reads the second half back
        (transfer_sync_read), checks it is pattern B, prints "initiator ok".

Exit status 0 only when every byte was right.
"""
import ctypes
import mmap
import sys

from mooncake.engine import TransferEngine


def pattern(seed, n):
    # Bytes a seed determines (fast enough for tens of MiB).
    block = bytes(((i * 131 + seed * 17) ^ (i >> 8)) & 0xFF for i in range(65536))
    return (block * (n // len(block) + 1))[:n]


def region(n):
    m = mmap.mmap(-1, n)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    return m, addr


def engine(local_ip):
    e = TransferEngine()
    # P2P handshake: no metadata server; "rdma" with no device named: the
    # engine discovers its devices itself.
    r = e.initialize(local_ip, "P2PHANDSHAKE", "rdma", "")
    if r != 0:
        sys.exit(f"initialize: {r}")
    return e


def main():
    role, local_ip = sys.argv[1], sys.argv[2]
    e = engine(local_ip)
    if role == "target":
        n = 64 << 20
        m, addr = region(n)
        m[n // 2:] = pattern(2, n // 2)
        if e.register_memory(addr, n) != 0:
            sys.exit("register_memory failed")
        print(f"READY {local_ip}:{e.get_rpc_port()} {addr} {n}", flush=True)
        sys.stdin.readline()
        if m[: n // 2] != pattern(1, n // 2):
            bad = next(i for i in range(n // 2) if m[i] != pattern(1, n // 2)[i])
            sys.exit(f"target: byte {bad} of the written half is wrong")
        print("target ok", flush=True)
        return
    session, raddr, n = sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    m, addr = region(n)
    half = n // 2
    m[:half] = pattern(1, half)
    if e.register_memory(addr, n) != 0:
        sys.exit("register_memory failed")
    off = 0
    for size in (4 << 20, half - (4 << 20)):
        r = e.transfer_sync_write(session, addr + off, raddr + off, size)
        if r != 0:
            sys.exit(f"transfer_sync_write of {size} bytes: {r}")
        off += size
    r = e.transfer_sync_read(session, addr + half, raddr + half, half)
    if r != 0:
        sys.exit(f"transfer_sync_read: {r}")
    if m[half:] != pattern(2, half):
        sys.exit("initiator: the half read back is wrong")
    print("initiator ok", flush=True)


main()
