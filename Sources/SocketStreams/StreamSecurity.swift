#if os(Linux)
import Foundation
import SocketTLS

// MARK: - CFNetwork's SSL settings keys
//
// Foundation on Linux has no CFNetwork. Tutorial code that names these constants would not compile
// without them, so SocketStreams defines them with Apple's values: with them,
// `Stream.PropertyKey(rawValue: kCFStreamPropertySSLSettings as String)` and
// `[kCFStreamSSLValidatesCertificateChain as String: false]` compile unchanged.

/// The stream property holding a dictionary of SSL settings (CFNetwork's `kCFStreamPropertySSLSettings`).
public let kCFStreamPropertySSLSettings = "kCFStreamPropertySSLSettings"
/// SSL settings key: `false` turns certificate verification off (for a self-signed test server).
public let kCFStreamSSLValidatesCertificateChain = "kCFStreamSSLValidatesCertificateChain"
/// SSL settings key: the name to verify the server's certificate against (and send as SNI)
/// instead of the host connected to; `NSNull()` (Apple: `kCFNull`) verifies no name.
public let kCFStreamSSLPeerName = "kCFStreamSSLPeerName"
/// SSL settings key: a security level, as `socketSecurityLevelKey` takes.
public let kCFStreamSSLLevel = "kCFStreamSSLLevel"
/// SSL settings key: a client identity. Not supported here: a dictionary with it is refused.
public let kCFStreamSSLCertificates = "kCFStreamSSLCertificates"

extension Stream.PropertyKey {
    /// Linux only: a PEM file of CA certificates to trust instead of the system's store (on Apple
    /// platforms a delegate would evaluate `kCFStreamPropertySSLPeerTrust`, which Linux lacks).
    public static let tlsCertificateAuthorityFileKey = Stream.PropertyKey("SocketStreamsTLSCertificateAuthorityFile")
}

/// What an app asked of its socket streams' security, and how the bridge answers.
///
/// Apple's socket streams negotiate TLS when `socketSecurityLevelKey` (any level but `.none`) or
/// `kCFStreamPropertySSLSettings` is set before they open. So do these, through `SocketTLS`:
/// TLS 1.2 or 1.3, the server's certificate verified against the system's CAs (or
/// `tlsCertificateAuthorityFileKey`'s) and the host given to `getStreamsToHost`. docs/TLS.md has
/// the table of what each setting does on Linux.
struct StreamSecurity: Equatable {
    /// The security level asked for, by its CF name; nil when none was set.
    var level: String?
    /// Whether an SSL settings dictionary was set (it asks for TLS by itself).
    var hasSettings = false
    /// `kCFStreamSSLValidatesCertificateChain`.
    var validatesCertificateChain = true
    /// `kCFStreamSSLPeerName`: nil for the host connected to, `.some(nil)` for no name.
    var peerName: String??
    /// `tlsCertificateAuthorityFileKey`.
    var certificateAuthorityFile: String?
    /// A request `set` refused (SSL 2/3, a client identity, …), which still fails the open: tutorial
    /// code ignores `setProperty`'s result, and going on in cleartext would betray it.
    var refused: String?

    /// The `Stream.PropertyKey` of CFNetwork's SSL settings dictionary.
    static let sslSettingsKey = Stream.PropertyKey(kCFStreamPropertySSLSettings)

    /// Whether TLS is asked for.
    var wantsTLS: Bool {
        refused != nil || hasSettings || (level.map { $0 != StreamSocketSecurityLevel.none.rawValue } ?? false)
    }

    /// Whether `key` is one of the security properties.
    static func isSecurityKey(_ key: Stream.PropertyKey) -> Bool {
        key == .socketSecurityLevelKey || key == sslSettingsKey || key == .tlsCertificateAuthorityFileKey
    }

