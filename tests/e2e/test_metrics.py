#!/usr/bin/env python3
"""End-to-end tests of the HTTP endpoint ([server] metrics_listen): /metrics
and /healthz.

/metrics is read with a strict parser of the Prometheus text exposition
format 0.0.4 (parse_exposition below): any line it does not expect fails
the test. The embedded-mode tests start the built daemon (env LOCKBROKERD,
see lbharness); the distributed-mode ones also a real ZooKeeper server on
loopback (tests/e2e/zkharness.py), which one of them stops and starts again.

Nothing sleeps to synchronise: every step waits for a reply or a log line
with a timeout that fails the test. No test asserts how long anything took.
"""

import http.client
import math
import os
import re
import select
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lbharness  # noqa: E402
from lbharness import Client, Daemon, TIMEOUT, read_stats, scaled, stats  # noqa: E402
import zkharness  # noqa: E402
import lbpki  # noqa: E402
from zkharness import ZkServer  # noqa: E402

SERVING_RE = r"metrics: serving /metrics and /healthz on http://(\S+):(\d+)$"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

# ------------------------------------------------------------ the format

METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")
# A sample value as Go's ParseFloat takes it (what Prometheus uses).
VALUE = re.compile(r"[+-]?(?:\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?|Inf|NaN)")


class FormatError(AssertionError):
    pass


def parse_float(text, where):
    if not VALUE.fullmatch(text):
        raise FormatError("%s: %r is not a float value" % (where, text))
    return float(text)


def parse_labels(text, where):
    """ '{a="x",b="y\\"z"}' (text starts after the name) -> (dict, rest)."""
    labels = {}
    if not text.startswith("{"):
        return labels, text
    i = 1
    while True:
        if text[i:i + 1] == "}":
            return labels, text[i + 1:]
        m = LABEL_NAME.match(text, i)
        if not m:
            raise FormatError("%s: bad label name at %r" % (where, text[i:]))
        name = m.group(0)
        if name.startswith("__"):
            raise FormatError("%s: reserved label name %s" % (where, name))
        if name in labels:
            raise FormatError("%s: label %s twice" % (where, name))
        i = m.end()
        if text[i:i + 2] != '="':
            raise FormatError("%s: expected =\" after label %s" % (where, name))
        i += 2
        value = []
        while True:
            ch = text[i:i + 1]
            if ch == "":
                raise FormatError("%s: unterminated label value" % where)
            if ch == "\n":
                raise FormatError("%s: raw newline in a label value" % where)
            if ch == "\\":
                esc = text[i + 1:i + 2]
                if esc not in ("\\", '"', "n"):
                    raise FormatError("%s: bad escape \\%s in a label value" % (where, esc))
                value.append("\n" if esc == "n" else esc)
                i += 2
                continue
            if ch == '"':
                i += 1
                break
            value.append(ch)
            i += 1
        labels[name] = "".join(value)
        if text[i:i + 1] == ",":
            i += 1
            if text[i:i + 1] == "}":
                raise FormatError("%s: trailing comma in labels" % where)
        elif text[i:i + 1] != "}":
            raise FormatError("%s: expected , or } after label %s" % (where, name))


def family_of(sample_name, families):
    """The declared family a sample belongs to, or None."""
    if sample_name in families and families[sample_name]["type"] != "histogram":
        return sample_name
    for suffix in ("_bucket", "_sum", "_count"):
        base = sample_name[:-len(suffix)]
        if sample_name.endswith(suffix) and families.get(base, {}).get("type") == "histogram":
            return base
    return None


def check_histogram(name, fam):
    """Per label set (le aside): buckets ascending and cumulative, the last
    one le="+Inf", _count equal to it, _sum present."""
    series = {}
    for sample, labels, value in fam["samples"]:
        key = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        s = series.setdefault(key, {"buckets": [], "sum": None, "count": None})
        if sample == name + "_bucket":
            if "le" not in labels:
                raise FormatError("%s: a bucket without le" % name)
            s["buckets"].append((parse_float(labels["le"], name + " le"), value))
        elif "le" in labels:
            raise FormatError("%s: le on %s" % (name, sample))
        elif sample == name + "_sum":
            if s["sum"] is not None:
                raise FormatError("%s: _sum twice" % name)
            s["sum"] = value
        else:
            if s["count"] is not None:
                raise FormatError("%s: _count twice" % name)
            s["count"] = value
    if not series:
        raise FormatError("%s: a histogram without samples" % name)
    for key, s in series.items():
        b = s["buckets"]
        if not b:
            raise FormatError("%s%r: no buckets" % (name, key))
        les = [le for le, _ in b]
        if les != sorted(les) or len(set(les)) != len(les):
            raise FormatError("%s%r: bucket bounds not strictly ascending: %r" % (name, key, les))
        if les[-1] != math.inf:
            raise FormatError("%s%r: the last bucket is le=%r, not +Inf" % (name, key, les[-1]))
        counts = [c for _, c in b]
        if counts != sorted(counts):
            raise FormatError("%s%r: bucket counts not cumulative: %r" % (name, key, counts))
        if s["sum"] is None:
            raise FormatError("%s%r: no _sum" % (name, key))
        if s["count"] is None:
            raise FormatError("%s%r: no _count" % (name, key))
        if s["count"] != counts[-1]:
            raise FormatError("%s%r: _count %r is not the +Inf bucket's %r"
                              % (name, key, s["count"], counts[-1]))


