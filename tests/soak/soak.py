#!/usr/bin/env python3
"""soak.py - a Jepsen-style soak run of lockbrokerd in distributed mode.

Not part of `make check`: `make soak SOAK_MINUTES=10 SOAK_SEED=1` runs it
against the built daemon (docs/SOAK.md has the figures of past runs).

What it does
------------
* Starts a 3-server ZooKeeper ensemble (tests/e2e/zkharness.py, tickTime
  500 ms) and 3 daemons (tests/e2e/lbharness.py) sharing one root, session
  timeout 4000 ms, each on a fixed loopback port so that a restart keeps it.
* Runs dozens of clients in one selector thread. Each loops:
  LOCK <name> [<wait-ms>] [shared], then holds for 0-3 PING round trips with
  short pauses, then UNLOCK. A client that gets LOST goes on as a careless
  client would (PINGs, then an UNLOCK answered NOT_HELD); the checker counts
  the hold as ended at the LOST. A client whose daemon closes the connection
  (killed) reconnects to another daemon, and goes home again later.
* A nemesis in the main thread injects one fault at a time, from a seeded
  random order, waits for recovery (quorum, every daemon connected) and a
  quiet gap:
    daemon-kill       kill -9 a daemon, restart it 1-4 s later
    daemon-freeze     SIGSTOP a daemon for session timeout + 1.5-4 s, SIGCONT
    zk-restart        restart one ZooKeeper server (SIGTERM, start)
    zk-leader-kill    kill -9 the leader, wait for a new one, restart it
    zk-quorum-freeze  SIGSTOP two of the three servers for 2-6 s, SIGCONT
* At the end: clients finish their cycle and close, daemons get SIGTERM,
  the tree under the root is listed (at once, and again after twice the
  session timeout), ZooKeeper stops, and the checker runs.

Every client event (each line sent and received, connects, drops, closes)
and every nemesis step goes to DIR/events.jsonl, one JSON object a line,
with time.monotonic() ("t", seconds) and wall time ("w", Unix seconds).
The daemons' logs go to DIR/daemon-<i>.log, ZooKeeper's under DIR/zk/.

The checker (`soak.py --check DIR/events.jsonl` runs it alone) replays the
log per client: a hold is [OK received, end], where end is the first of
UNLOCK sent, LOST received, connection drop seen, client close. It reports:
  * overlapping holds of one name in conflicting modes (shared holders may
    overlap each other): "told" when the earlier holder had received LOST
    before the later OK (only a client ignoring LOST would overlap; not a
    violation), "paused" when the earlier holder's daemon was SIGSTOPped
    meanwhile and, after SIGCONT, the first line that holder received was
    the LOST (what fencing tokens are for: reported, not a violation, as
    long as the later token is greater), and real violations otherwise;
  * after each SIGCONT, the first line received by every client that held
    a lock on the frozen daemon (it must be the LOST, not an OK);
  * tokens per name, in OK order: an exclusive grant's token must exceed
    every earlier token of the name, a shared grant's every earlier
    exclusive token;
  * requests without a reply within wait-ms (LOCK) + --margin seconds plus
    the time their daemon spent stopped, with no drop meanwhile (LOCK
    without wait-ms: 60 s + margin); TIMEOUTs that came before wait-ms;
  * UNLOCK answered NOT_HELD although no LOST was received for the hold;
  * lock nodes left under the root after the clean stop;
  * lines that fit no request, LOST lines for no hold, daemon error lines,
    daemon exit codes.
It prints a summary and writes it to DIR/summary.json (with timeline
excerpts of every violation). Exit status: 0 without violations, 1 with.

Python 3 standard library only.
"""

import argparse
import bisect
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
               "zk-quorum-freeze")
