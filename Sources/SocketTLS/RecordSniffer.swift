/// Decides from a peer's first bytes whether it speaks TLS at all.
///
/// The first record either side of a TLS 1.2/1.3 connection sends is a handshake record (a
/// ClientHello, or the server's reply) or an alert: content type 22 or 21, then the major version 3.
/// A plain-text client on a TLS port ("hello", `GET /`, a chat frame), or a plain-text server
/// answering a TLS client, fails that test on its first or second byte. OpenSSL would call it a
/// "wrong version number" or "packet length too long"; saying "this is not TLS" and showing the
/// bytes tells an operator what actually happened.
struct RecordSniffer {
    /// What the bytes so far say.
    enum Verdict: Equatable {
        /// Too few bytes yet to tell.
        case undecided
        /// A plausible TLS record header.
        case tls
        /// Not TLS; `preview` shows the first bytes (as many as were in hand, up to 16).
        case notTLS(preview: [UInt8])
    }

    private static let handshakeRecord: UInt8 = 22
    private static let alertRecord: UInt8 = 21
    private static let majorVersion: UInt8 = 3
    private static let previewLength = 16

    private var seen: [UInt8] = []
    /// The verdict so far; once `.tls` or `.notTLS` it never changes.
    private(set) var verdict = Verdict.undecided

    /// Looks at the next bytes the peer sent and returns the verdict so far.
    mutating func inspect(_ bytes: UnsafeRawBufferPointer) -> Verdict {
        guard verdict == .undecided, !bytes.isEmpty else { return verdict }
        seen += bytes.prefix(Self.previewLength - seen.count)
        if seen[0] != Self.handshakeRecord && seen[0] != Self.alertRecord {
            verdict = .notTLS(preview: seen)
        } else if seen.count >= 2 {
            verdict = seen[1] == Self.majorVersion ? .tls : .notTLS(preview: seen)
        }
        if verdict == .tls { seen = [] }
        return verdict
    }

    /// `47 45 54 20 2f 20 48 54 ("GET / HT")`: the bytes in hex, then as text with anything
    /// unprintable shown as a dot.
    static func describe(_ preview: [UInt8]) -> String {
        let hex = preview.map { byte in
            let digits = String(byte, radix: 16)
            return digits.count == 1 ? "0" + digits : digits
        }.joined(separator: " ")
        let text = String(preview.map { (0x20..<0x7F).contains($0) ? Character(UnicodeScalar($0)) : "." })
        return "\(hex) (\"\(text)\")"
    }

    /// Whether the bytes start like an HTTP request, which deserves its own hint.
    static func looksLikeHTTP(_ preview: [UInt8]) -> Bool {
        let methods = ["GET ", "POST", "HEAD", "PUT ", "OPTI", "DELE", "CONN", "PATC"]
        return methods.contains { preview.starts(with: Array($0.utf8)) }
    }
}
