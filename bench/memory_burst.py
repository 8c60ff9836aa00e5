#!/usr/bin/env python3
"""RSS of an embedded lockbrokerd after a burst (docs/PERFORMANCE.md, Memory
after a burst): one client makes N kept holds (LOCK kI 0, UNLOCK kI
keep=3000), which all end 3 s later; a second client PINGs every 2 ms
throughout. Prints RSS at the peak, just after the holds ended and 8 s
later, the worst PING round trip, and the daemon's "memory:" line if any.

    LOCKBROKERD=daemon/lockbrokerd python3 bench/memory_burst.py [N]
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from lbharness import Daemon  # noqa: E402

KEEP_MS = 3000
BATCH = 5000


def rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return -1


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100000
    # Quotas high enough for n kept holds of one client.
    d = Daemon(config="[server]\nmax_kept_holds = 1000000\nmax_kept_holds_per_user = 1000000\n",
               verbose=False, name="lockbrokerd-burst").start()
    try:
        c, p = d.client(), d.client()
        start = rss_mb(d.pid)
        t = time.monotonic()
        for b in range(0, n, BATCH):
            c.send("".join("LOCK k%d 0\nUNLOCK k%d keep=%d\n" % (i, i, KEEP_MS)
                           for i in range(b, min(n, b + BATCH))))
            c.lines(2 * (min(n, b + BATCH) - b), timeout=60)
        made = time.monotonic()
        peak = rss_mb(d.pid)
        worst, ended = 0.0, None
        while time.monotonic() < made + KEEP_MS / 1000 + 9:
            t0 = time.monotonic()
            p.request("PING")
            worst = max(worst, time.monotonic() - t0)
            if ended is None and time.monotonic() > made + KEEP_MS / 1000 + 1:
                ended = rss_mb(d.pid)
            time.sleep(0.002)
        m = d.find_log(r"memory: .*")
        print("%d kept holds made in %.2f s; RSS MB: start %d, peak %d, holds ended %d, "
              "8 s later %d; worst PING %.1f ms" % (n, made - t, start, peak, ended,
                                                    rss_mb(d.pid), worst * 1000))
        print("daemon:", m.group(0) if m else "(no memory: line)")
    finally:
        d.stop()


if __name__ == "__main__":
    main()
