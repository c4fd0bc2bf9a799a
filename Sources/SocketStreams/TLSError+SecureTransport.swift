#if os(Linux)
import SocketTLS

extension TLSError {
    /// The `OSStatus` Apple's Secure Transport reports for the same failure (`errSSL…`), so code
    /// written for Apple platforms that matches `streamError`'s code in `NSOSStatusErrorDomain`
    /// works unchanged. docs/TLS.md has the table.
    public var secureTransportStatus: Int32 {
        switch kind {
        case .certificateExpired: return -9814  // errSSLCertExpired
        case .certificateNotYetValid: return -9815  // errSSLCertNotYetValid
        case .hostnameMismatch: return -9843  // errSSLHostNameMismatch
        case .untrustedCertificate, .invalidCertificate: return -9807  // errSSLXCertChainInvalid
        case .peerRejectedCertificate(let alert):
            switch alert {
            case .unknownCA: return -9831  // errSSLPeerUnknownCA
            case .certificateExpired: return -9828  // errSSLPeerCertExpired
            case .badCertificate: return -9825  // errSSLPeerBadCert
            default: return -9829  // errSSLPeerCertUnknown
            }
        case .receivedAlert(let alert):
            return alert == .handshakeFailure ? -9824 : -9802  // errSSLPeerHandshakeFail, errSSLFatalAlert
        case .protocolVersion: return -9836  // errSSLPeerProtocolVersion
        case .noSharedCipher: return -9801  // errSSLNegotiation
        case .closedDuringHandshake: return -9806  // errSSLClosedAbort
        case .truncated: return -9816  // errSSLClosedNoNotify
        case .malformedRecords: return -9846  // errSSLBadRecordMac
        case .renegotiationRefused: return -9840  // errSSLPeerNoRenegotiation
        case .notTLS, .other: return -9800  // errSSLProtocol
        case .unreadableFile, .invalidCertificateFile, .invalidPrivateKeyFile, .encryptedPrivateKey, .keyMismatch,
            .invalidCAFile:
            return -9848  // errSSLBadConfiguration
        }
    }
}
#endif
