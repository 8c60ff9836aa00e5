#!/usr/bin/env python3
"""End-to-end tests of the TLS listener ([tls] in lockbrokerd.conf(5)).

Each run makes its own throw-away CAs and certificates with the openssl
command (nothing secret is committed): the protocol inside TLS (locks,
waits, LOST, CHECK, leases), certificate logins with the users file's
patterns, the refusals (a client CA the daemon does not trust, an expired
client certificate, no certificate when one is required, plain text to the
TLS port, TLS to the plain port, a stalled handshake, a revoked client
certificate), certificate and CRL rotation with SIGHUP, and lockbrokerd
-t's checks of the files.

Every daemon listens on loopback only; the non-loopback rules are checked
with -t, which binds nothing. No test sleeps to synchronise or asserts how
long anything took: each waits for a reply, a log line or end of file.
"""

import os
import select
import shutil
import signal
import socket
import ssl
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lbharness  # noqa: E402
from lbharness import (Client, Daemon, check_failure_exit, make_tmpdir,  # noqa: E402
                       parse_hostport, run_daemon, scaled)
from lbpki import Pki, have_openssl  # noqa: E402

# `openssl passwd -6 -salt lbtesthunter2 hunter2` (test_auth.py's alice)
ALICE_HASH = ("$6$lbtesthunter2$ms9bf49IIzrJYI8.ns.owCRM0MxFMINUOmhBJxmHyyFpPn3L88VTo."
              "ldPhMEMF/ZksVMlp/L/a8MQS5czeLx5/")
ERR_NOAUTH = ("ERR NOAUTH log in first with AUTH <user> <password> "
              "(only PING, HELP and QUIT work before)")
TOKEN = r"(\d+)"
HANDSHAKE_WAIT = scaled(10.0) + scaled(20.0)      # the daemon's 10 s, and room
ERR_TOO_MANY = "ERR LIMIT too many clients; try again later"
ERR_PER_ADDRESS = ("ERR LIMIT too many connections from this address (at most %d); "
                   "try again later")


class TlsClient(Client):
    """lbharness.Client over TLS: what OpenSSL has decrypted but not handed
    out is read before waiting on the socket."""

    def _fill(self, deadline):
        if self.sock.pending():
            self.buf += self.sock.recv(65536)
            return True
        return super()._fill(deadline)


@lbharness.skip_unless(have_openssl(), "openssl", "the openssl command is not installed")
class TlsCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = make_tmpdir()
        cls.pki = Pki(os.path.join(cls.tmp, "pki"))
        cls.server_cert, cls.server_key = cls.pki.issue("localhost", server=True)
        cls.alice = cls.pki.issue("alice")
        cls.stranger = cls.pki.issue("stranger")
        cls.expired = cls.pki.issue("alice", expired=True, file="alice-expired")
        cls.other_ca = Pki(os.path.join(cls.tmp, "other"), name="other")
        cls.forged = cls.other_ca.issue("alice")
        cls.users = os.path.join(cls.tmp, "users")
        with open(cls.users, "w") as f:
            f.write("alice:%s:job-*\n" % ALICE_HASH)
        os.chmod(cls.users, 0o600)

    def tls_conf(self, client_certs="optional", users=True, cert=None, key=None, extra=""):
        return ("[server]\n%s[tls]\nlisten = 127.0.0.1:0\ncert_file = %s\nkey_file = %s\n"
                "ca_file = %s\nclient_certs = %s\n%s"
                % ("users_file = %s\n" % self.users if users else "", cert or self.server_cert,
                   key or self.server_key, self.pki.ca, client_certs, extra))

    def start(self, **kw):
        d = Daemon(config=self.tls_conf(**kw)).start()
        self.addCleanup(d.stop)
        m = d.wait_log(r"TLS on (\S+), client certificates (\w+)")
        d.tls_host, d.tls_port, _ = parse_hostport(m.group(1))
        return d

    def context(self, cert=None, ca=None):
        ctx = ssl.create_default_context(cafile=ca or self.pki.ca)
        if cert:
            ctx.load_cert_chain(*cert)
        return ctx

    def connect(self, d, cert=None, ca=None, source="127.0.0.1"):
        """A TLS client of d, handshake done; cert: (cert, key) to show;
        source: the loopback address it connects from."""
        raw = socket.create_connection((d.tls_host, d.tls_port), timeout=scaled(20.0),
                                       source_address=(source, 0))
        s = self.context(cert, ca).wrap_socket(raw, server_hostname="127.0.0.1")
        c = TlsClient(s)
        c.daemon = d
        self.addCleanup(c.close)
        return c

    def refused(self, d, cert=None, ca=None):
        """The handshake fails (on our side, or the first read finds the end)."""
        try:
            c = self.connect(d, cert, ca)
            c.sock.settimeout(scaled(20.0))
            return c.sock.recv(1) == b""
        except (ssl.SSLError, ConnectionError, OSError):
            return True


