#!/bin/bash
# Build netdoctor_<version>_all.deb with dpkg-deb from a staged tree (no debhelper needed).
#   packaging/debian/build-deb.sh [OUTPUT_DIR]      -> OUTPUT_DIR/netdoctor_<version>_all.deb
# Layout: the zipapp in /usr/lib/netdoctor, /usr/bin/netdoctor, SLURM hooks in
# /usr/libexec/netdoctor, units in /usr/lib/systemd/system, policy in /etc/netdoctor.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
OUT=$(mkdir -p "${1:-$REPO/dist}" && cd "${1:-$REPO/dist}" && pwd)
PYTHON=${PYTHON:-python3}
VERSION=$("$PYTHON" -c 'import re,sys; print(re.search(r"__version__ = \"([^\"]+)\"", open(sys.argv[1]).read()).group(1))' "$REPO/netdoctor/__init__.py")
STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
ROOT=$STAGE/root

install -d "$ROOT/DEBIAN" "$ROOT/usr/bin" "$ROOT/usr/lib/netdoctor" "$ROOT/usr/libexec/netdoctor" \
  "$ROOT/usr/lib/systemd/system" "$ROOT/etc/netdoctor" "$ROOT/usr/share/netdoctor/rules" \
  "$ROOT/usr/share/doc/netdoctor/examples" "$ROOT/var/lib/netdoctor" "$ROOT/var/log/netdoctor"
"$PYTHON" "$REPO/packaging/build-zipapp.py" -o "$ROOT/usr/lib/netdoctor/netdoctor.pyz" >/dev/null
cat > "$ROOT/usr/bin/netdoctor" <<'WRAP'
#!/bin/sh
# netdoctor, installed as a zipapp; unpacks once into /var/cache/netdoctor (root) or ~/.cache.
exec /usr/bin/python3 /usr/lib/netdoctor/netdoctor.pyz "$@"
WRAP
chmod 755 "$ROOT/usr/bin/netdoctor"
install -m 755 "$REPO"/packaging/slurm/netdoctor-{slurm-hook,prolog,healthcheck} "$ROOT/usr/libexec/netdoctor/"
install -m 644 "$REPO"/packaging/systemd/netdoctor.{service,timer} "$ROOT/usr/lib/systemd/system/"
# The opt-in device hardening: an example, copied to /etc/systemd/system/netdoctor.service.d/ by hand.
install -D -m 644 "$REPO/packaging/systemd/netdoctor.service.d/strict.conf" \
  "$ROOT/usr/share/netdoctor/systemd/netdoctor.service.d/strict.conf"
# The packaged policy points the hooks at the packaged command.
sed 's|^NETDOCTOR=netdoctor$|NETDOCTOR=/usr/bin/netdoctor|' "$REPO/packaging/slurm/slurm.conf.example" > "$ROOT/etc/netdoctor/slurm.conf"
chmod 644 "$ROOT/etc/netdoctor/slurm.conf"
install -m 644 "$REPO"/rules/*.toml "$ROOT/usr/share/netdoctor/rules/"
install -m 644 "$REPO/packaging/slurm/slurm.conf.example" "$ROOT/usr/share/doc/netdoctor/examples/netdoctor-slurm.conf"
[ -f "$REPO/docs/slurm.md" ] && install -m 644 "$REPO/docs/slurm.md" "$ROOT/usr/share/doc/netdoctor/"
[ -f "$REPO/docs/fleet.md" ] && install -m 644 "$REPO/docs/fleet.md" "$ROOT/usr/share/doc/netdoctor/"
sed "s/@VERSION@/$VERSION/" "$HERE/control.in" > "$ROOT/DEBIAN/control"
echo "/etc/netdoctor/slurm.conf" > "$ROOT/DEBIAN/conffiles"
cat > "$ROOT/DEBIAN/postrm" <<'POSTRM'
#!/bin/sh
set -e
# The zipapp's unpacked copies; the state file and logs stay unless purged.
rm -rf /var/cache/netdoctor
if [ "$1" = purge ]; then rm -rf /var/lib/netdoctor /var/log/netdoctor; fi
POSTRM
chmod 755 "$ROOT/DEBIAN/postrm"
dpkg-deb --root-owner-group -Zxz --build "$ROOT" "$OUT/netdoctor_${VERSION}_all.deb" >/dev/null
echo "$OUT/netdoctor_${VERSION}_all.deb"
