#!/usr/bin/env python3
"""End-to-end tests of locks shared with the ZooKeeper recipes (issue 39):
lockbrokerd's clients against Debian's own Curator 5.4, kazoo 2.8 and
go-zookeeper clients on the same lock paths, one real ZooKeeper server.

The foreign clients run as drivers (tests/e2e/interop/): small programs
that take, release and cancel locks as told on stdin and print each event
on stdout, so a test holds, queues and releases step by step and waits for
an event rather than sleeping:
  CuratorDriver.java   InterProcessMutex, InterProcessReadWriteLock; compiled
                       with javac here, one JVM for the whole file
  kazoo_driver.py      Lock, ReadLock, WriteLock, Semaphore, under
                       /usr/bin/python3 (Debian's python3-kazoo is installed
                       for it alone)
  gozk_driver.go       go-zookeeper's Lock, built with go here
Each is skipped where missing (LB_REQUIRE keys curator, kazoo, go; the
server needs zk). A foreign waiter is known to wait once ZooKeeper lists
its watch on a lock node (the four-letter word wchc): every recipe watches
its predecessor, so no test guesses how long a foreign client takes.

ReadmeTest runs README.md's examples of the same (a Java service and a
cron job, a Python service and a shell script).

Nothing sleeps to synchronise; no assertion is on how long anything took.
"""

import collections
import os
import queue
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lbharness  # noqa: E402
from lbharness import Daemon, scaled  # noqa: E402
import zkharness  # noqa: E402
from zkharness import ZkServer, wait_for  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVERS = os.path.join(HERE, "interop")
SRCDIR = os.environ.get("LB_SRCDIR") or os.path.normpath(os.path.join(HERE, "..", ".."))
JAVA_DIR = "/usr/share/java"
DEBIAN_PYTHON = "/usr/bin/python3"
GOPATH = "/usr/share/gocode"
GO_ZK = os.path.join(GOPATH, "src", "github.com", "samuel", "go-zookeeper", "zk")

SESSION_MS = 4000          # the daemons' session (a dead one's nodes go in ~4 s)
OUTAGE_SESSION_MS = 12000  # sessions that outlive the server's restart
MAX_SESSION_MS = 20000     # the server's cap (tickTime 500 alone caps at 10 s)
DRIVER_SESSION_MS = 15000  # the foreign clients' sessions outlive it too
TIMEOUT = scaled(20.0)     # any one event: a grant, a release, a watch

# Curator's class path: recipes' manifest brings framework, client,
# ZooKeeper, guava; one SLF4J binding (simple, to stderr, warnings only)
# rather than '/usr/share/java/*', which binds at random (zkharness.classpath).
CURATOR_JARS = ["curator-recipes.jar", "curator-framework.jar", "curator-client.jar",
                "slf4j-simple.jar"]

WORK_DIR = lbharness.make_tmpdir("lbinterop-")


# ------------------------------------------------------------- what is here

def have_curator():
    return bool(shutil.which("javac") and shutil.which("java")) and all(
        os.path.exists(os.path.join(JAVA_DIR, j)) for j in CURATOR_JARS)


