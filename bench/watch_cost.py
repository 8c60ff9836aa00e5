#!/usr/bin/env python3
"""watch_cost.py - what WATCH costs the daemon: lock cycles with and without
watchers (A/B).

Usage: watch_cost.py [-H HOST:PORT] --pid PID [-n N] [-r ROUNDS] [-w WATCHERS]
                     [-d DEPTH]

One connection sends N LOCK/UNLOCK pairs of one name, DEPTH pairs at a time
(1, the default: each request waits for its answer, so watchers see every
change; more: pipelined bursts, whose changes coalesce), and reads the answers,
alternately with no watcher and with WATCHERS connections
watching that name (each reading its EVENT lines in a thread), ROUNDS
times. The daemon's CPU time (utime + stime from /proc/PID/stat) per
cycle is the column to compare; the watchers' EVENT lines received are
counted (a fast pipelined cycle may be coalesced: at most one line per
state change, never a queue). Embedded or distributed mode alike; in
distributed mode the cycles also cost ZooKeeper reads per change seen.
"""

import argparse
import os
import socket
import threading
import time

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def connect(addr):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    return s, s.makefile("rb")


def cycles(sock, f, name, n, depth):
    lock, unlock = ("LOCK %s\n" % name).encode(), ("UNLOCK %s\n" % name).encode()
    pair = lock + unlock
    if depth == 1:
        for _ in range(n):
            for req in (lock, unlock):   # each answered before the next: two changes
                sock.sendall(req)
                if not f.readline():
                    raise SystemExit("connection closed")
        return
    for done in range(0, n, depth):
        k = min(depth, n - done)
        sock.sendall(pair * k)
        for _ in range(2 * k):
            if not f.readline():
                raise SystemExit("connection closed")


class Watcher(threading.Thread):
    def __init__(self, addr, name):
        super().__init__(daemon=True)
        self.sock, self.f = connect(addr)
        self.sock.sendall(("WATCH %s\n" % name).encode())
        if not self.f.readline().startswith(b"OK "):
            raise SystemExit("WATCH refused")
        self.events = 0
        self.start()

    def run(self):
        try:
            for line in self.f:
                if line.startswith(b"EVENT "):
                    self.events += 1
        except OSError:
            pass                 # closed by close()

    def close(self):
        # shutdown() first: the reader's makefile() keeps the fd open past close().
        self.sock.shutdown(socket.SHUT_RDWR)
        self.join()
        self.sock.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-H", default="127.0.0.1:7411")
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("-n", type=int, default=20000)
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("-w", type=int, default=10)
    ap.add_argument("-d", type=int, default=1)
    a = ap.parse_args()
    sock, f = connect(a.H)
    name = "watchcost-%d" % os.getpid()
    results = {"no watcher": [], "%d watchers" % a.w: []}
    events = 0
    for _ in range(a.r):
        for what in results:
            watchers = [Watcher(a.H, name) for _ in range(a.w)] if "watchers" in what else []
            c0, t0 = cpu_s(a.pid), time.monotonic()
            cycles(sock, f, name, a.n, a.d)
            results[what].append((cpu_s(a.pid) - c0, time.monotonic() - t0))
            events += sum(w.events for w in watchers)
            for w in watchers:
                w.close()
    print("%-12s %16s %14s   (%d x %d LOCK/UNLOCK cycles on one connection, %d at a time)"
          % ("", "daemon CPU/cycle", "wall/cycle", a.r, a.n, a.d))
    for what, runs in results.items():
        cpu = sorted(r[0] for r in runs)[len(runs) // 2] / a.n * 1e9
        wall = sorted(r[1] for r in runs)[len(runs) // 2] / a.n * 1e9
        print("%-12s %13.0f ns %11.0f ns" % (what, cpu, wall))
    print("EVENT lines per watcher per cycle: %.3f"
          % (events / float(a.r * a.n * max(a.w, 1))))


if __name__ == "__main__":
    main()
