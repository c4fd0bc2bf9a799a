import COpenSSL

/// A TLS protocol version this module speaks. Older versions are not offered and not accepted.
public enum TLSVersion: Int32, Sendable, Hashable, Comparable, CustomStringConvertible {
    /// TLS 1.2 (RFC 5246).
    case v1_2 = 0x0303
    /// TLS 1.3 (RFC 8446).
    case v1_3 = 0x0304

    /// Orders versions oldest first.
    public static func < (lhs: TLSVersion, rhs: TLSVersion) -> Bool { lhs.rawValue < rhs.rawValue }

    /// `TLS 1.2` or `TLS 1.3`.
    public var description: String { self == .v1_2 ? "TLS 1.2" : "TLS 1.3" }
}

/// Which certificates a client accepts from servers.
public enum TLSTrust: Sendable, Hashable {
    /// The system's CA store (Debian: `/etc/ssl/certs`, from the `ca-certificates` package).
    case systemDefault
    /// Only the CA certificates in this PEM file (one or more), e.g. the CA `Scripts/dev-cert.sh` made.
    case certificateAuthorities(file: String)
    /// No verification at all: any certificate, any name. The connection is encrypted but not
    /// authenticated, so anyone in the path can read it. For testing only, and say so loudly.
    case insecureAcceptAnything
}

/// Everything about TLS that is the same for every connection of one side: which side it is, its
/// certificate or its trust, and the versions it speaks. `TLSContext` loads it.
///
/// Settings that differ per connection (the host name a client verifies and sends as SNI) are
/// given when a session is made.
public struct TLSConfiguration: Sendable, Hashable {
    /// The side of the handshake and what it needs.
    public enum Role: Sendable, Hashable {
        /// A server presenting the certificate chain in `certificateChainFile` (PEM, the server's
        /// certificate first, then any intermediates) with the key in `privateKeyFile` (PEM,
        /// unencrypted). Both files are read again by every `TLSContext` made from this value,
        /// which is how a server reloads them.
        case server(certificateChainFile: String, privateKeyFile: String)
        /// A client verifying servers against `trust`.
        case client(trust: TLSTrust)
    }

    /// The side of the handshake and what it needs.
    public var role: Role
    /// The oldest version offered and accepted; TLS 1.2 unless raised.
    public var minimumVersion: TLSVersion
    /// The newest version offered and accepted; TLS 1.3 unless lowered.
    public var maximumVersion: TLSVersion

    /// A configuration for `role` speaking `minimumVersion` through `maximumVersion`.
    public init(role: Role, minimumVersion: TLSVersion = .v1_2, maximumVersion: TLSVersion = .v1_3) {
        precondition(minimumVersion <= maximumVersion, "TLS minimum version above the maximum")
        self.role = role
        self.minimumVersion = minimumVersion
        self.maximumVersion = maximumVersion
    }

    /// A server with the given PEM certificate chain and private key files.
    public static func server(certificateChainFile: String, privateKeyFile: String) -> TLSConfiguration {
        TLSConfiguration(role: .server(certificateChainFile: certificateChainFile, privateKeyFile: privateKeyFile))
    }

    /// A client that verifies servers against `trust` (the system's CA store unless told otherwise).
    public static func client(trust: TLSTrust = .systemDefault) -> TLSConfiguration {
        TLSConfiguration(role: .client(trust: trust))
    }

    /// Whether this is a server's configuration.
    public var isServer: Bool {
        if case .server = role { return true }
        return false
    }
}