def parse_exposition(text):
    """The families of a text exposition, strictly:
    {name: {"help": str, "type": str, "samples": [(sample name, labels, value)]}}.

    Every sample's family is declared with # HELP, then # TYPE, before its
    samples; a family's lines are one group; names and label names are
    valid; no series twice; no timestamps; counters are not negative;
    histograms as check_histogram() says."""
    if not text.endswith("\n"):
        raise FormatError("the exposition does not end in a newline")
    families = {}
    current = None
    series = set()
    for n, line in enumerate(text[:-1].split("\n"), 1):
        where = "line %d %r" % (n, line)
        if line.startswith("#"):
            m = re.fullmatch(r"# (HELP|TYPE) (\S+) (.*)", line)
            if not m:
                raise FormatError("%s: a comment that is neither HELP nor TYPE" % where)
            kind, name, rest = m.groups()
            if not METRIC_NAME.fullmatch(name):
                raise FormatError("%s: bad metric name" % where)
            if kind == "HELP":
                if name in families:
                    raise FormatError("%s: family declared twice" % where)
                if re.search(r"\\[^\\n]", rest.replace("\\\\", "")):
                    raise FormatError("%s: bad escape in help" % where)
                families[name] = {"help": rest, "type": None, "samples": []}
                current = name
            else:
                if current != name or families[name]["type"] is not None:
                    raise FormatError("%s: TYPE not right after its HELP" % where)
                if rest not in TYPES:
                    raise FormatError("%s: unknown type" % where)
                families[name]["type"] = rest
            continue
        if line == "":
            raise FormatError("%s: empty line" % where)
        m = METRIC_NAME.match(line)
        if not m:
            raise FormatError("%s: bad metric name" % where)
        sample = m.group(0)
        labels, rest = parse_labels(line[m.end():], where)
        parts = rest.split(" ")
        if len(parts) != 2 or parts[0] != "":
            raise FormatError("%s: expected one space and a value (no timestamp)" % where)
        value = parse_float(parts[1], where)
        fam = family_of(sample, families)
        if fam is None or families[fam]["type"] is None:
            raise FormatError("%s: sample of an undeclared family" % where)
        if fam != current:
            raise FormatError("%s: sample of %s outside its group" % (where, fam))
        key = (sample, tuple(sorted(labels.items())))
        if key in series:
            raise FormatError("%s: series twice" % where)
        series.add(key)
        if families[fam]["type"] == "counter" and not value >= 0:
            raise FormatError("%s: negative counter" % where)
        families[fam]["samples"].append((sample, labels, value))
    for name, fam in families.items():
        if fam["type"] is None:
            raise FormatError("%s: HELP without TYPE" % name)
        if fam["type"] == "histogram":
            check_histogram(name, fam)
        elif not fam["samples"]:
            raise FormatError("%s: a family without samples" % name)
    return families


def value(families, name, **labels):
    """The value of one series (a histogram's _count and _sum by their names)."""
    fam = family_of(name, families)
    if fam is None:
        raise AssertionError("no family for %s in %s" % (name, sorted(families)))
    for sample, lab, v in families[fam]["samples"]:
        if sample == name and lab == labels:
            return v
    raise AssertionError("no series %s%r" % (name, labels))


# ------------------------------------------------------------ the parser itself

class ParserTest(unittest.TestCase):
    """The strict reader refuses what the format does not allow, so that the
    tests below can trust it."""

    GOOD = ("# HELP a_total Things.\n# TYPE a_total counter\na_total 3\n"
            "# HELP h Durations.\n# TYPE h histogram\n"
            "h_bucket{le=\"0.5\"} 1\nh_bucket{le=\"+Inf\"} 2\nh_sum 0.75\nh_count 2\n")

    def test_accepts_a_good_exposition(self):
        f = parse_exposition(self.GOOD)
        self.assertEqual(value(f, "a_total"), 3)
        self.assertEqual(value(f, "h_count"), 2)

    def test_refuses(self):
        bad = {
            "undeclared": "x 1\n",
            "type before help": "# TYPE x gauge\n# HELP x X.\nx 1\n",
            "help only": "# HELP x X.\nx 1\n",
            "no newline at end": "# HELP x X.\n# TYPE x gauge\nx 1",
            "timestamp": "# HELP x X.\n# TYPE x gauge\nx 1 1000\n",
            "bad name": "# HELP 1x X.\n# TYPE 1x gauge\n1x 1\n",
            "bad label": "# HELP x X.\n# TYPE x gauge\nx{1a=\"b\"} 1\n",
            "bad escape": "# HELP x X.\n# TYPE x gauge\nx{a=\"\\t\"} 1\n",
            "split group": "# HELP x X.\n# TYPE x gauge\n# HELP y Y.\n# TYPE y gauge\n"
                           "y 1\nx 1\n",
            "duplicate": "# HELP x X.\n# TYPE x gauge\nx 1\nx 2\n",
            "negative counter": "# HELP x X.\n# TYPE x counter\nx -1\n",
            "not cumulative": "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 2\n"
                              "h_bucket{le=\"+Inf\"} 1\nh_sum 1\nh_count 1\n",
            "no +Inf": "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_sum 1\n"
                       "h_count 1\n",
            "count differs": "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\n"
                             "h_sum 1\nh_count 1\n",
            "no sum": "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n",
            "bad value": "# HELP x X.\n# TYPE x gauge\nx one\n",
        }
        for why, text in bad.items():
            with self.subTest(why):
                self.assertRaises(FormatError, parse_exposition, text)


# ------------------------------------------------------------ daemons

