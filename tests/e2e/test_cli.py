#!/usr/bin/env python3
"""End-to-end tests of the lockbroker command-line client.

Runs the built client (env LOCKBROKER, default ../../cli/lockbroker relative
to this file) against the built daemon (env LOCKBROKERD, see lbharness), a
scripted fake broker (for replies the daemon cannot be made to send on
demand), and, for the LOST path, a daemon in distributed mode on a real
ZooKeeper server (zkharness) that the test stops.

Nothing sleeps to synchronise: a command says it started by printing a line
that the test reads, waits for a line on its standard input, and lockbroker's
exit is awaited; every wait has a timeout that fails the test. No test
asserts how long anything took.
"""

import json
import os
import pwd
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lbharness  # noqa: E402
from lbharness import Client, TIMEOUT, can_bind, make_tmpdir, scaled  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


class Daemon(lbharness.Daemon):
    # Since the STATUS commit the ready line also names the daemon id
    # ("ready: embedded mode, daemon id X, listening on A"); accept both forms.
    READY_RE = re.compile(r"ready: (\S+) mode, (?:daemon id \S+, )?listening on (\S+)"
                          r"(?: and (.+))?$")

# Exit statuses of lockbroker itself (cli/lb_client.h, lockbroker --help, lockbroker(1)).
EXIT_FREE = 1            # status NAME only
EXIT_BACKEND_DOWN = 115  # ping, status: the broker answers but cannot reach ZooKeeper
EXIT_JEOPARDY = 116
EXIT_DENIED = 117
EXIT_NOT_HELD = 118
EXIT_CONFLICT = 119
EXIT_LOST = 120
EXIT_UNAVAILABLE = 121
EXIT_BAD_NAME = 122
EXIT_PROTOCOL = 123
EXIT_TIMEOUT = 124
EXIT_USAGE = 125
EXIT_CANNOT_EXEC = 126
EXIT_NOT_FOUND = 127

# Time for a lockbroker run to end; the ZooKeeper loss takes 2/3 of 4 s first.
RUN_TIMEOUT = scaled(20.0)

# What run -w 0 and lease -w 0 say when the lock is not free: who holds it
# (a STATUS after the TIMEOUT), when the broker tells.
DATE = r"[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}:[0-9]{2}"


def busy_re(name, holder=r".*"):
    """stderr of -w 0 on a lock that is not free (a regex, for assert_exit)."""
    return r"lock %s is (held by %s|not free); not waiting for it \(-w 0\)$" % (
        re.escape(name), holder)


# The daemon's ERR NOAUTH, and what lockbroker makes of it (it says how to log in).
ERR_NOAUTH = ("ERR NOAUTH log in first with AUTH <user> <password> "
              "(only PING, HELP and QUIT work before)")
LOGIN_ADVICE = (r"wants a login: give -a USER, with the password in LOCKBROKER_PASSWORD or "
                r"--password-file FILE \(refused %s: " + re.escape(ERR_NOAUTH) + r"\)$")


# A command that traps SIGTERM, SIGINT and SIGHUP (or ignores them), prints a
# line once its handlers are in place, and waits. Python rather than sh: a
# shell's `sleep &` child holds the shell's trap handler until it execs, and a
# signal arriving then is lost.
TRAPPER = """
import os, signal, sys
def on(sig, frame):
    print("trapped-" + signal.Signals(sig).name[3:], flush=True)
    sys.exit(%(code)d)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, %(handler)s)
print(%(ready)s, flush=True)
while True:
    signal.pause()
"""


def trapper(code=7, ready='"ready"', ignore=False):
    """argv of a TRAPPER command: exits `code` on a signal, or ignores them;
    prints the Python expression `ready` when set up."""
    return [sys.executable, "-c", TRAPPER % {
        "code": code, "ready": ready, "handler": "signal.SIG_IGN" if ignore else "on"}]


PID_AND_TOKEN = '"%d %s" % (os.getpid(), os.environ["LOCKBROKER_TOKEN"])'

# Prints, for each pid argument, "dead" if the process has ended or is
# ending (a zombie, exiting: PF_EXITING in /proc/PID/stat's flags, or a
# SIGKILL pending), else "alive". A process that was sent SIGKILL never
# runs its own code again.
DEAD_OR_DYING = r"""
import sys
def dead(pid):
    try:
        with open("/proc/%s/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open("/proc/%s/status" % pid) as f:
            st = dict(l.split(":", 1) for l in f if ":" in l)
    except (OSError, IndexError):
        return True
    pending = int(st["ShdPnd"], 16) | int(st["SigPnd"], 16)
    return fields[0] in ("Z", "X") or int(fields[6]) & 0x4 or pending & (1 << 8)
print(" ".join("dead" if dead(p) else "alive" for p in sys.argv[1:]), flush=True)
"""

# Prints the pids of the processes of process group argv[1] that have not
# ended (zombies count as ended), or "none".
GROUP_MEMBERS = r"""
import os, sys
pgid, alive = int(sys.argv[1]), []
for pid in os.listdir("/proc"):
    try:
        with open("/proc/%s/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        continue
    if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
        alive.append(pid)
print(" ".join(sorted(alive)) or "none", flush=True)
"""


def client_path():
    path = os.environ.get("LOCKBROKER")
    if path:
        return path
    return os.path.normpath(os.path.join(HERE, "..", "..", "cli", "lockbroker"))


def default_label(pid, command):
    """The CLIENT label lockbroker sends by default: user@host:pid:command."""
    user = pwd.getpwuid(os.getuid()).pw_name
    host = socket.gethostname().split(".")[0]
    label = re.sub(r"[^\x21-\x7e]", "_", "%s@%s:%d:%s" % (user, host, pid, command))
    return label[:100]


def clean_env(**extra):
    """os.environ without LOCKBROKER_* settings that would change the address, plus extra."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("LOCKBROKER_ADDR", "LOCKBROKER_NAME", "LOCKBROKER_TOKEN")}
    env.update(extra)
    return env


def free_port():
    """A loopback port with nothing listening on it (bound, then closed)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def pid_alive(pid):
    """True if pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def wait_gone(pid, timeout=TIMEOUT):
    """Waits until pid has ended (a zombie counts as ended); False after timeout.
    Waits on a pidfd (Linux 5.3) where there is one, else polls /proc."""
    deadline = lbharness.time.monotonic() + timeout
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    if fd is not None:
        try:
            return bool(select.select([fd], [], [], timeout)[0]) or not pid_alive(pid)
        finally:
            os.close(fd)
    while pid_alive(pid):
        if lbharness.time.monotonic() >= deadline:
            return False
        lbharness.time.sleep(0.01)
    return True


def kill_if_alive(pid):
    """SIGKILL pid unless it has ended (cleanup after a failure)."""
    if pid_alive(pid):
        os.kill(pid, signal.SIGKILL)


def children_of(pid):
    """Direct children of pid (Linux /proc), for cleanup after a failure."""
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


class LbProc:
    """One lockbroker process with its stdout read line by line.

    It runs in a session of its own: no controlling terminal (so it never
    hands one to the command), and a signal to the test's process group does
    not reach it.
    """

    def __init__(self, args, env=None, stdin=subprocess.DEVNULL, program=None, **popen):
        self.argv = [program or client_path()] + list(args)
        self.proc = subprocess.Popen(self.argv, stdin=stdin, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE,
                                     env=clean_env() if env is None else env,
                                     start_new_session=True, **popen)
        self.buf = b""
        self.errbuf = b""   # stderr read by read_err_line and not returned yet
        self.out = ""       # all of stdout, once finish() returned
        self.err = ""
        self.rc = None

    @property
    def pid(self):
        return self.proc.pid

    def read_line(self, timeout=TIMEOUT):
        """The next line lockbroker's command printed, without its newline."""
        return self._read_line(self.proc.stdout, "buf", timeout)

    def read_err_line(self, timeout=TIMEOUT):
        """The next line lockbroker (or its command) wrote to stderr; finish()
        keeps only what comes after it in .err."""
        return self._read_line(self.proc.stderr, "errbuf", timeout)

    def _read_line(self, f, attr, timeout):
        fd = f.fileno()
        deadline = lbharness.time.monotonic() + timeout
        while b"\n" not in getattr(self, attr):
            left = deadline - lbharness.time.monotonic()
            r = select.select([fd], [], [], max(left, 0))[0] if left > 0 else []
            if not r:
                self.kill()
                raise AssertionError("%r printed no line on %s within %.1fs; got %r"
                                     % (self.argv, attr, timeout, getattr(self, attr)))
            data = os.read(fd, 4096)
            if not data:
                self.kill()
                raise AssertionError("%r closed %s before a full line; got %r; exit %r"
                                     % (self.argv, attr, getattr(self, attr), self.proc.wait()))
            setattr(self, attr, getattr(self, attr) + data)
        line, rest = getattr(self, attr).split(b"\n", 1)
        setattr(self, attr, rest)
        return line.decode()

    def write(self, text):
        self.proc.stdin.write(text.encode())
        self.proc.stdin.flush()

    def signal(self, sig):
        self.proc.send_signal(sig)

    def finish(self, timeout=RUN_TIMEOUT):
        """Waits for the exit; returns the exit code and keeps the rest of stdout and stderr."""
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("%r did not exit within %.1fs" % (self.argv, timeout))
        self.out = (self.buf + out).decode()
        self.buf = b""
        self.err = (self.errbuf + err).decode()
        self.errbuf = b""
        self.rc = self.proc.returncode
        return self.rc

    def kill(self):
        """SIGKILL lockbroker and its command's process group (cleanup)."""
        if self.proc.poll() is None:
            for child in children_of(self.proc.pid):
                try:
                    os.killpg(child, signal.SIGKILL)
                except OSError:
                    pass
            self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f:
                f.close()


class Case(unittest.TestCase):
    """Helpers shared by the suites."""

    _names = 0

    def name(self):
        """A lock name unique in this run."""
        Case._names += 1
        return "cli-%s-%d" % (self._testMethodName.replace("test_", "")[:40], Case._names)

    def start(self, args, **kw):
        p = LbProc(args, **kw)
        self.addCleanup(p.kill)
        return p

    def lb(self, args, env=None, timeout=RUN_TIMEOUT, stdin=subprocess.DEVNULL):
        """Runs lockbroker to its end; returns the finished LbProc (rc, out, err)."""
        p = self.start(args, env=env, stdin=stdin)
        p.finish(timeout)
        return p

    def assert_exit(self, p, rc, stderr_re=None, stdout=None):
        """Asserts the exit code and, for lockbroker's own errors, exactly one
        `lockbroker: ...` line on stderr matching stderr_re."""
        info = "argv %r\nstdout %r\nstderr %r" % (p.argv, p.out, p.err)
        self.assertEqual(p.rc, rc, info)
        if stderr_re is not None:
            lines = p.err.splitlines()
            self.assertEqual(len(lines), 1, "expected one stderr line\n" + info)
            self.assertRegex(lines[0], "^lockbroker: " + stderr_re, info)
        if stdout is not None:
            self.assertEqual(p.out, stdout, info)


class DaemonCase(Case):
    """One embedded daemon for the whole class; tests use distinct lock names."""

    daemon_config = None

    @classmethod
    def setUpClass(cls):
        cls.d = Daemon(config=cls.daemon_config, name="lockbrokerd-cli").start()

    @classmethod
    def tearDownClass(cls):
        cls.d.stop()

    def hp(self):
        return ["-H", self.d.listen_addr]

    def client(self):
        c = self.d.client()
        self.addCleanup(c.close)
        return c


class MinHoldQuotaTests(DaemonCase):
    """run --min-hold when the broker will keep no more holds (PROTOCOL.md,
    Quotas): lockbroker keeps the lock itself for the rest of the period."""

    daemon_config = "[server]\nmax_kept_holds_per_user = 1\n"

    def test_min_hold_beyond_the_quota_holds_the_lock_here(self):
        c = self.client()
        self.assertRegex(c.request("LOCK cli-kept 0"), r"^OK cli-kept \d+$")
        self.assertEqual(c.request("UNLOCK cli-kept keep=600000"), "OK cli-kept")
        self.addCleanup(lambda: self.client().request("BREAK cli-kept"))
        n = self.name()
        started = time.monotonic()
        p = self.start(self.hp() + ["run", "--min-hold", "2s", n, "--", "true"])
        self.assertRegex(p.read_err_line(),
                         r"^lockbroker: lock %s: the broker will not keep it \(address "
                         r"127\.0\.0\.1 already has 1 holds with a lock-delay or keep=; the "
                         r"lock is still held\); holding it here \d+ ms more \(--min-hold\)$"
                         % re.escape(n))
        # Held by lockbroker's connection meanwhile, not kept by the broker.
        status = c.request("STATUS %s" % n)
        self.assertRegex(status, r"^STATUS %s held holder=\S+ token=\d+ since=\d+ waiters=0 "
                         r"queue=1 label=\S+$" % re.escape(n))
        self.assertNotIn(" delay=", status)
        other = self.lb(self.hp() + ["run", "-w", "0", n, "--", "true"])
        self.assertEqual(other.rc, EXIT_TIMEOUT, other.err)
        self.assertEqual(p.finish(), 0, p.err)
        self.assertEqual(p.err, "")
        self.assertGreaterEqual(time.monotonic() - started, 2.0)
        # Then released, as UNLOCK: nothing is kept.
        self.assertRegex(c.request("STATUS %s" % n), r"^STATUS %s free " % re.escape(n))


# ================================================================== run

