/// Why a byte stream is not a valid sequence of frames.
///
/// Every case names the field at fault, so a server can answer with a precise `error` frame
/// and a test can assert the exact problem. docs/PROTOCOL.md, "Bad frames", lists what a
/// receiver does with each.
public enum FrameError: Error, Hashable, Sendable {
    /// The length prefix announces `length` bytes, more than the receiver's `limit`.
    case frameTooLarge(length: UInt64, limit: Int)
    /// The frame ended (or, for `.length`, the stream ended) before this field was complete.
    case truncated(Field)
    /// A varint runs past 64 bits, or its value does not fit the field's range.
    case integerOverflow(Field)
    /// A varint is longer than needed (ends in a zero byte); every value has one encoding.
    case nonMinimalInteger(Field)
    /// A string field is not well-formed UTF-8.
    case invalidUTF8(Field)
    /// A nick or room field breaks the naming rules.
    case badName(Field, NameProblem)
    /// `count` bytes remain after the last field of a frame of known type `type`.
    case trailingBytes(type: FrameType, count: Int)
    /// Type 0, or a must-understand type (0x80–0xFF) this receiver does not know.
    case unknownType(FrameType)
    /// A field holds a value outside its defined set (a bool other than 0/1, sequence 0,
    /// an unknown history entry kind, history sequence numbers that do not increase).
    case invalidValue(Field)
}

/// The place in a frame that an error refers to.
public enum Field: String, Hashable, Sendable, CaseIterable {
    /// The frame's length prefix.
    case length
    /// The frame's type byte.
    case type
    /// `hello.version`, `welcome.version`.
    case version
    /// A nick: `hello`, `changeNick`, `welcome`, presence events, `nickAccepted`.
    case nick
    /// `hello.password`.
    case password
    /// An account name (version 3): a nick, by the nick rules.
    case account
    /// The new password of `changePassword` (version 3).
    case newPassword
    /// A room name.
    case room
    /// Message, action, topic or direct-message text.
    case text
    /// A per-room sequence number.
    case seq
    /// A server timestamp.
    case time
    /// The nick that sent a delivery.
    case sender
    /// The nick a direct message is addressed to.
    case recipient
    /// `nickChanged.old`.
    case oldNick
    /// `nickChanged.new`.
    case newNick
    /// `welcome.maxFrameSize`.
    case maxFrameSize
    /// `welcome.motd`.
    case motd
    /// `requestHistory.count`, `fetchHistory.limit`.
    case historyCount
    /// `fetchHistory.direction`.
    case direction
    /// `fetchHistory.seq`: the sequence number a page starts next to (0 allowed).
    case anchor
    /// A room's epoch (`roomState`, `historyPage`).
    case epoch
    /// `roomState.firstSeq`.
    case firstSeq
    /// `roomState.lastSeq`.
    case lastSeq
    /// The `complete` flag of a page.
    case complete
    /// `limits.requestRate`.
    case requestRate
    /// `limits.requestBurst`.
    case requestBurst
    /// `limits.byteRate`.
    case byteRate
    /// `limits.byteBurst`.
    case byteBurst
    /// The element count of a list (`roomList`, `members`, `history` and their pages).
    case listCount
    /// `roomList` entry member count.
    case memberCount
    /// `roomList` entry topic.
    case topic
    /// `topic.setBy`, and a `banList` entry's setter (version 4).
    case setBy
    /// `history` entry kind.
    case entryKind
    /// `ping.token`, `pong.token`.
    case token
    /// `error.code`.
    case code
    /// `error.fatal`.
    case fatal
    /// `error.frameType`.
    case frameType
    /// `quit.reason`, `error.reason`, `goodbye.reason`, and the reasons of version 4's
    /// moderation frames.
    case reason
    /// Who did it: `kicked.by`, `modeChanged.by`, `invited.by` (version 4).
    case by
    /// `setMode.mode`, `modeChanged.mode` (version 4).
    case mode
    /// Whether a mode or a server ban is turned on: `setMode.on`, `modeChanged.on`,
    /// `serverBan.on` (version 4).
    case on
    /// A mode's argument: `setMode.argument`, `modeChanged.argument` (version 4).
    case argument
    /// A ban mask: `serverBan.mask`, `banList` entries (version 4).
    case mask
    /// `roomModes.founder` (version 4): an account name or empty.
    case founder
    /// `roomModes.inviteOnly` (version 4).
    case inviteOnly
    /// `roomModes.moderated` (version 4).
    case moderated
    /// `roomModes.topicLock` (version 4).
    case topicLock
    /// A room's key: `joinWithKey.key`, `roomModes.key` (version 4).
    case key
    /// `roomModes.memberLimit` (version 4).
    case memberLimit
}

/// How a name breaks the rules of `ChatName`.
public enum NameProblem: String, Hashable, Sendable {
    /// The name is empty.
    case empty
    /// The name is longer than its maximum (24 bytes for a nick, 32 for a room).
    case tooLong
    /// The name contains a byte outside its alphabet.
    case invalidCharacter
    /// A nick starts with a digit or `-`.
    case invalidFirstCharacter
}

extension FrameError {
    /// The code a server puts in the fatal `error` frame it sends before closing a
    /// connection whose stream failed with this error (docs/PROTOCOL.md, "Bad frames").
    public var errorCode: ErrorCode {
        switch self {
        case .frameTooLarge: .frameTooLarge
        case .badName(.room, _): .invalidRoom
        case .badName: .invalidNick
        default: .malformedFrame
        }
    }
}

extension FrameError: CustomStringConvertible {
    /// A one-line explanation suitable for logs and for the reason of an `error` frame.
    public var description: String {
        switch self {
        case let .frameTooLarge(length, limit):
            "frame of \(length) bytes exceeds the limit of \(limit) bytes"
        case let .truncated(field):
            "frame ends inside field '\(field.rawValue)'"
        case let .integerOverflow(field):
            "integer in field '\(field.rawValue)' overflows"
        case let .nonMinimalInteger(field):
            "integer in field '\(field.rawValue)' is not minimally encoded"
        case let .invalidUTF8(field):
            "field '\(field.rawValue)' is not valid UTF-8"
        case let .badName(field, problem):
            "field '\(field.rawValue)' is not a valid name: \(problem.rawValue)"
        case let .trailingBytes(type, count):
            "\(count) unexpected bytes after the last field of a \(type) frame"
        case let .unknownType(type):
            "frame type \(type) is not allowed"
        case let .invalidValue(field):
            "field '\(field.rawValue)' holds an invalid value"
        }
    }
}
