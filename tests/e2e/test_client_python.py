#!/usr/bin/env python3
"""End-to-end tests of the Python client library (clients/python) against
the real daemon: embedded mode, and distributed mode against a real
ZooKeeper (skipped without one). Waits are for events (a reply, a log line,
the library's own events), each with a timeout; nothing sleeps to
synchronise and nothing asserts a duration."""

import asyncio
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.environ.get("LB_SRCDIR") or os.path.join(HERE, "..", ".."),
                                "clients", "python"))
import lockbroker  # noqa: E402
import lockbroker.aio  # noqa: E402
from lbharness import Daemon, make_tmpdir, scaled  # noqa: E402
import lbnames  # noqa: E402
import test_auth  # noqa: E402
import test_distributed as td  # noqa: E402
import zkharness  # noqa: E402

T = scaled(10.0)


class EmbeddedTests(unittest.TestCase):

    def setUp(self):
        self.d = Daemon(config="[server]\n").start()
        self.addCleanup(self.d.stop)
        self.c = lockbroker.connect(self.d.listen_addr, timeout=T)
        self.addCleanup(self.c.close)

    def test_lock_release_and_tokens_go_up(self):
        with self.c.lock("a") as h1:
            self.assertIsInstance(h1.token, int)
            self.assertFalse(h1.lost)
            self.assertGreater(h1.safe_remaining(), 0)     # a CHECK window
            self.assertEqual(self.c.status("a")["state"], "held")
            self.assertEqual(self.c.status("a")["token"], h1.token)
            with self.assertRaises(lockbroker.Busy):
                self.c.trylock("a")
            with self.assertRaises(lockbroker.Timeout):
                self.c.lock("a", wait=0.05)
        self.assertEqual(self.c.status("a")["state"], "free")
        with self.c.lock("a") as h2:
            self.assertGreater(h2.token, h1.token)
        self.c.ping()
        self.assertGreaterEqual(self.c.stats()["grants"], 2)

    def test_set_of_locks(self):
        h = self.c.lock(["s-c", "s-a", "s-b"], wait=T)
        self.assertEqual(h.names, ["s-c", "s-a", "s-b"])
        self.assertEqual(h.name, "s-c,s-a,s-b")
        self.assertEqual(h.token, h.tokens)
        self.assertEqual(len(h.tokens), 3)
        for n, t in zip(h.names, h.tokens):          # a token per name, in order
            self.assertEqual(self.c.status(n)["token"], t)
        self.assertGreater(h.safe_remaining(), 0)     # every name CHECKed
        with self.assertRaises(lockbroker.Busy):
            self.c.trylock(["s-x", "s-b"])
        self.assertEqual(self.c.status("s-x")["state"], "free")   # all or none
        with self.assertRaises(lockbroker.Timeout):
            self.c.lock(["s-a", "s-y"], wait=0.05)
        self.assertFalse(h.lost)
        # A LOST of any name (as the reader thread passes it on) loses the set.
        h._on_line_lost("s-a", str(h.tokens[1]), "session-expired")
        self.assertTrue(h.lost)
        with self.assertRaises(lockbroker.NotHeld):
            h.release()
        for n in ("s-a", "s-b", "s-c"):
            self.assertEqual(self.c.status(n)["state"], "free")   # the connection closed
        with self.assertRaises(lockbroker.BadName):
            self.c.lock(["s-a", "s-a"])
        with self.assertRaises(lockbroker.BadName):
            self.c.lock(["s-a", "s,b"])
        with self.c.lock(["s-b", "s-a"]) as h:
            h.release()
            self.assertEqual(self.c.status("s-a")["state"], "free")

    def test_modes_conflict_and_bad_names(self):
        with self.c.lock("m", shared=True) as r1, self.c.lock("m", shared=True) as r2:
            self.assertEqual(self.c.status("m")["holders"], 2)
            self.assertEqual([lk["name"] for lk in self.c.locks("m*")], ["m"])
            self.assertEqual([(h["name"], h["mode"], h["state"]) for h in self.c.holders("m*")],
                             [("m", "shared", "held")] * 2)
            with self.assertRaises(lockbroker.Conflict):
                self.c.trylock("m", limit=2)
            self.assertFalse(r1.lost or r2.lost)
        with self.assertRaises(lockbroker.BadName):
            self.c.lock("no spaces")
        with self.assertRaises(lockbroker.BadName):
            self.c.lock("x" * 201)
        with self.assertRaises(ValueError):
            self.c.lock("m", shared=True, limit=2)

    def test_waiter_is_granted_after_the_release(self):
        h = self.c.lock("w")
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("h", self.c.lock("w", wait=T)))
        t.start()
        self.d.wait_log(r"lock w: \S+ queued$")
        h.release()
        t.join(T)
        self.assertGreater(got["h"].token, h.token)
        got["h"].release()

    def test_connection_drop_marks_the_hold_lost(self):
        # A daemon on a fixed port, so that the same client reaches its restart.
        port = zkharness.free_port()
        self.d = Daemon(config="[server]\n", listen="127.0.0.1:%d" % port).start()
        self.addCleanup(self.d.stop)
        self.c = lockbroker.connect(self.d.listen_addr, timeout=T)
        self.addCleanup(self.c.close)
        h = self.c.lock("d")
        seen = threading.Event()
        h.on_lost(lambda hold, reason: seen.set())
        self.d.stop()
        self.assertTrue(h.wait_lost(T))
        self.assertTrue(seen.wait(T))
        self.assertIn("closed", h.lost_reason)
        with self.assertRaises(lockbroker.NotHeld):
            h.release()
        # Nothing survives a reconnect: the same client opens new connections
        # to the restarted daemon; the old hold stays lost.
        self.d = Daemon(config="[server]\n", listen="127.0.0.1:%d" % port).start()
        self.addCleanup(self.d.stop)
        self.assertEqual(self.c.status("d")["state"], "free")
        with self.c.lock("d") as h2:
            self.assertFalse(h2.lost)
        self.assertTrue(h.lost)

    def test_a_hold_broken_mid_work_keeps_the_error_of_its_with_block(self):
        """Lost while the block runs (BREAK from another connection): the
        block's own exception comes out; without one, NotHeld does. An
        explicit release() of a lost hold raises NotHeld, then does nothing
        (Node's release() resolves false instead)."""
        op = self.d.client()
        self.addCleanup(op.close)
        with self.assertRaisesRegex(RuntimeError, "^deploy stopped: broken$"):
            with self.c.lock("br") as h:
                self.assertEqual(op.request("BREAK br"), "OK br")
                self.assertTrue(h.wait_lost(T))
                raise RuntimeError("deploy stopped: %s" % h.lost_reason)
        with self.assertRaisesRegex(lockbroker.NotHeld, "lost: broken"):
            with self.c.lock("br") as h:
                self.assertEqual(op.request("BREAK br"), "OK br")
                self.assertTrue(h.wait_lost(T))
        h = self.c.lock("br")
        self.assertEqual(op.request("BREAK br"), "OK br")
        self.assertTrue(h.wait_lost(T))
        with self.assertRaises(lockbroker.NotHeld):
            h.release()
        self.assertIsNone(h.release())
        self.assertEqual(self.c.status("br")["state"], "free")

    def test_lease_renews_itself_and_is_lost_when_ended_elsewhere(self):
        lease = self.c.lease("l", ttl=0.3)
        self.assertTrue(lease.wait_renewals(4, T), "renewals did not come")
        st = self.c.status("l")
        self.assertEqual((st["state"], st["token"]), ("held", lease.token))
        self.assertFalse(lease.lost)
        # Released through another connection: the next renewal is refused.
        with self.d.client() as other:
            self.assertEqual(other.request("UNLOCK l %d" % lease.token), "OK l")
        self.assertTrue(lease.wait_lost(T))
        self.assertIn("NOT_HELD", lease.lost_reason)
        with self.assertRaises(lockbroker.NotHeld):
            lease.release()

    def test_lease_released_on_exit_and_expires_without_renewal(self):
        with self.c.lease("r", ttl=60) as lease:
            self.assertEqual(self.c.status("r")["state"], "held")
            self.assertLessEqual(self.c.status("r")["lease"], 60)
        self.assertEqual(self.c.status("r")["state"], "free")
        lease = self.c.lease("e", ttl=0.2, renew=False)
        with self.assertRaises(lockbroker.Timeout):
            self.c.lock("e", wait=0)
        h = self.c.lock("e", wait=T)      # granted when the lease expires
        self.assertGreater(h.token, lease.token)
        h.release()
        with self.assertRaises(lockbroker.NotHeld):
            lease.renew()

    def test_asyncio_api(self):
        async def main():
            c = await lockbroker.aio.connect(self.d.listen_addr, timeout=T)
            async with c.lock("as") as h:
                self.assertFalse(h.lost)
                with self.assertRaises(lockbroker.Timeout):
                    await c.lock("as", wait=0.05)
                # A cancelled wait leaves nothing queued on the daemon.
                mark = self.d.log_mark()
                task = asyncio.ensure_future(c.lock("as"))
                await asyncio.to_thread(self.d.wait_log, r"lock as: \S+ queued$", None, mark)
                task.cancel()
                with self.assertRaises(asyncio.CancelledError):
                    await task
                await asyncio.to_thread(self.d.wait_log, r"closed, [0-9]+ holds and waits "
                                        r"released", None, mark)
                self.assertEqual((await c.status("as"))["waiters"], 0)
            self.assertEqual((await c.status("as"))["state"], "free")
            lease = await c.lease("al", ttl=30)
            await lease.release()
            await c.close()
        asyncio.run(main())