class ProtocolOverTls(TlsCase):
    def test_locks_waits_lost_check_and_leases(self):
        d = self.start(users=False, client_certs="none")
        a, b = self.connect(d), self.connect(d)
        ta = int(a.request("LOCK db").split()[2])
        b.send("LOCK db\n")
        d.wait_queued(b, "db")
        self.assertRegex(a.request("CHECK db"), r"^OK db %d \d+$" % ta)
        self.assertEqual(a.request("UNLOCK db"), "OK db")
        tb = int(b.expect_match(r"^OK db %s$" % TOKEN).group(1))
        self.assertGreater(tb, ta)
        self.assertEqual(a.request("BREAK db"), "OK db")
        b.expect("LOST db %d broken" % tb)
        tl = int(a.request("LOCK job ttl=60000").split()[2])
        self.assertEqual(b.request("UNLOCK job %d" % tl), "OK job")
        # Many replies at once come back whole.
        a.send("PING\n" * 500)
        a.expect(*["PONG"] * 500)
        self.assertEqual(a.request("QUIT"), "BYE")
        a.expect_eof()

    def test_plain_port_still_served(self):
        d = self.start(users=False, client_certs="none")
        with d.client() as c:
            self.assertEqual(c.request("PING"), "PONG")


class CertificateLogins(TlsCase):
    def test_certificate_names_a_user(self):
        d = self.start()
        c = self.connect(d, cert=self.alice)
        self.assertRegex(c.request("LOCK job-1"), r"^OK job-1 \d+$")
        self.assertEqual(c.request("LOCK db"), "ERR DENIED user alice may not use lock db")
        d.wait_log(r"logged in by certificate as alice")

    def test_certificate_naming_no_user_gets_the_anonymous_rules(self):
        d = self.start()
        mark = d.log_mark()
        c = self.connect(d, cert=self.stranger)
        # The client is told ERR NOAUTH below; the log says which CN is no user.
        d.wait_log(r"conn \d+ \(127\.0\.0\.1:\d+\): the client certificate's CN 'stranger' "
                   r"is not a user of users_file; served as not logged in \(AUTH needed\): "
                   r"subject /CN=stranger, notAfter ", since=mark)
        self.assertEqual(c.request("LOCK job-1"), ERR_NOAUTH)
        self.assertEqual(c.request("AUTH alice hunter2"), "OK alice")
        self.assertRegex(c.request("LOCK job-1"), r"^OK job-1 \d+$")
        # Without a certificate (optional): the same.
        n = self.connect(d)
        self.assertEqual(n.request("STATS"), ERR_NOAUTH)

    def test_refusals(self):
        d = self.start(client_certs="required")
        mark = d.log_mark()
        self.assertTrue(self.refused(d))                          # no certificate
        d.wait_log(r"TLS handshake failed: .*certificate", since=mark)
        mark = d.log_mark()
        self.assertTrue(self.refused(d, cert=self.forged))        # another CA
        d.wait_log(r"TLS handshake failed: .*certificate verify failed \(the client's "
                   r"certificate: unable to get local issuer certificate; subject /CN=alice, "
                   r"notAfter \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\); closing", since=mark)
        mark = d.log_mark()
        self.assertTrue(self.refused(d, cert=self.expired))       # expired
        # Why, and which certificate: its subject and when it ended.
        d.wait_log(r"conn \d+ \(127\.0\.0\.1:\d+\): TLS handshake failed: .*\(the client's "
                   r"certificate: certificate has expired; subject /CN=alice, notAfter "
                   r"2020-01-02T00:00:00Z\); closing", since=mark)
        # A client that does not trust the server's CA gives up itself.
        self.assertTrue(self.refused(d, cert=self.alice, ca=self.other_ca.ca))
        # And the right one is served.
        c = self.connect(d, cert=self.alice)
        self.assertEqual(c.request("PING"), "PONG")


