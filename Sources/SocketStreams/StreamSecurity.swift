#if os(Linux)
import Foundation

/// What the bridge does when an app asks its socket streams for TLS: refuse it, loudly.
///
/// Apple's socket streams negotiate TLS when `kCFStreamPropertySocketSecurityLevel` (set to any
/// level but `.none`) or `kCFStreamPropertySSLSettings` is set before they open. This bridge has no
/// TLS yet. Opening anyway would send what the app believes is encrypted in cleartext, and tutorial
/// code ignores `setProperty`'s result, so returning `false` alone is not enough: the request is
/// accepted, and opening then fails with `.errorOccurred` and `tlsRefusal` as `streamError`,
/// before any connection is made.
///
/// This is the one place that decides it: when TLS arrives, `request(setting:forKey:)` stays and
/// the pair starts TLS where it now calls `tlsRefusal`.
enum StreamSecurity {
    /// What a security property asks for.
    enum Request: Equatable {
        /// Plain TCP (`StreamSocketSecurityLevel.none`, or the property removed).
        case none
        /// TLS, named as the app asked for it (the level's name, or the settings key).
        case tls(String)
    }

    /// The `Stream.PropertyKey` of CFNetwork's SSL settings dictionary; Foundation on Linux has no constant for it.
    static let sslSettingsKey = Stream.PropertyKey("kCFStreamPropertySSLSettings")

    /// What setting `value` for `key` asks for, or nil when `key` is not a security property.
    static func request(setting value: AnyObject?, forKey key: Stream.PropertyKey) -> Request? {
        switch key {
        case .socketSecurityLevelKey:
            // Apps pass the level itself (boxed on Linux) or its CF name as a string.
            let level = (value as? StreamSocketSecurityLevel)?.rawValue ?? (value as? String)
            guard let level, level != StreamSocketSecurityLevel.none.rawValue else { return Request.none }
            return .tls(level)
        case sslSettingsKey:
            return value == nil ? Request.none : .tls(sslSettingsKey.rawValue)
        default:
            return nil
        }
    }

    /// The `streamError` of a pair that was asked for TLS: `SocketStreamsErrorDomain`,
    /// `SocketStreamsErrorCode.tlsUnavailable`.
    static func tlsRefusal(_ requested: String, target: String) -> NSError {
        NSError(
            domain: SocketStreamsErrorDomain, code: SocketStreamsErrorCode.tlsUnavailable.rawValue,
            userInfo: [
                NSLocalizedDescriptionKey:
                    "TLS was requested (\(requested)) for \(target), but SocketStreams has no TLS yet: "
                    + "the streams did not open, and nothing was sent in cleartext",
                NSLocalizedFailureReasonErrorKey: "TLS is not available in SocketStreams",
            ])
    }
}
#endif
