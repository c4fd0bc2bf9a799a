import COpenSSL
import Glibc

/// A loaded `TLSConfiguration`: OpenSSL's `SSL_CTX` with the certificate and key (server) or the
/// trusted CAs (client) in memory, ready to make one `TLSSession` per connection.
///
/// Loading reads the files once; a context never changes afterwards. To reload a server's
/// certificate and key (on SIGHUP), make a new context from the same configuration and use it for
/// new connections: sessions made from the old one keep it alive and carry on undisturbed, and if
/// the new files are bad the error says why and the old context is still there to use.
///
/// Thread safety: immutable after `init`; OpenSSL locks the `SSL_CTX` internally when sessions are
/// made from it on several threads at once.
public final class TLSContext: @unchecked Sendable {
    /// The configuration this context was loaded from.
    public let configuration: TLSConfiguration
    /// A server's own certificate (the first of its chain); `nil` for a client.
    public let certificate: TLSCertificateSummary?
    /// Things an operator should fix that do not stop the context from working, e.g. a certificate
    /// that expires within 30 days or a private key other users may read. Print them at start-up.
    public let warnings: [String]

    /// The `SSL_CTX`, owned by this object.
    let context: OpaquePointer

    /// Loads `configuration`: reads and checks the certificate chain and key, or the CA file.
    /// Throws a `TLSError` that names the file and says what is wrong with it.
    public init(_ configuration: TLSConfiguration) throws(TLSError) {
        OpenSSLErrorQueue.clear()
        let method = configuration.isServer ? TLS_server_method() : TLS_client_method()
        guard let context = SSL_CTX_new(method) else {
            throw TLSError(.other, operation: "create TLS context", reason: "OpenSSL could not create one",
                           detail: OpenSSLErrorQueue.drainText())
        }
        self.configuration = configuration
        self.context = context
        var warnings: [String] = []
        do throws(TLSError) {
            try Self.applyCommonSettings(context, configuration)
            switch configuration.role {
            case .server(let chainFile, let keyFile):
                let leaf = try Self.loadServerIdentity(context, chainFile: chainFile, keyFile: keyFile)
                certificate = leaf
                warnings += Self.certificateWarnings(leaf, chainFile: chainFile) + Self.keyFileWarnings(keyFile)
            case .client(let trust):
                try Self.applyTrust(context, trust)
                certificate = nil
            }
        } catch {
            SSL_CTX_free(context)
            throw error
        }
        self.warnings = warnings
    }

    deinit {
        SSL_CTX_free(context)
    }

    /// A session for one connection a server accepted. `peerLabel` (the client's address) names the
    /// peer in error messages.
    public func makeServerSession(peerLabel: String) -> TLSSession {
        precondition(configuration.isServer, "makeServerSession on a client context")
        return TLSSession(context: self, serverName: nil, peerLabel: peerLabel)
    }

    /// A session for one connection to `serverName`, whose ClientHello already waits in
    /// `pendingCiphertext` when this returns.
    ///
    /// - Parameter serverName: the host name or IP address the server's certificate must name,
    ///   normally the host connected to; a host name is also sent as SNI. `nil` verifies the
    ///   certificate chain but no name (Apple's `kCFStreamSSLPeerName` set to null).
    /// - Parameter peerLabel: the peer in error messages, e.g. `localhost:7000`.
    public func makeClientSession(serverName: String?, peerLabel: String) throws(TLSError) -> TLSSession {
        precondition(!configuration.isServer, "makeClientSession on a server context")
        let session = TLSSession(context: self, serverName: serverName, peerLabel: peerLabel)
        try session.startClientHandshake()
        return session
    }

    // MARK: Loading

    // TLS 1.2 suites with forward secrecy and authenticated encryption only (TLS 1.3's are all
    // that already). ECDSA or RSA certificates both work.
    private static let tls12CipherList = "ECDHE+AESGCM:ECDHE+CHACHA20"