class WrongSpeakers(TlsCase):
    def test_plain_text_to_the_tls_port_is_closed(self):
        d = self.start(users=False, client_certs="none")
        mark = d.log_mark()
        c = Client.tcp(d.tls_host, d.tls_port)
        self.addCleanup(c.close)
        c.send("PING\n")
        c.expect_eof(allow_reset=True)
        d.wait_log(r"TLS handshake failed: plain text on the TLS port \(a client without "
                   r"TLS\?\); closing", since=mark)
        # An HTTP request (a browser, curl http://) is plain text too.
        mark = d.log_mark()
        h = Client.tcp(d.tls_host, d.tls_port)
        self.addCleanup(h.close)
        h.send("GET / HTTP/1.0\r\n\r\n")
        h.expect_eof(allow_reset=True)
        d.wait_log(r"TLS handshake failed: plain text on the TLS port", since=mark)
        self.assertEqual(self.connect(d).request("PING"), "PONG")

    def test_tls_to_the_plain_port_is_closed(self):
        d = self.start(users=False, client_certs="none")
        mark = d.log_mark()
        raw = socket.create_connection((d.host, d.port), timeout=scaled(20.0))
        self.addCleanup(raw.close)
        with self.assertRaises((ssl.SSLError, ConnectionError, OSError)):
            self.context().wrap_socket(raw, server_hostname="127.0.0.1")
        d.wait_log(r"a TLS handshake on the plain port", since=mark)
        with d.client() as c:
            self.assertEqual(c.request("PING"), "PONG")

    def test_stalled_handshake_is_closed(self):
        d = self.start(users=False, client_certs="none")
        mark = d.log_mark()
        c = Client.tcp(d.tls_host, d.tls_port, timeout=HANDSHAKE_WAIT)
        self.addCleanup(c.close)
        c.expect_eof(timeout=HANDSHAKE_WAIT, allow_reset=True)
        d.wait_log(r"no TLS handshake within 10000 ms; closing", since=mark)


class Refusals(TlsCase):
    """Issue 41: a refusal over TLS is readable inside TLS; handshakes in
    progress and logins have their per-address cap and deadline."""

    def test_too_many_clients_is_said_after_the_handshake(self):
        d = self.start(users=False, client_certs="none", extra="[server]\nmax_clients = 1\n")
        kept = self.connect(d)
        self.assertEqual(kept.request("PING"), "PONG")
        c = self.connect(d)
        c.expect(ERR_TOO_MANY)
        c.expect_eof(allow_reset=True)
        self.assertEqual(kept.request("PING"), "PONG")

    def test_connections_per_address_over_tls(self):
        d = self.start(users=False, client_certs="none",
                       extra="[server]\nmax_clients_per_address = 2\n")
        first = [self.connect(d), self.connect(d)]
        for c in first:
            self.assertEqual(c.request("PING"), "PONG")
        c = self.connect(d)
        c.expect(ERR_PER_ADDRESS % 2)
        c.expect_eof(allow_reset=True)
        self.assertEqual(self.connect(d, source="127.0.0.2").request("PING"), "PONG")

    def test_handshakes_per_address_are_capped(self):
        d = self.start(users=False, client_certs="none", extra="max_handshakes_per_address = 2\n")
        stalled = []
        for _ in range(2):
            s = Client.tcp(d.tls_host, d.tls_port)
            self.addCleanup(s.close)
            stalled.append(s)
        mark = d.log_mark()
        third = Client.tcp(d.tls_host, d.tls_port)
        self.addCleanup(third.close)
        third.expect_eof(allow_reset=True)
        d.wait_log(r"warn refusing 127\.0\.0\.1:\d+: \[tls\] max_handshakes_per_address \(2\) "
                   r"reached by 127\.0\.0\.1; closed without a reply \(\d+ more refused since "
                   r"the last such line\)$", since=mark)
        # Another address completes its handshake meanwhile.
        self.assertEqual(self.connect(d, source="127.0.0.2").request("PING"), "PONG")
        # And once a stalled one is gone, so does this one.
        stalled[0].close()
        d.wait_log(r"TLS handshake failed", since=mark)
        self.assertEqual(self.connect(d).request("PING"), "PONG")

    def test_login_deadline_after_the_handshake(self):
        d = self.start(extra="[server]\nlogin_timeout_ms = 300\n")
        cert = self.connect(d, cert=self.alice)
        anon = self.connect(d)
        anon.expect("ERR NOAUTH no login within 300 ms; closing")
        anon.expect_eof(allow_reset=True)
        # Logged in by its certificate, before the anonymous one: no deadline.
        self.assertRegex(cert.request("LOCK job-1"), r"^OK job-1 \d+$")


