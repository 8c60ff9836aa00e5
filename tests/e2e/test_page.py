#!/usr/bin/env python3
"""End-to-end tests of the live page on the metrics listener: GET / and the
JSON it polls, GET /locks.json (daemon/live_page.c, daemon/page/).

PageJsonTest reads /locks.json and the page's files with http.client.
PageBrowserTest opens the page in headless Chromium (Debian's chromium and
chromium-driver, driven by python3-selenium) and asserts what a person
sees: rows appear and go as clients lock, queue and release, with no
reload. It is skipped (key "chromium") where those are missing.

Nothing sleeps to synchronise: the browser's state is awaited with
WebDriverWait on the DOM, the daemon's with replies. No test asserts how
long anything took.
"""

import http.client
import json
import os
import shutil
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lbharness  # noqa: E402
from lbharness import Daemon, TIMEOUT, scaled  # noqa: E402
import zkharness  # noqa: E402

SERVING_RE = r"metrics: serving /metrics and /healthz on http://(\S+):(\d+)$"
CONFIG = "[server]\nmetrics_listen = 127.0.0.1:0\n"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"

# python3-selenium is Debian's: where `python3` on PATH is another
# interpreter (a pyenv build, say), run this file under Debian's instead.
DEBIAN_PYTHON = "/usr/bin/python3"
try:
    import selenium  # noqa: F401
except ImportError:
    if (os.access(DEBIAN_PYTHON, os.X_OK) and os.path.realpath(sys.executable) !=
            os.path.realpath(DEBIAN_PYTHON) and not os.environ.get("LB_PAGE_REEXEC")):
        os.environ["LB_PAGE_REEXEC"] = "1"
        os.execv(DEBIAN_PYTHON, [DEBIAN_PYTHON] + sys.argv)

try:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    HAVE_SELENIUM = True
except ImportError:
    HAVE_SELENIUM = False

HAVE_BROWSER = HAVE_SELENIUM and os.access(CHROMIUM, os.X_OK) and \
    os.access(CHROMEDRIVER, os.X_OK)


def start_daemon(testcase):
    d = Daemon(config=CONFIG)
    d.start()
    testcase.addCleanup(d.stop)
    m = d.wait_log(SERVING_RE)
    d.http = (m.group(1), int(m.group(2)))
    return d


def http_get(d, path, method="GET"):
    """(status, headers with lower-case names, body str)."""
    conn = http.client.HTTPConnection(*d.http, timeout=TIMEOUT)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        body = r.read().decode("ascii")
        return r.status, {k.lower(): v for k, v in r.getheaders()}, body
    finally:
        conn.close()


def locks_json(d, query=""):
    status, headers, body = http_get(d, "/locks.json" + query)
    if status != 200:
        raise AssertionError("GET /locks.json%s: %d %r" % (query, status, body))
    return json.loads(body)


def labelled(testcase, d, label):
    """A client of d with CLIENT label set, closed at the test's end."""
    c = d.client()
    testcase.addCleanup(c.close)
    c.request("CLIENT %s" % label)
    return c


def lock(c, name, wait="0", opts=""):
    """LOCK name wait opts; returns its token."""
    line = c.request(("LOCK %s %s %s" % (name, wait, opts)).rstrip())
    parts = line.split()
    if parts[:2] != ["OK", name]:
        raise AssertionError("LOCK %s: %r" % (name, line))
    return parts[2]


def json_when(d, cond, what, query=""):
    """/locks.json once cond(it) holds: polled until a deadline, which fails."""
    deadline = time.monotonic() + TIMEOUT
    while True:
        data = locks_json(d, query)
        if cond(data):
            return data
        if time.monotonic() > deadline:
            raise AssertionError("/locks.json never showed %s: %r" % (what, data))
        time.sleep(0.01)     # a poll's pace, not a synchronisation


