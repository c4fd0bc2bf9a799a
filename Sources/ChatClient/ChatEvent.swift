import ChatProtocol

/// One thing the client shows the user: a delivery from the server or a note of its own.
///
/// The session produces these; `MessageRenderer` turns each into one line of text. Times are
/// milliseconds since the Unix epoch (the server's stamp, or the client's clock for its notes).
public enum ChatEvent: Equatable, Sendable {
    /// `sender` said `text` in `room`; `replayed` when it comes from a history batch.
    case message(room: String, time: UInt64, sender: String, text: String, replayed: Bool)
    /// `sender` performed `/me text` in `room`.
    case action(room: String, time: UInt64, sender: String, text: String, replayed: Bool)
    /// A direct message; `outgoing` when we sent it (the server's acknowledgement).
    case direct(time: UInt64, sender: String, recipient: String, text: String, outgoing: Bool)
    /// `nick` entered `room`.
    case joined(room: String, time: UInt64, nick: String)
    /// `nick` left `room`.
    case left(room: String, time: UInt64, nick: String)
    /// `nick` disconnected from the server while in `room`.
    case quit(room: String, time: UInt64, nick: String, reason: String)
    /// `old` is now known as `new` (seen in `room`).
    case nickChanged(room: String, time: UInt64, old: String, new: String)
    /// `room`'s topic is `text` (empty: none), set by `setBy`.
    case topic(room: String, time: UInt64, setBy: String, text: String)
    /// Who is in `room`; an op's nick comes as `@nick` and a voiced member's as `+nick`
    /// (version 4).
    case members(room: String, time: UInt64, nicks: [String])
    /// A moderation event in `room` (version 4), worded by the session: a kick, a mode change, an
    /// invitation, the room's modes.
    case moderation(room: String, time: UInt64, text: String)
    /// Someone was kicked from `room` (version 4), worded by the session: drawn to stand out,
    /// where presence lines are dim.
    case kick(room: String, time: UInt64, text: String)
    /// Every room on the server.
    case roomList(time: UInt64, rooms: [RoomInfo])
    /// A line that marks a point in `room`'s stream: "— 3 new since you left —", or that the
    /// room started again.
    case marker(room: String, time: UInt64, text: String)
    /// Something the client itself tells the user (help, connection state, room switches).
    case notice(time: UInt64, text: String)
    /// Something that went wrong: a refused request, a bad command, a lost connection.
    case error(time: UInt64, text: String)
}

/// The client's release, as `chat-client --version` prints it.
public enum ClientVersion {
    /// The version number.
    public static let current = "0.2.0"
}

extension ChatEvent {
    /// When it happened, in milliseconds since the Unix epoch.
    public var time: UInt64 {
        switch self {
        case .message(_, let time, _, _, _), .action(_, let time, _, _, _), .direct(let time, _, _, _, _),
            .joined(_, let time, _), .left(_, let time, _), .quit(_, let time, _, _), .nickChanged(_, let time, _, _),
            .topic(_, let time, _, _), .members(_, let time, _), .roomList(let time, _), .marker(_, let time, _),
            .moderation(_, let time, _), .kick(_, let time, _), .notice(let time, _), .error(let time, _):
            time
        }
    }
}

extension ChatEvent {
    /// The room the event happened in; nil for direct messages and the client's own notes.
    public var room: String? {
        switch self {
        case .message(let room, _, _, _, _), .action(let room, _, _, _, _), .joined(let room, _, _), .left(let room, _, _),
            .quit(let room, _, _, _), .nickChanged(let room, _, _, _), .topic(let room, _, _, _), .members(let room, _, _),
            .marker(let room, _, _), .moderation(let room, _, _), .kick(let room, _, _):
            room
        case .direct, .roomList, .notice, .error:
            nil
        }
    }

    /// Whether a log may hold this line already: a room's backlog (shown again at every start)
    /// or a catch-up's missed line, and a topic (which every join's backlog repeats).
    public var mayBeLoggedAlready: Bool {
        switch self {
        case .message(_, _, _, _, let replayed), .action(_, _, _, _, let replayed): replayed
        case .topic: true
        default: false
        }
    }
}
