#!/bin/sh
# run.sh NAME [SECONDS [OUT]] - runs the libFuzzer harness tests/fuzz/fuzz_NAME
# over its seed corpus (tests/fuzz/corpus/NAME, regression inputs included),
# then on new inputs until SECONDS have passed (default 5: make check).
# With OUT (make fuzz) the inputs it finds are kept in OUT/corpus/NAME from
# run to run and a crash is written to OUT/; without, they go to a temporary
# directory and a crash to tests/fuzz/ of the build tree. docs/FUZZING.md.
# Exit status: 0 nothing found, 1 a crash or a failed check (the input is
# named in the output), 77 (skip) when configure found no clang with libFuzzer
# (1 with LB_REQUIRE=clang: tests/lb_skip.sh).
set -u
name=$1 secs=${2:-5} out=${3:-}
srcdir=${LB_SRCDIR:-$(cd "$(dirname "$0")/../.." && pwd)}
bin=tests/fuzz/fuzz_$name
. "$(dirname "$0")/../lb_skip.sh"

if [ "${LB_FUZZ_CC:-}" != yes ]; then
    lb_skip clang "configure found no clang with libFuzzer (install clang; docs/FUZZING.md)"
fi
if [ ! -x "$bin" ]; then
    echo "$bin: not built" >&2
    exit 1
fi
if [ -n "$out" ]; then
    corpus=$out/corpus/$name
    artifacts=$out/$name-
    mkdir -p "$corpus" || exit 1
else
    corpus=$(mktemp -d) || exit 1
    trap 'rm -rf "$corpus"' EXIT
    artifacts=tests/fuzz/$name-
fi

# libFuzzer's own exit codes for a crash (77) and a timeout (70) would read
# as "skipped" and "failed" to make check: 1 for both.
set -- -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -error_exitcode=1 -timeout_exitcode=1 -artifact_prefix="$artifacts"
if [ -f "$srcdir/tests/fuzz/$name.dict" ]; then
    set -- "$@" -dict="$srcdir/tests/fuzz/$name.dict"
fi
UBSAN_OPTIONS=print_stacktrace=1 "$bin" "$@" "$corpus" "$srcdir/tests/fuzz/corpus/$name"
