"""End-to-end tests of the daemon's side of [interop] (issue 39, items 2 and 3).

What lockbrokerd itself writes on an [interop] name, read back from ZooKeeper
with zkharness's own client (no foreign library needed): node names in each
profile's format at the rule's path, persistent parents and ancestors, a
parent's data never written; the refusals (ttl=, limit=, delay=, shared on
curator) and what does not apply there (the default lock_delay_ms, local
handoff); `-t` on bad sections; daemons that disagree on [interop]. The real
Curator, kazoo and go-zookeeper clients against these names are
test_interop.py's.

Exit 77 (automake: SKIP) when ZooKeeper or java is not installed (1 with
LB_REQUIRE=zk).
"""

import os
import re
import signal
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lbharness  # noqa: E402
from lbharness import scaled, stats  # noqa: E402
import zkharness  # noqa: E402
from zkharness import ZkClient  # noqa: E402
from test_distributed import DistributedBase, dump_on_failure  # noqa: E402

HEX = "[0-9a-f]"
UUID = "%s{8}-%s{4}-%s{4}-%s{4}-%s{12}" % (HEX, HEX, HEX, HEX, HEX)
CURATOR_RE = r"_c_%s-lock-\d{10}" % UUID               # InterProcessMutex, go-zookeeper
WRIT_RE = r"_c_%s-__WRIT__\d{10}" % UUID               # InterProcessReadWriteLock
READ_RE = r"_c_%s-__READ__\d{10}" % UUID
KAZOO_RE = r"%s{32}__lock__\d{10}" % HEX               # kazoo Lock, WriteLock
KAZOO_R_RE = r"%s{32}__rlock__\d{10}" % HEX            # kazoo ReadLock


def interop_section(base):
    return ("[interop]\n"
            "deploy = curator %s/app/locks/deploy\n"
            "job-*  = kazoo %s/jobs/*/lock\n"
            "rw-*   = curator-rw %s/rw/*\n" % (base, base, base))


