# lb_skip.sh - sourced by the shell tests: their skips follow LB_REQUIRE as
# the Python ones do (tests/e2e/lbharness.py, SKIP_KEYS, which says what
# each key names and checks the keys' spelling).
#
# lb_skip KEY WHY: exits 77 (automake: SKIP) for lack of what KEY names, or
# 1 (FAIL) when LB_REQUIRE lists KEY, or "all" without "-KEY".
lb_skip() {
    case ",${LB_REQUIRE:-}," in
    *",-$1,"*) ;;
    *",$1,"* | *",all,"*)
        echo "$(basename "$0"): $2: not skipped but failed, as LB_REQUIRE=$LB_REQUIRE covers $1" >&2
        exit 1 ;;
    esac
    echo "$(basename "$0"): $2; skipping [$1]" >&2
    exit 77
}
