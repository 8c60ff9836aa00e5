#!/usr/bin/env python3
"""End-to-end tests of the Python client library (clients/python) against
the real daemon: embedded mode, and distributed mode against a real
ZooKeeper (skipped without one); both through the daemon's TLS listener
too, with certificates made at run time (lbpki; skipped without the openssl
command). Waits are for events (a reply, a log line, the library's own
events), each with a timeout; nothing sleeps to synchronise. The one duration asserted is a lower bound: a lock kept for a
minimum hold is not granted to a waiter sooner."""

import asyncio
import os
import re
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.environ.get("LB_SRCDIR") or os.path.join(HERE, "..", ".."),
                                "clients", "python"))
import lockbroker  # noqa: E402
import lockbroker.aio  # noqa: E402
import lbharness  # noqa: E402
from lbharness import Daemon, make_tmpdir, scaled  # noqa: E402
import lbnames  # noqa: E402
from lbpki import Pki, TLS_LISTEN_RE, have_openssl, tls_section  # noqa: E402
import test_auth  # noqa: E402
import test_distributed as td  # noqa: E402
import zkharness  # noqa: E402

T = scaled(10.0)

_PKI = {}


def pki():
    """The run's throw-away certificates (made once): a CA, the daemon's
    certificate (127.0.0.1, localhost), alice's and deploy's client
    certificates (in dir: ca.pem, deploy.pem and deploy.key, as README.md
    names them), and another CA with an alice of its own."""
    if not _PKI:
        tmp = make_tmpdir()
        ca = Pki(os.path.join(tmp, "pki"))
        other = Pki(os.path.join(tmp, "other"), name="other")
        _PKI.update(dir=ca.dir, ca=ca.ca, server=ca.issue("localhost", server=True),
                    alice=ca.issue("alice"), deploy=ca.issue("deploy"),
                    other_ca=other.ca, forged=other.issue("alice"))
    return _PKI


def tls_config(client_certs="optional"):
    p = pki()
    return tls_section(p["server"][0], p["server"][1], p["ca"], client_certs)


def tls_address(d):
    """The address of d's TLS listener, from its log."""
    return d.wait_log(TLS_LISTEN_RE).group(1)


