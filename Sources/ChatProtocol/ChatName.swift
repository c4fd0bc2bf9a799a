/// The rules for nicks and room names (docs/PROTOCOL.md, "Names").
///
/// The decoder applies them to every name field, so a frame with a bad name is malformed.
/// Clients check user input with these functions before sending; servers use `nickKey`
/// to find nicks regardless of case.
public enum ChatName {
    /// The longest nick, in bytes.
    public static let maxNickLength = 24
    /// The longest room name, in bytes.
    public static let maxRoomLength = 32

    /// Throws `FrameError.badName(.nick, …)` unless `nick` is 1–24 ASCII letters, digits and
    /// ``_-[]\`^{}|``, not starting with a digit or `-`.
    public static func validateNick(_ nick: String) throws(FrameError) {
        if let problem = nickProblem(nick.utf8) { throw .badName(.nick, problem) }
    }

    /// Throws `FrameError.badName(.room, …)` unless `room` is 1–32 bytes of `a-z 0-9 _ -`.
    public static func validateRoom(_ room: String) throws(FrameError) {
        if let problem = roomProblem(room.utf8) { throw .badName(.room, problem) }
    }

    /// Whether `nick` follows the nick rules.
    public static func isValidNick(_ nick: String) -> Bool { nickProblem(nick.utf8) == nil }

    /// Whether `room` follows the room rules.
    public static func isValidRoom(_ room: String) -> Bool { roomProblem(room.utf8) == nil }

    /// Turns what a user typed (`#General`) into the wire form (`general`): drops one leading
    /// `#`, lowercases ASCII letters, then validates.
    public static func normalizedRoom(_ input: String) throws(FrameError) -> String {
        var bytes = Array(input.utf8)
        if bytes.first == UInt8(ascii: "#") { bytes.removeFirst() }
        let lowered = bytes.map(asciiLowercased)
        if let problem = roomProblem(lowered) { throw .badName(.room, problem) }
        return String(decoding: lowered, as: UTF8.self)
    }

    /// The key under which a server stores `nick`: ASCII-lowercased, because nicks that
    /// differ only in letter case name the same person.
    public static func nickKey(_ nick: String) -> String {
        String(decoding: nick.utf8.map(asciiLowercased), as: UTF8.self)
    }

    // MARK: Rules over bytes, shared with the decoder

    static func nickProblem(_ bytes: some Collection<UInt8>) -> NameProblem? {
        guard let first = bytes.first else { return .empty }
        if bytes.count > maxNickLength { return .tooLong }
        for byte in bytes where !isNickByte(byte) { return .invalidCharacter }
        if isDigit(first) || first == UInt8(ascii: "-") { return .invalidFirstCharacter }
        return nil
    }

    static func roomProblem(_ bytes: some Collection<UInt8>) -> NameProblem? {
        if bytes.isEmpty { return .empty }
        if bytes.count > maxRoomLength { return .tooLong }
        for byte in bytes where !isRoomByte(byte) { return .invalidCharacter }
        return nil
    }

    private static func isDigit(_ byte: UInt8) -> Bool { byte &- 0x30 < 10 }

    private static func isLower(_ byte: UInt8) -> Bool { byte &- 0x61 < 26 }

    private static func isNickByte(_ byte: UInt8) -> Bool {
        // ASCII letters, digits, and - [ \ ] ^ _ ` { | } (0x2D, 0x5B–0x60, 0x7B–0x7D).
        isLower(byte | 0x20) || isDigit(byte) || byte == 0x2D || (byte >= 0x5B && byte <= 0x60)
            || (byte >= 0x7B && byte <= 0x7D)
    }

    private static func isRoomByte(_ byte: UInt8) -> Bool {
        isLower(byte) || isDigit(byte) || byte == UInt8(ascii: "_") || byte == UInt8(ascii: "-")
    }

    private static func asciiLowercased(_ byte: UInt8) -> UInt8 {
        byte &- 0x41 < 26 ? byte | 0x20 : byte
    }
}