class PageJsonTest(unittest.TestCase):
    """/locks.json, the page's files and their headers."""

    def setUp(self):
        self.d = start_daemon(self)

    def test_fields_of_a_hold_and_a_waiter(self):
        holder = labelled(self, self.d, "holder-1")
        token = lock(holder, "json-job")
        waiter = labelled(self, self.d, "waiter-1")
        waiter.send("LOCK json-job 20000\r\n")
        data = json_when(self.d, lambda j: j["waiting"] == 1, "the waiter queued")
        self.assertEqual(set(data), {"daemon", "mode", "now_ms", "health", "counters", "held",
                                     "waiting", "match", "queue_age_ms", "limit", "locks",
                                     "truncated"})
        self.assertIsNone(data["queue_age_ms"])
        self.assertEqual(data["mode"], "embedded")
        self.assertEqual(data["health"], {"ok": True, "status": 200, "reason": None,
                                          "down_ms": None, "zk_state": None,
                                          "zk_session_confirmed": None,
                                          "zk_window_age_ms": None})
        self.assertEqual(data["counters"], {"grants": 1, "timeouts": 0, "lost": 0})
        self.assertEqual((data["held"], data["match"], data["limit"], data["truncated"]),
                         (1, None, 200, False))
        [lk] = data["locks"]
        self.assertEqual({k: v for k, v in lk.items() if k not in ("holds", "waits")},
                         {"name": "json-job", "mode": "exclusive", "limit": 0, "holders": 1,
                          "waiters": 1, "delay_ms": 0, "recipe": None, "queue": 2})
        [h] = lk["holds"]
        self.assertGreaterEqual(h.pop("held_ms"), 0)
        self.assertEqual(h, {"holder": holder.local, "label": "holder-1", "mode": "exclusive",
                             "token": token, "kept": False, "lease_ms": None})
        [w] = lk["waits"]
        self.assertGreaterEqual(w.pop("waited_ms"), 0)
        self.assertEqual(w, {"holder": waiter.local, "label": "waiter-1", "mode": "exclusive"})
        # Released: the waiter holds it, granted after a wait.
        holder.request("UNLOCK json-job")
        waiter.expect_match(r"OK json-job \d+")
        data = locks_json(self.d)
        self.assertEqual([h["label"] for h in data["locks"][0]["holds"]], ["waiter-1"])
        self.assertEqual(data["locks"][0]["waits"], [])
        self.assertEqual((data["counters"]["grants"], data["waiting"]), (2, 0))

    def test_kept_and_lease(self):
        gone = labelled(self, self.d, "gone")
        token = lock(gone, "kept-job", opts="delay=60000")
        lease = labelled(self, self.d, "leaser")
        lock(lease, "lease-job", opts="ttl=60000")
        gone.close()
        data = json_when(self.d, lambda j: j["locks"][0]["holds"][0]["kept"],
                         "the hold kept after its client left")
        [kept, leased] = data["locks"]
        self.assertEqual((kept["name"], kept["holds"][0]["token"], kept["holds"][0]["label"]),
                         ("kept-job", token, "gone"))
        self.assertGreater(kept["delay_ms"], 0)
        self.assertEqual((leased["name"], leased["holds"][0]["kept"]), ("lease-job", False))
        self.assertGreater(leased["holds"][0]["lease_ms"], 0)

    def test_bounded_and_filtered(self):
        c = labelled(self, self.d, "many")
        for name in ("b-1", "b-2", "b-3", "other"):
            lock(c, name)
        data = locks_json(self.d, "?limit=2")
        self.assertEqual(([lk["name"] for lk in data["locks"]], data["truncated"]),
                         (["b-1", "b-2"], True))
        data = locks_json(self.d, "?match=b-*")
        self.assertEqual(([lk["name"] for lk in data["locks"]], data["truncated"],
                          data["match"]), (["b-1", "b-2", "b-3"], False, "b-*"))
        data = locks_json(self.d, "?match=b-*&limit=3")
        self.assertFalse(data["truncated"])
        self.assertEqual(locks_json(self.d, "?match=nothing*")["locks"], [])
        for query in ("?limit=0", "?limit=1001", "?limit=x", "?limit=-1",
                      "?match=" + "a" * 256, "?match=a%01"):
            status, _, body = http_get(self.d, "/locks.json" + query)
            self.assertEqual(status, 400, (query, body))

    def test_label_is_escaped(self):
        label = "<script>alert(\"x\\y\")</script>&"
        c = labelled(self, self.d, label)
        lock(c, "esc")
        status, _, body = http_get(self.d, "/locks.json")
        self.assertEqual(status, 200)
        self.assertNotIn("<", body)
        self.assertNotIn("&", body)
        self.assertEqual(json.loads(body)["locks"][0]["holds"][0]["label"], label)

    def test_files_and_headers(self):
        for path, ctype in (("/", "text/html; charset=utf-8"),
                            ("/page.js", "text/javascript; charset=utf-8"),
                            ("/page.css", "text/css; charset=utf-8"),
                            ("/locks.json", "application/json")):
            status, headers, body = http_get(self.d, path)
            self.assertEqual((status, headers["content-type"]), (200, ctype), path)
            self.assertEqual(headers["content-security-policy"], "default-src 'self'", path)
            self.assertEqual(headers["x-content-type-options"], "nosniff", path)
            self.assertTrue(body, path)
            status, headers, head_body = http_get(self.d, path, "HEAD")
            self.assertEqual((status, head_body), (200, ""), path)
            if path != "/locks.json":    # the JSON carries the time: lengths differ
                self.assertEqual(int(headers["content-length"]), len(body), path)
        html = http_get(self.d, "/")[2]
        # Nothing from elsewhere, and nothing inline the policy would block.
        self.assertNotIn("http://", html.replace('"http://www.w3.org', ""))
        self.assertNotIn("https://", html)
        self.assertNotIn("<script>", html)
        self.assertNotIn("style=", html)

    def test_unknown_paths_404(self):
        for path in ("/index.html", "/locks.json/", "/page.js/x", "/favicon.ico", "/nope"):
            status, _, body = http_get(self.d, path)
            self.assertEqual(status, 404, path)
            self.assertIn("not found", body)
        status, headers, _ = http_get(self.d, "/locks.json", "POST")
        self.assertEqual((status, headers.get("allow")), (405, "GET, HEAD"))