class Rotation(TlsCase):
    def test_sighup_serves_the_new_certificate_old_connections_stay(self):
        dir = os.path.join(make_tmpdir(), "live")
        os.makedirs(dir)
        cert, key = os.path.join(dir, "cert.pem"), os.path.join(dir, "key.pem")
        shutil.copy(self.server_cert, cert)
        shutil.copy(self.server_key, key)
        d = self.start(users=False, client_certs="none", cert=cert, key=key)
        old = self.connect(d)
        serial_old = old.sock.getpeercert()["serialNumber"]
        new_cert, new_key = self.pki.issue("localhost", server=True, file="rotated")
        shutil.copy(new_cert, cert)
        shutil.copy(new_key, key)
        mark = d.log_mark()
        d.send_signal(signal.SIGHUP)
        d.wait_log(r"reload: TLS certificate .* read again", since=mark)
        fresh = self.connect(d)
        self.assertNotEqual(fresh.sock.getpeercert()["serialNumber"], serial_old)
        self.assertEqual(old.request("PING"), "PONG")
        # A key that does not match: logged, and the certificate in force stays.
        shutil.copy(self.alice[1], key)
        mark = d.log_mark()
        d.send_signal(signal.SIGHUP)
        d.wait_log(r"error reload failed: \[tls\] key_file .*; serving on with the settings "
                   r"before$", since=mark)
        self.assertEqual(self.connect(d).request("PING"), "PONG")


class ConfigurationChecks(TlsCase):
    def check_fails(self, conf, *words):
        r = run_daemon(["-t"], config=conf)
        check_failure_exit(r.returncode)
        for w in words:
            self.assertIn(w, r.stderr)
        return r

    def test_files_are_checked(self):
        self.check_fails(self.tls_conf(key=self.alice[1]), "does not match cert_file")
        readable = os.path.join(make_tmpdir(), "key.pem")
        shutil.copy(self.server_key, readable)
        os.chmod(readable, 0o644)
        self.check_fails(self.tls_conf(key=readable), "others may read or write it (mode 0644); chmod o-rwx")
        self.check_fails(self.tls_conf(cert=self.expired[0], key=self.expired[1]),
                         "the certificate has expired")
        self.check_fails(self.tls_conf(cert="/nonexistent.pem"), "[tls] cert_file /nonexistent.pem")
        self.check_fails(self.tls_conf(client_certs="sometimes"),
                         "client_certs: 'sometimes' is not one of none, optional, required")
        conf = "[tls]\nlisten = 127.0.0.1:0\ncert_file = %s\n" % self.server_cert
        self.check_fails(conf, "[tls] listen needs cert_file and key_file")
        r = run_daemon(["-t"], config=self.tls_conf())
        self.assertEqual(r.returncode, 0, r)

    def test_beyond_loopback_needs_users_or_required_certificates(self):
        base = ("[tls]\nlisten = 0.0.0.0:0\ncert_file = %s\nkey_file = %s\nca_file = %s\n"
                % (self.server_cert, self.server_key, self.pki.ca))
        self.check_fails(base, "refusing to listen on 0.0.0.0:0 ([tls] listen)")
        for extra in ("client_certs = required\n",
                      "[server]\nusers_file = %s\n" % self.users):
            r = run_daemon(["-t"], config=base + extra)
            self.assertEqual(r.returncode, 0, r)


