/// Splits the byte stream from a Redis server into values, whatever chunks the bytes arrive in.
///
/// Resumable: arrays already opened wait on a stack, so a value cut off mid-way is not parsed
/// again from its start when more bytes come, and a reply of a million elements arriving in small
/// reads costs linear time. Bounded: every header is checked against `limits` before its body is
/// awaited, so a server that lies about a length cannot make the parser buffer more than one bulk
/// string of `maxBulkLength` and a line; and what one whole reply may cost — its bytes and the
/// bookkeeping of each value in it — is bounded by `maxReplyCost`, so a reply of many elements
/// cannot grow the parser's open arrays past it either.
public struct RESPParser: Sendable {
    /// What the parser accepts. Redis itself allows bulk strings of 512 MB; the cluster mode sends
    /// chat frames, so its connections set a bound near the chat's frame limit.
    public struct Limits: Sendable, Equatable {
        /// The longest status, error or number line, without its CR LF.
        public var maxLineLength = 64 * 1024
        /// The longest bulk string.
        public var maxBulkLength = 16 * 1024 * 1024
        /// The most elements in one array.
        public var maxArrayCount = 1 << 20
        /// How deeply arrays may nest.
        public var maxDepth = 16
        /// The most one reply may cost, counted as it is read: its bytes on the wire and
        /// `valueCost` for each value in it (nested ones included). No bound by default.
        public var maxReplyCost = Int.max

        /// What a parsed value costs in memory besides its bytes: its slot in its array (with the
        /// array's spare capacity) and its own allocation, rounded up. A reply's cost bounds the
        /// memory its parsed form takes.
        public static let valueCost = 128

        /// The defaults above.
        public init() {}
    }

    /// The limits this parser enforces.
    public let limits: Limits

    private var buffer: [UInt8] = []
    /// The first byte not yet consumed.
    private var start = 0
    /// Arrays whose header has been read and whose elements are still arriving, outermost first.
    private var open: [OpenArray] = []
    /// What the reply being read has cost so far (`Limits.maxReplyCost`).
    private var replyCost = 0

    private struct OpenArray: Sendable {
        var remaining: Int
        var elements: [RESPValue]
    }

    /// One header or scalar value read from the buffer.
    private enum Item {
        case value(RESPValue)
        case arrayHeader(count: Int)
    }

    /// A parser with `limits`.
    public init(limits: Limits = Limits()) {
        self.limits = limits
    }

    /// Bytes received and not yet returned as part of a value (inside open arrays included).
    public var bufferedByteCount: Int { buffer.count - start }