    private static func applyCommonSettings(_ context: OpaquePointer, _ configuration: TLSConfiguration) throws(TLSError) {
        guard sockettls_CTX_set_min_proto_version(context, configuration.minimumVersion.rawValue) == 1,
              sockettls_CTX_set_max_proto_version(context, configuration.maximumVersion.rawValue) == 1,
              SSL_CTX_set_cipher_list(context, tls12CipherList) == 1
        else {
            throw TLSError(.other, operation: "configure TLS", reason: "OpenSSL refused the version or cipher settings",
                           detail: OpenSSLErrorQueue.drainText())
        }
        // Renegotiation (TLS 1.2 only) is refused both ways: a peer asking for it gets a
        // no_renegotiation warning alert and the connection goes on as it was. It has a history of
        // attacks (CVE-2009-3555, renegotiation floods), and nothing here needs it; TLS 1.3 has none.
        SSL_CTX_set_options(context, sockettls_OP_NO_RENEGOTIATION())
        // Idle connections hand their 16 KiB+ record buffers back to the allocator.
        _ = sockettls_CTX_set_mode(context, Int(SSL_MODE_RELEASE_BUFFERS))
        SSL_CTX_set_default_passwd_cb(context, refusePassphrase)
    }

    private static func loadServerIdentity(
        _ context: OpaquePointer, chainFile: String, keyFile: String
    ) throws(TLSError) -> TLSCertificateSummary {
        let chain = try PEMFile(path: chainFile, purpose: "certificate chain", operation: "load certificate chain from")
        let leaf = try chain.withBIO { bio throws(TLSError) -> TLSCertificateSummary in
            OpenSSLErrorQueue.clear()
            guard let leaf = PEM_read_bio_X509_AUX(bio, nil, refusePassphrase, nil) else {
                throw TLSError(.invalidCertificateFile, operation: "load certificate chain from", target: chainFile,
                               reason: chain.explainMissing("certificate"), detail: OpenSSLErrorQueue.drainText())
            }
            defer { X509_free(leaf) }
            guard SSL_CTX_use_certificate(context, leaf) == 1 else {
                throw TLSError(.invalidCertificateFile, operation: "load certificate chain from", target: chainFile,
                               reason: "OpenSSL refused the certificate (a key too weak for its security level? use RSA 2048+ or EC P-256)",
                               detail: OpenSSLErrorQueue.drainText())
            }
            // The rest of the file is the chain up to (not necessarily including) the root.
            while let intermediate = PEM_read_bio_X509(bio, nil, refusePassphrase, nil) {
                guard sockettls_CTX_add0_chain_cert(context, intermediate) == 1 else {
                    X509_free(intermediate)
                    throw TLSError(.invalidCertificateFile, operation: "load certificate chain from", target: chainFile,
                                   reason: "OpenSSL refused an intermediate certificate of the chain",
                                   detail: OpenSSLErrorQueue.drainText())
                }
            }
            // The loop ends on "no start line" at the end of the file: expected, not an error.
            OpenSSLErrorQueue.clear()
            return TLSCertificateSummary(leaf)
        }

        let key = try PEMFile(path: keyFile, purpose: "private key", operation: "load private key from")
        try key.withBIO { bio throws(TLSError) in
            OpenSSLErrorQueue.clear()
            guard let privateKey = PEM_read_bio_PrivateKey(bio, nil, refusePassphrase, nil) else {
                let detail = OpenSSLErrorQueue.drainText()
                if key.contains("ENCRYPTED") {
                    throw TLSError(.encryptedPrivateKey, operation: "load private key from", target: keyFile,
                                   reason: "the key is protected by a passphrase, and a server cannot ask for one; write an "
                                       + "unprotected copy with `openssl pkey -in \(keyFile) -out KEY.pem` and protect that "
                                       + "file with permissions (chmod 600) instead", detail: detail)
                }
                throw TLSError(.invalidPrivateKeyFile, operation: "load private key from", target: keyFile,
                               reason: key.explainMissing("private key"), detail: detail)
            }
            defer { EVP_PKEY_free(privateKey) }
            guard SSL_CTX_use_PrivateKey(context, privateKey) == 1, SSL_CTX_check_private_key(context) == 1 else {
                throw TLSError(.keyMismatch, operation: "load private key from", target: keyFile,
                               reason: "this key does not belong to the certificate in \(chainFile) (their public keys differ); "
                                   + "use the key the certificate was issued for",
                               detail: OpenSSLErrorQueue.drainText())
            }
        }
        // A server sends no session tickets and keeps no session cache: chat connections are long
        // lived, and tickets would cost every handshake two extra messages. See docs/TLS.md.
        _ = sockettls_CTX_set_session_cache_mode(context, Int(SSL_SESS_CACHE_OFF))
        SSL_CTX_set_num_tickets(context, 0)
        return leaf
    }