def tls_context(ca=None, cert=None):
    """The README's setup: a context trusting ca (default the run's CA),
    showing cert ((cert file, key file)) if given."""
    ctx = ssl.create_default_context(cafile=ca or pki()["ca"])
    if cert:
        ctx.load_cert_chain(*cert)
    return ctx


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
            st = self.c.status("a")
            self.assertEqual((st["state"], st["held"]), ("held", True))  # both names, as the CLI's
            self.assertEqual(st["token"], h1.token)
            # Busy says who holds it, as a STATUS tells.
            with self.assertRaises(lockbroker.Busy) as busy:
                self.c.trylock("a")
            e = busy.exception
            self.assertEqual((e.holder, e.label, e.status["token"]),
                             (st["holder"], st["label"], h1.token))
            self.assertEqual(str(e), "lock a is held by %s%s" % (
                st["holder"], " label=%s" % st["label"] if st["label"] else ""))
            with self.assertRaises(lockbroker.Busy) as busy:
                self.c.trylock(["a", "a2"])
            self.assertEqual((str(busy.exception), busy.exception.status), ("lock a,a2 is held",
                                                                           None))
            with self.assertRaises(lockbroker.Timeout):
                self.c.lock("a", wait=0.05)
        self.assertEqual((self.c.status("a")["state"], self.c.status("a")["held"]),
                         ("free", False))
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
        # Without a grace (GraceTests has the default's).
        self.c = lockbroker.connect(self.d.listen_addr, timeout=T, grace=None)
        self.addCleanup(self.c.close)
        h = self.c.lock("d")
        self.assertIsNone(h.session)
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

    def test_min_hold_keeps_a_hold_released_early(self):
        """Released before its min_hold has passed, a hold is released with
        keep= for the rest: busy for everybody else meanwhile, shown by
        STATUS with its token and delay=, until the keep ends (here a BREAK
        ends it); the next holder's token is greater."""
        other = lockbroker.connect(self.d.listen_addr, timeout=T)
        self.addCleanup(other.close)
        with self.c.trylock("mh", min_hold=60) as h:
            self.assertEqual(h.min_hold, 60)
            self.assertGreater(h.min_hold_left(), 0)
            self.assertIsNone(h.kept)
        self.assertGreater(h.kept, 0)
        self.assertLessEqual(h.kept, 60)
        with self.assertRaises(lockbroker.Busy) as busy:
            other.trylock("mh")
        self.assertRegex(str(busy.exception), r"^lock mh is held by \S+( label=\S+)?, kept "
                         r"[0-9.]+ s more after its release \(min_hold or a lock-delay\)$")
        with self.assertRaises(lockbroker.Timeout):
            other.lock("mh", wait=0)
        st = self.c.status("mh")
        self.assertEqual((st["state"], st["token"]), ("held", h.token))
        self.assertGreater(st["delay"], 0)
        self.assertLessEqual(st["delay"], 60)
        self.assertIsNone(h.release())          # released already: nothing more to do
        with self.d.client() as op:
            self.assertEqual(op.request("BREAK mh"), "OK mh")
        with other.trylock("mh") as h2:
            self.assertGreater(h2.token, h.token)
        self.assertEqual(h2.kept, 0)            # no min_hold: released at once
        self.assertEqual(self.c.status("mh")["state"], "free")

    def test_a_waiter_is_granted_only_once_the_min_hold_has_passed(self):
        """Queued behind a hold with min_hold=1 that is released at once, a
        LOCK is granted no sooner than the keep after the release, nor than
        min_hold after the take began (lower bounds only)."""
        other = lockbroker.connect(self.d.listen_addr, timeout=T)
        self.addCleanup(other.close)
        before_take = time.monotonic()
        h = self.c.trylock("mw", min_hold=1.0)
        got = {}

        def wait():
            got["h"] = other.lock("mw", wait=T)
            got["at"] = time.monotonic()
        t = threading.Thread(target=wait)
        t.start()
        self.d.wait_log(r"lock mw: \S+ queued$")
        before_release = time.monotonic()
        h.release()
        t.join(T)
        self.assertIn("h", got, "the waiter was not granted")
        self.assertGreaterEqual(got["at"] - before_release, h.kept - 0.001)
        self.assertGreaterEqual(got["at"] - before_take, 1.0 - 0.001)
        self.assertGreater(got["h"].token, h.token)
        got["h"].release()

    def test_release_on_failure_and_keep_release_at_once(self):
        other = lockbroker.connect(self.d.listen_addr, timeout=T)
        self.addCleanup(other.close)
        # A block that fails, with release_on_failure: free at once.
        with self.assertRaisesRegex(RuntimeError, "^the job failed$"):
            with self.c.trylock("mf", min_hold=60, release_on_failure=True) as h:
                raise RuntimeError("the job failed")
        self.assertEqual(h.kept, 0)
        self.assertEqual(self.c.status("mf")["state"], "free")
        other.trylock("mf").release()
        # Without it a failed block keeps the lock all the same...
        with self.assertRaises(RuntimeError):
            with self.c.trylock("mf2", min_hold=60) as h:
                raise RuntimeError("the job failed")
        self.assertGreater(h.kept, 0)
        with self.assertRaises(lockbroker.Busy):
            other.trylock("mf2")
        # ... and sys.exit() or sys.exit(0) is no failure.
        with self.assertRaises(SystemExit):
            with self.c.trylock("mf3", min_hold=60, release_on_failure=True) as h:
                sys.exit(0)
        self.assertGreater(h.kept, 0)
        self.assertGreater(self.c.status("mf3")["delay"], 0)
        # An explicit keep: 0 releases at once, more keeps that long.
        h = self.c.trylock("mf4", min_hold=60)
        h.release(keep=0)
        self.assertEqual(h.kept, 0)
        self.assertEqual(self.c.status("mf4")["state"], "free")
        h = self.c.trylock("mf5")
        h.release(keep=30)
        self.assertEqual(h.kept, 30)
        st = self.c.status("mf5")
        self.assertEqual((st["state"], st["token"]), ("held", h.token))
        self.assertGreater(st["delay"], 0)
        self.assertLessEqual(st["delay"], 30)
        # Out of range: refused here, nothing sent; the hold is still held.
        for bad in (-1, 86401, "60"):
            with self.assertRaises(ValueError):
                self.c.trylock("mf6", min_hold=bad)
        h = self.c.trylock("mf6")
        with self.assertRaises(ValueError):
            h.release(keep=-0.5)
        self.assertEqual(self.c.status("mf6")["token"], h.token)
        h.release()
        self.assertEqual(self.c.status("mf6")["state"], "free")
        # Not for leases: the daemon keeps only a connection's own hold.
        with self.assertRaises(TypeError):
            self.c.lease("mf7", ttl=1, min_hold=1)
        self.assertEqual(self.c.status("mf7")["state"], "free")

    def test_min_hold_of_a_set(self):
        other = lockbroker.connect(self.d.listen_addr, timeout=T)
        self.addCleanup(other.close)
        with self.c.trylock(["ms-b", "ms-a"], min_hold=60) as h:
            pass
        self.assertGreater(h.kept, 0)
        with self.assertRaises(lockbroker.Busy):
            other.trylock(["ms-a", "ms-c"])
        with self.assertRaises(lockbroker.Busy):
            other.trylock("ms-b")
        for name, token in zip(h.names, h.tokens):
            st = self.c.status(name)
            self.assertEqual((st["state"], st["token"]), ("held", token))
            self.assertGreater(st["delay"], 0)
        with self.assertRaises(RuntimeError):
            with self.c.trylock(["ms-x", "ms-y"], min_hold=60, release_on_failure=True):
                raise RuntimeError("failed")
        other.trylock(["ms-y", "ms-x"]).release()

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

    def test_asyncio_min_hold(self):
        async def main():
            c = await lockbroker.aio.connect(self.d.listen_addr, timeout=T)
            async with c.trylock("am", min_hold=60) as h:
                self.assertEqual(h.min_hold, 60)
                self.assertGreater(h.min_hold_left(), 0)
            self.assertGreater(h.kept, 0)
            with self.assertRaises(lockbroker.Busy):
                await c.trylock("am")
            st = await c.status("am")
            self.assertEqual((st["state"], st["token"]), ("held", h.token))
            self.assertGreater(st["delay"], 0)
            with self.assertRaisesRegex(RuntimeError, "^failed$"):
                async with c.lock("af", min_hold=60, release_on_failure=True) as h:
                    raise RuntimeError("failed")
            self.assertEqual(h.kept, 0)
            await (await c.trylock("af")).release()
            h = await c.lock("ak", wait=T, min_hold=60)
            await h.release(keep=0)
            self.assertEqual((await c.status("ak"))["state"], "free")
            await c.close()
        asyncio.run(main())


