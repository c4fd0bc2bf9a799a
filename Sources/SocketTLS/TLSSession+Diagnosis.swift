import COpenSSL

// MARK: - Turning OpenSSL's failure report into a TLSError an operator can act on
//
// OpenSSL reports a failed handshake as an SSL_get_error code, a queue of (library, reason) codes
// and, for certificates, the verify callback's findings. The same cause looks different from each
// side: an unknown CA is a verification failure on the client and an `unknown_ca` alert on the
// server. Each branch below names one cause, says it from this side's point of view and says what
// to do. The order matters: the most specific evidence wins.

extension TLSSession {
    private var peerName: String { isServer ? "the client" : "the server" }
    private var selfName: String { isServer ? "this server" : "this client" }

    private var operation: String {
        if case .handshaking = state { return "TLS handshake with" }
        return "TLS connection with"
    }

    private var acceptedVersions: String {
        let configuration = context.configuration
        if configuration.minimumVersion == configuration.maximumVersion { return "\(configuration.minimumVersion) only" }
        return "\(configuration.minimumVersion) and \(configuration.maximumVersion.description.dropFirst(4))"
    }

    /// The error for a call that failed with `SSL_get_error` code `sslError`; drains OpenSSL's error queue.
    func diagnose(sslError: Int32) -> TLSError {
        let entries = OpenSSLErrorQueue.drain()
        let detail = entries.map(\.text).joined(separator: "; ")
        var handshaking = false
        if case .handshaking = state { handshaking = true }

        if let verificationFailure, !isServer, entries.contains(where: { $0.reason == SSL_R_CERTIFICATE_VERIFY_FAILED }) {
            return verificationError(verificationFailure, detail: detail)
        }
        for entry in entries {
            if let alert = entry.receivedAlert {
                return alertError(alert, handshaking: handshaking, detail: detail)
            }
            guard entry.library == ERR_LIB_SSL else { continue }
            switch entry.reason {
            case SSL_R_UNSUPPORTED_PROTOCOL, SSL_R_NO_PROTOCOLS_AVAILABLE, SSL_R_VERSION_TOO_LOW,
                 SSL_R_VERSION_TOO_HIGH, SSL_R_WRONG_SSL_VERSION, SSL_R_UNKNOWN_SSL_VERSION,
                 SSL_R_UNSUPPORTED_SSL_VERSION, SSL_R_BAD_PROTOCOL_VERSION_NUMBER:
                return versionError(detail: detail)
            case SSL_R_NO_SHARED_CIPHER, SSL_R_NO_SHARED_SIGNATURE_ALGORITHMS, SSL_R_NO_SUITABLE_KEY_SHARE,
                 SSL_R_NO_SHARED_GROUPS, SSL_R_NO_SUITABLE_SIGNATURE_ALGORITHM:
                return TLSError(.noSharedCipher, operation: operation, target: peerLabel, reason:
                    "\(peerName) and \(selfName) have no cipher suite, key exchange group or signature algorithm in common "
                    + "(\(selfName) accepts only forward-secret AEAD suites); \(peerName) is probably very old or restricted",
                    detail: detail)
            case SSL_R_UNEXPECTED_EOF_WHILE_READING:
                return endOfStreamError(handshaking: handshaking, detail: detail)
            case SSL_R_HTTP_REQUEST, SSL_R_HTTPS_PROXY_REQUEST:
                return notTLSError(Array("GET ".utf8), detail: detail)
            default:
                continue
            }
        }
        if entries.isEmpty, sslError == SSL_ERROR_SYSCALL || sslError == SSL_ERROR_ZERO_RETURN {
            return endOfStreamError(handshaking: handshaking, detail: detail)
        }
        if handshaking {
            let what = entries.last.map { OpenSSLErrorQueue.reasonText($0) } ?? "error \(sslError)"
            return TLSError(.other, operation: operation, target: peerLabel,
                            reason: "the handshake failed: \(what)", detail: detail)
        }
        return TLSError(.malformedRecords, operation: operation, target: peerLabel, reason:
            "\(peerName) sent records that are malformed or fail their integrity check, so the data was corrupted "
            + "or forged on the way (a broken middlebox, or an attack); the connection cannot go on",
            detail: detail)
    }