zk_available = zkharness.available


class PageDistributedTest(unittest.TestCase):
    """/locks.json in distributed mode: the session's health, and the queue
    across daemons from the backend's gathering."""

    def setUp(self):
        if not zk_available():
            lbharness.skip("zk", "ZooKeeper (java + Debian's zookeeper jars) not installed")
        self.zk = zkharness.ZkServer(tick_ms=500, name="zk-page",
                                     base_dir=tempfile.mkdtemp(prefix="lbpage-zk-"))
        self.addCleanup(self._stop_zk)
        self.zk.start()

    def _stop_zk(self):
        self.zk.stop(grace=5.0)
        self.zk.cleanup()
        shutil.rmtree(self.zk.dir, ignore_errors=True)

    def test_health_and_queue_across_daemons(self):
        zk = ("[zookeeper]\nhosts = %s\nroot = /lbpage\nsession_timeout_ms = 12000\n"
              "tick_ms = 500\n" % self.zk.connect_string)
        a = Daemon(config=CONFIG + zk, name="page-a")
        a.start()
        self.addCleanup(a.stop)
        m = a.wait_log(SERVING_RE)
        a.http = (m.group(1), int(m.group(2)))
        b = Daemon(config=zk, name="page-b")
        b.start()
        self.addCleanup(b.stop)
        holder = labelled(self, a, "here")
        lock(holder, "dist-job", "10000")
        waiter = labelled(self, b, "there")
        waiter.send("LOCK dist-job 20000\r\n")
        # Queued in ZooKeeper (STATUS asks it) before the page first asks.
        deadline = time.monotonic() + TIMEOUT
        while " queue=2 " not in holder.request("STATUS dist-job") + " ":
            self.assertLess(time.monotonic(), deadline, "the waiter never queued")
        data = json_when(a, lambda j: j["locks"] and j["locks"][0]["queue"] == 2,
                         "a queue of two across daemons")
        self.assertEqual(data["mode"], "distributed")
        h = data["health"]
        self.assertEqual((h["ok"], h["status"], h["reason"], h["zk_state"],
                          h["zk_session_confirmed"]), (True, 200, None, "connected", True))
        self.assertGreaterEqual(h["zk_window_age_ms"], 0)
        self.assertGreaterEqual(data["queue_age_ms"], 0)
        [lk] = data["locks"]
        # The waiter is on the other daemon: not among this one's waits.
        self.assertEqual((lk["holders"], lk["waiters"], lk["waits"]), (1, 0, []))
        self.assertEqual([x["label"] for x in lk["holds"]], ["here"])
        # Another glob: its own gathering.
        data = json_when(a, lambda j: j["queue_age_ms"] is not None and
                         j["locks"][0]["queue"] == 2, "the queue for dist-*", "?match=dist-*")
        holder.request("UNLOCK dist-job")
        waiter.expect_match(r"OK dist-job \d+")


