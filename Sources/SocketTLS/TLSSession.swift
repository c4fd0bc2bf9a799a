import COpenSSL
import Glibc

/// One TLS connection as a state machine over memory: ciphertext that arrived goes in, plaintext
/// comes out; plaintext to send goes in, ciphertext to send comes out. It never touches a socket,
/// so whoever owns the socket keeps its non-blocking reads, gather writes, backpressure and
/// half-close, and the session can be tested, and fuzzed, with no network at all.
///
/// The owner's loop:
/// - Bytes arrived: `receive(_:)` them, then `readPlaintext(into:)` until it says
///   `.needsCiphertext` (or the owner stops reading; what is left waits inside the session).
/// - The peer's TCP stream ended: `receiveEndOfStream()`, then `readPlaintext(into:)` as above. It
///   reports the end as `.endOfInput` after a close_notify and as a `.truncated` error without one.
/// - Plaintext to send: once `state` is established, `encrypt(_:limit:)` takes chunks and says how
///   many bytes it consumed.
/// - After every call: send `pendingCiphertext` and `consumeCiphertext(_:)` what the socket took.
///   Handshake messages, alerts and key updates appear there too, not only encrypted data.
/// - Done sending: `closeOutput()` queues close_notify; send it, then shut down the socket's write side.
/// - A call threw: the state is `.failed`; send what `pendingCiphertext` holds (usually an alert
///   telling the peer why) if the socket takes it, then close the socket.
///
/// A client session's ClientHello is waiting in `pendingCiphertext` as soon as it is made.
///
/// Threading: not thread-safe. Use a session on one queue or thread at a time (a channel's queue);
/// OpenSSL's error queue is per thread, and every method reads it right after the call it checks.
public final class TLSSession {
    /// Where the connection is.
    public enum State: Sendable, Hashable {
        /// The handshake is under way; no application data flows yet.
        case handshaking
        /// Application data flows. `inputOpen` turns false when the peer's close_notify arrives,
        /// `outputOpen` when `closeOutput()` queued ours: TLS's half-close.
        case established(inputOpen: Bool, outputOpen: Bool)
        /// The connection failed for good with this error.
        case failed(TLSError)
    }

    /// What `receive` did to the handshake.
    public enum ReceiveOutcome: Sendable, Hashable {
        /// The handshake is still under way (send `pendingCiphertext`, wait for more).
        case handshaking
        /// This call completed the handshake: queued plaintext may be encrypted now.
        case handshakeCompleted
        /// The handshake was already complete; the bytes wait for `readPlaintext`.
        case established
    }

    /// What `readPlaintext` found.
    public enum PlaintextRead: Sendable, Hashable {
        /// This many plaintext bytes are at the start of the buffer.
        case bytes(Int)
        /// Nothing more until more ciphertext arrives.
        case needsCiphertext
        /// The peer sent close_notify: it will send nothing more (it may still read).
        case endOfInput
    }

    /// The state of the connection.
    public private(set) var state = State.handshaking
    /// The context the session was made from; the session keeps it alive.
    public let context: TLSContext
    /// The peer, as error messages name it.
    public let peerLabel: String
    /// The name a client verifies the server's certificate against (and sends as SNI when it is a
    /// host name); `nil` for a server, or for a client that verifies no name.
    public let serverName: String?
    /// For a client that trusts anything (`TLSTrust.insecureAcceptAnything`): what verification
    /// would have said about the server's certificate, so the client can warn about it. `nil` when
    /// the certificate would have passed, or verification is on.
    public private(set) var ignoredVerificationFailure: TLSError?

    /// The `SSL` object, owned by this session; it owns both BIOs.
    let ssl: OpaquePointer
    /// What the verify callback found, for the error message; set during the handshake.
    var verificationFailure: VerificationFailure?
    /// Set when this side refused a renegotiation request with a no_renegotiation alert.
    var refusedRenegotiation = false
    /// Whether any byte has arrived from the peer (a close before any byte reads differently).
    private(set) var receivedAnyBytes = false

    private let inbound = ByteQueue()
    private let outbound = ByteQueue()
    private var sniffer = RecordSniffer()

    /// The largest plaintext of one TLS record.
    static let maximumRecordPlaintext = 16_384