    /// Adds bytes from the server.
    public mutating func append(_ bytes: some Sequence<UInt8>) {
        if start == buffer.count {
            buffer.removeAll(keepingCapacity: buffer.capacity <= 1 << 20)
            start = 0
        } else if start >= 64 * 1024, start >= buffer.count / 2 {
            buffer.removeSubrange(0..<start)
            start = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// The next complete value, or nil until more bytes arrive. After an error the stream has
    /// lost its framing: the parser must not be used again.
    public mutating func next() throws(RESPError) -> RESPValue? {
        while let item = try nextItem() {
            var value: RESPValue
            switch item {
            case .value(let scalar):
                value = scalar
            case .arrayHeader(let count):
                guard open.count < limits.maxDepth else { throw .nestedTooDeeply(limit: limits.maxDepth) }
                open.append(OpenArray(remaining: count, elements: []))
                open[open.count - 1].elements.reserveCapacity(min(count, 1024))
                continue
            }
            // Hand the value to the innermost open array, closing every array it completes.
            while !open.isEmpty {
                let innermost = open.count - 1
                open[innermost].elements.append(value)
                open[innermost].remaining -= 1
                guard open[innermost].remaining == 0 else { break }
                value = .array(open.removeLast().elements)
            }
            if open.isEmpty { return value }
        }
        return nil
    }

    /// Reads one scalar or array header at `start`, consuming it; nil (consuming nothing) while it
    /// is incomplete.
    private mutating func nextItem() throws(RESPError) -> Item? {
        if open.isEmpty { replyCost = 0 }
        guard start < buffer.count, let lineEnd = try endOfLine() else { return nil }
        let type = buffer[start]
        let line = buffer[(start + 1)..<lineEnd]
        let afterLine = lineEnd + 2
        // Checked before a bulk string's body is awaited, and counted once the item is consumed
        // (an incomplete one is looked at again when more bytes come).
        var cost = afterLine - start + Limits.valueCost
        if type == UInt8(ascii: "$"), let length = try? Self.integer(line), length > 0, length <= limits.maxBulkLength {
            cost += Int(length) + 2
        }
        guard cost <= limits.maxReplyCost - replyCost else { throw .replyTooLarge(limit: limits.maxReplyCost) }
        defer { if start >= afterLine { replyCost += cost } }
        switch type {
        case UInt8(ascii: "+"):
            start = afterLine
            return .value(.simpleString(String(decoding: line, as: UTF8.self)))
        case UInt8(ascii: "-"):
            start = afterLine
            return .value(.error(String(decoding: line, as: UTF8.self)))
        case UInt8(ascii: ":"):
            let number = try Self.integer(line)
            start = afterLine
            return .value(.integer(number))
        case UInt8(ascii: "$"):
            let length = try Self.integer(line)
            if length == -1 {
                start = afterLine
                return .value(.bulkString(nil))
            }
            guard length >= 0 else { throw .invalidNumber(String(decoding: line, as: UTF8.self)) }
            guard length <= limits.maxBulkLength else {
                throw .bulkTooLong(length: Int(length), limit: limits.maxBulkLength)
            }
            let bodyEnd = afterLine + Int(length)
            guard bodyEnd + 2 <= buffer.count else { return nil }
            guard buffer[bodyEnd] == UInt8(ascii: "\r"), buffer[bodyEnd + 1] == UInt8(ascii: "\n") else {
                throw .missingTerminator
            }
            start = bodyEnd + 2
            return .value(.bulkString(Array(buffer[afterLine..<bodyEnd])))
        case UInt8(ascii: "*"):
            let count = try Self.integer(line)
            if count == -1 {
                start = afterLine
                return .value(.array(nil))
            }
            guard count >= 0 else { throw .invalidNumber(String(decoding: line, as: UTF8.self)) }
            guard count <= limits.maxArrayCount else {
                throw .arrayTooLong(count: Int(count), limit: limits.maxArrayCount)
            }
            start = afterLine
            return count == 0 ? .value(.array([])) : .arrayHeader(count: Int(count))
        default:
            throw .unknownType(type)
        }
    }

    /// The index of the CR that ends the line starting at `start`; nil while the line is
    /// incomplete. The type byte counts towards the line, so the limit applies to what follows it.
    private func endOfLine() throws(RESPError) -> Int? {
        let searchEnd = min(buffer.count, start + 1 + limits.maxLineLength + 1)
        var index = start + 1
        while index < searchEnd {
            switch buffer[index] {
            case UInt8(ascii: "\r"):
                guard index + 1 < buffer.count else { return nil }
                guard buffer[index + 1] == UInt8(ascii: "\n") else { throw .missingTerminator }
                return index
            case UInt8(ascii: "\n"):
                // A line never holds a line feed of its own: the stream is out of step.
                throw .missingTerminator
            default:
                index += 1
            }
        }
        if searchEnd == start + 1 + limits.maxLineLength + 1 { throw .lineTooLong(limit: limits.maxLineLength) }
        return nil
    }

    /// A decimal integer as RESP writes it: an optional minus sign and at least one digit.
    private static func integer(_ digits: ArraySlice<UInt8>) throws(RESPError) -> Int64 {
        var rest = digits[...]
        let negative = rest.first == UInt8(ascii: "-")
        if negative { rest = rest.dropFirst() }
        guard !rest.isEmpty, rest.count <= 19 else { throw .invalidNumber(String(decoding: digits, as: UTF8.self)) }
        var value: Int64 = 0
        for byte in rest {
            guard byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") else {
                throw .invalidNumber(String(decoding: digits, as: UTF8.self))
            }
            let digit = Int64(byte - UInt8(ascii: "0"))
            // Accumulate negatively so that Int64.min parses too.
            let (shifted, overflowed) = value.multipliedReportingOverflow(by: 10)
            let (next, underflowed) = shifted.subtractingReportingOverflow(digit)
            guard !overflowed, !underflowed else { throw .invalidNumber(String(decoding: digits, as: UTF8.self)) }
            value = next
        }
        if negative { return value }
        guard value != Int64.min else { throw .invalidNumber(String(decoding: digits, as: UTF8.self)) }
        return -value
    }
}