@lbharness.skip_unless(HAVE_BROWSER, "chromium",
                       "%s, %s or python3-selenium missing" % (CHROMIUM, CHROMEDRIVER))
class PageBrowserTest(unittest.TestCase):
    """The page in headless Chromium: what a person sees."""

    @classmethod
    def setUpClass(cls):
        cls.profile = lbharness.make_tmpdir("lbchrome-")
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                    "--disable-gpu", "--no-first-run", "--user-data-dir=" + cls.profile):
            opts.add_argument(arg)
        cls.browser = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)

    @classmethod
    def tearDownClass(cls):
        cls.browser.quit()
        shutil.rmtree(cls.profile, ignore_errors=True)

    def setUp(self):
        self.d = start_daemon(self)
        self.browser.get("http://%s:%d/" % self.d.http)
        # Set once: a reload would lose it.
        self.browser.execute_script("window.lbNoReload = 1;")
        self.wait_until(lambda b: self.text("health-status") == "healthy", "healthy")

    def tearDown(self):
        self.assertEqual(self.browser.execute_script("return window.lbNoReload;"), 1,
                         "the page was reloaded")

    def wait_until(self, cond, what):
        try:
            WebDriverWait(self.browser, scaled(10), poll_frequency=0.1).until(cond)
        except Exception:
            raise AssertionError("the page did not show %s; it shows:\n%s"
                                 % (what, self.browser.find_element(By.TAG_NAME, "body").text))

    def text(self, elem_id):
        return self.browser.find_element(By.ID, elem_id).text

    def svg_text(self, elem_id):
        return self.browser.execute_script(
            "return document.getElementById(arguments[0]).textContent;", elem_id)

    def rows(self, table):
        """The rows of table ("holds", "waits") as dicts of column text by key."""
        return self.browser.execute_script("""
            var rows = [];
            document.querySelectorAll("#" + arguments[0] + " tbody tr").forEach(function (tr) {
                if (tr.className === "empty") return;
                var r = {};
                tr.querySelectorAll("td").forEach(function (td) {
                    var key = Array.prototype.find.call(td.classList,
                        function (c) { return c.indexOf("c-") === 0; });
                    r[key.slice(2)] = td.textContent;
                });
                rows.push(r);
            });
            return rows;""", table)

    def row_of(self, table, **match):
        for r in self.rows(table):
            if all(r.get(k) == v for k, v in match.items()):
                return r
        return None

    def test_hold_wait_release_without_reload(self):
        holder = labelled(self, self.d, "holder-A")
        token = lock(holder, "page-job")
        self.wait_until(lambda b: self.row_of("holds", name="page-job", label="holder-A"),
                        "the hold of page-job by holder-A")
        r = self.row_of("holds", name="page-job")
        self.assertEqual((r["holder"], r["token"], r["mode"], r["state"]),
                         (holder.local, token, "exclusive", "held"))
        self.assertEqual(self.rows("waits"), [])

        waiter = labelled(self, self.d, "waiter-B")
        waiter.send("LOCK page-job 20000\r\n")
        self.wait_until(lambda b: self.row_of("waits", name="page-job", label="waiter-B"),
                        "waiter-B waiting for page-job")
        self.assertEqual(self.row_of("waits", label="waiter-B")["holder"], waiter.local)
        self.wait_until(lambda b: self.row_of("holds", name="page-job", waiters="1",
                                              queue="2"), "one waiter, a queue of two")

        holder.request("UNLOCK page-job")
        waiter.expect_match(r"OK page-job \d+")
        self.wait_until(lambda b: self.row_of("holds", name="page-job", label="waiter-B")
                        and not self.row_of("holds", label="holder-A")
                        and not self.rows("waits"), "waiter-B holding, holder-A gone")

        waiter.close()
        self.wait_until(lambda b: not self.rows("holds"), "nothing held")
        self.assertEqual(self.browser.find_element(By.CSS_SELECTOR, "#holds tbody tr").text,
                         "nothing held")

    def test_markup_in_a_label_shows_as_text(self):
        label = "<script>window.lbInjected=1</script><img/src=x/onerror=window.lbInjected=2>"
        c = labelled(self, self.d, label)
        lock(c, "xss")
        self.wait_until(lambda b: self.row_of("holds", name="xss"), "the hold of xss")
        self.assertEqual(self.row_of("holds", name="xss")["label"], label)
        self.assertEqual(self.browser.find_elements(By.CSS_SELECTOR, "table script, table img"),
                         [])
        self.assertIsNone(self.browser.execute_script("return window.lbInjected;"))

    def test_search_and_sort(self):
        c = labelled(self, self.d, "sorter")
        for name in ("sort-b", "sort-a", "sort-c", "elsewhere"):
            lock(c, name)
        self.wait_until(lambda b: len(self.rows("holds")) == 4, "four holds")
        box = self.browser.find_element(By.ID, "match")
        box.send_keys("sort-*")
        self.wait_until(lambda b: [r["name"] for r in self.rows("holds")] ==
                        ["sort-a", "sort-b", "sort-c"], "the sort-* holds by name")
        self.browser.find_element(By.CSS_SELECTOR, "#holds th[data-key='name']").click()
        self.assertEqual([r["name"] for r in self.rows("holds")], ["sort-c", "sort-b", "sort-a"])
        # The order stays as the page refreshes.
        lock(c, "sort-d")
        self.wait_until(lambda b: [r["name"] for r in self.rows("holds")] ==
                        ["sort-d", "sort-c", "sort-b", "sort-a"], "sort-d first")

    def test_health_and_charts(self):
        self.assertEqual((self.text("mode"), self.text("zk-state"), self.text("zk-confirmed")),
                         ("embedded", "n/a", "n/a"))
        self.assertIn("ok", self.browser.find_element(By.ID, "health").get_attribute("class"))
        c = labelled(self, self.d, "charts")
        for i in range(50):
            lock(c, "chart-%d" % i)
        # 50 grants between two polls a second apart: a rate above 1 a second.
        self.wait_until(lambda b: b.find_elements(By.CSS_SELECTOR, "#chart-grants polyline")
                        and float(self.svg_text("chart-grants").split()[-1]) > 1,
                        "grants on the chart")
        self.assertEqual(self.text("held-count"), "50")


if __name__ == "__main__":
    unittest.main()
