#!/usr/bin/env bash
# Makes a local certificate authority and a server certificate it signs, for trying TLS on this
# machine: the server presents the certificate, clients trust the CA. Uses the openssl command.
set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: Scripts/dev-cert.sh [--out DIR] [--days N] [--name NAME]... [--new-ca]

Makes (in DIR, default .dev-certs/ at the top of the repository, which git ignores):
  ca.pem           the CA certificate; clients trust it:   chat-client --tls --tls-ca DIR/ca.pem
  ca-key.pem       the CA's private key (keep it; it signs the next server certificate)
  server.pem       the server's certificate:               chat-server --tls-cert DIR/server.pem
  server-key.pem   the server's private key (mode 600):    chat-server --tls-key DIR/server-key.pem

The server certificate names localhost, 127.0.0.1 and ::1, plus every --name (a host name or an
IP address). Keys are EC P-256, signatures SHA-256.

An existing CA in DIR is kept, so clients that already trust it keep working, and a fresh server
certificate is issued from it. A running chat-server picks the new one up on SIGHUP.

  --out DIR     where to write (created if missing)
  --days N      how long the server certificate is valid (default 90; the CA is valid 10 years)
  --name NAME   another name the server certificate covers (repeatable)
  --new-ca      make a new CA even if DIR has one (clients must then be given the new ca.pem)
  -h, --help    show this help

For testing only: anyone holding ca-key.pem can issue certificates this machine's clients trust.
USAGE
}

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$root/.dev-certs"
days=90
names=(localhost 127.0.0.1 ::1)
new_ca=0

while [[ $# -gt 0 ]]; do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --out) out="${2:?--out needs a directory}"; shift 2 ;;
        --days) days="${2:?--days needs a number}"; shift 2 ;;
        --name) names+=("${2:?--name needs a host name or address}"); shift 2 ;;
        --new-ca) new_ca=1; shift ;;
        *) echo "dev-cert.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
case "$days" in
    '' | *[!0-9]* | 0) echo "dev-cert.sh: --days must be a positive whole number, not '$days'" >&2; exit 2 ;;
esac
command -v openssl >/dev/null 2>&1 || { echo "dev-cert.sh: the openssl command is missing; run Scripts/bootstrap.sh" >&2; exit 1; }

mkdir -p "$out"
# Private keys are created readable by their owner only.
umask 077
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

new_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

if [[ $new_ca -eq 1 || ! -f "$out/ca.pem" || ! -f "$out/ca-key.pem" ]]; then
    new_key "$work/ca-key.pem"
    openssl req -x509 -new -key "$work/ca-key.pem" -sha256 -days 3650 \
        -subj "/CN=SwiftSocketChat dev CA ($(uname -n))" \
        -addext "basicConstraints=critical,CA:TRUE" \
        -addext "keyUsage=critical,keyCertSign,cRLSign" \
        -addext "subjectKeyIdentifier=hash" \
        -out "$work/ca.pem"
    mv "$work/ca-key.pem" "$out/ca-key.pem"
    # The CA certificate is public: readable by all, like any certificate.
    chmod 644 "$work/ca.pem"
    mv "$work/ca.pem" "$out/ca.pem"
    echo "made a new CA: $out/ca.pem"
else
    echo "kept the CA in $out/ca.pem"
fi

alt_names=""
for name in "${names[@]}"; do
    if [[ $name =~ ^[0-9.]+$ || $name == *:* ]]; then kind=IP; else kind=DNS; fi
    alt_names+="${alt_names:+,}$kind:$name"
done

new_key "$work/server-key.pem"
openssl req -new -key "$work/server-key.pem" -subj "/CN=${names[0]}" -out "$work/server.csr"
cat >"$work/server.ext" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=$alt_names
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid:always
EXT
openssl x509 -req -in "$work/server.csr" -CA "$out/ca.pem" -CAkey "$out/ca-key.pem" \
    -set_serial "0x$(openssl rand -hex 16)" -days "$days" -sha256 -extfile "$work/server.ext" \
    -out "$work/server.pem" 2>/dev/null
chmod 644 "$work/server.pem"
mv "$work/server-key.pem" "$out/server-key.pem"
mv "$work/server.pem" "$out/server.pem"

echo "made a server certificate for ${names[*]}, valid $days days: $out/server.pem (key: $out/server-key.pem)"
