#!/usr/bin/env python3
"""End-to-end tests of the Node.js client library (clients/node): starts the
daemons (embedded; embedded with a short TCP user timeout for jeopardy; one
with a users file; distributed, with its own ZooKeeper when installed; with
the openssl command, throw-away certificates (lbpki) and daemons with TLS
listeners) and runs the library's node:test suites (clients/node/test)
against them; then the examples of clients/node/README.md as written, and
`npm pack --dry-run`. Exit 77 (skip) without node."""

import json
import os
import re
import shutil
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import lbharness  # noqa: E402
from lbharness import Daemon, make_tmpdir, scaled  # noqa: E402
import lbnames  # noqa: E402
from lbpki import Pki, TLS_LISTEN_RE, have_openssl, tls_section  # noqa: E402
import test_auth  # noqa: E402
import test_distributed as td  # noqa: E402
import zkharness  # noqa: E402

SRCDIR = os.environ.get("LB_SRCDIR") or os.path.join(HERE, "..", "..")
PKG = os.path.join(SRCDIR, "clients", "node")
NODE = shutil.which("node")
# In this order: client.test.js's last test stops ZooKeeper, which
# tls.test.js's distributed test needs.
SUITES = ("tls.test.js", "client.test.js")

# For each name of LB_NAMES (JSON): checkName, then trylock of the name and
# of a set with LB_PARTNER: "ok" / "granted", or the error's code.
NAMES_JS = r"""
const lb = require('lockbroker');
(async () => {
  const client = await lb.connect({ address: process.env.LOCKBROKER_ADDR });
  const out = [];
  for (const name of JSON.parse(process.env.LB_NAMES)) {
    const row = { name };
    try { lb.checkName(name); row.check = 'ok'; } catch (e) { row.check = e.code; }
    for (const [key, arg] of [['one', name], ['set', [name, process.env.LB_PARTNER]]]) {
      try {
        await (await client.trylock(arg)).release();
        row[key] = 'granted';
      } catch (e) { row[key] = e.code || String(e); }
    }
    out.push(row);
  }
  await client.close();
  console.log(JSON.stringify(out));
})();
"""


def make_pki():
    """Throw-away certificates: a CA with the daemons' certificate and
    alice's and deploy's client certificates (deploy.pem and deploy.key, as
    README.md names them, beside the CA's ca.pem), another CA with an alice
    of its own."""
    tmp = make_tmpdir()
    p = Pki(os.path.join(tmp, "pki"))
    other = Pki(os.path.join(tmp, "other"), name="other")
    p.server = p.issue("localhost", server=True)
    p.alice = p.issue("alice")
    p.deploy = p.issue("deploy")
    p.other_ca = other.ca
    p.forged = other.issue("alice")
    return p


def tls_config(p, client_certs="optional"):
    return tls_section(p.server[0], p.server[1], p.ca, client_certs)


def node_env(extra):
    """The environment for node: require('lockbroker') finds clients/node."""
    mods = os.path.join(make_tmpdir(), "node_modules")
    os.makedirs(mods)
    os.symlink(os.path.abspath(PKG), os.path.join(mods, "lockbroker"))
    return dict(os.environ, NODE_PATH=mods, **extra)