class NameRuleTests(unittest.TestCase):
    """One rule for lock names, PROTOCOL.md's (read by lbnames): the daemon
    and the library follow it for every name of lbnames.NAMES, alone and in
    a set."""

    def setUp(self):
        self.rule = lbnames.name_rule()
        self.assertTrue(any(map(self.rule.valid, lbnames.NAMES)))
        self.assertFalse(all(map(self.rule.valid, lbnames.NAMES)))
        self.d = Daemon(config="[server]\n").start()
        self.addCleanup(self.d.stop)

    def test_the_daemon_answers_by_the_rule(self):
        c = self.d.client()
        self.addCleanup(c.close)
        for name in filter(lbnames.wire_word, lbnames.NAMES):
            raw = name.encode("utf-8")
            with self.subTest(name=name, cmd="STATUS"):     # one name
                c.send(b"STATUS " + raw + b"\n")
                reply = c.line_bytes()
                if self.rule.valid(name):
                    self.assertTrue(reply.startswith(b"STATUS " + raw + b" "), reply)
                else:
                    self.assertTrue(reply.startswith(b"ERR BAD_NAME "), reply)
            if "," in name:
                continue                    # TRYLOCK reads a set
            for arg in (raw, raw + b"," + lbnames.PARTNER.encode()):
                with self.subTest(arg=arg, cmd="TRYLOCK"):  # a name or a set
                    c.send(b"TRYLOCK " + arg + b"\n")
                    reply = c.line_bytes()
                    if self.rule.valid(name):
                        self.assertRegex(reply, b"^OK " + re.escape(arg) + rb" [0-9,]+$")
                        c.send(b"UNLOCK " + arg + b"\n")
                        self.assertEqual(c.line_bytes(), b"OK " + arg)
                    else:
                        self.assertTrue(reply.startswith(b"ERR BAD_NAME "), reply)

    def test_the_library_checks_by_the_rule(self):
        c = lockbroker.connect(self.d.listen_addr, timeout=T)
        self.addCleanup(c.close)
        for name in lbnames.NAMES:
            for arg in (name, [name, lbnames.PARTNER]):
                with self.subTest(arg=arg):
                    if self.rule.valid(name):
                        lockbroker.check_name(name)
                        c.trylock(arg).release()
                    else:
                        with self.assertRaises(lockbroker.BadName):
                            lockbroker.check_name(name)
                        with self.assertRaises(lockbroker.BadName):
                            c.trylock(arg)