    init(context: TLSContext, serverName: String?, peerLabel: String) {
        guard let ssl = SSL_new(context.context) else { fatalError("SSL_new failed: out of memory") }
        self.ssl = ssl
        self.context = context
        self.peerLabel = peerLabel
        self.serverName = serverName
        SSL_set_bio(ssl, MemoryBIO.make(over: inbound), MemoryBIO.make(over: outbound))
        // The SSL object points back (unretained) to the session for the callbacks; the session
        // frees the SSL object in deinit, so the pointer never outlives it.
        SSL_set_ex_data(ssl, Self.exDataIndex, Unmanaged.passUnretained(self).toOpaque())
        SSL_set_info_callback(ssl) { ssl, event, value in
            TLSSession.noteInfo(ssl, event: event, value: value)
        }
        if context.configuration.isServer {
            SSL_set_accept_state(ssl)
        } else {
            SSL_set_connect_state(ssl)
        }
    }

    deinit {
        SSL_free(ssl)
    }

    /// Whether this is the server's side of the connection.
    public var isServer: Bool { context.configuration.isServer }

    /// Whether the handshake is complete and the connection has not failed.
    public var isEstablished: Bool {
        if case .established = state { return true }
        return false
    }

    // MARK: Ciphertext in

    /// Takes ciphertext that arrived from the peer (copying it) and moves the handshake on.
    ///
    /// After the handshake the bytes only wait here; `readPlaintext` decrypts them. Bytes after
    /// the peer's close_notify are dropped. Throws the failure that ended the connection; the
    /// state is then `.failed`.
    @discardableResult
    public func receive(_ ciphertext: UnsafeRawBufferPointer) throws(TLSError) -> ReceiveOutcome {
        switch state {
        case .failed(let error):
            throw error
        case .established(inputOpen: false, _):
            return .established
        case .established, .handshaking:
            break
        }
        guard !ciphertext.isEmpty else { return isEstablished ? .established : .handshaking }
        receivedAnyBytes = true
        if case .notTLS(let preview) = sniffer.inspect(ciphertext) {
            throw fail(notTLSError(preview))
        }
        inbound.append(ciphertext)
        guard case .handshaking = state else { return .established }
        return try advanceHandshake()
    }

    /// Notes that the peer's TCP stream ended (a read returned 0).
    ///
    /// During the handshake this fails the session (`.closedDuringHandshake`) unless the bytes
    /// already received complete it. After it, `readPlaintext` returns what is left, then
    /// `.endOfInput` if close_notify came first or throws `.truncated` if it did not.
    @discardableResult
    public func receiveEndOfStream() throws(TLSError) -> ReceiveOutcome {
        inbound.isFinished = true
        switch state {
        case .failed(let error):
            throw error
        case .established:
            return .established
        case .handshaking:
            return try advanceHandshake()
        }
    }

    // MARK: Plaintext out

    /// Decrypts into `buffer` as much as has arrived, up to `buffer.count` bytes.
    ///
    /// Call it until it returns `.needsCiphertext` or `.endOfInput`; stopping earlier is fine (the
    /// rest waits in the session: see `hasBufferedInput`). During the handshake it returns
    /// `.needsCiphertext`. May queue ciphertext of its own (a key update, a refused renegotiation).
    public func readPlaintext(into buffer: UnsafeMutableRawBufferPointer) throws(TLSError) -> PlaintextRead {
        switch state {
        case .failed(let error):
            throw error
        case .handshaking:
            return .needsCiphertext
        case .established(inputOpen: false, _):
            return .endOfInput
        case .established(inputOpen: true, let outputOpen):
            guard buffer.count > 0 else { return .needsCiphertext }
            OpenSSLErrorQueue.clear()
            var count = 0
            let result = SSL_read_ex(ssl, buffer.baseAddress, buffer.count, &count)
            if result == 1 { return .bytes(count) }
            let code = SSL_get_error(ssl, result)
            switch code {
            case SSL_ERROR_WANT_READ:
                return .needsCiphertext
            case SSL_ERROR_ZERO_RETURN:
                state = .established(inputOpen: false, outputOpen: outputOpen)
                return .endOfInput
            default:
                throw fail(diagnose(sslError: code))
            }
        }
    }

    /// Whether received bytes may still hold plaintext that `readPlaintext` has not returned (after
    /// its caller stopped early, e.g. to pause reading). Read them before waiting for the socket.
    public var hasBufferedInput: Bool {
        !inbound.isEmpty || SSL_has_pending(ssl) == 1
    }

    // MARK: Plaintext in, ciphertext out

