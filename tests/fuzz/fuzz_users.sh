#!/bin/sh
# make check: the harness of the users file loader for a few seconds (run.sh).
exec /bin/sh "$(dirname "$0")/run.sh" users "${FUZZ_CHECK_SECONDS:-5}"
