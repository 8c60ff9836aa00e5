#!/bin/sh
# Runs the embedded, the authentication, the sessions' and test_metrics.py's
# embedded-mode end-to-end suites with the daemon under valgrind: a leak (definite), an
# invalid access or an uninitialised read makes the daemon exit 99, and the
# harness fails every test whose daemon does not exit 0.
# Exit 77 (automake: SKIP) when valgrind is not installed (1 with
# LB_REQUIRE=valgrind: tests/lb_skip.sh).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../lb_skip.sh"

command -v valgrind >/dev/null 2>&1 || lb_skip valgrind "valgrind not found"

LB_DAEMON_WRAPPER="valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --show-leak-kinds=definite"
# Everything runs ~20-50x slower under valgrind: stretch every timeout.
LB_TIMEOUT_SCALE=${LB_TIMEOUT_SCALE:-10}
export LB_DAEMON_WRAPPER LB_TIMEOUT_SCALE

if [ $# -gt 0 ]; then
    exec "${PYTHON:-python3}" "$here/test_embedded.py" "$@"
fi
"${PYTHON:-python3}" "$here/test_embedded.py"
"${PYTHON:-python3}" "$here/test_auth.py"
# Sessions: GRACE, RESUME, a detach, a grace that runs out.
"${PYTHON:-python3}" "$here/test_session.py" Requests Detached
# The TLS path (OpenSSL inside bufferevent_openssl), when openssl is installed.
"${PYTHON:-python3}" "$here/test_tls.py" ProtocolOverTls CertificateLogins Rotation
exec "${PYTHON:-python3}" "$here/test_metrics.py" EmbeddedTest SettingTest TlsMetricsTest