@lbharness.skip_unless(have_openssl(), "openssl", "the openssl command is not installed")
class TlsTests(unittest.TestCase):
    """The library through the daemon's TLS listener ([tls]): every
    connection it opens (queries, holds, leases) is TLS."""

    def setUp(self):
        self.d = Daemon(config="[server]\n" + tls_config()).start()
        self.addCleanup(self.d.stop)
        self.addr = tls_address(self.d)
        self.c = lockbroker.connect(self.addr, ssl=tls_context(), timeout=T)
        self.addCleanup(self.c.close)

    def test_lock_wait_lost_check_and_lease(self):
        h = self.c.lock("t")
        self.assertIsNotNone(h._conn.tls)
        self.assertGreater(h.safe_remaining(), 0)          # CHECK answered
        self.assertEqual(self.c.status("t")["token"], h.token)
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("h", self.c.lock("t", wait=T)))
        t.start()
        self.d.wait_log(r"lock t: \S+ queued$")
        h.release()
        t.join(T)
        h2 = got["h"]
        self.assertGreater(h2.token, h.token)
        self.assertGreater(h2.safe_remaining(), 0)
        # LOST: broken through the plain port, pushed over TLS.
        with self.d.client() as op:
            self.assertEqual(op.request("BREAK t"), "OK t")
        self.assertTrue(h2.wait_lost(T))
        self.assertEqual(h2.lost_reason, "broken")
        with self.assertRaises(lockbroker.NotHeld):
            h2.release()
        lease = self.c.lease("tl", ttl=0.3)
        self.assertTrue(lease.wait_renewals(2, T), "renewals did not come")
        self.assertEqual(self.c.status("tl")["token"], lease.token)
        lease.release()
        self.assertEqual(self.c.status("tl")["state"], "free")
        self.assertGreaterEqual(self.c.stats()["grants"], 3)     # a multi-line answer

    def test_a_hold_across_a_connection_cut(self):
        """Issue 38: taken back over TLS: a new handshake, checked as the
        first, then RESUME."""
        proxy = ResetProxy(self, self.addr)
        c = lockbroker.connect(proxy.address, ssl=tls_context(), timeout=T, grace=T)
        self.addCleanup(c.close)
        h = c.lock("tc")
        token = h.token
        cut_and_heal(self, proxy, self.c, h, "tc")
        self.assertFalse(h.lost, h.lost_reason)
        self.assertEqual((h.resumes, h.token), (1, token))
        self.assertIsNotNone(h._conn.tls)
        self.assertEqual(self.c.status("tc")["token"], token)
        h.release()
        self.assertEqual(self.c.status("tc")["state"], "free")

    def test_pipelined_burst(self):
        """5000 PINGs in one write: 25000 bytes of PONGs come back in TLS
        records of up to 16384 bytes, with several lines in a record and
        lines cut between records; every one is read whole, in order."""
        conn = self.c._new_conn()
        self.addCleanup(conn.close)
        conn._send(b"PING\n" * 5000)
        replies = [conn.request_more(T) for _ in range(5000)]
        self.assertEqual(replies, ["PONG"] * 5000)
        self.assertEqual(conn.request("PING"), "PONG")

    def test_lines_cut_across_records(self):
        """A broker of our own writes each piece as a TLS record of its own:
        two lines and the start of a third, a middle, the end and END."""
        p = pki()
        srv = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        srv.load_cert_chain(*p["server"])
        ls = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(ls.close)

        def broker():
            conn, _ = ls.accept()
            with srv.wrap_socket(conn, server_side=True) as s:
                s.settimeout(T)
                f = s.makefile("rb")
                for line in f:
                    if line == b"PING\n":
                        s.sendall(b"PONG\n")
                    elif line == b"STATS\n":
                        for piece in (b"STAT a 1\nSTAT b 2\nST", b"AT c", b" 3\nE", b"ND\n"):
                            s.sendall(piece)
        t = threading.Thread(target=broker, daemon=True)
        t.start()
        c = lockbroker.connect("127.0.0.1:%d" % ls.getsockname()[1], ssl=tls_context(),
                               timeout=T)
        self.assertEqual(c.stats(), {"a": 1, "b": 2, "c": 3})
        c.ping()
        c.close()
        t.join(T)

    def test_the_broker_must_show_a_certificate_we_trust(self):
        for kw in ({"ssl": tls_context(ca=pki()["other_ca"])},              # another CA
                   {"ssl": tls_context(), "server_hostname": "locks.example.net"}):
            with self.subTest(kw=kw.get("server_hostname", "other CA")):
                with self.assertRaisesRegex(lockbroker.ConnectionLost,
                                            r"^cannot connect to 127\.0\.0\.1:\d+: TLS: the "
                                            r"broker's certificate did not verify \(.+\): "
                                            r"check the CA and the host name$"):
                    lockbroker.connect(self.addr, timeout=T, **kw)
        # The name to check can be given: the certificate is for localhost too.
        c = lockbroker.connect(self.addr, ssl=tls_context(), server_hostname="localhost",
                               timeout=T)
        c.trylock("sh").release()
        c.close()
        # And plain text to the TLS port is no substitute.
        plain = lockbroker.connect(self.addr, timeout=T)
        self.addCleanup(plain.close)
        with self.assertRaises(lockbroker.ConnectionLost):
            plain.ping()

    def test_asyncio_over_tls(self):
        async def main():
            c = await lockbroker.aio.connect(self.addr, ssl=tls_context(), timeout=T)
            async with c.lock("at") as h:
                self.assertFalse(h.lost)
                self.assertEqual((await c.status("at"))["token"], h.token)
            lease = await c.lease("atl", ttl=30)
            await lease.release()
            self.assertEqual((await c.status("at"))["state"], "free")
            await c.close()
        asyncio.run(main())


