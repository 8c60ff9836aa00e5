#!/usr/bin/env python3
"""soak.py - a Jepsen-style soak run of lockbrokerd in distributed mode.

Not part of `make check`: `make soak SOAK_MINUTES=10 SOAK_SEED=1` runs it
against the built daemon (docs/SOAK.md has the figures of past runs).

What it does
------------
* Starts a 3-server ZooKeeper ensemble (tests/e2e/zkharness.py, tickTime
  500 ms) behind cuttable TCP proxies (ZkEnsemble(proxied=True),
  tests/e2e/netcut.py: every quorum and election path between servers
  goes through one) and 3 daemons (tests/e2e/lbharness.py) sharing one
  root, session timeout 4000 ms, tick_ms 500 (--tick-ms; 0 leaves the
  setting out, for a daemon from before it existed), each on a fixed
  loopback port so that a restart keeps it. Daemon i is the net's node
  "D<i>" and reaches the servers ("s1".."s3") only through proxies of its
  own: its [zookeeper] hosts is ens.hosts_for("D<i>"), the same string at
  every restart. The soak's own probes, listings and 4-letter words use
  the servers' real ports, outside the cuts.
* Runs dozens of clients in one selector thread. Each loops:
  LOCK <name> [<wait-ms>] [shared], a hold, then UNLOCK. Two kinds:
  - careless clients hold for 0-3 PING round trips with short pauses (one
    hold in twenty 4-10 PINGs, 1-4 s). One that gets LOST goes on
    regardless (PINGs, then an UNLOCK answered NOT_HELD); the checker
    counts the hold as ended at the LOST;
  - window-following clients (--window-followers, a third by default, 1
    for all) hold for 0-0.3 s (one hold in --wf-long-hold = 0.15: 2-8 s)
    with CHECK <name>, as PROTOCOL.md ("### CHECK") tells a holder that
    cannot check a fencing token: CHECK at once, then every quarter of the
    last window (safe-ms of its answer), never past the hold's intended
    end. Each answer's window ends at that CHECK's send time + safe-ms.
    The client stops using the resource (a "wf_stop" event) when its last
    window runs out without a fresh one (an answer that comes after that
    does not count), when its first answer's window is already over, on
    LOST, or on ERR NOT_HELD; it then sends UNLOCK (answered OK, or
    ERR NOT_HELD when the hold is gone) as soon as no request is
    outstanding, except after ERR NOT_HELD (the hold is gone already).
  A client whose daemon closes the connection (killed) reconnects to
  another daemon, and goes home again later.
* A nemesis in the main thread injects one fault at a time, from a seeded
  random order, waits for recovery (quorum, every daemon connected) and a
  quiet gap:
    daemon-kill       kill -9 a daemon, restart it 1-4 s later
    daemon-freeze     SIGSTOP a daemon for session timeout + 1.5-4 s, SIGCONT
    zk-restart        restart one ZooKeeper server (SIGTERM, start)
    zk-leader-kill    kill -9 the leader, wait for a new one, restart it
    zk-quorum-freeze  SIGSTOP two of the three servers for 2-6 s, SIGCONT
  and partitions, each held for the session timeout + 1.5-4 s, then every
  cut healed (a cut drops packets: nothing is closed; netcut.py):
    part-daemon-follower  a daemon whose session is on a follower, with
                      that follower, cut from the other two servers and
                      from the other daemons (their paths to that follower)
    part-daemon-leader  a daemon whose session is on the leader, with the
                      leader, cut from the two followers and the other
                      daemons' paths to the leader
    part-daemon       a daemon cut from all three servers
    part-oneway       one direction only, one of: follower-out (what a
                      follower, preferably one with a daemon's session,
                      sends to the other two servers), daemon-out (what a
                      daemon sends to its session's server), server-to-
                      daemon (what that server sends to the daemon)
    part-zk-minority  one server cut from the other two (both ways)
  The server of a daemon's session is read from its proxies
  (netcut backends: its newest open connection that was answered). When
  no daemon is where part-daemon-follower or part-daemon-leader needs one,
  the nemesis first steers a daemon there: it cuts that daemon from the
  other servers until its session is on the wanted one (logged as the
  fault's "steer"/"steered" steps; the cuts stay, the partition includes
  them).
  Between two faults (--handovers, 2 by default), with the cluster healthy
  and at least a session timeout + 1 s after it was last seen so, the
  nemesis hands a daemon over: SIGUSR2 to a random running daemon (one
  that answers STATS: not stopped, not dead), which executes its
  successor in the same process with every connection (PROTOCOL.md,
  "### Handover"). It logs the signal's time and, once the daemon's log
  says how it ended ("took over", or "refused" / "given up": no handover,
  the daemon serves on), the outcome; then waits for health and 2-4 s.
* At the end: clients finish their cycle and close, every cut is healed,
  daemons get SIGTERM, the tree under the root is listed (at once, and
  again after twice the session timeout), ZooKeeper stops, and the checker
  runs.

Every client event (each line sent and received, connects, drops, closes,
a window-follower's wf_stop) and every nemesis step (fault start with the
daemons' session servers, cut with the directed cuts made, healed, end)
goes to DIR/events.jsonl, one JSON object a line, with time.monotonic()
("t", seconds) and wall time ("w", Unix seconds). The daemons' logs go to
DIR/daemon-<i>.log, ZooKeeper's under DIR/zk/.

The checker (`soak.py --check DIR/events.jsonl` runs it alone;
`soak.py --self-test` runs it on made-up logs whose verdicts are known)
replays the log per client: a hold is [OK received, end], where end is the
first of UNLOCK sent, LOST received, connection drop seen, client close,
ERR NOT_HELD to a CHECK. It reports:
  * overlapping holds of one name in conflicting modes (shared holders may
    overlap each other). When the earlier holder is a window-follower, it
    used the resource from its first CHECK answer (none: never) until its
    effective end, min(the hold's end, its last window's end), computed
    from the CHECK lines alone as the client above follows them; a later
    grant (its OK received) before that effective end is a
    **window_violation**, whatever the holder was told and whether its
    daemon was stopped. When the earlier holder is careless: "told" when
    it had received LOST before the later OK (only a client ignoring LOST
    would overlap; not a violation), "paused" when its daemon was
    SIGSTOPped meanwhile and, after SIGCONT, the first line that holder
    received was the LOST (what fencing tokens are for: reported, not a
    violation, as long as the later token is greater), and real
    violations ("not told") otherwise;
  * window handoffs: each window-following hold that had a window and was
    not released by an UNLOCK answered OK (lost, windows ran out, dropped),
    with the first conflicting grant after it, and its slack: that grant
    minus the hold's last window end, per fault kind, and the smallest.
    A negative slack is a violation or a hold told LOST first; for those
    the daemons' debug logs (DIR/daemon-<i>.log: "deleting <node>" of the
    hold's node) tell whether the holder's own daemon gave the hold up
    between its LOST and the grant (the LOST cut the window short) or not
    (the window outlived the hold's node and only the LOST saved the
    holder: listed with a timeline);
  * after each SIGCONT, the first line received by every client that held
    a lock on the frozen daemon (it must be the LOST, not an OK);
  * tokens per name, in OK order: an exclusive grant's token must exceed
    every earlier token of the name, a shared grant's every earlier
    exclusive token;
  * requests without a reply within wait-ms (LOCK) + --margin seconds plus
    the time their daemon spent stopped, with no drop meanwhile (LOCK
    without wait-ms: 60 s + margin); TIMEOUTs that came before wait-ms;
  * UNLOCK or CHECK answered NOT_HELD although no LOST was received for
    the hold; a CHECK answered OK after the hold's LOST;
  * lock nodes left under the root after the clean stop;
  * handovers: every EOF (connection dropped), LOST and ERR (NOT_HELD
    included) a client received from a handover's signal until 1 s after
    its end, on a connection to the daemon handed over or having been on
    it at the signal, is a **handover_failure** (with the client, the line,
    the handover and a timeline), unless another fault's window (as for
    the window handoffs), a freeze or a wedged ensemble overlaps the
    handover's (the nemesis schedules none so: "explained") or it is a
    NOT_HELD for a hold whose LOST came before the signal. Also: handovers
    signalled, their outcomes, the same counted in the daemons' logs, the
    longest wait for a reply to a request sent meanwhile;
  * lines that fit no request, LOST lines for no hold, daemon error lines,
    daemon exit codes, errors of the proxies' thread.
It prints a summary (faults per kind, partitions per kind and variant)
and writes it to DIR/summary.json (with timeline excerpts of every
violation). Exit status: 0 without violations, 1 with.

Python 3 standard library only.
"""

import argparse
import bisect
import calendar
import collections
import heapq
import json
import os
import random
import re
import selectors
import shutil
import signal
import socket
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))

HOST = "127.0.0.1"
FAULT_KINDS = ("daemon-kill", "daemon-freeze", "zk-restart", "zk-leader-kill",
               "zk-quorum-freeze", "part-daemon-follower", "part-daemon-leader",
               "part-daemon", "part-oneway", "part-zk-minority")
PART_KINDS = tuple(k for k in FAULT_KINDS if k.startswith("part-"))
ONEWAY_VARIANTS = ("follower-out", "daemon-out", "server-to-daemon")
ERROR_RE = re.compile(r"^\S+Z error ")
# How a handover (SIGUSR2) ends, in the daemon's log: the successor took over;
# the daemon refused or gave up and serves on; the successor refused what it
# was passed (the connections close). The latter three are error lines.
HANDOVER_END_RE = re.compile(r"handover: (took over|refused|given up|refusing the snapshot|"
                             r"the snapshot passed on does not add up)")
HANDOVER_OUTCOME = {"took over": "done", "refused": "refused", "given up": "given-up",
                    "refusing the snapshot": "successor-refused",
                    "the snapshot passed on does not add up": "successor-refused"}
HANDOVER_WINDOW = 1.0    # s after a handover ends in which EOF, LOST, ERR are its failures
NO_WAIT_LIMIT = 60.0     # a LOCK without wait-ms unanswered this long (+margin) stalled
# The daemon's timers run on libevent's default clock, CLOCK_MONOTONIC_COARSE
# (one jiffy, 4 ms at HZ=250), from the time cached at the start of the loop
# iteration: a TIMEOUT may come a few ms before wait-ms by our finer clock.
EARLY_OK = 0.010


# ------------------------------------------------------------------ event log

class EventLog:
    """Appends one JSON object per line; callable from any thread. Each
    event carries t (monotonic seconds) and w (wall seconds)."""

    def __init__(self, path):
        self.f = open(path, "w", buffering=1 << 16)
        self.lock = threading.Lock()

    def emit(self, ev, t=None, **kw):
        kw["t"] = round(time.monotonic() if t is None else t, 6)
        kw["w"] = round(time.time(), 3)
        kw["ev"] = ev
        line = json.dumps(kw, separators=(",", ":"))
        with self.lock:
            self.f.write(line + "\n")

    def flush(self):
        with self.lock:
            self.f.flush()

    def close(self):
        with self.lock:
            self.f.close()


# ------------------------------------------------------------------ clients

class Pending:
    __slots__ = ("rid", "kind", "name", "t", "abandon_at")

    def __init__(self, rid, kind, name, t, abandon_at):
        self.rid, self.kind, self.name, self.t, self.abandon_at = rid, kind, name, t, abandon_at


