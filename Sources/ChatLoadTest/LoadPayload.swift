/// The text of every load-test message: who sent it, its place in that sender's stream, and when
/// it was meant to leave.
///
/// On the wire it is ASCII, `L<sender>:<seq>:<sendNanos>`, then, when a size is asked for,
/// `:` and `x` padding up to that size. ASCII because the protocol's text must be valid UTF-8, and
/// decimal because a receiver parses it straight from the received bytes without building a
/// `String`. `sendNanos` is read from the monotonic clock of the process that runs every sender
/// and receiver (`MonotonicClock`), so latency needs no clock synchronisation.
public struct LoadPayload: Hashable, Sendable {
    /// The sender's ordinal, 0 ..< number of senders.
    public var sender: Int
    /// The sender's own sequence number, 0, 1, 2, … without gaps.
    public var seq: UInt64
    /// When the message was scheduled (fixed rate) or written (maximum rate), in monotonic ns.
    public var sendNanos: UInt64

    /// Describes one message.
    public init(sender: Int, seq: UInt64, sendNanos: UInt64) {
        self.sender = sender
        self.seq = seq
        self.sendNanos = sendNanos
    }

    /// The text, padded with `:xxx…` to `size` bytes when it is shorter.
    public func text(paddedTo size: Int = 0) -> String {
        let core = "L\(sender):\(seq):\(sendNanos)"
        let padding = size - core.utf8.count - 1
        guard padding >= 0 else { return core }
        return core + ":" + String(repeating: "x", count: padding)
    }

    /// Parses a payload from a message's text bytes; nil when the text is not a load-test payload
    /// (a person chatting in the room, or a damaged frame).
    public static func parse(_ text: UnsafeRawBufferPointer) -> LoadPayload? {
        var index = 0
        guard text.count >= 6, text[0] == UInt8(ascii: "L") else { return nil }
        index = 1
        guard let sender = number(text, &index), sender <= UInt64(Int.max),
              index < text.count, text[index] == UInt8(ascii: ":") else { return nil }
        index += 1
        guard let seq = number(text, &index), index < text.count, text[index] == UInt8(ascii: ":") else { return nil }
        index += 1
        guard let nanos = number(text, &index) else { return nil }
        guard index == text.count || text[index] == UInt8(ascii: ":") else { return nil }
        return LoadPayload(sender: Int(sender), seq: seq, sendNanos: nanos)
    }

    /// Reads 1 to 19 decimal digits at `index`, advancing it; nil when there are none or too many
    /// (19 digits always fit a UInt64, and no field here needs more).
    private static func number(_ text: UnsafeRawBufferPointer, _ index: inout Int) -> UInt64? {
        let start = index
        var value: UInt64 = 0
        while index < text.count, index - start < 19 {
            let digit = text[index] &- UInt8(ascii: "0")
            guard digit < 10 else { break }
            value = value * 10 + UInt64(digit)
            index += 1
        }
        return index > start ? value : nil
    }
}