@lbharness.skip_unless(have_openssl(), "openssl", "the openssl command is not installed")
class TlsCertificateLoginTests(unittest.TestCase):
    """client_certs = required with a users file: alice's certificate logs
    in as alice (pattern app-*) with no AUTH; the refusals are clear."""

    def setUp(self):
        users = os.path.join(make_tmpdir(), "users")
        with open(users, "w") as f:
            f.write(test_auth.users_text({"alice": "app-*"}))
        os.chmod(users, 0o600)
        self.d = Daemon(config="[server]\nusers_file = %s\n%s"
                        % (users, tls_config("required"))).start()
        self.addCleanup(self.d.stop)
        self.addr = tls_address(self.d)

    def test_certificate_login(self):
        c = lockbroker.connect(self.addr, ssl=tls_context(cert=pki()["alice"]), timeout=T)
        self.addCleanup(c.close)
        with c.lock("app-1") as h:
            self.assertFalse(h.lost)
            self.assertEqual(c.status("app-1")["token"], h.token)
        with self.assertRaisesRegex(lockbroker.Denied,
                                    r"ERR DENIED user alice may not use lock db$"):
            c.lock("db")
        with c.lease("app-l", ttl=30) as lease:             # a connection of its own
            self.assertEqual(c.status("app-l")["token"], lease.token)
        self.d.wait_log(r"logged in by certificate as alice")

    def test_certificates_the_daemon_refuses(self):
        for what, cert in (("no certificate", None),
                           ("another CA's", pki()["forged"])):
            with self.subTest(what):
                with self.assertRaisesRegex(lockbroker.ConnectionLost,
                                            r"^cannot connect to 127\.0\.0\.1:\d+: TLS: the "
                                            r"broker refused the session: .*alert"):
                    lockbroker.connect(self.addr, ssl=tls_context(cert=cert), timeout=T)


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


def daemon_version():
    """What `lockbrokerd --version` says: configure.ac's version."""
    r = subprocess.run([lbharness.daemon_path(), "--version"], capture_output=True, text=True,
                       timeout=scaled(30.0))
    m = re.fullmatch(r"lockbrokerd (\S+)\n", r.stdout)
    if not m:
        raise AssertionError("lockbrokerd --version: %r %r" % (r.stdout, r.stderr))
    return m.group(1)


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
                cwd, run_env = None, env
                if "ca.pem" in code:
                    # The TLS example: run where README.md's files are, as
                    # deploy (CN) with deploy's patterns, against a TLS listener.
                    if not have_openssl():
                        lbharness.skip("openssl", "the openssl command is not installed")
                    users = os.path.join(make_tmpdir(), "users")
                    with open(users, "w") as f:
                        f.write("deploy:%s:deploy-*,release-*\n" % test_auth.HASHES["bob"])
                    os.chmod(users, 0o600)
                    t = Daemon(config="[server]\nusers_file = %s\n%s"
                               % (users, tls_config("required"))).start()
                    self.addCleanup(t.stop)
                    cwd, run_env = pki()["dir"], dict(env, LOCKBROKER_ADDR=tls_address(t))
                r = subprocess.run([sys.executable, "-c", code], env=run_env, capture_output=True,
                                   text=True, timeout=T, cwd=cwd)
                self.assertEqual(r.returncode, 0, r.stderr)
                if cwd:
                    t.wait_log(r"logged in by certificate as deploy")
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
            lbharness.skip("venv", "needs /usr/bin/python3 with python3-venv, python3-setuptools "
                           "and python3-wheel")
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
        self.assertEqual((r.returncode, r.stdout), (0, daemon_version() + "\n"), r.stderr)

    def test_version_is_the_daemons(self):
        # One release: the package says the version lockbrokerd --version
        # (configure.ac's AC_INIT) says, in pyproject.toml and __version__.
        with open(os.path.join(PKG, "pyproject.toml")) as f:
            m = re.search(r'^version = "([^"]+)"$', f.read(), re.M)
        self.assertIsNotNone(m, "no version in pyproject.toml")
        self.assertEqual((m.group(1), lockbroker.__version__),
                         (daemon_version(), daemon_version()))

class JeopardyTests(unittest.TestCase):
    """A daemon that keeps a silent client 1.5 s answers a window of 1350 ms
    (plus the grace, with one): frozen, it cannot say anything, and the hold
    is lost by the window alone."""

    def test_a_frozen_daemon_makes_the_hold_lost(self):
        d = Daemon(config="[server]\ntcp_user_timeout_ms = 1500\n").start()
        self.addCleanup(d.stop)
        # With a grace, the window counts it (a drop may last that long).
        g = lockbroker.connect(d.listen_addr, timeout=T, grace=2)
        self.addCleanup(g.close)
        with g.lock("jg") as h:
            self.assertGreater(h.safe_remaining(), 2)
            self.assertLessEqual(h.safe_remaining(), 1.35 + 2)
        # Without one, the connection's bound alone.
        c = lockbroker.connect(d.listen_addr, timeout=T, grace=None)
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


class FakeBroker:
    """A broker of a few lines, for replies the daemon cannot be made to send
    on demand: answer(line) returns the lines to send back (None: nothing).
    .log is every request as (connection number, line), in order."""

    def __init__(self, test, answer):
        self.answer = answer
        self.log = []
        self._socks = []
        self._lock = threading.Lock()
        self._srv = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self._srv.getsockname()[1]
        test.addCleanup(self.close)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        n = 0
        while True:
            try:
                sock, _ = self._srv.accept()
            except OSError:
                return                  # closed
            n += 1
            with self._lock:
                self._socks.append(sock)
            threading.Thread(target=self._serve, args=(sock, n), daemon=True).start()

    def _serve(self, sock, n):
        try:
            for raw in sock.makefile("rb"):
                line = raw.decode().rstrip("\n")
                with self._lock:
                    self.log.append((n, line))
                    replies = self.answer(line) or ()
                for reply in replies:
                    sock.sendall((reply + "\n").encode())
        except OSError:
            pass

    def requests(self, word):
        """The lines of the log that start with word."""
        return [line for _, line in self.log if line.split(" ")[0] == word]

    def close(self):
        try:
            self._srv.shutdown(socket.SHUT_RDWR)    # wakes the accept()
        except OSError:
            pass
        self._srv.close()
        with self._lock:
            for sock in self._socks:
                sock.close()


