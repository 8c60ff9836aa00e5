#!/usr/bin/env python3
"""set_cost.py - what a set of locks (LOCK a,b,...) costs against taking its
names one by one, on one connection (A/B, one run).

Usage: set_cost.py [-H HOST:PORT] [-n CYCLES] [-r ROUNDS] [-k NAMES]

Each cycle takes and releases, one request at a time (each waits for its
answer), fresh names per round:
  single   LOCK a / UNLOCK a
  set      LOCK a,b,... / UNLOCK a,b,...          (K names)
  one-by-one  LOCK a, LOCK b, ... / UNLOCK a, UNLOCK b, ...  (K names)
and prints the median wall time per cycle over ROUNDS rounds, alternating.
In distributed mode the set costs the ZooKeeper round trips of its names,
taken one after another (PROTOCOL.md, Sets of locks).
"""

import argparse
import os
import socket
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-H", default="127.0.0.1:7411")
    ap.add_argument("-n", type=int, default=500)
    ap.add_argument("-r", type=int, default=5)
    ap.add_argument("-k", type=int, default=2)
    a = ap.parse_args()
    host, port = a.H.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)))
    f = sock.makefile("rb")

    def ask(line):
        sock.sendall((line + "\n").encode())
        reply = f.readline().decode()
        if not reply.startswith("OK "):
            raise SystemExit("%s: %r" % (line, reply))

    def run(kind, prefix):
        names = ["%s-%d" % (prefix, i) for i in range(a.k)]
        t0 = time.monotonic()
        for _ in range(a.n):
            if kind == "single":
                ask("LOCK " + names[0])
                ask("UNLOCK " + names[0])
            elif kind == "set":
                ask("LOCK " + ",".join(names))
                ask("UNLOCK " + ",".join(names))
            else:
                for n in names:
                    ask("LOCK " + n)
                for n in names:
                    ask("UNLOCK " + n)
        return (time.monotonic() - t0) / a.n

    kinds = ("single", "set", "one-by-one")
    results = {k: [] for k in kinds}
    for r in range(a.r):
        for k in kinds:
            results[k].append(run(k, "setcost-%d-%d-%s" % (os.getpid(), r, k)))
    print("%-11s %12s   (%d names, %d x %d cycles, one request at a time)"
          % ("", "wall/cycle", a.k, a.r, a.n))
    for k in kinds:
        print("%-11s %9.0f us" % (k, sorted(results[k])[len(results[k]) // 2] * 1e6))


if __name__ == "__main__":
    main()