def metrics_config(extra=""):
    return "[server]\nmetrics_listen = 127.0.0.1:0\n" + extra


def start_with_metrics(testcase, config, name="lockbrokerd"):
    """A started daemon with its metrics address (from its log) as d.http."""
    d = Daemon(config=config, name=name)
    d.start()
    testcase.addCleanup(d.stop)
    m = d.wait_log(SERVING_RE)
    d.http = (m.group(1), int(m.group(2)))
    return d


def http_request(d, method, path, body=None, headers=None):
    """(status, headers dict with lower-case names, body str) of one request."""
    conn = http.client.HTTPConnection(*d.http, timeout=TIMEOUT)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode("utf-8")
    finally:
        conn.close()


# daemon/metrics.c
HTTP_MAX_CONNECTIONS = 16
HTTP_REQUEST_DEADLINE_S = 10


def http_client(d):
    """A raw connection to the metrics endpoint (lbharness.Client)."""
    return Client.tcp(*d.http)


def read_reply_head(c):
    """(status, headers dict with lower-case names) of the next reply on c."""
    line = c.line_bytes()
    m = re.fullmatch(rb"HTTP/1\.[01] (\d{3}) [^\r]*\r", line)
    if not m:
        raise AssertionError("not a status line: %r (pending %r)" % (line, c.buf[:200]))
    headers = {}
    while True:
        line = c.line_bytes()
        if line == b"\r":
            return int(m.group(1)), headers
        name, _, value = line.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()


def read_body(c, headers):
    """The body of a reply whose head was read, by its Content-Length."""
    if "content-length" not in headers:
        raise AssertionError("no Content-Length in %r" % headers)
    n = int(headers["content-length"])
    deadline = time.monotonic() + TIMEOUT
    while len(c.buf) < n and not c.eof:
        if not c._fill(deadline):
            raise AssertionError("body shorter than %d bytes: %r" % (n, c.buf[:200]))
    body, c.buf = c.buf[:n], c.buf[n:]
    return body


def scrape(d):
    status, headers, body = http_request(d, "GET", "/metrics")
    if status != 200:
        raise AssertionError("GET /metrics: %d %r" % (status, body))
    if headers.get("content-type") != CONTENT_TYPE:
        raise AssertionError("GET /metrics: Content-Type %r" % headers.get("content-type"))
    return parse_exposition(body)


# What each STAT is called in /metrics (docs in README.md and lockbrokerd.conf(5)).
# A numeric STAT missing here must appear as lockbroker_<name>, untyped.
STAT_METRICS = {
    "uptime": ("lockbroker_uptime_seconds", {}),
    "curr_connections": ("lockbroker_connections", {}),
    "total_connections": ("lockbroker_connections_accepted_total", {}),
    "rejected_connections": ("lockbroker_connections_rejected_total", {}),
    "rejected_per_address": ("lockbroker_connections_rejected_per_address_total", {}),
    "login_timeouts": ("lockbroker_login_timeouts_total", {}),
    "accept_pauses": ("lockbroker_accept_pauses_total", {}),
    "handovers": ("lockbroker_handovers_total", {}),
    "locks_held": ("lockbroker_locks_held", {}),
    "waiters": ("lockbroker_lock_waiters", {}),
    "grants": ("lockbroker_grants_total", {}),
    "timeouts": ("lockbroker_lock_timeouts_total", {}),
    "lost": ("lockbroker_locks_lost_total", {}),
    "local_handoffs": ("lockbroker_local_handoffs_total", {}),
    "errors": ("lockbroker_errors_total", {}),
    "auth_failures": ("lockbroker_auth_failures_total", {}),
    "auth_checks": ("lockbroker_auth_checks_total", {}),
    "auth_busy": ("lockbroker_auth_busy_total", {}),
    "auth_backoffs": ("lockbroker_auth_backoffs_total", {}),
    "leases": ("lockbroker_leases", {}),
    "leases_granted": ("lockbroker_leases_granted_total", {}),
    "leases_released": ("lockbroker_leases_released_total", {}),
    "leases_expired": ("lockbroker_leases_expired_total", {}),
    "sessions": ("lockbroker_sessions", {}),
    "sessions_detached": ("lockbroker_sessions_detached", {}),
    "sessions_resumed": ("lockbroker_sessions_resumed_total", {}),
    "sessions_expired": ("lockbroker_sessions_expired_total", {}),
    "zk_session_timeout_ms": ("lockbroker_zk_session_timeout_seconds", {}),
    "zk_sessions": ("lockbroker_zk_sessions_total", {}),
    "zk_reconnects": ("lockbroker_zk_reconnects_total", {}),
    "zk_outstanding": ("lockbroker_zk_outstanding_requests", {}),
    "zk_requests": ("lockbroker_zk_lock_operations", {}),
    "zk_leases_removed": ("lockbroker_zk_leases_removed_total", {}),
    "zk_idle_nodes": ("lockbroker_zk_idle_nodes", {}),
    "zk_idle_reuses": ("lockbroker_zk_idle_reuses_total", {}),
    "lock_delays": ("lockbroker_lock_delays_total", {}),
    "locks_delayed": ("lockbroker_locks_delayed", {}),
    "locks_kept": ("lockbroker_locks_kept_total", {}),
    "locks_broken": ("lockbroker_locks_broken_total", {}),
    "locks_keepable": ("lockbroker_locks_keepable", {}),
    "keep_refused": ("lockbroker_keep_refused_total", {}),
    "zk_session_delays": ("lockbroker_zk_session_lock_delays_total", {}),
    "zk_window_probes": ("lockbroker_zk_window_probes_total", {}),
    "zk_window_confirms": ("lockbroker_zk_window_confirms_total", {}),
    "zk_window_age_ms": ("lockbroker_zk_window_age_seconds", {}),
    "zk_session_confirmed": ("lockbroker_zk_session_confirmed", {}),
    "zk_grants_unlisted": ("lockbroker_zk_grants_unlisted_total", {}),
    "zk_token_writes_due": ("lockbroker_zk_token_writes_due", {}),
    "zk_token_writes_spared": ("lockbroker_zk_token_writes_spared_total", {}),
    "zk_nonfair_races_won": ("lockbroker_zk_nonfair_races_won_total", {}),
    "zk_nonfair_races_lost": ("lockbroker_zk_nonfair_races_lost_total", {}),
    "zk_batches": ("lockbroker_zk_batches_total", {}),
    "zk_batched_ops": ("lockbroker_zk_batched_ops_total", {}),
    "zk_batch_failures": ("lockbroker_zk_batch_failures_total", {}),
    "zk_batch_resent": ("lockbroker_zk_batch_resent_total", {}),
    "zk_batches_inflight": ("lockbroker_zk_batches_inflight", {}),
    "zk_write_queue": ("lockbroker_zk_write_queue_length", {}),
    "handovers_given_up": ("lockbroker_handovers_given_up_total", {}),
    "reload_failures": ("lockbroker_reload_failures_total", {}),
    "reloads": ("lockbroker_reloads_total", {}),
    "last_reload_ok": ("lockbroker_last_reload_ok", {}),
    "tls_handshake_failures": ("lockbroker_tls_handshake_failures_total", {}),
    "tls_cert_expiry": ("lockbroker_tls_certificate_expiry_seconds", {}),
    "oldest_hold_ms": ("lockbroker_oldest_hold_seconds", {}),
    "longest_wait_ms": ("lockbroker_longest_wait_seconds", {}),
}
# Statistics that move on their own between STATS and the scrape: the
# window's probe rounds go out every tenth of the session timeout.
GROWING_STATS = ("uptime", "zk_window_probes", "zk_window_confirms", "zk_batches",
                 "zk_batched_ops", "zk_requests")
