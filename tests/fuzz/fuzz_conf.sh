#!/bin/sh
# make check: the harness of the config file loader for a few seconds (run.sh).
exec /bin/sh "$(dirname "$0")/run.sh" conf "${FUZZ_CHECK_SECONDS:-5}"