    /// Encrypts plaintext from `chunks`, in order, up to `limit` bytes, and returns how many bytes
    /// it consumed: all of them are now ciphertext in `pendingCiphertext`.
    ///
    /// Small chunks are packed together into full records (16 KiB of plaintext each), so a queue
    /// of many small messages costs few records and one send; a chunk of a whole record or more
    /// is encrypted where it lies, without a copy. A chunk may be consumed in part: the count says
    /// where to start next time. Returns 0 while the handshake is under way. Count what is not yet
    /// consumed plus `pendingCiphertext.count` as the connection's outbound bytes for backpressure,
    /// and keep `limit` near what the socket takes in one go so ciphertext does not pile up here.
    public func encrypt<Chunks: Sequence<UnsafeRawBufferPointer>>(
        _ chunks: Chunks, limit: Int = .max
    ) throws(TLSError) -> Int {
        switch state {
        case .failed(let error):
            throw error
        case .handshaking:
            return 0
        case .established(_, outputOpen: false):
            preconditionFailure("encrypt after closeOutput()")
        case .established(_, outputOpen: true):
            break
        }
        return try withUnsafeTemporaryAllocation(byteCount: Self.maximumRecordPlaintext, alignment: 16) {
            staging throws(TLSError) -> Int in
            var consumed = 0
            var staged = 0
            for chunk in chunks {
                var offset = 0
                while offset < chunk.count, consumed + staged < limit {
                    let wanted = min(chunk.count - offset, limit - consumed - staged)
                    if staged == 0, wanted >= Self.maximumRecordPlaintext {
                        // A record's worth or more: encrypt it in place.
                        try writeRecords(UnsafeRawBufferPointer(rebasing: chunk[offset..<(offset + wanted)]))
                        consumed += wanted
                        offset += wanted
                        continue
                    }
                    let taken = min(wanted, Self.maximumRecordPlaintext - staged)
                    (staging.baseAddress! + staged).copyMemory(from: chunk.baseAddress! + offset, byteCount: taken)
                    staged += taken
                    offset += taken
                    if staged == Self.maximumRecordPlaintext {
                        try writeRecords(UnsafeRawBufferPointer(rebasing: staging[0..<staged]))
                        consumed += staged
                        staged = 0
                    }
                }
                if consumed + staged >= limit { break }
            }
            if staged > 0 {
                try writeRecords(UnsafeRawBufferPointer(rebasing: staging[0..<staged]))
                consumed += staged
            }
            return consumed
        }
    }

    private func writeRecords(_ plaintext: UnsafeRawBufferPointer) throws(TLSError) {
        OpenSSLErrorQueue.clear()
        var written = 0
        let result = SSL_write_ex(ssl, plaintext.baseAddress, plaintext.count, &written)
        // The memory BIO takes everything, so a write either succeeds whole or the connection failed.
        guard result == 1, written == plaintext.count else {
            throw fail(diagnose(sslError: SSL_get_error(ssl, result)))
        }
    }

    /// Ciphertext waiting to be sent, oldest first; valid until the next call on the session.
    public var pendingCiphertext: UnsafeRawBufferPointer { outbound.readable }

    /// Drops the first `count` bytes of `pendingCiphertext`: the socket has taken them.
    public func consumeCiphertext(_ count: Int) {
        outbound.consume(count)
    }

    /// Queues close_notify: this side will send nothing more (TLS's half-close). It can still
    /// receive until the peer's close_notify. Does nothing unless established with output open;
    /// a handshake in progress cannot be half-closed, so hold the request until it completes.
    public func closeOutput() {
        guard case .established(let inputOpen, outputOpen: true) = state else { return }
        OpenSSLErrorQueue.clear()
        // 0 means "sent, the peer's has not arrived yet", which is what a half-close is.
        _ = SSL_shutdown(ssl)
        OpenSSLErrorQueue.clear()
        state = .established(inputOpen: inputOpen, outputOpen: false)
    }

    /// The bytes of ciphertext buffers this session holds now (not counting OpenSSL's own record
    /// buffers, which it releases when idle). 0 for an idle connection.
    public var bufferedCiphertextCapacity: Int {
        inbound.allocatedBytes + outbound.allocatedBytes
    }

    // MARK: What was negotiated

    /// The protocol version agreed on, once established.
    public var negotiatedVersion: TLSVersion? {
        guard isEstablished else { return nil }
        return TLSVersion(rawValue: SSL_version(ssl))
    }

    /// The cipher suite agreed on, e.g. `TLS_AES_128_GCM_SHA256`, once established.
    public var cipherSuite: String? {
        guard isEstablished, let cipher = SSL_get_current_cipher(ssl), let name = SSL_CIPHER_get_name(cipher) else { return nil }
        return String(cString: name)
    }

    /// The certificate the peer presented (a client sees the server's), once received.
    public var peerCertificate: TLSCertificateSummary? {
        SSL_get0_peer_certificate(ssl).map { TLSCertificateSummary($0) }
    }