    /// Takes `value` for `key`; returns false when the value asks for something not supported
    /// (SSL 2 or 3, a client identity, Apple's deprecated leniencies), leaving the settings as they were.
    mutating func set(_ value: AnyObject?, forKey key: Stream.PropertyKey) -> Bool {
        switch key {
        case .socketSecurityLevelKey:
            guard let level = Self.levelName(value) else {
                self.level = nil
                return value == nil
            }
            guard Self.isSupported(level) else {
                refused = "\(level) (SSL 2 and 3 are broken and not supported; use .negotiatedSSL)"
                return false
            }
            self.level = level
            return true
        case .tlsCertificateAuthorityFileKey:
            certificateAuthorityFile = value as? String ?? (value as? NSString).map { $0 as String }
            return value == nil || certificateAuthorityFile != nil
        case Self.sslSettingsKey:
            guard let value else {
                hasSettings = false
                validatesCertificateChain = true
                peerName = nil
                return true
            }
            guard let settings = value as? [String: Any] ?? (value as? NSDictionary as? [String: Any]) else {
                refused = "\(kCFStreamPropertySSLSettings) that is not a dictionary"
                return false
            }
            var updated = self
            updated.hasSettings = true
            for (name, setting) in settings {
                switch name {
                case kCFStreamSSLValidatesCertificateChain:
                    guard let validates = setting as? Bool ?? (setting as? NSNumber)?.boolValue else {
                        refused = "\(name) that is not a Bool"
                        return false
                    }
                    updated.validatesCertificateChain = validates
                case kCFStreamSSLPeerName:
                    if setting is NSNull {
                        updated.peerName = .some(nil)
                    } else if let name = setting as? String ?? (setting as? NSString).map({ $0 as String }) {
                        updated.peerName = .some(name)
                    } else {
                        refused = "\(name) that is neither a String nor NSNull()"
                        return false
                    }
                case kCFStreamSSLLevel:
                    guard let level = Self.levelName(setting as AnyObject), Self.isSupported(level) else {
                        refused = "\(name) \(setting) (SSL 2 and 3 are broken and not supported)"
                        return false
                    }
                    updated.level = level
                default:
                    // kCFStreamSSLCertificates (a client identity), the deprecated
                    // kCFStreamSSLAllowsExpiredCertificates / AllowsAnyRoot, and anything else.
                    refused = "\(name) (not supported on Linux: docs/TLS.md)"
                    return false
                }
            }
            self = updated
            return true
        default:
            return false
        }
    }

    /// The value `property(forKey:)` returns for `key`.
    func value(forKey key: Stream.PropertyKey) -> AnyObject? {
        switch key {
        case .socketSecurityLevelKey: return level.map { NSString(string: $0) }
        case .tlsCertificateAuthorityFileKey: return certificateAuthorityFile.map { NSString(string: $0) }
        default: return nil
        }
    }

    /// The `streamError` of a pair whose security request was refused: `SocketStreamsErrorDomain`,
    /// `SocketStreamsErrorCode.tlsUnavailable`.
    static func refusal(_ requested: String, target: String) -> NSError {
        NSError(
            domain: SocketStreamsErrorDomain, code: SocketStreamsErrorCode.tlsUnavailable.rawValue,
            userInfo: [
                NSLocalizedDescriptionKey:
                    "TLS was requested for \(target) with a setting SocketStreams cannot honour: \(requested); "
                    + "the streams did not open, and nothing was sent in cleartext",
                NSLocalizedFailureReasonErrorKey: "unsupported TLS setting: \(requested)",
            ])
    }

    /// The client configuration these settings ask for.
    var trust: TLSTrust {
        if !validatesCertificateChain { return .insecureAcceptAnything }
        return certificateAuthorityFile.map { .certificateAuthorities(file: $0) } ?? .systemDefault
    }

    /// The name to verify the certificate against, for a connection to `host`.
    func serverName(host: String) -> String? {
        peerName ?? host
    }

    /// Apps pass the level itself (boxed on Linux) or its CF name as a string.
    private static func levelName(_ value: AnyObject?) -> String? {
        (value as? StreamSocketSecurityLevel)?.rawValue ?? (value as? String) ?? (value as? NSString).map { $0 as String }
    }

    /// SSL 2 and 3 are broken and not offered; `.tlSv1` means "TLS 1.0 or later" on Apple, and
    /// here gets 1.2 or 1.3.
    private static func isSupported(_ level: String) -> Bool {
        level != StreamSocketSecurityLevel.ssLv2.rawValue && level != StreamSocketSecurityLevel.ssLv3.rawValue
    }
}
#endif