class RunTests(DaemonCase):

    def test_command_succeeds(self):
        p = self.lb(self.hp() + ["run", self.name(), "--", "sh", "-c", "echo hello"])
        self.assert_exit(p, 0, stdout="hello\n")
        self.assertEqual(p.err, "")

    def test_exit_status_is_passed_on(self):
        p = self.lb(self.hp() + ["run", self.name(), "--", "sh", "-c", "exit 3"])
        self.assert_exit(p, 3, stdout="")
        self.assertEqual(p.err, "")

    def test_command_killed_by_a_signal_is_128_plus_signal(self):
        for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSEGV):
            with self.subTest(sig=sig.name):
                p = self.lb(self.hp() + ["run", self.name(), "--", "sh", "-c",
                                         "kill -%d $$" % sig])
                self.assert_exit(p, 128 + sig)

    def test_double_dash_is_optional(self):
        p = self.lb(self.hp() + ["run", self.name(), "sh", "-c", "exit 5"])
        self.assert_exit(p, 5)

    def test_double_dash_before_a_command_that_starts_with_a_dash(self):
        # Without --, `-w` here is refused as an option after NAME (ErrorTests).
        p = self.lb(self.hp() + ["run", self.name(), "--", "-w", "1000", "true"])
        self.assert_exit(p, EXIT_NOT_FOUND, r"cannot run -w: ", stdout="")

    def test_options_after_the_subcommand(self):
        p = self.lb(["run", "-H", self.d.listen_addr, "-w", "1000", self.name(), "--", "true"])
        self.assert_exit(p, 0)

    def test_environment_reaches_the_command(self):
        n = self.name()
        script = 'echo "$LOCKBROKER_NAME"; echo "$LOCKBROKER_TOKEN"; echo "$LOCKBROKER_ADDR"'
        p1 = self.lb(self.hp() + ["run", n, "--", "sh", "-c", script])
        self.assert_exit(p1, 0)
        name, token, addr = p1.out.splitlines()
        self.assertEqual(name, n)
        self.assertRegex(token, r"^[0-9]+$")
        self.assertEqual(addr, self.d.listen_addr)
        # Fencing: the next holder's token is greater.
        p2 = self.lb(self.hp() + ["run", n, "--", "sh", "-c", script])
        self.assert_exit(p2, 0)
        self.assertGreater(int(p2.out.splitlines()[1]), int(token))

    def test_lock_is_held_while_the_command_runs_and_released_after(self):
        n = self.name()
        p = self.start(self.hp() + ["run", n, "--", "sh", "-c", "echo running; read x; exit 0"],
                       stdin=subprocess.PIPE)
        self.assertEqual(p.read_line(), "running")
        other = self.client()
        other.send("TRYLOCK %s\n" % n)
        other.expect("BUSY %s" % n)
        p.write("done\n")
        p.finish()
        self.assert_exit(p, 0)
        other.send("TRYLOCK %s\n" % n)
        other.expect_match(r"OK %s [0-9]+" % re.escape(n))

    def test_set_is_held_while_the_command_runs(self):
        names = [self.name() + "-" + x for x in ("c", "a", "b")]
        script = 'echo "$LOCKBROKER_NAME $LOCKBROKER_TOKEN"; read x; exit 0'
        p = self.start(self.hp() + ["run", ",".join(names), "--", "sh", "-c", script],
                       stdin=subprocess.PIPE)
        listed, tokens = p.read_line().split(" ")
        self.assertEqual(listed, ",".join(names))             # as given
        tokens = tokens.split(",")
        other = self.client()
        for n, t in zip(names, tokens):                       # each token in its name's place
            other.send("STATUS %s\n" % n)
            other.expect_match(r"STATUS %s held .* token=%s .*" % (re.escape(n), t))
        p.write("done\n")
        p.finish()
        self.assert_exit(p, 0)
        self.assertEqual(p.err, "")
        for n in names:
            other.send("TRYLOCK %s\n" % n)
            other.expect_match(r"OK %s [0-9]+" % re.escape(n))

    def test_set_waits_for_every_name(self):
        a, b = self.name() + "-a", self.name() + "-b"
        holder = self.client()
        holder.send("LOCK %s\n" % b)
        holder.expect_match(r"OK %s [0-9]+" % re.escape(b))
        mark = self.d.log_mark()
        p = self.start(self.hp() + ["run", "%s,%s" % (b, a), "--", "echo", "ran"])
        self.d.wait_log(r"lock %s: \S+ queued$" % re.escape(b), since=mark)
        holder.send("TRYLOCK %s\n" % a)                      # taken first, held meanwhile
        holder.expect("BUSY %s" % a)
        holder.send("UNLOCK %s\n" % b)
        holder.expect("OK %s" % b)
        p.finish()
        self.assert_exit(p, 0, stdout="ran\n")

    def test_set_timeout(self):
        a, b = self.name() + "-a", self.name() + "-b"
        holder = self.client()
        holder.send("LOCK %s\n" % b)
        holder.expect_match(r"OK %s [0-9]+" % re.escape(b))
        p = self.lb(self.hp() + ["run", "-w", "100ms", "%s,%s" % (a, b), "--", "echo", "ran"])
        self.assert_exit(p, EXIT_TIMEOUT, stdout="")
        holder.send("TRYLOCK %s\n" % a)                      # released with the set
        holder.expect_match(r"OK %s [0-9]+" % re.escape(a))

    def test_waits_for_the_lock_then_runs(self):
        n = self.name()
        holder = self.client()
        holder.send("LOCK %s\n" % n)
        holder.expect_match(r"OK %s [0-9]+" % re.escape(n))
        mark = self.d.log_mark()
        p = self.start(self.hp() + ["run", n, "--", "echo", "ran"])
        self.d.wait_log(r"lock %s: \S+ queued$" % re.escape(n), since=mark)
        holder.send("UNLOCK %s\n" % n)
        holder.expect("OK %s" % n)
        p.finish()
        self.assert_exit(p, 0, stdout="ran\n")

    def test_wait_timeout_names_the_holder(self):
        # -w 0 is not a wait that timed out: the lock is held, and by whom.
        n = self.name()
        holder = self.client()
        holder.send("CLIENT ops@db1:42:backup\nLOCK %s\n" % n)
        holder.expect("OK")
        holder.expect_match(r"OK %s [0-9]+" % re.escape(n))
        daemon_id = self.d.wait_log(r"daemon id (\S+)").group(1)
        who = r"%s/%s label=ops@db1:42:backup since %s" % (
            re.escape(daemon_id), re.escape(holder.local), DATE)
        for args in (["run", "-w", "0", n, "--", "sh", "-c", "echo ran"],
                     ["run", "--nonblock", n, "--", "sh", "-c", "echo ran"],
                     ["lease", "-w", "0", n, "1m"], ["lease", "--nonblock", n, "1m"]):
            with self.subTest(args=args):
                p = self.lb(self.hp() + args)
                self.assert_exit(p, EXIT_TIMEOUT, r"lock %s is held by %s; not waiting for it "
                                 r"\(-w 0\)$" % (re.escape(n), who), stdout="")
        p = self.lb(self.hp() + ["run", "-w", "200ms", n, "--", "sh", "-c", "echo ran"])
        self.assert_exit(p, EXIT_TIMEOUT, r"timed out after 200 ms waiting for lock %s, held by "
                         r"%s$" % (re.escape(n), who), stdout="")

    def test_min_hold_runs_once_per_period(self):
        # Three machines' cron fire `run -w 0 --min-hold 10m` at about the same
        # minute: the first runs the job, the others, even after it finished,
        # find the lock held (by the broker, for the rest of the period).
        n = self.name()
        job = ["--", "sh", "-c", "echo ran"]
        first = self.lb(self.hp() + ["run", "-w", "0", "--min-hold", "10m", n] + job)
        self.assert_exit(first, 0, stdout="ran\n")
        for machine in (2, 3):
            with self.subTest(machine=machine):
                p = self.lb(self.hp() + ["run", "-w", "0", "--min-hold", "10m", n] + job)
                self.assert_exit(p, EXIT_TIMEOUT, r"lock %s is held by .*; not waiting for it "
                                 r"\(-w 0\)$" % re.escape(n), stdout="")
        status = self.client().request("STATUS %s" % n)
        self.assertRegex(status, r"^STATUS %s held .* delay=(\d+)" % re.escape(n))
        delay = int(re.search(r" delay=(\d+)", status).group(1))
        self.assertGreater(delay, 9 * 60 * 1000)
        self.assertLessEqual(delay, 10 * 60 * 1000)
        # BREAK ends the kept hold: the next run runs.
        self.assertEqual(self.client().request("BREAK %s" % n), "OK %s" % n)
        p = self.lb(self.hp() + ["run", "-w", "0", n] + job)
        self.assert_exit(p, 0, stdout="ran\n")

    def test_quiet_skip_prints_nothing(self):
        # cron mails whenever a job prints: the hosts that skip a --min-hold
        # job with -w 0 -E 0 -q print nothing and exit 0. -E 0 alone still
        # says who holds it (lockbroker(1), -E); -q does not hide errors.
        n = self.name()
        job = ["--", "sh", "-c", "echo ran"]
        first = self.lb(self.hp() + ["run", "-w", "0", "-E", "0", "-q", "--min-hold", "10m", n]
                        + job)
        self.assert_exit(first, 0, stdout="ran\n")
        self.assertEqual(first.err, "")
        for args in (["run", "-w", "0", "-E", "0", "-q", "--min-hold", "10m", n] + job,
                     ["run", "--quiet", "--nonblock", "-E", "0", n] + job,
                     ["lease", "-q", "-w", "0", "-E", "0", n, "1m"]):
            with self.subTest(args=args):
                p = self.lb(self.hp() + args)
                self.assert_exit(p, 0, stdout="")
                self.assertEqual(p.err, "")
        p = self.lb(self.hp() + ["run", "-q", "-w", "200ms", n] + job)
        self.assert_exit(p, EXIT_TIMEOUT, stdout="")
        self.assertEqual(p.err, "")
        p = self.lb(self.hp() + ["run", "-w", "0", "-E", "0", n] + job)
        self.assert_exit(p, 0, r"lock %s is held by .*, kept \d+ ms more after its release "
                         r"\(--min-hold or a lock-delay\); not waiting for it \(-w 0\)$"
                         % re.escape(n), stdout="")
        self.assertEqual(self.client().request("BREAK %s" % n), "OK %s" % n)
        other = self.name()
        self.assertRegex(self.client().request("LOCK %s 0 limit=2" % other),
                         r"^OK %s \d+$" % re.escape(other))
        p = self.lb(self.hp() + ["run", "-q", "-w", "0", "-E", "0", "-n", "3", other] + job)
        self.assert_exit(p, EXIT_CONFLICT, r"lock %s is in use in another mode"
                         % re.escape(other), stdout="")

    def test_crontab_examples_run_once_and_skip_quietly(self):
        # Every crontab line of lockbroker(1) and the README: --min-hold (a
        # plain -w 0 runs twice, as the README warns) and -E 0 -q (cron
        # mails nothing). Run as printed but for the address and the job
        # (and -w 0 for the second machine, which would wait out -w): the
        # first runs the job, the second prints nothing and exits 0.
        srcdir = os.path.join(HERE, "..", "..")
        lines = []
        for doc in ("README.md", os.path.join("cli", "lockbroker.1")):
            with open(os.path.join(srcdir, doc)) as f:
                text = f.read().replace("\\-", "-")
            found = re.findall(r"^(?:\S+ ){5} *(lockbroker .*run .*)$", text, re.M)
            self.assertTrue(found, "no crontab line in " + doc)
            lines += [(doc, line) for line in found]
        for doc, line in lines:
            with self.subTest(doc=doc, line=line):
                args = line.split()[1:]
                self.assertIn("--min-hold", args)
                self.assertIn("-q", args)
                self.assertEqual(args[args.index("-E") + 1], "0")
                n = self.name()
                args = args[:args.index("--") - 1]   # without NAME -- COMMAND
                job = [n, "--", "sh", "-c", "echo ran"]
                first = self.lb(self.hp() + args + job)
                self.assert_exit(first, 0, stdout="ran\n")
                self.assertEqual(first.err, "")
                args[args.index("-w") + 1] = "0"
                second = self.lb(self.hp() + args + job)
                self.assert_exit(second, 0, stdout="")
                self.assertEqual(second.err, "")
                self.assertEqual(self.client().request("BREAK %s" % n), "OK %s" % n)

    def test_min_hold_release_on_failure(self):
        n = self.name()
        fail = ["--", "sh", "-c", "exit 3"]
        p = self.lb(self.hp() + ["run", "-w", "0", "--min-hold", "10m", "--release-on-failure",
                                 n] + fail)
        self.assert_exit(p, 3)
        self.assertRegex(self.client().request("STATUS %s" % n), r"^STATUS %s free " % re.escape(n))
        # Without it, a failed command keeps the lock for the period too.
        p = self.lb(self.hp() + ["run", "-w", "0", "--min-hold", "10m", n] + fail)
        self.assert_exit(p, 3)
        self.assertRegex(self.client().request("STATUS %s" % n), r"^STATUS %s held " % re.escape(n))
        self.assertEqual(self.client().request("BREAK %s" % n), "OK %s" % n)
        # A period already over releases at once; -v says what is kept.
        p = self.lb(self.hp() + ["run", "-v", "--min-hold", "1ms", n, "--", "sh", "-c",
                                 "echo ran"])
        self.assert_exit(p, 0, stdout="ran\n")
        self.assertRegex(self.client().request("STATUS %s" % n), r"^STATUS %s free " % re.escape(n))
        p = self.lb(self.hp() + ["run", "-v", "--min-hold", "10m", n, "--", "true"])
        self.assert_exit(p, 0, r"lock %s stays held \d+ ms more \(--min-hold\), by the broker$"
                         % re.escape(n))
        self.assertEqual(self.client().request("BREAK %s" % n), "OK %s" % n)

    def test_min_hold_usage(self):
        n = self.name()
        for args, err in (
                (["run", "--release-on-failure", n, "--", "true"],
                 r"--release-on-failure goes with --min-hold"),
                (["run", "--min-hold", "25h", n, "--", "true"], r"--min-hold: "),
                (["lease", "--min-hold", "1m", n, "1m"],
                 r"lease: --min-hold and --release-on-failure are options of run")):
            with self.subTest(args=args):
                p = self.lb(self.hp() + args)
                self.assert_exit(p, EXIT_USAGE, err)

    def test_nonblock_takes_a_free_lock(self):
        # flock's --nonblock is -w 0 (flock's -n is --limit here).
        p = self.lb(self.hp() + ["run", "--nonblock", self.name(), "--", "echo", "ran"])
        self.assert_exit(p, 0, stdout="ran\n")

    def test_nested_run_uses_the_same_broker(self):
        # LOCKBROKER_ADDR reaches the command, so an inner lockbroker talks to
        # the same daemon: the same lock is busy, and its status comes out.
        n = self.name()
        inner = "%s run -w 0 %s -- echo inner-ran" % (client_path(), n)
        p = self.lb(self.hp() + ["run", n, "--", "sh", "-c", inner])
        self.assert_exit(p, EXIT_TIMEOUT, busy_re(n), stdout="")
        p = self.lb(self.hp() + ["run", n, "--", "sh", "-c",
                                 "%s run %s-inner -- echo inner-ran" % (client_path(), n)])
        self.assert_exit(p, 0, stdout="inner-ran\n")

    def test_command_not_found_and_not_executable(self):
        p = self.lb(self.hp() + ["run", self.name(), "--", "/nonexistent/command"])
        self.assert_exit(p, EXIT_NOT_FOUND, r"cannot run /nonexistent/command: ")
        tmp = make_tmpdir()
        path = os.path.join(tmp, "not-executable")
        with open(path, "w") as f:
            f.write("#!/bin/sh\n")
        os.chmod(path, 0o644)
        p = self.lb(self.hp() + ["run", self.name(), "--", path])
        self.assert_exit(p, EXIT_CANNOT_EXEC, r"cannot run %s: " % re.escape(path))

    def test_lock_released_after_a_failed_exec(self):
        n = self.name()
        p = self.lb(self.hp() + ["run", n, "--", "/nonexistent/command"])
        self.assertEqual(p.rc, EXIT_NOT_FOUND)
        other = self.client()
        other.send("TRYLOCK %s\n" % n)
        other.expect_match(r"OK %s [0-9]+" % re.escape(n))

    def test_command_dies_with_a_killed_lockbroker(self):
        # kill -9 closes lockbroker's connection and the broker frees the
        # lock: the command gets SIGKILL (parent-death signal) rather than
        # run on unprotected. With a session (--session-grace) the lock is
        # kept for the grace first, and nobody takes it back.
        n = self.name()
        mark = self.d.log_mark()
        p = self.start(self.hp() + ["run", "--session-grace", "300ms", n, "--", "sh", "-c",
                                    "echo $$; exec sleep 600"])
        pid = int(p.read_line())
        self.addCleanup(kill_if_alive, pid)
        p.proc.kill()
        p.proc.wait()
        self.assertTrue(wait_gone(pid), "the command (pid %d) outlived lockbroker" % pid)
        # The close, so that the lock is free again. (Since the end-of-input
        # change the daemon releases a half-closed client's holds before this
        # line, which then counts 0 of them: not what is tested here.)
        self.d.wait_log(r"\): closed, [0-9]+ holds and waits released", since=mark)
        self.d.wait_log(r"session [0-9a-f]{16}: grace of 300 ms over, not resumed: 1 holds",
                        since=mark)
        p = self.lb(self.hp() + ["run", "-w", "0", n, "--", "echo", "second"])
        self.assert_exit(p, 0, stdout="second\n")

    def test_the_whole_group_ends_with_a_killed_lockbroker(self):
        # Not only the main process: the shell's child too, before the
        # broker can grant the lock to the next waiter (the guardian holds
        # the connection until it has sent the group SIGKILL). Without a
        # session, whose grace would keep the lock a while longer anyway.
        n = self.name()
        p = self.start(self.hp() + ["run", "--session-grace", "0", n, "--", "sh", "-c",
                                    "sleep 600 & echo $$ $!; wait $!; echo after"])
        pids = p.read_line().split()
        for pid in pids:
            self.addCleanup(kill_if_alive, int(pid))
        mark = self.d.log_mark()
        waiter = self.start(self.hp() + ["run", n, "--", sys.executable, "-c", DEAD_OR_DYING]
                            + pids)
        self.d.wait_log(r"lock %s: \S+ queued$" % re.escape(n), since=mark)
        p.proc.kill()
        p.proc.wait()
        waiter.finish()
        self.assert_exit(waiter, 0, stdout="dead dead\n")
        self.assertEqual(waiter.err, "")
        for pid in pids:
            self.assertTrue(wait_gone(int(pid)), "pid %s outlived lockbroker" % pid)
        self.assertEqual(p.out, "")      # "after" never came


class ModeTests(DaemonCase):
    """run --shared (a read/write lock) and run --limit N (a semaphore)."""

    # Holds the lock until the test writes a line to its standard input.
    HOLD = ["sh", "-c", "echo in; read x; echo out"]

    def holder(self, args, n):
        """Starts `run ARGS n -- HOLD` and returns once its command runs."""
        p = self.start(self.hp() + ["run"] + args + [n, "--"] + self.HOLD, stdin=subprocess.PIPE)
        self.assertEqual(p.read_line(), "in")
        return p

    def release(self, p):
        """Lets a holder's command finish; asserts a clean exit."""
        p.write("done\n")
        p.finish()
        self.assert_exit(p, 0, stdout="out\n")
        self.assertEqual(p.err, "")

    def status(self, n):
        p = self.lb(self.hp() + ["status", n])
        self.assert_exit(p, 0)
        return p.out

    def queued(self, mark, n, suffix=""):
        """Waits for the daemon's debug line saying a LOCK n (with mode suffix) is queued."""
        self.d.wait_log(r"lock %s: \S+ queued%s$" % (re.escape(n), re.escape(suffix)), since=mark)

    def test_shared_holders_run_together(self):
        n = self.name()
        p1 = self.holder(["--shared"], n)
        # p1's command still waits for its line: p2's runs beside it.
        p2 = self.holder(["-s"], n)
        self.assertRegex(self.status(n), r"^STATUS %s held .* mode=shared holders=2 label=\S+\n$"
                         % re.escape(n))
        self.release(p1)
        self.release(p2)

    def test_shared_waits_for_an_exclusive_holder(self):
        n = self.name()
        writer = self.holder([], n)
        mark = self.d.log_mark()
        reader = self.start(self.hp() + ["run", "--shared", n, "--", "echo", "ran"])
        self.queued(mark, n, " (shared)")
        self.assertIsNone(reader.proc.poll())
        self.release(writer)
        reader.finish()
        self.assert_exit(reader, 0, stdout="ran\n")

    def test_exclusive_waits_for_shared_holders(self):
        n = self.name()
        readers = [self.holder(["--shared"], n) for _ in range(2)]
        mark = self.d.log_mark()
        writer = self.start(self.hp() + ["run", n, "--", "echo", "ran"])
        self.queued(mark, n)
        # Waiters are served in order: a reader arriving now queues behind the writer.
        p = self.lb(self.hp() + ["run", "-w", "0", "--shared", n, "--", "echo", "ran"])
        self.assert_exit(p, EXIT_TIMEOUT, busy_re(n, r".*, and 1 more holder"), stdout="")
        self.release(readers[0])
        self.assertIsNone(writer.proc.poll())
        self.release(readers[1])
        writer.finish()
        self.assert_exit(writer, 0, stdout="ran\n")

    def test_limit_lets_n_in_and_the_next_waits(self):
        n = self.name()
        p1 = self.holder(["--limit", "2"], n)
        p2 = self.holder(["-n", "2"], n)
        self.assertRegex(self.status(n),
                         r"^STATUS %s held .* mode=limit limit=2 holders=2 label=\S+\n$"
                         % re.escape(n))
        p = self.lb(self.hp() + ["run", "-w", "0", "--limit", "2", n, "--", "echo", "ran"])
        self.assert_exit(p, EXIT_TIMEOUT, busy_re(n, r".*, and 1 more holder"), stdout="")
        mark = self.d.log_mark()
        p3 = self.start(self.hp() + ["run", "--limit", "2", n, "--", "echo", "ran"])
        self.queued(mark, n, " (limit)")
        self.release(p1)
        p3.finish()
        self.assert_exit(p3, 0, stdout="ran\n")
        self.release(p2)

    def test_conflict(self):
        cases = [
            # what the connection holds, run's options, how run asked for it
            ("limit=2", ["--limit", "3"], "with limit=3"),
            ("limit=2", ["--shared"], "shared"),
            ("limit=2", [], "exclusively"),
            ("", ["-n", "2"], "with limit=2"),
            ("shared", ["--limit", "1"], "with limit=1"),
        ]
        for held, args, how in cases:
            with self.subTest(held=held, args=args):
                n = self.name()
                holder = self.client()
                holder.send("LOCK %s %s\n" % (n, held))
                holder.expect_match(r"OK %s [0-9]+" % re.escape(n))
                p = self.lb(self.hp() + ["run"] + args + [n, "--", "echo", "ran"])
                self.assert_exit(p, EXIT_CONFLICT,
                                 r"lock %s is in use in another mode or with another limit; "
                                 r"cannot take it %s \(%s: ERR CONFLICT .+\)$"
                                 % (re.escape(n), how, re.escape(self.d.listen_addr)),
                                 stdout="")
                holder.close()

    def test_same_limit_after_a_conflict(self):
        n = self.name()
        holder = self.client()
        holder.send("LOCK %s limit=2\n" % n)
        holder.expect_match(r"OK %s [0-9]+" % re.escape(n))
        p = self.lb(self.hp() + ["run", "--limit", "3", n, "--", "echo", "ran"])
        self.assertEqual(p.rc, EXIT_CONFLICT)
        p = self.lb(self.hp() + ["run", "--limit", "2", n, "--", "echo", "ran"])
        self.assert_exit(p, 0, stdout="ran\n")


class LeaseTests(DaemonCase):
    """lease, renew and release: holds that outlive the lockbroker that took them."""

    def lease(self, n, ttl="60000", args=()):
        """Runs `lease ARGS n ttl`; asserts success and returns the token (an int)."""
        p = self.lb(self.hp() + ["lease"] + list(args) + [n, ttl])
        self.assert_exit(p, 0)
        self.assertEqual(p.err, "")
        self.assertRegex(p.out, r"^[0-9]+\n$")
        return int(p.out)

    def release(self, n, token):
        p = self.lb(self.hp() + ["release", n, str(token)])
        self.assert_exit(p, 0, stdout="")
        self.assertEqual(p.err, "")

    def trylock(self, n):
        """The reply to TRYLOCK n on a connection that then closes."""
        c = self.client()
        reply = c.request("TRYLOCK %s" % n)
        c.close()
        return reply

    def not_held(self, p, what, n, token):
        self.assert_exit(p, EXIT_NOT_HELD,
                         r"cannot %s lease %s: it is not held with token %d: the token is wrong, "
                         r"or the lease expired or was released \(%s: ERR NOT_HELD .*\)$"
                         % (what, re.escape(n), token, re.escape(self.d.listen_addr)), stdout="")

    def test_lease_is_held_after_lockbroker_exits_until_released(self):
        n = self.name()
        token = self.lease(n)
        self.assertEqual(self.trylock(n), "BUSY %s" % n)
        self.release(n, token)
        self.assertRegex(self.trylock(n), r"^OK %s [0-9]+$" % re.escape(n))
        # Released: the token is no longer good for anything.
        p = self.lb(self.hp() + ["release", n, str(token)])
        self.not_held(p, "release", n, token)

    def test_release_with_a_wrong_token(self):
        n = self.name()
        token = self.lease(n)
        for wrong in (token + 1, 1, 18446744073709551615):
            with self.subTest(token=wrong):
                p = self.lb(self.hp() + ["release", n, str(wrong)])
                self.not_held(p, "release", n, wrong)
        self.assertEqual(self.trylock(n), "BUSY %s" % n)
        p = self.lb(self.hp() + ["renew", n, str(token + 1), "60000"])
        self.not_held(p, "renew", n, token + 1)
        self.release(n, token)

    def test_renew_then_release(self):
        n = self.name()
        token = self.lease(n)
        p = self.lb(self.hp() + ["renew", n, str(token), "60000"])
        self.assert_exit(p, 0, stdout="")
        self.assertEqual(p.err, "")
        self.assertEqual(self.trylock(n), "BUSY %s" % n)
        self.release(n, token)
        p = self.lb(self.hp() + ["renew", n, str(token), "60000"])
        self.not_held(p, "renew", n, token)

    def test_renew_extends_the_lease(self):
        # Renewed at once for a minute, a lease of `ttl` ms is still held
        # twice its ttl later: a waiter for that long times out.
        n = self.name()
        ttl = int(scaled(1.0) * 1000)
        token = self.lease(n, str(ttl))
        p = self.lb(self.hp() + ["renew", n, str(token), "60000"])
        self.assert_exit(p, 0, stdout="")
        p = self.lb(self.hp() + ["lease", "-w", str(2 * ttl), n, "60000"])
        self.assert_exit(p, EXIT_TIMEOUT, r"timed out after %d ms waiting for lock %s, held by "
                         r".* since %s, a lease ending in [0-9]+ ms$"
                         % (2 * ttl, re.escape(n), DATE), stdout="")
        self.release(n, token)

    def test_lease_wait_0_on_a_held_name(self):
        n = self.name()
        token = self.lease(n)
        p = self.lb(self.hp() + ["lease", "-w", "0", n, "60000"])
        self.assert_exit(p, EXIT_TIMEOUT, busy_re(n, r".*, a lease ending in [0-9]+ ms"),
                         stdout="")
        self.release(n, token)
        # Held by a connection, too.
        holder = self.client()
        holder.send("LOCK %s\n" % n)
        holder.expect_match(r"OK %s [0-9]+" % re.escape(n))
        p = self.lb(self.hp() + ["lease", "-w", "0", n, "60000"])
        self.assert_exit(p, EXIT_TIMEOUT, busy_re(n), stdout="")

    def test_expired_lease_goes_to_a_waiter(self):
        n = self.name()
        mark = self.d.log_mark()
        token = self.lease(n, "300ms")
        # The waiter is granted when the lease expires: that grant is the event awaited.
        later = self.lease(n, "60000", ["-w", str(int(scaled(5.0) * 1000))])
        self.assertGreater(later, token)
        self.d.wait_log(r"lease %s \(token %d\) expired" % (re.escape(n), token), since=mark)
        for args in (["renew", n, str(token), "60000"], ["release", n, str(token)]):
            with self.subTest(args=args):
                p = self.lb(self.hp() + args)
                self.not_held(p, args[0], n, token)
        self.release(n, later)

    def test_shared_and_limit_leases(self):
        n = self.name()
        tokens = [self.lease(n, args=["--shared"]), self.lease(n, args=["-s", "-w", "0"])]
        self.assertRegex(self.lb(self.hp() + ["status", n]).out,
                         r"^STATUS %s held .* mode=shared holders=2 lease=[0-9]+ label=\S+\n$" % re.escape(n))
        p = self.lb(self.hp() + ["lease", "-n", "2", n, "60000"])
        self.assert_exit(p, EXIT_CONFLICT, r"lock %s is in use in another mode or with another "
                         r"limit; cannot take it with limit=2 " % re.escape(n), stdout="")
        for token in tokens:
            self.release(n, token)
        m = self.name()
        tokens = [self.lease(m, args=["-n", "2"]) for _ in range(2)]
        p = self.lb(self.hp() + ["lease", "-w", "0", "-n", "2", m, "60000"])
        self.assert_exit(p, EXIT_TIMEOUT, busy_re(m), stdout="")
        for token in tokens:
            self.release(m, token)

    def test_unwritable_token_releases_the_lease(self):
        # Nobody could renew or release a lease whose token was lost.
        n = self.name()
        r, w = os.pipe()
        os.close(r)
        try:
            p = subprocess.run([client_path()] + self.hp() + ["lease", n, "60000"], stdout=w,
                               stderr=subprocess.PIPE, env=clean_env(), timeout=RUN_TIMEOUT)
        finally:
            os.close(w)
        self.assertEqual(p.returncode, EXIT_USAGE, p.stderr)
        self.assertRegex(p.stderr.decode(), r"^lockbroker: cannot write the token to standard "
                         r"output: .*; lease %s released\n$" % re.escape(n))
        self.assertRegex(self.trylock(n), r"^OK %s [0-9]+$" % re.escape(n))

    def test_largest_token_is_sent(self):
        n = self.name()
        p = self.lb(self.hp() + ["renew", n, "18446744073709551615", "100ms"])
        self.not_held(p, "renew", n, 18446744073709551615)

    def test_bad_name(self):
        for args in (["lease", "a/b", "1000"], ["renew", "a/b", "1", "1000"],
                     ["release", "a/b", "1"], ["release", "", "1"]):
            with self.subTest(args=args):
                p = self.lb(self.hp() + args)
                self.assert_exit(p, EXIT_BAD_NAME, r"invalid lock name '", stdout="")

    def test_usage_errors(self):
        ttl = r"%s: TTL: expected milliseconds, or a time with a unit \(500ms, 60s, 2m, 1h\), " \
              r"from 100 to 86400000 ms; got '%s'"
        tok = r"%s: TOKEN: expected the token `lockbroker lease` printed, an unsigned 64-bit " \
              r"decimal integer, got '%s'"
        cases = [
            (["lease", "n", "99"], ttl % ("lease", "99")),
            (["lease", "n", "86400001"], ttl % ("lease", "86400001")),
            (["lease", "n", "abc"], ttl % ("lease", "abc")),
            (["lease", "n", ""], ttl % ("lease", "")),
            (["lease", "n", "+100"], ttl % ("lease", r"\+100")),
            (["lease", "n", "1e3"], ttl % ("lease", "1e3")),
            (["lease", "n", "-1"], ttl % ("lease", "-1")),
            (["lease", "n", "99ms"], ttl % ("lease", "99ms")),
            (["lease", "n", "25h"], ttl % ("lease", "25h")),
            (["lease", "n", "1441m"], ttl % ("lease", "1441m")),
            (["lease", "n", "86401s"], ttl % ("lease", "86401s")),
            (["lease", "n", "1.5s"], ttl % ("lease", r"1\.5s")),
            (["lease", "n", "5 s"], ttl % ("lease", "5 s")),
            (["lease", "n", "5sec"], ttl % ("lease", "5sec")),
            (["lease", "n", "5M"], ttl % ("lease", "5M")),
            (["lease", "n", "s"], ttl % ("lease", "s")),
            (["renew", "n", "1", "0s"], ttl % ("renew", "0s")),
            (["renew", "n", "1", "99999999999999999999h"],
             ttl % ("renew", "99999999999999999999h")),
            (["renew", "n", "1", "99"], ttl % ("renew", "99")),
            (["renew", "n", "1", "86400001"], ttl % ("renew", "86400001")),
            (["renew", "n", "1", "abc"], ttl % ("renew", "abc")),
            (["renew", "n", "x", "1000"], tok % ("renew", "x")),
            (["release", "n", "x"], tok % ("release", "x")),
            (["release", "n", ""], tok % ("release", "")),
            (["release", "n", "+1"], tok % ("release", r"\+1")),
            (["release", "n", "1.0"], tok % ("release", r"1\.0")),
            (["release", "n", "18446744073709551616"], tok % ("release", "18446744073709551616")),
            (["release", "n", "1" * 21], tok % ("release", "1" * 21)),
            (["lease"], r"lease: expected NAME TTL"),
            (["lease", "n"], r"lease: expected NAME TTL"),
            (["lease", "n", "1000", "extra"], r"unexpected argument 'extra'"),
            (["renew"], r"renew: expected NAME TOKEN TTL"),
            (["renew", "n", "1"], r"renew: expected NAME TOKEN TTL"),
            (["renew", "n", "1", "1000", "extra"], r"unexpected argument 'extra'"),
            (["release"], r"release: expected NAME TOKEN"),
            (["release", "n"], r"release: expected NAME TOKEN"),
            (["release", "n", "1", "extra"], r"unexpected argument 'extra'"),
            (["lease", "-g", "100ms", "n", "1000"], r"lease: -g is an option of run"),
            (["lease", "-s", "-n", "2", "n", "1000"],
             r"--shared and --limit are mutually exclusive"),
            (["lease", "-w", "soon", "n", "1000"], r"-w: expected milliseconds"),
            (["renew", "-w", "5ms", "n", "1", "1000"],
             r"renew: -w, -g, -s, -n and -E are options of run \(-w, -s, -n and -E also of "
             r"lease\)"),
            (["-s", "release", "n", "1"],
             r"release: -w, -g, -s, -n and -E are options of run"),
            # Options after NAME are operands to getopt: said so, whatever the count.
            (["lease", "n", "-w", "1000", "5000"],
             r"lease: option '-w' after NAME: options go before NAME"),
            (["lease", "n", "5000", "--shared"],
             r"lease: option '--shared' after NAME: options go before NAME"),
            (["renew", "n", "1", "5000", "-t", "1s"],
             r"renew: option '-t' after NAME: options go before NAME"),
            (["release", "n", "-H"], r"release: option '-H' after NAME: options go before NAME"),
        ]
        for args, err in cases:
            with self.subTest(args=args):
                p = self.lb(self.hp() + args)
                self.assert_exit(p, EXIT_USAGE, err + r".* \(lockbroker --help for usage\)$",
                                 stdout="")