SRCDIR = os.environ.get("LB_SRCDIR") or os.path.join(HERE, "..", "..")
PKG = os.path.join(SRCDIR, "clients", "python")


class PackagingTests(unittest.TestCase):
    """The README's examples run as written; the package installs into a
    virtualenv without a package index."""

    def test_readme_examples_run_as_written(self):
        with open(os.path.join(PKG, "README.md")) as f:
            blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
        self.assertGreaterEqual(len(blocks), 6)
        d = Daemon(config="[server]\n").start()
        self.addCleanup(d.stop)
        env = dict(os.environ, LOCKBROKER_ADDR=d.listen_addr,
                   PYTHONPATH=PKG + os.pathsep + os.environ.get("PYTHONPATH", ""))
        for code in blocks:
            with self.subTest(code=code.splitlines()[3:4]):
                r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                   text=True, timeout=T)
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertTrue(r.stdout, "the example printed nothing")
                self.assertNotIn("lost", r.stdout.replace("lost: False", ""))

    def test_installs_into_a_virtualenv_without_an_index(self):
        """The README's recipe, as written but for the checkout's path, run
        outside the checkout."""
        with open(os.path.join(PKG, "README.md")) as f:
            m = re.search(r"```sh\n(LOCKBROKER=.*?)```", f.read(), re.S)
        self.assertIsNotNone(m, "no install recipe in the README")
        recipe = m.group(1)
        self.assertIn("/usr/bin/python3 -m venv", recipe)
        probe = subprocess.run(["/usr/bin/python3", "-c", "import venv, setuptools, wheel"],
                               capture_output=True) if os.path.exists("/usr/bin/python3") else None
        if probe is None or probe.returncode != 0:
            self.skipTest("needs /usr/bin/python3 with python3-venv, python3-setuptools and "
                          "python3-wheel")
        tmp = make_tmpdir()
        checkout = os.path.join(tmp, "lockbroker")
        # A copy: the source tree may be read-only (distcheck).
        shutil.copytree(PKG, os.path.join(checkout, "clients", "python"))
        work = os.path.join(tmp, "project")
        os.mkdir(work)
        recipe = re.sub(r"^LOCKBROKER=\S+", lambda _: "LOCKBROKER=" + shlex.quote(checkout),
                        recipe, count=1, flags=re.M)
        r = subprocess.run(["sh", "-ec", recipe], capture_output=True, text=True, cwd=work)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = subprocess.run([os.path.join(work, "venv", "bin", "python"), "-c",
                            "import lockbroker, lockbroker.aio; print(lockbroker.__version__)"],
                           capture_output=True, text=True, cwd=tmp)
        self.assertEqual((r.returncode, r.stdout), (0, "0.1.0\n"), r.stderr)