class SoakClient:
    """One lock client (state machine driven by ClientDriver's thread).

    States: down (no connection), idle (between cycles), locking (LOCK
    sent), holding (PING or CHECK sent, or pause), unlocking (UNLOCK sent),
    done.

    A careless client (wf False) holds with PINGs and goes on after LOST.
    A window-following client (wf True) holds with CHECK, as PROTOCOL.md
    ("### CHECK") tells a holder that cannot check a fencing token: CHECK
    at once, then every quarter of its last window (safe-ms of the last
    answer) but no later than the hold's intended end; each answer's window
    ends at its CHECK's send time + safe-ms. It stops using the resource
    ("wf_stop" event) when its last window runs out without a fresh one
    (an answer that comes after the last window ended does not count),
    when the first answer's window is already over, on LOST, or on
    ERR NOT_HELD; then (and at the hold's intended end) it sends UNLOCK as
    soon as no request is outstanding, except after ERR NOT_HELD (the hold
    is gone: next cycle)."""

    def __init__(self, drv, idx, home, shared, wf=False):
        self.drv = drv
        self.idx = idx
        self.tag = "c%d" % idx
        self.home = home
        self.shared = shared
        self.wf = wf
        self.hseq = 0              # bumped per hold: stale hold timers do nothing
        self.hold_until = None     # window-follower: the hold's intended end
        self.win_end = None        # window-follower: its last window's end
        self.wf_stopped = None     # window-follower: why it stopped using, or None
        self.wf_answers = 0
        self.sock = None
        self.d = None
        self.buf = b""
        self.gen = 0               # bumped per connection: stale timers do nothing
        self.state = "down"
        self.rid = 0
        self.pending = None
        self.name = None
        self.token = None
        self.pings_left = 0
        self.ping_gap = (0, 0.06)
        self.lost = False
        self.away_since = None     # when it last left its home daemon

    # -- connections

    def connect(self, avoid=None, prefer=None):
        """Connects to prefer (or home), else any other daemon but avoid."""
        if self.drv.stopping:
            self.state = "done"
            return
        n = len(self.drv.ports)
        order = [i for i in range(n) if i != avoid]
        self.drv.rng.shuffle(order)
        first = self.home if prefer is None else prefer
        if first in order:
            order.remove(first)
            order.insert(0, first)
        if avoid is not None:
            order.append(avoid)
        for i in order:
            s = self._open(i)
            if s is not None:
                self._attach(s, i)
                self.drv.at(self.drv.rng.uniform(0, 0.1), self, self.cycle)
                return
        self.drv.log.emit("connfail", c=self.idx)
        self.drv.at(0.5, self, self.connect)

    def _open(self, i):
        try:
            s = socket.create_connection((HOST, self.drv.ports[i]), timeout=1.0)
        except OSError:
            return None
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.settimeout(2.0)
        return s

    def _attach(self, s, i):
        self.sock, self.d, self.buf = s, i, b""
        self.gen += 1
        self.state = "idle"
        self.pending = None
        if i != self.home and self.away_since is None:
            self.away_since = time.monotonic()
        if i == self.home:
            self.away_since = None
        self.drv.sel.register(s, selectors.EVENT_READ, self)
        self.drv.log.emit("conn", c=self.idx, d=i, local="%s:%d" % s.getsockname()[:2])

    def _detach(self):
        try:
            self.drv.sel.unregister(self.sock)
        except (KeyError, ValueError):
            pass
        self.sock.close()
        self.sock = None
        self.gen += 1
        self.pending = None
        self.state = "down"

    def close(self, why):
        if self.sock is None:
            return
        self.drv.log.emit("close", c=self.idx, d=self.d, why=why)
        self._detach()

    def on_drop(self, why, t=None):
        d = self.d
        self.drv.log.emit("drop", t=t, c=self.idx, d=d, why=why)
        self._detach()
        if self.drv.stopping:
            self.state = "done"
            return
        self.drv.at(self.drv.rng.uniform(0.05, 0.3), self, lambda: self.connect(avoid=d))

    # -- requests

    def send(self, line, kind, name=None, wait_s=None):
        self.rid += 1
        t = time.monotonic()
        if kind == "LOCK":
            limit = (NO_WAIT_LIMIT if wait_s is None else wait_s) + self.drv.abandon_s
        else:
            limit = self.drv.abandon_s
        self.pending = Pending(self.rid, kind, name, t, t + limit)
        self.drv.log.emit("send", t=t, c=self.idx, d=self.d, rid=self.rid, line=line)
        try:
            self.sock.sendall(line.encode("ascii") + b"\n")
        except OSError as e:
            self.on_drop("send: %s" % e.__class__.__name__)

    def cycle(self):
        """Start of a lock cycle (or stop)."""
        drv, rng = self.drv, self.drv.rng
        if drv.stopping:
            self.close("end")
            self.state = "done"
            return
        # Go home after a while away; now and then move to a random daemon.
        if self.d != self.home and self.away_since is not None and \
                time.monotonic() - self.away_since > 3.0:
            s = self._open(self.home)
            if s is not None:
                self.close("home")
                self._attach(s, self.home)
        elif rng.random() < drv.migrate_p:
            i = rng.randrange(len(drv.ports))
            if i != self.d:
                s = self._open(i)
                if s is not None:
                    self.close("migrate")
                    self._attach(s, i)
        if self.shared:
            self.name = drv.names[0]
        else:
            self.name = rng.choice(drv.names)
        wait_s = None
        if rng.random() < 0.9:
            wait_ms = rng.randint(500, 8000)
            wait_s = wait_ms / 1000.0
            line = "LOCK %s %d" % (self.name, wait_ms)
        else:
            line = "LOCK %s" % self.name
        if self.shared:
            line += " shared"
        self.state = "locking"
        self.token = None
        self.lost = False
        self.send(line, "LOCK", self.name, wait_s)

    def hold_step(self):
        if self.pings_left > 0:
            self.send("PING", "PING")
        else:
            self.state = "unlocking"
            self.send("UNLOCK %s" % self.name, "UNLOCK", self.name)

    def next_cycle(self):
        self.state = "idle"
        self.drv.at(self.drv.rng.uniform(0, 0.15), self, self.cycle)

    def on_readable(self):
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, socket.timeout, OSError) as e:
            self.on_drop("recv: %s" % e.__class__.__name__)
            return
        t = time.monotonic()
        if not data:
            self.on_drop("eof", t)
            return
        self.buf += data
        while self.sock is not None and b"\n" in self.buf:
            raw, self.buf = self.buf.split(b"\n", 1)
            line = raw.decode("latin-1")
            self.drv.log.emit("recv", t=t, c=self.idx, d=self.d, line=line)
            self.on_line(line)

    def confused(self, line):
        self.drv.log.emit("confused", c=self.idx, d=self.d, state=self.state, line=line)
        d = self.d
        self.close("confused")
        self.drv.at(0.1, self, lambda: self.connect(avoid=d))

    def on_line(self, line):
        rng = self.drv.rng
        if line.startswith("LOST "):
            parts = line.split()
            if len(parts) >= 3 and parts[1] == self.name and parts[2] == self.token:
                self.lost = True     # a careless client carries on regardless
                if self.wf and self.state == "holding":
                    self.wf_stop("LOST")
                    if self.pending is None:
                        self.wf_release()
            return
        p = self.pending
        if p is None:
            self.confused(line)
            return
        self.pending = None
        if p.kind == "LOCK":
            parts = line.split()
            if len(parts) == 3 and parts[0] == "OK" and parts[1] == p.name:
                self.token = parts[2]
                self.state = "holding"
                self.hseq += 1
                if self.wf:
                    if rng.random() < self.drv.wf_long_hold_p:
                        dur = rng.uniform(2.0, 8.0)
                    else:
                        dur = rng.uniform(0.0, 0.3)
                    self.hold_until = time.monotonic() + dur
                    self.win_end = None
                    self.wf_stopped = None
                    self.wf_answers = 0
                    self.wf_step(self.hseq)
                    return
                if rng.random() < self.drv.long_hold_p:
                    # a long hold (about 1-4 s): outages and freezes catch some
                    self.pings_left = rng.randint(4, 10)
                    self.ping_gap = (0.2, 0.45)
                else:
                    self.pings_left = rng.randint(0, 3)
                    self.ping_gap = (0, 0.06)
                self.drv.at(rng.uniform(*self.ping_gap), self, self.hold_step)
            elif line.startswith("TIMEOUT ") or line.startswith("ERR "):
                self.next_cycle()
            else:
                self.confused(line)
        elif p.kind == "PING":
            if line != "PONG":
                self.confused(line)
                return
            self.pings_left -= 1
            self.drv.at(rng.uniform(*self.ping_gap), self, self.hold_step)
        elif p.kind == "CHECK":
            self.on_check_reply(p, line)
        elif p.kind == "UNLOCK":
            if line == "OK %s" % p.name or line.startswith("ERR "):
                self.next_cycle()
            else:
                self.confused(line)

    # -- window-following holds

    def wf_step(self, hseq):
        """Next CHECK of a window-following hold, or its UNLOCK."""
        if hseq != self.hseq or self.state != "holding" or self.pending is not None:
            return
        if self.wf_stopped or (self.wf_answers and time.monotonic() >= self.hold_until):
            self.wf_release()
            return
        self.send("CHECK %s" % self.name, "CHECK", self.name)

    def wf_stop(self, why, at=None):
        """Stops using the resource (once per hold)."""
        if self.wf_stopped:
            return
        self.wf_stopped = why
        self.drv.log.emit("wf_stop", c=self.idx, d=self.d, name=self.name, token=self.token,
                          why=why, win_end=None if self.win_end is None else
                          round(self.win_end, 6), at=None if at is None else round(at, 6))

    def wf_release(self):
        self.state = "unlocking"
        self.send("UNLOCK %s" % self.name, "UNLOCK", self.name)

    def wf_expire(self, hseq, end):
        """The window that ended at `end` was the last one: stop, and
        release once no CHECK is outstanding (its answer comes too late)."""
        if hseq != self.hseq or self.state != "holding" or self.win_end != end:
            return
        self.wf_stop("window ran out", end)
        if self.pending is None:
            self.wf_release()

    def on_check_reply(self, p, line):
        now = time.monotonic()
        parts = line.split()
        if line.startswith("ERR NOT_HELD"):
            self.wf_stop("NOT_HELD")
            self.next_cycle()
            return
        if not (len(parts) == 4 and parts[0] == "OK" and parts[1] == p.name
                and parts[2] == self.token and parts[3].isdigit()):
            self.confused(line)
            return
        if self.state != "holding":
            return
        safe_s = int(parts[3]) / 1000.0
        end = p.t + safe_s
        if not self.wf_stopped:
            if self.win_end is not None and now > self.win_end:
                self.wf_stop("window ran out", self.win_end)     # the timer came late
            elif self.win_end is None and end <= now:
                self.wf_stop("no window")
            else:
                self.wf_answers += 1
                if self.win_end is None or end > self.win_end:
                    self.win_end = end
                    self.drv.at(end - now, self, lambda h=self.hseq, e=end: self.wf_expire(h, e))
        if self.wf_stopped:
            self.wf_release()
            return
        nxt = min(p.t + max(safe_s / 4.0, 0.05), self.hold_until)
        self.drv.at(max(0.0, nxt - now), self, lambda h=self.hseq: self.wf_step(h))

    def check_abandon(self, now):
        p = self.pending
        if p is not None and now > p.abandon_at:
            d = self.d
            self.drv.log.emit("abandon", c=self.idx, d=d, rid=p.rid)
            self.close("abandon")
            self.drv.at(0.1, self, lambda: self.connect(avoid=d))


class ClientDriver(threading.Thread):
    """Runs every client from one selector loop with a timer heap."""

    def __init__(self, log, ports, nclients, names, shared_frac, seed, abandon_s,
                 drain_s=45.0, migrate_p=0.01, long_hold_p=0.05, wf=(), wf_long_hold_p=0.15):
        super().__init__(name="clients", daemon=True)
        self.log = log
        self.ports = ports
        self.names = names
        self.rng = random.Random(seed)
        self.abandon_s = abandon_s
        self.drain_s = drain_s
        self.migrate_p = migrate_p
        self.long_hold_p = long_hold_p
        self.wf_long_hold_p = wf_long_hold_p
        self.sel = selectors.DefaultSelector()
        self.timers = []
        self.seq = 0
        self.stopping = False
        self._stop_req = threading.Event()
        nshared = int(round(nclients * shared_frac))
        self.clients = [SoakClient(self, i, i % len(ports), i < nshared, i in wf)
                        for i in range(nclients)]
        self.error = None

    def at(self, delay, client, fn):
        """Runs fn after delay seconds unless client changed connection
        (or finished) meanwhile."""
        self.seq += 1
        heapq.heappush(self.timers, (time.monotonic() + delay, self.seq, client, client.gen, fn))

    def request_stop(self):
        self._stop_req.set()

    def run(self):
        try:
            self._run()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            self.error = e
            import traceback
            traceback.print_exc()

    def _run(self):
        for c in self.clients:
            self.at(self.rng.uniform(0, 1.0), c, c.connect)
        stop_deadline = None
        next_scan = 0
        while True:
            now = time.monotonic()
            if self._stop_req.is_set() and not self.stopping:
                self.stopping = True
                stop_deadline = now + self.drain_s
                self.log.emit("clients", phase="stopping")
                for c in self.clients:
                    if c.state in ("down", "idle"):
                        c.close("end")
                        c.state = "done"
            if self.stopping:
                if all(c.state == "done" for c in self.clients):
                    break
                if now > stop_deadline:
                    for c in self.clients:
                        if c.state != "done":
                            c.close("end-forced")
                            c.state = "done"
                    break
            timeout = 0.2
            if self.timers:
                timeout = max(0.0, min(timeout, self.timers[0][0] - now))
            for key, _ in self.sel.select(timeout):
                c = key.data
                if c.sock is not None:
                    c.on_readable()
            now = time.monotonic()
            while self.timers and self.timers[0][0] <= now:
                _, _, c, gen, fn = heapq.heappop(self.timers)
                if c.gen == gen and c.state != "done":
                    fn()
            if now >= next_scan:
                next_scan = now + 0.5
                for c in self.clients:
                    c.check_abandon(now)
        self.log.emit("clients", phase="stopped")
        self.sel.close()


# ------------------------------------------------------------------ daemons

def _soak_daemon_class():
    from lbharness import Daemon

    class SoakDaemon(Daemon):
        """A Daemon whose stderr goes to a file; only non-debug lines are
        kept in memory (for wait_log)."""

        def __init__(self, idx, log_path, **kw):
            super().__init__(**kw)
            self.idx = idx
            self.log_path = log_path

        def _read_stderr(self):
            f = self.proc.stderr
            with open(self.log_path, "ab", buffering=0) as out:
                for raw in iter(f.readline, b""):
                    out.write(raw)
                    if b" debug " in raw[:40]:
                        continue
                    line = raw.decode("utf-8", "replace").rstrip("\n")
                    with self._cond:
                        self.lines.append(line)
                        self._cond.notify_all()
            f.close()
            with self._cond:
                self._stderr_done = True
                self._cond.notify_all()
    return SoakDaemon