class SignalTests(DaemonCase):
    """SIGINT, SIGTERM and SIGHUP sent to lockbroker reach the command."""

    def test_signals_are_forwarded(self):
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            with self.subTest(sig=sig.name):
                p = self.start(self.hp() + ["run", self.name(), "--"] + trapper(code=7))
                self.assertEqual(p.read_line(), "ready")
                p.signal(sig)
                p.finish()
                self.assert_exit(p, 7, stdout="trapped-%s\n" % sig.name[3:])
                self.assertEqual(p.err, "")

    def test_untrapped_sigterm_ends_command_and_releases_lock(self):
        n = self.name()
        p = self.start(self.hp() + ["run", n, "--", "sh", "-c", "echo ready; exec sleep 600"])
        self.assertEqual(p.read_line(), "ready")
        p.signal(signal.SIGTERM)
        p.finish()
        self.assert_exit(p, 128 + signal.SIGTERM, stdout="")
        c = self.client()
        c.send("TRYLOCK %s\n" % n)
        c.expect_match(r"OK %s [0-9]+" % re.escape(n))

    def test_signal_reaches_the_whole_process_group(self):
        # The command starts a child that traps SIGTERM itself; both hear of it.
        script = """
import signal, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, text=True)
assert child.stdout.readline() == "child-ready\\n"
def on(sig, frame):
    print(child.stdout.read().strip(), flush=True)   # the child's trapped line
    print("parent-trapped", flush=True)
    sys.exit(9)
signal.signal(signal.SIGTERM, on)
print("ready", flush=True)
while True:
    signal.pause()
"""
        child = trapper(code=0, ready='"child-ready"')[2]
        p = self.start(self.hp() + ["run", self.name(), "--", sys.executable, "-c", script,
                                    child])
        self.assertEqual(p.read_line(), "ready")
        p.signal(signal.SIGTERM)
        p.finish()
        self.assert_exit(p, 9, stdout="trapped-TERM\nparent-trapped\n")
        self.assertEqual(p.err, "")

    def group_gone_at_release(self, n, pgid):
        """Starts a run queued behind n that prints, once granted n, which
        processes of group pgid are left (GROUP_MEMBERS); returns it."""
        mark = self.d.log_mark()
        waiter = self.start(self.hp() + ["run", n, "--", sys.executable, "-c", GROUP_MEMBERS,
                                         str(pgid)])
        self.d.wait_log(r"lock %s: \S+ queued$" % re.escape(n), since=mark)
        return waiter

    def test_stop_signal_ends_the_whole_group_before_the_release(self):
        # A shell's background job ignores SIGINT (and this one SIGTERM too):
        # passing the signal on ends the shell, not the job, which must not
        # run on once the lock is free. The run queued behind looks at the
        # group as soon as it is granted the lock.
        for sig, job in ((signal.SIGINT, "sleep 300 >/dev/null 2>&1 &"),
                         (signal.SIGTERM, "(trap '' TERM; exec sleep 300) >/dev/null 2>&1 &")):
            with self.subTest(sig=sig.name):
                n = self.name()
                p = self.start(self.hp() + ["run", n, "--", "sh", "-c",
                                            job + " echo $$ $!; exec sleep 301"])
                pgid, job_pid = (int(x) for x in p.read_line().split())
                self.addCleanup(kill_if_alive, job_pid)
                waiter = self.group_gone_at_release(n, pgid)
                p.signal(sig)
                p.finish()
                self.assert_exit(p, 128 + sig, stdout="")
                self.assertEqual(p.err, "")
                waiter.finish()
                self.assert_exit(waiter, 0, stdout="none\n")
                self.assertFalse(pid_alive(job_pid))

    def test_command_that_ignores_the_stop_signal_is_killed_after_the_grace(self):
        for sig in (signal.SIGINT, signal.SIGTERM):
            with self.subTest(sig=sig.name):
                n = self.name()
                p = self.start(self.hp() + ["run", "-g", "200ms", n, "--"] +
                               trapper(ignore=True, ready="os.getpid()"))
                pid = int(p.read_line())
                self.addCleanup(kill_if_alive, pid)
                waiter = self.group_gone_at_release(n, pid)
                p.signal(sig)
                p.finish()
                self.assert_exit(p, 128 + signal.SIGKILL,
                                 r"the command did not end within the grace period \(-g\) "
                                 r"after %s: killed$" % sig.name, stdout="")
                waiter.finish()
                self.assert_exit(waiter, 0, stdout="none\n")

    def test_sighup_is_only_passed_on(self):
        # SIGHUP often means "reload": the command that traps it runs on,
        # past the grace period, with the lock.
        n = self.name()
        script = ("import signal, sys\n"
                  "signal.signal(signal.SIGHUP, lambda s, f: print('reload', flush=True))\n"
                  "print('ready', flush=True)\n"
                  "sys.stdin.readline()\n")
        p = self.start(self.hp() + ["run", "-g", "0", n, "--", sys.executable, "-c", script],
                       stdin=subprocess.PIPE)
        self.assertEqual(p.read_line(), "ready")
        p.signal(signal.SIGHUP)
        self.assertEqual(p.read_line(), "reload")
        c = self.client()
        c.send("TRYLOCK %s\n" % n)
        c.expect("BUSY %s" % n)
        p.write("done\n")
        p.finish()
        self.assert_exit(p, 0, stdout="")
        self.assertEqual(p.err, "")