@lbharness.skip_unless(NODE, "node", "node is not installed")
class NodeClientTests(unittest.TestCase):

    def start(self, config):
        d = Daemon(config=config).start()
        self.addCleanup(d.stop)
        return d

    def start_tls(self, config):
        """A daemon with a TLS listener: (daemon, the listener's address)."""
        d = self.start(config)
        return d, d.wait_log(TLS_LISTEN_RE).group(1)

    def test_library_suite(self):
        env = {}
        d = self.start("[server]\n")
        env["LB_ADDR"] = d.listen_addr
        p = None
        if have_openssl():
            p = make_pki()
            env.update(LB_TLS_CA=p.ca, LB_TLS_OTHER_CA=p.other_ca,
                       LB_TLS_SERVER_CERT=p.server[0], LB_TLS_SERVER_KEY=p.server[1],
                       LB_TLS_ALICE_CERT=p.alice[0], LB_TLS_ALICE_KEY=p.alice[1],
                       LB_TLS_FORGED_CERT=p.forged[0], LB_TLS_FORGED_KEY=p.forged[1])
            t, env["LB_TLS_ADDR"] = self.start_tls("[server]\n" + tls_config(p))
            env["LB_TLS_PLAIN_ADDR"] = t.listen_addr
            env["LB_TLS_PID"] = str(t.pid)
        else:
            lbharness.not_tested("openssl", "the library's TLS tests")
        j = self.start("[server]\ntcp_user_timeout_ms = 1500\n")
        env.update(LB_JEOPARDY_ADDR=j.listen_addr, LB_JEOPARDY_PID=str(j.pid))
        users = os.path.join(make_tmpdir(), "users")
        test_auth.write_users(users, test_auth.users_text({"alice": "app-*"}))
        a = self.start("[server]\nusers_file = %s\n" % users)
        env.update(LB_AUTH_ADDR=a.listen_addr, LB_AUTH_PASSWORD=test_auth.PASSWORDS["alice"])
        if p:
            _, env["LB_TLS_LOGIN_ADDR"] = self.start_tls(
                "[server]\nusers_file = %s\n%s" % (users, tls_config(p, "required")))
        if td.zk_available():
            zk = zkharness.ZkServer(tick_ms=500, name="zk-node")
            self.addCleanup(zk.cleanup)
            zk.start()
            z = Daemon(config=td.zk_config(zk.connect_string, "/lbnode", td.SESSION_MS, ""),
                       name="lockbrokerd-node-zk").start()
            self.addCleanup(z.kill)
            z.wait_log(td.SESSION_RE, scaled(15.0))
            env.update(LB_DIST_ADDR=z.listen_addr, LB_ZK_PID=str(zk.proc.pid))
            if p:
                zt = Daemon(config=td.zk_config(zk.connect_string, "/lbnode", td.SESSION_MS,
                                                tls_config(p)),
                            name="lockbrokerd-node-zk-tls").start()
                self.addCleanup(zt.kill)
                zt.wait_log(td.SESSION_RE, scaled(15.0))
                env["LB_TLS_DIST_ADDR"] = zt.wait_log(TLS_LISTEN_RE).group(1)
        else:
            lbharness.not_tested("zk", "the library's distributed-mode tests")
        tests = os.path.join(PKG, "test")
        self.assertEqual(sorted(f for f in os.listdir(tests) if f.endswith(".js")),
                         sorted(SUITES))
        for suite in SUITES:
            with self.subTest(suite=suite):
                r = subprocess.run([NODE, "--test", os.path.join(tests, suite)],
                                   env=node_env(env), capture_output=True, text=True,
                                   timeout=scaled(120.0))
                sys.stderr.write(r.stdout[-3000:])
                self.assertEqual(r.returncode, 0, r.stdout[-6000:] + r.stderr[-2000:])
                self.assertRegex(r.stdout, r"# fail 0")
                if "LB_DIST_ADDR" in env and (p or suite != "tls.test.js"):
                    self.assertRegex(r.stdout, r"# skipped 0")

    def test_readme_examples_run_as_written(self):
        with open(os.path.join(PKG, "README.md")) as f:
            blocks = re.findall(r"```js\n(.*?)```", f.read(), re.S)
        self.assertGreaterEqual(len(blocks), 6)
        d = self.start("[server]\n")
        env = node_env({"LOCKBROKER_ADDR": d.listen_addr})
        for code in blocks:
            with self.subTest(code=code.splitlines()[:2]):
                cwd, run_env = None, env
                if "ca.pem" in code:
                    # The TLS example: run where README.md's files are, as
                    # deploy (CN) with deploy's patterns, against a TLS listener.
                    if not have_openssl():
                        lbharness.skip("openssl", "the openssl command is not installed")
                    p = make_pki()
                    users = os.path.join(make_tmpdir(), "users")
                    with open(users, "w") as f:
                        f.write("deploy:%s:deploy-*,release-*\n" % test_auth.HASHES["bob"])
                    os.chmod(users, 0o600)
                    t, addr = self.start_tls("[server]\nusers_file = %s\n%s"
                                             % (users, tls_config(p, "required")))
                    cwd = p.dir
                    run_env = dict(env, LOCKBROKER_ADDR=addr)
                r = subprocess.run([NODE, "-e", code], env=run_env, capture_output=True,
                                   text=True, timeout=scaled(30.0), cwd=cwd)
                self.assertEqual(r.returncode, 0, r.stderr)
                if cwd:
                    t.wait_log(r"logged in by certificate as deploy")
                self.assertTrue(r.stdout, "the example printed nothing")

    def test_names_follow_protocol_md(self):
        """The library checks names by PROTOCOL.md's rule (read by lbnames),
        alone and in a set, and the daemon grants what it lets through."""
        rule = lbnames.name_rule()
        d = self.start("[server]\n")
        env = node_env({"LOCKBROKER_ADDR": d.listen_addr, "LB_PARTNER": lbnames.PARTNER,
                        "LB_NAMES": json.dumps(lbnames.NAMES)})
        r = subprocess.run([NODE, "-e", NAMES_JS], env=env, capture_output=True, text=True,
                           timeout=scaled(60.0))
        self.assertEqual(r.returncode, 0, r.stderr)
        rows = json.loads(r.stdout)
        self.assertEqual([row["name"] for row in rows], lbnames.NAMES)
        for row in rows:
            with self.subTest(name=row["name"]):
                if rule.valid(row["name"]):
                    want = {"check": "ok", "one": "granted", "set": "granted"}
                else:
                    want = {"check": "BAD_NAME", "one": "BAD_NAME", "set": "BAD_NAME"}
                self.assertEqual({k: row[k] for k in want}, want)

    def test_top_readme_example_runs_as_written(self):
        """README.md's Node example, a CommonJS script, as written but for
        the daemon's address."""
        with open(os.path.join(SRCDIR, "README.md")) as f:
            blocks = re.findall(r"```js\n(.*?)```", f.read(), re.S)
        self.assertEqual(len(blocks), 1)
        self.assertIn("'127.0.0.1:7411'", blocks[0])
        d = self.start("[server]\n")
        script = os.path.join(make_tmpdir(), "example.js")
        with open(script, "w") as f:
            f.write(blocks[0].replace("'127.0.0.1:7411'", "'%s'" % d.listen_addr))
        r = subprocess.run([NODE, script], env=node_env({}), capture_output=True, text=True,
                           timeout=scaled(30.0))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout, "the example printed nothing")
        self.assertEqual(r.stderr, "")

    def test_npm_install_from_another_directory(self):
        """clients/node/README.md's npm install, as written but for the
        checkout's path, in a project outside the checkout."""
        npm = shutil.which("npm")
        if not npm:
            lbharness.skip("node", "npm is not installed")
        with open(os.path.join(PKG, "README.md")) as f:
            m = re.search(r"```sh\n(npm install .*?)\n```", f.read(), re.S)
        self.assertIsNotNone(m, "no npm install in the README")
        self.assertIn("/path/to/lockbroker/", m.group(1))
        tmp = make_tmpdir()
        checkout = os.path.join(tmp, "lockbroker")
        shutil.copytree(PKG, os.path.join(checkout, "clients", "node"))
        project = os.path.join(tmp, "project")
        os.mkdir(project)
        with open(os.path.join(project, "package.json"), "w") as f:
            f.write('{"name": "project", "private": true}\n')
        env = dict(os.environ, npm_config_cache=os.path.join(tmp, ".npm"),
                   npm_config_offline="true", npm_config_audit="false",
                   npm_config_fund="false", npm_config_update_notifier="false")
        env.pop("NODE_PATH", None)
        r = subprocess.run(["sh", "-ec", m.group(1).replace("/path/to/lockbroker", checkout)],
                           cwd=project, env=env, capture_output=True, text=True,
                           timeout=scaled(60.0))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = subprocess.run([NODE, "-e", "console.log(typeof require('lockbroker').connect)"],
                           cwd=project, env=env, capture_output=True, text=True,
                           timeout=scaled(30.0))
        self.assertEqual((r.returncode, r.stdout), (0, "function\n"), r.stderr)

    def test_package_version_is_the_daemons(self):
        # One release: package.json says the version lockbrokerd --version
        # (configure.ac's AC_INIT) says.
        r = subprocess.run([lbharness.daemon_path(), "--version"], capture_output=True,
                           text=True, timeout=scaled(30.0))
        m = re.fullmatch(r"lockbrokerd (\S+)\n", r.stdout)
        self.assertIsNotNone(m, r.stdout + r.stderr)
        with open(os.path.join(PKG, "package.json")) as f:
            self.assertEqual(json.load(f)["version"], m.group(1))

    def test_npm_pack(self):
        npm = shutil.which("npm")
        if not npm:
            lbharness.skip("node", "npm is not installed")
        tmp = os.path.join(make_tmpdir(), "node")
        shutil.copytree(PKG, tmp)
        r = subprocess.run([npm, "pack", "--dry-run", "--json"], cwd=tmp, capture_output=True,
                           text=True, timeout=scaled(60.0),
                           env=dict(os.environ, npm_config_cache=os.path.join(tmp, ".npm")))
        self.assertEqual(r.returncode, 0, r.stderr)
        files = {f["path"] for f in json.loads(r.stdout)[0]["files"]}
        self.assertTrue({"index.js", "index.d.ts", "package.json", "README.md"} <= files, files)


if __name__ == "__main__":
    prog = unittest.main(exit=False, verbosity=2)
    r = prog.result
    if r.wasSuccessful() and r.testsRun and len(r.skipped) == r.testsRun:
        sys.exit(77)
    sys.exit(0 if r.wasSuccessful() else 1)
