#!/bin/sh
# Builds the Debian package from a clean copy of the source tree, checks what
# it contains and runs lintian on it.
#
# The copy holds the git work tree's files as they are now (committed or not,
# untracked ones too), less what .gitignore ignores: what the next commit
# would build, without this build directory's objects. The package is built
# with DEB_BUILD_OPTIONS=nocheck: the make check that runs this test runs the
# test suite already, and debian/rules sets LB_TEST_DEB=0 so that a package
# build never builds the package again.
#
# Exit 77 (automake: SKIP) when LB_TEST_DEB=0, when dpkg-buildpackage, dh or
# lintian is not installed (apt-get install debhelper lintian), or when the
# source tree is not the top of a git work tree (a release tarball, and so
# distcheck). With LB_REQUIRE=deb those are failures (tests/lb_skip.sh).
# LB_KEEP_DEB=DIR keeps the built package in DIR.
set -eu

. "$(dirname "$0")/lb_skip.sh"
skip() { lb_skip deb "$*"; }

srcdir=${LB_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
[ "${LB_TEST_DEB:-1}" != 0 ] || skip "LB_TEST_DEB=0"
for tool in dpkg-buildpackage dpkg-deb dh lintian git; do
    command -v "$tool" >/dev/null 2>&1 || skip "$tool not found"
done
[ -d "$srcdir/debian" ] || skip "$srcdir has no debian/ directory"
# distcheck unpacks the tarball inside the work tree, in an ignored directory:
# only the top of a work tree counts.
top=$(git -C "$srcdir" rev-parse --show-toplevel 2>/dev/null || true)
[ -n "$top" ] && [ "$(cd "$top" && pwd -P)" = "$(cd "$srcdir" && pwd -P)" ] ||
    skip "$srcdir is not the top of a git work tree"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/lbdeb.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }

# The package version must be the one configure.ac gives the programs.
ver=$(cd "$srcdir" && dpkg-parsechangelog -S Version)
ac_ver=$(sed -n 's/^AC_INIT(\[lockbroker\], \[\([^]]*\)\].*/\1/p' "$srcdir/configure.ac")
[ "$ver" = "$ac_ver" ] ||
    bad "debian/changelog says $ver, configure.ac says ${ac_ver:-nothing}"

# A clean copy: tracked and untracked files, not ignored ones (build output).
mkdir "$tmp/lockbroker-$ver"
git -C "$srcdir" ls-files -z --cached --others --exclude-standard |
    (cd "$srcdir" && tar --null -T - --ignore-failed-read -cf -) |
    (cd "$tmp/lockbroker-$ver" && tar -xf -)

echo "deb_package.sh: dpkg-buildpackage -us -uc -b in $tmp/lockbroker-$ver"
if ! (cd "$tmp/lockbroker-$ver" &&
      DEB_BUILD_OPTIONS="nocheck parallel=$(nproc)" \
      dpkg-buildpackage -us -uc -b -Pnocheck) >"$tmp/build.log" 2>&1; then
    tail -n 40 "$tmp/build.log" >&2
    echo "FAIL: dpkg-buildpackage (the end of its log is above)" >&2
    exit 1
fi
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
deb=$tmp/lockbroker_${ver}_${arch}.deb
changes=$tmp/lockbroker_${ver}_${arch}.changes
[ -f "$deb" ] || { echo "FAIL: $deb was not built" >&2; exit 1; }
if [ -n "${LB_KEEP_DEB:-}" ]; then
    cp "$deb" "$LB_KEEP_DEB/" && echo "deb_package.sh: kept $LB_KEEP_DEB/${deb##*/}"
fi

# What is installed where (dpkg-deb -c lists ./path).
dpkg-deb -c "$deb" | awk '{ print $6 }' | sed 's|^\.||' >"$tmp/files"
for f in /usr/sbin/lockbrokerd /usr/bin/lockbroker /etc/lockbrokerd.conf \
         /usr/share/man/man1/lockbroker.1.gz /usr/share/man/man5/lockbrokerd.conf.5.gz \
         /usr/share/man/man8/lockbrokerd.8.gz /usr/lib/sysusers.d/lockbroker.conf \
         /usr/share/doc/lockbroker/copyright /usr/share/doc/lockbroker/PROTOCOL.md.gz; do
    grep -qxF "$f" "$tmp/files" || bad "$f is not in the package"
done
unit=$(grep -E '^(/usr)?/lib/systemd/system/lockbrokerd\.service$' "$tmp/files" || true)
[ -n "$unit" ] || bad "no lockbrokerd.service under /lib/systemd/system"