ERROR_RE = re.compile(r"^\S+Z error ")
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
    sent), holding (PING sent or pause), unlocking (UNLOCK sent), done."""

    def __init__(self, drv, idx, home, shared):
        self.drv = drv
        self.idx = idx
        self.tag = "c%d" % idx
        self.home = home
        self.shared = shared
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
        elif p.kind == "UNLOCK":
            if line == "OK %s" % p.name or line.startswith("ERR "):
                self.next_cycle()
            else:
                self.confused(line)

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
                 drain_s=45.0, migrate_p=0.01, long_hold_p=0.05):
        super().__init__(name="clients", daemon=True)
        self.log = log
        self.ports = ports
        self.names = names
        self.rng = random.Random(seed)
        self.abandon_s = abandon_s
        self.drain_s = drain_s
        self.migrate_p = migrate_p
        self.long_hold_p = long_hold_p
        self.sel = selectors.DefaultSelector()
        self.timers = []
        self.seq = 0
        self.stopping = False
        self._stop_req = threading.Event()
        nshared = int(round(nclients * shared_frac))
        self.clients = [SoakClient(self, i, i % len(ports), i < nshared)
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
        self.driver = None
        self.fault_counts = collections.Counter()
        self.wedges = 0
        self.fault_failures = collections.Counter()

    def say(self, msg):
        sys.stdout.write("[soak %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
        sys.stdout.flush()

    # -- set-up

    def start_zk(self):
        import zkharness
        zkdir = os.path.join(self.out, "zk")
        if os.path.exists(zkdir):
            shutil.rmtree(zkdir)
        self.ens = zkharness.ZkEnsemble(n=3, tick_ms=500, name="soak", base_dir=zkdir)
        leader = self.ens.start(timeout=120.0)
        self.log.emit("zk", phase="started", ports=self.ens.ports, leader=leader.myid)
        self.say("ZooKeeper ensemble %s, leader s%d" % (self.ens.connect_string, leader.myid))

    def daemon_config(self):
        return ("[zookeeper]\nhosts = %s\nroot = %s\nsession_timeout_ms = %d\ntick_ms = 500\n"
                % (self.ens.connect_string, self.root, self.session_ms))

    def start_daemon(self, idx, port):
        cls = _soak_daemon_class()
        path = os.path.join(self.out, "daemon-%d.log" % idx)
        with open(path, "ab") as f:
            f.write(("--- soak: starting d%d at %s ---\n" % (idx, time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime()))).encode())
        d = cls(idx, path, config=self.daemon_config(), listen="%s:%d" % (HOST, port),
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
        raise ValueError(kind)

    def recover(self):
        """After a failed fault: every server and daemon running again."""
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
                except Exception as e2:  # noqa: BLE001
                    self.say("still unhealthy: %r" % e2)
                    raise
            if self.driver.error is not None:
                raise RuntimeError("client thread failed: %r" % self.driver.error)
            gap = self.rng.uniform(3.0, 8.0)
            time.sleep(max(0.0, min(gap, until - time.monotonic())))

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
            errs = []
            with open(d.log_path, "rb") as f:
                for raw in f:
                    line = raw.decode("utf-8", "replace").rstrip("\n")
                    if ERROR_RE.search(line):
                        errs.append(line)
            self.log.emit("daemon_errors", d=d.idx, count=len(errs), lines=errs[:50])

    def run(self):
        a = self.args
        t_start = time.monotonic()
        self.log.emit("run", phase="start", seed=a.seed, minutes=a.minutes, clients=a.clients,
                      names=self.names, shared=a.shared, session_ms=self.session_ms,
                      faults=a.faults,
                      margin=a.margin, root=self.root, argv=sys.argv)
        self.say("seed %d, %g minutes, %d clients on %d names, session %d ms, out %s"
                 % (a.seed, a.minutes, a.clients, len(self.names), self.session_ms, self.out))
        try:
            self.start_zk()
            ports = self.start_daemons()
            self.driver = ClientDriver(self.log, ports, a.clients, self.names, a.shared,
                                       a.seed * 7919 + 1, abandon_s=30.0)
            self.driver.start()
            until = time.monotonic() + a.minutes * 60.0
            time.sleep(min(10.0, a.minutes * 60.0 / 10))   # a calm start
            self.nemesis(until)
            self.log.emit("nemesis", phase="done", faults=dict(self.fault_counts),
                          failures=dict(self.fault_failures), zk_wedged=self.wedges)
            self.healthy(120.0)
            self.say("nemesis done: %s; stopping clients" % dict(self.fault_counts))
        except BaseException as e:
            self.log.emit("run", phase="aborted", error=repr(e))
            raise
        finally:
            if self.driver is not None:
                self.driver.request_stop()
                self.driver.join(90.0)
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
                 "lost_t", "lost_reason", "rid", "sent")

    def __init__(self, c, d, name, mode, token, start, rid, sent):
        self.c, self.d, self.name, self.mode, self.token = c, d, name, mode, token
        self.start, self.rid, self.sent = start, rid, sent
        self.end = self.end_kind = self.raw_end = None
        self.lost_t = self.lost_reason = None

    def finish(self, t, kind):
        """UNLOCK sent, drop, close: the careless client's end too."""
        if self.end is None:
            self.end, self.end_kind = t, kind
        if self.raw_end is None:
            self.raw_end = t

    def brief(self):
        return {"client": self.c, "daemon": self.d, "name": self.name, "mode": self.mode,
                "token": str(self.token), "ok_at": _r(self.start), "end_at": _r(self.end),
                "end": self.end_kind, "lost_at": _r(self.lost_t), "lost_reason": self.lost_reason}


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
            elif e.get("phase") == "failed":
                fault_failed[e["kind"]] += 1
    for d, t in stopped_at.items():
        freezes[d].append((t, float("inf")))

    def frozen_overlap(d, a, b):
        return sum(max(0.0, min(b, y) - max(a, x)) for x, y in freezes.get(d, ()))

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
                                    req["rid"], req["t"])
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
                anomalies["not_held_without_lost"].append(
                    {"client": req["c"], "daemon": req["d"], "t": req["reply_t"],
                     "hold": h.brief() if h else None})

    # ---- overlaps
    by_name = collections.defaultdict(list)
    for h in holds:
        by_name[h.name].append(h)
    overlaps = {"told": [], "paused": [], "violation": []}

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
    daemon_errors = {e["d"]: {"count": e["count"], "lines": e["lines"][:10]}
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
        "first_line_after_sigcont_not_lost": len(after_cont_bad),
        "token_order": len(token_viol),
        "unanswered": len(unanswered),
        "answered_after_deadline": len(answered_late),
        "endless_lock_over_limit": len(endless),
        "early_timeout": len(anomalies["early_timeout"]),
        "not_held_without_lost": len(anomalies["not_held_without_lost"]),
        "unlock_ok_after_lost": len(anomalies["unlock_ok_after_lost"]),
        "unexpected_reply": len(anomalies["unexpected_reply"]),
        "reply_without_request": len(anomalies["reply_without_request"]),
        "lost_for_no_hold": len(anomalies["lost_for_no_hold"]),
        "lock_nodes_left": len(left) if left is not None else None,
        "lock_nodes_left_at_stop": len(nodes.get("after-stop", {}).get("lock_nodes") or []),
        "daemon_error_lines": sum(v["count"] for v in daemon_errors.values()),
        "daemon_bad_exit": sum(1 for rc in exit_codes.values() if rc != 0),
    }
    total = sum(v for k, v in violations.items()
                if v and k not in ("lock_nodes_left_at_stop",))
    summary = {
        "events": events_path,
        "run": {k: run.get(k) for k in ("seed", "minutes", "clients", "names", "shared",
                                         "session_ms", "margin", "root")},
        "duration_s": _r(t_last - t_first, 1),
        "faults": dict(faults),
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
                     "paused_holder_distinct_holds": len(set(
                         (o["earlier"]["client"], o["earlier"]["token"])
                         for o in overlaps["paused"])),
                     "paused_holder_lost_after_sigcont_s": sorted(set(
                         _r(o["earlier"]["lost_at"] - o["freeze"][1]) for o in overlaps["paused"]
                         if o["earlier"]["lost_at"] is not None))[:20]},
        "first_line_after_sigcont": dict(after_cont),
        "nodes": nodes,
        "daemon_exit_codes": exit_codes,
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
            "first_line_after_sigcont_not_lost": after_cont_bad[:20],
            "token_order": token_viol[:20],
            "unanswered": unanswered[:20],
            "answered_after_deadline": answered_late[:20],
            "endless_lock_over_limit": endless[:20],
            "anomalies": {k: v[:20] for k, v in anomalies.items()},
            "lock_nodes_left": left,
        },
    }
    if out_path:
        with open(out_path, "w") as f:
            json.dump(summary, f, indent=1, sort_keys=False)
            f.write("\n")
    if not quiet:
        print_summary(summary)
    return summary