@dump_on_failure
class InteropNamesTest(DistributedBase):

    def setUp(self):
        super().setUp()
        # Outside the daemon's root, as the other clients' paths are.
        self.base = "/it-" + self._testMethodName
        self.zc = ZkClient(self.zk.connect_string)
        self.addCleanup(self.zc.close)

    def start(self, name="lb", extra="", section=None):
        return self.start_daemon(self.zk.connect_string, name,
                                 extra="keep_idle_ms = 0\n[server]\nlock_delay_ms = 5000\n" +
                                 extra + (interop_section(self.base) if section is None
                                          else section))

    def children(self, path):
        return self.zc.get_children(path)

    def test_nodes_in_each_profile_format_under_persistent_parents(self):
        # A parent the foreign recipe made, with its data (kazoo's Semaphore
        # keeps its max_leases there): ours is never written over.
        self.zc.create(self.base)
        self.zc.create(self.base + "/rw")
        self.zc.create(self.base + "/rw/rw-a", b"foreign data")
        d = self.start()
        cs = [self.client(d) for _ in range(4)]
        self.assertRegex(cs[0].request("LOCK deploy"), r"^OK deploy \d+$")
        self.assertRegex(cs[1].request("LOCK job-1"), r"^OK job-1 \d+$")
        self.assertRegex(cs[2].request("LOCK rw-a shared"), r"^OK rw-a \d+$")
        self.assertRegex(cs[3].request("LOCK rw-b"), r"^OK rw-b \d+$")
        kids = {
            "deploy": self.children(self.base + "/app/locks/deploy"),
            "job-1": self.children(self.base + "/jobs/job-1/lock"),
            "rw-a": self.children(self.base + "/rw/rw-a"),
            "rw-b": self.children(self.base + "/rw/rw-b"),
        }
        for name, regex in (("deploy", CURATOR_RE), ("job-1", KAZOO_RE), ("rw-a", READ_RE),
                            ("rw-b", WRIT_RE)):
            self.assertEqual(len(kids[name]), 1, kids)
            self.assertRegex(kids[name][0], "^%s$" % regex)
        # One daemon, one tag: the first 16 hex digits of every name agree.
        tags = {re.sub(r"[^0-9a-f]", "", k[3:] if k.startswith("_c_") else k)[:16]
                for v in kids.values() for k in v}
        self.assertEqual(len(tags), 1, kids)
        # Our usual data; the parent's untouched (version 0).
        data, _ = self.zc.get_data(self.base + "/app/locks/deploy/" + kids["deploy"][0])
        self.assertTrue(data.startswith(b"daemon=%s " % d.daemon_id.encode()), data)
        data, stat = self.zc.get_data(self.base + "/rw/rw-a")
        self.assertEqual((data, stat.version), (b"foreign data", 0))
        # Parents and their ancestors: persistent, ours with nothing written.
        for p in (self.base + "/app", self.base + "/app/locks", self.base + "/app/locks/deploy",
                  self.base + "/jobs/job-1", self.base + "/jobs/job-1/lock"):
            data, stat = self.zc.get_data(p)
            self.assertEqual((stat.ephemeralOwner, stat.version, data), (0, 0, None), p)
        # STATUS says whose recipe the name follows.
        self.assertRegex(self.client(d).request("STATUS deploy"),
                         r"^STATUS deploy held .* recipe=curator$")
        for c, name in zip(cs, ("deploy", "job-1", "rw-a", "rw-b")):
            self.assertEqual(c.request("UNLOCK " + name), "OK " + name)
        # Released: our nodes go, the parents stay (never containers): an
        # ordinary name's container parent, released at the same time, is
        # reaped by the server's container sweep (1 s here) first.
        c = self.client(d)
        self.assertRegex(c.request("LOCK plain"), r"^OK plain \d+$")
        self.assertEqual(c.request("UNLOCK plain"), "OK plain")
        self.wait_zk(lambda: self.zc.exists("%s/locks/plain" % self.root) is None, scaled(15.0),
                     "the server reaps plain's container parent")
        for p in ("/app/locks/deploy", "/jobs/job-1/lock", "/rw/rw-b"):
            self.assertIsNotNone(self.zc.exists(self.base + p), p)

    def test_refusals_and_what_does_not_apply(self):
        d = self.start()
        c = self.client(d)
        for line, why in (
                ("LOCK deploy shared",
                 "shared is not served on deploy: its [interop] profile curator has no readers"),
                ("TRYLOCK job-1 ttl=5000",
                 "ttl= is not served on job-1: its [interop] profile kazoo has no leases "
                 "(foreign clients cannot see where one waits)"),
                ("LOCK job-1 limit=2",
                 "limit= is not served on job-1: its [interop] profile kazoo has no semaphore "
                 "a foreign client would count"),
                ("LOCK rw-x delay=100",
                 "delay= is not served on rw-x: its [interop] profile curator-rw has no "
                 "lock-delay (foreign waiters would not honour it)"),
                # A set: refused before anything is taken.
                ("LOCK aa,deploy shared",
                 "shared is not served on deploy: its [interop] profile curator has no readers")):
            self.assertEqual(c.request(line), "ERR BAD_ARGS " + why, line)
        self.assertRegex(c.request("STATUS aa"), r"^STATUS aa free")
        # delay=0 asks for nothing foreign clients could not follow.
        t1 = int(c.request("LOCK job-2 delay=0").split()[2])
        # No local handoff: the waiter here gets its own node, in ZooKeeper's
        # order (a token of its own, not the holder's + 1).
        w = self.client(d)
        w.send("LOCK job-2 10000\n")
        d.wait_queued(w, "job-2")
        self.assertEqual(c.request("UNLOCK job-2"), "OK job-2")
        t2 = int(w.expect_match(r"OK job-2 (\d+)").group(1))
        self.assertGreater(t2, t1)
        self.assertEqual(t2 % 256, 0, (t1, t2))
        # An ordinary name is passed on locally, for comparison.
        o1 = int(c.request("LOCK plain").split()[2])
        w.send("LOCK plain 10000\n")
        d.wait_queued(w, "plain")
        self.assertEqual(c.request("UNLOCK plain"), "OK plain")
        self.assertEqual(int(w.expect_match(r"OK plain (\d+)").group(1)), o1 + 1)
        # The daemon's default lock_delay_ms (5000 here) does not apply on
        # an [interop] name: its holder's end begins no lock-delay.
        a = self.client(d)
        self.assertRegex(a.request("LOCK job-3"), r"^OK job-3 \d+$")
        a.close()
        d.wait_closed(a)
        self.assertEqual(stats(d)["lock_delays"], "0")
        b = self.client(d)
        self.assertRegex(b.request("LOCK job-3 10000"), r"^OK job-3 \d+$")
        self.assertEqual(stats(d)["lock_delays"], "0")
        # UNLOCK keep= keeps the node, which foreign waiters honour too.
        self.assertEqual(b.request("UNLOCK job-3 keep=60000"), "OK job-3")
        self.assertEqual(len(self.children(self.base + "/jobs/job-3/lock")), 1)

    def test_two_daemons_queue_at_the_path(self):
        a, b = self.start("A"), self.start("B")
        ca, cb = self.client(a), self.client(b)
        t1 = int(ca.request("LOCK job-7").split()[2])
        self.assertEqual(cb.request("TRYLOCK job-7"), "BUSY job-7")
        cb.send("LOCK job-7 10000\n")
        b.wait_queued(cb, "job-7")
        # B's node is queued behind A's, both in kazoo's naming.
        self.wait_zk(lambda: len(self.children(self.base + "/jobs/job-7/lock")) == 2,
                     scaled(10.0), "two nodes under job-7's path")
        for k in self.children(self.base + "/jobs/job-7/lock"):
            self.assertRegex(k, "^%s$" % KAZOO_RE)
        self.assertTrue(cb.silent(), "B granted job-7 while A holds it")
        self.assertEqual(ca.request("UNLOCK job-7"), "OK job-7")
        t2 = int(cb.expect_match(r"OK job-7 (\d+)").group(1))
        self.assertGreater(t2, t1)
        self.assertEqual(cb.request("UNLOCK job-7"), "OK job-7")

    def test_a_handover_keeps_the_naming(self):
        d = self.start()
        h, w = self.client(d), self.client(d)
        t1 = int(h.request("LOCK deploy").split()[2])
        w.send("LOCK deploy 20000\n")          # waits here, no node of its own yet
        d.wait_queued(w, "deploy")
        path = self.base + "/app/locks/deploy"
        held = self.children(path)
        self.assertEqual(len(held), 1, held)
        mark = d.log_mark()
        d.send_signal(signal.SIGUSR2)
        d.wait_log(r"handover: took over \d+ connections", scaled(15.0), since=mark)
        d.wait_log(r"zk: reconnected to session 0x%x," % d.session, scaled(15.0), since=mark)
        # The successor knows the node it was given, and names the waiter's
        # new one as Curator would, from its own [interop].
        self.assertRegex(h.request("CHECK deploy"), r"^OK deploy %d \d+$" % t1)
        self.assertEqual(self.children(path), held)
        self.assertEqual(h.request("UNLOCK deploy"), "OK deploy")
        t2 = int(w.expect_match(r"OK deploy (\d+)").group(1))
        self.assertGreater(t2, t1)
        kids = self.children(path)
        self.assertEqual(len(kids), 1, kids)
        self.assertRegex(kids[0], "^%s$" % CURATOR_RE)
        self.assertNotEqual(kids, held)
        self.assertEqual(w.request("UNLOCK deploy"), "OK deploy")
        self.wait_zk(lambda: not self.children(path), scaled(10.0), "deploy's nodes gone")

    def test_a_foreign_acl_is_explained(self):
        # The path's owner let only its own identity create there.
        owner = "owner:secret"
        self.zc.add_auth("digest", owner)
        self.zc.create(self.base, acl=[(zkharness.PERM_ALL, "digest",
                                        zkharness.digest_id(owner))])
        d = self.start()
        d.killed = True          # it logs the refusal as an error, on purpose
        got = self.client(d).request("TRYLOCK deploy")
        self.assertTrue(got.startswith("ERR UNAVAILABLE"), got)
        # The first node it may not make: <base>/app.
        d.wait_log(r"zk: ZooKeeper does not let this daemon write at %s/app: whoever made "
                   r"that \[interop\] path \(or the nodes above it\) must give this "
                   r"daemon's identity \(its \[zookeeper\] auth\) CREATE, DELETE and READ "
                   r"there$" % re.escape(self.base), scaled(10.0))

    def test_daemons_that_disagree_serve_nothing(self):
        a = self.start("A")
        c = self.client(a)
        self.assertRegex(c.request("LOCK deploy"), r"^OK deploy \d+$")
        b = self.start_daemon(self.zk.connect_string, "B", wait_agreement=False,
                              extra=interop_section(self.base).replace("kazoo", "curator"))
        b.killed = True          # its logged refusal is what this test wants
        why = b.wait_log(r"zk: (\[interop\] differs between this daemon .*)", scaled(15.0))
        self.assertIn("daemon %s" % a.daemon_id, why.group(1))
        self.assertTrue(why.group(1).endswith(
            "every daemon of root %s must have the same [interop] rules in the same order; "
            "make them equal and restart" % self.root), why.group(1))
        got = self.client(b).request("LOCK deploy 1000")
        self.assertTrue(got.startswith("ERR UNAVAILABLE [interop] differs"), got)