def daemon_stats(port, timeout=3.0):
    """STATS as a dict, or None when the daemon does not answer in time."""
    try:
        with socket.create_connection((HOST, port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"STATS\n")
            buf = b""
            deadline = time.monotonic() + timeout
            while not buf.endswith(b"END\n"):
                if time.monotonic() > deadline:
                    return None
                d = s.recv(65536)
                if not d:
                    return None
                buf += d
    except OSError:
        return None
    out = {}
    for line in buf.decode("latin-1").splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[0] == "STAT":
            out[parts[1]] = parts[2]
    return out


# ------------------------------------------------------------------ the run

class Soak:
    def __init__(self, args):
        self.args = args
        self.out = os.path.abspath(args.out)
        os.makedirs(self.out, exist_ok=True)
        self.rng = random.Random(args.seed)
        self.log = EventLog(os.path.join(self.out, "events.jsonl"))
        self.session_ms = args.session_ms
        self.root = "/lockbroker-soak"
        self.names = ["n%d" % i for i in range(args.names)]
        self.daemons = []
        self.ens = None
        self.net = None
        self.driver = None
        self.fault_counts = collections.Counter()
        self.wedges = 0
        self.fault_failures = collections.Counter()
        self.handover_counts = collections.Counter()   # by outcome, "failed" if no end
        self.last_healthy = None

    def say(self, msg):
        sys.stdout.write("[soak %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
        sys.stdout.flush()

    # -- set-up

    def start_zk(self):
        import zkharness
        zkdir = os.path.join(self.out, "zk")
        if os.path.exists(zkdir):
            shutil.rmtree(zkdir)
        # Every path between servers, and from each daemon to each server,
        # goes through a proxy of tests/e2e/netcut.py that the nemesis can
        # cut (the soak's own probes and 4-letter words use the real ports).
        self.ens = zkharness.ZkEnsemble(n=3, tick_ms=500, name="soak", base_dir=zkdir,
                                        proxied=True)
        self.net = self.ens.net
        leader = self.ens.start(timeout=120.0)
        self.log.emit("zk", phase="started", ports=self.ens.ports, leader=leader.myid)
        self.say("ZooKeeper ensemble %s, leader s%d (proxied)"
                 % (self.ens.connect_string, leader.myid))

    @staticmethod
    def node(idx):
        """The netcut node name of daemon idx."""
        return "D%d" % idx

    def daemon_config(self, idx):
        # The same hosts string (the same proxies) for every start of idx.
        tick = "tick_ms = %d\n" % self.args.tick_ms if self.args.tick_ms else ""
        return ("[zookeeper]\nhosts = %s\nroot = %s\nsession_timeout_ms = %d\n%s"
                % (self.ens.hosts_for(self.node(idx)), self.root, self.session_ms, tick))

    def start_daemon(self, idx, port):
        cls = _soak_daemon_class()
        path = os.path.join(self.out, "daemon-%d.log" % idx)
        with open(path, "ab") as f:
            f.write(("--- soak: starting d%d at %s ---\n" % (idx, time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime()))).encode())
        d = cls(idx, path, config=self.daemon_config(idx), listen="%s:%d" % (HOST, port),
                verbose=True, name="d%d" % idx)
        d.start(timeout=30.0)
        did = d.wait_log(r"zk: daemon id (\S+), connecting", 10.0).group(1)
        sess = d.wait_log(r"zk: new session (0x[0-9a-f]+)", 30.0).group(1)
        self.log.emit("daemon", phase="started", d=idx, pid=d.pid, port=port, id=did,
                      session=sess)
        return d

    def start_daemons(self):
        import zkharness
        ports = zkharness.free_ports(3)
        self.daemons = [self.start_daemon(i, p) for i, p in enumerate(ports)]
        self.say("daemons on ports %s" % ports)
        return ports

    # -- health

    def zk_serves(self, timeout):
        """True once a new session can be made and a node created (the
        servers' modes alone do not say that ZooKeeper commits anything)."""
        import zkharness
        deadline = time.monotonic() + timeout
        while True:
            try:
                with zkharness.ZkClient(self.ens.connect_string, timeout_ms=4000,
                                        connect_timeout=2.0) as c:
                    c.create(self.root + "-probe", b"", zkharness.EPHEMERAL)
                return True
            except zkharness.ZkNodeExists:
                return True            # an earlier probe's session is closing
            except Exception:  # noqa: BLE001 - "not yet"
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.5)

    def unwedge(self, since):
        """ZooKeeper has a leader and followers but makes no session: keep
        thread dumps (SIGQUIT: into each zookeeper.out), then restart every
        server on its data directory."""
        self.log.emit("zk_wedged", phase="start", since=since,
                      modes={s.myid: s.serving_mode() for s in self.ens.servers})
        self.say("ZooKeeper serves no session although it has a quorum: thread dumps in "
                 "zk/s*/zookeeper.out, restarting the ensemble")
        for s in self.ens.servers:
            if s.alive():
                os.kill(s.pid, signal.SIGQUIT)
        time.sleep(2.0)
        self.ens.stop(grace=10.0)
        self.ens.start(timeout=120.0)
        if not self.zk_serves(60.0):
            raise RuntimeError("ZooKeeper still makes no session after a restart")
        self.wedges += 1
        self.log.emit("zk_wedged", phase="end", leader=self.ens.leader().myid)

    def healthy(self, timeout=60.0, since=None):
        """Waits for a quorum that serves and every daemon connected;
        returns seconds. A quorum that serves nobody for 30 s is restarted."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        self.ens.wait_quorum(timeout)
        if not self.zk_serves(30.0):
            self.unwedge(t0 if since is None else since)
            deadline = time.monotonic() + timeout
        while True:
            states = []
            for d in self.daemons:
                st = daemon_stats(d.port, timeout=2.0) if d.running else None
                states.append(st.get("zk_state") if st else None)
            if all(s == "connected" for s in states):
                return time.monotonic() - t0
            if time.monotonic() > deadline:
                raise RuntimeError("daemons not connected after %.0f s: %r" % (timeout, states))
            time.sleep(0.25)

    # -- faults

    def fault(self, kind):
        rng, log = self.rng, self.log
        if kind == "daemon-kill":
            d = rng.choice(self.daemons)
            log.emit("fault", kind=kind, phase="start", d=d.idx, pid=d.pid)
            d.kill()
            log.emit("daemon", phase="killed", d=d.idx)
            time.sleep(rng.uniform(1.0, 4.0))
            self.daemons[d.idx] = self.start_daemon(d.idx, d.port)
            log.emit("fault", kind=kind, phase="end", d=d.idx)
            return "d%d" % d.idx
        if kind == "daemon-freeze":
            d = rng.choice(self.daemons)
            hold = self.session_ms / 1000.0 + rng.uniform(1.5, 4.0)
            mark = d.log_mark()
            log.emit("fault", kind=kind, phase="start", d=d.idx, pid=d.pid, secs=round(hold, 3))
            os.kill(d.pid, signal.SIGSTOP)
            log.emit("daemon", phase="stopped", d=d.idx)
            time.sleep(hold)
            t = time.monotonic()     # before the signal: nothing can come earlier
            os.kill(d.pid, signal.SIGCONT)
            log.emit("daemon", t=t, phase="continued", d=d.idx)
            m = d.wait_log(r"zk: new session (0x[0-9a-f]+)|zk: reconnected to session", 30.0,
                           since=mark)
            log.emit("fault", kind=kind, phase="end", d=d.idx, after=m.group(0))
            return "d%d %.1fs" % (d.idx, hold)
        if kind == "zk-restart":
            s = rng.choice(self.ens.servers)
            was = s.serving_mode()
            log.emit("fault", kind=kind, phase="start", zk=s.myid, mode=was)
            down = s.restart(timeout=60.0)
            leader = self.ens.wait_quorum(60.0)
            log.emit("fault", kind=kind, phase="end", zk=s.myid, secs=round(down, 3),
                     leader=leader.myid)
            return "s%d (%s) %.1fs" % (s.myid, was, down)
        if kind == "zk-leader-kill":
            old = self.ens.leader()
            if old is None:
                old = self.ens.wait_quorum(60.0)
            log.emit("fault", kind=kind, phase="start", zk=old.myid)
            t0 = time.monotonic()
            old.kill()
            new = self.ens.wait_quorum(60.0)
            elected = time.monotonic() - t0
            log.emit("fault", kind=kind, phase="step", zk=old.myid, leader=new.myid,
                     secs=round(elected, 3))
            time.sleep(rng.uniform(0.5, 3.0))
            old.start(timeout=60.0)
            self.ens.wait_quorum(60.0)
            log.emit("fault", kind=kind, phase="end", zk=old.myid)
            return "s%d, new leader s%d in %.1fs" % (old.myid, new.myid, elected)
        if kind == "zk-quorum-freeze":
            two = rng.sample(self.ens.servers, 2)
            secs = rng.uniform(2.0, 6.0)
            leader = self.ens.leader()
            log.emit("fault", kind=kind, phase="start", zk=[s.myid for s in two],
                     secs=round(secs, 3), leader=leader.myid if leader else None)
            for s in two:
                s.pause()
            time.sleep(secs)
            t = time.monotonic()
            for s in two:
                s.resume()
            log.emit("fault", kind=kind, phase="step", t=t, zk=[s.myid for s in two])
            leader = self.ens.wait_quorum(60.0)
            log.emit("fault", kind=kind, phase="end", zk=[s.myid for s in two],
                     leader=leader.myid)
            return "s%s %.1fs" % ("+s".join(str(s.myid) for s in two), secs)
        if kind in PART_KINDS:
            return self.partition(kind)
        raise ValueError(kind)

    # -- partitions

    def session_server(self, d, settle=3.0):
        """The ZkServer of daemon d's session as its proxies see it, or
        None. Waits up to `settle` s for d to have one open answered
        connection to a server (after a heal, a connection the daemon gave
        up during the cut may still be delivering what was held); then
        takes the newest such connection."""
        deadline = time.monotonic() + settle
        while True:
            conns = [c for c in self.net.connections(src=self.node(d.idx), kind="client")
                     if c.state == "open" and c.bytes_down > 0]
            if len({c.dst for c in conns}) == 1 or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        if not conns:
            return None
        return self.ens.server(max(conns, key=lambda c: c.opened).dst)

    def sessions(self):
        """{"D<i>": "s<n>" or None}: where each daemon's session is."""
        out = {}
        for d in self.daemons:
            s = self.session_server(d)
            out[self.node(d.idx)] = s.node if s is not None else None
        return out

    def steer(self, kind, d, target):
        """Moves daemon d's session to server target: cuts d from the
        other servers until its session is on target and d is connected,
        then waits 1 to 2 s more (for fresh windows). The cuts stay: the
        partition that follows includes them (healing them first would let
        the handshakes d gave up during the cut reach their servers and
        move its session away again). Only when no daemon's session is
        where a fault needs one; a fault of its own (d's holds may be
        lost), logged as the fault's "steer" steps."""
        node = self.node(d.idx)
        others = [s for s in self.ens.servers if s is not target]
        was = self.session_server(d)
        t0 = time.monotonic()
        self.log.emit("fault", kind=kind, phase="steer", d=d.idx, zk=target.myid,
                      frm=was.myid if was else None)
        for s in others:
            self.net.cut(node, s.node)
        deadline = t0 + 40.0
        while True:
            st = daemon_stats(d.port, timeout=2.0)
            if self.session_server(d, settle=0.0) is target and st and \
                    st.get("zk_state") == "connected":
                break
            if time.monotonic() > deadline:
                raise RuntimeError("could not steer D%d's session to s%d" % (d.idx, target.myid))
            time.sleep(0.1)
        self.log.emit("fault", kind=kind, phase="steered", d=d.idx, zk=target.myid,
                      secs=round(time.monotonic() - t0, 3))
        time.sleep(self.rng.uniform(1.0, 2.0))

    def partition(self, kind):
        """One partition fault: cut, hold for the session timeout + 1.5 to
        4 s, heal every cut. Returns a description."""
        rng, net, ens = self.rng, self.net, self.ens
        leader = ens.leader() or ens.wait_quorum(60.0)
        servers = ens.servers
        secs = self.session_ms / 1000.0 + rng.uniform(1.5, 4.0)
        info = {}
        steered = False

        def on(srv):
            return [d for d in self.daemons if self.session_server(d) is srv]

        if kind in ("part-daemon-follower", "part-daemon-leader"):
            if kind == "part-daemon-follower":
                cands = [(d, self.session_server(d)) for d in self.daemons]
                cands = [(d, s) for d, s in cands if s is not None and s is not leader]
            else:
                cands = [(d, leader) for d in on(leader)]
            if not cands:
                d = rng.choice(self.daemons)
                target = leader if kind == "part-daemon-leader" else \
                    rng.choice([s for s in servers if s is not leader])
                self.steer(kind, d, target)
                steered = True
                leader = ens.leader()
                if (target is leader) != (kind == "part-daemon-leader") or \
                        self.session_server(d) is not target:
                    raise RuntimeError("after steering D%d to s%d: leader %s, session on %s"
                                       % (d.idx, target.myid, leader and leader.node,
                                          self.session_server(d)))
                cands = [(d, target)]
            d, srv = rng.choice(cands)
            side = {self.node(d.idx), srv.node}
            rest = {s.node for s in servers if s is not srv} | \
                {self.node(o.idx) for o in self.daemons if o is not d}
            info = {"d": d.idx, "zk": srv.myid}

            def cut():
                return net.partition(side, rest)
        elif kind == "part-daemon":
            d = rng.choice(self.daemons)
            srv = self.session_server(d)
            info = {"d": d.idx, "zk": srv.myid if srv else None}

            def cut():
                return net.partition({self.node(d.idx)}, {s.node for s in servers})
        elif kind == "part-zk-minority":
            srv = rng.choice(servers)
            info = {"zk": srv.myid}

            def cut():
                return net.partition({srv.node}, {s.node for s in servers if s is not srv})
        elif kind == "part-oneway":
            variant = rng.choice(ONEWAY_VARIANTS)
            info = {"variant": variant}
            if variant == "follower-out":
                fs = [s for s in servers if s is not leader]
                busy = [s for s in fs if on(s)]
                srv = rng.choice(busy or fs)
                info["zk"] = srv.myid

                def cut():
                    made = []
                    for s in servers:
                        if s is not srv:
                            net.cut(srv.node, s.node, "a->b")
                            made.append((srv.node, s.node))
                    return made
            else:
                d = rng.choice(self.daemons)
                srv = self.session_server(d)
                if srv is None:
                    raise RuntimeError("D%d has no session server" % d.idx)
                a, b = self.node(d.idx), srv.node
                if variant == "server-to-daemon":
                    a, b = b, a
                info.update(d=d.idx, zk=srv.myid)

                def cut():
                    net.cut(a, b, "a->b")
                    return [(a, b)]
        else:
            raise ValueError(kind)
        if "zk" in info and info["zk"] is not None:
            info["mode"] = "leader" if info["zk"] == leader.myid else "follower"
        info.update(leader=leader.myid, sessions=self.sessions(), steered=steered)
        self.log.emit("fault", kind=kind, phase="start", secs=round(secs, 3), **info)
        t = time.monotonic()
        made = cut()
        self.log.emit("fault", kind=kind, phase="cut", t=t, cuts=sorted(list(x) for x in made))
        time.sleep(secs)
        t = time.monotonic()
        net.heal_all()
        self.log.emit("fault", kind=kind, phase="healed", t=t)
        self.log.emit("fault", kind=kind, phase="end", **{k: v for k, v in info.items()
                                                          if k in ("d", "zk")})
        what = " ".join("%s=%s" % (k, info[k]) for k in ("variant", "d", "zk", "mode")
                        if k in info)
        return "%s %.1fs%s, %d directed cuts" % (what, secs, " (steered)" if steered else "",
                                                  len(made))

    # -- handovers

    def handover(self):
        """SIGUSR2 to a random running daemon that answers STATS (not one
        that is stopped or dead), between faults, with the cluster healthy
        and every earlier fault's window over (see nemesis), so that what
        clients see in the second after it is the handover's doing. Waits
        for the end of the handover in the daemon's log ("took over",
        "refused", "given up", ...) and logs the signal's time and the
        outcome. Returns a description."""
        cands = [d for d in self.daemons if d.running and daemon_stats(d.port, 2.0)]
        if not cands:
            raise RuntimeError("no daemon to hand over")
        d = self.rng.choice(cands)
        mark = d.log_mark()
        t = time.monotonic()
        self.log.emit("handover", t=t, phase="signal", d=d.idx, pid=d.pid)
        os.kill(d.pid, signal.SIGUSR2)
        try:
            m = d.wait_log(HANDOVER_END_RE, 20.0, since=mark)
        except AssertionError as e:
            self.log.emit("handover", phase="failed", d=d.idx, error=str(e)[:2000])
            raise RuntimeError("handover of d%d did not end within 20 s" % d.idx)
        t_end = time.monotonic()
        outcome = HANDOVER_OUTCOME[m.group(1)]
        self.log.emit("handover", t=t_end, phase="end", d=d.idx, outcome=outcome,
                      secs=round(t_end - t, 3), line=m.string)
        self.handover_counts[outcome] += 1
        return "d%d %s in %.3fs" % (d.idx, outcome, t_end - t)

    def handovers(self, until):
        """args.handovers handovers between two faults, each at least a
        session timeout + 1 s after the system was last seen healthy (the
        checker's fault windows end a session timeout after that) and
        followed by a wait for health and a quiet 2 to 4 s (more than the
        checker's second)."""
        settle = self.session_ms / 1000.0 + 1.0
        for _ in range(self.args.handovers):
            if time.monotonic() >= until:
                return
            if self.last_healthy is not None:
                time.sleep(max(0.0, self.last_healthy + settle - time.monotonic()))
            t0 = time.monotonic()
            try:
                what = self.handover()
                rec = self.healthy(90.0, since=t0)
                self.log.emit("healthy", kind="handover", secs=round(rec, 3))
                self.say("handover %s; healthy %.1fs later" % (what, rec))
            except Exception as e:  # noqa: BLE001 - keep going, report it
                self.handover_counts["failed"] += 1
                self.log.emit("handover", phase="nemesis-failed", error=repr(e))
                self.say("handover FAILED: %r; recovering" % e)
                self.recover()
                self.healthy(120.0, since=t0)
                self.last_healthy = time.monotonic()
                return
            time.sleep(self.rng.uniform(2.0, 4.0))

    def recover(self):
        """After a failed fault: every path healed, every server and
        daemon running again."""
        if self.net is not None:
            self.net.heal_all()
        for s in self.ens.servers:
            try:
                if s.alive():
                    s.resume()
                else:
                    s.start(timeout=60.0)
            except Exception as e:  # noqa: BLE001
                self.say("recover: %s: %r" % (s.name, e))
        for d in list(self.daemons):
            if d.running:
                os.kill(d.pid, signal.SIGCONT)
            else:
                self.daemons[d.idx] = self.start_daemon(d.idx, d.port)

    def nemesis(self, until):
        order = []
        n = 0
        while time.monotonic() < until:
            if not order:
                order = list(self.args.faults)
                self.rng.shuffle(order)
            kind = order.pop()
            n += 1
            t0 = time.monotonic()
            try:
                what = self.fault(kind)
                self.fault_counts[kind] += 1
                rec = self.healthy(90.0, since=t0)
                self.last_healthy = time.monotonic()
                self.log.emit("healthy", kind=kind, secs=round(rec, 3))
                self.say("fault %d %s %s; healthy %.1fs later (%.0fs in all)"
                         % (n, kind, what, rec, time.monotonic() - t0))
            except Exception as e:  # noqa: BLE001 - keep going, report it
                self.fault_failures[kind] += 1
                self.log.emit("fault", kind=kind, phase="failed", error=repr(e))
                self.say("fault %d %s FAILED: %r; recovering" % (n, kind, e))
                self.recover()
                try:
                    self.healthy(120.0, since=t0)
                    self.last_healthy = time.monotonic()
                except Exception as e2:  # noqa: BLE001
                    self.say("still unhealthy: %r" % e2)
                    raise
            if self.driver.error is not None:
                raise RuntimeError("client thread failed: %r" % self.driver.error)
            gap = self.rng.uniform(3.0, 8.0)
            time.sleep(max(0.0, min(gap, until - time.monotonic())))
            self.handovers(until)

    # -- tear-down

    def list_nodes(self, phase):
        import zkharness
        try:
            nodes = zkharness.ls_recursive(self.ens.connect_string, self.root)
        except Exception as e:  # noqa: BLE001
            self.log.emit("zk_nodes", phase=phase, error=repr(e))
            return None
        self.log.emit("zk_nodes", phase=phase, root=self.root, nodes=nodes)
        return nodes

    def stop_daemons(self):
        for d in self.daemons:
            st = daemon_stats(d.port) if d.running else None
            self.log.emit("daemon_stats", d=d.idx, stats=st)
        for d in self.daemons:
            rc = d.stop(expect=None, timeout=20.0) if d.proc is not None else None
            self.log.emit("daemon", phase="terminated", d=d.idx, rc=rc)
        for d in self.daemons:
            errs, ho = [], []
            with open(d.log_path, "rb") as f:
                for raw in f:
                    line = raw.decode("utf-8", "replace").rstrip("\n")
                    if ERROR_RE.search(line):
                        if HANDOVER_END_RE.search(line):
                            ho.append(line)     # reported as handovers not done
                        else:
                            errs.append(line)
            self.log.emit("daemon_errors", d=d.idx, count=len(errs), lines=errs[:50],
                          handover_not_done=len(ho), handover_lines=ho[:50])

    def run(self):
        a = self.args
        t_start = time.monotonic()
        nwf = int(round(a.clients * a.window_followers))
        wf = sorted(random.Random(a.seed * 31 + 7).sample(range(a.clients), nwf))
        self.log.emit("run", phase="start", seed=a.seed, minutes=a.minutes, clients=a.clients,
                      names=self.names, shared=a.shared, session_ms=self.session_ms,
                      faults=a.faults, window_followers=wf, wf_long_hold=a.wf_long_hold,
                      tick_ms=a.tick_ms, daemon=os.environ.get("LOCKBROKERD"),
                      margin=a.margin, root=self.root, argv=sys.argv,
                      handovers=a.handovers, handover_window=HANDOVER_WINDOW)
        self.say("seed %d, %g minutes, %d clients (%d window-following) on %d names, session "
                 "%d ms, out %s" % (a.seed, a.minutes, a.clients, nwf, len(self.names),
                                    self.session_ms, self.out))
        try:
            self.start_zk()
            ports = self.start_daemons()
            self.driver = ClientDriver(self.log, ports, a.clients, self.names, a.shared,
                                       a.seed * 7919 + 1, abandon_s=30.0, wf=set(wf),
                                       wf_long_hold_p=a.wf_long_hold)
            self.driver.start()
            until = time.monotonic() + a.minutes * 60.0
            time.sleep(min(10.0, a.minutes * 60.0 / 10))   # a calm start
            self.nemesis(until)
            self.log.emit("nemesis", phase="done", faults=dict(self.fault_counts),
                          failures=dict(self.fault_failures), zk_wedged=self.wedges,
                          handovers=dict(self.handover_counts))
            self.healthy(120.0)
            self.say("nemesis done: %s, handovers %s; stopping clients"
                     % (dict(self.fault_counts), dict(self.handover_counts)))
        except BaseException as e:
            self.log.emit("run", phase="aborted", error=repr(e))
            raise
        finally:
            if self.driver is not None:
                self.driver.request_stop()
                self.driver.join(90.0)
            if self.net is not None:
                self.net.heal_all()
            if self.ens is not None and self.daemons:
                try:
                    self.stop_daemons()
                    self.list_nodes("after-stop")
                    time.sleep(2 * self.session_ms / 1000.0 + 1.0)
                    self.list_nodes("after-wait")
                except Exception as e:  # noqa: BLE001
                    self.say("tear-down: %r" % e)
            for d in self.daemons:
                d.kill()
            if self.ens is not None:
                self.ens.stop(grace=10.0)
                for s in self.ens.servers:        # keep the logs, not the data
                    shutil.rmtree(s.data_dir, ignore_errors=True)
            if self.net is not None:
                errs = list(self.net.errors)
                self.net.close()
                if errs:
                    self.log.emit("net", phase="errors", errors=[repr(e) for e in errs[:20]],
                                  count=len(errs))
            self.log.emit("run", phase="end", secs=round(time.monotonic() - t_start, 3))
            self.log.close()
        return os.path.join(self.out, "events.jsonl")