class Revocation(TlsCase):
    """[tls] crl_file: a client certificate the CA's CRL lists is refused;
    SIGHUP reads the CRL again. The CA is this class's own: revoking
    touches its openssl ca database."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.crl_pki = Pki(os.path.join(cls.tmp, "crl"), name="crlca")
        cls.crl_server = cls.crl_pki.issue("localhost", server=True)
        cls.keeps = cls.crl_pki.issue("alice", file="alice-keeps")
        cls.loses = cls.crl_pki.issue("alice", file="alice-loses")
        cls.revoked = cls.crl_pki.issue("alice", file="alice-revoked")
        cls.crl_pki.revoke(cls.revoked[0])

    def crl_conf(self, crl, client_certs="optional"):
        return ("[server]\nusers_file = %s\n[tls]\nlisten = 127.0.0.1:0\ncert_file = %s\n"
                "key_file = %s\nca_file = %s\nclient_certs = %s\ncrl_file = %s\n"
                % (self.users, self.crl_server[0], self.crl_server[1], self.crl_pki.ca,
                   client_certs, crl))

    def start_crl(self, crl):
        d = Daemon(config=self.crl_conf(crl)).start()
        self.addCleanup(d.stop)
        m = d.wait_log(r"TLS on (\S+), client certificates (\w+)")
        d.tls_host, d.tls_port, _ = parse_hostport(m.group(1))
        return d

    def connect_crl(self, d, cert):
        return self.connect(d, cert=cert, ca=self.crl_pki.ca)

    def test_a_revoked_certificate_is_refused(self):
        live = os.path.join(make_tmpdir(), "crl.pem")
        shutil.copy(self.crl_pki.crl(file="revoked-crl.pem"), live)
        d = self.start_crl(live)
        c = self.connect_crl(d, self.keeps)
        self.assertRegex(c.request("LOCK job-1"), r"^OK job-1 \d+$")
        mark = d.log_mark()
        self.assertTrue(self.refused(d, cert=self.revoked, ca=self.crl_pki.ca))
        d.wait_log(r"TLS handshake failed: .*\(the client's certificate: certificate "
                   r"revoked; subject /CN=\S+, notAfter \S+Z\); closing", since=mark)
        # Without a certificate it is a client that has not logged in.
        anon = self.connect_crl(d, None)
        self.assertEqual(anon.request("LOCK job-1"), ERR_NOAUTH)

    def test_sighup_reads_a_new_crl(self):
        pki = Pki(os.path.join(make_tmpdir(), "own"), name="own")
        server = pki.issue("localhost", server=True)
        cert = pki.issue("alice")
        live = os.path.join(make_tmpdir(), "crl.pem")
        shutil.copy(pki.crl(), live)
        conf = ("[server]\nusers_file = %s\n[tls]\nlisten = 127.0.0.1:0\ncert_file = %s\n"
                "key_file = %s\nca_file = %s\nclient_certs = optional\ncrl_file = %s\n"
                % (self.users, server[0], server[1], pki.ca, live))
        d = Daemon(config=conf).start()
        self.addCleanup(d.stop)
        m = d.wait_log(r"TLS on (\S+), client certificates (\w+)")
        d.tls_host, d.tls_port, _ = parse_hostport(m.group(1))
        old = self.connect(d, cert=cert, ca=pki.ca)
        self.assertRegex(old.request("LOCK job-1"), r"^OK job-1 \d+$")
        pki.revoke(cert[0])
        shutil.copy(pki.crl(file="next-crl.pem"), live)
        mark = d.log_mark()
        d.send_signal(signal.SIGHUP)
        d.wait_log(r"reload: TLS certificate .*, key and CA and CRL read again", since=mark)
        self.assertTrue(self.refused(d, cert=cert, ca=pki.ca))
        d.wait_log(r"certificate revoked; subject /CN=alice, notAfter \S+\); closing",
                   since=mark)
        # The connection made before keeps its login, as after a certificate rotation.
        self.assertRegex(old.request("LOCK job-2"), r"^OK job-2 \d+$")
        # An expired CRL is not taken: the one in force stays.
        shutil.copy(pki.crl(file="old-crl.pem", expired=True), live)
        mark = d.log_mark()
        d.send_signal(signal.SIGHUP)
        d.wait_log(r"error reload failed: \[tls\] crl_file .*has expired.*; serving on "
                   r"with the settings before$", since=mark)
        self.assertTrue(self.refused(d, cert=cert, ca=pki.ca))

    def test_crl_file_is_checked(self):
        check = ConfigurationChecks.check_fails
        check(self, self.crl_conf(self.crl_pki.crl(file="exp-crl.pem", expired=True)),
              "the CRL of /CN=lockbroker test crlca has expired")
        check(self, self.crl_conf(self.pki.crl(file="other-crl.pem")),
              "the CRL of /CN=lockbroker test ca is not signed by a CA of ca_file")
        check(self, self.crl_conf(self.crl_pki.ca), "no CRL in it")
        check(self, self.crl_conf("/nonexistent-crl.pem"), "[tls] crl_file /nonexistent-crl.pem")
        check(self, self.crl_conf(self.crl_pki.crl(file="ok-crl.pem"), client_certs="none"),
              "it needs client_certs = optional or required")
        both = os.path.join(make_tmpdir(), "ca.pem")
        with open(both, "w") as f:
            for ca in (self.crl_pki.ca, self.pki.ca):
                with open(ca) as g:
                    f.write(g.read())
        conf = self.crl_conf(self.crl_pki.crl(file="ok-crl.pem")).replace(
            "ca_file = %s" % self.crl_pki.ca, "ca_file = %s" % both)
        check(self, conf, "has no CRL of /CN=lockbroker test ca (ca_file)")
        r = run_daemon(["-t"], config=self.crl_conf(self.crl_pki.crl(file="ok-crl.pem")))
        self.assertEqual(r.returncode, 0, r)


if __name__ == "__main__":
    prog = unittest.main(exit=False, verbosity=2)
    r = prog.result
    if r.wasSuccessful() and len(r.skipped) >= r.testsRun:
        sys.exit(77)              # automake: SKIP, not a PASS that tested nothing
    sys.exit(0 if r.wasSuccessful() else 1)
