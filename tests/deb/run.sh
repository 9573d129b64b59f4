#!/usr/bin/env bash
# The Debian package in a fresh Debian root (debootstrap, bookworm minbase with systemd, not
# running): it installs; the
# unit's own command line serves the dashboard with the settings file beneath the environment;
# an upgrade keeps the data and an edited settings file; removal keeps the data; purge removes
# it. Then `systemd-analyze verify` checks the unit against that root. Needs root.
# Usage: run.sh PACKAGE UPGRADE_PACKAGE (`make deb-test` builds both).
set -euo pipefail
deb=$(realpath "$1")
upgrade=$(realpath "$2")
cache=${TOOLS_DIR:-$HOME/.cache/lanes-tools}/debian-bookworm-minbase-systemd.tar
root=$(mktemp -d /tmp/lanes-deb-root.XXXXXX)
pid=
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  for m in proc dev; do umount -l "$root/$m" 2>/dev/null || true; done
  rm -rf "$root"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; [ -f "$root/tmp/serve.log" ] && tail -20 "$root/tmp/serve.log" >&2; exit 1; }
in_root() { chroot "$root" "$@"; }

# A pristine root, made once per machine and kept as a tar (a fresh copy each run).
if [ ! -f "$cache" ]; then
  mkdir -p "$(dirname "$cache")"
  fresh=$(mktemp -d /tmp/lanes-debootstrap.XXXXXX)
  # systemd's own units, so that `systemd-analyze verify --root` can check ours against them.
  debootstrap --variant=minbase --include=systemd bookworm "$fresh" http://deb.debian.org/debian >/dev/null
  tar -C "$fresh" -cf "$cache.part" . && mv "$cache.part" "$cache"
  rm -rf "$fresh"
fi
tar -C "$root" -xf "$cache"
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
cp "$deb" "$root/tmp/lanes.deb"
cp "$upgrade" "$root/tmp/lanes-upgrade.deb"

in_root dpkg -i /tmp/lanes.deb >/dev/null || fail "dpkg -i"
for f in /usr/bin/lanes /lib/systemd/system/lanes.service /etc/lanes/lanes.toml \
         /usr/share/man/man1/lanes.1.gz /usr/share/man/man1/lanes-serve.1.gz; do
  [ -e "$root$f" ] || fail "the package did not install $f"
done
[ "$(stat -c %a "$root/var/lib/lanes")" = 700 ] || fail "/var/lib/lanes is not 0700"
# Not started or enabled by installing: the operator does that once an admin exists.
[ ! -L "$root/etc/systemd/system/multi-user.target.wants/lanes.service" ] || fail "installing enabled the service"
echo "ok: installed, files in place"

# The first admin, as postinst says; the settings file gives the data dir.
echo "deb test passphrase" | in_root lanes user add --username admin --admin --password-stdin >/dev/null \
  || fail "lanes user add"
[ -f "$root/var/lib/lanes/lanes.db" ] || fail "the database is not in /var/lib/lanes"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
exec_start=$(sed -n 's/^ExecStart=//p' "$root/lib/systemd/system/lanes.service")
serve() {
  # As the unit starts it, its settings from the environment where a test needs them.
  chroot "$root" env LANES_LISTEN=127.0.0.1:$port LANES_GPUS=sim:2 $exec_start >"$root/tmp/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && return; sleep 0.2; done
  fail "lanes serve did not answer"
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; pid=; }

serve
html=$(curl -sf "http://127.0.0.1:$port/login")
bundle=$(grep -o '/pkg/[0-9a-f]*/lanes_bg.wasm' <<<"$html" | head -1)
[ -n "$bundle" ] || fail "the page names no bundle"
type=$(curl -sf -o /dev/null -w '%{content_type}' "http://127.0.0.1:$port$bundle")
[ "$type" = application/wasm ] || fail "the bundle came as '$type'"
login() {
  curl -sf -o /dev/null -H 'content-type: application/json' \
    -d '{"username":"admin","password":"deb test passphrase"}' "http://127.0.0.1:$port/api/v1/auth/login"
}
login || fail "cannot log in"
chroot "$root" env LANES_LISTEN=127.0.0.1:$port lanes config check >"$root/tmp/check.txt" || fail "lanes config check"
grep -q '^data_dir = "/var/lib/lanes" *# file /etc/lanes/lanes.toml' "$root/tmp/check.txt" || fail "config check: data_dir"
grep -q '^listen = .*# environment LANES_LISTEN' "$root/tmp/check.txt" || fail "config check: listen"
echo "ok: the unit's command serves the dashboard and its bundle from the binary"
stop

# Upgrade: the lab's data, an operator's edit to the settings file and the operator's
# `systemctl enable` survive.
echo '# edited by the operator' >>"$root/etc/lanes/lanes.toml"
in_root systemctl enable lanes.service >/dev/null 2>&1 || fail "systemctl enable (offline)"
in_root dpkg -i /tmp/lanes-upgrade.deb >/dev/null || fail "upgrade"
grep -q 'edited by the operator' "$root/etc/lanes/lanes.toml" || fail "the upgrade replaced the edited settings"
[ -L "$root/etc/systemd/system/multi-user.target.wants/lanes.service" ] || fail "the upgrade disabled the service"
serve
login || fail "the account did not survive the upgrade"
stop
echo "ok: upgraded to $(in_root dpkg-query -W -f '${Version}' lanes), data and settings kept"

# The man page the unit names is checked above; verify's own check would run the host's `man`.
systemd-analyze verify --man=no --root="$root" /lib/systemd/system/lanes.service || fail "systemd-analyze verify"
echo "ok: systemd-analyze verify"

in_root dpkg -r lanes >/dev/null || fail "dpkg -r"
[ ! -e "$root/usr/bin/lanes" ] || fail "removal left the binary"
[ -f "$root/var/lib/lanes/lanes.db" ] || fail "removal deleted the data"
in_root dpkg -P lanes >/dev/null || fail "dpkg -P"
[ ! -e "$root/var/lib/lanes" ] || fail "purge left /var/lib/lanes"
[ ! -e "$root/etc/lanes" ] || fail "purge left /etc/lanes"
echo "ok: removal keeps the data, purge removes it"
