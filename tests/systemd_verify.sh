#!/bin/sh
# Runs `systemd-analyze verify` on the generated systemd unit and fails on any
# output: systemd prints a line for every unknown key, bad value, missing
# executable or man page that does not open.
#
# The unit names the installed daemon, which need not exist yet: verify a copy
# whose ExecStart= runs the built one (env LOCKBROKERD) instead. Its
# Documentation= man pages are looked up among the source tree's (LB_SRCDIR).
# Run from the top build directory, as `make check` does.
# Exit 77 (automake: SKIP) when systemd-analyze is not installed (1 with
# LB_REQUIRE=systemd: tests/lb_skip.sh).
set -eu
. "$(dirname "$0")/lb_skip.sh"

command -v systemd-analyze >/dev/null 2>&1 || lb_skip systemd "systemd-analyze not found"

unit=${LB_SYSTEMD_UNIT:-systemd/lockbrokerd.service}
srcdir=${LB_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
daemon=${LOCKBROKERD:-$(pwd)/daemon/lockbrokerd}

for f in "$unit" "$daemon"; do
    if [ ! -f "$f" ]; then
        echo "systemd_verify.sh: $f not found: run make first" >&2
        exit 99
    fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lbunit.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0

# Every @VARIABLE@ of the template must have been replaced.
if grep -n '@[A-Za-z_]*@' "$unit"; then
    echo "FAIL: unsubstituted variables in $unit" >&2
    fail=1
fi

# Type=notify only works if the daemon can notify: it must link libsystemd.
type=$(sed -n 's/^Type=//p' "$unit")
if ldd "$daemon" 2>/dev/null | grep -q 'libsystemd\.so'; then want=notify; else want=simple; fi
if [ "$type" != "$want" ]; then
    echo "FAIL: $unit has Type=$type, but the daemon calls for Type=$want" >&2
    fail=1
fi

# The unit as installed, but starting the built daemon.
sed -e "s|^ExecStart=[^ ]*|ExecStart=$daemon|" "$unit" >"$tmp/lockbrokerd.service"
grep '^ExecStart=' "$tmp/lockbrokerd.service"

# Documentation=man:... is checked by running man(1); give it our pages.
man_opt=--man=no
if command -v man >/dev/null 2>&1; then
    mkdir -p "$tmp/man/man5" "$tmp/man/man8"
    cp "$srcdir/daemon/lockbrokerd.8" "$tmp/man/man8/"
    cp "$srcdir/conf/lockbrokerd.conf.5" "$tmp/man/man5/"
    MANPATH=$tmp/man
    export MANPATH
    man_opt=--man=yes
fi

# systemd-analyze exits 0 on some warnings: any output is a failure.
rc=0
(cd "$tmp" && systemd-analyze verify "$man_opt" ./lockbrokerd.service) >"$tmp/out" 2>&1 || rc=$?
if [ "$rc" -ne 0 ] || [ -s "$tmp/out" ]; then
    echo "FAIL: systemd-analyze verify (exit $rc) said:" >&2
    cat "$tmp/out" >&2
    fail=1
else
    echo "systemd-analyze verify $man_opt: no warnings"
fi
exit "$fail"