# ------------------------------------------------------------------ checker

LOCK_RE = re.compile(r"^LOCK (\S+)(?: (\d+))?( shared)?$")


def _pct(sorted_vals, p):
    if not sorted_vals:
        return None
    i = min(len(sorted_vals) - 1, int(round(p / 100.0 * (len(sorted_vals) - 1))))
    return sorted_vals[i]


def _r(x, n=3):
    return None if x is None else round(x, n)


class Hold:
    __slots__ = ("c", "d", "name", "mode", "token", "start", "end", "end_kind", "raw_end",
                 "lost_t", "lost_reason", "rid", "sent", "wf", "checks", "use_from",
                 "win_end", "win_stop", "wf_why", "released")

    def __init__(self, c, d, name, mode, token, start, rid, sent, wf=False):
        self.c, self.d, self.name, self.mode, self.token = c, d, name, mode, token
        self.start, self.rid, self.sent = start, rid, sent
        self.end = self.end_kind = self.raw_end = None
        self.lost_t = self.lost_reason = None
        self.wf = wf
        self.checks = []           # (CHECK sent, answer received, safe-ms), answered OK
        self.use_from = None       # window-follower: first window received
        self.win_end = None        # ... its last window's end (send + safe-ms)
        self.win_stop = None       # ... when it stopped using (at the latest)
        self.wf_why = None
        self.released = False      # its UNLOCK was answered OK <name>

    def follow_windows(self):
        """A window-follower's use of the resource, from its CHECK answers
        alone (the client's own wf_stop events are not trusted): it starts
        using at the first answer whose window is not over yet, and stops
        when its last window ends before a fresh answer arrives (answers
        after that do not count); a window that ends later extends it."""
        last = None
        for sent, recv, safe_ms in sorted(self.checks, key=lambda x: x[1]):
            if last is not None and recv > last:
                self.wf_why = "window ran out"
                break
            end = sent + safe_ms / 1000.0
            if last is None:
                if end <= recv:
                    self.wf_why = "no window"
                    break
                self.use_from = recv
                last = end
            elif end > last:
                last = end
        self.win_end = self.win_stop = last
        if last is not None and self.wf_why is None:
            self.wf_why = "window ran out" if last < self.end else self.end_kind
        elif last is None and self.wf_why is None:
            self.wf_why = "no answer"

    def effective_end(self):
        """Until when the holder used the resource (for overlaps): the
        hold's end (UNLOCK sent, LOST, drop, close, ERR NOT_HELD), and for
        a window-follower no later than its last window's end, or never
        (-inf) if it got no window."""
        if not self.wf:
            return self.end
        if self.win_stop is None:
            return float("-inf")
        return min(self.end, self.win_stop)

    def finish(self, t, kind):
        """UNLOCK sent, drop, close: the careless client's end too."""
        if self.end is None:
            self.end, self.end_kind = t, kind
        if self.raw_end is None:
            self.raw_end = t

    def brief(self):
        b = {"client": self.c, "daemon": self.d, "name": self.name, "mode": self.mode,
             "token": str(self.token), "ok_at": _r(self.start), "end_at": _r(self.end),
             "end": self.end_kind, "lost_at": _r(self.lost_t), "lost_reason": self.lost_reason}
        if self.wf:
            b.update(window_following=True, checks=len(self.checks),
                     first_window_at=_r(self.use_from), last_window_end=_r(self.win_end),
                     stopped=self.wf_why,
                     last_checks=[[_r(x), _r(y), z] for x, y, z in self.checks[-4:]])
        return b


