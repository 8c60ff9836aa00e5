#!/bin/bash
# tls-files.sh DIR - a throw-away CA and a P-256 server certificate for
# 127.0.0.1 (README.md's recipe), and DIR/tls.conf giving an embedded daemon
# a TLS listener on a free port with them. What openssl said goes to
# DIR/openssl.log; exits non-zero when it fails. Used by run-bench.sh and
# tls-profile.sh.
set -eu
d=$1
mkdir -p "$d"
(
    set -e
    cd "$d"
    umask 077
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
        -keyout ca.key -out ca.pem -subj "/CN=lockbroker bench CA"
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
        -keyout server.key -out server.csr -subj "/CN=127.0.0.1"
    printf 'subjectAltName = IP:127.0.0.1\n' >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
        -extfile server.ext -out server.pem
    printf '[tls]\nlisten = 127.0.0.1:0\ncert_file = %s\nkey_file = %s\n' \
        "$d/server.pem" "$d/server.key" >tls.conf
) >"$d/openssl.log" 2>&1
