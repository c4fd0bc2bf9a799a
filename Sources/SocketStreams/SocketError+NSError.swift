#if os(Linux)
import Foundation

// MARK: - SocketError as an NSError
//
// Stream code written for Apple platforms inspects `streamError as NSError`: errno failures such as
// a refused connect arrive there in `NSPOSIXErrorDomain` with the errno as code, and the same must
// hold here. Swift code keeps the richer value with `streamError as? SocketError`.
//
// The shortcut taken: `CustomNSError` gives one domain per type, and swift-corelibs-foundation's
// `as NSError` always uses it, so a resolver failure bridged with `as NSError` also says
// `NSPOSIXErrorDomain` (with the negative `EAI_*` value as code, which no errno collides with).
// `nsError` gives each failure its proper domain; use it when the domain matters.

extension SocketError: CustomNSError {
    /// The domain `nsError` gives resolver (`getaddrinfo`) failures, named after CFNetwork's
    /// `kCFStreamErrorDomainNetDB`; the code is the `EAI_*` value.
    public static let resolverErrorDomain = "kCFStreamErrorDomainNetDB"

    /// `NSPOSIXErrorDomain`: the domain `as NSError` uses for every `SocketError` (see `nsError`).
    public static var errorDomain: String { NSPOSIXErrorDomain }

    /// The `errno` or `EAI_*` value.
    public var errorCode: Int {
        switch code {
        case .posix(let value), .resolver(let value): return Int(value)
        }
    }

    /// The full description (`connect to host:port failed: …`) under `NSLocalizedDescriptionKey`,
    /// the system's wording alone under `NSLocalizedFailureReasonErrorKey`.
    public var errorUserInfo: [String: Any] {
        [NSLocalizedDescriptionKey: description, NSLocalizedFailureReasonErrorKey: reason]
    }

    /// The error as an `NSError` in the domain its code belongs to: `NSPOSIXErrorDomain` for errno
    /// values, `SocketError.resolverErrorDomain` for `getaddrinfo` results.
    public var nsError: NSError {
        switch code {
        case .posix:
            return NSError(domain: NSPOSIXErrorDomain, code: errorCode, userInfo: errorUserInfo)
        case .resolver:
            return NSError(domain: Self.resolverErrorDomain, code: errorCode, userInfo: errorUserInfo)
        }
    }
}
#endif