    private static func applyTrust(_ context: OpaquePointer, _ trust: TLSTrust) throws(TLSError) {
        switch trust {
        case .systemDefault:
            guard SSL_CTX_set_default_verify_paths(context) == 1 else {
                throw TLSError(.invalidCAFile, operation: "load the system's CA certificates", reason:
                    "OpenSSL could not read the system's CA store (install the ca-certificates package)",
                    detail: OpenSSLErrorQueue.drainText())
            }
        case .certificateAuthorities(let file):
            let bundle = try PEMFile(path: file, purpose: "CA certificates", operation: "load CA certificates from")
            let store = SSL_CTX_get_cert_store(context)
            let added = try bundle.withBIO { bio throws(TLSError) -> Int in
                var added = 0
                OpenSSLErrorQueue.clear()
                while let certificate = PEM_read_bio_X509(bio, nil, refusePassphrase, nil) {
                    defer { X509_free(certificate) }
                    if X509_STORE_add_cert(store, certificate) == 1 { added += 1 }
                }
                OpenSSLErrorQueue.clear()
                return added
            }
            guard added > 0 else {
                throw TLSError(.invalidCAFile, operation: "load CA certificates from", target: file,
                               reason: bundle.explainMissing("certificate"))
            }
        case .insecureAcceptAnything:
            break
        }
        let mode = trust == .insecureAcceptAnything ? SSL_VERIFY_NONE : SSL_VERIFY_PEER
        // The callback runs in insecure mode too: it records what verification would have said, so
        // the client can print it in its warning.
        SSL_CTX_set_verify(context, mode) { TLSSession.recordVerification($0, $1) }
    }

    // MARK: Warnings

    private static let expiryWarningSeconds: Int64 = 30 * 86_400

    private static func certificateWarnings(_ leaf: TLSCertificateSummary, chainFile: String) -> [String] {
        var warnings: [String] = []
        if leaf.secondsUntilExpiry < 0 {
            warnings.append("the certificate in \(chainFile) (\(leaf.subject)) expired at \(leaf.validUntil); "
                + "every client will refuse it until it is renewed")
        } else if leaf.secondsUntilExpiry < expiryWarningSeconds {
            warnings.append("the certificate in \(chainFile) (\(leaf.subject)) expires at \(leaf.validUntil), "
                + "in \((leaf.secondsUntilExpiry + 86_399) / 86_400) days; renew it")
        }
        if leaf.names.isEmpty {
            warnings.append("the certificate in \(chainFile) (\(leaf.subject)) has no subjectAltName; clients check "
                + "host names against subjectAltName only and will refuse it")
        }
        return warnings
    }

    private static func keyFileWarnings(_ keyFile: String) -> [String] {
        var status = stat()
        guard stat(keyFile, &status) == 0, status.st_mode & 0o077 != 0 else { return [] }
        let mode = String(status.st_mode & 0o777, radix: 8)
        return ["the private key \(keyFile) may be read by other users (mode \(mode)); `chmod 600 \(keyFile)`"]
    }
}