# The configuration is a conffile, and the only one: dpkg keeps a changed
# /etc/lockbrokerd.conf on upgrade.
conffiles=$(dpkg-deb -I "$deb" conffiles 2>/dev/null || true)
[ "$conffiles" = /etc/lockbrokerd.conf ] ||
    bad "conffiles is '$conffiles', not /etc/lockbrokerd.conf"

# Shared libraries found by dh_shlibdeps; a sysusers implementation for the user.
depends=$(dpkg-deb -f "$deb" Depends)
for lib in libevent libzookeeper-st libinih libsystemd \
           'systemd | systemd-standalone-sysusers'; do
    case "$depends" in *"$lib"*) ;; *) bad "Depends lacks $lib: $depends" ;; esac
done

# postinst creates the user before it starts the service.
dpkg-deb -I "$deb" postinst >"$tmp/postinst" 2>/dev/null || bad "no postinst"
users_at=$(grep -n 'systemd-sysusers.*lockbroker\.conf' "$tmp/postinst" | head -n 1 | cut -d: -f1)
start_at=$(grep -n 'deb-systemd-invoke .*lockbrokerd\.service' "$tmp/postinst" | head -n 1 | cut -d: -f1)
grep -q 'deb-systemd-helper .*enable.*lockbrokerd\.service' "$tmp/postinst" ||
    bad "postinst does not enable lockbrokerd.service"
if [ -z "$users_at" ] || [ -z "$start_at" ] || [ "$users_at" -ge "$start_at" ]; then
    bad "postinst does not run systemd-sysusers (line ${users_at:-none}) before it starts the service (line ${start_at:-none})"
fi

# An upgrade hands over: postinst restarts the service (the unit's file
# descriptor store carries the connections and locks across), and nothing
# stops it on the way, which would end every lock: prerm stops it only on
# remove, and there is no preinst stop.
grep -q '_dh_action=restart' "$tmp/postinst" ||
    bad "postinst does not restart the service after an upgrade"
dpkg-deb -I "$deb" prerm >"$tmp/prerm" 2>/dev/null || bad "no prerm"
if grep -q 'deb-systemd-invoke stop' "$tmp/prerm" &&
   ! grep -q '"$1" = remove' "$tmp/prerm"; then
    bad "prerm stops the service on upgrade, not only on remove"
fi
if dpkg-deb -I "$deb" preinst 2>/dev/null | grep -q 'deb-systemd-invoke stop'; then
    bad "preinst stops the service before an upgrade"
fi

# The unit runs the packaged daemon with the packaged config, as lockbroker.
dpkg-deb -x "$deb" "$tmp/root"
if [ -n "$unit" ]; then
    for line in 'ExecStart=/usr/sbin/lockbrokerd -c /etc/lockbrokerd.conf' \
                Type=notify User=lockbroker Group=lockbroker \
                Environment=LOCKBROKERD_FDSTORE=1 FileDescriptorStoreMax=8; do
        grep -qxF "$line" "$tmp/root$unit" || bad "$unit lacks the line $line"
    done
fi
grep -qsE '^u lockbroker ' "$tmp/root/usr/lib/sysusers.d/lockbroker.conf" ||
    bad "sysusers.d/lockbroker.conf does not declare the user lockbroker"

# The packaged daemon accepts the packaged configuration and has its version.
out=$("$tmp/root/usr/sbin/lockbrokerd" -t -c "$tmp/root/etc/lockbrokerd.conf" 2>&1) ||
    bad "lockbrokerd -t rejects the packaged config: $out"
out=$("$tmp/root/usr/sbin/lockbrokerd" -V 2>&1)
[ "$out" = "lockbrokerd $ver" ] || bad "lockbrokerd -V says '$out', not 'lockbrokerd $ver'"
out=$("$tmp/root/usr/bin/lockbroker" --version 2>&1)
[ "$out" = "lockbroker $ver" ] || bad "lockbroker --version says '$out', not 'lockbroker $ver'"

# lintian: errors and warnings fail (debian/lockbroker.lintian-overrides
# gives the reason for each tag it hides); info tags are only shown.
echo "deb_package.sh: lintian -I ${changes##*/}"
lintian -I --fail-on error,warning "$changes" || bad "lintian (tags above)"

[ "$fail" -eq 0 ] && echo "deb_package.sh: ${deb##*/} checked: $(wc -l <"$tmp/files") paths"
exit "$fail"
