#!/bin/sh
# docs_complete.sh - the maps stay whole: every daemon source file
# (daemon/*.c, daemon/zk/*.c) is named in docs/ARCHITECTURE.md, and every
# test file (tests/check_*.c, tests/*.sh, tests/e2e/*.py, tests/e2e/*.sh)
# in tests/README.md. A file is named when its base name appears as a
# word ("zk_lease.c" does not name "lease.c").
#
# Fails naming each file left out, so that a new file comes with its line.
# Reads the source tree (LB_SRCDIR, as make check sets it; default: the
# tree this script is in). Needs nothing else: never skipped.
set -u
srcdir=${LB_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
fail=0

# check MAP FILE...: each FILE's base name must appear in MAP.
check() {
    map=$1
    shift
    if [ ! -f "$srcdir/$map" ]; then
        echo "docs_complete.sh: $map not found in $srcdir" >&2
        fail=1
        return
    fi
    for f in "$@"; do
        [ -e "$f" ] || continue          # a pattern that matched nothing
        name=$(basename "$f")
        if ! grep -qwF -- "$name" "$srcdir/$map"; then
            echo "docs_complete.sh: ${f#"$srcdir"/} is not named in $map" >&2
            fail=1
        fi
    done
}

check docs/ARCHITECTURE.md "$srcdir"/daemon/*.c "$srcdir"/daemon/zk/*.c
check tests/README.md "$srcdir"/tests/check_*.c "$srcdir"/tests/*.sh \
    "$srcdir"/tests/e2e/*.py "$srcdir"/tests/e2e/*.sh
exit $fail
