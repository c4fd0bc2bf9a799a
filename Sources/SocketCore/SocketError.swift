import Glibc
import SocketTLS

/// The one error type of the socket layer: which call failed, on what, and why.
///
/// Its description reads like `connect to localhost:7000 failed: Connection refused (errno 111)`;
/// resolver failures read like `resolve nosuch.invalid:7000 failed: Name or service not known (EAI_NONAME)`.
///
/// Cancellation is a `SocketError` too, so that the async API can throw one typed error: a call
/// whose task is cancelled fails with `ECANCELED` (`isCancellation`), naming the call it ended.
public struct SocketError: Error, Sendable, Hashable, CustomStringConvertible {
    /// Where the failure code comes from.
    public enum Code: Sendable, Hashable {
        /// A POSIX `errno` value.
        case posix(Int32)
        /// A `getaddrinfo` result code (`EAI_*`); `EAI_SYSTEM` is reported as `.posix` instead.
        case resolver(Int32)
        /// A TLS failure on the connection (a refused handshake, a truncated or forged stream):
        /// the `TLSError` says which, and its sentence is this error's description.
        case tls(TLSError)
    }

    /// The failure code.
    public let code: Code
    /// The operation that failed, e.g. `"connect"`, `"bind"`, `"resolve"`.
    public let operation: String
    /// What the operation was applied to, e.g. `"localhost:7000"`; empty when nothing useful can be named.
    public let target: String
    /// Our own wording of the failure, when the system's would not say what is wrong (an argument we
    /// refused before making any call); `reason` uses it instead of `strerror`.
    public let detail: String?

    /// Creates an error from an explicit code, optionally with our own wording of it.
    public init(_ code: Code, operation: String, target: String = "", detail: String? = nil) {
        self.code = code
        self.operation = operation
        self.target = target
        self.detail = detail
    }

    /// The error a call ends with when its task is cancelled: `ECANCELED`.
    public static func cancelled(_ operation: String, target: String = "") -> SocketError {
        SocketError(.posix(ECANCELED), operation: operation, target: target)
    }

    /// Whether the call ended because its task was cancelled, not because the connection failed.
    public var isCancellation: Bool { code == .posix(ECANCELED) }

    /// Creates an error from the calling thread's current `errno`.
    public static func lastErrno(_ operation: String, target: String = "") -> SocketError {
        SocketError(.posix(Glibc.errno), operation: operation, target: target)
    }

    /// A TLS failure on `target`, described by `error`'s own sentence.
    public static func tls(_ error: TLSError, target: String) -> SocketError {
        SocketError(.tls(error), operation: error.operation, target: target)
    }

    /// The TLS failure, or `nil` for every other error.
    public var tlsError: TLSError? {
        if case .tls(let error) = code { return error }
        return nil
    }

    /// The POSIX `errno`, or `nil` for resolver and TLS errors.
    public var errno: Int32? {
        if case .posix(let value) = code { return value }
        return nil
    }

    /// The wording of the failure, without the operation: the system's, or `detail` when there is one.
    public var reason: String {
        switch code {
        case .posix(let value):
            return "\(detail ?? String(cString: strerror(value))) (errno \(value))"
        case .resolver(let value):
            return "\(detail ?? String(cString: gai_strerror(value))) (\(Self.resolverCodeName(value)))"
        case .tls(let error):
            return detail ?? error.reason
        }
    }

    /// The whole message: `connect to localhost:7000 failed: Connection refused (errno 111)`.
    public var description: String {
        // A TLSError already names what it was doing and to whom, in words of its own.
        if case .tls(let error) = code { return error.description }
        // "connect to host:port" reads naturally; every other call names its subject directly
        // ("resolve host:port", "bind [::]:0", "send to peer" needs no special case).
        let subject: String
        if target.isEmpty {
            subject = operation
        } else if operation == "connect" {
            subject = "connect to \(target)"
        } else {
            subject = "\(operation) \(target)"
        }
        return "\(subject) failed: \(reason)"
    }

    private static func resolverCodeName(_ value: Int32) -> String {
        switch value {
        case EAI_NONAME: return "EAI_NONAME"
        case EAI_AGAIN: return "EAI_AGAIN"
        case EAI_FAIL: return "EAI_FAIL"
        case EAI_FAMILY: return "EAI_FAMILY"
        case EAI_SERVICE: return "EAI_SERVICE"
        case EAI_MEMORY: return "EAI_MEMORY"
        case EAI_BADFLAGS: return "EAI_BADFLAGS"
        case EAI_SOCKTYPE: return "EAI_SOCKTYPE"
        default: return "EAI \(value)"
        }
    }
}
