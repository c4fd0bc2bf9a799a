/// Why bytes from a Redis server could not be parsed. Every case is fatal for the connection: the
/// stream has lost its framing, so the client drops it and reconnects.
public enum RESPError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The first byte of a value is not one of `+ - : $ *`.
    case unknownType(UInt8)
    /// A header's length or an integer is not a decimal number in range.
    case invalidNumber(String)
    /// A line (a status, an error, a number) went on longer than the limit without its CR LF.
    case lineTooLong(limit: Int)
    /// A bulk string announced more bytes than the limit.
    case bulkTooLong(length: Int, limit: Int)
    /// An array announced more elements than the limit.
    case arrayTooLong(count: Int, limit: Int)
    /// Arrays nested deeper than the limit.
    case nestedTooDeeply(limit: Int)
    /// One reply (with everything nested in it) cost more than the limit (`maxReplyCost`).
    case replyTooLarge(limit: Int)
    /// A line or a bulk string was not followed by CR LF.
    case missingTerminator

    /// The problem, for a log line.
    public var description: String {
        switch self {
        case .unknownType(let byte): "unknown RESP type byte 0x\(String(byte, radix: 16))"
        case .invalidNumber(let text): "invalid RESP number '\(text)'"
        case .lineTooLong(let limit): "RESP line longer than \(limit) bytes"
        case .bulkTooLong(let length, let limit): "RESP bulk string of \(length) bytes, more than \(limit)"
        case .arrayTooLong(let count, let limit): "RESP array of \(count) elements, more than \(limit)"
        case .nestedTooDeeply(let limit): "RESP arrays nested deeper than \(limit)"
        case .replyTooLarge(let limit): "RESP reply larger than \(limit) bytes (its values counted with their bookkeeping)"
        case .missingTerminator: "RESP value not followed by CR LF"
        }
    }
}
