/// A value of Redis's serialization protocol, version 2 (RESP2): what a Redis server sends, and
/// what a command is (an array of bulk strings).
///
/// RESP2 is what every Redis since 2.0 speaks to a connection that has not asked for RESP3 with
/// `HELLO 3`, and all the cluster mode needs: replies, errors, and pub/sub messages (arrays of
/// the form `message`, channel, payload). See https://redis.io/docs/latest/develop/reference/protocol-spec/.
public enum RESPValue: Equatable, Sendable {
    /// `+OK\r\n`: a short status line, never containing CR or LF.
    case simpleString(String)
    /// `-ERR unknown command\r\n`: an error reply; by convention its first word is the kind.
    case error(String)
    /// `:42\r\n`: a signed 64-bit integer.
    case integer(Int64)
    /// `$5\r\nhello\r\n`: binary-safe bytes; `nil` is the null bulk string `$-1\r\n` (a missing key).
    case bulkString([UInt8]?)
    /// `*2\r\n…`: a list of values, possibly nested; `nil` is the null array `*-1\r\n` (a timed-out
    /// blocking pop, an aborted transaction).
    case array([RESPValue]?)
}

extension RESPValue {
    /// A bulk string of `text`'s UTF-8 bytes.
    public static func bulk(_ text: String) -> RESPValue { .bulkString(Array(text.utf8)) }

    /// The text of a simple string, or of a bulk string that is valid UTF-8; nil otherwise.
    public var text: String? {
        switch self {
        case .simpleString(let text): text
        case .bulkString(let bytes?): String(validating: bytes, as: UTF8.self)
        default: nil
        }
    }

    /// The value of an integer reply, or of a bulk or simple string holding a decimal integer
    /// (Redis returns some counters as strings); nil otherwise.
    public var integer: Int64? {
        switch self {
        case .integer(let value): value
        default: text.flatMap { Int64($0) }
        }
    }
}