def windows_broker(test, name, windows):
    """A FakeBroker that grants every LOCK or TRYLOCK of name (tokens 1, 2,
    ...) and answers the first CHECK of grant i with windows[i - 1] ms (the
    last one for every later grant), and every UNLOCK OK."""
    grants = []

    def answer(line):
        w = line.split(" ")
        if w[0] in ("LOCK", "TRYLOCK") and w[1] == name:
            grants.append(len(grants) + 1)
            return ["OK %s %d" % (name, grants[-1])]
        if w[0] == "CHECK" and w[1] == name:
            token = int(w[2])
            return ["OK %s %d %d" % (name, token, windows[min(token, len(windows)) - 1])]
        if w[0] == "UNLOCK" and w[1:] == [name]:
            return ["OK %s" % name]
        return ["ERR BAD_COMMAND not in this fake"]
    return FakeBroker(test, answer)


class NoWindowTests(unittest.TestCase):
    """Issue 36: a daemon just back from a ZooKeeper outage granted with a
    first CHECK window of 0 (and took the grant back a second later). Such
    a grant is released and asked for again while the wait lasts; a hold the
    library returns had a window."""

    def test_a_grant_without_a_window_is_asked_for_again(self):
        for wait in (25, None):
            with self.subTest(wait=wait):
                fake = windows_broker(self, "nw", [0, 0, 60000])
                c = lockbroker.connect(fake.address, timeout=T)
                self.addCleanup(c.close)
                h = c.lock("nw", wait=wait)
                self.assertIsNone(h.session)            # GRACE: ERR BAD_COMMAND, as before
                self.assertEqual(h.token, 3)
                self.assertFalse(h.lost)
                self.assertGreater(h.safe_remaining(), 0)
                locks = fake.requests("LOCK")
                self.assertEqual(len(locks), 3, fake.log)
                if wait:
                    self.assertEqual(locks[0], "LOCK nw 25000")
                    lefts = [int(x.split(" ")[2]) for x in locks]
                    self.assertTrue(25000 > lefts[1] > lefts[2] > 0, locks)
                else:
                    self.assertEqual(locks, ["LOCK nw"] * 3)
                self.assertEqual(fake.requests("UNLOCK"), ["UNLOCK nw"] * 2)   # no keep=
                h.release()
                self.assertEqual(fake.requests("UNLOCK"), ["UNLOCK nw"] * 3)

    def test_no_window_until_the_wait_ends_is_a_timeout(self):
        fake = windows_broker(self, "nw", [0])
        c = lockbroker.connect(fake.address, timeout=T)
        self.addCleanup(c.close)
        with self.assertRaisesRegex(lockbroker.Timeout, r"^lock nw not granted with time to use "
                                    r"it within 0.6 s: granted [0-9]+ times, but the broker "
                                    r"promised no time for it \(CHECK answered 0\)$"):
            c.lock("nw", wait=0.6)
        self.assertGreaterEqual(len(fake.requests("LOCK")), 2, fake.log)
        self.assertEqual(len(fake.requests("UNLOCK")), len(fake.requests("LOCK")), fake.log)
        # No time to wait: one grant, given back.
        for take, error in ((lambda: c.lock("nw", wait=0), lockbroker.Timeout),
                            (lambda: c.trylock("nw"), lockbroker.Busy)):
            with self.subTest(error=error):
                before = len(fake.log)
                with self.assertRaisesRegex(error, r"granted 1 time, but the broker promised "
                                            r"no time for it"):
                    take()
                self.assertEqual([line.split(" ")[0] for _, line in fake.log[before:]],
                                 ["LOCK" if error is lockbroker.Timeout else "TRYLOCK",
                                  "CHECK", "UNLOCK"])

    def test_asyncio_lock_asks_again_too(self):
        fake = windows_broker(self, "nw", [0, 60000])

        async def main():
            c = await lockbroker.aio.connect(fake.address, timeout=T)
            try:
                async with c.lock("nw", wait=25) as h:
                    return h.token, h.lost
            finally:
                await c.close()
        self.assertEqual(asyncio.run(main()), (2, False))
        self.assertEqual(fake.requests("UNLOCK"), ["UNLOCK nw"] * 2)


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
        # Taken back after a cut: logged in again as alice, labelled again.
        proxy = ResetProxy(self, d.listen_addr)
        pc = lockbroker.connect(proxy.address, user="alice", label="nightly",
                                password=test_auth.PASSWORDS["alice"], timeout=T, grace=T)
        self.addCleanup(pc.close)
        h = pc.lock("app-cut")
        cut_and_heal(self, proxy, c, h, "app-cut")
        self.assertFalse(h.lost, h.lost_reason)
        st = c.status("app-cut")
        self.assertEqual((h.resumes, st["token"], st["label"]), (1, h.token, "nightly"))
        h.release()