def timeline(events, times, clients, t0, t1, limit=60):
    """Compact lines: events of these clients and every fault/daemon event
    between t0 and t1 (times: the sorted event times)."""
    out = []
    for e in events[bisect.bisect_left(times, t0):]:
        if e["t"] > t1:
            break
        if e.get("c") in clients or e["ev"] in ("fault", "daemon", "healthy"):
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
    w("overlapping pairs: told first %d (only a client ignoring LOST overlaps), paused "
      "holder (fencing) %d (%d holds), NOT TOLD %d\n"
      % (o["told"], o["paused_holder"], o["paused_holder_distinct_holds"], o["not_told"]))
    w("first line after SIGCONT to a holder on the frozen daemon: %s\n"
      % s["first_line_after_sigcont"])
    for phase, n in s["nodes"].items():
        w("nodes %s: %s lock nodes %s; other %s\n" % (
            phase, len(n.get("lock_nodes") or []), n.get("lock_nodes") or "",
            n.get("other_nodes", n.get("error"))))
    w("daemon exit codes %s; error lines %s\n" % (
        s["daemon_exit_codes"], {d: v["count"] for d, v in s["daemon_errors"].items()}))
    v = {k: x for k, x in s["violations"].items() if x}
    w("VIOLATIONS: %s\n" % (v if s["violations_total"] else "none"))
    sys.stdout.flush()


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
    p.add_argument("--margin", type=float, default=10.0,
                   help="seconds beyond wait-ms before a request counts as unanswered")
    p.add_argument("--out", default="soak-out", help="directory for logs and summary")
    p.add_argument("--faults", default=",".join(FAULT_KINDS),
                   help="comma-separated fault kinds (default: all of %s)" % ", ".join(FAULT_KINDS))
    p.add_argument("--check", metavar="EVENTS",
                   help="only run the checker on a saved events.jsonl")
    a = p.parse_args(argv)
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