# Gauges of ZooKeeper work that the daemon does on its own between the STATS
# and the scrape (a probe round every tenth of the session timeout, the
# token write after a grant, an idle node's end): only their range is checked.
MOVING_GAUGES = ("zk_outstanding", "zk_batches_inflight", "zk_write_queue", "zk_idle_nodes",
                 "zk_lock_operations", "zk_token_writes_due")
# Ages in ms that grow between the STATS and the scrape (in seconds there).
AGE_STATS = ("oldest_hold_ms", "longest_wait_ms")
# Words, not numbers: version and mode are labels of lockbroker_info, zk_state
# is lockbroker_zk_session_state; the session id is left to STATS.
WORD_STATS = ("version", "mode", "zk_state", "zk_session_id")


def metric_of(stat):
    if stat in STAT_METRICS:
        return STAT_METRICS[stat]
    if stat.startswith("cmd_"):
        return "lockbroker_commands_total", {"command": stat[4:]}
    if stat.startswith("grants_"):
        return "lockbroker_mode_grants_total", {"mode": stat[7:]}
    return "lockbroker_" + stat, {}


def check_every_stat_exported(testcase, d):
    """Every numeric STAT is in /metrics with the same value (uptime may
    have moved on), under its name; the words as labels."""
    with d.client() as c:
        st = read_stats(c)
        # The STATS connection is still open: the gauges agree.
        f = scrape(d)
    for stat, text in st.items():
        if stat in WORD_STATS:
            continue
        testcase.assertRegex(text, r"^-?\d+$", "STAT %s is not a number" % stat)
        name, labels = metric_of(stat)
        got = value(f, name, **labels)
        if stat in GROWING_STATS:
            testcase.assertGreaterEqual(got, int(text))
        elif stat in MOVING_GAUGES:
            testcase.assertGreaterEqual(got, 0, "STAT %s vs %s%r" % (stat, name, labels))
        elif stat == "zk_window_age_ms":
            # Grows, and falls back whenever a probe round confirms the session.
            testcase.assertGreaterEqual(got, 0)
            testcase.assertLessEqual(got, int(st["zk_session_timeout_ms"]) / 1000.0)
        elif stat in AGE_STATS:
            testcase.assertGreaterEqual(got, int(text) / 1000.0)
        elif stat == "tls_cert_expiry":
            # Counts down between the STATS and the scrape.
            testcase.assertLessEqual(got, int(text))
            testcase.assertGreaterEqual(got, int(text) - scaled(60.0))
        elif stat == "zk_session_timeout_ms":
            testcase.assertEqual(got, int(text) / 1000.0)
        else:
            testcase.assertEqual(got, int(text), "STAT %s vs %s%r" % (stat, name, labels))
        if stat not in STAT_METRICS and not stat.startswith(("cmd_", "grants_")):
            testcase.assertEqual(f[name]["type"], "untyped")
    testcase.assertEqual(value(f, "lockbroker_info", version=st["version"], mode=st["mode"]), 1)
    return st, f