class InteropCheckTest(unittest.TestCase):
    """`lockbrokerd -t`: a bad [interop] section names the file and line."""

    def check(self, text):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "lb.conf")
            with open(path, "w") as f:
                f.write(text)
            p = subprocess.run([lbharness.daemon_path(), "-t", "-c", path], capture_output=True,
                               text=True, timeout=30)
            return p.returncode, (p.stdout + p.stderr).replace(path, "F")

    def test_bad_sections(self):
        zk = "[zookeeper]\nhosts = 127.0.0.1:2181\n"
        self.assertEqual(self.check(zk + "[interop]\ndeploy = curator /a/deploy\n"),
                         (0, "lockbrokerd: configuration OK\n"))
        for text, why in (
                ("[interop]\ndeploy = curator /a\n",
                 "F:2: [interop] deploy: locks are shared with ZooKeeper recipes in "
                 "distributed mode only; set [zookeeper] hosts or remove [interop]"),
                (zk + "nonfair = job-1*\n[interop]\njob-* = kazoo /j/*\n",
                 "F:5: [interop] job-* overlaps [zookeeper] nonfair's job-1*: a name is "
                 "either non-fair or shared with ZooKeeper recipes; make the two patterns "
                 "apart"),
                (zk + "[interop]\nx = kazoo /a\nx = curator /b\n",
                 "F:5: [interop] 'x' is set twice (lines 4 and 5); keep one"),
                (zk + "[interop]\nx = kazoo /a/*/*\n",
                 "F:4: [interop] x: '/a/*/*' holds '*' more than once")):
            self.assertEqual(self.check(text), (1, "lockbrokerd: %s\n" % why), text)


if __name__ == "__main__":
    unittest.main(verbosity=2)
