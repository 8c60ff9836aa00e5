#!/bin/sh
# make check: the harness of the request parser for a few seconds (run.sh).
exec /bin/sh "$(dirname "$0")/run.sh" proto "${FUZZ_CHECK_SECONDS:-5}"
