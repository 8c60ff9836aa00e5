#!/usr/bin/env python3
"""End-to-end tests of lockbrokerd reading other ZooKeeper recipes' lock
nodes (proto/PROTOCOL.md, "Sharing locks with ZooKeeper recipes",
"Reading other recipes' nodes"), with no configuration: python3-kazoo's
real Lock, ReadLock and Semaphore take lockbroker's own
<root>/locks/<name> path, and the daemon must wait for them, hold beside
their readers and name them in STATUS, HOLDERS and WATCH. The whole suite
with Curator and go-zookeeper, and [interop] (nodes written in the
recipes' formats), is elsewhere; these cases stay few and quick, on one
shared ZooKeeper server and one daemon.

Skipped, exit 77, (key "kazoo") without Debian's python3-kazoo, and (key
"zk") without a ZooKeeper server. Nothing sleeps to synchronise: each step waits
for a reply line, a daemon log line or a ZooKeeper condition, with a bound.
"""

import os
import re
import shutil
import sys
import tempfile
import unittest

# python3-kazoo is Debian's: where `python3` on PATH is another interpreter
# (a pyenv build, say), run this file under Debian's instead.
DEBIAN_PYTHON = "/usr/bin/python3"
try:
    import kazoo  # noqa: F401
except ImportError:
    if (os.access(DEBIAN_PYTHON, os.X_OK) and os.path.realpath(sys.executable) !=
            os.path.realpath(DEBIAN_PYTHON) and not os.environ.get("LB_FOREIGN_REEXEC")):
        os.environ["LB_FOREIGN_REEXEC"] = "1"
        os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON] + sys.argv)

try:
    from kazoo.client import KazooClient
    HAVE_KAZOO = True
except ImportError:
    HAVE_KAZOO = False

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lbharness  # noqa: E402
from lbharness import Daemon, scaled  # noqa: E402
import zkharness  # noqa: E402
from zkharness import ZkServer, wait_for  # noqa: E402

ROOT = "/lbforeign"
TOKEN = r"(\d+)"


def comparable_token(zk, path):
    """What a recipe's holder computes as its fencing token, comparable with
    lockbroker's (PROTOCOL.md): the lock path's pzxid, read after it
    acquired, times 256."""
    return zk.exists(path).pzxid * 256