    /// `TLS 1.3, TLS_AES_128_GCM_SHA256`, or `handshaking` / `failed`.
    public var parametersDescription: String {
        switch state {
        case .handshaking: return "handshaking"
        case .failed: return "failed"
        case .established:
            return [negotiatedVersion?.description, cipherSuite].compactMap { $0 }.joined(separator: ", ")
        }
    }

    // MARK: Handshake

    /// Sets the name to verify and sends the ClientHello. Called once, by `TLSContext`.
    func startClientHandshake() throws(TLSError) {
        if let serverName {
            try verifyName(serverName)
        }
        _ = try advanceHandshake()
    }

    private func verifyName(_ name: String) throws(TLSError) {
        OpenSSLErrorQueue.clear()
        let parameters = SSL_get0_param(ssl)
        let accepted: Bool
        if let address = Self.ipAddressLiteral(name) {
            // An address is checked against the certificate's IP entries, and never sent as SNI
            // (RFC 6066 allows host names only).
            accepted = X509_VERIFY_PARAM_set1_ip_asc(parameters, address) == 1
        } else {
            SSL_set_hostflags(ssl, UInt32(X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS))
            accepted = SSL_set1_host(ssl, name) == 1 && sockettls_set_tlsext_host_name(ssl, name) == 1
        }
        guard accepted else {
            throw fail(TLSError(.other, operation: "TLS handshake with", target: peerLabel,
                                reason: "\"\(name)\" is neither a host name nor an IP address to verify the server's certificate against",
                                detail: OpenSSLErrorQueue.drainText()))
        }
    }

    /// `name` without brackets when it is an IPv4 or IPv6 literal, else `nil`.
    static func ipAddressLiteral(_ name: String) -> String? {
        var bare = name
        if bare.hasPrefix("["), bare.hasSuffix("]") { bare = String(bare.dropFirst().dropLast()) }
        var scratch = in6_addr()
        if inet_pton(AF_INET, bare, &scratch) == 1 || inet_pton(AF_INET6, bare, &scratch) == 1 { return bare }
        return nil
    }

    private func advanceHandshake() throws(TLSError) -> ReceiveOutcome {
        OpenSSLErrorQueue.clear()
        let result = SSL_do_handshake(ssl)
        if result == 1 {
            state = .established(inputOpen: true, outputOpen: true)
            if let verificationFailure, !isServer {
                // Reached only when verification is off: it would have failed the handshake otherwise.
                ignoredVerificationFailure = verificationError(verificationFailure)
            }
            return .handshakeCompleted
        }
        let code = SSL_get_error(ssl, result)
        if code == SSL_ERROR_WANT_READ { return .handshaking }
        throw fail(diagnose(sslError: code))
    }

    private func fail(_ error: TLSError) -> TLSError {
        state = .failed(error)
        return error
    }

    // MARK: Callbacks

    /// The SSL ex_data slot that points back to the session.
    static let exDataIndex = sockettls_SSL_get_ex_new_index()

    private static func session(of ssl: OpaquePointer?) -> TLSSession? {
        guard let ssl, let pointer = SSL_get_ex_data(ssl, exDataIndex) else { return nil }
        return Unmanaged<TLSSession>.fromOpaque(pointer).takeUnretainedValue()
    }

    /// OpenSSL's certificate verification callback: records the first failure with the certificate
    /// it concerns, for the error message, and leaves the verdict as OpenSSL reached it.
    static func recordVerification(_ preverified: Int32, _ store: OpaquePointer?) -> Int32 {
        guard preverified == 0, let store,
              let ssl = X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()),
              let session = session(of: OpaquePointer(ssl)), session.verificationFailure == nil
        else { return preverified }
        session.verificationFailure = VerificationFailure(
            code: X509_STORE_CTX_get_error(store),
            depth: X509_STORE_CTX_get_error_depth(store),
            certificate: X509_STORE_CTX_get_current_cert(store).map { TLSCertificateSummary($0) })
        return preverified
    }

    private static func noteInfo(_ ssl: OpaquePointer?, event: Int32, value: Int32) {
        // An alert this side sends: the value is level << 8 | description.
        guard event & SSL_CB_ALERT != 0, event & SSL_CB_WRITE != 0,
              UInt8(truncatingIfNeeded: value) == TLSAlert.noRenegotiation.code
        else { return }
        session(of: ssl)?.refusedRenegotiation = true
    }
}

/// A certificate verification failure as OpenSSL's callback saw it.
struct VerificationFailure {
    /// The `X509_V_ERR_…` code.
    let code: Int32
    /// 0 for the peer's own certificate, 1 for its issuer, and so on up the chain.
    let depth: Int32
    /// The certificate it concerns.
    let certificate: TLSCertificateSummary?
}