def have_kazoo():
    if not os.access(DEBIAN_PYTHON, os.X_OK):
        return False
    return subprocess.run([DEBIAN_PYTHON, "-c", "import kazoo.recipe.lock"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def have_go():
    return bool(shutil.which("go")) and os.path.exists(os.path.join(GO_ZK, "lock.go"))


# ------------------------------------------------------------------ drivers

Grant = collections.namedtuple("Grant", "node czxid pzxid")


class Driver:
    """One driver process: commands written to its stdin, its stdout's
    lines read by a thread into a queue. await_line() takes lines off in
    order and keeps those it was not waiting for, so that events of
    different locks may arrive in any order."""

    def __init__(self, name, argv, env=None, cwd=None, ready=True):
        self.name = name
        self.err_path = os.path.join(WORK_DIR, name + ".err")
        self.err = open(self.err_path, "w")
        env = dict(os.environ if env is None else env, PYTHONIOENCODING="utf-8")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, env=env, cwd=cwd, encoding="utf-8",
                                     bufsize=1)
        self.lines = queue.Queue()
        self.seen = []             # read but not yet awaited
        self.open = set()          # ids acquired and not yet released or cancelled
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if ready:
            self.await_line(r"ready$", scaled(60.0))

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def send(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def _take(self, rx):
        for i, line in enumerate(self.seen):
            m = rx.match(line)
            if m:
                del self.seen[i]
                return m
        return None

    def await_line(self, regex, timeout=TIMEOUT):
        """The match of the first unawaited line matching regex, waiting
        for it until timeout; an `error` line of the driver fails at once."""
        rx = re.compile(regex)
        deadline = time.monotonic() + timeout
        while True:
            m = self._take(rx)
            if m:
                return m
            bad = [line for line in self.seen if line.startswith("error ")]
            if bad:
                raise AssertionError("%s: %s (waiting for %r)" % (self.name, bad[0], regex))
            left = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(left, 0))
            except queue.Empty:
                raise AssertionError("%s: no line matching %r within %.1f s; unawaited: %r\n%s"
                                     % (self.name, regex, timeout, self.seen, self.stderr_tail()))
            if line is None:
                self.lines.put(None)
                raise AssertionError("%s exited (%r) waiting for %r; unawaited: %r\n%s"
                                     % (self.name, self.proc.poll(), regex, self.seen,
                                        self.stderr_tail()))
            self.seen.append(line)

    def drain(self):
        """Moves the lines already read into self.seen (no waiting)."""
        while True:
            try:
                line = self.lines.get_nowait()
            except queue.Empty:
                return
            if line is None:
                self.lines.put(None)
                return
            self.seen.append(line)

    def has_line(self, regex):
        """Whether a line matching regex arrived and was not awaited. A
        hint that an event has not happened yet, as Client.silent()."""
        self.drain()
        rx = re.compile(regex)
        return any(rx.match(line) for line in self.seen)

    # -- the commands

    def acquire(self, ident, path, kind, data=None):
        self.send("acquire %s %s %s%s" % (ident, path, kind, "" if data is None else " " + data))
        self.open.add(ident)

    def acquired(self, ident, timeout=TIMEOUT):
        """Grant(node name, czxid, pzxid) once lock ident is held: its
        node's creation zxid, and the lock path's pzxid read after the
        grant (times 256, the token a foreign holder can compute:
        PROTOCOL.md, Sharing locks with ZooKeeper recipes)."""
        m = self.await_line(r"acquired %s (\S+) (-?\d+) (-?\d+)$" % re.escape(ident), timeout)
        return Grant(m.group(1), int(m.group(2)), int(m.group(3)))

    def hold(self, ident, path, kind, data=None):
        """acquire + acquired: for a lock that is free."""
        self.acquire(ident, path, kind, data)
        return self.acquired(ident)

    def release(self, ident):
        self.send("release %s" % ident)
        self.await_line(r"released %s$" % re.escape(ident))
        self.open.discard(ident)

    def cancel(self, ident):
        """Ends a waiting acquire (its node goes)."""
        self.send("cancel %s" % ident)
        self.await_line(r"cancelled %s$" % re.escape(ident))
        self.open.discard(ident)

    def end_all(self):
        """Ends every lock a test left held or waiting (`cancel` releases
        a held one), and forgets the lines nobody awaited: the next test
        starts from nothing."""
        for ident in sorted(self.open):
            self.send("cancel %s" % ident)
            self.await_line(r"(released|cancelled) %s$" % re.escape(ident))
        self.open.clear()
        self.drain()
        self.seen = [line for line in self.seen if line.startswith("error ")]

    def stderr_tail(self, n=20):
        try:
            with open(self.err_path, errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""

    def close(self):
        if self.proc.poll() is None:
            try:
                self.send("quit")
                self.proc.wait(scaled(10.0))
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        self.err.close()


def _build_curator():
    out = os.path.join(WORK_DIR, "curator")
    os.makedirs(out, exist_ok=True)
    cp = ":".join(os.path.join(JAVA_DIR, j) for j in CURATOR_JARS)
    r = subprocess.run(["javac", "-nowarn", "-d", out, "-cp", cp,
                        os.path.join(DRIVERS, "CuratorDriver.java")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        raise AssertionError("javac CuratorDriver.java:\n" + r.stdout)
    return ["java", "-Xss512k", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp", out + ":" + cp, "CuratorDriver"]


def _build_go():
    out = os.path.join(WORK_DIR, "gozk_driver")
    env = dict(os.environ, GOPATH=GOPATH, GO111MODULE="off", GOFLAGS="",
               GOCACHE=os.path.join(WORK_DIR, "gocache"))
    r = subprocess.run(["go", "build", "-o", out, os.path.join(DRIVERS, "gozk_driver.go")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if r.returncode != 0:
        raise AssertionError("go build gozk_driver.go:\n" + r.stdout)
    return [out]


class Foreign:
    """The file's ZooKeeper server and its drivers, each started on first
    use and kept for every later test (one JVM for the whole file)."""

    zk = None
    _drivers = {}

    @classmethod
    def server(cls):
        if cls.zk is None:
            if not zkharness.available():
                lbharness.skip("zk", "ZooKeeper (java + Debian's zookeeper jars) not installed")
            zk = ZkServer(tick_ms=500, max_session_ms=MAX_SESSION_MS, name="zk-interop",
                          base_dir=tempfile.mkdtemp(prefix="zk-", dir=WORK_DIR))
            try:
                zk.start()
            except BaseException:
                zk.cleanup()
                raise
            cls.zk = zk
        return cls.zk

    @classmethod
    def driver(cls, kind):
        """The running driver of kind curator, kazoo or go; skips the test
        where its library is missing."""
        d = cls._drivers.get(kind)
        if d is not None and d.proc.poll() is None:
            return d
        hosts = cls.server().connect_string
        if kind == "curator":
            if not have_curator():
                lbharness.skip("curator", "javac or Debian's libcurator-recipes-java missing")
            argv = cls._drivers.get("curator-argv") or _build_curator()
            cls._drivers["curator-argv"] = argv
        elif kind == "kazoo":
            if not have_kazoo():
                lbharness.skip("kazoo", "Debian's python3-kazoo missing (for %s)" % DEBIAN_PYTHON)
            argv = [DEBIAN_PYTHON, os.path.join(DRIVERS, "kazoo_driver.py")]
        elif kind == "go":
            if not have_go():
                lbharness.skip("go", "go or golang-github-samuel-go-zookeeper-dev missing")
            argv = cls._drivers.get("go-argv") or _build_go()
            cls._drivers["go-argv"] = argv
        else:
            raise ValueError(kind)
        d = Driver(kind, argv + [hosts, str(DRIVER_SESSION_MS)])
        cls._drivers[kind] = d
        return d

    @classmethod
    def end_all(cls):
        """Driver.end_all() of every running driver (a test's clean-up)."""
        for d in list(cls._drivers.values()):
            if isinstance(d, Driver) and d.proc.poll() is None:
                d.end_all()

    @classmethod
    def stop(cls):
        for k, d in list(cls._drivers.items()):
            if isinstance(d, Driver):
                d.close()
        cls._drivers = {}
        if cls.zk is not None:
            cls.zk.stop(grace=5.0)
            cls.zk.cleanup()
            cls.zk = None


def tearDownModule():
    Foreign.stop()


# ------------------------------------------------------- ZooKeeper's view

def watched(port, path):
    """{session id: set of watched paths} of the watches ZooKeeper holds on
    children of path (four-letter word wchc)."""
    text = zkharness.fourlw(port, "wchc")
    out, session = {}, None
    prefix = path.rstrip("/") + "/"
    for line in text.splitlines():
        if line.startswith("0x"):
            session = int(line.strip(), 16)
        elif line.startswith("\t") and session is not None:
            p = line.strip()
            if p.startswith(prefix) and "/" not in p[len(prefix):]:
                out.setdefault(session, set()).add(p)
    return out


def children(hosts, path):
    try:
        with zkharness.ZkClient(hosts) as c:
            return sorted(c.get_children(path))
    except zkharness.ZkNoNode:
        return []


SEQ_RE = re.compile(r"(\d{10})$")


def wait_until(predicate, what):
    """Polls predicate until true (zkharness.wait_for's pace), failing the
    test after TIMEOUT."""
    try:
        wait_for(predicate, TIMEOUT, what=what)
    except zkharness.ZkTimeout as e:
        raise AssertionError(str(e))


# -------------------------------------------------------------------- tests

class DriversTest(unittest.TestCase):
    """The drivers against each other, no daemon: the libraries do what the
    other tests count on (so that a failure there is the daemon's)."""

    @classmethod
    def setUpClass(cls):
        cls.zk = Foreign.server()

    def setUp(self):
        self.addCleanup(Foreign.end_all)

    def wait_waiting(self, path, count):
        wait_until(lambda: sum(len(p) for p in watched(self.zk.port, path).values()) >= count,
                   what="%d watch(es) on nodes of %s" % (count, path))

    def test_curator_and_go_exclude_each_other(self):
        cur = Foreign.driver("curator")
        go = Foreign.driver("go")
        path = "/drivers/mutex"
        node, czxid, _ = cur.hold("c1", path, "mutex")
        self.assertRegex(node, r"^_c_[0-9a-f-]{36}-lock-\d{10}$")
        go.acquire("g1", path, "mutex")
        self.wait_waiting(path, 1)
        self.assertFalse(go.has_line(r"acquired g1 "))
        cur.release("c1")
        gnode, gczxid, _ = go.acquired("g1")
        self.assertRegex(gnode, r"-lock-\d{10}$")
        self.assertGreater(gczxid, czxid)
        cur.acquire("c2", path, "mutex")
        self.wait_waiting(path, 1)
        go.release("g1")
        cur.acquired("c2")
        cur.release("c2")

    def test_kazoo_readers_share_writers_wait(self):
        kz = Foreign.driver("kazoo")
        path = "/drivers/rw"
        kz.hold("r1", path, "read")
        node = kz.hold("r2", path, "read").node
        self.assertRegex(node, r"__rlock__\d{10}$")
        kz.acquire("w1", path, "write")
        self.wait_waiting(path, 1)
        kz.release("r1")
        self.assertFalse(kz.has_line(r"acquired w1 "))
        kz.release("r2")
        node = kz.acquired("w1").node
        self.assertRegex(node, r"__lock__\d{10}$")
        kz.release("w1")
        # a semaphore's lease: a child without a sequence
        node = kz.hold("s1", path + "-sem", "semaphore").node
        self.assertRegex(node, r"^[0-9a-f]{32}$")
        kz.release("s1")

    def test_curator_rw_and_cancel(self):
        cur = Foreign.driver("curator")
        path = "/drivers/crw"
        node = cur.hold("r1", path, "read").node
        self.assertRegex(node, r"__READ__\d{10}$")
        cur.hold("r2", path, "read")
        cur.acquire("w1", path, "write")
        self.wait_waiting(path, 1)
        cur.cancel("w1")
        wait_until(lambda: len(children(self.zk.connect_string, path)) == 2,
                   what="the cancelled writer's node gone")
        cur.release("r1")
        cur.release("r2")
        node = cur.hold("w2", path, "write").node
        self.assertRegex(node, r"__WRIT__\d{10}$")
        cur.release("w2")


# ------------------------------------------------------------ the daemons

SESSION_RE = r"zk: new session (0x[0-9a-f]+)"
ERROR_RE = r"^\S+Z error "
MARKERS = ("__lock__", "__rlock__", "-lock-", "__WRIT__", "__READ__")
LONG_WAIT = "600000"       # a LOCK that must be granted, not time out


def dump_on_failure(cls):
    """Class decorator: a failing test prints the daemons' log tails, the
    drivers' stderr and ZooKeeper's log."""
    for attr in list(vars(cls)):
        fn = getattr(cls, attr)
        if not attr.startswith("test") or not callable(fn):
            continue

        def wrap(fn):
            def wrapper(self):
                try:
                    return fn(self)
                except unittest.SkipTest:
                    raise
                except BaseException:
                    self._failed = True
                    self.dump_diagnostics()
                    raise
            wrapper.__name__ = fn.__name__
            wrapper.__doc__ = fn.__doc__
            return wrapper
        setattr(cls, attr, wrap(fn))
    return cls


class InteropBase(unittest.TestCase):
    """One daemon per test, with its own root and its own [interop] paths
    (under /apps-<test>) on the file's one server."""

    @classmethod
    def setUpClass(cls):
        cls.zk = Foreign.server()

    def setUp(self):
        self.addCleanup(Foreign.end_all)     # after the daemons stop
        self._failed = False
        self._daemons = []
        short = self._testMethodName[5:]
        self.root = "/lbinterop-" + short
        self.apps = "/apps-" + short

    def dump_diagnostics(self):
        out = sys.stderr
        out.write("\n===== %s failed =====\n" % self._testMethodName)
        for d in self._daemons:
            out.write(d.log_tail(40) + "\n")
        for k, drv in Foreign._drivers.items():
            if isinstance(drv, Driver):
                out.write("--- %s driver: unawaited %r\n%s" % (k, drv.seen, drv.stderr_tail()))
        if Foreign.zk is not None:
            Foreign.zk.mark_failed(out, lines=30)
        out.flush()

    def start_daemon(self, interop, session_ms=SESSION_MS, name="A", config=None, server=""):
        """A daemon with these [interop] lines and [server] lines (or this
        whole config)."""
        if config is None:
            config = ("[server]\n%s[zookeeper]\nhosts = %s\nroot = %s\nsession_timeout_ms = %d\n"
                      "tick_ms = 500\n" % (server, self.zk.connect_string, self.root, session_ms))
            if interop:
                config += "[interop]\n%s\n" % interop
        d = Daemon(config=config, name=name)
        d.start()
        self._daemons.append(d)
        self.addCleanup(self._stop_daemon, d)
        d.session = int(d.wait_log(SESSION_RE, scaled(15.0)).group(1), 16)
        d.wait_log(r"zk: every daemon of root \S+ has \[zookeeper\] nonfair", scaled(15.0))
        return d

    def _stop_daemon(self, d):
        if self._failed:
            d.kill()
            return
        m = d.find_log(ERROR_RE)
        if m:
            d.kill()
            raise AssertionError("%s logged an error: %r\n%s" % (d.name, m.string, d.log_tail()))
        d.stop()

    def client(self, d, timeout=None):
        c = d.client(timeout=timeout)
        self.addCleanup(c.close)
        return c

    # -- requests

    def lock(self, c, name, opts=""):
        """TRYLOCK name opts, which must be granted: its token."""
        line = c.request(("TRYLOCK %s %s" % (name, opts)).rstrip())
        m = re.match(r"^OK %s (\d+)$" % re.escape(name), line)
        self.assertIsNotNone(m, "TRYLOCK %s %s: %r" % (name, opts, line))
        return int(m.group(1))

    def queue(self, c, name, opts=""):
        """LOCK name (a long wait) opts, answered later (granted())."""
        c.send(("LOCK %s %s %s" % (name, LONG_WAIT, opts)).rstrip() + "\n")

    def granted(self, c, name):
        m = c.expect_match(r"^OK %s (\d+)$" % re.escape(name), timeout=TIMEOUT)
        return int(m.group(1))

    def unlock(self, c, name):
        self.assertEqual(c.request("UNLOCK %s" % name), "OK %s" % name)

    def status(self, c, name):
        return c.request("STATUS %s" % name)

    def watch_until(self, c, regex):
        """Reads a watcher's EVENT lines until one matches regex (the ones
        before it are earlier states)."""
        deadline = time.monotonic() + TIMEOUT
        seen = []
        while time.monotonic() < deadline:
            line = c.line(timeout=max(deadline - time.monotonic(), 0.01))
            if re.match(regex, line):
                return line
            seen.append(line)
        raise AssertionError("no EVENT matching %r; got %r" % (regex, seen))

    # -- ZooKeeper's view

    def nodes(self, path):
        """[(name, ephemeral owner, data)] of path's children: sequential
        ones in ZooKeeper's order (their last 10 digits), then the others."""
        out = []
        try:
            with zkharness.ZkClient(self.zk.connect_string) as c:
                for k in c.get_children(path):
                    try:
                        data, st = c.get_data(path + "/" + k)
                    except zkharness.ZkNoNode:
                        continue
                    out.append((k, st.ephemeralOwner, data or b""))
        except zkharness.ZkNoNode:
            return []
        seq = [n for n in out if SEQ_RE.search(n[0])]
        return sorted(seq, key=lambda n: SEQ_RE.search(n[0]).group(1)) + \
            [n for n in out if not SEQ_RE.search(n[0])]

    def ours(self, d, path):
        """The names of d's nodes under path, in ZooKeeper's order."""
        return [n for n, owner, _ in self.nodes(path) if owner == d.session]

    def wait_ours(self, d, path, count):
        """Waits until d has count nodes under path (a LOCK is queued in
        ZooKeeper); returns their names."""
        wait_until(lambda: len(self.ours(d, path)) == count,
                   what="%d node(s) of %s under %s" % (count, d.name, path))
        return self.ours(d, path)

    def wait_foreign_waiting(self, d, path, count):
        """Waits until foreign clients watch count lock nodes under path:
        each recipe's waiter watches its predecessor once it has found it
        must wait (sessions other than d's)."""
        def n():
            return sum(len(p) for s, p in watched(self.zk.port, path).items()
                       if s != d.session)
        wait_until(lambda: n() >= count,
                   what="%d foreign waiter(s) watching nodes of %s" % (count, path))

    def assert_increasing(self, before, foreign, after):
        """Our token before a foreign holder, the token it computes (its
        path's pzxid read once it held, times 256), ours after it: strictly
        increasing."""
        self.assertLess(before, foreign.pzxid * 256, "ours before, the foreign holder's")
        self.assertLess(foreign.pzxid * 256, after, "the foreign holder's, ours after")

    def assert_our_node(self, name, marker):
        """name is one of ours as a recipe reads it: `marker` then the
        sequence at its end, and no other marker anywhere."""
        self.assertRegex(name, re.escape(marker) + r"\d{10}$")
        rest = name[:-(len(marker) + 10)]
        for mk in MARKERS:
            self.assertNotIn(mk, rest, "%s: a second marker %s" % (name, mk))


HELD_FOREIGN = r"^STATUS %s held holder=foreign/%s token=- since=\d+ waiters=%d queue=%d"


@dump_on_failure
class CuratorProfileTest(InteropBase):
    """`curator`: Curator's InterProcessMutex and go-zookeeper's Lock."""

    def test_mutex_and_go_lock_both_ways(self):
        cur = Foreign.driver("curator")
        path = self.apps + "/locks/deploy"
        d = self.start_daemon("deploy = curator %s" % path)
        a, b, wt = self.client(d), self.client(d), self.client(d)
        wt.send("WATCH deploy\n")
        wt.expect("OK deploy")

        # ours first: Curator waits behind it
        t1 = self.lock(a, "deploy")
        [node] = self.ours(d, path)
        self.assert_our_node(node, "-lock-")
        # Curator's protected-mode prefix, as Curator writes it
        self.assertRegex(node, r"^_c_[0-9a-f]{8}-([0-9a-f]{4}-){3}[0-9a-f]{12}-")
        cur.acquire("c1", path, "mutex")
        self.wait_foreign_waiting(d, path, 1)
        self.assertFalse(cur.has_line(r"acquired c1 "), "Curator holds beside us")
        self.assertRegex(self.status(a, "deploy"),
                         r"^STATUS deploy held holder=(?!foreign/)\S+ token=%d since=\d+ "
                         r"waiters=0 queue=2" % t1)
        self.unlock(a, "deploy")
        g1 = cur.acquired("c1")

        # Curator holds: ours waits, STATUS names it; the tokens go up
        # across it, with Curator's own (its path's pzxid * 256) between
        self.assertRegex(self.status(a, "deploy"), HELD_FOREIGN % ("deploy", "curator-c1", 0, 1))
        self.watch_until(wt, r"EVENT deploy held - holders=1 label=- holder=foreign/curator-c1 "
                         r"mode=exclusive")
        self.assertEqual(a.request("TRYLOCK deploy"), "BUSY deploy")
        self.queue(b, "deploy")
        self.wait_ours(d, path, 1)
        self.assertTrue(b.silent(), "granted while Curator holds it")
        self.assertRegex(self.status(a, "deploy"), HELD_FOREIGN % ("deploy", "curator-c1", 1, 2))
        cur.release("c1")
        t2 = self.granted(b, "deploy")
        self.assert_increasing(t1, g1, t2)

        # go-zookeeper's Lock: both ways too
        if not have_go():
            lbharness.not_tested("go", "go-zookeeper's Lock beside lockbroker")
            self.unlock(b, "deploy")
            return
        go = Foreign.driver("go")
        go.acquire("g1", path, "mutex")
        self.wait_foreign_waiting(d, path, 1)
        self.assertFalse(go.has_line(r"acquired g1 "), "go-zookeeper holds beside us")
        self.unlock(b, "deploy")
        g2 = go.acquired("g1")
        gnode = g2.node
        # go-zookeeper writes no data: the node's name stands for it
        self.assertRegex(self.status(a, "deploy"),
                         HELD_FOREIGN % ("deploy", re.escape(gnode), 0, 1))
        self.queue(a, "deploy")
        self.wait_ours(d, path, 1)
        self.assertTrue(a.silent(), "granted while go-zookeeper holds it")
        go.release("g1")
        t3 = self.granted(a, "deploy")
        self.assert_increasing(t2, g2, t3)
        self.unlock(a, "deploy")


@dump_on_failure
class KazooProfileTest(InteropBase):
    """`kazoo`: kazoo's Lock, WriteLock and ReadLock."""

    def test_lock_and_write_lock_both_ways(self):
        kz = Foreign.driver("kazoo")
        path = self.apps + "/jobs/job-a/lock"
        d = self.start_daemon("job-* = kazoo %s/jobs/*/lock" % self.apps)
        a, b = self.client(d), self.client(d)
        for kind in ("lock", "write"):
            t1 = self.lock(a, "job-a")
            [node] = self.ours(d, path)
            self.assert_our_node(node, "__lock__")
            kz.acquire("k1", path, kind)
            self.wait_foreign_waiting(d, path, 1)
            self.assertFalse(kz.has_line(r"acquired k1 "), "kazoo %s holds beside us" % kind)
            self.unlock(a, "job-a")
            g1 = kz.acquired("k1")
            self.assertEqual(a.request("TRYLOCK job-a shared"), "BUSY job-a")
            self.queue(b, "job-a")
            self.wait_ours(d, path, 1)
            self.assertRegex(self.status(a, "job-a"), HELD_FOREIGN % ("job-a", "kazoo-k1", 1, 2))
            self.assertTrue(b.silent(), "granted while kazoo's %s holds it" % kind)
            kz.release("k1")
            t2 = self.granted(b, "job-a")
            self.assert_increasing(t1, g1, t2)
            self.unlock(b, "job-a")

    def test_readers_share_with_foreign_readers(self):
        kz = Foreign.driver("kazoo")
        path = self.apps + "/jobs/job-r/lock"
        d = self.start_daemon("job-* = kazoo %s/jobs/*/lock" % self.apps)
        a, b, w = self.client(d), self.client(d), self.client(d)
        self.lock(a, "job-r", "shared")
        [node] = self.ours(d, path)
        self.assert_our_node(node, "__rlock__")
        kz.hold("r1", path, "read")             # beside our reader, at once
        self.lock(b, "job-r", "shared")         # and ours beside both
        self.assertRegex(self.status(a, "job-r"),
                         r"^STATUS job-r held .* queue=3 mode=shared holders=3")
        # a kazoo writer queues behind the three, then ours behind it
        kz.acquire("w1", path, "write")
        self.wait_foreign_waiting(d, path, 1)
        self.queue(w, "job-r")
        self.wait_ours(d, path, 3)
        # a reader now comes after the writers (FIFO), here as in kazoo
        self.assertEqual(self.client(d).request("TRYLOCK job-r shared"), "BUSY job-r")
        self.unlock(a, "job-r")
        kz.release("r1")
        self.assertFalse(kz.has_line(r"acquired w1 "), "kazoo's writer beside our reader")
        self.unlock(b, "job-r")
        kz.acquired("w1")
        self.assertTrue(w.silent(), "our writer beside kazoo's")
        kz.release("w1")
        self.granted(w, "job-r")
        # ours holds: a kazoo reader waits, then holds beside our new reader
        kz.acquire("r2", path, "read")
        self.wait_foreign_waiting(d, path, 1)
        self.unlock(w, "job-r")
        kz.acquired("r2")
        self.lock(a, "job-r", "shared")
        kz.release("r2")
        self.unlock(a, "job-r")

    def test_kept_and_abandoned_holds(self):
        """A kept hold (UNLOCK keep=) keeps kazoo out until it ends; an
        abandoned one lets kazoo in at once: the daemon's lock_delay_ms
        (a minute here) does not apply on an [interop] name."""
        kz = Foreign.driver("kazoo")
        path = self.apps + "/jobs/job-k/lock"
        d = self.start_daemon("job-* = kazoo %s/jobs/*/lock" % self.apps,
                              server="lock_delay_ms = 60000\n")
        a, c = self.client(d), self.client(d)
        self.lock(a, "job-k")
        self.assertEqual(a.request("UNLOCK job-k keep=60000"), "OK job-k")
        kz.acquire("k1", path, "lock")
        self.wait_foreign_waiting(d, path, 1)
        self.assertRegex(self.status(c, "job-k"), r"^STATUS job-k held .* delay=\d+")
        self.assertFalse(kz.has_line(r"acquired k1 "), "kazoo holds beside a kept hold")
        self.assertEqual(c.request("BREAK job-k"), "OK job-k")
        kz.acquired("k1")
        kz.release("k1")
        self.lock(a, "job-k")
        kz.acquire("k2", path, "lock")
        self.wait_foreign_waiting(d, path, 1)
        a.close()
        kz.acquired("k2")           # well before the minute of a lock-delay
        kz.release("k2")

    def test_waiters_granted_in_sequence_order(self):
        """Waiters of both sides, interleaved, are granted one by one in
        ZooKeeper's order: no local handoff passes ours ahead of kazoo's."""
        kz = Foreign.driver("kazoo")
        path = self.apps + "/jobs/job-q/lock"
        d = self.start_daemon("job-* = kazoo %s/jobs/*/lock" % self.apps)
        ca, cb, cc = self.client(d), self.client(d), self.client(d)
        ours = {"a": ca, "b": cb, "c": cc}
        self.lock(ca, "job-q")
        kz.acquire("k1", path, "lock")
        self.wait_foreign_waiting(d, path, 1)
        self.queue(cb, "job-q")
        kz.acquire("k2", path, "lock")
        self.wait_foreign_waiting(d, path, 2)
        self.queue(cc, "job-q")
        holder, order = "a", ["a"]
        for _ in range(4):
            # whoever is next in ZooKeeper's order after the holder's node
            # is the one granted (ours: the next of our clients in line)
            after = self.nodes(path)[1:]
            if holder in ours:
                self.unlock(ours[holder], "job-q")
            else:
                kz.release(holder)
            if after and after[0][2].startswith(b"kazoo-"):
                nxt = after[0][2].decode()[len("kazoo-"):]
                kz.acquired(nxt)
            else:
                nxt = min(k for k in ours if k not in order)
                self.granted(ours[nxt], "job-q")
            for k in ours:
                if k not in order and k != nxt:
                    self.assertTrue(ours[k].silent(), "%s granted beside %s" % (k, nxt))
            for k in ("k1", "k2"):
                if k not in order and k != nxt:
                    self.assertFalse(kz.has_line(r"acquired %s " % k),
                                     "%s granted beside %s" % (k, nxt))
            holder = nxt
            order.append(nxt)
        self.unlock(ours[holder], "job-q")
        # kazoo's first waiter came before our second client (no local
        # handoff), and its second too: our b took its number when a's
        # node was gone, as the head of the daemon's own queue for the name
        # (PROTOCOL.md, Sharing locks with ZooKeeper recipes: FIFO by sequence)
        self.assertEqual(order, ["a", "k1", "k2", "b", "c"])


@dump_on_failure
class CuratorRwProfileTest(InteropBase):
    """`curator-rw`: Curator's InterProcessReadWriteLock."""

    def test_read_and_write_locks_both_ways(self):
        cur = Foreign.driver("curator")
        path = self.apps + "/reports/report-x"
        d = self.start_daemon("report-* = curator-rw %s/reports/*" % self.apps)
        a, b, w = self.client(d), self.client(d), self.client(d)
        # readers share: ours, Curator's, ours
        ta = self.lock(a, "report-x", "shared")
        [node] = self.ours(d, path)
        self.assert_our_node(node, "__READ__")
        cur.hold("r1", path, "read")
        tb = self.lock(b, "report-x", "shared")
        # Curator's writer waits for the readers, ours behind it
        cur.acquire("w1", path, "write")
        self.wait_foreign_waiting(d, path, 1)
        self.queue(w, "report-x")
        self.wait_ours(d, path, 3)
        self.unlock(a, "report-x")
        self.unlock(b, "report-x")
        self.assertFalse(cur.has_line(r"acquired w1 "), "Curator's writer beside its reader")
        cur.release("r1")
        g1 = cur.acquired("w1")
        self.assertRegex(self.status(a, "report-x"),
                         HELD_FOREIGN % ("report-x", "curator-w1", 1, 2))
        self.assertTrue(w.silent(), "our writer beside Curator's")
        cur.release("w1")
        t = self.granted(w, "report-x")
        self.assert_increasing(max(ta, tb), g1, t)
        self.assert_our_node(self.ours(d, path)[0], "__WRIT__")
        # our writer holds: Curator's reader and writer wait
        cur.acquire("r2", path, "read")
        self.wait_foreign_waiting(d, path, 1)
        cur.acquire("w2", path, "write")          # behind r2: it watches r2's node
        self.wait_foreign_waiting(d, path, 2)
        self.unlock(w, "report-x")
        cur.acquired("r2")
        self.assertFalse(cur.has_line(r"acquired w2 "), "Curator's writer beside its reader")
        cur.release("r2")
        cur.acquired("w2")
        cur.release("w2")


@dump_on_failure
class ReadingTest(InteropBase):
    """Foreign nodes on a name without [interop] (under <root>/locks/):
    read, with no configuration."""

    def test_foreign_holders_on_ordinary_names(self):
        kz = Foreign.driver("kazoo")
        d = self.start_daemon(None)
        path = self.root + "/locks/plain"
        a, b, wt = self.client(d), self.client(d), self.client(d)
        wt.send("WATCH plain\n")
        wt.expect("OK plain")
        wt.expect("EVENT plain free")
        # data beyond printable ASCII shows as '?', at most 64 bytes
        ident = "svc-\u00e9-" + "x" * 80
        shown = "svc-??-" + "x" * 57
        kz.hold("k1", path, "lock", ident)
        wt.expect_match(r"^EVENT plain held - holders=1 label=- holder=foreign/%s mode=exclusive"
                        % re.escape(shown))
        self.assertEqual(a.request("TRYLOCK plain"), "BUSY plain")
        self.assertEqual(a.request("TRYLOCK plain shared"), "BUSY plain")
        self.assertRegex(self.status(a, "plain"), HELD_FOREIGN % ("plain", re.escape(shown), 0, 1))
        a.send("HOLDERS plain\n")
        self.assertRegex(a.line(), r"^HOLDER plain exclusive held holder=foreign/%s label=- "
                         r"token=- since=\d+" % re.escape(shown))
        self.assertEqual(a.line(), "END")
        kz.release("k1")
        wt.expect("EVENT plain free")
        # a kazoo reader: ours shares with it, and it with ours
        kz.hold("r1", path, "read")
        self.lock(a, "plain", "shared")
        kz.hold("r2", path, "read")
        self.assertEqual(b.request("TRYLOCK plain"), "BUSY plain")
        self.unlock(a, "plain")
        kz.release("r1")
        kz.release("r2")
        # a kazoo semaphore's lease (no sequence) excludes readers and writers
        kz.hold("s1", path, "semaphore", "sem-s1")
        self.assertEqual(a.request("TRYLOCK plain shared"), "BUSY plain")
        self.assertEqual(a.request("TRYLOCK plain"), "BUSY plain")
        self.assertRegex(self.status(a, "plain"),
                         r"^STATUS plain held holder=foreign/sem-s1 token=- ")
        kz.release("s1")
        self.lock(a, "plain")
        self.unlock(a, "plain")


@dump_on_failure
class RefusalTest(InteropBase):
    """What foreign clients cannot follow is refused at once, nothing queued."""

    def test_what_foreign_clients_cannot_follow(self):
        d = self.start_daemon("deploy = curator %s/deploy\njob-* = kazoo %s/jobs/*/lock\n"
                              "report-* = curator-rw %s/reports/*" % ((self.apps,) * 3))
        c = self.client(d)
        self.assertEqual(c.request("LOCK deploy 0 shared"),
                         "ERR BAD_ARGS shared is not served on deploy: its [interop] profile "
                         "curator has no readers")
        self.assertEqual(c.request("TRYLOCK deploy shared"),
                         "ERR BAD_ARGS shared is not served on deploy: its [interop] profile "
                         "curator has no readers")
        for name, profile in (("deploy", "curator"), ("job-1", "kazoo"),
                              ("report-1", "curator-rw")):
            for req in ("LOCK %s 100 ttl=5000", "TRYLOCK %s ttl=5000", "LOCK %s 100 limit=2",
                        "TRYLOCK %s limit=2", "LOCK %s 100 delay=100", "TRYLOCK %s delay=1"):
                line = c.request(req % name)
                self.assertRegex(line, r"^ERR BAD_ARGS ", req % name)
                self.assertIn(name, line)
                self.assertIn(profile, line)
            self.assertRegex(self.status(c, name), r"^STATUS %s free .* queue=0" % name)
        self.assertEqual(self.nodes(self.apps + "/deploy"), [])
        # delay=0 is no lock-delay: served
        self.lock(c, "deploy", "delay=0")
        self.unlock(c, "deploy")
        # names without [interop] keep every option
        self.lock(c, "other", "ttl=5000")


@dump_on_failure
class OutageTest(InteropBase):
    """ZooKeeper goes away while a foreign client holds the lock."""

    def test_outage_with_a_foreign_holder(self):
        cur = Foreign.driver("curator")
        path = self.apps + "/deploy"
        d = self.start_daemon("deploy = curator %s" % path, session_ms=OUTAGE_SESSION_MS)
        a, b = self.client(d), self.client(d)
        g1 = cur.hold("c1", path, "mutex")
        self.queue(b, "deploy")
        self.wait_ours(d, path, 1)
        mark = d.log_mark()
        self.zk.stop()
        try:
            d.wait_log(r"zk: disconnected from ZooKeeper", since=mark)
            # not granted: BUSY (our waiter is ahead, known here) or unavailable
            self.assertRegex(a.request("TRYLOCK deploy"), r"^(BUSY deploy$|ERR UNAVAILABLE )")
            self.assertRegex(a.request("LOCK deploy 200"), r"^ERR UNAVAILABLE ")
            self.assertRegex(self.status(a, "deploy"), r"^ERR UNAVAILABLE ")
            self.assertTrue(b.silent(), "granted during the outage")
        finally:
            self.zk.start()
        d.wait_log(r"zk: reconnected to session", since=mark, timeout=scaled(15.0))
        # the foreign hold outlived the outage, and ours waits for it still
        self.assertRegex(self.status(a, "deploy"), HELD_FOREIGN % ("deploy", "curator-c1", 1, 2))
        self.assertEqual(a.request("TRYLOCK deploy"), "BUSY deploy")
        self.assertTrue(b.silent(), "granted while Curator holds it")
        cur.release("c1")
        self.assertGreater(self.granted(b, "deploy"), g1.pzxid * 256)
        self.unlock(b, "deploy")



# ----------------------------------------------------------- README.md

README = os.path.join(SRCDIR, "README.md")
# Stands in for the examples' deploy and import scripts: says who runs it,
# then waits for a line on stdin (the test's word to finish).
STAND_IN = "#!/bin/sh\necho \"running for $WHO\"\nread line\n"


def client_path():
    return os.environ.get("LOCKBROKER") or os.path.normpath(
        os.path.join(HERE, "..", "..", "cli", "lockbroker"))


def readme_block(lang, contains):
    """The README's ```lang block of its interop examples that holds contains."""
    with open(README) as f:
        text = f.read()
    m = re.search(r"\n#### Examples: a Java service and a cron job.*?(?=\n#{2,3} )", text, re.S)
    if m is None:
        raise AssertionError("no interop examples in " + README)
    for b in re.finditer(r"```%s\n(.*?)```" % lang, m.group(0), re.S):
        if contains in b.group(1):
            return b.group(1)
    raise AssertionError("no ```%s block with %r in the README's interop examples"
                         % (lang, contains))


@dump_on_failure
class ReadmeTest(InteropBase):
    """README's examples, run as printed but for the ZooKeeper servers, the
    root and the scripts they run."""

    def setUp(self):
        super().setUp()
        self.dir = lbharness.make_tmpdir("lbreadme-")
        with open(os.path.join(self.dir, "work.sh"), "w") as f:
            f.write(STAND_IN)
        os.chmod(os.path.join(self.dir, "work.sh"), 0o755)

    def readme_daemon(self):
        config = readme_block("ini", "[interop]")
        self.assertIn("hosts = zk1:2181,zk2:2181,zk3:2181\nroot = /lockbroker\n", config)
        config = config.replace("zk1:2181,zk2:2181,zk3:2181", self.zk.connect_string) \
            .replace("root = /lockbroker", "root = %s\nsession_timeout_ms = %d\ntick_ms = 500"
                     % (self.root, SESSION_MS))
        return self.start_daemon(None, config=config)

    def run_example(self, name, argv, d, who):
        """Starts argv (a list, or a shell line) in the test's directory, with
        lockbroker on PATH and pointed at d; its stdout is read by lines."""
        env = dict(os.environ, WHO=who, LOCKBROKER_ADDR="%s:%d" % (d.host, d.port),
                   PATH=os.path.dirname(os.path.abspath(client_path())) + ":" +
                   os.environ.get("PATH", ""))
        for k in ("LOCKBROKER_NAME", "LOCKBROKER_TOKEN", "LOCKBROKER_TLS"):
            env.pop(k, None)
        if isinstance(argv, str):
            argv = ["/bin/sh", "-c", argv]
        p = Driver(name, argv, env=env, cwd=self.dir, ready=False)
        self.addCleanup(self._end, p)
        return p

    def _end(self, p):
        if p.proc.poll() is None:
            p.proc.kill()
            p.proc.wait()
        for f in (p.proc.stdin, p.proc.stdout):
            try:
                f.close()
            except OSError:
                pass
        p.err.close()

    def finish(self, p):
        """Lets p's script end (a line on stdin); asserts p exits 0."""
        p.send("done")
        try:
            rc = p.proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            raise AssertionError("%s did not exit\n%s" % (p.name, p.stderr_tail()))
        self.assertEqual(rc, 0, "%s exited %d\n%s" % (p.name, rc, p.stderr_tail()))

    def test_java_service_and_cron_job(self):
        if not have_curator():
            lbharness.skip("curator", "javac or Debian's libcurator-recipes-java missing")
        Foreign.server()
        d = self.readme_daemon()
        java = readme_block("java", "class DeployService")
        with open(os.path.join(self.dir, "DeployService.java"), "w") as f:
            f.write(java.replace("zk1:2181,zk2:2181,zk3:2181", self.zk.connect_string))
        sh = readme_block("sh", "javac").strip().splitlines()
        self.assertTrue(sh[0].startswith("J=/usr/share/java"), sh)
        build = subprocess.run(["/bin/sh", "-c", "J=/usr/share/java\n" + sh[1]], cwd=self.dir,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.assertEqual(build.returncode, 0, build.stdout)
        self.assertIn("/srv/myapp/deploy.sh", sh[2])
        service = self.run_example("DeployService", "J=/usr/share/java\n" + sh[2].replace(
            "/srv/myapp/deploy.sh", "./work.sh"), d, "java")
        service.await_line(r"running for java$", scaled(60.0))

        c = self.client(d)
        self.assertRegex(self.status(c, "deploy"),
                         r"^STATUS deploy held holder=foreign/\S+ token=- ")
        cron = readme_block("sh", "lockbroker run -w 30m deploy")
        m = re.search(r"^(lockbroker run .*)$", cron, re.M)
        self.assertIsNotNone(m, cron)
        job = self.run_example("cron", m.group(1).replace("/srv/myapp/deploy.sh", "./work.sh"),
                               d, "cron")
        self.wait_ours(d, "/myapp/locks/deploy", 1)
        self.assertFalse(job.has_line(r"running"), "the cron job runs beside the service")
        self.finish(service)
        job.await_line(r"running for cron$")
        self.assertRegex(self.status(c, "deploy"), r"^STATUS deploy held holder=(?!foreign/)")
        self.finish(job)

    def test_python_service_and_shell_script(self):
        if not have_kazoo():
            lbharness.skip("kazoo", "Debian's python3-kazoo missing (for %s)" % DEBIAN_PYTHON)
        Foreign.server()
        d = self.readme_daemon()
        worker = readme_block("python", "import_worker.py")
        with open(os.path.join(self.dir, "import_worker.py"), "w") as f:
            f.write(worker.replace("zk1:2181,zk2:2181,zk3:2181", self.zk.connect_string))
        script = readme_block("sh", "nightly-import.sh")
        self.assertIn("/srv/jobs/import.sh", script)
        with open(os.path.join(self.dir, "nightly-import.sh"), "w") as f:
            f.write(script.replace("/srv/jobs/import.sh", "./work.sh"))
        os.chmod(os.path.join(self.dir, "nightly-import.sh"), 0o755)

        service = self.run_example("import_worker",
                                   [DEBIAN_PYTHON, "import_worker.py", "./work.sh"], d, "python")
        service.await_line(r"running for python$")
        shell = self.run_example("nightly-import", ["./nightly-import.sh"], d, "shell")
        host = socket.gethostname()
        shell.await_line(r"STATUS job-import held holder=foreign/import-worker@%s token=- "
                         % re.escape(host))
        self.wait_ours(d, "/jobs/job-import/lock", 1)
        self.assertFalse(shell.has_line(r"running"), "the script runs beside the service")
        self.finish(service)
        shell.await_line(r"running for shell$")
        self.finish(shell)


if __name__ == "__main__":
    if not zkharness.available():
        lbharness.skip_file("test_interop.py", "zk", "ZooKeeper not installed")
    unittest.main(verbosity=2)