class JeopardyTests(unittest.TestCase):
    """A daemon that keeps a silent client 1.5 s answers a window of 1350 ms:
    frozen, it cannot say anything, and the hold is lost by the window alone."""

    def test_a_frozen_daemon_makes_the_hold_lost(self):
        d = Daemon(config="[server]\ntcp_user_timeout_ms = 1500\n").start()
        self.addCleanup(d.stop)
        c = lockbroker.connect(d.listen_addr, timeout=T)
        self.addCleanup(c.close)
        h = c.lock("j")
        self.assertLessEqual(h.safe_remaining(), 1.35)
        d.send_signal(signal.SIGSTOP)
        try:
            self.assertTrue(h.wait_lost(T), "the hold outlived its window")
            self.assertIn("jeopardy", h.lost_reason)
        finally:
            d.send_signal(signal.SIGCONT)
        with self.assertRaises(lockbroker.NotHeld):
            h.release()


class AuthTests(unittest.TestCase):

    def test_denied_and_auth_failed(self):
        tmp = os.path.join(make_tmpdir(), "users")
        test_auth.write_users(tmp, test_auth.users_text({"alice": "app-*"}))
        d = Daemon(config="[server]\nusers_file = %s\n" % tmp).start()
        self.addCleanup(d.stop)
        with self.assertRaises(lockbroker.AuthFailed):
            lockbroker.connect(d.listen_addr, user="alice", password="wrong", timeout=T)
        anon = lockbroker.connect(d.listen_addr, timeout=T)
        self.addCleanup(anon.close)
        with self.assertRaises(lockbroker.Denied):
            anon.lock("app-1")
        c = lockbroker.connect(d.listen_addr, user="alice",
                               password=test_auth.PASSWORDS["alice"], timeout=T)
        self.addCleanup(c.close)
        with c.lock("app-1") as h:
            self.assertFalse(h.lost)
        with self.assertRaises(lockbroker.Denied) as e:
            c.lock("other")
        self.assertNotIsInstance(e.exception, lockbroker.AuthFailed)


class DistributedTests(td.DistributedBase):

    def test_outage_makes_holds_lost_and_requests_unavailable(self):
        zk = self.own_server(name="zk-py")
        zk.start()
        a = self.start_daemon(zk.connect_string, "A")
        c = lockbroker.connect(a.listen_addr, timeout=T)
        self.addCleanup(c.close)
        h = c.lock("z")
        self.assertGreater(h.safe_remaining(), 0)
        self.assertLessEqual(h.safe_remaining(), td.SESSION_MS / 1000.0)
        lost = threading.Event()
        h.on_lost(lambda hold, reason: lost.set())
        zk.stop()
        # While the program is busy elsewhere, the hold is marked lost:
        # by the window running out or by LOST zk-disconnected, whichever first.
        self.assertTrue(lost.wait(scaled(30.0)))
        self.assertRegex(h.lost_reason, r"jeopardy|zk-disconnected")
        with self.assertRaises(lockbroker.Unavailable):
            c.trylock("z2")
        with self.assertRaises(lockbroker.Unavailable):
            c.status("z2")
        with self.assertRaises(lockbroker.NotHeld):
            h.release()

    def test_lock_across_daemons(self):
        hosts = self.zk.connect_string
        a = self.start_daemon(hosts, "A")
        b = self.start_daemon(hosts, "B")
        ca = lockbroker.connect(a.listen_addr, timeout=T)
        cb = lockbroker.connect(b.listen_addr, timeout=T)
        self.addCleanup(ca.close)
        self.addCleanup(cb.close)
        with ca.lock("x") as h:
            with self.assertRaises(lockbroker.Busy):
                cb.trylock("x")
            self.assertEqual(cb.status("x")["state"], "held")
        with cb.lock("x", wait=T) as h2:
            self.assertGreater(h2.token, h.token)
        lease = ca.lease("lx", ttl=30)
        self.assertEqual(cb.status("lx")["state"], "held")
        lease.release()
        self.wait_no_nodes(hosts)


if __name__ == "__main__":
    prog = unittest.main(exit=False, verbosity=2)
    r = prog.result
    if r.wasSuccessful() and r.testsRun and len(r.skipped) == r.testsRun:
        sys.exit(77)
    sys.exit(0 if r.wasSuccessful() else 1)
