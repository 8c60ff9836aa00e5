#!/usr/bin/env python3
"""idle_requests.py - what an idle distributed daemon costs ZooKeeper, and
the CHECK windows it gives, for one or more lockbrokerd binaries (A/B).

Usage: idle_requests.py [-d SECONDS] [-r ROUNDS] [--tick MS] [--session MS]
                        LOCKBROKERD [LOCKBROKERD...]

Starts one ZooKeeper server on loopback (tests/e2e/zkharness.py, tickTime
--tick), then, ROUNDS times, each binary in turn: a daemon with
session_timeout_ms = --session (and tick_ms = --tick when the binary knows
that setting), one client holding one lock and doing nothing else. Over
SECONDS it reads the server's `mntr` (packets received) and `srvr` (zxid)
before and after, and sends `CHECK` every 250 ms. Printed per binary and
round: ZooKeeper requests per second from the daemon (packets received,
less the 4-letter-word connections of the measurement), transactions per
second (zxid delta), and the smallest and largest <safe-ms> seen.
"""

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "e2e"))
import zkharness  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def knows_tick(binary):
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write("[zookeeper]\ntick_ms = 500\n")
    try:
        return subprocess.run([binary, "-t", "-c", f.name], capture_output=True).returncode == 0
    finally:
        os.unlink(f.name)


def line(f):
    text = f.readline()
    if not text:
        raise SystemExit("the daemon closed the connection")
    return text.rstrip("\n")


def measure(binary, zk, seconds, tick, session, root):
    port = free_port()
    conf = "[zookeeper]\nhosts = %s\nroot = %s\nsession_timeout_ms = %d\n" % (
        zk.connect_string, root, session)
    if knows_tick(binary):
        conf += "tick_ms = %d\n" % tick
    with tempfile.NamedTemporaryFile("w", suffix=".conf", delete=False) as f:
        f.write(conf)
    p = subprocess.Popen([binary, "-c", f.name, "-l", "127.0.0.1:%d" % port],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        for line_ in p.stderr:
            if "nonfair" in line_ and "every daemon" in line_:
                break
        else:
            raise SystemExit("%s did not reach ZooKeeper" % binary)
        s = socket.create_connection(("127.0.0.1", port))
        fr = s.makefile("r")
        s.sendall(b"LOCK idle-bench 10000\n")
        if not line(fr).startswith("OK "):
            raise SystemExit("no lock")
        time.sleep(2.0)                      # past the first probe rounds
        m0, z0, t0 = zkharness.mntr(zk.port), zkharness.zxid(zk.port), time.monotonic()
        safe = []
        while time.monotonic() - t0 < seconds:
            s.sendall(b"CHECK idle-bench\n")
            m = re.match(r"^OK idle-bench \d+ (\d+)$", line(fr))
            if m:
                safe.append(int(m.group(1)))
            time.sleep(0.25)
        m1, z1, t1 = zkharness.mntr(zk.port), zkharness.zxid(zk.port), time.monotonic()
        s.close()
    finally:
        p.terminate()
        p.wait()
        os.unlink(f.name)
    # Each mntr/srvr connection counts one packet received; two were made
    # between the readings (the second mntr's and the first srvr's).
    packets = m1["zk_packets_received"] - m0["zk_packets_received"] - 2
    return packets / (t1 - t0), (z1 - z0) / (t1 - t0), min(safe), max(safe)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-d", type=float, default=20.0, help="seconds measured per run")
    ap.add_argument("-r", type=int, default=2, help="rounds (binaries alternate)")
    ap.add_argument("--tick", type=int, default=2000, help="the server's tickTime, ms")
    ap.add_argument("--session", type=int, default=10000, help="session_timeout_ms")
    ap.add_argument("binaries", nargs="+")
    a = ap.parse_args()
    print("%-40s %5s %12s %10s %9s %9s" % ("lockbrokerd", "round", "requests/s",
                                           "txns/s", "safe min", "safe max"))
    with zkharness.ZkServer(tick_ms=a.tick, name="idle-bench") as zk:
        for r in range(a.r):
            for i, b in enumerate(a.binaries):
                rps, tps, lo, hi = measure(b, zk, a.d, a.tick, a.session,
                                           "/idle-bench-%d-%d" % (r, i))
                print("%-40s %5d %12.2f %10.2f %9d %9d" % (b[-40:], r + 1, rps, tps, lo, hi))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
