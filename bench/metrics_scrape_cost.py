#!/usr/bin/env python3
"""metrics_scrape_cost.py - what one GET /metrics costs with many locks held
and awaited (docs/PERFORMANCE.md, "Metrics: a scrape at a million locks").

Usage: metrics_scrape_cost.py -H HOST:PORT -m HOST:PORT [-n LOCKS] [-c CONNS]
                              [-s SCRAPES]

Scrapes SCRAPES times with nothing held (the baseline), then takes LOCKS
exclusive locks of distinct names over CONNS connections (pipelined, LOCKS /
CONNS each: the daemon's max_locks_per_client must allow it), queues one
waiter behind the first of them, and scrapes SCRAPES times again. Prints
the median and largest scrape time of each, and the two ages the scrape
read. The daemon is not started here: run it on loopback with
metrics_listen set, e.g.

    lockbrokerd -l 127.0.0.1:7411 -c bench.conf   # [server] metrics_listen,
                                                  # max_locks_per_client 100000
"""

import argparse
import http.client
import socket
import statistics
import time


def scrape(addr):
    host, port = addr.rsplit(":", 1)
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("GET", "/metrics")
    body = conn.getresponse().read().decode()
    conn.close()
    return time.perf_counter() - t0, body


def gauge(body, name):
    for line in body.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def timed(addr, n):
    times, body = [], ""
    for _ in range(n):
        t, body = scrape(addr)
        times.append(t)
    return times, body


def connect(addr):
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)))
    return s, s.makefile("rb")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-H", "--host", default="127.0.0.1:7411")
    ap.add_argument("-m", "--metrics", default="127.0.0.1:7419")
    ap.add_argument("-n", "--locks", type=int, default=1000000)
    ap.add_argument("-c", "--conns", type=int, default=10)
    ap.add_argument("-s", "--scrapes", type=int, default=20)
    a = ap.parse_args()

    base, _ = timed(a.metrics, a.scrapes)
    per = a.locks // a.conns
    conns = []
    t0 = time.perf_counter()
    for c in range(a.conns):
        s, f = connect(a.host)
        conns.append((s, f))
        batch = 5000
        for start in range(0, per, batch):
            end = min(per, start + batch)
            s.sendall("".join("LOCK n%d-%d\n" % (c, i) for i in range(start, end)).encode())
            for _ in range(start, end):
                line = f.readline()
                if not line.startswith(b"OK "):
                    raise SystemExit("LOCK: %r" % line)
    took = time.perf_counter() - t0
    w, wf = connect(a.host)
    w.sendall(b"LOCK n0-0 600000\n")
    time.sleep(0.01)     # let the waiter queue (a bench: the ages need not be exact)
    loaded, body = timed(a.metrics, a.scrapes)
    print("locks held: %s (taken in %.1f s), waiting: %s" % (
        gauge(body, "lockbroker_locks_held"), took, gauge(body, "lockbroker_lock_waiters")))
    print("oldest hold %.3f s, longest wait %.3f s" % (
        gauge(body, "lockbroker_oldest_hold_seconds"),
        gauge(body, "lockbroker_longest_wait_seconds")))
    for what, t in (("no locks", base), ("%d locks" % a.locks, loaded)):
        print("scrape with %s: median %.2f ms, max %.2f ms (%d scrapes, %d bytes)" % (
            what, statistics.median(t) * 1e3, max(t) * 1e3, len(t), len(body)))
    for s, f in conns:
        s.close()
    w.close()


if __name__ == "__main__":
    main()
