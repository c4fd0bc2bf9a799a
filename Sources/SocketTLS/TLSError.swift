/// Why a TLS connection or a TLS configuration failed, in words an operator can act on.
///
/// `description` reads like
/// `TLS handshake with 127.0.0.1:7000 failed: the server's certificate (CN=localhost) expired at
/// 2024-05-01 10:00:00 UTC; …`. `kind` says which class of failure it is, for code that reacts
/// differently to each; `detail` carries OpenSSL's own error text for bug reports.
public struct TLSError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The class of failure.
    public enum Kind: Sendable, Hashable {
        // This side checked the peer's certificate and refused it.
        /// The peer's certificate (or one in its chain) is past its expiry date.
        case certificateExpired
        /// The peer's certificate (or one in its chain) is not valid yet.
        case certificateNotYetValid
        /// The peer's certificate is valid, but not for the host name or address connected to.
        case hostnameMismatch
        /// The peer's certificate is not signed by a CA this side trusts (or is self-signed).
        case untrustedCertificate
        /// The peer's certificate failed verification for another reason (bad signature, wrong usage, …).
        case invalidCertificate

        // The peer refused this side.
        /// The peer refused this side's certificate, with this alert (`unknown_ca`, `bad_certificate`, …).
        case peerRejectedCertificate(TLSAlert)
        /// The peer ended the handshake or the connection with this fatal alert.
        case receivedAlert(TLSAlert)

        // The conversation itself.
        /// The peer's first bytes are not TLS: it speaks plain text to a TLS port, or is no TLS server.
        case notTLS
        /// The two sides have no TLS version in common (this side speaks 1.2 and 1.3 only).
        case protocolVersion
        /// The two sides have no cipher suite or signature algorithm in common.
        case noSharedCipher
        /// The peer closed the connection before the handshake finished.
        case closedDuringHandshake
        /// The peer closed its TCP stream without TLS's close_notify, so data may have been cut off.
        case truncated
        /// The peer's records are malformed or fail their integrity check: corrupted or forged bytes.
        case malformedRecords
        /// The peer asked to renegotiate, which this side refuses, and then gave up on the connection.
        case renegotiationRefused

        // Local files and settings.
        /// A certificate, key or CA file could not be read (missing, no permission, …).
        case unreadableFile
        /// The certificate file holds no usable PEM certificate chain.
        case invalidCertificateFile
        /// The key file holds no usable PEM private key.
        case invalidPrivateKeyFile
        /// The private key is protected by a passphrase, and there is no one to ask for it.
        case encryptedPrivateKey
        /// The private key does not belong to the certificate.
        case keyMismatch
        /// The CA file holds no usable PEM certificate.
        case invalidCAFile
        /// A setting OpenSSL refused, or a failure outside the classes above.
        case other
    }

    /// The class of failure.
    public let kind: Kind
    /// What was being done, e.g. `"TLS handshake with"`, `"load certificate chain"`.
    public let operation: String
    /// What it was done to: the peer's label or a file path; empty when nothing useful can be named.
    public let target: String
    /// What went wrong and what to do about it, in full sentences.
    public let reason: String
    /// OpenSSL's own wording (`error:0A000086:SSL routines::certificate verify failed`), or empty.
    public let detail: String

    /// Creates an error; `reason` should say what to do, not only what happened.
    public init(_ kind: Kind, operation: String, target: String = "", reason: String, detail: String = "") {
        self.kind = kind
        self.operation = operation
        self.target = target
        self.reason = reason
        self.detail = detail
    }

    /// The whole message: `TLS handshake with 127.0.0.1:7000 failed: <reason> [OpenSSL: <detail>]`.
    public var description: String {
        let subject = target.isEmpty ? operation : "\(operation) \(target)"
        let suffix = detail.isEmpty ? "" : " [OpenSSL: \(detail)]"
        return "\(subject) failed: \(reason)\(suffix)"
    }
}

/// A TLS alert description (RFC 8446 §6): what a peer says when it ends a connection or refuses a step.
public struct TLSAlert: Sendable, Hashable, CustomStringConvertible {
    /// The alert's number on the wire.
    public let code: UInt8

    /// Wraps an alert number.
    public init(_ code: UInt8) { self.code = code }

    /// handshake_failure (40): no acceptable set of parameters, or another reason the peer keeps to itself.
    public static let handshakeFailure = TLSAlert(40)
    /// bad_certificate (42).
    public static let badCertificate = TLSAlert(42)
    /// certificate_expired (45).
    public static let certificateExpired = TLSAlert(45)
    /// unknown_ca (48).
    public static let unknownCA = TLSAlert(48)
    /// protocol_version (70).
    public static let protocolVersion = TLSAlert(70)
    /// no_renegotiation (100).
    public static let noRenegotiation = TLSAlert(100)

    /// Whether the alert says the peer refused a certificate.
    public var rejectsCertificate: Bool { (42...46).contains(code) || code == 48 }

    /// The alert's name as RFC 8446 spells it, e.g. `unknown_ca`.
    public var description: String {
        switch code {
        case 0: return "close_notify"
        case 10: return "unexpected_message"
        case 20: return "bad_record_mac"
        case 22: return "record_overflow"
        case 40: return "handshake_failure"
        case 42: return "bad_certificate"
        case 43: return "unsupported_certificate"
        case 44: return "certificate_revoked"
        case 45: return "certificate_expired"
        case 46: return "certificate_unknown"
        case 47: return "illegal_parameter"
        case 48: return "unknown_ca"
        case 49: return "access_denied"
        case 50: return "decode_error"
        case 51: return "decrypt_error"
        case 70: return "protocol_version"
        case 71: return "insufficient_security"
        case 80: return "internal_error"
        case 86: return "inappropriate_fallback"
        case 90: return "user_canceled"
        case 100: return "no_renegotiation"
        case 109: return "missing_extension"
        case 110: return "unsupported_extension"
        case 112: return "unrecognized_name"
        case 116: return "certificate_required"
        case 120: return "no_application_protocol"
        default: return "alert \(code)"
        }
    }
}
