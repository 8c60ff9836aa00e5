"""The lock-name rule, read from its one source, proto/PROTOCOL.md ("Lock
names"), and a table of names to hold the daemon and both client libraries
to it (test_client_python.py, test_client_node.py)."""

import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
SRCDIR = os.environ.get("LB_SRCDIR") or os.path.join(HERE, "..", "..")
PROTOCOL_MD = os.path.join(SRCDIR, "proto", "PROTOCOL.md")

# The sentence as PROTOCOL.md words it; a new wording fails here rather than
# leaving the tests to check an older rule.
RULE_RE = re.compile(r"^## Lock names\s+1 to \*\*(\d+)\*\* bytes, each one of `([^`]+)`,"
                     r"\s+and neither ((?:`[^`]+`(?:,\s+|\s+nor\s+))*`[^`]+`)\.", re.M)


class NameRule:
    """max_len bytes at most, each in chars, and not one of excluded."""

    def __init__(self, max_len, chars, excluded):
        self.max_len = max_len
        self.chars = chars
        self.excluded = excluded

    def valid(self, name):
        b = name.encode("utf-8")
        return (1 <= len(b) <= self.max_len and all(c in self.chars for c in b)
                and name not in self.excluded)


def name_rule(path=PROTOCOL_MD):
    """The rule of PROTOCOL.md's "Lock names" section."""
    with open(path, encoding="utf-8") as f:
        m = RULE_RE.search(f.read())
    if not m:
        raise AssertionError("%s: no \"Lock names\" rule in the expected words "
                             "(tests/e2e/lbnames.py reads it)" % path)
    chars = set()
    for item in m.group(2).split():        # "A-Z a-z 0-9 . _ : @ -"
        if len(item) == 3 and item[1] == "-":
            chars.update(range(ord(item[0]), ord(item[2]) + 1))
        elif len(item) == 1:
            chars.add(ord(item))
        else:
            raise AssertionError("%s: cannot read %r in the name rule" % (path, item))
    excluded = set(re.findall(r"`([^`]+)`", m.group(3)))
    return NameRule(int(m.group(1)), frozenset(chars), frozenset(excluded))


# Names to try, valid and not by the rule (which decides; nothing here says
# which is which). Byte counts are the rule's 200 and 201.
NAMES = [
    "a", "deploy", "user@host", "host:7411", "a.b_c:d@e-f", "-", "_", "...", ".a", "a.",
    "..a", "Z9", "x" * 200,
    "", "x" * 201, "a/b", "/", ".", "..", "a b", " a", "a\tb", "a\n", "a\r", "a,b", ",",
    "a*", "a?", "a+b", "a\\b", "a\x00b", "a\x7f", "é", "naïve", "日本", "a\u00a0b",
    "x" * 199 + "é",
]

PARTNER = "names-partner"      # the other name of a set


def wire_word(name):
    """True when name can be sent as one argument (no separator, no line end)."""
    return name != "" and not re.search(r"[ \t\r\n]", name)
