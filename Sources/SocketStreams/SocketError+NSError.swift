#if os(Linux)
import Foundation

// MARK: - Stream errors as NSErrors
//
// Stream code written for Apple platforms inspects `streamError as NSError` and matches its domain
// and code, so `streamError` is an NSError in the domain CFNetwork uses for the same failure:
//
// | failure | domain | code | userInfo |
// | --- | --- | --- | --- |
// | a socket call (refused, reset, timed out, …) | `NSPOSIXErrorDomain` | the errno | |
// | a name lookup (`getaddrinfo`) | `kCFErrorDomainCFNetwork` | `kCFHostErrorUnknown` (2) | `kCFGetAddrInfoFailureKey`: the `EAI_*` value |
// | a TLS failure (handshake refused, stream truncated, …) | `NSOSStatusErrorDomain` | Secure Transport's `errSSL…` code (docs/TLS.md) | |
// | a request the bridge refuses (SSL 2/3) | `SocketStreamsErrorDomain` | a `SocketStreamsErrorCode` | |
//
// `localizedDescription` is the whole message (`connect to localhost:7000 failed: Connection
// refused (errno 111)`), and Swift code finds the `SocketError` itself under `NSUnderlyingErrorKey`.
// The `EAI_*` values are glibc's (negative), not Darwin's: code that compares them with constants
// from its own platform's netdb.h matches either way.

/// The domain CFNetwork reports failed host lookups in; Foundation on Linux has no CFNetwork, so
/// SocketStreams names it for code that matches `streamError` against it.
public let kCFErrorDomainCFNetwork = "kCFErrorDomainCFNetwork"

/// The `userInfo` key under which a `kCFHostErrorUnknown` error carries `getaddrinfo`'s result code.
public let kCFGetAddrInfoFailureKey = "kCFGetAddrInfoFailureKey"

/// The host-lookup codes of CFNetwork's `kCFErrorDomainCFNetwork`, spelled as Apple's Swift overlay
/// spells them.
public enum CFNetworkErrors: Int32, Sendable {
    /// The host name was not found (CFHost reports this; streams report `cfHostErrorUnknown`).
    case cfHostErrorHostNotFound = 1
    /// The lookup failed; `kCFGetAddrInfoFailureKey` holds `getaddrinfo`'s code.
    case cfHostErrorUnknown = 2
}

/// The domain of failures that are the bridge's own decision rather than a system call's.
public let SocketStreamsErrorDomain = "SocketStreamsErrorDomain"

/// The codes of `SocketStreamsErrorDomain`.
public enum SocketStreamsErrorCode: Int, Sendable {
    /// TLS was requested with a setting the bridge cannot honour (SSL 2 or 3, a client identity),
    /// so the stream failed to open rather than send in cleartext.
    case tlsUnavailable = 1
}

extension SocketError: CustomNSError {
    /// `NSPOSIXErrorDomain`, the domain `error as NSError` gives every `SocketError`, since
    /// `CustomNSError` has one domain per type; `nsError` gives a lookup failure CFNetwork's domain.
    public static var errorDomain: String { NSPOSIXErrorDomain }

    /// The `errno` or `EAI_*` value.
    public var errorCode: Int {
        switch code {
        case .posix(let value), .resolver(let value): return Int(value)
        case .tls(let error): return Int(error.secureTransportStatus)
        }
    }

    /// The full description (`connect to host:port failed: …`) under `NSLocalizedDescriptionKey`,
    /// the wording alone under `NSLocalizedFailureReasonErrorKey`.
    public var errorUserInfo: [String: Any] {
        [NSLocalizedDescriptionKey: description, NSLocalizedFailureReasonErrorKey: reason]
    }

    /// The error as CFNetwork would report it (see the table above): `NSPOSIXErrorDomain` and the
    /// errno for socket calls, `kCFErrorDomainCFNetwork` / `kCFHostErrorUnknown` with the `EAI_*`
    /// value under `kCFGetAddrInfoFailureKey` for lookups; the `SocketError` under `NSUnderlyingErrorKey`.
    public var nsError: NSError {
        var userInfo = errorUserInfo
        userInfo[NSUnderlyingErrorKey] = self
        switch code {
        case .posix(let value):
            return NSError(domain: NSPOSIXErrorDomain, code: Int(value), userInfo: userInfo)
        case .resolver(let value):
            userInfo[kCFGetAddrInfoFailureKey] = Int(value)
            return NSError(
                domain: kCFErrorDomainCFNetwork, code: Int(CFNetworkErrors.cfHostErrorUnknown.rawValue), userInfo: userInfo)
        case .tls(let error):
            return NSError(domain: NSOSStatusErrorDomain, code: Int(error.secureTransportStatus), userInfo: userInfo)
        }
    }
}
#endif