class ResetProxy:
    """A TCP proxy in front of the daemon whose connections the test resets,
    as a NAT, a load balancer or a restarted proxy does: down() resets
    every connection through it (RST, SO_LINGER 0) and resets every new
    one at once until up(); .refused counts those (a client trying to
    reconnect)."""

    def __init__(self, test, upstream):
        host, port, _ = lbharness.parse_hostport(upstream)
        self._upstream = (host, port)
        self._cond = threading.Condition()
        self._socks = []
        self._held = []                 # client sockets black-holed (blackhole())
        self._down = False
        self._hole = False
        self.refused = 0
        self._srv = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self._srv.getsockname()[1]
        test.addCleanup(self.close)
        threading.Thread(target=self._accept, daemon=True).start()

    @staticmethod
    def _reset(sock):
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            sock.shutdown(socket.SHUT_RD)       # wakes a pump blocked in recv(); no FIN
        except OSError:
            pass
        sock.close()

    def _accept(self):
        while True:
            try:
                sock, _ = self._srv.accept()
            except OSError:
                return                  # closed
            with self._cond:
                if self._down:
                    self.refused += 1
                    self._cond.notify_all()
                    self._reset(sock)
                    continue
            try:
                up = socket.create_connection(self._upstream)
            except OSError:
                self._reset(sock)
                continue
            with self._cond:
                self._socks += [sock, up]
            for a, b in ((sock, up), (up, sock)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    if not (self._down or self._hole):   # else down() resets dst
                        dst.shutdown(socket.SHUT_WR)
                    return
                dst.sendall(data)
        except OSError:
            pass

    def down(self):
        with self._cond:
            self._down = True
            socks, self._socks = self._socks, []
        for sock in socks:
            self._reset(sock)

    def blackhole(self):
        """Resets the daemon's side of every connection through the proxy
        (it sees them end at once) and leaves the client's side open,
        silent, taking what it sends nowhere: a NAT that dropped its state,
        as the client sees it until it gets a reset. up() resets them."""
        with self._cond:
            self._hole = True
            socks, self._socks = self._socks, []
        for i in range(0, len(socks), 2):
            self._held.append(socks[i])
            self._reset(socks[i + 1])

    def up(self):
        with self._cond:
            self._down = False
            self._hole = False
            held, self._held = self._held, []
        for sock in held:
            self._reset(sock)

    def wait_refused(self, n, timeout=T):
        """Waits until n connections were refused (the client reconnects)."""
        with self._cond:
            if not self._cond.wait_for(lambda: self.refused >= n, timeout):
                raise AssertionError("no reconnect: %d of %d refused" % (self.refused, n))

    def close(self):
        try:
            self._srv.shutdown(socket.SHUT_RDWR)    # wakes the accept()
        except OSError:
            pass
        self._srv.close()
        self.down()
        self.up()


def cut_and_heal(test, proxy, other, hold, name):
    """Resets hold's connection through proxy and keeps it down until the
    client has tried to reconnect twice; meanwhile the name is nobody
    else's (other's TRYLOCK: BUSY). Then heals, and waits for the hold to
    be taken back."""
    resumes = hold.resumes
    proxy.down()
    proxy.wait_refused(proxy.refused + 2)
    with test.assertRaises(lockbroker.Busy):
        other.trylock(name)
    test.assertFalse(hold.lost, hold.lost_reason)
    proxy.up()
    wait_until("taken back", lambda: hold.resumes > resumes or hold.lost)


def wait_until(what, fn, timeout=T):
    """Polls fn() until it is true (there is no event for it), at most timeout."""
    deadline = time.monotonic() + timeout
    while not fn():
        if time.monotonic() > deadline:
            raise AssertionError("not within %.1f s: %s" % (timeout, what))
        time.sleep(0.01)


class GraceTests(unittest.TestCase):
    """Issue 38: a hold outlives a cut connection for the client's grace
    (GRACE, then RESUME on a new connection), through a proxy the test
    resets; a cut longer than the grace loses it; a daemon restart (no
    handover: its sessions end) loses it at once on the RESUME."""

    def setUp(self):
        self.d = Daemon(config="[server]\n").start()
        self.addCleanup(self.d.stop)
        self.other = lockbroker.connect(self.d.listen_addr, timeout=T, grace=None)
        self.addCleanup(self.other.close)
        self.proxy = ResetProxy(self, self.d.listen_addr)

    def cut_and_heal(self, hold, name):
        cut_and_heal(self, self.proxy, self.other, hold, name)

    def test_a_hold_survives_a_connection_cut(self):
        c = lockbroker.connect(self.proxy.address, timeout=T, grace=T)
        self.addCleanup(c.close)
        self.assertEqual(c.grace, T)
        h = c.lock(["g-a", "g-b"])
        self.assertRegex(h.session, r"^[0-9a-f]{16}$")
        token = h.token
        got = {}

        def waiter():                   # a wait in flight at the cut fails: ask again
            try:
                c.lock("g-a", wait=T)
            except lockbroker.Error as e:
                got["e"] = e
        t = threading.Thread(target=waiter)
        t.start()
        self.d.wait_log(r"lock g-a: \S+ queued$")
        self.cut_and_heal(h, "g-b")
        t.join(T)
        self.assertIsInstance(got.get("e"), lockbroker.ConnectionLost)
        self.assertFalse(h.lost, h.lost_reason)
        self.assertEqual((h.resumes, h.token), (1, token))
        self.assertEqual([self.other.status(n)["token"] for n in h.names], token)
        self.assertGreater(h.safe_remaining(), 0)          # CHECKed again
        # The monitor CHECKs on the new connection: a BREAK there is seen.
        with self.d.client() as op:
            self.assertEqual(op.request("BREAK g-b"), "OK g-b")
        self.assertTrue(h.wait_lost(T))
        self.assertEqual(h.lost_reason, "broken")
        with self.assertRaises(lockbroker.NotHeld):
            h.release()

    def test_taken_back_then_released(self):
        c = lockbroker.connect(self.proxy.address, timeout=T, grace=T, check=False)
        self.addCleanup(c.close)
        with c.lock("g-r") as h:
            self.cut_and_heal(h, "g-r")
            self.assertFalse(h.lost, h.lost_reason)
            self.assertEqual(self.other.status("g-r")["token"], h.token)
        self.assertEqual(self.other.status("g-r")["state"], "free")

    def test_a_cut_longer_than_the_grace_loses_the_hold(self):
        c = lockbroker.connect(self.proxy.address, timeout=T, grace=0.3)
        self.addCleanup(c.close)
        h = c.lock("g-l")
        self.proxy.down()
        self.assertTrue(h.wait_lost(T))
        self.assertRegex(h.lost_reason, r"not taken back within the grace of 0.3 s")
        self.assertGreaterEqual(self.proxy.refused, 1)
        # The daemon abandons it once its grace has run: free for the next one.
        wait_until("g-l freed", lambda: self.other.status("g-l")["state"] == "free")
        self.proxy.up()
        with self.assertRaises(lockbroker.NotHeld):
            h.release()

    def test_a_daemon_restart_loses_the_hold_on_the_resume(self):
        port = zkharness.free_port()
        d = Daemon(config="[server]\n", listen="127.0.0.1:%d" % port).start()
        self.addCleanup(d.stop)
        c = lockbroker.connect(d.listen_addr, timeout=T, grace=T)
        self.addCleanup(c.close)
        h = c.lock("g-d")
        d.stop()                        # no handover: its sessions end with it
        d = Daemon(config="[server]\n", listen="127.0.0.1:%d" % port).start()
        self.addCleanup(d.stop)
        self.assertTrue(h.wait_lost(T))
        self.assertRegex(h.lost_reason, r"was not taken back: ERR NOT_HELD")
        self.assertEqual(c.status("g-d")["state"], "free")
        with self.assertRaises(lockbroker.NotHeld):
            h.release()

    def test_asyncio_hold_survives_a_connection_cut(self):
        async def main():
            c = await lockbroker.aio.connect(self.proxy.address, timeout=T, grace=T)
            try:
                async with c.lock("g-as") as h:
                    token = h.token
                    await asyncio.to_thread(self.cut_and_heal, h, "g-as")
                    self.assertFalse(h.lost, h.lost_reason)
                    self.assertEqual((h.resumes, h.token), (1, token))
                    self.assertEqual((await c.status("g-as"))["token"], token)
                self.assertEqual((await c.status("g-as"))["state"], "free")
            finally:
                await c.close()
            c = await lockbroker.aio.connect(self.proxy.address, timeout=T, grace=0.3)
            try:
                h = await c.lock("g-as2")
                self.proxy.down()
                self.assertTrue(await h.wait_lost(T))    # the proxy stays down past the grace
                self.assertRegex(h.lost_reason, r"not taken back within the grace")
                with self.assertRaises(lockbroker.NotHeld):
                    await h.release()
            finally:
                self.proxy.up()
                await c.close()
        asyncio.run(main())

    def test_a_tls_hold_survives_a_handover(self):
        if not have_openssl():
            lbharness.skip("openssl", "the openssl command is not installed")
        d = Daemon(config="[server]\n" + tls_config()).start()
        self.addCleanup(d.stop)
        c = lockbroker.connect(tls_address(d), ssl=tls_context(), timeout=T, grace=T)
        self.addCleanup(c.close)
        h = c.lock("g-tls")
        token = h.token
        mark = d.log_mark()
        d.send_signal(signal.SIGUSR2)
        d.wait_log(r"handover: took over", since=mark)
        d.wait_log(Daemon.READY_RE, since=mark)
        wait_until("taken back", lambda: h.resumes >= 1 or h.lost)
        self.assertFalse(h.lost, h.lost_reason)
        self.assertEqual(h.token, token)
        self.assertEqual(c.status("g-tls")["token"], token)
        h.release()
        self.assertEqual(c.status("g-tls")["state"], "free")


class DropDeadlineTests(unittest.TestCase):
    """After a drop the hold is certain only until D, the send of the last
    request answered on the lost connection + the grace - a tenth
    (PROTOCOL.md, What a client may assume after a drop): the daemon's
    grace counts from when it saw the end, which a reset that reached only
    the daemon makes earlier than the client's noticing."""

    SID, SECRET = "0123456789abcdef", "0123456789abcdef" * 2

    def session_broker(self, name, lock_wait=0.0):
        """A FakeBroker with sessions: GRACE opens one, every CHECK of name
        answers a 60 s window (a once-a-second schedule without the grace),
        and RESUME always answers OK, as no daemon would after its grace:
        only the library's own deadline can stop it. LOCK is granted after
        lock_wait seconds (a daemon's queue)."""
        def answer(line):
            w = line.split(" ")
            if w[0] == "GRACE":
                return ["OK %s %s" % (self.SID, self.SECRET)]
            if w[0] == "RESUME":
                return ["OK %s 1" % self.SID]
            if w[0] == "LOCK" and w[1] == name:
                time.sleep(lock_wait)   # the queue of this fake daemon
                return ["OK %s 1" % name]
            if w[0] == "CHECK" and w[1] == name:
                return ["OK %s 1 60000" % name]
            if w[0] in ("UNLOCK", "QUIT"):
                return ["OK %s" % name if w[0] == "UNLOCK" else "BYE"]
            return ["ERR BAD_COMMAND not in this fake"]
        return FakeBroker(self, answer)

    def test_with_a_session_checks_come_every_quarter_of_the_grace(self):
        fake = self.session_broker("dq")
        c = lockbroker.connect(fake.address, timeout=T, grace=0.8)
        self.addCleanup(c.close)
        h = c.lock("dq")
        self.assertEqual(h.session, self.SID)
        # 1.6 s held: every 0.2 s makes about 9 CHECKs; the window's own
        # schedule (once a second) makes 3 at most.
        self.assertFalse(h.wait_lost(1.6), h.lost_reason)
        self.assertGreaterEqual(len(fake.requests("CHECK")), 5, fake.log)
        h.release()

    def test_a_grant_after_a_wait_longer_than_the_grace_is_held(self):
        """D counts from the LOCK's send until a CHECK is answered; the
        first CHECK after a long wait is not cut short by that."""
        fake = self.session_broker("dw", lock_wait=0.5)
        c = lockbroker.connect(fake.address, timeout=T, grace=0.3)
        self.addCleanup(c.close)
        h = c.lock("dw", wait=T)
        self.assertFalse(h.lost, h.lost_reason)
        self.assertGreater(h.safe_remaining(), 0)
        h.release()

    def test_a_drop_noticed_after_d_is_lost_at_once(self):
        """check=False: D counts from the last request answered (the LOCK
        here); the fake resets the connection only once D has passed, and
        the library, which would have been given the hold back by this
        RESUME, sends none."""
        fake = self.session_broker("dn")
        c = lockbroker.connect(fake.address, timeout=T, grace=0.3, check=False)
        self.addCleanup(c.close)
        sent = time.monotonic()             # before the LOCK: D is sooner than sent + 0.3
        h = c.lock("dn")
        self.assertEqual(h.session, self.SID)
        wait_until("the grace over", lambda: time.monotonic() > sent + 0.3)
        with fake._lock:
            socks = list(fake._socks)
        for sock in socks:                  # the drop, noticed now
            ResetProxy._reset(sock)
        self.assertTrue(h.wait_lost(T))
        self.assertRegex(h.lost_reason, r"not taken back within the grace of 0.3 s: noticed "
                         r"too late")
        self.assertEqual(fake.requests("RESUME"), [], fake.log)
        self.assertEqual(h.safe_remaining(), 0.0)
        with self.assertRaises(lockbroker.NotHeld):
            h.release()

    def test_a_reset_only_the_daemon_saw_loses_the_hold_by_d(self):
        """The daemon's side of the connection is reset (its grace starts),
        the client's side goes silent: no drop to notice, and no answer to
        its CHECKs. The hold is lost (by D) before the daemon grants the
        name to the waiter, and before the proxy lets anything through."""
        d = Daemon(config="[server]\n").start()
        self.addCleanup(d.stop)
        proxy = ResetProxy(self, d.listen_addr)
        c = lockbroker.connect(proxy.address, timeout=T, grace=2)
        self.addCleanup(c.close)
        other = lockbroker.connect(d.listen_addr, timeout=T, grace=None)
        self.addCleanup(other.close)
        h = c.lock("db")
        order = []
        h.on_lost(lambda hold, reason: order.append("lost"))
        got = {}

        def waiter():
            got["h"] = other.lock("db", wait=T)
            order.append("granted")
        mark = d.log_mark()
        proxy.blackhole()
        d.wait_log(r"ended without QUIT: 1 holds? detached", since=mark)
        t = threading.Thread(target=waiter)
        t.start()
        self.assertTrue(h.wait_lost(T))
        self.assertLessEqual(h.safe_remaining(), 0.0)
        t.join(T)
        self.assertEqual(order, ["lost", "granted"])
        self.assertRegex(h.lost_reason, r"no answer from the broker within the grace of 2 s")
        proxy.up()                          # the client sees its reset only now
        with self.assertRaises(lockbroker.NotHeld):
            h.release()
        self.assertGreater(got["h"].token, h.token)
        got["h"].release()


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

    def test_min_hold_across_daemons(self):
        """A hold of daemon A with min_hold, released early: busy through
        daemon B until the keep ends (here by a BREAK on A)."""
        hosts = self.zk.connect_string
        a = self.start_daemon(hosts, "A")
        b = self.start_daemon(hosts, "B")
        ca = lockbroker.connect(a.listen_addr, timeout=T)
        cb = lockbroker.connect(b.listen_addr, timeout=T)
        self.addCleanup(ca.close)
        self.addCleanup(cb.close)
        with ca.trylock("once", min_hold=60) as h:
            pass
        self.assertGreater(h.kept, 0)
        with self.assertRaises(lockbroker.Busy):
            cb.trylock("once")
        self.assertEqual(cb.status("once")["state"], "held")
        with a.client() as op:
            self.assertEqual(op.request("BREAK once"), "OK once")
        with cb.lock("once", wait=T) as h2:
            self.assertGreater(h2.token, h.token)
        self.wait_no_nodes(hosts)

    def test_a_hold_across_a_connection_cut(self):
        """Issue 38, distributed: the hold's node stays meanwhile (daemon B
        says BUSY), and the client takes it back through the same daemon."""
        hosts = self.zk.connect_string
        a = self.start_daemon(hosts, "A")
        b = self.start_daemon(hosts, "B")
        proxy = ResetProxy(self, a.listen_addr)
        ca = lockbroker.connect(proxy.address, timeout=T, grace=T)
        cb = lockbroker.connect(b.listen_addr, timeout=T, grace=None)
        self.addCleanup(ca.close)
        self.addCleanup(cb.close)
        h = ca.lock("zc")
        cut_and_heal(self, proxy, cb, h, "zc")
        self.assertFalse(h.lost, h.lost_reason)
        self.assertEqual((h.resumes, cb.status("zc")["token"]), (1, h.token))
        self.assertGreater(h.safe_remaining(), 0)
        h.release()
        with cb.lock("zc", wait=T) as h2:
            self.assertGreater(h2.token, h.token)
        self.wait_no_nodes(hosts)

    def test_tls_across_daemons(self):
        """A TLS client of daemon A and a plain one of daemon B share the locks."""
        if not have_openssl():
            lbharness.skip("openssl", "the openssl command is not installed")
        hosts = self.zk.connect_string
        a = self.start_daemon(hosts, "A", extra=tls_config())
        b = self.start_daemon(hosts, "B")
        ca = lockbroker.connect(tls_address(a), ssl=tls_context(), timeout=T)
        cb = lockbroker.connect(b.listen_addr, timeout=T)
        self.addCleanup(ca.close)
        self.addCleanup(cb.close)
        with ca.lock("tx") as h:
            self.assertGreater(h.safe_remaining(), 0)
            with self.assertRaises(lockbroker.Busy):
                cb.trylock("tx")
            got = {}
            t = threading.Thread(target=lambda: got.setdefault("h", cb.lock("tx", wait=T)))
            t.start()
            self.assertEqual(ca.status("tx")["token"], h.token)
            b.wait_log(r"lock tx: \S+ queued")
        t.join(T)
        self.assertGreater(got["h"].token, h.token)
        got["h"].release()
        lease = ca.lease("tlx", ttl=30)
        self.assertEqual(cb.status("tlx")["state"], "held")
        lease.release()
        self.wait_no_nodes(hosts)


if __name__ == "__main__":
    prog = unittest.main(exit=False, verbosity=2)
    r = prog.result
    if r.wasSuccessful() and r.testsRun and len(r.skipped) == r.testsRun:
        sys.exit(77)
    sys.exit(0 if r.wasSuccessful() else 1)