@lbharness.skip_unless(shutil.which("setsid"), "tools", "needs setsid(1) from util-linux")
class TerminalTests(DaemonCase):
    """As a terminal's foreground job, lockbroker hands the terminal to the command."""

    def pty_run(self, args):
        master, slave = os.openpty()
        self.addCleanup(os.close, master)
        # setsid -c: a new session whose controlling terminal is stdin, the pty.
        p = subprocess.Popen(["setsid", "-c", "-w", client_path()] + args,
                             stdin=slave, stdout=slave, stderr=slave, env=clean_env())
        os.close(slave)

        def cleanup():
            if p.poll() is None:
                p.kill()
            p.wait()
        self.addCleanup(cleanup)
        return p, master

    def read_until(self, master, text, timeout=TIMEOUT):
        got = b""
        deadline = lbharness.time.monotonic() + timeout
        while text.encode() not in got:
            left = deadline - lbharness.time.monotonic()
            if left <= 0 or not select.select([master], [], [], left)[0]:
                self.fail("no %r on the terminal within %.1fs; got %r" % (text, timeout, got))
            try:
                data = os.read(master, 4096)
            except OSError:       # EIO: every slave side is closed
                data = b""
            if not data:
                self.fail("terminal closed before %r; got %r" % (text, got))
            got += data
        return got.decode()

    def wait(self, p):
        try:
            return p.wait(RUN_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.fail("lockbroker did not exit")

    def test_command_reads_the_terminal(self):
        p, m = self.pty_run(self.hp() + ["run", self.name(), "--", "sh", "-c",
                                         'echo ready; read x; echo "got $x"'])
        self.read_until(m, "ready")
        os.write(m, b"hello\n")
        self.read_until(m, "got hello")
        self.assertEqual(self.wait(p), 0)

    def test_ctrl_c_reaches_the_command(self):
        p, m = self.pty_run(self.hp() + ["run", self.name(), "--", "sh", "-c",
                                         "echo ready; exec sleep 600"])
        self.read_until(m, "ready")
        os.write(m, b"\x03")
        self.assertEqual(self.wait(p), 128 + signal.SIGINT)

    def test_ctrl_c_ends_the_whole_group_before_the_release(self):
        # ^C goes from the terminal to the command's group, not through
        # lockbroker: the shell dies of it, its background job ignores it,
        # and must be gone before the lock is free.
        n = self.name()
        p, m = self.pty_run(self.hp() + ["run", n, "--", "sh", "-c",
                                         "sleep 300 & echo pids $$ $! .; exec sleep 301"])
        pgid, job_pid = (int(x) for x in
                         re.search(r"pids ([0-9]+) ([0-9]+) \.", self.read_until(m, " .")).groups())
        self.addCleanup(kill_if_alive, job_pid)
        mark = self.d.log_mark()
        waiter = LbProc(self.hp() + ["run", n, "--", sys.executable, "-c", GROUP_MEMBERS,
                                     str(pgid)])
        self.addCleanup(waiter.kill)
        self.d.wait_log(r"lock %s: \S+ queued$" % re.escape(n), since=mark)
        os.write(m, b"\x03")
        self.assertEqual(self.wait(p), 128 + signal.SIGINT)
        self.assertEqual(waiter.finish(), 0, waiter.err)
        self.assertEqual(waiter.out, "none\n")


# ============================================================ errors, usage

class ErrorTests(DaemonCase):

    def test_unreachable_broker(self):
        port = free_port()
        n = self.name()
        for args in (["ping"], ["stats"], ["status", n], ["locks"], ["run", n, "--", "echo", "ran"],
                     ["lease", n, "1000"], ["renew", n, "1", "1000"], ["release", n, "1"]):
            with self.subTest(args=args):
                p = self.lb(["-H", "127.0.0.1:%d" % port] + args)
                self.assert_exit(p, EXIT_UNAVAILABLE,
                                 r"cannot connect to 127\.0\.0\.1:%d: Connection refused$" % port,
                                 stdout="")

    def test_unreachable_unix_socket(self):
        path = os.path.join(make_tmpdir(), "nothing.sock")
        p = self.lb(["-U", path, "run", self.name(), "--", "echo", "ran"])
        self.assert_exit(p, EXIT_UNAVAILABLE, r"cannot connect to %s: " % re.escape(path),
                         stdout="")

    def test_unresolvable_host(self):
        p = self.lb(["-H", "no-such-host.invalid:7411", "ping"])
        self.assert_exit(p, EXIT_UNAVAILABLE, r"cannot resolve no-such-host\.invalid: ", stdout="")

    def test_bad_name(self):
        for name in ("a/b", ".", "..", "x" * 201, "sp ace", ""):
            with self.subTest(name=name):
                p = self.lb(self.hp() + ["run", name, "--", "echo", "ran"])
                self.assert_exit(p, EXIT_BAD_NAME, r"invalid lock name '", stdout="")
                p = self.lb(self.hp() + ["status", name])
                self.assert_exit(p, EXIT_BAD_NAME, r"invalid lock name '", stdout="")

    def test_bad_set(self):
        n = self.name()
        for names in (n + ",a/b", n + ",", "," + n, n + ",,b",
                      ",".join("%s-%d" % (n, i) for i in range(17))):
            with self.subTest(names=names):
                p = self.lb(self.hp() + ["run", names, "--", "echo", "ran"])
                self.assert_exit(p, EXIT_BAD_NAME, r"(invalid lock name '|a set of locks has "
                                 r"at most 16 names)", stdout="")
        # Only run takes a set.
        p = self.lb(self.hp() + ["status", n + ",b"])
        self.assert_exit(p, EXIT_BAD_NAME, r"invalid lock name '", stdout="")

    def test_longest_name_is_fine(self):
        p = self.lb(self.hp() + ["run", "n" * 200, "--", "true"])
        self.assert_exit(p, 0)

    def test_usage_errors(self):
        addr = self.d.listen_addr
        cases = [
            ([], r"missing subcommand"),
            (["frobnicate"], r"unknown subcommand 'frobnicate'"),
            (["-x", "ping"], r"unknown option -x"),
            (["--frob", "ping"], r"unknown option --frob"),
            (["ping", "-H"], r"option -H needs an argument"),
            (["-H", addr, "ping", "extra"], r"unexpected argument 'extra'"),
            (["-H", addr, "stats", "extra"], r"unexpected argument 'extra'"),
            (["-H", addr, "status", "a", "b"], r"status: expected one lock NAME, or none"),
            (["-H", addr, "run"], r"run: missing lock NAME"),
            (["-H", addr, "run", "n"], r"run n: missing COMMAND"),
            (["-H", addr, "run", "n", "--"], r"run n: missing COMMAND"),
            (["-H", addr, "run", "-w", "soon", "n", "true"], r"-w: expected milliseconds"),
            (["-H", addr, "run", "-w", "2147483648", "n", "true"], r"-w: expected milliseconds"),
            (["-H", addr, "run", "-w", "-1", "n", "true"], r"-w: expected milliseconds"),
            (["-H", addr, "run", "-g", "5 s", "n", "true"], r"-g: expected milliseconds"),
            (["-H", addr, "run", "-w", "2147483648ms", "n", "true"],
             r"-w: expected milliseconds, or a time with a unit \(500ms, 60s, 2m, 1h\), from 0 to "
             r"2147483647 ms; got '2147483648ms'"),
            (["-H", addr, "run", "-w", "597h", "n", "true"], r"-w: expected milliseconds.*'597h'"),
            (["-H", addr, "run", "-w", "35792m", "n", "true"], r"-w: expected milliseconds"),
            (["-H", addr, "run", "-w", "99999999999999999999h", "n", "true"],
             r"-w: expected milliseconds"),
            (["-H", addr, "run", "-w", "1.5s", "n", "true"], r"-w: expected milliseconds"),
            (["-H", addr, "run", "-w", "10S", "n", "true"], r"-w: expected milliseconds"),
            (["-H", addr, "run", "-w", "1d", "n", "true"], r"-w: expected milliseconds"),
            (["-H", addr, "run", "-w", "ms", "n", "true"], r"-w: expected milliseconds"),
            (["-H", addr, "run", "-w", "-1s", "n", "true"], r"-w: expected milliseconds"),
            (["-H", addr, "run", "-w", "", "n", "true"], r"-w: expected milliseconds.*got ''"),
            (["-H", addr, "-t", "0s", "ping"], r"-t: expected milliseconds.*from 1 to"),
            (["-H", addr, "-t", "0ms", "ping"], r"-t: expected milliseconds.*from 1 to"),
            # An option after NAME would be the command; -- says it is one.
            (["-H", addr, "run", "n", "-w", "1000", "true"],
             r"run n: '-w' after NAME would be run as the command: options go before NAME, and "
             r"a COMMAND that starts with '-' needs -- before it"),
            (["-H", addr, "run", "n", "--shared", "true"], r"run n: '--shared' after NAME"),
            (["-H", addr, "run", "n", "-", "true"], r"run n: '-' after NAME"),
            (["-H", addr, "run", "-w", "0", "n", "-1"], r"run n: '-1' after NAME"),
            (["-H", addr, "status", "n", "-v"],
             r"status: option '-v' after NAME: options go before NAME"),
            (["-H", addr, "-t", "0", "ping"], r"-t: expected milliseconds"),
            (["-H", addr, "-w", "5ms", "ping"], r"ping: -w, -g, -s, -n and -E are options of run"),
            (["-H", addr, "-s", "ping"], r"ping: -w, -g, -s, -n and -E are options of run"),
            (["-H", addr, "--nonblock", "ping"], r"ping: -w, -g, -s, -n and -E are options of "
                                                  r"run"),
            (["-H", addr, "status", "--limit", "2"], r"status: -w, -g, -s, -n and -E are options"),
            (["-H", addr, "run", "--limit", "0", "n", "true"],
             r"--limit: expected a number of holders from 1 to 65535, got '0'"),
            (["-H", addr, "run", "--limit", "65536", "n", "true"],
             r"--limit: expected a number of holders from 1 to 65535, got '65536'"),
            (["-H", addr, "run", "--limit", "abc", "n", "true"],
             r"--limit: expected a number of holders from 1 to 65535, got 'abc'"),
            (["-H", addr, "run", "-n", "-1", "n", "true"], r"--limit: expected a number"),
            (["-H", addr, "run", "-n", "+2", "n", "true"], r"--limit: expected a number"),
            (["-H", addr, "run", "--limit=", "n", "true"], r"--limit: expected a number"),
            (["-H", addr, "run", "-n", "99999999999999999999", "n", "true"],
             r"--limit: expected a number"),
            (["-H", addr, "run", "--limit"], r"option --limit needs an argument"),
            (["-H", addr, "run", "--shared", "--limit", "2", "n", "true"],
             r"--shared and --limit are mutually exclusive"),
            (["-H", addr, "-n", "2", "run", "-s", "n", "true"],
             r"--shared and --limit are mutually exclusive"),
            (["-H", addr, "-U", "/tmp/x.sock", "ping"], r"-H and -U are mutually exclusive"),
            (["-H", addr, "run", "--label", "a b", "n", "true"],
             r"--label: expected 1-100 printable ASCII characters other than space, got 'a b'"),
            (["-H", addr, "run", "--label", "", "n", "true"], r"--label: expected"),
            (["-H", addr, "run", "--label", "x" * 101, "n", "true"], r"--label: expected"),
            (["-H", addr, "lease", "--label", "caf\u00e9", "n", "1m"], r"--label: expected"),
            (["-H", addr, "run", "--label"], r"option --label needs an argument"),
            (["-H", addr, "status", "--label", "x", "n"],
             r"status: --label, -v and -q are options of run and lease"),
            (["-H", addr, "-v", "ping"], r"ping: --label, -v and -q are options of run and lease"),
            (["-H", addr, "locks", "--verbose"], r"locks: --label, -v and -q are options"),
            (["-H", addr, "locks", "a", "b"], r"unexpected argument 'b'"),
            (["-H", addr, "locks", "a/b"],
             r"locks: GLOB: expected 1-200 characters of lock names \(A-Z a-z 0-9 \. _ : @ -\) "
             r"and \* \? \[ \] !, got 'a/b'"),
            (["-H", addr, "locks", "a b"], r"locks: GLOB: expected"),
            (["-H", addr, "locks", ""], r"locks: GLOB: expected"),
            (["-H", addr, "locks", "*" * 201], r"locks: GLOB: expected"),
            # A set left open would match nothing: the protocol's reason.
            (["-H", addr, "locks", "a["],
             r"locks: GLOB: a '\[' in the pattern has no '\]' after it \(a set is \[\.\.\.\] or "
             r"\[!\.\.\.\]\), got 'a\['"),
            (["-H", addr, "locks", "--cluster", "a]"], r"locks: GLOB: a '\]' in the pattern"),
            (["-H", "localhost:", "ping"], r"-H: bad address 'localhost:': the port must be"),
            (["-H", "::1:7411", "ping"], r"-H: bad address .*\[IPV6\]:PORT"),
            (["-H", "127.0.0.1:0", "ping"], r"-H: bad address .*1-65535"),
            (["-H", "127.0.0.1:65536", "ping"], r"-H: bad address .*1-65535"),
            (["-H", "[::1]7411", "ping"], r"-H: bad address"),
        ]
        for args, err in cases:
            with self.subTest(args=args):
                p = self.lb(args)
                self.assert_exit(p, EXIT_USAGE, err + r".* \(lockbroker --help for usage\)$",
                                 stdout="")

    def test_bad_lockbroker_addr(self):
        p = self.lb(["ping"], env=clean_env(LOCKBROKER_ADDR="nonsense:x"))
        self.assert_exit(p, EXIT_USAGE, r"LOCKBROKER_ADDR: bad address 'nonsense:x'", stdout="")

    def test_host_without_a_port_is_the_default_port(self):
        for host in ("127.0.0.1", "[127.0.0.1]"):
            with self.subTest(host=host):
                p = self.lb(["-H", host, "-t", "2s", "ping"])
                # Nobody may listen on 7411 here: then the error names it.
                if p.rc != 0:
                    self.assert_exit(p, EXIT_UNAVAILABLE, r".*127\.0\.0\.1\]?:7411", stdout="")

    def test_help_and_version(self):
        for args in (["-h"], ["--help"], ["help"], ["run", "--help"]):
            with self.subTest(args=args):
                p = self.lb(args)
                self.assert_exit(p, 0)
                self.assertEqual(p.err, "")
                self.assertTrue(p.out.startswith("Usage: lockbroker"), p.out)
                for code in [1] + list(range(118, 128)):
                    self.assertRegex(p.out, r"\n +%d " % code)
                self.assertRegex(p.out, r"\n +1  status NAME: the lock is free")
                self.assertIn("lockbroker [OPTIONS] locks [--cluster] [--json | --human | --raw] "
                              "[GLOB]", p.out)
                self.assertIn("--label L", p.out)
                self.assertIn("--verbose", p.out)
        p = self.lb(["-V"])
        self.assert_exit(p, 0)
        self.assertRegex(p.out, r"^lockbroker [0-9][^\s]*\n$")


# ==================================================== ping, stats, status

class InfoTests(DaemonCase):

    def test_ping(self):
        p = self.lb(self.hp() + ["ping"])
        self.assert_exit(p, 0, stdout="PONG\n")
        self.assertEqual(p.err, "")

    def test_stats(self):
        p = self.lb(self.hp() + ["stats"])
        self.assert_exit(p, 0)
        self.assertEqual(p.err, "")
        lines = p.out.splitlines()
        self.assertTrue(lines)
        for line in lines:
            self.assertRegex(line, r"^STAT [a-z_]+ \S+$")
        self.assertIn("STAT mode embedded", lines)
        self.assertNotIn("END", lines)

    def daemon_id(self):
        return self.d.wait_log(r"daemon id (\S+)").group(1)

    def test_status_against_the_daemon(self):
        # A free lock exits 1, so that scripts can test it.
        n = self.name()
        p = self.lb(self.hp() + ["status", n])
        self.assert_exit(p, EXIT_FREE, stdout="STATUS %s free holder=- token=- since=- waiters=0 "
                         "queue=0\n" % n)
        self.assertEqual(p.err, "")

    def test_status_of_a_held_lock_exits_0(self):
        n = self.name()
        holder = self.client()
        holder.send("CLIENT ops@db1:42:backup\nLOCK %s\n" % n)
        holder.expect("OK")
        token = holder.expect_match(r"OK %s ([0-9]+)" % re.escape(n)).group(1)
        p = self.lb(self.hp() + ["status", n])
        self.assert_exit(p, 0)
        self.assertEqual(p.err, "")
        self.assertRegex(p.out, r"^STATUS %s held holder=%s/%s token=%s since=[0-9]+ waiters=0 "
                         r"queue=1 label=ops@db1:42:backup\n$"
                         % (re.escape(n), re.escape(self.daemon_id()), re.escape(holder.local),
                            token))
        holder.send("UNLOCK %s\n" % n)
        holder.expect("OK %s" % n)
        p = self.lb(self.hp() + ["status", n])
        self.assert_exit(p, EXIT_FREE)
        self.assertRegex(p.out, r"^STATUS %s free " % re.escape(n))

    DURATION = r"([0-9]+ms|[0-9]+s|[0-9]+m[0-9]{2}s|[0-9]+h[0-9]{2}m|[0-9]+d[0-9]{2}h)"
    # locks: how long requests waited; status: the queue across daemons.
    HEADER = (r"^NAME +STATE +MODE +HOLDER +LABEL +TOKEN +HELD FOR +WAITED +HOLDERS +WAITERS +"
              r"LEASE LEFT +KEEP LEFT$")
    STATUS_HEADER = (r"^NAME +STATE +MODE +HOLDER +LABEL +TOKEN +HELD FOR +HOLDERS +WAITERS +"
                     r"QUEUE +LEASE LEFT +KEEP LEFT$")

    def test_human_views_of_locks_and_status(self):
        n = self.name()
        p = self.lb(self.hp() + ["lease", "--label", "ops@web-3", n + "-l", "60s"])
        self.assert_exit(p, 0)
        token = p.out.strip()
        self.addCleanup(self.lb, self.hp() + ["release", n + "-l", token])
        c = self.client()
        c.request("CLIENT ops@db1:7:deploy")
        c.request("LOCK %s-d delay=60000" % n)
        c.close()                 # abandoned: its lock-delay keeps the name
        self.d.wait_log(r"lock %s-d: \S+ ended without a release" % re.escape(n))
        p = self.lb(self.hp() + ["locks", "--human", n + "-*"])
        self.assert_exit(p, 0)
        lines = p.out.splitlines()
        self.assertRegex(lines[0], self.HEADER)
        self.assertEqual(len(lines), 3, p.out)
        # The gone holder, by its label, and the time its lock-delay keeps it.
        self.assertRegex(lines[1], r"^%s-d +held +exclusive +\S+ +ops@db1:7:deploy +[0-9]+ +%s +- "
                         r"+1 +0 +- +%s$" % (re.escape(n), self.DURATION, self.DURATION))
        self.assertRegex(lines[2], r"^%s-l +held +exclusive +\S+/lease:\S+ +ops@web-3 +%s +%s +- "
                         r"+1 +0 +%s +-$" % (re.escape(n), token, self.DURATION, self.DURATION))
        p = self.lb(self.hp() + ["status", "--human", n + "-d"])
        self.assert_exit(p, 0)
        lines = p.out.splitlines()
        self.assertRegex(lines[0], self.STATUS_HEADER)
        self.assertRegex(lines[1], r"^%s-d +held +exclusive .* ops@db1:7:deploy .* +0 +1 +- +%s$"
                         % (re.escape(n), self.DURATION))
        p = self.lb(self.hp() + ["status", "--human", n + "-free"])
        self.assert_exit(p, EXIT_FREE)
        self.assertRegex(p.out.splitlines()[1], r"^%s-free +free +- " % re.escape(n))
        # For programs: the protocol's lines (--raw, or stdout not a terminal), JSON.
        for flags in ([], ["--raw"]):
            raw = self.lb(self.hp() + ["locks"] + flags + [n + "-l"])
            self.assertRegex(raw.out, r"^LOCK %s-l exclusive .* lease=[0-9]+\n$" % re.escape(n))
        p = self.lb(self.hp() + ["locks", "--json", n + "-*"])
        self.assert_exit(p, 0)
        objs = [json.loads(line) for line in p.out.splitlines()]
        self.assertEqual([o["name"] for o in objs], [n + "-d", n + "-l"])
        self.assertIsInstance(objs[0]["delay"], int)
        self.assertEqual(objs[0]["label"], "ops@db1:7:deploy")
        self.assertEqual(objs[1]["token"], token)
        self.assertIsInstance(objs[1]["lease"], int)
        self.assertEqual(objs[1]["label"], "ops@web-3")
        # --cluster: HOLDERS, one row per holder, in each of the three forms.
        p = self.lb(self.hp() + ["locks", "--cluster", "--human", n + "-l"])
        self.assert_exit(p, 0)
        lines = p.out.splitlines()
        self.assertRegex(lines[0], self.HEADER)
        self.assertRegex(lines[1], r"^%s-l +held +exclusive +\S+/lease:\S+ +ops@web-3 +%s +%s +"
                         r"- +1 +- +%s +-$" % (re.escape(n), token, self.DURATION, self.DURATION))
        raw = self.lb(self.hp() + ["locks", "--cluster", n + "-l"])
        self.assertRegex(raw.out, r"^HOLDER %s-l exclusive held holder=\S+ label=ops@web-3 "
                         r"token=%s since=[0-9]+ lease=[0-9]+\n$" % (re.escape(n), token))
        p = self.lb(self.hp() + ["locks", "--cluster", "--json", n + "-l"])
        obj = json.loads(p.out)
        self.assertEqual((obj["name"], obj["mode"], obj["state"], obj["token"]),
                         (n + "-l", "exclusive", "held", token))
        p = self.lb(self.hp() + ["status", "--cluster", n])
        self.assert_exit(p, EXIT_USAGE)
        self.assertIn("--cluster is an option of locks", p.err)

    def test_elect_and_observe(self):
        n = self.name()
        obs = self.start(self.hp() + ["observe", n])
        self.assertEqual(obs.read_line(), "-")            # nobody leads yet
        # The leader runs while it leads; a second candidate waits its turn.
        first = self.start(self.hp() + ["elect", "--label", "10.0.0.1:80", n, "--",
                                        "sh", "-c", "echo leading; read x"],
                           stdin=subprocess.PIPE)
        self.assertEqual(first.read_line(), "leading")
        self.assertEqual(obs.read_line(), "10.0.0.1:80")
        second = self.start(self.hp() + ["elect", "--label", "10.0.0.2:80", n, "--",
                                         "echo", "second"])
        self.d.wait_log(r"lock %s: \S+ queued$" % re.escape(n))
        first.write("done\n")                             # the leader steps down
        self.assertEqual(first.finish(), 0)
        self.assertEqual(second.finish(), 0)
        self.assertEqual(second.out, "second\n")
        # Handed straight on: the new leader, then nobody once it is done.
        self.assertEqual([obs.read_line(), obs.read_line()], ["10.0.0.2:80", "-"])
        obs.kill()
        self.assert_exit(self.lb(self.hp() + ["observe", "bad/name"]), 122)

    def test_human_views_say_how_long_waiters_waited(self):
        n = self.name()
        holder, waiter = self.client(), self.client()
        holder.send("LOCK %s\n" % n)
        holder.expect_match(r"OK %s [0-9]+" % re.escape(n))
        t_sent = time.monotonic()
        waiter.send("CLIENT ops@web-2\nLOCK %s\n" % n)
        waiter.expect("OK")
        self.d.wait_queued(waiter, n)
        t_queued = time.monotonic()
        # The line: waited= after waiters=, from when the request was made
        # (bounds measured around the daemon's own clock, at its ms resolution).
        t_asked = time.monotonic()
        p = self.lb(self.hp() + ["locks", "--raw", n])
        t_listed = time.monotonic()
        self.assert_exit(p, 0)
        m = re.fullmatch(r"LOCK %s exclusive holder=\S+ label=- token=[0-9]+ since=[0-9]+ "
                         r"holders=1 waiters=1 waited=([0-9]+)\n" % re.escape(n), p.out)
        self.assertIsNotNone(m, p.out)
        self.assertGreaterEqual(int(m.group(1)), int((t_asked - t_queued) * 1000) - 1)
        self.assertLessEqual(int(m.group(1)), int((t_listed - t_sent) * 1000) + 1)
        p = self.lb(self.hp() + ["locks", "--human", n])
        self.assert_exit(p, 0)
        lines = p.out.splitlines()
        self.assertRegex(lines[0], self.HEADER)
        self.assertRegex(lines[1], r"^%s +held +exclusive +\S+ +- +[0-9]+ +%s +%s +1 +1 +- +-$"
                         % (re.escape(n), self.DURATION, self.DURATION))
        # --cluster: one row per request; the queued one says how long it waited.
        p = self.lb(self.hp() + ["locks", "--cluster", "--human", n])
        self.assert_exit(p, 0)
        lines = p.out.splitlines()
        self.assertEqual(len(lines), 3, p.out)
        self.assertRegex(lines[1], r"^%s +held +exclusive +\S+ +- +[0-9]+ +%s +- " % (
            re.escape(n), self.DURATION))
        self.assertRegex(lines[2], r"^%s +queued +exclusive +\S+ +ops@web-2 +- +- +%s +- +- +- +-$"
                         % (re.escape(n), self.DURATION))
        # No waiter: no waited=, and "-" in the table.
        holder.send("UNLOCK %s\n" % n)
        holder.expect("OK %s" % n)
        waiter.expect_match(r"OK %s [0-9]+" % re.escape(n))
        p = self.lb(self.hp() + ["locks", "--raw", n])
        self.assertRegex(p.out, r" holders=1 waiters=0\n$")
        p = self.lb(self.hp() + ["locks", "--human", n])
        self.assertRegex(p.out.splitlines()[1], r" +%s +- +1 +0 +- +-$" % self.DURATION)

    def test_break(self):
        n = self.name()
        h = self.client()
        h.send("LOCK %s\n" % n)
        t = h.expect_match(r"OK %s ([0-9]+)" % re.escape(n)).group(1)
        p = self.lb(self.hp() + ["break", n, "1"])
        self.assert_exit(p, 118, r"\S+ refused BREAK: ERR NOT_HELD no hold of %s with that "
                         r"token " % re.escape(n))
        p = self.lb(self.hp() + ["break", n])
        self.assert_exit(p, 0)
        h.expect("LOST %s %s broken" % (n, t))
        self.assert_exit(self.lb(self.hp() + ["break", n]), 118, r"\S+ refused BREAK")
        self.assert_exit(self.lb(self.hp() + ["break"]), EXIT_USAGE,
                         r"break: expected NAME \[TOKEN\]")

    def test_locks(self):
        # One lock held, one held and awaited; a glob picks one of them.
        prefix = self.name()
        a, b = prefix + "-a", prefix + "-b"
        h1, h2, waiter = self.client(), self.client(), self.client()
        h1.send("CLIENT first\nLOCK %s\n" % a)
        h1.expect("OK")
        tok_a = h1.expect_match(r"OK %s ([0-9]+)" % re.escape(a)).group(1)
        h2.send("LOCK %s shared\n" % b)
        tok_b = h2.expect_match(r"OK %s ([0-9]+)" % re.escape(b)).group(1)
        waiter.send("CLIENT second\nLOCK %s\n" % b)
        waiter.expect("OK")
        self.d.wait_queued(waiter, b)
        holder = re.escape(self.daemon_id()) + "/"
        line_a = (r"LOCK %s exclusive holder=%s%s label=first token=%s since=[0-9]+ holders=1 "
                  r"waiters=0" % (re.escape(a), holder, re.escape(h1.local), tok_a))
        line_b = (r"LOCK %s shared holder=%s%s label=- token=%s since=[0-9]+ holders=1 "
                  r"waiters=1 waited=[0-9]+" % (re.escape(b), holder, re.escape(h2.local), tok_b))

        p = self.lb(self.hp() + ["locks"])
        self.assert_exit(p, 0)
        self.assertEqual(p.err, "")
        lines = p.out.splitlines()
        for line in lines:
            self.assertRegex(line, r"^LOCK \S+ \S+ holder=\S+ label=\S+ token=\S+ since=\S+ "
                                   r"holders=[0-9]+ waiters=[0-9]+( waited=[0-9]+)?( delay=[0-9]+)?"
                                   r"( lease=[0-9]+)?$")
        ours = [line for line in lines if line.split()[1] in (a, b)]
        self.assertEqual(len(ours), 2, p.out)
        self.assertRegex(ours[0], "^" + line_a + "$")
        self.assertRegex(ours[1], "^" + line_b + "$")

        for glob in (prefix + "-[!b]", "*" + prefix[3:] + "-a"):
            with self.subTest(glob=glob):
                p = self.lb(self.hp() + ["locks", glob])
                self.assert_exit(p, 0)
                self.assertEqual(p.err, "")
                self.assertRegex(p.out, "^" + line_a + "\n$")
        p = self.lb(self.hp() + ["locks", prefix + "-none*"])
        self.assert_exit(p, 0, stdout="")
        self.assertEqual(p.err, "")

    def stat_lines(self):
        p = self.lb(self.hp() + ["stats"])
        self.assert_exit(p, 0)
        return dict(line.split(" ", 2)[1:] for line in p.out.splitlines())

    def test_stats_json(self):
        # One object, one line; numbers as numbers, words as strings; the
        # same names as the STAT lines.
        plain = self.stat_lines()
        for args in (["stats", "--json"], ["--json", "stats"], ["status", "--json"]):
            with self.subTest(args=args):
                p = self.lb(self.hp() + args)
                self.assert_exit(p, 0)
                self.assertEqual(p.err, "")
                self.assertEqual(p.out.count("\n"), 1)
                obj = json.loads(p.out)
                self.assertIsInstance(obj, dict)
                self.assertEqual(set(obj), set(plain))
                self.assertEqual(obj["mode"], "embedded")
                self.assertEqual(obj["version"], plain["version"])
                for k, v in obj.items():
                    if k in ("version", "mode"):
                        self.assertIsInstance(v, str, k)
                    else:
                        self.assertIs(type(v), int, k)
                        self.assertGreaterEqual(v, 0)
                self.assertEqual(obj["grants"], obj["grants_exclusive"] + obj["grants_shared"] +
                                 obj["grants_limit"])

    def test_status_json(self):
        n = self.name()
        p = self.lb(self.hp() + ["status", "--json", n])
        self.assert_exit(p, EXIT_FREE)
        self.assertEqual(json.loads(p.out), {
            "name": n, "held": False, "state": "free", "holder": None, "token": None, "since": None,
            "waiters": 0, "queue": 0, "mode": "exclusive", "holders": 0, "limit": None,
            "label": None})
        holder, waiter = self.client(), self.client()
        holder.send("CLIENT ops@db1:42:backup\nLOCK %s\n" % n)
        holder.expect("OK")
        token = holder.expect_match(r"OK %s ([0-9]+)" % re.escape(n)).group(1)
        waiter.send("LOCK %s\n" % n)
        self.d.wait_queued(waiter, n)
        p = self.lb(self.hp() + ["status", "--json", n])
        self.assert_exit(p, 0)
        self.assertEqual(p.err, "")
        obj = json.loads(p.out)
        self.assertIsInstance(obj.pop("since"), int)
        self.assertEqual(obj, {
            "name": n, "held": True, "state": "held",
            "holder": "%s/%s" % (self.daemon_id(), holder.local),
            "token": token, "waiters": 1, "queue": 2, "mode": "exclusive", "holders": 1,
            "limit": None, "label": "ops@db1:42:backup"})
        holder.close()
        waiter.expect_match(r"OK %s [0-9]+" % re.escape(n))
        waiter.close()
        # Shared holders: mode and their number from the line.
        readers = [self.client() for _ in range(2)]
        for r in readers:
            r.send("LOCK %s-r shared\n" % n)
            r.expect_match(r"OK %s-r [0-9]+" % re.escape(n))
        obj = json.loads(self.lb(self.hp() + ["status", "--json", n + "-r"]).out)
        self.assertEqual((obj["held"], obj["mode"], obj["holders"], obj["queue"]),
                         (True, "shared", 2, 2))
        for r in readers:
            r.close()

    def test_json_is_only_for_stats_status_and_locks(self):
        for args in (["ping", "--json"], ["--json", "lease", "x", "1s"]):
            with self.subTest(args=args):
                p = self.lb(self.hp() + args)
                self.assert_exit(p, EXIT_USAGE,
                                 r"\S+: --json is an option of stats, status and locks")
                self.assertEqual(p.out, "")

    def test_status_without_a_name_summarises_the_daemon(self):
        p = self.lb(self.hp() + ["status"])
        self.assertEqual(p.rc, 0, p.err)
        self.assertRegex(p.out, r"^lockbrokerd \d+\.\d+\.\d+ at \S+: embedded mode, up \d+ s, "
                                r"\d+ connections, \d+ locks held, \d+ waiting\n$")


# ============================================ labels, and who holds a wait

class WhoHoldsTests(DaemonCase):
    """run and lease name their connection (CLIENT), and run says who holds
    the lock it waits for."""

    SH = shutil.which("sh")

    def status(self, n):
        p = self.lb(self.hp() + ["status", n])
        self.assert_exit(p, 0)
        return p.out.rstrip("\n")

    def holding(self, args, n, command=None):
        """Starts `run ARGS n -- COMMAND` (a shell that holds the lock until
        the test writes a line) and returns once the command runs."""
        command = command or [self.SH, "-c", "echo in; read x"]
        p = self.start(self.hp() + ["run"] + args + [n, "--"] + command, stdin=subprocess.PIPE)
        self.assertEqual(p.read_line(), "in")
        return p

    def done(self, p):
        p.write("done\n")
        p.finish()
        self.assert_exit(p, 0, stdout="")
        self.assertEqual(p.err, "")

    def test_run_labels_its_connection(self):
        # user@host:pid:command, pid lockbroker's, command the basename.
        n = self.name()
        p = self.holding([], n)
        self.assertTrue(self.status(n).endswith(" label=" + default_label(p.pid, "sh")),
                        (self.status(n), default_label(p.pid, "sh")))
        self.done(p)

    def test_default_label_is_sanitised_and_cut(self):
        tmp = make_tmpdir()
        name = "hold me\u00e9-" + "x" * 120
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\necho in; read x\n")
        os.chmod(path, 0o755)
        n = self.name()
        p = self.holding([], n, command=[path])
        label = default_label(p.pid, os.fsencode(name).decode("latin-1"))
        self.assertEqual(len(label), 100)
        self.assertIn(":hold_me__-xxx", label)   # é is two bytes in UTF-8
        self.assertTrue(self.status(n).endswith(" label=" + label), (self.status(n), label))
        self.done(p)

    def test_label_option(self):
        n = self.name()
        p = self.holding(["--label", "deploy:v2.1/web"], n)
        self.assertTrue(self.status(n).endswith(" label=deploy:v2.1/web"), self.status(n))
        self.done(p)
        # A lease keeps its taker's label: the option's, or user@host:pid:lease.
        for args, label_re in ((["--label", "cron@web1"], r"cron@web1"),
                               ([], r"%s@[^:\s]+:[0-9]+:lease" % re.escape(
                                   pwd.getpwuid(os.getuid()).pw_name))):
            with self.subTest(args=args):
                m = self.name()
                p = self.lb(self.hp() + ["lease"] + args + [m, "60000"])
                self.assert_exit(p, 0)
                token = p.out.strip()
                self.assertRegex(self.status(m), r" label=%s$" % label_re)
                p = self.lb(self.hp() + ["release", m, token])
                self.assert_exit(p, 0, stdout="")

    def test_verbose_says_who_holds_the_lock(self):
        n = self.name()
        holder = self.client()
        holder.send("CLIENT ops@db1:42:backup\nLOCK %s\n" % n)
        holder.expect("OK")
        holder.expect_match(r"OK %s [0-9]+" % re.escape(n))
        daemon_id = self.d.wait_log(r"daemon id (\S+)").group(1)
        # quiet waits first, without -v and with stderr not a terminal.
        mark = self.d.log_mark()
        quiet = self.start(self.hp() + ["run", n, "--", "echo", "quiet"])
        self.d.wait_log(r"lock %s: \S+ queued$" % re.escape(n), since=mark)
        loud = self.start(self.hp() + ["run", "--verbose", n, "--", "echo", "loud"])
        self.assertRegex(loud.read_err_line(),
                         r"^lockbroker: waiting for lock %s \(held by %s/%s "
                         r"label=ops@db1:42:backup since [0-9]{4}-[0-9]{2}-[0-9]{2} "
                         r"[0-9]{2}:[0-9]{2}:[0-9]{2}\)$"
                         % (re.escape(n), re.escape(daemon_id), re.escape(holder.local)))
        holder.send("UNLOCK %s\n" % n)
        holder.expect("OK %s" % n)
        # quiet had waited longer than loud: it said nothing. loud said it once.
        quiet.finish()
        self.assert_exit(quiet, 0, stdout="quiet\n")
        self.assertEqual(quiet.err, "")
        loud.finish()
        self.assert_exit(loud, 0, stdout="loud\n")
        self.assertEqual(loud.err, "")


class LoginTests(DaemonCase):
    """A daemon with a users file: lockbroker says how to log in."""

    # alice's password, hunter2, made with `openssl passwd -6 -salt lbtesthunter2`
    # (as in test_auth.py).
    HASH = ("$6$lbtesthunter2$ms9bf49IIzrJYI8.ns.owCRM0MxFMINUOmhBJxmHyyFpPn3L88VTo."
            "ldPhMEMF/ZksVMlp/L/a8MQS5czeLx5/")

    @staticmethod
    def daemon_config(tmpdir):
        path = os.path.join(tmpdir, "users")
        with open(path, "w") as f:
            f.write("alice:%s:*\n" % LoginTests.HASH)
        os.chmod(path, 0o600)
        return "[server]\nusers_file = %s\n" % path

    def test_without_a_login(self):
        n = self.name()
        addr = re.escape(self.d.listen_addr)
        for args, refused in ((["status", n], "STATUS"), (["locks"], "LOCKS"),
                              (["run", n, "--", "true"], r"CLIENT \S+")):
            with self.subTest(args=args):
                p = self.lb(self.hp() + args)
                self.assert_exit(p, EXIT_DENIED, addr + " " + LOGIN_ADVICE % refused, stdout="")
        # ping: the daemon answers, and STATS needs the login.
        p = self.lb(self.hp() + ["ping"])
        self.assert_exit(p, 0, r"without a login \(-a USER\), ping cannot tell whether %s "
                         r"reaches its lock service$" % addr, stdout="PONG\n")
        env = clean_env(LOCKBROKER_PASSWORD="hunter2")
        p = self.lb(self.hp() + ["-a", "alice", "ping"], env=env)
        self.assert_exit(p, 0, stdout="PONG\n")
        self.assertEqual(p.err, "")
        p = self.lb(self.hp() + ["-a", "alice", "run", n, "--", "echo", "ran"], env=env)
        self.assert_exit(p, 0, stdout="ran\n")


# ================================================================ addresses

class AddressTests(DaemonCase):

    @classmethod
    def setUpClass(cls):
        cls.d = Daemon(config=lambda tmp: "[server]\nunix_socket = %s/lb.sock\n" % tmp,
                       name="lockbrokerd-cli-unix").start()

    def test_unix_socket_option(self):
        n = self.name()
        p = self.lb(["-U", self.d.unix_path, "run", n, "--", "sh", "-c", 'echo "$LOCKBROKER_ADDR"'])
        self.assert_exit(p, 0, stdout="unix:%s\n" % self.d.unix_path)
        p = self.lb(["-U", self.d.unix_path, "ping"])
        self.assert_exit(p, 0, stdout="PONG\n")

    def test_lockbroker_addr(self):
        for value in (self.d.listen_addr, "unix:" + self.d.unix_path, self.d.unix_path):
            with self.subTest(LOCKBROKER_ADDR=value):
                env = clean_env(LOCKBROKER_ADDR=value)
                p = self.lb(["ping"], env=env)
                self.assert_exit(p, 0, stdout="PONG\n")
                p = self.lb(["run", self.name(), "--", "sh", "-c", "exit 4"], env=env)
                self.assert_exit(p, 4)

    def test_options_override_lockbroker_addr(self):
        env = clean_env(LOCKBROKER_ADDR="127.0.0.1:%d" % free_port())
        p = self.lb(["-H", self.d.listen_addr, "ping"], env=env)
        self.assert_exit(p, 0, stdout="PONG\n")
        p = self.lb(["-U", self.d.unix_path, "ping"], env=env)
        self.assert_exit(p, 0, stdout="PONG\n")
        p = self.lb(["ping"], env=env)
        self.assertEqual(p.rc, EXIT_UNAVAILABLE)

    def test_host_name(self):
        p = self.lb(["-H", "localhost:%d" % self.d.port, "ping"])
        self.assert_exit(p, 0, stdout="PONG\n")
        p = self.lb(["-H", "localhost", "run", self.name(), "--", "true"],
                    env=clean_env())
        if p.rc != 0:       # nobody on 7411 here: the address it tried says the port
            self.assertRegex(p.err, r"localhost:7411")

    @lbharness.skip_unless(can_bind("::1"), "ipv6", "no IPv6 loopback")
    def test_ipv6(self):
        d = Daemon(listen="[::1]:0", name="lockbrokerd-cli-ipv6").start()
        self.addCleanup(d.kill)
        p = self.lb(["-H", "[::1]:%d" % d.port, "run", self.name(), "--", "sh", "-c",
                     'echo "$LOCKBROKER_ADDR"'])
        self.assert_exit(p, 0, stdout="[::1]:%d\n" % d.port)
        d.stop()


# ============================================================= fake broker

class FakeBrokerTests(Case):
    """A scripted broker: the test reads lockbroker's requests and writes the
    replies, including ones lockbrokerd sends only in distributed mode."""

    def setUp(self):
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(self.srv.close)
        self.srv.settimeout(TIMEOUT)
        self.addr = "127.0.0.1:%d" % self.srv.getsockname()[1]

    def start(self, args, **kw):
        """As Case.start, but a run or elect gets --session-grace 0: these
        scripts play a broker without sessions (no GRACE between CLIENT and
        LOCK, a drop is a loss). test_cli_session.py scripts sessions."""
        args = list(args)
        end = args.index("--") if "--" in args else len(args)
        sub = [i for i, a in enumerate(args[:end]) if a in ("run", "elect")]
        if sub and not any(a.startswith("--session-grace") for a in args[:end]):
            args[sub[0]:sub[0]] = ["--session-grace", "0"]
        return super().start(args, **kw)

    def accept(self):
        sock, _ = self.srv.accept()
        c = Client(sock)
        self.addCleanup(c.close)
        return c

    def accept_locker(self, label=None):
        """Accepts the connection of a run or lease, which sends CLIENT (the
        default label, or `label`) before its LOCK, and answers it OK."""
        c = self.accept()
        if label is None:
            c.expect_match(r"CLIENT [^@\s]+@[^:\s]+:[0-9]+:\S+")
        else:
            c.expect("CLIENT " + label)
        c.send("OK\n")
        return c

    def granted(self, args, name, token="42"):
        """Starts `lockbroker run`, grants the lock; returns (proc, conn)."""
        p = self.start(["-H", self.addr, "run"] + args)
        c = self.accept_locker()
        c.expect("LOCK %s" % name)
        c.send("OK %s %s\n" % (name, token))
        self.confirm(c, name, token)
        return p, c

    def confirm(self, c, name, token="42", safe=600000):
        """Answers the CHECK that run sends before starting the command."""
        c.expect("CHECK %s %s" % (name, token))
        c.send("OK %s %s %d\n" % (name, token, safe))

    def test_lost_terminates_the_command(self):
        n = self.name()
        p, c = self.granted([n, "--"] + trapper(code=0, ready=PID_AND_TOKEN), n)
        pid, token = p.read_line().split()
        self.assertEqual(token, "42")
        c.send("LOST %s 42 session-expired\n" % n)
        p.finish()
        self.assert_exit(p, EXIT_LOST, r"lock %s lost \(session-expired\); terminating the command$"
                         % re.escape(n), stdout="trapped-TERM\n")
        self.assertFalse(pid_alive(int(pid)))

    def test_set_checks_every_name_and_a_lost_one_ends_the_command(self):
        a, b = self.name() + "-a", self.name() + "-b"
        p = self.start(["-H", self.addr, "run", "%s,%s" % (a, b), "--"]
                       + trapper(code=0, ready=PID_AND_TOKEN))
        c = self.accept_locker()
        c.expect("LOCK %s,%s" % (a, b))
        c.send("OK %s,%s 42,43\n" % (a, b))
        self.confirm(c, a, "42")                  # a CHECK per name, with its own token
        self.confirm(c, b, "43")
        pid, token = p.read_line().split()
        self.assertEqual(token, "42,43")
        c.send("LOST %s 43 session-expired\n" % b)
        p.finish()
        self.assert_exit(p, EXIT_LOST, r"lock %s,%s lost \(session-expired\); terminating the "
                         r"command$" % (re.escape(a), re.escape(b)), stdout="trapped-TERM\n")
        self.assertFalse(pid_alive(int(pid)))

    def test_set_not_run_when_one_name_is_not_safe(self):
        # -w 0: no time to ask again (test_a_grant_without_a_window_is_asked_for_again).
        a, b = self.name() + "-a", self.name() + "-b"
        p = self.start(["-H", self.addr, "run", "-w", "0", "%s,%s" % (a, b), "--", "echo", "ran"])
        c = self.accept_locker()
        c.expect("LOCK %s,%s 0" % (a, b))
        c.send("OK %s,%s 42,43\n" % (a, b))
        self.confirm(c, a, "42")
        self.confirm(c, b, "43", safe=0)         # the smallest window counts
        c.expect("UNLOCK %s,%s" % (a, b))
        c.send("OK %s,%s\n" % (a, b))
        p.finish()
        self.assert_exit(p, EXIT_TIMEOUT, r"lock %s,%s is certain for only 0 ms \(CHECK\); not "
                         r"waiting for a longer window \(-w 0\); the command was not run$"
                         % (re.escape(a), re.escape(b)), stdout="")

    def give_back(self, c, n, token):
        """Grants c's LOCK of n with a window of 0 (as a daemon just back from
        a ZooKeeper outage did, issue 36), which lockbroker releases with a
        plain UNLOCK before it closes c. Returns the LOCK's wait (None: none)."""
        m = c.expect_match(r"LOCK %s(?: ([0-9]+))?" % re.escape(n))
        c.send("OK %s %s\n" % (n, token))
        c.expect("CHECK %s %s" % (n, token))
        c.send("OK %s %s 0\n" % (n, token))
        c.expect("UNLOCK %s" % n)
        c.send("OK %s\n" % n)
        c.expect_eof()
        return None if m.group(1) is None else int(m.group(1))

    def test_a_grant_without_a_window_is_asked_for_again(self):
        # While -w has time left (or without -w), a grant with a window of 0
        # is no answer: lockbroker asks again with what is left of the wait,
        # and the command runs once, under the grant with a window. -v says so.
        for wait in ("25s", None):
            with self.subTest(wait=wait):
                n = self.name()
                p = self.start(["-H", self.addr, "run"] + (["-w", wait] if wait else ["-v"]) +
                               [n, "--", "sh", "-c", 'echo "ran $LOCKBROKER_TOKEN"'])
                self.assertEqual(self.give_back(self.accept_locker(), n, "42"),
                                 25000 if wait else None)
                left = self.give_back(self.accept_locker(), n, "43")
                if wait:
                    self.assertGreater(left, 0)
                    self.assertLess(left, 25000)
                else:
                    self.assertIsNone(left)
                c = self.accept_locker()
                c.expect_match(r"LOCK %s%s" % (re.escape(n), " [0-9]+" if wait else ""))
                c.send("OK %s 44\n" % n)
                self.confirm(c, n, "44")
                c.expect("UNLOCK %s" % n)
                c.send("OK %s\n" % n)
                p.finish()
                self.assert_exit(p, 0, stdout="ran 44\n")
                self.assertEqual(p.err, "" if wait else
                                 "lockbroker: lock %s granted, but certain for only 0 ms (CHECK): "
                                 "released; asking again\n" % n)

    def test_no_window_until_the_wait_ends_is_a_timeout(self):
        # A window of 0 at every grant until -w runs out: the command never
        # runs, and the exit is -w's (124, or -E's), not jeopardy's 116.
        for extra, rc in (([], EXIT_TIMEOUT), (["-E", "3"], 3)):
            with self.subTest(extra=extra):
                n = self.name()
                p = self.start(["-H", self.addr, "run", "-w", "600ms"] + extra +
                               [n, "--", "echo", "ran"])
                grants = 0
                while True:
                    # Another LOCK, or lockbroker's last word and exit.
                    ready = select.select([self.srv, p.proc.stderr], [], [], TIMEOUT)[0]
                    self.assertTrue(ready, "neither a LOCK nor an exit")
                    if self.srv not in ready:
                        break
                    self.give_back(self.accept_locker(), n, str(42 + grants))
                    grants += 1
                p.finish()
                self.assert_exit(p, rc, r"timed out after 600 ms waiting for lock %s: granted "
                                 r"%d times, but certain for only 0 ms \(CHECK\) the last time; "
                                 r"the command was not run$" % (re.escape(n), grants), stdout="")
                self.assertGreaterEqual(grants, 2)
        n = self.name()
        p = self.start(["-H", self.addr, "run", "-w", "0", n, "--", "echo", "ran"])
        self.assertEqual(self.give_back(self.accept_locker(), n, "42"), 0)
        p.finish()
        self.assert_exit(p, EXIT_TIMEOUT, r"lock %s is certain for only 0 ms \(CHECK\); not "
                         r"waiting for a longer window \(-w 0\); the command was not run$"
                         % re.escape(n), stdout="")
        # -q: that skip too says nothing.
        n = self.name()
        p = self.start(["-H", self.addr, "run", "-w", "0", "-E", "0", "-q", n, "--", "echo",
                        "ran"])
        self.assertEqual(self.give_back(self.accept_locker(), n, "42"), 0)
        p.finish()
        self.assert_exit(p, 0, stdout="")
        self.assertEqual(p.err, "")

    def test_connection_drop_terminates_the_command(self):
        n = self.name()
        p, c = self.granted([n, "--", "sh", "-c", "echo ready; exec sleep 600"], n)
        self.assertEqual(p.read_line(), "ready")
        c.close()
        p.finish()
        self.assert_exit(p, EXIT_LOST, r"lock %s lost \(the broker closed the connection\)"
                         % re.escape(n), stdout="")

    def test_sigkill_after_the_grace_period(self):
        # The command ignores SIGTERM; it still ends, and so does its child.
        n = self.name()
        script = "trap '' TERM; sleep 600 & echo $$ $!; wait"
        p, c = self.granted(["-g", "100ms", n, "--", "sh", "-c", script], n)
        pids = [int(x) for x in p.read_line().split()]
        c.send("LOST %s 42 zk-disconnected\n" % n)
        p.finish()
        self.assert_exit(p, EXIT_LOST, r"lock %s lost \(zk-disconnected\)" % re.escape(n))
        for pid in pids:
            self.assertFalse(pid_alive(pid), "pid %d survived" % pid)

    def test_jeopardy_when_checks_go_unanswered(self):
        # A window of 1500 ms, then silence (a frozen daemon): SIGTERM a
        # grace period before the window runs out (cut from 5 s to a third
        # of the window), SIGKILL when it does, and the connection is held
        # until the command is gone.
        n = self.name()
        p = self.start(["-H", self.addr, "run", n, "--"] + trapper(ignore=True, ready="os.getpid()"))
        c = self.accept_locker()
        c.expect("LOCK %s" % n)
        c.send("OK %s 42\n" % n)
        self.confirm(c, n, safe=1500)
        pid = int(p.read_line())
        c.expect("CHECK %s 42" % n)      # a quarter of the window later; no answer
        c.expect_eof()
        self.assertFalse(pid_alive(pid), "the connection closed before the command ended")
        p.finish()
        self.assertEqual(p.rc, EXIT_JEOPARDY, p.err)
        lines = p.err.splitlines()
        self.assertEqual(len(lines), 2, p.err)
        self.assertRegex(lines[0], r"^lockbroker: lock %s in jeopardy: %s has not confirmed it "
                         r"\(CHECK\) for [0-9]+ ms and may grant it to someone else in [0-9]+ "
                         r"ms; terminating the command$" % (re.escape(n), re.escape(self.addr)))
        m = re.match(r"^lockbroker: grace period cut to ([0-9]+) ms: the lock is certain for "
                     r"no longer$", lines[1])
        self.assertIsNotNone(m, lines[1])
        self.assertLessEqual(int(m.group(1)), 500)

    def test_fresh_windows_keep_the_command_running(self):
        # Windows of 1200 ms, answered every time: checks every 300 ms, and
        # the command runs on until it ends by itself, well past a window.
        # A CHECK still unanswered when it ends is answered before UNLOCK's OK.
        n = self.name()
        p = self.start(["-H", self.addr, "run", n, "--", "sh", "-c", "echo in; read x; echo out"],
                       stdin=subprocess.PIPE)
        c = self.accept_locker()
        c.expect("LOCK %s" % n)
        c.send("OK %s 42\n" % n)
        self.confirm(c, n, safe=1200)
        self.assertEqual(p.read_line(), "in")
        for _ in range(8):
            self.confirm(c, n, safe=1200)
        c.expect("CHECK %s 42" % n)
        p.write("go\n")
        c.expect("UNLOCK %s" % n)
        c.send("OK %s 42 1200\nOK %s\n" % (n, n))
        p.finish()
        self.assert_exit(p, 0, stdout="out\n")
        self.assertEqual(p.err, "")

    def test_grace_after_lost_is_cut_to_the_window(self):
        # -g 60s, but the last window ends in at most 2 s: SIGKILL by then.
        n = self.name()
        p = self.start(["-H", self.addr, "run", "-g", "60s", n, "--"] +
                       trapper(ignore=True, ready="os.getpid()"))
        c = self.accept_locker()
        c.expect("LOCK %s" % n)
        c.send("OK %s 42\n" % n)
        self.confirm(c, n, safe=2000)
        pid = int(p.read_line())
        c.send("LOST %s 42 zk-disconnected\n" % n)
        p.finish()
        self.assertEqual(p.rc, EXIT_LOST, p.err)
        lines = p.err.splitlines()
        self.assertEqual(len(lines), 2, p.err)
        self.assertRegex(lines[0], r"^lockbroker: lock %s lost \(zk-disconnected\)" % re.escape(n))
        m = re.match(r"^lockbroker: grace period cut to ([0-9]+) ms", lines[1])
        self.assertIsNotNone(m, lines[1])
        self.assertLessEqual(int(m.group(1)), 2000)
        self.assertFalse(pid_alive(pid))

    def test_first_check_decides_whether_the_command_runs(self):
        # A window of 0: test_a_grant_without_a_window_is_asked_for_again.
        cases = [
            ("ERR NOT_HELD this connection does not hold that lock", EXIT_LOST,
             r"lock %(n)s lost before the command started: ERR NOT_HELD"),
            ("LOST %(n)s 42 session-expired", EXIT_LOST,
             r"lock %(n)s lost before the command started: LOST"),
            ("OK %(n)s 43 5000", EXIT_PROTOCOL, r"unexpected reply to CHECK %(n)s: OK"),
            ("ERR INTERNAL oops", EXIT_PROTOCOL, r"unexpected reply to CHECK %(n)s: ERR"),
        ]
        for reply, rc, err in cases:
            with self.subTest(reply=reply):
                n = self.name()
                p = self.start(["-H", self.addr, "run", n, "--", "echo", "ran"])
                c = self.accept_locker()
                c.expect("LOCK %s" % n)
                c.send("OK %s 42\n" % n)
                c.expect("CHECK %s 42" % n)
                c.send(reply % {"n": n} + "\n")
                p.finish()
                self.assert_exit(p, rc, err % {"n": re.escape(n)}, stdout="")

    def test_lease_granted_after_a_wait_is_renewed_before_its_token_is_printed(self):
        # The grant comes after the -v notice (1 s), more than a tenth of
        # the 5 s ttl: the lease is renewed, so that its ttl counts from now.
        # A renewal refused (the lease ended) prints no token.
        for reply, rc in (("OK %s", 0), ("ERR NOT_HELD no lease of that name with that token: "
                                         "the token is wrong, or the lease ended", EXIT_NOT_HELD)):
            with self.subTest(reply=reply):
                n = self.name()
                p = self.start(["-H", self.addr, "lease", "-v", n, "5s"])
                c = self.accept_locker()
                c.expect("LOCK %s ttl=5000" % n)
                s = self.accept()
                s.expect("STATUS %s" % n)
                s.send("STATUS %s held holder=d1/unix token=7 since=- waiters=1 queue=2\n" % n)
                self.assertRegex(p.read_err_line(), r"^lockbroker: waiting for lock ")
                c.send("OK %s 42\n" % n)
                c.expect("RENEW %s 42 5000" % n)
                c.send((reply % n if "%s" in reply else reply) + "\n")
                p.finish()
                self.assertEqual(p.rc, rc, p.err)
                self.assertEqual(p.out, "42\n" if rc == 0 else "")
                if rc:
                    self.assertRegex(p.err, r"lockbroker: cannot renew lease %s after its wait: "
                                     r"ERR NOT_HELD" % re.escape(n))

    def test_unlock_after_the_command(self):
        n = self.name()
        p, c = self.granted([n, "--", "sh", "-c", "exit 2"], n)
        c.expect("UNLOCK %s" % n)
        c.send("OK %s\n" % n)
        p.finish()
        self.assert_exit(p, 2)
        self.assertEqual(p.err, "")

    def test_lost_after_the_command_finished_is_a_warning(self):
        n = self.name()
        p, c = self.granted([n, "--", "true"], n)
        c.expect("UNLOCK %s" % n)
        c.send("LOST %s 42 session-expired\nERR NOT_HELD this connection does not hold that lock\n"
               % n)
        p.finish()
        self.assert_exit(p, 0, r"warning: lock %s was lost as the command finished" % re.escape(n))

    def timed_out(self, c, n, status=None):
        """Answers a LOCK TIMEOUT, then the STATUS that asks who holds it
        (default: a holder labelled x@y:1:z)."""
        c.send("TIMEOUT %s\n" % n)
        c.expect("STATUS %s" % n)
        c.send((status or "STATUS %s held holder=d1/10.0.0.5:4242 token=7 since=1795420401982 "
                "waiters=0 queue=1 label=x@y:1:z" % n) + "\n")

    def test_wait_is_sent(self):
        n = self.name()
        p = self.start(["-H", self.addr, "run", "-w", "1500", n, "--", "true"])
        c = self.accept_locker()
        c.expect("LOCK %s 1500" % n)
        self.timed_out(c, n)
        p.finish()
        self.assert_exit(p, EXIT_TIMEOUT, r"timed out after 1500 ms waiting for lock %s, held "
                         r"by d1/10\.0\.0\.5:4242 label=x@y:1:z since %s$" % (re.escape(n), DATE))
        for args in (["run", "--nonblock", n, "--", "true"], ["lease", "--nonblock", n, "1m"]):
            with self.subTest(args=args):
                p = self.start(["-H", self.addr] + args)
                c = self.accept_locker()
                c.expect("LOCK %s 0%s" % (n, " ttl=60000" if args[0] == "lease" else ""))
                self.timed_out(c, n)
                p.finish()
                self.assert_exit(p, EXIT_TIMEOUT, busy_re(n, r"d1/10\.0\.0\.5:4242 label=x@y:1:z "
                                                            r"since " + DATE))

    def test_quiet_asks_nothing_after_a_timeout(self):
        # -q: a TIMEOUT is not followed by the STATUS that asks who holds it.
        for args in (["run", "-q", "-w", "0", "-E", "0", "%(n)s", "--", "true"],
                     ["lease", "--quiet", "-w", "0", "-E", "0", "%(n)s", "1m"]):
            with self.subTest(args=args):
                n = self.name()
                p = self.start(["-H", self.addr] + [a % {"n": n} for a in args])
                c = self.accept_locker()
                c.expect_match(r"LOCK %s 0( ttl=60000)?" % re.escape(n))
                c.send("TIMEOUT %s\n" % n)
                p.finish()
                self.assert_exit(p, 0, stdout="")
                self.assertEqual(p.err, "")
                c.expect_eof()   # no STATUS: -q asks nothing

    def test_wait_0_says_what_status_says(self):
        since = "since=1795420401982"
        cases = [
            ("STATUS %(n)s held holder=d1/unix token=7 " + since + " waiters=0 queue=1",
             "is held by d1/unix since " + DATE),
            ("QUEUE %(n)s 1 d1 127.0.0.1:5\nSTATUS %(n)s held holder=d1/unix token=- " + since +
             " waiters=1 queue=2 mode=shared holders=3", "is held by d1/unix since %s, and 2 more "
             "holders" % DATE),
            ("STATUS %(n)s held holder=d1/unix token=7 " + since + " waiters=0 queue=1 "
             "delay=1500 label=a", "is held by d1/unix label=a since %s, kept 1500 ms more after its "
             r"release \(--min-hold or a lock-delay\)" % DATE),
            ("STATUS %(n)s free holder=- token=- since=- waiters=0 queue=0", "is not free"),
            ("ERR UNAVAILABLE the lock service is not reachable; retry later", "is not free"),
        ]
        for reply, said in cases:
            with self.subTest(reply=reply):
                n = self.name()
                p = self.start(["-H", self.addr, "run", "-w", "0", n, "--", "true"])
                c = self.accept_locker()
                c.expect("LOCK %s 0" % n)
                self.timed_out(c, n, reply % {"n": n})
                p.finish()
                self.assert_exit(p, EXIT_TIMEOUT, r"lock %s %s; not waiting for it \(-w 0\)$"
                                 % (re.escape(n), said), stdout="")
        # No answer to the STATUS: said without the holder.
        n = self.name()
        p = self.start(["-H", self.addr, "run", "-w", "0", n, "--", "true"])
        c = self.accept_locker()
        c.expect("LOCK %s 0" % n)
        c.send("TIMEOUT %s\n" % n)
        c.expect("STATUS %s" % n)
        c.close()
        p.finish()
        self.assert_exit(p, EXIT_TIMEOUT, r"lock %s is not free; not waiting for it \(-w 0\)$"
                         % re.escape(n), stdout="")

    def test_login_advice(self):
        # ERR NOAUTH is protocol wording ("AUTH <user> <password>"): lockbroker
        # says which of its options log in.
        cases = [
            (["run", "N", "--", "true"], "CLIENT", r"CLIENT \S+"),
            (["lease", "N", "1m"], "CLIENT", r"CLIENT \S+"),
            (["status", "N"], "STATUS N", "STATUS"),
            (["status"], "STATS", "STATS"),
            (["stats"], "STATS", "STATS"),
            (["locks"], "LOCKS", "LOCKS"),
            (["break", "N"], "BREAK N", "BREAK"),
            (["observe", "N"], "WATCH N", "WATCH"),
            (["renew", "N", "7", "1m"], "RENEW N 7 60000", "RENEW"),
            (["release", "N", "7"], "UNLOCK N 7", "UNLOCK"),
        ]
        for args, request, refused in cases:
            with self.subTest(args=args):
                n = self.name()
                args = [n if a == "N" else a for a in args]
                p = self.start(["-H", self.addr] + args)
                c = self.accept()
                if request == "CLIENT":
                    c.expect_match(r"CLIENT \S+")
                else:
                    c.expect(" ".join(n if w == "N" else w for w in request.split()))
                c.send(ERR_NOAUTH + "\n")
                p.finish()
                self.assert_exit(p, EXIT_DENIED, r"127\.0\.0\.1:\d+ " + LOGIN_ADVICE % refused,
                                 stdout="")

    def test_conflict_exit_code(self):
        # -E N: N when the wait runs out; the command's own 124 passes unchanged.
        n = self.name()
        p = self.start(["-H", self.addr, "run", "-E", "3", "-w", "100ms", n, "--", "true"])
        c = self.accept_locker()
        c.expect("LOCK %s 100" % n)
        self.timed_out(c, n)
        p.finish()
        self.assert_exit(p, 3, r"timed out after 100 ms waiting for lock")
        p, c = self.granted(["-E", "3", n, "--", "sh", "-c", "exit 124"], n)
        c.expect("UNLOCK %s" % n)
        c.send("OK %s\n" % n)
        p.finish()
        self.assert_exit(p, 124)
        p = self.start(["-H", self.addr, "lease", "--conflict-exit-code=0", "-w", "0", n, "1m"])
        c = self.accept_locker()
        c.expect("LOCK %s 0 ttl=60000" % n)
        self.timed_out(c, n)
        p.finish()
        self.assert_exit(p, 0, busy_re(n), stdout="")
        for bad in ("256", "-1", "x", ""):
            with self.subTest(bad=bad):
                p = self.lb(["-H", self.addr, "run", "-E", bad, n, "--", "true"])
                self.assert_exit(p, EXIT_USAGE, r"-E: expected an exit status from 0 to 255")

    def test_mode_option_is_sent(self):
        cases = [
            ([], "LOCK %s"),
            (["--shared"], "LOCK %s shared"),
            (["-s", "-w", "1500"], "LOCK %s 1500 shared"),
            (["--limit", "3"], "LOCK %s limit=3"),
            (["-w", "0", "-n", "65535"], "LOCK %s 0 limit=65535"),
            (["--limit=1"], "LOCK %s limit=1"),
            (["-n", "007"], "LOCK %s limit=7"),
        ]
        for args, request in cases:
            with self.subTest(args=args):
                n = self.name()
                p = self.start(["-H", self.addr, "run"] + args + [n, "--", "echo", "ran"])
                c = self.accept_locker()
                c.expect(request % n)
                c.send("OK %s 42\n" % n)
                self.confirm(c, n)
                c.expect("UNLOCK %s" % n)
                c.send("OK %s\n" % n)
                p.finish()
                self.assert_exit(p, 0, stdout="ran\n")
                self.assertEqual(p.err, "")

    def test_error_replies_to_lock(self):
        cases = [
            ("ERR CONFLICT the lock is in use with limit=2", EXIT_CONFLICT),
            ("ERR UNAVAILABLE the lock service is not reachable; retry later", EXIT_UNAVAILABLE),
            ("ERR LIMIT too many clients; try again later", EXIT_UNAVAILABLE),
            ("ERR BAD_NAME names are 1-200 bytes", EXIT_BAD_NAME),
            ("ERR INTERNAL out of memory", EXIT_PROTOCOL),
            ("ERR BAD_COMMAND unknown command", EXIT_PROTOCOL),
            ("WHAT %(n)s", EXIT_PROTOCOL),
            ("OK other-name 42", EXIT_PROTOCOL),
            ("OK %(n)s notanumber", EXIT_PROTOCOL),
        ]
        for reply, rc in cases:
            with self.subTest(reply=reply):
                n = self.name()
                reply = reply % {"n": n}
                p = self.start(["-H", self.addr, "run", n, "--", "echo", "ran"])
                c = self.accept_locker()
                c.expect("LOCK %s" % n)
                c.send(reply + "\n")
                p.finish()
                self.assert_exit(p, rc, r".*%s" % re.escape(reply), stdout="")

    def test_durations_with_units(self):
        # A plain number is milliseconds; ms, s, m and h are units. -g and -t
        # are not sent, only accepted.
        cases = [
            (["-w", "60ms"], "60"),
            (["-w", "500ms"], "500"),
            (["-w", "60s"], "60000"),
            (["--wait=2m"], "120000"),
            (["-w", "1h"], "3600000"),
            (["-w", "0s"], "0"),
            (["-w", "0"], "0"),
            (["-w", "1000"], "1000"),
            (["-w", "007s"], "7000"),
            (["-w", "2147483647ms"], "2147483647"),
            (["-w", "596h"], "2145600000"),
            (["-w", "35791m"], "2147460000"),
            (["-w", "1s", "-g", "2m", "-t", "10s"], "1000"),
            (["-g", "0s", "--timeout", "1h", "-w", "1500"], "1500"),
        ]
        for args, wait in cases:
            with self.subTest(args=args):
                n = self.name()
                p = self.start(["-H", self.addr, "run"] + args + [n, "--", "true"])
                c = self.accept_locker()
                c.expect("LOCK %s %s" % (n, wait))
                c.send("OK %s 42\n" % n)
                self.confirm(c, n)
                c.expect("UNLOCK %s" % n)
                c.send("OK %s\n" % n)
                p.finish()
                self.assert_exit(p, 0, stdout="")
                self.assertEqual(p.err, "")
        cases = [
            (["lease", "-w", "10s", "%(n)s", "5m"], "LOCK %(n)s 10000 ttl=300000"),
            (["lease", "%(n)s", "24h"], "LOCK %(n)s ttl=86400000"),
            (["lease", "%(n)s", "100ms"], "LOCK %(n)s ttl=100"),
            (["lease", "%(n)s", "1440m"], "LOCK %(n)s ttl=86400000"),
            (["renew", "%(n)s", "42", "90s"], "RENEW %(n)s 42 90000"),
            (["renew", "%(n)s", "42", "1h"], "RENEW %(n)s 42 3600000"),
        ]
        for args, request in cases:
            with self.subTest(args=args):
                n = self.name()
                p = self.start(["-H", self.addr] + [a % {"n": n} for a in args])
                c = self.accept_locker() if args[0] == "lease" else self.accept()
                c.expect(request % {"n": n})
                c.send("OK %s 42\n" % n if args[0] == "lease" else "OK %s\n" % n)
                p.finish()
                self.assert_exit(p, 0, stdout="42\n" if args[0] == "lease" else "")
                self.assertEqual(p.err, "")

    def test_a_plain_number_under_1000_is_warned_about(self):
        # `-w 60` is 60 ms, most likely meant as a minute (flock -w 60): it is
        # taken as given, with one warning on stderr, however many there are.
        for args, request, said in (
                (["run", "-w", "60", "-g", "5", "-t", "900", "%(n)s", "--", "true"],
                 "LOCK %(n)s 60", "-w 60"),
                (["run", "--min-hold", "30", "%(n)s", "--", "true"], "LOCK %(n)s", "--min-hold 30"),
                (["lease", "%(n)s", "300"], "LOCK %(n)s ttl=300", "lease: TTL 300")):
            with self.subTest(args=args):
                n = self.name()
                p = self.start(["-H", self.addr] + [a % {"n": n} for a in args])
                c = self.accept_locker()
                c.expect(request % {"n": n})
                c.send("OK %s 42\n" % n)
                if args[0] == "run":
                    self.confirm(c, n)
                    c.expect_match(r"UNLOCK %s( keep=\d+)?$" % re.escape(n))
                    c.send("OK %s\n" % n)
                p.finish()
                num = said.split()[-1]
                self.assert_exit(p, 0, r"warning: %s is %s milliseconds, not seconds: write %ss "
                                 r"\(or %s000\) for seconds, %sms for milliseconds without this "
                                 r"warning$" % (re.escape(said), num, num, num, num))

    def test_unavailable_is_not_a_timeout(self):
        # The daemon answers ERR UNAVAILABLE, not TIMEOUT, to a LOCK whose wait
        # ended while ZooKeeper was unreachable for all of it: an outage, said
        # as such, with 121 rather than 124.
        reply = "ERR UNAVAILABLE the lock service was not reachable during the wait"
        for args, request in ((["run", "-w", "1500", "%(n)s", "--", "echo", "ran"],
                               "LOCK %(n)s 1500"),
                              (["run", "%(n)s", "--", "echo", "ran"], "LOCK %(n)s"),
                              (["lease", "-w", "1500", "%(n)s", "1m"],
                               "LOCK %(n)s 1500 ttl=60000")):
            with self.subTest(args=args):
                n = self.name()
                p = self.start(["-H", self.addr] + [a % {"n": n} for a in args])
                c = self.accept_locker()
                c.expect(request % {"n": n})
                c.send(reply + "\n")
                p.finish()
                self.assert_exit(p, EXIT_UNAVAILABLE,
                                 r"lock %s not granted: the lock service \(ZooKeeper\) is "
                                 r"unreachable from the broker at 127\.0\.0\.1:\d+; try again "
                                 r"later \(%s\)$" % (re.escape(n), re.escape(reply)), stdout="")

    def test_lease_requests_are_sent(self):
        cases = [
            (["%(n)s", "30000"], "LOCK %(n)s ttl=30000"),
            # ttls long enough that no wait here reaches a tenth of them: a
            # longer one makes lockbroker RENEW (test_lease_granted_after_a_wait_is_renewed_...).
            (["-w", "1500", "--shared", "%(n)s", "100s"], "LOCK %(n)s 1500 shared ttl=100000"),
            (["-n", "3", "%(n)s", "86400000"], "LOCK %(n)s limit=3 ttl=86400000"),
            (["-w", "0", "%(n)s", "0100000"], "LOCK %(n)s 0 ttl=100000"),
        ]
        for args, request in cases:
            with self.subTest(args=args):
                n = self.name()
                p = self.start(["-H", self.addr, "lease"] + [a % {"n": n} for a in args])
                c = self.accept_locker()
                c.expect(request % {"n": n})
                c.send("OK %s 18446744073709551615\n" % n)
                # lockbroker leaves without UNLOCK: the lease is not the connection's.
                c.expect_eof()
                p.finish()
                self.assert_exit(p, 0, stdout="18446744073709551615\n")
                self.assertEqual(p.err, "")

    def test_renew_and_release_requests_are_sent(self):
        cases = [
            (["renew", "%(n)s", "42", "30000"], "RENEW %(n)s 42 30000"),
            (["renew", "%(n)s", "007", "0100ms"], "RENEW %(n)s 7 100"),
            (["release", "%(n)s", "18446744073709551615"], "UNLOCK %(n)s 18446744073709551615"),
            (["release", "%(n)s", "0"], "UNLOCK %(n)s 0"),
        ]
        for args, request in cases:
            with self.subTest(args=args):
                n = self.name()
                p = self.start(["-H", self.addr] + [a % {"n": n} for a in args])
                c = self.accept()
                c.expect(request % {"n": n})
                c.send("OK %s\n" % n)
                p.finish()
                self.assert_exit(p, 0, stdout="")
                self.assertEqual(p.err, "")

    def test_error_replies_to_lease(self):
        cases = [
            ("ERR LIMIT 10000 leases are held or awaited through this daemon", EXIT_UNAVAILABLE),
            ("ERR CONFLICT the lock is in use with limit=2", EXIT_CONFLICT),
            ("ERR UNAVAILABLE the lock service is not reachable; retry later", EXIT_UNAVAILABLE),
            ("ERR BAD_ARGS too many arguments", EXIT_PROTOCOL),
            ("TIMEOUT %(n)s", EXIT_TIMEOUT),
            ("OK %(n)s", EXIT_PROTOCOL),
            ("OK %(n)s -1", EXIT_PROTOCOL),
        ]
        for reply, rc in cases:
            with self.subTest(reply=reply):
                n = self.name()
                reply = reply % {"n": n}
                p = self.start(["-H", self.addr, "lease", "-w", "1000", n, "1000"])
                c = self.accept_locker()
                c.expect("LOCK %s 1000 ttl=1000" % n)
                if reply.startswith("TIMEOUT"):
                    self.timed_out(c, n)
                else:
                    c.send(reply + "\n")
                p.finish()
                self.assert_exit(p, rc, stdout="")
                if rc == EXIT_TIMEOUT:
                    self.assertRegex(p.err, r"^lockbroker: timed out after 1000 ms waiting")
                else:
                    self.assert_exit(p, rc, r".*%s" % re.escape(reply))

    def test_error_replies_to_renew_and_release(self):
        cases = [
            ("ERR NOT_HELD no lease of that name with that token", EXIT_NOT_HELD),
            ("ERR UNAVAILABLE the lock service is not reachable; retry later", EXIT_UNAVAILABLE),
            ("ERR BAD_ARGS bad token", EXIT_PROTOCOL),
            ("ERR NOT_HELDX odd", EXIT_PROTOCOL),
            ("OK other-name", EXIT_PROTOCOL),
            ("OK %(n)s 42", EXIT_PROTOCOL),
        ]
        for sub, extra, verb in (("renew", ["1000"], "RENEW"), ("release", [], "UNLOCK")):
            for reply, rc in cases:
                with self.subTest(sub=sub, reply=reply):
                    n = self.name()
                    reply = reply % {"n": n}
                    p = self.start(["-H", self.addr, sub, n, "42"] + extra)
                    c = self.accept()
                    c.expect(" ".join([verb, n, "42"] + extra))
                    c.send(reply + "\n")
                    p.finish()
                    self.assert_exit(p, rc, r".*%s" % re.escape(reply), stdout="")

    def test_renew_closed_without_a_reply(self):
        n = self.name()
        p = self.start(["-H", self.addr, "renew", n, "42", "1000"])
        c = self.accept()
        c.expect("RENEW %s 42 1000" % n)
        c.close()
        p.finish()
        self.assert_exit(p, EXIT_UNAVAILABLE, r"127\.0\.0\.1:\d+ closed the connection before "
                         r"replying$", stdout="")

    def test_closed_before_the_grant(self):
        n = self.name()
        p = self.start(["-H", self.addr, "run", n, "--", "echo", "ran"])
        c = self.accept_locker()
        c.expect("LOCK %s" % n)
        c.close()
        p.finish()
        self.assert_exit(p, EXIT_UNAVAILABLE, r"127\.0\.0\.1:\d+ closed the connection before "
                         r"granting lock %s$" % re.escape(n), stdout="")

    def test_no_reply(self):
        p = self.start(["-H", self.addr, "-t", "100ms", "ping"])
        c = self.accept()
        c.expect("PING")
        p.finish()
        self.assert_exit(p, EXIT_UNAVAILABLE, r"no reply from 127\.0\.0\.1:\d+ in time$",
                         stdout="")

    def test_client_label_is_sent_first(self):
        for args, label in (([], None), (["--label", "ops@db1:7:pg_dump"], "ops@db1:7:pg_dump")):
            with self.subTest(args=args):
                n = self.name()
                p = self.start(["-H", self.addr, "run"] + args + [n, "--", "/bin/echo", "ran"])
                c = self.accept()
                c.expect("CLIENT " + (label or default_label(p.pid, "echo")), "LOCK %s" % n)
                c.send("OK\nOK %s 42\n" % n)
                self.confirm(c, n)
                c.expect("UNLOCK %s" % n)
                c.send("OK %s\n" % n)
                p.finish()
                self.assert_exit(p, 0, stdout="ran\n")
                self.assertEqual(p.err, "")

    def test_older_daemon_without_client(self):
        # A daemon that predates CLIENT answers ERR BAD_COMMAND: carry on unlabelled.
        for args, request in ((["run", "%(n)s", "--", "echo", "ran"], "LOCK %(n)s"),
                              (["lease", "--label", "x", "%(n)s", "1m"], "LOCK %(n)s ttl=60000")):
            with self.subTest(args=args):
                n = self.name()
                p = self.start(["-H", self.addr] + [a % {"n": n} for a in args])
                c = self.accept()
                c.expect_match(r"CLIENT \S+")
                c.expect(request % {"n": n})
                c.send("ERR BAD_COMMAND unknown command\nOK %s 42\n" % n)
                if args[0] == "run":
                    # Nor CHECK: the command runs, without jeopardy, and says so.
                    c.expect("CHECK %s 42" % n)
                    c.send("ERR BAD_COMMAND unknown command\n")
                    c.expect("UNLOCK %s" % n)
                    c.send("OK %s\n" % n)
                p.finish()
                if args[0] == "run":
                    self.assert_exit(p, 0, r"warning: %s does not know CHECK \(an "
                                     r"older lockbrokerd\): the command runs without jeopardy"
                                     % re.escape(self.addr), stdout="ran\n")
                else:
                    self.assert_exit(p, 0, stdout="42\n")
                    self.assertEqual(p.err, "")

    def test_error_replies_to_client(self):
        cases = [
            ("ERR LIMIT too many clients; try again later", EXIT_UNAVAILABLE),
            ("ERR BAD_ARGS a label is 1-100 printable bytes without spaces", EXIT_PROTOCOL),
            ("WHAT", EXIT_PROTOCOL),
        ]
        for reply, rc in cases:
            with self.subTest(reply=reply):
                n = self.name()
                p = self.start(["-H", self.addr, "run", "--label", "me", n, "--", "echo", "ran"])
                c = self.accept()
                c.expect("CLIENT me", "LOCK %s" % n)
                c.send(reply + "\n")
                p.finish()
                self.assert_exit(p, rc, r".*CLIENT me: %s$" % re.escape(reply), stdout="")

    def test_verbose_wait_asks_status(self):
        # After 1 s of waiting, a second connection asks STATUS, once; what
        # its reply says goes to stderr.
        since = 1795420401982
        date = lbharness.time.strftime("%Y-%m-%d %H:%M:%S",
                                       lbharness.time.localtime(since // 1000))
        cases = [
            ("STATUS %(n)s held holder=d1/10.0.0.5:4242 token=- since=" + str(since) +
             " waiters=0 queue=4 mode=shared holders=3 label=x@y:1:z",
             "(held by d1/10.0.0.5:4242 label=x@y:1:z since %s, and 2 more holders)" % date),
            ("QUEUE %(n)s 1 d1 127.0.0.1:5\nSTATUS %(n)s held holder=d1/unix token=7 since="
             + str(since) + " waiters=1 queue=2",
             "(held by d1/unix since %s)" % date),
            ("STATUS %(n)s free holder=- token=- since=- waiters=0 queue=0",
             "(nobody holds it at the moment)"),
            ("ERR UNAVAILABLE the lock service is not reachable; retry later",
             "(holder unknown: ERR UNAVAILABLE the lock service is not reachable; retry later)"),
            (None, "(holder unknown: the broker closed the connection)"),
        ]
        for reply, said in cases:
            with self.subTest(reply=reply):
                n = self.name()
                p = self.start(["-H", self.addr, "run", "-v", n, "--", "true"])
                c = self.accept_locker()
                c.expect("LOCK %s" % n)
                s = self.accept()
                s.expect("STATUS %s" % n)
                if reply is None:
                    s.close()
                else:
                    s.send((reply % {"n": n}) + "\n")
                self.assertEqual(p.read_err_line(), "lockbroker: waiting for lock %s %s"
                                 % (n, said))
                if reply is not None:
                    s.expect_eof()      # asked once, and closed
                c.send("OK %s 42\n" % n)
                self.confirm(c, n)
                c.expect("UNLOCK %s" % n)
                c.send("OK %s\n" % n)
                p.finish()
                self.assert_exit(p, 0, stdout="")
                self.assertEqual(p.err, "")

    def test_grant_before_the_status_reply(self):
        n = self.name()
        p = self.start(["-H", self.addr, "run", "-v", n, "--", "echo", "ran"])
        c = self.accept_locker()
        c.expect("LOCK %s" % n)
        s = self.accept()
        s.expect("STATUS %s" % n)
        c.send("OK %s 42\n" % n)
        s.expect_eof()      # not needed any more: closed, nothing said
        self.confirm(c, n)
        c.expect("UNLOCK %s" % n)
        c.send("OK %s\n" % n)
        p.finish()
        self.assert_exit(p, 0, stdout="ran\n")
        self.assertEqual(p.err, "")

    def test_status_exit_codes(self):
        cases = [
            ("STATUS %(n)s held holder=d/unix token=7 since=1 waiters=0 queue=1", 0),
            ("STATUS %(n)s free holder=- token=- since=- waiters=0 queue=0", EXIT_FREE),
            ("STATUS %(n)s free", EXIT_FREE),
            ("STATUS %(n)s", EXIT_PROTOCOL),
            ("STATUS %(n)s heldish holder=-", EXIT_PROTOCOL),
        ]
        for reply, rc in cases:
            with self.subTest(reply=reply):
                n = self.name()
                reply = reply % {"n": n}
                p = self.start(["-H", self.addr, "status", n])
                c = self.accept()
                c.expect("STATUS %s" % n)
                c.send(reply + "\n")
                p.finish()
                self.assert_exit(p, rc, None if rc in (0, EXIT_FREE) else
                                 r"unexpected reply to STATUS %s: " % re.escape(n),
                                 stdout=reply + "\n")
                if rc in (0, EXIT_FREE):
                    self.assertEqual(p.err, "")

    def test_status_human_shows_the_queue_and_the_keep(self):
        # Through a daemon with no waiter of its own, while others have some:
        # WAITERS is that daemon's, QUEUE the cluster's. delay= is a keep.
        n = self.name()
        reply = ("STATUS %s held holder=d2/10.0.0.5:4242 token=7 since=1 waiters=0 queue=3 "
                 "delay=25000 label=cron@web1" % n)
        p = self.start(["-H", self.addr, "status", "--human", n])
        c = self.accept()
        c.expect("STATUS %s" % n)
        c.send(reply + "\n")
        p.finish()
        self.assert_exit(p, 0)
        lines = p.out.splitlines()
        self.assertRegex(lines[0], InfoTests.STATUS_HEADER)
        self.assertRegex(lines[1], r"^%s +held +exclusive +d2/10\.0\.0\.5:4242 +cron@web1 +7 "
                         r"+%s +1 +0 +3 +- +25s$" % (re.escape(n), InfoTests.DURATION))
        self.assertEqual(len(lines), 2, p.out)

    def test_status_json_of_replies(self):
        # Every key=value in line order, unknown ones too; a token stays a
        # string whatever its size; label escaped; broken replies print nothing.
        n = self.name()
        cases = [
            ("STATUS %(n)s held holder=d/unix token=18446744073709551615 since=1 waiters=0 "
             "queue=3 mode=limit limit=3 holders=2 label=a\"b\\c future=07 word", 0,
             {"name": n, "held": True, "state": "held", "holder": "d/unix",
              "token": "18446744073709551615",
              "since": 1, "waiters": 0, "queue": 3, "mode": "limit", "limit": 3, "holders": 2,
              "label": 'a"b\\c', "future": "07"}),
            ("STATUS %(n)s free", EXIT_FREE,
             {"name": n, "held": False, "state": "free", "mode": "exclusive", "holders": 0,
              "limit": None,
              "label": None}),
            ("STATUS %(n)s heldish holder=-", EXIT_PROTOCOL, None),
            ("STATUS other held holder=- token=1", EXIT_PROTOCOL, None),
        ]
        for reply, rc, want in cases:
            with self.subTest(reply=reply):
                reply = reply % {"n": n}
                p = self.start(["-H", self.addr, "status", "--json", n])
                c = self.accept()
                c.expect("STATUS %s" % n)
                c.send(reply + "\n")
                p.finish()
                if want is None:
                    self.assert_exit(p, rc, r"unexpected reply to STATUS %s: " % re.escape(n),
                                     stdout="")
                else:
                    self.assert_exit(p, rc)
                    self.assertEqual(json.loads(p.out), want)

    def test_stats_json_of_replies(self):
        p = self.start(["-H", self.addr, "stats", "--json"])
        c = self.accept()
        c.expect("STATS")
        c.send("STAT version 1.2.3\nSTAT big 12345678901234567890\nSTAT zero 0\n"
               "STAT id 0x1f\nSTAT odd 007\nEND\n")
        p.finish()
        self.assert_exit(p, 0)
        self.assertEqual(json.loads(p.out), {"version": "1.2.3", "big": "12345678901234567890",
                                             "zero": 0, "id": "0x1f", "odd": "007"})
        # A reply cut short prints nothing a script could take for an answer.
        p = self.start(["-H", self.addr, "stats", "--json"])
        c = self.accept()
        c.expect("STATS")
        c.send("STAT version 1.2.3\n")
        c.close()
        p.finish()
        self.assert_exit(p, EXIT_UNAVAILABLE, r".* closed the connection before replying",
                         stdout="")

    def test_locks_prints_the_lines_before_end(self):
        for args, request in (([], "LOCKS"), (["db-*"], "LOCKS db-*"), (["[!x]?"], "LOCKS [!x]?")):
            with self.subTest(args=args):
                p = self.start(["-H", self.addr, "locks"] + args)
                c = self.accept()
                c.expect(request)
                body = ("LOCK a exclusive holder=d/unix label=- token=1 since=2 holders=1 "
                        "waiters=0\nSOMETHING new\nMORE 5\n")
                c.send(body + "END\nNOT-PRINTED\n")
                p.finish()
                self.assert_exit(p, 0, stdout=body)
                self.assertEqual(p.err, "")

    def test_locks_errors(self):
        cases = [
            ("ERR BAD_COMMAND unknown command", EXIT_PROTOCOL,
             r"the broker at 127\.0\.0\.1:\d+ does not support LOCKS \(it replied: ERR "
             r"BAD_COMMAND unknown command\); it needs a newer lockbrokerd$"),
            ("ERR INTERNAL out of memory", EXIT_PROTOCOL, r".*refused LOCKS: ERR INTERNAL"),
            (None, EXIT_UNAVAILABLE, r".*closed the connection before replying$"),
        ]
        for reply, rc, err in cases:
            with self.subTest(reply=reply):
                p = self.start(["-H", self.addr, "locks"])
                c = self.accept()
                c.expect("LOCKS")
                if reply is None:
                    c.send("LOCK a exclusive holder=d/unix\n")
                    c.close()
                else:
                    c.send(reply + "\n")
                p.finish()
                self.assert_exit(p, rc, err)

    def test_status_not_supported(self):
        n = self.name()
        p = self.start(["-H", self.addr, "status", n])
        c = self.accept()
        c.expect("STATUS %s" % n)
        c.send("ERR BAD_COMMAND unknown command\n")
        p.finish()
        self.assert_exit(p, EXIT_PROTOCOL, r"the broker at 127\.0\.0\.1:\d+ does not support "
                         r"STATUS \(it replied: ERR BAD_COMMAND unknown command\); it needs a "
                         r"newer lockbrokerd$", stdout="")

    def test_status_prints_up_to_the_status_line(self):
        n = self.name()
        p = self.start(["-H", self.addr, "status", n])
        c = self.accept()
        c.expect("STATUS %s" % n)
        c.send("QUEUE %s 1 d1 127.0.0.1:5\nSTATUS %s held token=7\nNOT-PRINTED\n" % (n, n))
        p.finish()
        self.assert_exit(p, 0, stdout="QUEUE %s 1 d1 127.0.0.1:5\nSTATUS %s held token=7\n"
                         % (n, n))

    def test_stats_error(self):
        p = self.start(["-H", self.addr, "stats"])
        c = self.accept()
        c.expect("STATS")
        c.send("STAT a 1\nERR INTERNAL out of memory\n")
        p.finish()
        self.assert_exit(p, EXIT_PROTOCOL, r"127\.0\.0\.1:\d+ refused STATS: ERR INTERNAL",
                         stdout="STAT a 1\n")

    STATS = ("STAT version 0.1.0\nSTAT mode %s\nSTAT uptime 5\nSTAT curr_connections 1\n"
             "STAT locks_held 0\nSTAT waiters 0\n%sEND\n")

    def stats_reply(self, zk_state):
        if zk_state is None:
            return self.STATS % ("embedded", "")
        return self.STATS % ("distributed", "STAT zk_state %s\nSTAT zk_session_id 0x0\n"
                             % zk_state)

    def test_ping_and_status_exit_115_when_the_broker_cannot_reach_zookeeper(self):
        down = r"127\.0\.0\.1:\d+ answers, but cannot reach its lock service, ZooKeeper " \
               r"\(zk_state %s\)$"
        for zk_state in (None, "connected", "connecting", "expired"):
            with self.subTest(zk_state=zk_state):
                rc = 0 if zk_state in (None, "connected") else EXIT_BACKEND_DOWN
                err = None if rc == 0 else down % zk_state
                p = self.start(["-H", self.addr, "ping"])
                c = self.accept()
                c.expect("PING")
                c.send("PONG\n")
                c.expect("STATS")
                c.send(self.stats_reply(zk_state))
                p.finish()
                self.assert_exit(p, rc, err, stdout="PONG\n")
                if rc == 0:
                    self.assertEqual(p.err, "")
                for args in (["status"], ["status", "--json"]):
                    p = self.start(["-H", self.addr] + args)
                    c = self.accept()
                    c.expect("STATS")
                    c.send(self.stats_reply(zk_state))
                    p.finish()
                    self.assert_exit(p, rc, err)
                    if "--json" in args:
                        self.assertEqual(json.loads(p.out).get("zk_state"), zk_state)
                    else:
                        self.assertRegex(p.out, r"^lockbrokerd 0\.1\.0 at .*, 0 waiting%s\n$"
                                         % ("" if zk_state is None else
                                            ", ZooKeeper %s \\(session 0x0\\)" % zk_state))
                # stats prints the numbers; it is not a health check.
                p = self.start(["-H", self.addr, "stats"])
                c = self.accept()
                c.expect("STATS")
                c.send(self.stats_reply(zk_state))
                p.finish()
                self.assert_exit(p, 0)

    def test_ping_without_a_login_says_what_it_did_not_check(self):
        p = self.start(["-H", self.addr, "ping"])
        c = self.accept()
        c.expect("PING")
        c.send("PONG\n")
        c.expect("STATS")
        c.send("ERR NOAUTH log in first with AUTH <user> <password> "
               "(only PING, HELP and QUIT work before)\n")
        p.finish()
        self.assert_exit(p, 0, r"without a login \(-a USER\), ping cannot tell whether "
                         r"127\.0\.0\.1:\d+ reaches its lock service$", stdout="PONG\n")


# ========================================================= README example

README = os.path.normpath(os.path.join(HERE, "..", "..", "README.md"))

# Stands in for the example's ./run-backup.sh: says whether it got the
# connection (fd 3) and its token, then exits with the status it reads.
RUN_BACKUP = """#!/bin/sh
if [ -e /proc/$$/fd/3 ]; then fd3=open; else fd3=closed; fi
echo "backup $LOCK_TOKEN fd3=$fd3"
read status
exit "$status"
"""


@lbharness.skip_unless(shutil.which("bash"), "tools", "needs bash")
class ReadmeBashTests(Case):
    """The README's bash /dev/tcp example, run as it is printed (but for the
    port) against the daemon and against a scripted broker."""

    def script(self, port):
        """Starts the example in a directory with RUN_BACKUP; returns the LbProc."""
        with open(README) as f:
            m = re.search(r"```bash\n(#!/bin/bash\n.*?)```", f.read(), re.S)
        self.assertIsNotNone(m, "no bash example in " + README)
        text = m.group(1)
        self.assertIn("/dev/tcp/127.0.0.1/7411", text)
        tmp = make_tmpdir()
        for name, content in (("example.sh", text.replace("/dev/tcp/127.0.0.1/7411",
                                                          "/dev/tcp/127.0.0.1/%d" % port)),
                              ("run-backup.sh", RUN_BACKUP)):
            with open(os.path.join(tmp, name), "w") as f:
                f.write(content)
            os.chmod(os.path.join(tmp, name), 0o755)
        return self.start([], program="./example.sh", cwd=tmp, stdin=subprocess.PIPE)

    def fake_broker(self):
        srv = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(srv.close)
        srv.settimeout(TIMEOUT)
        return srv

    def accept(self, srv):
        c = Client(srv.accept()[0])
        self.addCleanup(c.close)
        return c

    def test_holds_the_lock_around_the_command(self):
        d = Daemon(name="lockbrokerd-cli-readme").start()
        self.addCleanup(d.kill)
        p = self.script(d.port)
        line = p.read_line()
        self.assertRegex(line, r"^backup [0-9]+ fd3=closed$")
        other = d.client()
        self.addCleanup(other.close)
        self.assertEqual(other.request("TRYLOCK nightly-backup"), "BUSY nightly-backup")
        p.write("3\n")
        p.finish()
        self.assertEqual((p.rc, p.out, p.err), (3, "", ""))
        self.assertRegex(other.request("TRYLOCK nightly-backup"), r"^OK nightly-backup [0-9]+$")
        other.close()
        d.stop()

    def test_lost_during_the_command_is_a_failure(self):
        srv = self.fake_broker()
        p = self.script(srv.getsockname()[1])
        c = self.accept(srv)
        c.expect("LOCK nightly-backup 60000")
        c.send("OK nightly-backup 42\n")
        self.assertEqual(p.read_line(), "backup 42 fd3=closed")
        c.send("LOST nightly-backup 42 zk-disconnected\n")
        p.write("0\n")
        c.expect("UNLOCK nightly-backup")
        c.send("ERR NOT_HELD this connection does not hold that lock\n")
        p.finish()
        self.assertEqual((p.rc, p.out, p.err), (1, "", "the lock was not held to the end: "
                                                   "LOST nightly-backup 42 zk-disconnected\n"))

    def test_no_lock_no_command(self):
        srv = self.fake_broker()
        p = self.script(srv.getsockname()[1])
        c = self.accept(srv)
        c.expect("LOCK nightly-backup 60000")
        c.send("TIMEOUT nightly-backup\n")
        p.finish()
        self.assertEqual((p.rc, p.out, p.err), (1, "", "no lock: TIMEOUT nightly-backup\n"))


# ======================================================== ZooKeeper: LOST

def zookeeper_available():
    try:
        import zkharness
        zkharness.classpath()
    except Exception:  # noqa: BLE001 - any failure means: cannot run ZooKeeper here
        return False
    return shutil.which(zkharness.JAVA) is not None


@lbharness.skip_unless(zookeeper_available(), "zk", "needs java and Debian's zookeeper package")
class ZkCase(Case):
    """A daemon in distributed mode on a ZooKeeper server of its own."""

    SESSION_MS = 4000

    def distributed(self):
        import zkharness
        zk = zkharness.ZkServer(tick_ms=500, name="zk-cli")
        self.addCleanup(zk.cleanup)
        zk.start()
        d = Daemon(config="[zookeeper]\nhosts = %s\nsession_timeout_ms = %d\ntick_ms = 500\n"
                   % (zk.connect_string, self.SESSION_MS), name="lockbrokerd-cli-zk")
        self.addCleanup(d.kill)
        d.start()
        d.wait_log(r"zk: new session 0x[0-9a-f]+", timeout=scaled(30))
        return zk, d


class BackendDownTests(ZkCase):
    """ping and status fail while the daemon cannot reach ZooKeeper."""

    def test_ping_and_status_exit_115_while_zookeeper_is_down(self):
        zk, d = self.distributed()
        hp = ["-H", d.listen_addr]
        p = self.lb(hp + ["ping"])
        self.assert_exit(p, 0, stdout="PONG\n")
        self.assertEqual(p.err, "")
        p = self.lb(hp + ["status"])
        self.assert_exit(p, 0)
        self.assertRegex(p.out, r", ZooKeeper connected \(session 0x[0-9a-f]+\)\n$")

        mark = d.log_mark()
        zk.stop()
        d.wait_log(r"zk: disconnected from ZooKeeper; reconnecting$", since=mark)
        down = (r"%s answers, but cannot reach its lock service, ZooKeeper "
                r"\(zk_state connecting\)$" % re.escape(d.listen_addr))
        p = self.lb(hp + ["ping"])
        self.assert_exit(p, EXIT_BACKEND_DOWN, down, stdout="PONG\n")
        p = self.lb(hp + ["status"])
        self.assert_exit(p, EXIT_BACKEND_DOWN, down)
        self.assertRegex(p.out, r", ZooKeeper connecting \(session 0x[0-9a-f]+\)\n$")
        p = self.lb(hp + ["status", "--json"])
        self.assert_exit(p, EXIT_BACKEND_DOWN, down)
        self.assertEqual(json.loads(p.out)["zk_state"], "connecting")
        p = self.lb(hp + ["stats"])
        self.assert_exit(p, 0)
        self.assertIn("STAT zk_state connecting\n", p.out)

        mark = d.log_mark()
        zk.start()
        d.wait_log(r"zk: (new|reconnected to) session 0x[0-9a-f]+", since=mark,
                   timeout=scaled(30))
        p = self.lb(hp + ["ping"])
        self.assert_exit(p, 0, stdout="PONG\n")
        self.assertEqual(p.err, "")
        d.stop()


class LostTests(ZkCase):
    """Distributed mode: stopping ZooKeeper makes the daemon push LOST after
    2/3 of the session timeout, and lockbroker ends the command."""

    # Whichever comes first ends the command: the last window running out
    # (the daemon answers CHECK with ever shorter windows while ZooKeeper
    # is away) or the LOST the daemon pushes at 2/3 of the session timeout.
    ENDED = (r"(lock %(n)s lost \(zk-disconnected\)|lock %(n)s in jeopardy: .*); "
             r"terminating the command$")

    def ended(self, p, n):
        lines = p.err.splitlines()
        self.assertIn(p.rc, (EXIT_LOST, EXIT_JEOPARDY), p.err)
        self.assertRegex(lines[0], "^lockbroker: " + self.ENDED % {"n": re.escape(n)})
        self.assertEqual(p.rc == EXIT_JEOPARDY, "jeopardy" in lines[0], p.err)
        for line in lines[1:]:
            self.assertRegex(line, r"^lockbroker: grace period cut to [0-9]+ ms")

    def test_zookeeper_outage_terminates_the_command(self):
        zk, d = self.distributed()
        n = self.name()
        p = self.start(["-H", d.listen_addr, "run", n, "--"] + trapper(code=0, ready=PID_AND_TOKEN))
        pid, token = p.read_line(timeout=scaled(30)).split()
        zk.stop()
        p.finish(timeout=scaled(60))
        self.ended(p, n)
        self.assertEqual(p.out, "trapped-TERM\n")
        self.assertFalse(pid_alive(int(pid)))
        if p.rc == EXIT_LOST:
            d.wait_log(r"lock %s: lost by .* \(token %s\): zk-disconnected" % (re.escape(n), token))
            # and its line per ended hold (daemon/locks.c), with the reason
            d.wait_log(r"info lock %s: hold ended: end=lost holder=\S+ user=- label=\S+ token=%s "
                       r"mode=exclusive waited=\S+ held=\S+ reason=zk-disconnected$"
                       % (re.escape(n), token))
        else:       # the connection, held until the command ended, is closed
            d.wait_log(r"\): closed, [0-9]+ holds and waits released")
        d.stop()

    def test_outage_kills_a_command_that_ignores_sigterm(self):
        zk, d = self.distributed()
        n = self.name()
        p = self.start(["-H", d.listen_addr, "run", "-g", "200ms", n, "--"] +
                       trapper(ignore=True, ready="os.getpid()"))
        pid = int(p.read_line(timeout=scaled(30)))
        zk.stop()
        p.finish(timeout=scaled(60))
        self.ended(p, n)
        self.assertEqual(p.out, "")
        self.assertFalse(pid_alive(pid))
        d.stop()


# ===================================================================== TLS

# test_tls.py makes the throw-away CAs and certificates (with the openssl command).
from test_tls import Pki  # noqa: E402


def have_openssl():
    return shutil.which("openssl") is not None


def issue_server_cert(pki, file, san):
    """A server certificate of pki's CA with subjectAltName san (Pki.issue's
    are all for 127.0.0.1 and localhost): (cert path, key path)."""
    def openssl(*args):
        subprocess.run(["openssl"] + list(args), cwd=pki.dir, check=True, capture_output=True)

    with open(os.path.join(pki.dir, file + ".ext"), "w") as f:
        f.write("subjectAltName = %s\nextendedKeyUsage = serverAuth\n" % san)
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", file + ".key", "-out", file + ".csr", "-subj", "/CN=" + file)
    os.chmod(os.path.join(pki.dir, file + ".key"), 0o600)
    openssl("x509", "-req", "-in", file + ".csr", "-CA", pki.name + ".pem", "-CAkey",
            pki.name + ".key", "-CAcreateserial", "-out", file + ".pem", "-days", "2",
            "-extfile", file + ".ext")
    return os.path.join(pki.dir, file + ".pem"), os.path.join(pki.dir, file + ".key")


def tls_conf(server, ca, client_certs, users=None, extra=""):
    """A [tls] listener on a free loopback port, beside the plain one."""
    return ("%s[tls]\nlisten = 127.0.0.1:0\ncert_file = %s\nkey_file = %s\nca_file = %s\n"
            "client_certs = %s\n"
            % (extra + ("[server]\nusers_file = %s\n" % users if users else ""), server[0],
               server[1], ca, client_certs))


def start_tls_daemon(config, name):
    """A started Daemon, with tls_addr, the address of its TLS listener."""
    d = Daemon(config=config, name=name).start()
    try:
        d.tls_addr = d.wait_log(r"TLS on (\S+), client certificates \w+").group(1)
    except BaseException:
        d.kill()
        raise
    return d


@unittest.skipUnless(have_openssl(), "the openssl command is not installed")
class TlsTests(DaemonCase):
    """lockbroker --tls against a daemon with a TLS listener (client
    certificates optional) and a users file: alice's certificate logs her
    in. Another daemon requires client certificates and shows one made for
    localhost only."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = make_tmpdir()
        cls.pki = Pki(os.path.join(cls.tmp, "pki"))
        cls.alice = cls.pki.issue("alice")
        cls.other = Pki(os.path.join(cls.tmp, "other"), name="other")
        cls.forged = cls.other.issue("alice")
        users = os.path.join(cls.tmp, "users")
        with open(users, "w") as f:
            f.write("alice:%s:job-*,break=job-*\n" % LoginTests.HASH)
        os.chmod(users, 0o600)
        cls.d = start_tls_daemon(tls_conf(cls.pki.issue("localhost", server=True), cls.pki.ca,
                                          "optional", users), "lockbrokerd-cli-tls")
        try:
            cls.strict = start_tls_daemon(
                tls_conf(issue_server_cert(cls.pki, "localhost-only", "DNS:localhost"),
                         cls.pki.ca, "required", users), "lockbrokerd-cli-tls-required")
        except BaseException:
            cls.d.kill()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.strict.stop()
        cls.d.stop()

    def name(self):
        return "job-" + super().name()     # alice may use job-*

    def tls(self, cert=None, ca=None, addr=None):
        """Options for the TLS listener, alice's certificate unless cert is
        given (False: none)."""
        args = ["-H", addr or self.d.tls_addr, "--tls", "--cacert", ca or self.pki.ca]
        cert = self.alice if cert is None else cert
        return args + (["--cert", cert[0], "--key", cert[1]] if cert else [])

    def tls_env(self, **extra):
        """The same in the environment: a cron line's way."""
        return clean_env(LOCKBROKER_TLS="1", LOCKBROKER_CACERT=self.pki.ca,
                         LOCKBROKER_CERT=self.alice[0], LOCKBROKER_KEY=self.alice[1], **extra)

    def test_run_and_a_lockbroker_inside_it(self):
        n = self.name()
        # Relative paths from pki/; the command moves to / and asks the broker
        # about its own lock through what run put in its environment.
        args = ["-H", self.d.tls_addr, "--tls", "--cacert", "ca.pem", "--cert", "alice.pem",
                "--key", "alice.key", "run", n, "--", "sh", "-c",
                'cd / && echo "$LOCKBROKER_TLS $LOCKBROKER_TOKEN" && '
                '"$LB" status --raw "$LOCKBROKER_NAME"']
        p = self.start(args, env=clean_env(LB=client_path()), cwd=self.pki.dir)
        p.finish()
        self.assert_exit(p, 0)
        self.assertEqual(p.err, "")
        first, status = p.out.splitlines()
        self.assertRegex(first, r"^1 [0-9]+$")
        self.assertRegex(status, r"^STATUS %s held .* token=%s( |$)"
                         % (re.escape(n), first.split()[1]))
        # Released after the command.
        p = self.lb(self.tls() + ["status", n])
        self.assert_exit(p, EXIT_FREE)

    def test_lease_renew_release_from_the_environment(self):
        n = self.name()
        env = self.tls_env(LOCKBROKER_ADDR=self.d.tls_addr)
        p = self.lb(["lease", n, "60s"], env=env)
        self.assert_exit(p, 0)
        self.assertEqual(p.err, "")
        token = p.out.strip()
        self.assertRegex(token, r"^[0-9]+$")
        self.assert_exit(self.lb(["status", n], env=env), 0)
        self.assert_exit(self.lb(["renew", n, token, "60s"], env=env), 0, stdout="")
        self.assert_exit(self.lb(["release", n, token], env=env), 0, stdout="")
        self.assert_exit(self.lb(["release", n, token], env=env), EXIT_NOT_HELD,
                         r"cannot release lease %s: it is not held" % re.escape(n))
        # The command line wins over the environment: --no-tls on the plain port.
        p = self.lb(["--no-tls", "-H", self.d.listen_addr, "ping"], env=env)
        self.assert_exit(p, 0, stdout="PONG\n")

    def test_status_locks_stats_ping(self):
        n = self.name()
        addr = re.escape(self.d.tls_addr)
        p = self.lb(self.tls() + ["ping"])
        self.assert_exit(p, 0, stdout="PONG\n")
        self.assertEqual(p.err, "")        # logged in: ping could ask STATS
        p = self.lb(self.tls() + ["stats"])
        self.assert_exit(p, 0)
        self.assertIn("STAT mode embedded", p.out.splitlines())
        p = self.lb(self.tls() + ["status"])
        self.assert_exit(p, 0)
        self.assertRegex(p.out, r"^lockbrokerd \S+ at %s: embedded mode, " % addr)
        # Many holds: LOCKS' reply spans several TLS records (16 KiB each).
        h = self.d.client()
        self.addCleanup(h.close)
        self.assertEqual(h.request("AUTH alice hunter2"), "OK alice")
        names = ["%s-%03d" % (n, i) for i in range(250)]
        h.send("".join("LOCK %s\n" % x for x in names))
        for x in names:
            h.expect_match(r"^OK %s [0-9]+$" % re.escape(x))
        for cmd in (["locks"], ["locks", "--cluster"]):
            with self.subTest(cmd=cmd):
                p = self.lb(self.tls() + cmd + [n + "-*"])
                self.assert_exit(p, 0)
                self.assertEqual(p.err, "")
                got = [line.split()[1] for line in p.out.splitlines()]
                self.assertEqual(sorted(got), names)
        p = self.lb(self.tls() + ["status", "--raw", names[7]])
        self.assert_exit(p, 0)
        self.assertRegex(p.out, r"^STATUS %s held " % re.escape(names[7]))

    def test_certificate_login(self):
        n = self.name()
        p = self.lb(self.tls() + ["run", n, "--", "echo", "ran"])
        self.assert_exit(p, 0, stdout="ran\n")
        self.assertEqual(p.err, "")
        # Not one of alice's names: refused by the daemon, no login can help.
        p = self.lb(self.tls() + ["run", "db", "--", "echo", "ran"])
        self.assert_exit(p, EXIT_DENIED, r"%s refused LOCK db: ERR DENIED user alice may not "
                         r"use lock db$" % re.escape(self.d.tls_addr), stdout="")
        # Without a certificate, as a plain-text client: AUTH (-a) or nothing.
        p = self.lb(self.tls(cert=False) + ["status", n])
        self.assert_exit(p, EXIT_DENIED, re.escape(self.d.tls_addr) + " " +
                         LOGIN_ADVICE % "STATUS", stdout="")
        p = self.lb(self.tls(cert=False) + ["-a", "alice", "run", n, "--", "echo", "ran"],
                    env=clean_env(LOCKBROKER_PASSWORD="hunter2"))
        self.assert_exit(p, 0, stdout="ran\n")
        self.d.wait_log(r"logged in by certificate as alice")

    def test_lost_ends_the_command(self):
        n = self.name()
        p = self.start(self.tls() + ["run", n, "--"] + trapper(code=0, ready=PID_AND_TOKEN))
        pid, token = p.read_line().split()
        # break over TLS too: alice may (break=job-*).
        self.assert_exit(self.lb(self.tls() + ["break", n]), 0)
        p.finish()
        self.assert_exit(p, EXIT_LOST)
        self.assertRegex(p.err.splitlines()[0], r"^lockbroker: lock %s lost \(broken\); "
                         r"terminating the command$" % re.escape(n))
        self.assertEqual(p.out, "trapped-TERM\n")
        self.assertFalse(pid_alive(int(pid)))
        self.d.wait_log(r"lock %s: broken by .* \(token %s\)" % (re.escape(n), token))

    def test_elect_and_observe(self):
        n = self.name()
        obs = self.start(self.tls() + ["observe", n])
        self.assertEqual(obs.read_line(), "-")
        leader = self.start(self.tls() + ["elect", "--label", "10.0.0.1:80", n, "--", "sh",
                                          "-c", "echo leading; read x"], stdin=subprocess.PIPE)
        self.assertEqual(leader.read_line(), "leading")
        self.assertEqual(obs.read_line(), "10.0.0.1:80")
        leader.write("done\n")
        self.assertEqual(leader.finish(), 0)
        self.assertEqual(obs.read_line(), "-")
        obs.kill()

    def test_refused_handshakes(self):
        """Each refusal is one line and exit 121, and nothing is run."""
        strict = self.strict.tls_addr
        port = strict.rsplit(":", 1)[1]
        cases = [
            # The broker's certificate from another CA.
            (self.tls(ca=self.other.ca), self.d.tls_addr,
             r"the broker's TLS certificate does not verify against %s: " % re.escape(
                 self.other.ca)),
            # Made for localhost, reached as 127.0.0.1.
            (self.tls(addr=strict), strict, r"the broker's TLS certificate is not valid for "
             r"127\.0\.0\.1 \(IP address mismatch\)"),
            # Required, and not shown.
            (self.tls(cert=False, addr="localhost:" + port), "localhost:" + port,
             r"the broker refused the TLS connection: .*certificate required \(it asks for a "
             r"client certificate: give --cert and --key\)$"),
            # Signed by a CA the broker does not trust.
            (self.tls(cert=self.forged, addr="localhost:" + port), "localhost:" + port,
             r"the broker refused the TLS connection: .* \(its log says why\)$"),
        ]
        for args, addr, why in cases:
            for sub in (["ping"], ["run", self.name(), "--", "echo", "ran"]):
                with self.subTest(addr=addr, why=why, sub=sub):
                    p = self.lb(args + sub)
                    self.assert_exit(p, EXIT_UNAVAILABLE, re.escape(addr) + ": " + why,
                                     stdout="")
        # The right name, and the certificate it requires: served.
        p = self.lb(self.tls(addr="localhost:" + port) + ["ping"])
        self.assert_exit(p, 0, stdout="PONG\n")

    def test_too_many_clients_is_told_over_tls(self):
        """The daemon's refusal comes after the handshake, and the CLI
        prints it, where it asked whether the port was the plain-text one."""
        d = start_tls_daemon(tls_conf(self.pki.issue("localhost", server=True), self.pki.ca,
                                      "optional", extra="[server]\nmax_clients = 1\n"),
                             "lockbrokerd-cli-tls-full")
        self.addCleanup(d.stop)
        kept = d.client()
        self.addCleanup(kept.close)
        self.assertEqual(kept.request("PING"), "PONG")
        for cert in (None, False):
            for sub in (["ping"], ["run", self.name(), "--", "echo", "ran"]):
                with self.subTest(cert=cert, sub=sub):
                    p = self.lb(self.tls(cert=cert, addr=d.tls_addr) + sub)
                    self.assert_exit(p, EXIT_UNAVAILABLE, r"%s refused this client: ERR LIMIT "
                                     r"too many clients; try again later$"
                                     % re.escape(d.tls_addr), stdout="")

    def test_wrong_port(self):
        p = self.lb(self.tls(addr=self.d.listen_addr) + ["ping"])
        self.assert_exit(p, EXIT_UNAVAILABLE, r"%s closed the connection during the TLS "
                         r"handshake: is this its plain-text port\?" % re.escape(
                             self.d.listen_addr), stdout="")
        self.d.wait_log(r"a TLS handshake on the plain port")
        p = self.lb(["-H", self.d.tls_addr, "ping"])
        self.assertEqual(p.rc, EXIT_UNAVAILABLE, p.err)

    def test_tls_usage(self):
        hp = ["-H", self.d.tls_addr]
        for args, env, why in (
                (hp + ["--cacert", self.pki.ca], None, r"--cacert, --cert and --key go with --tls"),
                (["--tls", "-U", "/nonexistent"], None, r"--tls is for a broker's TCP port"),
                (hp + ["--tls", "--key", self.alice[1]], None, r"--key is the key of --cert FILE"),
                (hp, clean_env(LOCKBROKER_TLS="yes"), r"LOCKBROKER_TLS: expected 1 \(TLS\) or 0"),
                (hp + ["--tls", "--cacert", "/nonexistent.pem"], None,
                 r"CA file /nonexistent\.pem: No such file or directory$"),
                (hp + ["--tls", "--cert", self.alice[0]], None,
                 r"certificate file \S+ has no private key in it"),
                (hp + ["--tls", "--cert", self.alice[0], "--key", self.forged[1]], None,
                 r"key file \S+ does not match certificate file \S+$")):
            with self.subTest(args=args):
                p = self.lb(args + ["ping"], env=env)
                self.assert_exit(p, EXIT_USAGE, why, stdout="")


@unittest.skipUnless(have_openssl(), "the openssl command is not installed")
class ReadmeTlsTests(Case):
    """README's "Serving other machines", run as it is printed: the openssl
    recipe (in a temporary directory, the server's certificate also for
    127.0.0.1), its configuration, and the lockbroker line against it
    (127.0.0.1 for locks.example.net)."""

    def section(self):
        with open(README) as f:
            m = re.search(r"\n## Serving other machines\n(.*?)\n## ", f.read(), re.S)
        self.assertIsNotNone(m, "no Serving other machines section in " + README)
        return m.group(1)

    def test_recipe_and_the_lockbroker_line(self):
        text = self.section()
        blocks = re.findall(r"```(sh|ini)\n(.*?)```", text, re.S)
        recipe = next(b for kind, b in blocks if kind == "sh" and "openssl req" in b)
        ini = next(b for kind, b in blocks if kind == "ini")
        line = next(b for kind, b in blocks if kind == "sh" and "lockbroker -H" in b)
        tmp = make_tmpdir()
        self.assertIn("cd /etc/lockbroker && umask 077\n", recipe)
        self.assertIn("IP:192.0.2.10", recipe)
        recipe = recipe.replace("cd /etc/lockbroker && ", "").replace(
            "IP:192.0.2.10", "IP:127.0.0.1")
        recipe = "\n".join(l for l in recipe.splitlines() if not l.startswith("chown "))
        subprocess.run(["sh", "-ec", recipe], cwd=tmp, check=True, capture_output=True)
        with open(os.path.join(tmp, "users"), "w") as f:
            f.write("deploy:%s:deploy-*\n" % LoginTests.HASH)
        os.chmod(os.path.join(tmp, "users"), 0o600)
        self.assertIn("listen = 0.0.0.0:7412\n", ini)
        d = start_tls_daemon(ini.replace("/etc/lockbroker/", tmp + "/").replace(
            "0.0.0.0:7412", "127.0.0.1:0"), "lockbrokerd-cli-readme-tls")
        self.addCleanup(d.kill)
        with open(os.path.join(tmp, "deploy.sh"), "w") as f:
            f.write('#!/bin/sh\necho "deploying with token $LOCKBROKER_TOKEN"\n')
        os.chmod(os.path.join(tmp, "deploy.sh"), 0o755)
        self.assertIn("-H locks.example.net:7412 ", line)
        p = self.start(["-ec", line.replace("locks.example.net:7412", d.tls_addr)],
                       program="sh", cwd=tmp, env=clean_env(PATH=os.path.dirname(
                           os.path.abspath(client_path())) + os.pathsep + os.environ["PATH"]))
        p.finish()
        self.assert_exit(p, 0)
        self.assertEqual(p.err, "")
        self.assertRegex(p.out, r"^deploying with token [0-9]+\n$")
        d.wait_log(r"logged in by certificate as deploy")
        d.stop()


@unittest.skipUnless(have_openssl(), "the openssl command is not installed")
class TlsZkTests(ZkCase):
    """Distributed mode over TLS: run, and locks --cluster from ZooKeeper."""

    def test_run_and_cluster_locks(self):
        import zkharness
        tmp = make_tmpdir()
        pki = Pki(os.path.join(tmp, "pki"))
        zk = zkharness.ZkServer(tick_ms=500, name="zk-cli-tls")
        self.addCleanup(zk.cleanup)
        zk.start()
        d = start_tls_daemon(tls_conf(pki.issue("localhost", server=True), pki.ca, "none",
                                      extra="[zookeeper]\nhosts = %s\nsession_timeout_ms = %d\n"
                                      "tick_ms = 500\n" % (zk.connect_string, self.SESSION_MS)),
                             "lockbrokerd-cli-zk-tls")
        self.addCleanup(d.kill)
        self.assertEqual(d.mode, "distributed")
        d.wait_log(r"zk: new session 0x[0-9a-f]+", timeout=scaled(30))
        tls = ["-H", d.tls_addr, "--tls", "--cacert", pki.ca]
        n = self.name()
        p = self.start(tls + ["run", "--label", "tls-holder", n, "--", "sh", "-c",
                              "echo held; read x"], stdin=subprocess.PIPE)
        self.assertEqual(p.read_line(timeout=scaled(30)), "held")
        q = self.lb(tls + ["locks", "--cluster", "--raw", n])
        self.assert_exit(q, 0)
        self.assertEqual(q.err, "")
        self.assertRegex(q.out, r"^HOLDER %s .*label=tls-holder" % re.escape(n))
        p.write("done\n")
        self.assertEqual(p.finish(), 0)
        self.assert_exit(self.lb(tls + ["status", n]), EXIT_FREE)
        d.stop()


if __name__ == "__main__":
    unittest.main(verbosity=2)