def check(events_path, margin=None, out_path=None, quiet=False):
    """Replays events_path; returns the summary dict (and writes it)."""
    events = []
    with open(events_path) as f:
        for n, line in enumerate(f):
            line = line.strip()
            if not line:
                continue
            try:
                e = json.loads(line)
            except ValueError:
                continue            # a torn last line of a killed run
            e["_n"] = n
            events.append(e)
    events.sort(key=lambda e: (e["t"], e["_n"]))
    times = [e["t"] for e in events]
    run = next((e for e in events if e["ev"] == "run" and e.get("phase") == "start"), {})
    if margin is None:
        margin = run.get("margin", 10.0)
    wf_clients = set(run.get("window_followers") or ())
    t_first = events[0]["t"] if events else 0.0
    t_last = events[-1]["t"] if events else 0.0

    # Times when ZooKeeper served no one although it had a quorum (a
    # "zk_wedged" start until the ensemble served again), as [(t0, t1)].
    wedges = []
    wedge_start = None
    for e in events:
        if e["ev"] == "zk_wedged" and e.get("phase") == "start":
            wedge_start = e.get("since", e["t"])
        elif e["ev"] == "zk_wedged" and e.get("phase") == "end" and wedge_start is not None:
            wedges.append((wedge_start, e["t"]))
            wedge_start = None
    if wedge_start is not None:
        wedges.append((wedge_start, float("inf")))

    # Freezes of daemons: d -> [(stopped_t, continued_t)]
    freezes = collections.defaultdict(list)
    stopped_at = {}
    faults = collections.Counter()
    fault_failed = collections.Counter()
    fault_details = collections.Counter()
    fault_log = []
    for e in events:
        if e["ev"] == "daemon" and e.get("phase") == "stopped":
            stopped_at[e["d"]] = e["t"]
        elif e["ev"] == "daemon" and e.get("phase") == "continued":
            freezes[e["d"]].append((stopped_at.pop(e["d"]), e["t"]))
        elif e["ev"] == "fault":
            if e.get("phase") == "start":
                faults[e["kind"]] += 1
                fault_log.append(e)
                if e["kind"].startswith("part-"):
                    detail = e["kind"] + (" " + e["variant"] if e.get("variant") else "")
                    if e.get("mode"):
                        detail += " (session server %s)" % e["mode"] if "d" in e and \
                            e["kind"] != "part-oneway" else " (%s)" % e["mode"]
                    fault_details[detail] += 1
                    if e.get("steered"):
                        fault_details[e["kind"] + " steered first"] += 1
            elif e.get("phase") == "failed":
                fault_failed[e["kind"]] += 1
    for d, t in stopped_at.items():
        freezes[d].append((t, float("inf")))

    def frozen_overlap(d, a, b):
        return sum(max(0.0, min(b, y) - max(a, x)) for x, y in freezes.get(d, ()))

    # Each fault from its start until a session timeout after the soak saw
    # the system healthy again (or the fault failed), for the holds and
    # windows given just before recovery: [(t0, t1, kind)].
    after = (run.get("session_ms") or 4000) / 1000.0
    fault_spans = []
    for e in events:
        if e["ev"] == "fault" and e.get("phase") == "start":
            if fault_spans:
                fault_spans[-1][1] = min(fault_spans[-1][1], e["t"])
            fault_spans.append([e["t"], float("inf"), e["kind"]])
        elif fault_spans and fault_spans[-1][1] == float("inf") and (
                e["ev"] == "healthy" or (e["ev"] == "fault" and e.get("phase") == "failed")):
            fault_spans[-1][1] = e["t"] + after
    span_starts = [x[0] for x in fault_spans]
    steering = [e for e in events if e["ev"] == "fault" and e.get("phase") == "steer"]
    for e in steering:             # a steer step comes before its fault's start
        i = bisect.bisect_right(span_starts, e["t"])
        if i < len(fault_spans):
            fault_spans[i][0] = min(fault_spans[i][0], e["t"])
    span_starts = [x[0] for x in fault_spans]

    def fault_kind_at(t):
        """The kind of the fault under way at t (from its start, or its
        steering, until the system was healthy again), or "none"."""
        i = bisect.bisect_right(span_starts, t) - 1
        if i >= 0 and t <= fault_spans[i][1]:
            return fault_spans[i][2]
        return "none"

    def fault_at(t):
        """The last fault started at or before t, as text."""
        best = None
        for f in fault_log:
            if f["t"] <= t:
                best = f
        if best is None:
            return None
        return "%s %s at t=%.3f" % (best["kind"], {k: v for k, v in best.items()
                                                   if k in ("d", "zk", "secs")}, best["t"])

    by_client = collections.defaultdict(list)
    for e in events:
        if "c" in e and e["ev"] in ("conn", "send", "recv", "drop", "close", "abandon",
                                   "confused"):
            by_client[e["c"]].append(e)

    holds = []
    requests = []              # dicts: c, d, kind, line, wait, t, reply_t, reply, drop_t
    anomalies = collections.defaultdict(list)
    lost_reasons = collections.Counter()
    lost_after_unlock = 0
    drops = 0
    closes = collections.Counter()
    unlock_replies = collections.Counter()
    checks_answered = collections.Counter()
    timeouts = []
    early = []                 # TIMEOUT arrival minus wait-ms, unadjusted
    errors = collections.Counter()
    first_after_cont = []      # (freeze, hold, first line)
    recv_by_client = {}        # c -> [(t, line, d)] for the SIGCONT check

    for c, evs in by_client.items():
        pending = collections.deque()
        hold = None
        last_hold = None
        d = None
        recvs = []
        for e in evs:
            ev, t = e["ev"], e["t"]
            if ev == "conn":
                d = e["d"]
            elif ev == "send":
                line = e["line"]
                req = {"c": c, "d": d, "t": t, "line": line, "rid": e["rid"], "kind":
                       line.split()[0], "reply_t": None, "reply": None, "drop_t": None,
                       "wait": None, "hold": hold}
                m = LOCK_RE.match(line)
                if m:
                    req["name"] = m.group(1)
                    req["wait"] = int(m.group(2)) if m.group(2) else None
                    req["mode"] = "shared" if m.group(3) else "exclusive"
                elif req["kind"] == "CHECK":
                    req["name"] = line.split()[1]
                elif req["kind"] == "UNLOCK":
                    req["name"] = line.split()[1]
                    if hold is not None and hold.name == req["name"]:
                        hold.finish(t, "unlock")
                        holds.append(hold)
                        last_hold, hold = hold, None
                    req["hold"] = last_hold
                pending.append(req)
                requests.append(req)
            elif ev == "recv":
                line = e["line"]
                recvs.append((t, line, d))
                if line.startswith("LOST "):
                    parts = line.split()
                    name, token = parts[1], int(parts[2])
                    reason = parts[3] if len(parts) > 3 else ""
                    lost_reasons[reason] += 1
                    if hold is not None and hold.name == name and hold.token == token:
                        hold.lost_t, hold.lost_reason = t, reason
                        if hold.end is None:
                            hold.end, hold.end_kind = t, "lost"
                    elif last_hold is not None and last_hold.name == name and \
                            last_hold.token == token and last_hold.lost_t is None:
                        last_hold.lost_t, last_hold.lost_reason = t, reason
                        lost_after_unlock += 1
                    else:
                        anomalies["lost_for_no_hold"].append(
                            {"client": c, "daemon": d, "t": t, "line": line})
                    continue
                if not pending:
                    anomalies["reply_without_request"].append(
                        {"client": c, "daemon": d, "t": t, "line": line})
                    continue
                req = pending.popleft()
                req["reply_t"], req["reply"] = t, line
                kind = req["kind"]
                if kind == "LOCK":
                    parts = line.split()
                    if len(parts) == 3 and parts[0] == "OK" and parts[1] == req["name"]:
                        hold = Hold(c, d, req["name"], req["mode"], int(parts[2]), t,
                                    req["rid"], req["t"], wf=c in wf_clients)
                    elif parts and parts[0] == "TIMEOUT":
                        took = t - req["t"]
                        late = took - frozen_overlap(d, req["t"], t) - (req["wait"] or 0) / 1000.0
                        timeouts.append(late)
                        early.append(took - (req["wait"] or 0) / 1000.0)
                        if req["wait"] is not None and took < req["wait"] / 1000.0 - EARLY_OK:
                            anomalies["early_timeout"].append(
                                {"client": c, "daemon": d, "t": t, "line": line,
                                 "wait_ms": req["wait"], "after_s": _r(t - req["t"])})
                    elif parts and parts[0] == "ERR":
                        errors[" ".join(parts[:2])] += 1
                    else:
                        anomalies["unexpected_reply"].append(
                            {"client": c, "daemon": d, "t": t, "request": req["line"],
                             "line": line})
                elif kind == "UNLOCK":
                    h = req["hold"]
                    if line == "OK %s" % req["name"]:
                        unlock_replies["OK"] += 1
                        if h is not None and h.name == req["name"]:
                            h.released = True
                        if h is not None and h.lost_t is not None and h.lost_t < t:
                            anomalies["unlock_ok_after_lost"].append(
                                {"client": c, "daemon": d, "t": t, "hold": h.brief()})
                    elif line.startswith("ERR NOT_HELD"):
                        unlock_replies["NOT_HELD"] += 1
                        if h is None or h.lost_t is None:
                            # a LOST may still be on its way: judged at the end
                            req["not_held_check"] = True
                    else:
                        unlock_replies[line.split()[0]] += 1
                        if not line.startswith("ERR "):
                            anomalies["unexpected_reply"].append(
                                {"client": c, "daemon": d, "t": t, "request": req["line"],
                                 "line": line})
                elif kind == "CHECK":
                    h = req["hold"]
                    parts = line.split()
                    if len(parts) == 4 and parts[0] == "OK" and parts[3].isdigit() and \
                            h is not None and parts[1:3] == [h.name, str(h.token)]:
                        checks_answered["OK"] += 1
                        if h.lost_t is not None and h.lost_t < t:
                            anomalies["check_ok_after_lost"].append(
                                {"client": c, "daemon": d, "t": t, "line": line,
                                 "hold": h.brief()})
                        h.checks.append((req["t"], t, int(parts[3])))
                        if int(parts[3]) == 0:
                            checks_answered["OK 0"] += 1
                    elif line.startswith("ERR NOT_HELD"):
                        checks_answered["NOT_HELD"] += 1
                        if h is None or h.lost_t is None:
                            req["not_held_check"] = True
                        if h is not None and h is hold:
                            # the hold is over for the daemon; the client moves on
                            hold.finish(t, "check_not_held")
                            holds.append(hold)
                            last_hold, hold = hold, None
                    else:
                        checks_answered[line.split()[0] if line else ""] += 1
                        if not line.startswith("ERR "):
                            anomalies["unexpected_reply"].append(
                                {"client": c, "daemon": d, "t": t, "request": req["line"],
                                 "line": line})
                elif kind == "PING":
                    if line != "PONG":
                        anomalies["unexpected_reply"].append(
                            {"client": c, "daemon": d, "t": t, "request": "PING",
                             "line": line})
            elif ev in ("drop", "close"):
                if ev == "drop":
                    drops += 1
                else:
                    closes[e.get("why")] += 1
                for req in pending:
                    req["drop_t"] = t
                    req["closed_by"] = ev if ev == "drop" else "client-" + e.get("why", "")
                pending.clear()
                if hold is not None:
                    hold.finish(t, ev)
                    holds.append(hold)
                    last_hold, hold = hold, None
                d = None
            elif ev == "confused":
                anomalies["client_confused"].append(
                    {"client": c, "daemon": e.get("d"), "t": t, "state": e.get("state"),
                     "line": e.get("line")})
        if hold is not None:
            hold.finish(t_last, "open")
            holds.append(hold)
        recv_by_client[c] = recvs

    for req in requests:
        if req.get("not_held_check"):
            h = req["hold"]
            if h is None or h.lost_t is None:
                anomalies["not_held_without_lost" if req["kind"] == "UNLOCK"
                          else "check_not_held_without_lost"].append(
                    {"client": req["c"], "daemon": req["d"], "t": req["reply_t"],
                     "hold": h.brief() if h else None})
    for h in holds:
        if h.wf:
            h.follow_windows()

    # ---- overlaps
    by_name = collections.defaultdict(list)
    for h in holds:
        by_name[h.name].append(h)
    overlaps = {"told": [], "paused": [], "violation": [], "window_unused": [],
                "window_ok": [], "window_violation": []}
    handoffs = []              # window-following earlier holders: see below

    def freeze_between(h, t):
        """The freeze of h's daemon that began after h's OK and before t."""
        for x, y in freezes.get(h.d, ()):
            if h.start <= x <= t:
                return (x, y)
        return None

    def after_sigcont(h, cont):
        """How holder h heard of its loss after its daemon's SIGCONT:
        ("LOST", lines before it) when the LOST came before any OK line,
        else (kind of the offending first line, lines)."""
        seen = []
        for tt, line, _d in recv_by_client.get(h.c, ()):
            if tt < cont:
                continue
            if line.startswith("LOST ") and line.split()[1:3] == [h.name, str(h.token)]:
                return "LOST", seen
            if line.startswith("OK "):
                return "OK", seen + [line]
            seen.append(line)
        return "nothing", seen

    for name, hs in by_name.items():
        hs.sort(key=lambda h: h.start)
        active = []
        for b in hs:
            active = [a for a in active if a.raw_end > b.start]
            for a in active:
                if a.mode == "shared" and b.mode == "shared":
                    continue
                if a.wf:
                    # A window-follower uses the resource from its first
                    # window until min(its hold's end, its last window's
                    # end): b's grant before that is a violation, whatever
                    # a was told and whether its daemon was stopped.
                    if a.win_stop is None:
                        overlaps["window_unused"].append(
                            {"name": name, "earlier": a.brief(), "later": b.brief()})
                        continue
                    eff = a.effective_end()
                    rec = {"name": name, "slack_s": _r(b.start - a.win_end, 4),
                           "effective_end_at": _r(eff), "earlier": a.brief(),
                           "later": b.brief(), "fault": fault_at(b.start),
                           "fault_kind": fault_kind_at(b.start)}
                    if b.start < eff:
                        rec["overlap_s"] = _r(min(eff, b.end) - b.start)
                        rec["timeline"] = timeline(events, times, (a.c, b.c),
                                                   a.start - 1.0, max(b.start, eff) + 1.0)
                        overlaps["window_violation"].append(rec)
                    else:
                        overlaps["window_ok"].append(rec)
                    continue
                rec = {"name": name, "earlier": a.brief(), "later": b.brief(),
                       "overlap_s": _r(min(a.end, b.end) - b.start)}
                if a.end <= b.start:
                    rec["overlap_s"] = _r(min(a.raw_end, b.end) - b.start)
                    overlaps["told"].append(rec)
                    continue
                fz = freeze_between(a, b.start)
                rec["fault"] = fault_at(b.start)
                how = None
                if fz and a.end < fz[1]:
                    how = "released while frozen"    # UNLOCK sent to the stopped daemon
                elif fz:
                    how, before = after_sigcont(a, fz[1])
                    rec["earlier_after_sigcont"] = before + (["LOST"] if how == "LOST" else [])
                if fz:
                    rec["freeze"] = [_r(fz[0]), _r(fz[1])]
                    rec["earlier_ended"] = how
                if how in ("LOST", "released while frozen") and b.token > a.token:
                    overlaps["paused"].append(rec)
                else:
                    rec["timeline"] = timeline(events, times, (a.c, b.c), a.start - 1.0,
                                               max(b.start, a.end) + 1.0)
                    overlaps["violation"].append(rec)
            active.append(b)

    # ---- window handoffs: each window-following hold that had a window
    # and was not released by an UNLOCK answered OK (it was lost, its
    # windows ran out, its connection dropped...), with the first grant
    # after it that conflicts with it. Its slack is that grant's time
    # minus the hold's last window end: how much sooner than the next
    # holder the window-follower stopped (a violation if the grant came
    # before its effective end: listed above as window_violation).
    for name, hs in by_name.items():
        for i, a in enumerate(hs):
            if not a.wf or a.win_end is None:
                continue
            b = next((x for x in hs[i + 1:] if x.start > a.start and
                      not (a.mode == "shared" and x.mode == "shared")), None)
            if b is None or (a.released and b.start >= a.raw_end):
                continue
            handoffs.append({
                "name": name, "slack_s": _r(b.start - a.win_end, 4),
                "violation": b.start < a.effective_end(),
                "told_first": a.lost_t is not None and a.lost_t <= b.start,
                "fault_kind": fault_kind_at(b.start), "fault": fault_at(b.start),
                "earlier": a.brief(), "later": b.brief()})

    # A handoff told LOST first and granted before the last window end:
    # did the holder's own daemon give the hold up (send the delete of its
    # node, in its debug log) between the LOST and the grant? If so the
    # LOST cut the window short (finding 6 of docs/SOAK.md); if not, the
    # name was freed by something else (the session's expiry, say) before
    # the window ran out, and only the LOST saved the holder.
    releases = daemon_releases(os.path.dirname(os.path.abspath(events_path)))
    ev_w = [(e["t"], e["w"]) for e in events]

    def wall_at(t):
        i = min(bisect.bisect_left(times, t), len(times) - 1)
        return ev_w[i][1] + (t - ev_w[i][0])
    for r in handoffs:
        if not (r["told_first"] and r["slack_s"] < 0):
            continue
        a, b = r["earlier"], r["later"]
        if releases is None:
            r["released_by_its_daemon"] = None
            continue
        lo, hi = wall_at(a["lost_at"]) - 0.05, wall_at(b["ok_at"]) + 0.005
        r["released_by_its_daemon"] = any(
            lo <= x <= hi for x in releases.get((a["daemon"], a["name"], int(a["token"])), ()))
        if not r["released_by_its_daemon"]:
            r["timeline"] = timeline(events, times, (a["client"], b["client"]),
                                     a["ok_at"] - 1.0, b["ok_at"] + 1.0)

    # ---- first line after SIGCONT for holders on the frozen daemon
    after_cont = collections.Counter()
    after_cont_bad = []
    for d, fzs in freezes.items():
        for x, y in fzs:
            if y == float("inf"):
                continue
            for h in holds:
                if h.d != d or not (h.start < x and h.end > x):
                    continue
                if h.end < y:
                    after_cont["released while frozen"] += 1
                    continue
                how, before = after_sigcont(h, y)
                if how == "LOST":
                    kind = "LOST first" if not before else "LOST after " + "+".join(
                        sorted(set(l.split()[0] for l in before)))
                else:
                    kind = how
                after_cont[kind] += 1
                if how != "LOST":
                    after_cont_bad.append({"hold": h.brief(), "freeze": [_r(x), _r(y)],
                                           "lines_after_sigcont": before[:10],
                                           "timeline": timeline(events, times, (h.c,), x - 0.5,
                                                                y + 2.0)})

    # ---- tokens in OK order
    token_viol = []
    for name, hs in by_name.items():
        hs.sort(key=lambda h: h.start)
        max_any = max_excl = None
        prev_any = prev_excl = None
        for h in hs:
            if h.mode == "exclusive":
                if max_any is not None and h.token <= max_any:
                    token_viol.append({"name": name, "hold": h.brief(), "after": prev_any.brief(),
                                       "fault": fault_at(h.start)})
            else:
                if max_excl is not None and h.token <= max_excl:
                    token_viol.append({"name": name, "hold": h.brief(),
                                       "after": prev_excl.brief(), "fault": fault_at(h.start)})
            if max_any is None or h.token > max_any:
                max_any, prev_any = h.token, h
            if h.mode == "exclusive" and (max_excl is None or h.token > max_excl):
                max_excl, prev_excl = h.token, h

    # ---- unanswered requests
    unanswered = []
    answered_late = []
    endless = []               # LOCK without wait-ms over NO_WAIT_LIMIT + margin
    endless_wedged = 0         # ... while the ensemble was wedged (see below)
    for req in requests:
        limit = margin
        if req["kind"] == "LOCK":
            limit += (req["wait"] / 1000.0) if req["wait"] is not None else NO_WAIT_LIMIT
        end = req["reply_t"] if req["reply_t"] is not None else (req["drop_t"] or t_last)
        frozen = frozen_overlap(req["d"], req["t"], end)
        took = end - req["t"] - frozen
        if req["reply_t"] is None and req["drop_t"] is not None and \
                req.get("closed_by") == "drop":
            continue
        if took <= limit:
            continue
        rec = {"client": req["c"], "daemon": req["d"], "request": req["line"],
               "sent_at": _r(req["t"]), "reply": req["reply"], "after_s": _r(end - req["t"]),
               "frozen_s": _r(frozen), "end": req.get("closed_by") or
               ("reply" if req["reply_t"] is not None else "end of log"),
               "fault": fault_at(req["t"])}
        rec["timeline"] = timeline(events, times, (req["c"],), req["t"] - 0.5, req["t"] + 3.0)
        if req["kind"] == "LOCK" and req["wait"] is None:
            # Nothing bounds such a wait but the holders ahead of it and
            # ZooKeeper; one that spans a wedged ensemble proves nothing.
            if any(x < end and req["t"] < y for x, y in wedges):
                endless_wedged += 1
            else:
                endless.append(rec)
            continue
        (answered_late if req["reply_t"] is not None else unanswered).append(rec)

    # ---- handovers: every EOF (any drop), LOST and ERR (NOT_HELD
    # included) a client received from the signal until HANDOVER_WINDOW
    # after the handover ended (its end seen in the daemon's log), on a
    # connection to the daemon handed over or, for a client that was
    # talking to it at the signal, on any connection, is a failure of the
    # handover, unless another fault's window (the spans above), a freeze
    # or a wedged ensemble overlaps the handover's window (the nemesis
    # schedules none so), or it is a NOT_HELD following a LOST that came
    # before the signal (for a hold granted before that LOST).
    ho_window = run.get("handover_window", HANDOVER_WINDOW)
    hos = []
    for e in events:
        if e["ev"] != "handover":
            continue
        if e.get("phase") == "signal":
            hos.append({"d": e["d"], "t": e["t"], "end_t": None, "outcome": None,
                        "secs": None})
            continue
        h = next((x for x in reversed(hos) if x["d"] == e.get("d") and x["end_t"] is None),
                 None)
        if h is None:
            continue
        if e.get("phase") == "end":
            h.update(end_t=e["t"], outcome=e.get("outcome"), secs=e.get("secs"))
        elif e.get("phase") == "failed":
            h.update(end_t=e["t"], outcome="no end logged")
    ho_logs = daemon_handovers(os.path.dirname(os.path.abspath(events_path)))
    for h in hos:
        h["until"] = (h["end_t"] if h["end_t"] is not None else h["t"] + 20.0) + ho_window
        # a daemon told to stop (SIGTERM) by someone else than the
        # tear-down, as its log says: a fault nobody scheduled
        lo, hi = wall_at(h["t"]), wall_at(h["until"])
        h["other"] = sorted(set(
            ["SIGTERM to d%d from outside" % i for i, ws in
             ((ho_logs or {}).get("terms") or {}).items() if any(lo <= x <= hi for x in ws)] +
            [k for x, y, k in fault_spans if x < h["until"] and y > h["t"]] +
            ["daemon-freeze d%s" % d for d, fzs in freezes.items() for x, y in fzs
             if x < h["until"] and y > h["t"]] +
            ["zk-wedged" for x, y in wedges if x < h["until"] and y > h["t"]]))
    ho_starts = [h["t"] for h in hos]

    def handover_at(t):
        """The handovers whose window holds t."""
        i = bisect.bisect_right(ho_starts, t) - 1
        return [hos[j] for j in range(max(0, i - 3), i + 1) if hos[j]["t"] <= t <= hos[j]["until"]]

    def brief_ho(h):
        return {"daemon": h["d"], "signal_at": _r(h["t"]), "end_at": _r(h["end_t"]),
                "outcome": h["outcome"], "other_faults": h["other"]}
    ho_fail, ho_explained, ho_after_lost = [], [], []
    ho_kinds = collections.Counter()
    for c, evs in by_client.items():
        conns = []             # (t, daemon or None)
        last_grant = last_lost = None
        for e in evs:
            ev, t = e["ev"], e["t"]
            if ev == "conn":
                conns.append((t, e["d"]))
            elif ev in ("drop", "close"):
                conns.append((t, None))
            line = e.get("line") or ""
            what = None
            if ev == "drop":
                what = "EOF (%s)" % e.get("why")
            elif ev == "recv":
                if line.startswith("LOST "):
                    what = "LOST"
                elif line.startswith("ERR "):
                    what = " ".join(line.split()[:2])
            if what is not None and hos:
                for h in handover_at(t):
                    i = bisect.bisect_right([x for x, _ in conns], h["t"]) - 1
                    was = conns[i][1] if i >= 0 else None
                    if h["d"] not in (e.get("d"), was):
                        continue
                    rec = {"client": c, "daemon": e.get("d"), "t": _r(t), "line":
                           line if ev == "recv" else "EOF (%s)" % e.get("why"),
                           "after_signal_s": _r(t - h["t"]), "handover": brief_ho(h)}
                    if h["other"]:
                        ho_explained.append(rec)
                    elif what == "ERR NOT_HELD" and last_lost is not None and \
                            last_lost < h["t"] and (last_grant is None or
                                                    last_grant < last_lost):
                        ho_after_lost.append(rec)
                    else:
                        ho_kinds[what] += 1
                        rec["timeline"] = timeline(events, times, (c,), h["t"] - 0.5,
                                                   h["until"] + 0.5)
                        ho_fail.append(rec)
            if ev == "recv":
                if line.startswith("LOST "):
                    last_lost = t
                elif line.startswith("OK ") and len(line.split()) == 3:
                    last_grant = t
    # how long requests other than LOCK sent to the daemon handed over
    # between the signal and the end waited for their reply (the pause)
    pauses = collections.defaultdict(float)
    for req in requests:
        if req["kind"] == "LOCK" or req["reply_t"] is None:
            continue
        for h in handover_at(req["t"]):
            if h["d"] == req["d"] and h["end_t"] is not None and req["t"] <= h["end_t"]:
                k = id(h)
                pauses[k] = max(pauses[k], req["reply_t"] - req["t"])
    pause_s = sorted(pauses.values())
    # requests answered late or never: which handovers of their daemon
    # happened while they were pending
    for rec in answered_late + unanswered + endless:
        end = rec["sent_at"] + rec["after_s"]
        rec["handovers_while_pending"] = [brief_ho(h) for h in hos if h["d"] == rec["daemon"]
                                          and rec["sent_at"] <= h["t"] <= end]
    ho_secs = sorted(h["secs"] for h in hos if h["secs"] is not None)
    handover_summary = {
        "signalled": len(hos),
        "outcomes": dict(collections.Counter(h["outcome"] for h in hos)),
        "in_daemon_logs": ho_logs["counts"] if ho_logs else None,
        "not_done_lines": ho_logs["not_done"][:20] if ho_logs else None,
        "secs_avg": _r(sum(ho_secs) / len(ho_secs)) if ho_secs else None,
        "secs_max": _r(ho_secs[-1]) if ho_secs else None,
        "pause_s_p50": _r(_pct(pause_s, 50)), "pause_s_max": _r(pause_s[-1]) if pause_s else None,
        "windows_with_another_fault": sum(1 for h in hos if h["other"]),
        "failures": len(ho_fail),
        "failures_by_kind": dict(ho_kinds),
        "explained_by_another_fault": len(ho_explained),
        "not_held_after_earlier_lost": len(ho_after_lost),
        "late_or_unanswered_across_a_handover": sum(
            1 for r in answered_late + unanswered + endless if r["handovers_while_pending"]),
    }

    # ---- nodes, daemons
    nodes = {}
    for e in events:
        if e["ev"] == "zk_nodes":
            root = e.get("root", run.get("root", "/"))
            if "nodes" not in e:
                nodes[e["phase"]] = {"error": e.get("error")}
                continue
            locks = [p for p in e["nodes"] if p.startswith(root + "/locks/")
                     and p.count("/") - root.count("/") == 3]
            nodes[e["phase"]] = {"lock_nodes": locks, "other_nodes": [
                p for p in e["nodes"] if p not in locks]}
    daemon_errors = {e["d"]: {"count": e["count"], "lines": e["lines"][:10],
                              "handover_not_done": e.get("handover_not_done", 0)}
                     for e in events if e["ev"] == "daemon_errors"}
    exit_codes = {e["d"]: e["rc"] for e in events
                  if e["ev"] == "daemon" and e.get("phase") == "terminated"}
    dstats = {e["d"]: e["stats"] for e in events if e["ev"] == "daemon_stats"}

    # ---- figures
    grants = [h for h in holds]
    waits = sorted(h.start - h.sent for h in grants)
    hold_s = sorted(h.end - h.start for h in grants)
    end_kinds = collections.Counter(h.end_kind for h in holds)
    per_name = {n: {"holds": len(hs), "exclusive": sum(h.mode == "exclusive" for h in hs),
                    "shared": sum(h.mode == "shared" for h in hs)}
                for n, hs in sorted(by_name.items())}
    timeouts.sort()
    final_nodes = nodes.get("after-wait", nodes.get("after-stop", {}))
    left = final_nodes.get("lock_nodes") if isinstance(final_nodes, dict) else None
    violations = {
        "overlap_not_told": len(overlaps["violation"]),
        "window_violation": len(overlaps["window_violation"]),
        # PROTOCOL.md (Pushed lines): a LOST does not end a window early;
        # the daemon keeps the hold's node until every window it gave ends
        "window_cut_short_by_lost": sum(1 for r in handoffs
                                        if r["told_first"] and r["slack_s"] < 0),
        "first_line_after_sigcont_not_lost": len(after_cont_bad),
        "token_order": len(token_viol),
        "unanswered": len(unanswered),
        "answered_after_deadline": len(answered_late),
        "endless_lock_over_limit": len(endless),
        "early_timeout": len(anomalies["early_timeout"]),
        "not_held_without_lost": len(anomalies["not_held_without_lost"]),
        "unlock_ok_after_lost": len(anomalies["unlock_ok_after_lost"]),
        "check_ok_after_lost": len(anomalies["check_ok_after_lost"]),
        "check_not_held_without_lost": len(anomalies["check_not_held_without_lost"]),
        "unexpected_reply": len(anomalies["unexpected_reply"]),
        "reply_without_request": len(anomalies["reply_without_request"]),
        "lost_for_no_hold": len(anomalies["lost_for_no_hold"]),
        "lock_nodes_left": len(left) if left is not None else None,
        "lock_nodes_left_at_stop": len(nodes.get("after-stop", {}).get("lock_nodes") or []),
        "daemon_error_lines": sum(v["count"] for v in daemon_errors.values()),
        "daemon_bad_exit": sum(1 for rc in exit_codes.values() if rc != 0),
        # an EOF, LOST or ERR within HANDOVER_WINDOW of a handover
        "handover_failure": len(ho_fail),
    }
    total = sum(v for k, v in violations.items()
                if v and k not in ("lock_nodes_left_at_stop",))
    wf_holds = [h for h in holds if h.wf]
    handoffs.sort(key=lambda r: r["slack_s"])
    by_kind = collections.defaultdict(list)
    for r in handoffs:
        by_kind[r["fault_kind"]].append(r)
    window = {
        "clients": len(wf_clients),
        "holds": len(wf_holds),
        "holds_with_window": sum(1 for h in wf_holds if h.use_from is not None),
        "checks_answered": dict(checks_answered),
        "stopped": dict(collections.Counter(h.wf_why for h in wf_holds)),
        "window_s_max": _r(max((s_ms for h in wf_holds for _x, _y, s_ms in h.checks),
                               default=0) / 1000.0),
        "use_s_max": _r(max((h.effective_end() - h.use_from for h in wf_holds
                             if h.use_from is not None), default=None)),
        "handoffs": len(handoffs),
        "handoffs_told_lost_first": sum(1 for r in handoffs if r["told_first"]),
        "min_slack_s": handoffs[0]["slack_s"] if handoffs else None,
        # the window alone protected: no LOST before the grant
        "min_slack_not_told_s": next((r["slack_s"] for r in handoffs if not r["told_first"]),
                                     None),
        # LOST came first, and then a grant before the last window's end
        # (the daemon gave the hold up after telling LOST, cutting the window
        # short: a violation, violations.window_cut_short_by_lost)
        "told_then_granted_within_window": sum(1 for r in handoffs
                                               if r["told_first"] and r["slack_s"] < 0),
        # ... of which the holder's daemon had given the hold up after its
        # LOST (True), had not (False: the window outlived the hold's node
        # for another reason, and only the LOST saved the holder), or no
        # daemon logs to tell (None)
        "told_then_granted_within_window_released_by_its_daemon": dict(collections.Counter(
            str(r.get("released_by_its_daemon")) for r in handoffs
            if r["told_first"] and r["slack_s"] < 0)),
        "handoffs_by_fault": {k: {"count": len(v), "min_slack_s": min(r["slack_s"] for r in v),
                                  "told_lost_first": sum(1 for r in v if r["told_first"]),
                                  "min_slack_not_told_s": min(
                                      (r["slack_s"] for r in v if not r["told_first"]),
                                      default=None),
                                  "violations": sum(1 for r in v if r["violation"])}
                              for k, v in sorted(by_kind.items())},
        "never_used_overlaps": len(overlaps["window_unused"]),
        "violations": len(overlaps["window_violation"]),
    }
    summary = {
        "events": events_path,
        "run": {k: run.get(k) for k in ("seed", "minutes", "clients", "names", "shared",
                                         "session_ms", "margin", "root", "tick_ms",
                                         "wf_long_hold", "daemon")},
        "duration_s": _r(t_last - t_first, 1),
        "faults": dict(faults),
        "fault_details": dict(fault_details),
        "fault_failures": dict(fault_failed),
        "freezes_of_daemons": sum(len(v) for v in freezes.values()),
        "holds": {"total": len(holds), "per_name": per_name, "end": dict(end_kinds),
                  "hold_s_avg": _r(sum(hold_s) / len(hold_s)) if hold_s else None,
                  "hold_s_max": _r(hold_s[-1]) if hold_s else None},
        "grant_wait_s": {"count": len(waits),
                         "avg": _r(sum(waits) / len(waits)) if waits else None,
                         "p50": _r(_pct(waits, 50)), "p99": _r(_pct(waits, 99)),
                         "max": _r(waits[-1]) if waits else None},
        "timeouts": {"count": len(timeouts),
                     "late_s_p99": _r(_pct(timeouts, 99)),
                     "late_s_max": _r(timeouts[-1]) if timeouts else None,
                     "earliest_s": _r(min(early), 4) if early else None,
                     "early_within_tolerance": sum(1 for x in early if -EARLY_OK <= x < 0)},
        "requests": len(requests),
        "zk_wedged": [[_r(x), _r(y) if y != float("inf") else None] for x, y in wedges],
        "endless_lock_over_limit_while_wedged": endless_wedged,
        "aborted": next((e.get("error") for e in events if e["ev"] == "run"
                         and e.get("phase") == "aborted"), None),
        "errors": dict(errors),
        "lost": dict(lost_reasons),
        "lost_after_unlock_sent": lost_after_unlock,
        "unlock_replies": dict(unlock_replies),
        "drops": drops,
        "client_closes": dict(closes),
        "overlaps": {"told": len(overlaps["told"]), "paused_holder": len(overlaps["paused"]),
                     "not_told": len(overlaps["violation"]),
                     "window_follower_stopped_first": len(overlaps["window_ok"]),
                     "window_follower_never_used": len(overlaps["window_unused"]),
                     "window_violation": len(overlaps["window_violation"]),
                     "paused_holder_distinct_holds": len(set(
                         (o["earlier"]["client"], o["earlier"]["token"])
                         for o in overlaps["paused"])),
                     "paused_holder_lost_after_sigcont_s": sorted(set(
                         _r(o["earlier"]["lost_at"] - o["freeze"][1]) for o in overlaps["paused"]
                         if o["earlier"]["lost_at"] is not None))[:20]},
        "window_following": window,
        "first_line_after_sigcont": dict(after_cont),
        "handovers": handover_summary,
        "nodes": nodes,
        "daemon_exit_codes": exit_codes,
        "net_errors": next((e.get("errors") for e in events if e["ev"] == "net"), None),
        "daemon_errors": daemon_errors,
        "daemon_stats": {d: ({k: s[k] for k in ("grants", "grants_exclusive", "grants_shared",
                                                 "timeouts", "lost", "zk_sessions",
                                                 "zk_reconnects", "total_connections")
                              if k in s} if s else None) for d, s in dstats.items()},
        "violations": violations,
        "violations_total": total,
        "details": {
            "overlap_not_told": overlaps["violation"][:20],
            "overlap_paused_holder": overlaps["paused"][:20],
            "overlap_told_examples": overlaps["told"][:5],
            "window_violation": overlaps["window_violation"][:20],
            "window_smallest_slack": handoffs[:10],
            "window_smallest_slack_not_told": [r for r in handoffs if not r["told_first"]][:10],
            "window_told_then_granted_within_window": [
                r for r in handoffs if r["told_first"] and r["slack_s"] < 0][:100],
            "window_outlived_its_hold_saved_by_lost": [
                r for r in handoffs if r.get("released_by_its_daemon") is False][:20],
            "first_line_after_sigcont_not_lost": after_cont_bad[:20],
            "token_order": token_viol[:20],
            "unanswered": unanswered[:20],
            "answered_after_deadline": answered_late[:20],
            "endless_lock_over_limit": endless[:20],
            "anomalies": {k: v[:20] for k, v in anomalies.items()},
            "lock_nodes_left": left,
            "handover_failures": ho_fail[:50],
            "handover_explained_by_another_fault": ho_explained[:20],
            "handover_not_held_after_earlier_lost": ho_after_lost[:20],
        },
    }
    if out_path:
        with open(out_path, "w") as f:
            json.dump(summary, f, indent=1, sort_keys=False)
            f.write("\n")
    if not quiet:
        print_summary(summary)
    return summary