    /// The error for bytes that are not TLS at all.
    func notTLSError(_ preview: [UInt8], detail: String = "") -> TLSError {
        let bytes = RecordSniffer.describe(preview)
        let reason: String
        if isServer {
            let http = RecordSniffer.looksLikeHTTP(preview) ? " (an HTTP request)" : ""
            reason = "the client sent bytes that are not TLS: \(bytes)\(http); it is speaking plain text to this TLS port "
                + "(it should connect with TLS, or to the plain-text port)"
        } else {
            reason = "the server answered with bytes that are not TLS: \(bytes); it does not speak TLS on this port "
                + "(connect without TLS, or to its TLS port)"
        }
        return TLSError(.notTLS, operation: "TLS handshake with", target: peerLabel, reason: reason, detail: detail)
    }

    /// The error for this side's refusal of the peer's certificate.
    func verificationError(_ failure: VerificationFailure, detail: String = "") -> TLSError {
        let certificate = failure.certificate
        let subject = certificate?.subject ?? "unknown subject"
        let what = failure.depth == 0
            ? "the server's certificate (\(subject))"
            : "the certificate of \(subject) in the server's chain"
        let operation = "TLS handshake with"
        switch failure.code {
        case X509_V_ERR_CERT_HAS_EXPIRED:
            return TLSError(.certificateExpired, operation: operation, target: peerLabel, reason:
                "\(what) expired at \(certificate?.validUntil ?? "an unknown date"); the server must renew it "
                + "(if it should still be valid, check this machine's clock)", detail: detail)
        case X509_V_ERR_CERT_NOT_YET_VALID:
            return TLSError(.certificateNotYetValid, operation: operation, target: peerLabel, reason:
                "\(what) is not valid before \(certificate?.validFrom ?? "an unknown date"); check the clocks of this "
                + "machine and of the one that issued it", detail: detail)
        case X509_V_ERR_HOSTNAME_MISMATCH, X509_V_ERR_IP_ADDRESS_MISMATCH:
            let names = certificate?.names ?? []
            let covers = names.isEmpty ? "names no host or address" : "is for \(names.joined(separator: ", "))"
            let connected = serverName ?? "?"
            return TLSError(.hostnameMismatch, operation: operation, target: peerLabel, reason:
                "the server's certificate (\(subject)) \(covers), not for \(connected); connect using a name it "
                + "covers, or issue a certificate with \(connected) in its subjectAltName", detail: detail)
        case X509_V_ERR_DEPTH_ZERO_SELF_SIGNED_CERT:
            return TLSError(.untrustedCertificate, operation: operation, target: peerLabel, reason:
                "the server's certificate (\(subject)) is self-signed and not trusted here; to trust it, give this "
                + "client the certificate itself as its CA file", detail: detail)
        case X509_V_ERR_SELF_SIGNED_CERT_IN_CHAIN:
            return TLSError(.untrustedCertificate, operation: operation, target: peerLabel, reason:
                "the server's chain ends in a CA (\(subject)) this client does not trust; give this client that CA's "
                + "certificate as its CA file, or add it to the system's store", detail: detail)
        case X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT_LOCALLY, X509_V_ERR_UNABLE_TO_GET_ISSUER_CERT,
             X509_V_ERR_UNABLE_TO_VERIFY_LEAF_SIGNATURE, X509_V_ERR_CERT_UNTRUSTED:
            let issuer = certificate?.issuer ?? "an unknown issuer"
            return TLSError(.untrustedCertificate, operation: operation, target: peerLabel, reason:
                "\(what) is issued by \(issuer), a CA this client does not trust; give this client that CA's "
                + "certificate as its CA file, or add it to the system's store "
                + "(/usr/local/share/ca-certificates, then update-ca-certificates)", detail: detail)
        default:
            let text = X509_verify_cert_error_string(Int(failure.code)).map { String(cString: $0) } ?? "error \(failure.code)"
            return TLSError(.invalidCertificate, operation: operation, target: peerLabel, reason:
                "\(what) failed verification: \(text)", detail: detail)
        }
    }

