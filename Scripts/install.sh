#!/usr/bin/env bash
# Builds chat-server and chat-client and installs them, the systemd unit and the operator's
# guide under a prefix (docs/OPERATIONS.md).
set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: Scripts/install.sh [--prefix DIR] [--unit-dir DIR] [--debug] [--no-build]

Builds the release configuration of chat-server and chat-client, then installs:
  PREFIX/bin/chat-server, PREFIX/bin/chat-client
  UNIT_DIR/chat-server.service           Scripts/systemd/chat-server.service, its ExecStart and
                                         Documentation pointed at the installed files
  PREFIX/share/doc/chat-server/          OPERATIONS.md and the documents it links to (docs/*.md:
                                         SERVER.md, SECURITY.md, TLS.md, …)
  PREFIX/share/doc/chat-server/examples/ chat-server.env (for /etc/default/chat-server),
                                         chat-server.toml (for --config) and
                                         chat-server-alerts.yml (Prometheus alert rules)

Then, as root on a systemd machine:
  install -m 0600 PREFIX/share/doc/chat-server/examples/chat-server.env /etc/default/chat-server
  install -D -m 0644 PREFIX/share/doc/chat-server/examples/chat-server.toml /etc/chat-server/chat-server.toml
  systemctl daemon-reload && systemctl enable --now chat-server
  curl -s http://127.0.0.1:9464/metrics ; PREFIX/bin/chat-server --status --metrics 127.0.0.1:9464

Options:
  --prefix DIR     where to install (default /usr/local)
  --unit-dir DIR   where the unit goes (default PREFIX/lib/systemd/system, which systemd reads
                   for /usr/local and /usr; elsewhere use /etc/systemd/system)
  --debug          build and install the debug configuration (tests use it; not for production)
  --no-build       install what is already built (fails if it is missing)
  -h, --help       show this help

Environment:
  DESTDIR          staged installs: every path is put under it (packaging), while the unit
                   still names PREFIX/bin as the service will see it
  SCRATCH_PATH     build directory (default .build-release for release, .build for debug)

The binaries link the Swift runtime of the toolchain that built them (ldd shows where): install
on a machine with the same toolchain, or build with --static-swift-stdlib yourself.
USAGE
}

die_usage() { echo "install.sh: $*" >&2; usage >&2; exit 2; }

prefix=/usr/local
unit_dir=""
configuration=release
build=1
while [[ $# -gt 0 ]]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --prefix) [[ $# -ge 2 ]] || die_usage "--prefix needs a value"; prefix="$2"; shift ;;
        --unit-dir) [[ $# -ge 2 ]] || die_usage "--unit-dir needs a value"; unit_dir="$2"; shift ;;
        --debug) configuration=debug ;;
        --no-build) build=0 ;;
        *) die_usage "unknown option '$1'" ;;
    esac
    shift
done
[[ $prefix == /* ]] || die_usage "--prefix must be an absolute path (the unit names the binary by it)"
unit_dir="${unit_dir:-$prefix/lib/systemd/system}"
destdir="${DESTDIR:-}"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
if [[ $configuration == release ]]; then scratch="${SCRATCH_PATH:-.build-release}"; else scratch="${SCRATCH_PATH:-.build}"; fi

if [[ $build -eq 1 ]]; then
    for product in chat-server chat-client; do
        swift build -c "$configuration" --scratch-path "$scratch" --product "$product"
    done
fi
# SwiftPM links <scratch>/<configuration> to the platform's build folder; asking `swift build
# --show-bin-path` instead would wait on the lock of a test run that calls this script.
bin="$scratch/$configuration"
for product in chat-server chat-client; do
    [[ -x $bin/$product ]] || { echo "install.sh: $bin/$product is not built (drop --no-build)" >&2; exit 1; }
done

doc="$destdir$prefix/share/doc/chat-server"
install -d "$destdir$prefix/bin" "$destdir$unit_dir" "$doc" "$doc/examples"
install -m 0755 "$bin/chat-server" "$bin/chat-client" "$destdir$prefix/bin/"
sed -e "s|/usr/local/bin/chat-server|$prefix/bin/chat-server|" \
    -e "s|/usr/local/share/doc/chat-server|$prefix/share/doc/chat-server|" \
    Scripts/systemd/chat-server.service > "$destdir$unit_dir/chat-server.service"
chmod 0644 "$destdir$unit_dir/chat-server.service"
# The guide and the documents beside it, so its links work where it is installed.
install -m 0644 docs/*.md "$doc/"
install -m 0644 Scripts/systemd/chat-server.env Scripts/systemd/chat-server.toml Scripts/prometheus/chat-server-alerts.yml "$doc/examples/"
echo "installed chat-server and chat-client in $destdir$prefix/bin, the unit in $destdir$unit_dir"
