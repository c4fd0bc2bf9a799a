import RedisProtocol
import SocketCore

/// Why a Redis connection ended, or a command got no reply. An error *reply* (`-ERR …`) is not
/// one of these: it is a `RESPValue.error`, handed to the command's callback like any reply.
public enum RedisError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The socket failed: refused, reset, timed out.
    case connection(SocketError)
    /// The server sent bytes that are not RESP, or a value beyond the parser's limits.
    case protocolViolation(RESPError)
    /// The server sent a value no command was waiting for.
    case unexpectedValue
    /// The connection was closed — by its owner, or by the server at the end of its stream —
    /// before the reply came.
    case closed

    /// The problem, for a log line.
    public var description: String {
        switch self {
        case .connection(let error): "Redis connection failed: \(error)"
        case .protocolViolation(let error): "Redis sent a malformed reply: \(error)"
        case .unexpectedValue: "Redis sent a value no command was waiting for"
        case .closed: "Redis connection closed"
        }
    }
}