    private func alertError(_ alert: TLSAlert, handshaking: Bool, detail: String) -> TLSError {
        if alert == .protocolVersion {
            return TLSError(.protocolVersion, operation: operation, target: peerLabel, reason:
                "\(peerName) refused the TLS versions \(selfName) offers (\(acceptedVersions)) with alert protocol_version; "
                + "\(peerName) needs a version \(selfName) does not speak", detail: detail)
        }
        if refusedRenegotiation {
            return TLSError(.renegotiationRefused, operation: operation, target: peerLabel, reason:
                "\(peerName) asked to renegotiate the TLS session, which \(selfName) refuses (renegotiation is off: "
                + "nothing here needs it and it has a history of attacks), and then ended the connection with alert \(alert)",
                detail: detail)
        }
        if alert.rejectsCertificate {
            let advice: String
            switch alert {
            case .unknownCA:
                advice = "\(peerName) does not trust the CA that signed \(selfName)'s certificate; give \(peerName) "
                    + "that CA's certificate, or use a certificate from a CA it trusts"
            case .certificateExpired:
                advice = "\(peerName) says \(selfName)'s certificate has expired; renew it"
            default:
                advice = "\(peerName) rejected \(selfName)'s certificate; clients say this when it is self-signed "
                    + "or does not name the host they connected to"
            }
            return TLSError(.peerRejectedCertificate(alert), operation: operation, target: peerLabel,
                            reason: "\(advice) [alert \(alert)]", detail: detail)
        }
        let stage = handshaking ? "handshake" : "connection"
        var reason = "\(peerName) ended the \(stage) with alert \(alert)"
        switch alert {
        case .handshakeFailure:
            reason += " (no parameters in common, or a refusal it does not explain)"
        case TLSAlert(112):
            reason += " (the server does not serve the host name this client asked for)"
        default:
            break
        }
        return TLSError(.receivedAlert(alert), operation: operation, target: peerLabel, reason: reason, detail: detail)
    }

    private func versionError(detail: String) -> TLSError {
        let offered: String
        if isServer {
            let clientVersion = SSL_client_version(ssl)
            offered = clientVersion < TLSVersion.v1_2.rawValue
                ? "the client offered only versions older than TLS 1.2"
                : "the client offered no TLS version this server accepts"
        } else {
            offered = "the server chose a TLS version this client does not accept"
        }
        return TLSError(.protocolVersion, operation: operation, target: peerLabel, reason:
            "\(offered) (\(selfName) speaks \(acceptedVersions)); upgrade or reconfigure the \(isServer ? "client" : "server")",
            detail: detail)
    }

    private func endOfStreamError(handshaking: Bool, detail: String) -> TLSError {
        guard handshaking else {
            return TLSError(.truncated, operation: operation, target: peerLabel, reason:
                "\(peerName) closed its TCP connection without TLS close_notify, so the end of its data may be cut off "
                + "(a crashed or killed peer looks like this)", detail: detail)
        }
        let reason: String
        switch (isServer, receivedAnyBytes) {
        case (true, false):
            reason = "the client connected and closed without starting a TLS handshake (a port probe, a health check, "
                + "or a client that does not speak TLS)"
        case (true, true):
            reason = "the client closed the connection in the middle of the TLS handshake; it probably refused this "
                + "server's certificate without saying why"
        case (false, false):
            reason = "the server closed the connection without answering the TLS handshake; it probably does not speak "
                + "TLS on this port (connect without TLS?), or it refused this client's TLS versions"
        case (false, true):
            reason = "the server closed the connection in the middle of the TLS handshake, refusing this client for "
                + "a reason it did not send"
        }
        return TLSError(.closedDuringHandshake, operation: operation, target: peerLabel, reason: reason, detail: detail)
    }
}

extension OpenSSLErrorQueue {
    /// The reason part of an entry's wording (`certificate verify failed`), without the codes.
    static func reasonText(_ entry: OpenSSLError) -> String {
        ERR_reason_error_string(entry.code).map { String(cString: $0) } ?? entry.text
    }
}
