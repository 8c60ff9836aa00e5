#!/usr/bin/env python3
"""The monitoring files shipped in contrib/: the Prometheus alert rules
(contrib/prometheus/lockbroker-rules.yml) and the Grafana dashboard
(contrib/grafana/lockbroker.json).

promtool (Debian's prometheus package; LB_REQUIRE key `promtool`) checks
the rules, and the dashboard's queries turned into recording rules. Every
lockbroker_ name either file uses must be one the daemon really exports:
an embedded daemon with a TLS listener is scraped (the names outside
ZooKeeper), and a distributed one against a real ZooKeeper server (the
zk names). Nothing sleeps; no timing is asserted.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lbharness  # noqa: E402
import lbpki  # noqa: E402
from lbharness import scaled  # noqa: E402
from test_metrics import metrics_config, scrape, start_with_metrics, zk_available  # noqa: E402
from zkharness import ZkServer  # noqa: E402

SRCDIR = os.environ.get("LB_SRCDIR",
                        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
RULES = os.path.join(SRCDIR, "contrib", "prometheus", "lockbroker-rules.yml")
DASHBOARD = os.path.join(SRCDIR, "contrib", "grafana", "lockbroker.json")
NAME = re.compile(r"\blockbroker_[a-zA-Z0-9_]+")
# Grafana's variables, as a Prometheus server would see them substituted.
GRAFANA_VARS = (("$__rate_interval", "5m"), ("$instance", ".*"))


def dashboard_exprs():
    """Every query of the dashboard's panels (rows' panels too)."""
    with open(DASHBOARD) as f:
        dash = json.load(f)
    exprs = []

    def walk(panels):
        for p in panels:
            exprs.extend(t["expr"] for t in p.get("targets", []) if t.get("expr"))
            walk(p.get("panels", []))

    walk(dash["panels"])
    for var in dash.get("templating", {}).get("list", []):
        q = var.get("query")
        if isinstance(q, dict) and q.get("query"):
            exprs.append(q["query"])
    return exprs


def names_used():
    """{name: where} for every lockbroker_ name in the rules file (comments
    included: they name metrics too) and in the dashboard's queries."""
    used = {}
    with open(RULES) as f:
        for n in NAME.findall(f.read()):
            used.setdefault(n, "rules")
    for e in dashboard_exprs():
        for n in NAME.findall(e):
            used.setdefault(n, "dashboard")
    return used


def exported(families):
    """Family and sample names of a parsed scrape."""
    names = set(families)
    for fam in families.values():
        names.update(s for s, _, _ in fam["samples"])
    return names


def promtool():
    path = shutil.which("promtool")
    if not path:
        lbharness.skip("promtool", "no promtool (Debian's prometheus package)")
    return path


class FilesTest(unittest.TestCase):
    def test_promtool_accepts_the_rules(self):
        r = subprocess.run([promtool(), "check", "rules", RULES], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertRegex(r.stdout, r"SUCCESS: \d+ rules found")

    def test_rules_cover_the_issue(self):
        with open(RULES) as f:
            text = f.read()
        for expr in ("lockbroker_healthy == 0", "lockbroker_zk_session_confirmed == 0",
                     "lockbroker_oldest_hold_seconds >", "lockbroker_longest_wait_seconds >",
                     "lockbroker_tls_certificate_expiry_seconds <",
                     "lockbroker_handovers_given_up_total"):
            self.assertIn(expr, text)

    def test_dashboard_queries_parse(self):
        exprs = dashboard_exprs()
        self.assertGreater(len(exprs), 10)
        tmp = tempfile.mkdtemp(prefix="lbdash-")
        self.addCleanup(shutil.rmtree, tmp, ignore_errors=True)
        path = os.path.join(tmp, "dashboard-as-rules.yml")
        with open(path, "w") as f:
            f.write("groups:\n  - name: dashboard\n    rules:\n")
            for i, e in enumerate(exprs):
                if e.startswith("label_values("):
                    continue        # Grafana's own function, not PromQL
                for var, value in GRAFANA_VARS:
                    e = e.replace(var, value)
                f.write("      - record: dashboard:query%d\n        expr: %s\n"
                        % (i, json.dumps(e)))
        r = subprocess.run([promtool(), "check", "rules", path], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)

    def test_dashboard_is_importable_json(self):
        with open(DASHBOARD) as f:
            dash = json.load(f)
        self.assertEqual(dash["uid"], "lockbroker")
        ids = [p["id"] for p in dash["panels"]]
        self.assertEqual(len(ids), len(set(ids)))
        for p in dash["panels"]:
            for t in p.get("targets", []):
                self.assertEqual(t["datasource"]["uid"], "${datasource}")


class NamesTest(unittest.TestCase):
    """Every name in the files is exported by a running daemon."""

    def test_embedded_with_tls(self):
        if not lbpki.have_openssl():
            lbharness.skip("openssl", "no openssl command to make a certificate with")
        pki = lbpki.Pki(os.path.join(lbharness.make_tmpdir(), "pki"))
        cert, key = pki.issue("localhost", server=True)
        d = start_with_metrics(self, metrics_config(
            lbpki.tls_section(cert, key, pki.ca, client_certs="none")))
        got = exported(scrape(d))
        missing = {n: w for n, w in names_used().items()
                   if n not in got and not n.startswith("lockbroker_zk_")}
        self.assertEqual(missing, {}, "used in the files, not exported in embedded mode")

    def test_distributed(self):
        if not zk_available():
            lbharness.skip("zk", "ZooKeeper (java + Debian's zookeeper jars) not installed")
        zk = ZkServer(tick_ms=500, name="zk-monitoring",
                      base_dir=tempfile.mkdtemp(prefix="lbmon-zk-"))
        self.addCleanup(shutil.rmtree, zk.dir, ignore_errors=True)
        self.addCleanup(zk.cleanup)
        self.addCleanup(zk.stop, grace=5.0)
        zk.start()
        d = start_with_metrics(self, metrics_config(
            "[zookeeper]\nhosts = %s\nroot = /lbmonitoring\nsession_timeout_ms = 12000\n"
            % zk.connect_string))
        d.wait_log(r"zk: new session 0x[0-9a-f]+", scaled(15.0))
        with d.client() as c:       # a lock: the zk histograms have their samples
            c.send("LOCK m\n")
            c.expect_match(r"OK m \d+")
        got = exported(scrape(d))
        missing = {n: w for n, w in names_used().items()
                   if n not in got and not n.startswith("lockbroker_tls_")}
        self.assertEqual(missing, {}, "used in the files, not exported in distributed mode")


if __name__ == "__main__":
    unittest.main()
