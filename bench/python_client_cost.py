#!/usr/bin/env python3
"""python_client_cost.py - one lock/unlock cycle through the Python client
library (clients/python) against the raw protocol, same daemon, same run.

Usage: python_client_cost.py [-H HOST:PORT] [-n CYCLES] [-r ROUNDS]

Rows, each the median of ROUNDS runs of CYCLES sequential cycles on one name:
  raw          LOCK/UNLOCK on one kept connection (what a hand-written client does)
  raw+connect  a new connection per cycle, as the library opens one per hold
  library      `with client.lock(name)`: connection, LOCK, CHECK, UNLOCK, close
  library, check=False   the same without the jeopardy CHECK
"""

import argparse
import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "clients", "python"))
import lockbroker  # noqa: E402


def raw(addr, name, n):
    s = socket.create_connection(addr)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    f = s.makefile("rb")
    for _ in range(n):
        s.sendall(b"LOCK %s\n" % name)
        f.readline()
        s.sendall(b"UNLOCK %s\n" % name)
        f.readline()
    s.close()


def raw_connect(addr, name, n):
    for _ in range(n):
        s = socket.create_connection(addr)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        f = s.makefile("rb")
        s.sendall(b"LOCK %s\n" % name)
        f.readline()
        s.sendall(b"UNLOCK %s\n" % name)
        f.readline()
        f.close()
        s.close()


def library(client, name, n):
    for _ in range(n):
        with client.lock(name):
            pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-H", default="127.0.0.1:7411")
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("-r", type=int, default=3)
    a = ap.parse_args()
    host, port = a.H.rsplit(":", 1)
    addr = (host, int(port))
    name = "pycost-%d" % os.getpid()
    checked = lockbroker.connect(a.H)
    unchecked = lockbroker.connect(a.H, check=False)
    rows = [("raw", lambda: raw(addr, name.encode(), a.n)),
            ("raw+connect", lambda: raw_connect(addr, name.encode(), a.n)),
            ("library", lambda: library(checked, name, a.n)),
            ("library, check=False", lambda: library(unchecked, name, a.n))]
    times = {r[0]: [] for r in rows}
    for _ in range(a.r):
        for label, fn in rows:
            t0 = time.perf_counter()
            fn()
            times[label].append((time.perf_counter() - t0) / a.n)
    print("%-22s %12s %12s   (%d x %d cycles, medians)" % ("", "us/cycle", "cycles/s", a.r, a.n))
    for label, _ in rows:
        t = sorted(times[label])[len(times[label]) // 2]
        print("%-22s %12.0f %12.0f" % (label, t * 1e6, 1 / t))
    checked.close()
    unchecked.close()


if __name__ == "__main__":
    main()