def daemon_releases(out_dir):
    """From DIR/daemon-<i>.log (debug), when each daemon sent the delete of
    each hold's node: {(i, name, token): [wall times]}, or None without
    logs. A hold's node is the one a "holds ... | passed on | taken over
    while idle, token N" line names."""
    paths = sorted(f for f in os.listdir(out_dir) if re.match(r"daemon-\d+\.log$", f)) \
        if os.path.isdir(out_dir) else []
    if not paths:
        return None
    grant_re = re.compile(r"^(\S+Z) debug zk: (\S+/locks/([^/\s]+)/\S+) (?:holds \S+|passed on|"
                          r"taken over while idle), token (\d+)")
    del_re = re.compile(r"^(\S+Z) debug zk: deleting (\S+)")
    out = collections.defaultdict(list)

    def wall(ts):
        return calendar.timegm(time.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S")) + \
            float("0" + ts[19:-1])
    for f in paths:
        i = int(re.search(r"(\d+)", f).group(1))
        holds_of = collections.defaultdict(list)     # node -> [(name, token)]
        with open(os.path.join(out_dir, f), errors="replace") as fh:
            for line in fh:
                if " debug zk: " not in line[:40]:
                    continue
                m = grant_re.match(line)
                if m:
                    holds_of[m.group(2)].append((m.group(3), int(m.group(4))))
                    continue
                m = del_re.match(line)
                if m:
                    t = wall(m.group(1))
                    for name, token in holds_of.pop(m.group(2), ()):
                        out[(i, name, token)].append(t)
    return out


def daemon_handovers(out_dir):
    """From DIR/daemon-<i>.log: how many handovers ended which way
    ({"took over": n, "refused": n, ...}) and the lines of those that did
    not happen; None without logs."""
    paths = sorted(f for f in os.listdir(out_dir) if re.match(r"^daemon-\d+\.log$", f)) \
        if os.path.isdir(out_dir) else []
    if not paths:
        return None
    counts = collections.Counter()
    not_done = []
    terms = collections.defaultdict(list)     # daemon -> wall times of "caught Terminated"
    for f in paths:
        i = int(re.search(r"(\d+)", f).group(1))
        with open(os.path.join(out_dir, f), errors="replace") as fh:
            for line in fh:
                if " caught Terminated" in line[:60]:
                    ts = line.split()[0]
                    terms[i].append(calendar.timegm(time.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S"))
                                    + float("0" + ts[19:-1]))
                if "handover: " not in line:
                    continue
                m = HANDOVER_END_RE.search(line)
                if m:
                    counts[HANDOVER_OUTCOME[m.group(1)]] += 1
                    if m.group(1) != "took over":
                        not_done.append("%s: %s" % (f, line.rstrip("\n")))
    return {"counts": dict(counts), "not_done": not_done, "terms": dict(terms)}


def timeline(events, times, clients, t0, t1, limit=60):
    """Compact lines: events of these clients and every fault/daemon event
    between t0 and t1 (times: the sorted event times)."""
    out = []
    for e in events[bisect.bisect_left(times, t0):]:
        if e["t"] > t1:
            break
        if e.get("c") in clients or e["ev"] in ("fault", "daemon", "healthy", "handover"):
            rest = {k: v for k, v in e.items() if k not in ("t", "w", "ev", "_n", "c", "d")}
            out.append("%.3f c%s d%s %s %s" % (e["t"], e.get("c", "-"), e.get("d", "-"),
                                               e["ev"], json.dumps(rest, separators=(",", ":"))))
            if len(out) >= limit:
                out.append("...")
                break
    return out


def print_summary(s):
    w = sys.stdout.write
    r = s["run"]
    w("\n==== soak summary (%s) ====\n" % s["events"])
    w("seed %s, %s minutes, %s clients, names %s, shared fraction %s, session %s ms; "
      "%.0f s of events\n" % (r["seed"], r["minutes"], r["clients"], r["names"], r["shared"],
                              r["session_ms"], s["duration_s"] or 0))
    w("faults: %s%s\n" % (", ".join("%s %d" % kv for kv in sorted(s["faults"].items())),
                          ("; FAILED " + str(s["fault_failures"])) if s["fault_failures"] else ""))
    if s["fault_details"]:
        w("partitions: %s\n" % ", ".join("%s %d" % kv for kv in sorted(s["fault_details"].items())))
    if s["zk_wedged"]:
        w("ZooKeeper wedged (quorum, but no session could be made) %d times: %s; LOCKs "
          "without wait-ms pending through it: %d\n"
          % (len(s["zk_wedged"]), s["zk_wedged"], s["endless_lock_over_limit_while_wedged"]))
    if s["aborted"]:
        w("RUN ABORTED: %s\n" % s["aborted"])
    h = s["holds"]
    w("holds: %d (%s); ended by %s; hold avg %ss max %ss\n" % (
        h["total"], ", ".join("%s %d" % (n, v["holds"]) for n, v in h["per_name"].items()),
        h["end"], h["hold_s_avg"], h["hold_s_max"]))
    g = s["grant_wait_s"]
    w("grant wait (LOCK sent -> OK): avg %ss p50 %ss p99 %ss max %ss\n"
      % (g["avg"], g["p50"], g["p99"], g["max"]))
    tm = s["timeouts"]
    w("timeouts: %d (late by at most %ss, frozen time excluded; %d up to %d ms early, "
      "earliest %ss); errors %s\n"
      % (tm["count"], tm["late_s_max"], tm["early_within_tolerance"], EARLY_OK * 1000,
         tm["earliest_s"], s["errors"]))
    w("LOST: %s (+%d after UNLOCK was sent); UNLOCK replies %s; drops %d; closes %s\n"
      % (s["lost"], s["lost_after_unlock_sent"], s["unlock_replies"], s["drops"],
         s["client_closes"]))
    o = s["overlaps"]
    w("overlapping pairs, careless earlier holder: told first %d (only a client ignoring "
      "LOST overlaps), paused holder (fencing) %d (%d holds), NOT TOLD %d\n"
      % (o["told"], o["paused_holder"], o["paused_holder_distinct_holds"], o["not_told"]))
    w("overlapping pairs, window-following earlier holder: it had stopped using first %d, "
      "never had a window %d, WINDOW VIOLATION %d\n"
      % (o["window_follower_stopped_first"], o["window_follower_never_used"],
         o["window_violation"]))
    if s.get("net_errors"):
        w("netcut errors: %s\n" % s["net_errors"])
    wf = s["window_following"]
    if wf["clients"]:
        w("window-following: %d clients, %d holds (%d with a window; longest window %ss, "
          "longest use %ss); CHECK answers %s; stopped using: %s\n"
          % (wf["clients"], wf["holds"], wf["holds_with_window"], wf["window_s_max"],
             wf["use_s_max"], wf["checks_answered"], wf["stopped"]))
        w("window handoffs (the next conflicting grant after a window-following hold not "
          "released by an UNLOCK answered OK): %d (told LOST first %d, of which granted "
          "before the last window end %d: its daemon had given the hold up after the LOST "
          "%s); smallest slack (grant - last window end) %s, "
          "without a LOST first %s; by fault: %s; WINDOW VIOLATIONS %d\n"
          % (wf["handoffs"], wf["handoffs_told_lost_first"],
             wf["told_then_granted_within_window"],
             wf["told_then_granted_within_window_released_by_its_daemon"],
             "-" if wf["min_slack_s"] is None else "%.3f s" % wf["min_slack_s"],
             "-" if wf["min_slack_not_told_s"] is None else "%.3f s" % wf["min_slack_not_told_s"],
             ", ".join("%s %d (min %.3f s)" % (k, v["count"], v["min_slack_s"])
                       for k, v in wf["handoffs_by_fault"].items()) or "-",
             wf["violations"]))
    w("first line after SIGCONT to a holder on the frozen daemon: %s\n"
      % s["first_line_after_sigcont"])
    ho = s["handovers"]
    if ho["signalled"] or ho["in_daemon_logs"]:
        w("handovers: %d signalled, outcomes %s; in the daemons' logs %s (done = took over; "
          "refused / given-up: the daemon served on); signal to end avg %ss max %ss; longest "
          "pause of a request sent meanwhile %ss (p50 %ss); windows touching another fault %d\n"
          % (ho["signalled"], ho["outcomes"], ho["in_daemon_logs"], ho["secs_avg"],
             ho["secs_max"], ho["pause_s_max"], ho["pause_s_p50"],
             ho["windows_with_another_fault"]))
        w("handover failures (EOF, LOST, ERR within %gs of a handover of the client's daemon): "
          "%d %s; explained by another fault %d; NOT_HELD after an earlier LOST %d; requests "
          "answered late or never with a handover of their daemon while pending %d\n"
          % (HANDOVER_WINDOW, ho["failures"], ho["failures_by_kind"] or "",
             ho["explained_by_another_fault"], ho["not_held_after_earlier_lost"],
             ho["late_or_unanswered_across_a_handover"]))
        for line in (ho["not_done_lines"] or [])[:5]:
            w("  handover not done: %s\n" % line)
    for phase, n in s["nodes"].items():
        w("nodes %s: %s lock nodes %s; other %s\n" % (
            phase, len(n.get("lock_nodes") or []), n.get("lock_nodes") or "",
            n.get("other_nodes", n.get("error"))))
    w("daemon exit codes %s; error lines %s\n" % (
        s["daemon_exit_codes"], {d: v["count"] for d, v in s["daemon_errors"].items()}))
    v = {k: x for k, x in s["violations"].items() if x}
    w("VIOLATIONS: %s\n" % (v if s["violations_total"] else "none"))
    sys.stdout.flush()


# ------------------------------------------------------------------ self-test

def self_test():
    """Runs the checker on small made-up logs whose verdicts are known:
    that it flags a grant inside a window-follower's window, and only
    that. Returns the number of failed cases (0: all passed)."""
    import tempfile

    def case(label, a_lines, b_ok_at, expect, a_wf=True, extra=()):
        """Client 0 takes n0 (OK at 1.0; LOCK at 0.5) and then does
        a_lines [(t, ev, line)]; client 1, which asked at 0.6 on another
        daemon, is granted n0 at b_ok_at and unlocks 0.1 s later.
        expect: {summary path: value}; extra: more events (nemesis steps)."""
        ev = [dict(ev="run", phase="start", t=0.0, seed=0, minutes=0, clients=2,
                   names=["n0"], shared=0, session_ms=4000, margin=10.0, root="/x",
                   window_followers=[0] if a_wf else [])]
        ev += [dict(ev="conn", c=0, d=0, t=0.1), dict(ev="conn", c=1, d=1, t=0.1),
               dict(ev="send", c=0, d=0, rid=1, line="LOCK n0 5000", t=0.5),
               dict(ev="recv", c=0, d=0, line="OK n0 100", t=1.0),
               dict(ev="send", c=1, d=1, rid=1, line="LOCK n0", t=0.6),
               dict(ev="recv", c=1, d=1, line="OK n0 200", t=b_ok_at),
               dict(ev="send", c=1, d=1, rid=2, line="UNLOCK n0", t=b_ok_at + 0.1),
               dict(ev="recv", c=1, d=1, line="OK n0", t=b_ok_at + 0.101)]
        rid = 1
        for t, kind, line in a_lines:
            if kind == "send":
                rid += 1
                ev.append(dict(ev="send", c=0, d=0, rid=rid, line=line, t=t))
            else:
                ev.append(dict(ev="recv", c=0, d=0, line=line, t=t))
        ev += [dict(e) for e in extra]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "events.jsonl")
            with open(path, "w") as f:
                for e in ev:
                    e.setdefault("w", e["t"])
                    f.write(json.dumps(e) + "\n")
            summ = check(path, quiet=True)
        bad = []
        for key, want in expect.items():
            got = summ
            for k in key.split("."):
                got = got[k]
            if got != want:
                bad.append("%s = %r, not %r" % (key, got, want))
        sys.stdout.write("self-test %-58s %s\n" % (label, "ok" if not bad else
                                                   "FAILED: " + "; ".join(bad)))
        return 1 if bad else 0

    chk = [(1.01, "send", "CHECK n0"), (1.011, "recv", "OK n0 100 3000")]   # window to 4.01
    unlock = [(6.0, "send", "UNLOCK n0"), (6.001, "recv", "ERR NOT_HELD x")]
    lost = [(2.5, "recv", "LOST n0 100 zk-disconnected")]
    fails = 0
    fails += case("grant inside the window: violation", chk + unlock, 3.0,
                  {"violations.window_violation": 1, "window_following.min_slack_s": -1.01,
                   "violations_total": 2})   # + the UNLOCK's NOT_HELD without a LOST
    fails += case("grant after the window: handoff, no violation",
                  chk + [(6.0, "send", "UNLOCK n0"), (6.001, "recv", "OK n0")], 4.5,
                  {"violations.window_violation": 0, "window_following.handoffs": 1,
                   "window_following.min_slack_s": 0.49, "violations_total": 0})
    fails += case("LOST, then a grant inside the window: the window was cut short",
                  chk + lost + [(2.6, "send", "UNLOCK n0"), (2.601, "recv", "ERR NOT_HELD x")],
                  3.0, {"violations.window_violation": 0,
                        "violations.window_cut_short_by_lost": 1,
                        "window_following.told_then_granted_within_window": 1,
                        "violations_total": 1})
    fails += case("LOST, then a grant after the window: no violation",
                  chk + lost + [(2.6, "send", "UNLOCK n0"), (2.601, "recv", "ERR NOT_HELD x")],
                  4.5, {"violations.window_cut_short_by_lost": 0, "violations_total": 0})
    fails += case("answer after its own window: never used",
                  [(1.01, "send", "CHECK n0"), (3.5, "recv", "OK n0 100 2000")] + unlock,
                  3.0, {"violations.window_violation": 0, "overlaps.not_told": 0,
                        "window_following.never_used_overlaps": 1})
    two = [(1.01, "send", "CHECK n0"), (1.011, "recv", "OK n0 100 1000"),     # to 2.01
           (1.9, "send", "CHECK n0"), (2.2, "recv", "OK n0 100 3000")]        # too late
    fails += case("fresh answer after the last window ran out: ignored", two + unlock, 2.1,
                  {"violations.window_violation": 0, "window_following.min_slack_s": 0.09})
    fails += case("... but a grant before that window's end is a violation", two + unlock, 1.5,
                  {"violations.window_violation": 1})
    fails += case("careless holder, not told: violation as before",
                  [(1.01, "send", "PING"), (1.011, "recv", "PONG")] + unlock, 3.0,
                  {"violations.window_violation": 0, "violations.overlap_not_told": 1},
                  a_wf=False)
    # handovers of d0 (client 0's daemon) at 2.0, its successor took over at 2.1
    ho = [dict(ev="handover", phase="signal", d=0, t=2.0),
          dict(ev="handover", phase="end", d=0, t=2.1, outcome="done", secs=0.1)]
    ping_err = [(2.05, "send", "CHECK n0"), (2.3, "recv", "ERR UNAVAILABLE x"),
                (2.4, "send", "UNLOCK n0"), (2.401, "recv", "OK n0")]
    fails += case("ERR within 1 s of its daemon's handover: a handover failure", ping_err,
                  4.5, {"violations.handover_failure": 1, "handovers.signalled": 1,
                        "handovers.failures_by_kind": {"ERR UNAVAILABLE": 1}}, extra=ho)
    fails += case("... not when the handover was of another daemon", ping_err, 4.5,
                  {"violations.handover_failure": 0},
                  extra=[dict(e, d=1) for e in ho])
    fails += case("... nor later than 1 s after its end", [
        (3.0, "send", "CHECK n0"), (3.2, "recv", "ERR UNAVAILABLE x"),
        (3.4, "send", "UNLOCK n0"), (3.401, "recv", "OK n0")], 4.5,
        {"violations.handover_failure": 0}, extra=ho)
    fails += case("... nor while another fault's window is open: explained", ping_err, 4.5,
                  {"violations.handover_failure": 0, "handovers.explained_by_another_fault": 1},
                  extra=ho + [dict(ev="fault", kind="zk-restart", phase="start", zk=1, t=1.5)])
    fails += case("LOST after the handover: a failure",
                  [(2.2, "recv", "LOST n0 100 zk-disconnected")], 4.5,
                  {"violations.handover_failure": 1, "handovers.failures_by_kind": {"LOST": 1}},
                  extra=ho)
    return fails


# ------------------------------------------------------------------ main

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=10.0, help="nemesis time (default 10)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--clients", type=int, default=36)
    p.add_argument("--names", type=int, default=4)
    p.add_argument("--shared", type=float, default=0.15,
                   help="fraction of clients asking for the first name in shared mode")
    p.add_argument("--session-ms", type=int, default=4000)
    p.add_argument("--window-followers", type=float, default=1.0 / 3, metavar="FRAC",
                   help="fraction of the clients that hold with CHECK and follow its window "
                   "(default 1/3; 1 for all)")
    p.add_argument("--wf-long-hold", type=float, default=0.15, metavar="P",
                   help="probability that a window-following hold lasts 2-8 s "
                   "(else 0-0.3 s; default 0.15)")
    p.add_argument("--tick-ms", type=int, default=500,
                   help="[zookeeper] tick_ms given to the daemons (the servers' tickTime is "
                   "500); 0 leaves the setting out, for a daemon that does not know it")
    p.add_argument("--handovers", type=int, default=2, metavar="N",
                   help="handovers (SIGUSR2 to a random daemon) between two faults, with "
                   "the cluster healthy (default 2; 0 for none)")
    p.add_argument("--margin", type=float, default=10.0,
                   help="seconds beyond wait-ms before a request counts as unanswered")
    p.add_argument("--out", default="soak-out", help="directory for logs and summary")
    p.add_argument("--faults", default=",".join(FAULT_KINDS),
                   help="comma-separated fault kinds (default: all of %s)" % ", ".join(FAULT_KINDS))
    p.add_argument("--check", metavar="EVENTS",
                   help="only run the checker on a saved events.jsonl")
    p.add_argument("--self-test", action="store_true",
                   help="only run the checker on made-up logs with known verdicts")
    a = p.parse_args(argv)
    if a.self_test:
        return 1 if self_test() else 0
    a.faults = [f.strip() for f in a.faults.split(",") if f.strip()]
    bad = [f for f in a.faults if f not in FAULT_KINDS]
    if bad or not a.faults:
        p.error("unknown fault kinds %s (known: %s)" % (bad, ", ".join(FAULT_KINDS)))
    if a.check:
        out = os.path.join(os.path.dirname(os.path.abspath(a.check)), "summary.json")
        s = check(a.check, margin=a.margin, out_path=out)
        print("summary written to %s" % out)
        return 1 if s["violations_total"] else 0
    if not os.environ.get("LOCKBROKERD"):
        os.environ["LOCKBROKERD"] = os.path.normpath(
            os.path.join(HERE, "..", "..", "daemon", "lockbrokerd"))
    # SIGTERM (make interrupted, a timeout) unwinds like ^C: the tear-down
    # stops the daemons, which run in sessions of their own. Installed
    # before zkharness looks, so it keeps ours.
    def on_term(signum, frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, on_term)
    soak = Soak(a)
    aborted = False
    try:
        soak.run()
    except BaseException:  # noqa: BLE001 - check what was logged anyway
        import traceback
        traceback.print_exc()
        aborted = True
    out = os.path.join(soak.out, "summary.json")
    s = check(os.path.join(soak.out, "events.jsonl"), margin=a.margin, out_path=out)
    print("logs and summary.json in %s" % soak.out)
    if aborted:
        return 2
    return 1 if s["violations_total"] else 0


if __name__ == "__main__":
    sys.exit(main())
