#!/usr/bin/env python3
"""check_cost.py - what a CHECK costs the daemon, against a PING (A/B).

Usage: check_cost.py [-H HOST:PORT] --pid PID [-n N] [-r ROUNDS]

One connection takes a lock, then sends N pipelined CHECKs of it, reads the
N answers, and does the same with N PINGs; ROUNDS times, alternating. The
daemon's CPU time (utime + stime from /proc/PID/stat) over each batch,
divided by N, is what one request cost it; wall time per request is shown
too (one connection, pipelined: the daemon's throughput for it). The client
is Python, so only the daemon's CPU column compares CHECK with PING fairly.
"""

import argparse
import os
import socket
import time

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def batch(sock, f, line, n):
    payload = (line + "\n").encode() * n
    sock.sendall(payload)
    for _ in range(n):
        if not f.readline():
            raise SystemExit("connection closed")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-H", default="127.0.0.1:7411")
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("-n", type=int, default=200000)
    ap.add_argument("-r", type=int, default=5)
    a = ap.parse_args()
    host, port = a.H.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    f = sock.makefile("rb")
    name = "checkcost-%d" % os.getpid()
    sock.sendall(b"LOCK %s\n" % name.encode())
    reply = f.readline().split()
    if reply[:1] != [b"OK"]:
        raise SystemExit("LOCK: %r" % reply)
    results = {"CHECK": [], "PING": []}
    for _ in range(a.r):
        for what, line in (("CHECK", "CHECK " + name), ("PING", "PING")):
            c0, t0 = cpu_s(a.pid), time.monotonic()
            batch(sock, f, line, a.n)
            results[what].append((cpu_s(a.pid) - c0, time.monotonic() - t0))
    print("%-6s %14s %14s   (%d x %d requests, pipelined on one connection)"
          % ("", "daemon CPU/req", "wall/req", a.r, a.n))
    for what, runs in results.items():
        cpu = sorted(r[0] for r in runs)[len(runs) // 2] / a.n * 1e9
        wall = sorted(r[1] for r in runs)[len(runs) // 2] / a.n * 1e9
        print("%-6s %11.0f ns %11.0f ns   (median of %d)" % (what, cpu, wall, len(runs)))
    sock.sendall(b"UNLOCK %s\n" % name.encode())


if __name__ == "__main__":
    main()