class ForeignTest(unittest.TestCase):
    zk = None
    daemon = None

    @classmethod
    def setUpClass(cls):
        if not HAVE_KAZOO:
            lbharness.skip("kazoo", "Debian's python3-kazoo is not installed")
        if not zkharness.available():
            lbharness.skip("zk", "ZooKeeper (java + Debian's zookeeper jars) not installed")
        cls.zk = ZkServer(tick_ms=500, name="zk-foreign",
                          base_dir=tempfile.mkdtemp(prefix="lbforeign-zk-"))
        try:
            cls.zk.start()
            cls.daemon = Daemon(config="[zookeeper]\nhosts = %s\nroot = %s\n"
                                "session_timeout_ms = 6000\ntick_ms = 500\n"
                                % (cls.zk.connect_string, ROOT), name="A")
            cls.daemon.start()
            cls.daemon.wait_log(r"zk: every daemon of root \S+ has \[zookeeper\] nonfair",
                                scaled(20.0))
        except BaseException:
            cls._stop()
            raise

    @classmethod
    def tearDownClass(cls):
        cls._stop()

    @classmethod
    def _stop(cls):
        if cls.daemon is not None:
            cls.daemon.stop()
        if cls.zk is not None:
            cls.zk.stop(grace=5.0)
            cls.zk.cleanup()
            shutil.rmtree(cls.zk.dir, ignore_errors=True)

    def setUp(self):
        self.kz = KazooClient(hosts=self.zk.connect_string, timeout=scaled(10.0))
        self.kz.start(timeout=scaled(20.0))
        self.addCleanup(self.kz.close)
        self.addCleanup(self.kz.stop)

    def run(self, result=None):
        failures = len(result.failures) + len(result.errors) if result else 0
        super().run(result)
        if result and len(result.failures) + len(result.errors) > failures and self.daemon:
            sys.stderr.write("\n===== %s failed: daemon log =====\n%s\n"
                             % (self._testMethodName, self.daemon.log_tail(40)))

    def client(self):
        c = self.daemon.client()
        self.addCleanup(c.close)
        return c

    def path(self, name):
        return "%s/locks/%s" % (ROOT, name)

    def wait_children(self, name, n):
        wait_for(lambda: len(self.kz.get_children(self.path(name))) == n, scaled(10.0),
                 what="%d nodes under %s" % (n, self.path(name)))

    def test_waits_while_a_kazoo_lock_holds(self):
        name = "deploy"
        # A persistent parent, as kazoo makes it: the daemon's own is a
        # container, which the server may remove while it is empty.
        self.kz.ensure_path(self.path(name))
        c, w = self.client(), self.client()
        # Ours first, released: a recipe's holder after it gets a greater token.
        t0 = int(c.request("LOCK %s" % name).split()[2])
        self.assertEqual(c.request("UNLOCK %s" % name), "OK %s" % name)
        self.wait_children(name, 0)
        self.assertEqual(w.request("WATCH %s" % name), "OK %s" % name)
        w.expect("EVENT %s free" % name)

        lock = self.kz.Lock(self.path(name), "ci@runner-7")
        self.assertTrue(lock.acquire(timeout=scaled(10.0)))
        t1 = comparable_token(self.kz, self.path(name))
        self.assertGreater(t1, t0)
        w.expect("EVENT %s held - holders=1 label=- holder=foreign/ci@runner-7 "
                 "mode=exclusive" % name)
        self.assertRegex(c.request("STATUS %s" % name),
                         r"^STATUS %s held holder=foreign/ci@runner-7 token=- since=\d+ "
                         r"waiters=0 queue=1$" % name)
        self.assertEqual(c.request("TRYLOCK %s" % name), "BUSY %s" % name)

        c.send("LOCK %s 30000\n" % name)
        self.daemon.wait_queued(c, name)
        self.wait_children(name, 2)
        self.assertRegex(w.request("HOLDERS %s" % name, timeout=scaled(10.0)),
                         r"^HOLDER %s exclusive held holder=foreign/ci@runner-7 label=- "
                         r"token=- since=\d+$" % name)
        rows = [w.line(), w.line()]
        self.assertRegex(rows[0], r"^HOLDER %s exclusive queued holder=%s/\S+ " % (
            name, re.escape(self.daemon_id())))
        self.assertEqual(rows[1], "END")
        self.assertTrue(c.silent(), "lockbroker granted %s while kazoo holds it" % name)

        lock.release()
        t2 = int(c.expect_match(r"OK %s %s" % (name, TOKEN)).group(1))
        self.assertGreater(t2, t1)
        self.assertEqual(c.request("UNLOCK %s" % name), "OK %s" % name)

    def test_shared_beside_a_kazoo_read_lock(self):
        name = "report"
        self.kz.ensure_path(self.path(name))
        c, d = self.client(), self.client()
        rlock = self.kz.ReadLock(self.path(name), "")
        self.assertTrue(rlock.acquire(timeout=scaled(10.0)))
        # Named by its node, as it wrote no data.
        self.assertRegex(d.request("STATUS %s" % name),
                         r"^STATUS %s held holder=foreign/[0-9a-f]{32}__rlock__\d{10} "
                         r"token=- since=\d+ waiters=0 queue=1 mode=shared holders=1$" % name)
        # A reader of ours holds at once, beside it: both count.
        self.assertRegex(c.request("LOCK %s shared" % name), r"^OK %s %s$" % (name, TOKEN))
        self.assertRegex(d.request("STATUS %s" % name),
                         r"^STATUS %s held .* queue=2 mode=shared holders=2$" % name)
        # A writer of ours waits for both.
        self.assertEqual(d.request("TRYLOCK %s" % name), "BUSY %s" % name)
        d.send("LOCK %s 30000\n" % name)
        self.daemon.wait_queued(d, name)
        self.assertEqual(c.request("UNLOCK %s" % name), "OK %s" % name)
        self.assertTrue(d.silent(), "a writer got %s beside a kazoo reader" % name)
        rlock.release()
        d.expect_match(r"OK %s %s" % (name, TOKEN))
        self.assertEqual(d.request("UNLOCK %s" % name), "OK %s" % name)

    def test_a_kazoo_semaphore_lease_holds_and_keeps_its_parent(self):
        name = "batch"
        c = self.client()
        sem = self.kz.Semaphore(self.path(name), "nightly", max_leases=2)
        self.assertTrue(sem.acquire(timeout=scaled(10.0)))
        self.assertEqual(self.kz.get(self.path(name))[0], b"2")
        # The lease has no sequence: it holds outside the order. This is
        # the daemon's first use of the name: the parent's data stays.
        self.assertRegex(c.request("STATUS %s" % name),
                         r"^STATUS %s held holder=foreign/nightly token=- since=\d+ "
                         r"waiters=0 queue=1$" % name)
        self.assertEqual(c.request("TRYLOCK %s" % name), "BUSY %s" % name)
        self.assertEqual(self.kz.get(self.path(name))[0], b"2")
        self.assertEqual(c.request("TRYLOCK %s shared" % name), "BUSY %s" % name)
        c.send("LOCK %s 30000\n" % name)
        self.daemon.wait_queued(c, name)
        self.assertEqual(self.kz.get(self.path(name))[0], b"2")
        sem.release()
        c.expect_match(r"OK %s %s" % (name, TOKEN))
        self.assertEqual(self.kz.get(self.path(name))[0], b"2")
        self.assertEqual(c.request("UNLOCK %s" % name), "OK %s" % name)

    def daemon_id(self):
        return self.daemon.wait_log(r"zk: daemon id (\S+), connecting").group(1)


if __name__ == "__main__":
    if not HAVE_KAZOO:
        lbharness.skip_file("test_foreign.py", "kazoo", "Debian's python3-kazoo is not installed")
    if not zkharness.available():
        lbharness.skip_file("test_foreign.py", "zk", "ZooKeeper not installed")
    unittest.main(verbosity=2)