class EmbeddedTest(unittest.TestCase):
    def setUp(self):
        self.d = start_with_metrics(self, metrics_config())

    def test_exposition_is_strict_and_complete(self):
        f = scrape(self.d)
        for name in ("lockbroker_info", "lockbroker_grants_total", "lockbroker_commands_total",
                     "lockbroker_mode_grants_total", "lockbroker_lock_wait_seconds",
                     "lockbroker_lock_hold_seconds"):
            self.assertIn(name, f)
        self.assertEqual(f["lockbroker_lock_wait_seconds"]["type"], "histogram")
        self.assertEqual(f["lockbroker_grants_total"]["type"], "counter")
        self.assertEqual(f["lockbroker_locks_held"]["type"], "gauge")
        # Embedded mode: no ZooKeeper families.
        self.assertFalse([n for n in f if n.startswith("lockbroker_zk_")])
        # Every name carries the prefix; counters end in _total.
        for name, fam in f.items():
            self.assertTrue(name.startswith("lockbroker_"), name)
            if fam["type"] == "counter":
                self.assertTrue(name.endswith("_total"), name)
        # No label names a lock (the number of names is unbounded).
        labels = {k for fam in f.values() for _, lab, _ in fam["samples"] for k in lab}
        self.assertLessEqual(labels, {"le", "mode", "command", "version", "state"})
        check_every_stat_exported(self, self.d)

    def test_counters_move_with_the_operations(self):
        d = self.d
        f0 = scrape(d)

        def delta(f, name, **labels):
            return value(f, name, **labels) - value(f0, name, **labels)

        holder, other, waiter = d.client(), d.client(), d.client()
        self.addCleanup(holder.close)
        self.addCleanup(other.close)
        self.addCleanup(waiter.close)
        holder.send("LOCK a\n")
        holder.expect_match(r"OK a \d+")
        other.send("TRYLOCK a\n")
        other.expect("BUSY a")
        other.send("LOCK a 1\n")
        other.expect("TIMEOUT a")
        waiter.send("LOCK a 60000\n")
        d.wait_queued(waiter, "a")
        f1 = scrape(d)
        self.assertEqual(delta(f1, "lockbroker_grants_total"), 1)
        self.assertEqual(delta(f1, "lockbroker_mode_grants_total", mode="exclusive"), 1)
        self.assertEqual(delta(f1, "lockbroker_commands_total", command="lock"), 3)
        self.assertEqual(delta(f1, "lockbroker_commands_total", command="trylock"), 1)
        self.assertEqual(delta(f1, "lockbroker_lock_timeouts_total"), 1)
        self.assertEqual(value(f1, "lockbroker_locks_held"), 1)
        self.assertEqual(value(f1, "lockbroker_lock_waiters"), 1)
        # A grant at once is a wait observed; busy and timed-out requests are not.
        self.assertEqual(delta(f1, "lockbroker_lock_wait_seconds_count"), 1)
        self.assertEqual(delta(f1, "lockbroker_lock_hold_seconds_count"), 0)

        holder.send("UNLOCK a\n")
        holder.expect("OK a")
        waiter.expect_match(r"OK a \d+")
        f2 = scrape(d)
        self.assertEqual(delta(f2, "lockbroker_grants_total"), 2)
        self.assertEqual(delta(f2, "lockbroker_commands_total", command="unlock"), 1)
        self.assertEqual(delta(f2, "lockbroker_lock_wait_seconds_count"), 2)
        self.assertEqual(delta(f2, "lockbroker_lock_hold_seconds_count"), 1)
        self.assertGreater(value(f2, "lockbroker_lock_hold_seconds_sum"),
                           value(f0, "lockbroker_lock_hold_seconds_sum"))
        self.assertEqual(value(f2, "lockbroker_lock_waiters"), 0)

        # Modes, an error, and a close that ends a hold.
        other.send("LOCK s shared\n")
        other.expect_match(r"OK s \d+")
        other.send("LOCK n limit=2\n")
        other.expect_match(r"OK n \d+")
        other.send("BOGUS\n")
        self.assertRegex(other.line(), r"^ERR ")
        waiter.close()
        d.wait_log(r"\(%s\): closed" % re.escape(waiter.local), since=waiter.mark)
        f3 = scrape(d)
        self.assertEqual(delta(f3, "lockbroker_mode_grants_total", mode="shared"), 1)
        self.assertEqual(delta(f3, "lockbroker_mode_grants_total", mode="limit"), 1)
        self.assertEqual(delta(f3, "lockbroker_errors_total"), 1)
        self.assertEqual(delta(f3, "lockbroker_lock_hold_seconds_count"), 2)
        self.assertEqual(value(f3, "lockbroker_locks_held"), 2)
        check_every_stat_exported(self, d)

    def test_oldest_hold_and_longest_wait_gauges(self):
        d = self.d

        def ages():
            f = scrape(d)
            return (value(f, "lockbroker_oldest_hold_seconds"),
                    value(f, "lockbroker_longest_wait_seconds"))

        def poll(pred, what):
            deadline = time.monotonic() + scaled(10.0)
            while True:
                got = ages()
                if pred(*got):
                    return got
                if time.monotonic() > deadline:
                    self.fail("%s: (oldest hold, longest wait) stayed %r" % (what, got))

        self.assertEqual(ages(), (0, 0))
        f = scrape(d)
        self.assertEqual(f["lockbroker_oldest_hold_seconds"]["type"], "gauge")
        self.assertEqual(f["lockbroker_longest_wait_seconds"]["type"], "gauge")
        holder, waiter = d.client(), d.client()
        self.addCleanup(holder.close)
        self.addCleanup(waiter.close)
        holder.send("LOCK a\n")
        holder.expect_match(r"OK a \d+")
        # Held for a millisecond or more: the gauge is above 0; nobody waits.
        hold, wait = poll(lambda h, w: h > 0, "a hold")
        self.assertEqual(wait, 0)
        waiter.send("LOCK a 60000\n")
        d.wait_queued(waiter, "a")
        hold, wait = poll(lambda h, w: w > 0, "a queued waiter")
        self.assertGreaterEqual(hold, wait)     # held before the waiter asked
        # The waiter is granted: it waits no more and its hold is the only one.
        holder.send("UNLOCK a\n")
        holder.expect("OK a")
        waiter.expect_match(r"OK a \d+")
        self.assertEqual(ages()[1], 0)
        waiter.send("UNLOCK a\n")
        waiter.expect("OK a")
        self.assertEqual(ages(), (0, 0))
        check_every_stat_exported(self, d)

    def test_health_gauge_follows_healthz(self):
        f = scrape(self.d)
        self.assertEqual(f["lockbroker_healthy"]["type"], "gauge")
        self.assertEqual(value(f, "lockbroker_healthy"), 1)
        self.assertEqual(http_request(self.d, "GET", "/healthz")[0], 200)

    def test_reload_failures_are_counted(self):
        d = self.d
        f0 = scrape(d)
        self.assertEqual(value(f0, "lockbroker_reload_failures_total"), 0)
        # A reload that loads: nothing counted.
        mark = d.log_mark()
        d.send_signal(signal.SIGHUP)
        d.wait_log(r"reloaded: ", since=mark)
        self.assertEqual(value(scrape(d), "lockbroker_reload_failures_total"), 0)
        # A file that does not parse: counted, the running settings stay.
        with open(d.config_path, "a") as f:
            f.write("[server]\nno_such_setting = 1\n")
        mark = d.log_mark()
        d.send_signal(signal.SIGHUP)
        d.wait_log(r"reload failed: .*; serving on with the settings before", since=mark)
        f1 = scrape(d)
        self.assertEqual(value(f1, "lockbroker_reload_failures_total"), 1)
        self.assertEqual(f1["lockbroker_reload_failures_total"]["type"], "counter")
        self.assertEqual(stats(d)["reload_failures"], "1")

    def test_healthz(self):
        status, headers, body = http_request(self.d, "GET", "/healthz")
        self.assertEqual((status, body), (200, "ok\n"))
        self.assertEqual(headers.get("content-type"), "text/plain; charset=utf-8")

    def test_head(self):
        for path in ("/metrics", "/healthz"):
            status, _, body = http_request(self.d, "HEAD", path)
            self.assertEqual((status, body), (200, ""), path)

    def test_head_gives_the_length_and_no_body(self):
        # libevent 2.1 sent HEAD replies with their body and no length: a
        # client that keeps the connection took the body for the next reply.
        for path in ("/metrics", "/healthz"):
            with http_client(self.d) as c:
                c.send("HEAD %s HTTP/1.1\r\nHost: x\r\n\r\n"
                       "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" % path)
                status, headers = read_reply_head(c)
                self.assertEqual(status, 200, path)
                self.assertIn("content-length", headers, path)
                if path == "/healthz":
                    self.assertEqual(headers["content-length"], "3")
                else:
                    self.assertGreater(int(headers["content-length"]), 1000)
                # No body: the next bytes are the next reply's.
                status, headers = read_reply_head(c)
                self.assertEqual((status, read_body(c, headers)), (200, b"ok\n"), path)

    def test_conflicting_content_lengths_get_400_and_a_close(self):
        with http_client(self.d) as c:
            c.send("POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
                   "Content-Length: 40\r\n\r\nxGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            status, headers = read_reply_head(c)
            self.assertEqual(status, 400)
            self.assertEqual(headers.get("connection"), "close")
            read_body(c, headers)
            c.expect_eof()
        # The same length twice is one length.
        with http_client(self.d) as c:
            c.send("POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n"
                   "Content-Length: 1\r\n\r\nx")
            self.assertEqual(read_reply_head(c)[0], 405)

    def test_a_request_trickled_in_is_closed_at_its_deadline(self):
        # A byte a second keeps libevent's per-read timeout (10 s) from ever
        # firing; the whole request has HTTP_REQUEST_DEADLINE_S.
        c = http_client(self.d)
        self.addCleanup(c.close)
        mark = self.d.log_mark()
        request = b"GET /metrics HTTP/1.1\r\nX-Slow: " + b"a" * 1000
        give_up = time.monotonic() + scaled(HTTP_REQUEST_DEADLINE_S + 10)
        sent = 0
        while not c.eof:
            if time.monotonic() > give_up:
                self.fail("still open after %d bytes, one a second" % sent)
            if c._fill(time.monotonic() + 1):
                continue
            try:
                c.sock.send(request[sent:sent + 1])
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += 1
        self.assertEqual(c.buf, b"")
        self.d.wait_log(r"metrics: 127\.0\.0\.1:\d+ sent no whole request within %d s; closing$"
                        % HTTP_REQUEST_DEADLINE_S, since=mark)
        self.assertEqual(http_request(self.d, "GET", "/healthz")[0], 200)

    def test_connections_beyond_the_budget_wait_for_one_to_close(self):
        idle = [http_client(self.d) for _ in range(HTTP_MAX_CONNECTIONS)]
        for c in idle:
            self.addCleanup(c.close)
        late = http_client(self.d)     # connected: the kernel's backlog takes it
        self.addCleanup(late.close)
        late.send("GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        # Not accepted while the others are open: no reply within a second.
        self.assertFalse(late._fill(time.monotonic() + scaled(1)),
                         "answered beyond the budget: %r" % late.buf[:200])
        idle[0].close()
        status, headers = read_reply_head(late)
        self.assertEqual((status, read_body(late, headers)), (200, b"ok\n"))

    def test_other_paths_404(self):
        for path in ("/metric", "/metrics/", "/healthz/x", "/favicon.ico"):
            status, _, body = http_request(self.d, "GET", path)
            self.assertEqual(status, 404, path)
            self.assertIn("not found", body)
        # A query string does not change the path.
        status, _, _ = http_request(self.d, "GET", "/metrics?name[]=x")
        self.assertEqual(status, 200)

    def test_other_methods_405(self):
        for method in ("POST", "PUT", "DELETE", "OPTIONS", "PATCH"):
            for path in ("/metrics", "/healthz"):
                status, headers, _ = http_request(self.d, method, path, body="x")
                self.assertEqual(status, 405, (method, path))
                self.assertEqual(headers.get("allow"), "GET, HEAD")
        self.assertEqual(http_request(self.d, "GET", "/healthz")[0], 200)

    def test_requests_are_bounded(self):
        # Headers beyond 8 KiB and a body beyond 1 KiB are refused; the
        # endpoint and the lock port keep serving.
        for kind, headers, body in (("headers", {"X-Big": "x" * 9000}, None),
                                    ("body", {}, "x" * 4096)):
            s = socket.create_connection(self.d.http, timeout=TIMEOUT)
            try:
                req = "POST /metrics HTTP/1.1\r\nHost: x\r\n"
                for k, v in headers.items():
                    req += "%s: %s\r\n" % (k, v)
                if body:
                    req += "Content-Length: %d\r\n" % len(body)
                s.sendall((req + "\r\n" + (body or "")).encode())
                reply = b""
                while True:
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    reply += chunk
            except ConnectionResetError:
                reply = b""
            finally:
                s.close()
            status = re.match(rb"HTTP/1\.[01] (\d+)", reply)
            # Refused: a 4xx other than 405 (the method is not looked at), or
            # a closed connection.
            self.assertTrue(status is None or (status.group(1).startswith(b"4") and
                                               status.group(1) != b"405"), (kind, reply[:200]))
        self.assertEqual(http_request(self.d, "GET", "/healthz")[0], 200)
        with self.d.client() as c:
            c.send("PING\n")
            c.expect("PONG")


class SettingTest(unittest.TestCase):
    def test_off_by_default(self):
        d = Daemon()
        d.start()
        self.addCleanup(d.stop)
        with d.client() as c:
            c.send("PING\n")
            c.expect("PONG")
        self.assertIsNone(d.find_log(r"metrics: "))

    def test_address_in_use_stops_the_start(self):
        s = socket.socket()
        self.addCleanup(s.close)
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        d = Daemon(config="[server]\nmetrics_listen = 127.0.0.1:%d\n" % port)
        self.assertRaises(AssertionError, d.start, scaled(5.0))
        d.kill()
        self.assertIsNotNone(d.find_log(r"error metrics_listen 127\.0\.0\.1:%d: " % port))


# ------------------------------------------------------------ distributed mode

zk_available = zkharness.available


class TlsMetricsTest(unittest.TestCase):
    """The certificate's expiry gauge and the handshake failure counter."""

    def setUp(self):
        if not lbpki.have_openssl():
            lbharness.skip("openssl", "no openssl command to make certificates with")
        self.pki = lbpki.Pki(os.path.join(lbharness.make_tmpdir(), "pki"))
        self.cert, self.key = self.pki.issue("localhost", server=True)
        self.d = start_with_metrics(self, metrics_config(
            lbpki.tls_section(self.cert, self.key, self.pki.ca, client_certs="none")))
        m = self.d.wait_log(lbpki.TLS_LISTEN_RE)
        self.tls_host, self.tls_port, _ = lbharness.parse_hostport(m.group(1))

    def not_after(self):
        out = subprocess.run(["openssl", "x509", "-noout", "-enddate", "-in", self.cert],
                             check=True, capture_output=True, text=True).stdout
        return ssl.cert_time_to_seconds(out.strip().split("=", 1)[1])

    def test_certificate_expiry(self):
        f = scrape(self.d)
        self.assertEqual(f["lockbroker_tls_certificate_expiry_seconds"]["type"], "gauge")
        got = value(f, "lockbroker_tls_certificate_expiry_seconds")
        expected = self.not_after() - time.time()
        # lbpki's certificates are valid for 2 days; the scrape came after the clock read.
        self.assertGreater(expected, 86400)
        self.assertLessEqual(abs(got - expected), scaled(60.0))
        check_every_stat_exported(self, self.d)

    def test_handshake_failures(self):
        d = self.d
        self.assertEqual(value(scrape(d), "lockbroker_tls_handshake_failures_total"), 0)
        # A good handshake is not counted.
        ctx = ssl.create_default_context(cafile=self.pki.ca)
        with ctx.wrap_socket(socket.create_connection((self.tls_host, self.tls_port),
                                                      timeout=scaled(20.0)),
                             server_hostname="127.0.0.1") as s:
            s.sendall(b"PING\n")
            self.assertEqual(s.recv(64), b"PONG\n")
        # Plain text on the TLS port fails the handshake.
        mark = d.log_mark()
        with socket.create_connection((self.tls_host, self.tls_port), timeout=scaled(20.0)) as s:
            s.sendall(b"PING\n")
            d.wait_log(r"TLS handshake failed", since=mark)
        f = scrape(d)
        self.assertEqual(value(f, "lockbroker_tls_handshake_failures_total"), 1)
        self.assertEqual(f["lockbroker_tls_handshake_failures_total"]["type"], "counter")


class DistributedTest(unittest.TestCase):
    def setUp(self):
        if not zk_available():
            lbharness.skip("zk", "ZooKeeper (java + Debian's zookeeper jars) not installed")
        self.zk = ZkServer(tick_ms=500, name="zk-metrics",
                           base_dir=tempfile.mkdtemp(prefix="lbmetrics-zk-"))
        self.addCleanup(self._stop_zk)
        self.zk.start()

    def _stop_zk(self):
        self.zk.stop(grace=5.0)
        self.zk.cleanup()
        shutil.rmtree(self.zk.dir, ignore_errors=True)

    def test_health_and_session_state_follow_zookeeper(self):
        d = start_with_metrics(self, metrics_config(
            "[zookeeper]\nhosts = %s\nroot = /lbmetrics\nsession_timeout_ms = 12000\n"
            "tick_ms = 500\n"
            % self.zk.connect_string))
        d.wait_log(r"zk: new session 0x[0-9a-f]+", scaled(15.0))
        self.assertEqual(http_request(d, "GET", "/healthz")[:3:2], (200, "ok\n"))
        with d.client() as c:
            c.send("LOCK m\n")
            c.expect_match(r"OK m \d+")
            c.send("UNLOCK m\n")
            c.expect("OK m")
        f = scrape(d)
        self.assertEqual(value(f, "lockbroker_zk_session_state", state="connected"), 1)
        self.assertEqual(value(f, "lockbroker_zk_session_state", state="connecting"), 0)
        self.assertEqual(value(f, "lockbroker_zk_session_state", state="expired"), 0)
        self.assertEqual(value(f, "lockbroker_zk_session_confirmed"), 1)
        self.assertEqual(value(f, "lockbroker_healthy"), 1)
        self.assertEqual(f["lockbroker_zk_session_confirmed"]["type"], "gauge")
        self.assertEqual(f["lockbroker_zk_batches_total"]["type"], "counter")
        self.assertEqual(f["lockbroker_zk_write_queue_length"]["type"], "gauge")
        self.assertEqual(value(f, "lockbroker_info", version=stats(d)["version"],
                               mode="distributed"), 1)
        # The lock took ZooKeeper requests (create, list...): their latency.
        self.assertGreater(value(f, "lockbroker_zk_request_duration_seconds_count"), 0)
        self.assertGreaterEqual(value(f, "lockbroker_zk_sessions_total"), 1)
        # The lock's create and delete went out in multis: one observation per
        # multi, the sum their writes, as STATS counts them (nothing ran since).
        st = stats(d)
        self.assertGreaterEqual(int(st["zk_batches"]), 1)
        self.assertEqual(value(f, "lockbroker_zk_batch_size_ops_count"), int(st["zk_batches"]))
        self.assertEqual(value(f, "lockbroker_zk_batch_size_ops_sum"), int(st["zk_batched_ops"]))
        self.assertEqual(value(f, "lockbroker_zk_batch_size_ops_bucket", le="+Inf"),
                         int(st["zk_batches"]))
        check_every_stat_exported(self, d)

        mark = d.log_mark()
        self.zk.stop(grace=5.0)
        d.wait_log(r"zk: disconnected from ZooKeeper", scaled(15.0), since=mark)
        status, headers, body = http_request(d, "GET", "/healthz")
        self.assertEqual(status, 503)
        self.assertRegex(body, r"^ZooKeeper unreachable for \d+ s \((no ZooKeeper server accepts "
                         r"a session|no server accepted a connection)\): [^\n]*\n$")
        f = scrape(d)
        self.assertEqual(value(f, "lockbroker_zk_session_state", state="connected"), 0)
        self.assertEqual(value(f, "lockbroker_zk_session_state", state="connecting"), 1)
        self.assertEqual(value(f, "lockbroker_zk_session_confirmed"), 0)
        # The health gauge says what /healthz says (one function decides both).
        self.assertEqual(value(f, "lockbroker_healthy"), 0)
        # HEAD says the same without the body.
        self.assertEqual(http_request(d, "HEAD", "/healthz")[0], 503)

        mark = d.log_mark()
        self.zk.start()
        d.wait_log(r"zk: (reconnected to|new) session 0x[0-9a-f]+", scaled(30.0), since=mark)
        status, _, body = http_request(d, "GET", "/healthz")
        if status == 503 and "no request of the session is confirmed" in body:
            # Reconnected after its holds were presumed lost: healthy once a
            # request is confirmed through the leader again, which it logs.
            d.wait_log(r"zk: session 0x[0-9a-f]+ confirmed through the ZooKeeper leader again",
                       scaled(15.0), since=mark)
            status, _, body = http_request(d, "GET", "/healthz")
        self.assertEqual((status, body), (200, "ok\n"))
        f = scrape(d)
        self.assertEqual(value(f, "lockbroker_zk_session_state", state="connected"), 1)
        # Confirmed, as /healthz said: locks may be granted again.
        self.assertEqual(value(f, "lockbroker_zk_session_confirmed"), 1)
        self.assertEqual(value(f, "lockbroker_healthy"), 1)


if __name__ == "__main__":
    unittest.main()
