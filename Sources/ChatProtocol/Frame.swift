/// One message of the chat protocol, as the encoder writes it and the decoder yields it.
///
/// Each case documents its direction and its fields; docs/PROTOCOL.md gives the byte layout.
/// The codec accepts every case in both directions: which frames a peer may send, and when,
/// is the session's business (answer a misdirected frame with `ErrorCode.unexpectedFrame`).
/// Times are milliseconds since the Unix epoch; `seq` is the room's sequence number,
/// starting at 1 and never reused. Names follow `ChatName`.
public enum Frame: Hashable, Sendable {
    // MARK: Client → server

    /// Client → server, first frame of a session: the highest protocol version the client
    /// speaks, the nick it wants, and the server password if it has one.
    case hello(version: UInt16, nick: String, password: String?)
    /// Client → server: asks to be known by `nick`. Answered by `nickAccepted` (and
    /// `nickChanged` in every room the client is in) or an error.
    case changeNick(nick: String)
    /// Client → server: enters `room`, creating it if it does not exist.
    case join(room: String)
    /// Client → server: leaves `room`.
    case part(room: String)
    /// Client → server: says `text` in `room`. Acknowledged by the `message` echo.
    case say(room: String, text: String)
    /// Client → server: performs `/me text` in `room`. Acknowledged by the `action` echo.
    case emote(room: String, text: String)
    /// Client → server: sends `text` to `recipient` alone. Acknowledged by the `direct` echo.
    case tell(recipient: String, text: String)
    /// Client → server: asks for every room with its member count and topic.
    case listRooms
    /// Client → server: asks who is in `room`.
    case who(room: String)
    /// Client → server: sets `room`'s topic; an empty `text` clears it.
    case setTopic(room: String, text: String)
    /// Client → server: asks for up to `count` of `room`'s most recent messages.
    case requestHistory(room: String, count: UInt32)
    /// Client → server (version 2): asks for up to `limit` of `room`'s stored events next to
    /// `seq`: the newest ones older than `seq` (`.before`; `seq` 0 means "the newest of all"),
    /// or the oldest ones newer than `seq` (`.after`). Answered by one `historyPage`.
    case fetchHistory(room: String, direction: HistoryDirection, seq: UInt64, limit: UInt32)
    /// Client → server (version 2): marks the client away with `text`, or back when `text` is
    /// empty. Answered by `away` with the client's own nick.
    case setAway(text: String)
    /// Client → server (version 3): registers the client's current nick as an account with
    /// `password`, and logs the client in as it. Answered by `registered` or an error.
    case register(password: String)
    /// Client → server (version 3): logs in as `account` with `password`; on success the client
    /// holds the account's nick (a stale connection holding it is ghosted). Answered by
    /// `loggedIn` (after `nickAccepted` if the nick changed) or an error.
    case login(account: String, password: String)
    /// Client → server (version 3): replaces the logged-in account's password. Answered by
    /// `passwordChanged` or an error.
    case changePassword(old: String, new: String)
    /// Client → server (version 3): deletes the logged-in account; its nick is no longer
    /// reserved. Answered by `accountDropped` or an error.
    case dropAccount(password: String)
    /// Client → server (version 4): enters `room` with `key`, as `join` does; a room with a key
    /// (`RoomMode.key`) needs it unless the client has a role there or was invited.
    case joinWithKey(room: String, key: String)
    /// Client → server (version 4): removes `nick` from `room`, for `reason` (may be empty).
    /// Needs ops in the room. Answered by the `kicked` room event or an error.
    case kick(room: String, nick: String, reason: String)
    /// Client → server (version 4): turns `mode` of `room` on or off, with `argument` where the
    /// mode takes one (`RoomMode`). Answered by the `modeChanged` room event or an error.
    case setMode(room: String, mode: RoomMode, on: Bool, argument: String)
    /// Client → server (version 4): lets `nick` join invite-only (or keyed, or full) `room` once.
    /// Needs ops in the room. Answered by `invited`, which `nick` receives too, or an error.
    case invite(room: String, nick: String)
    /// Client → server (version 4): asks for `room`'s bans; an empty `room` asks for the
    /// server's bans (server operators only). Answered by `banList` or an error.
    case listBans(room: String)
    /// Client → server (version 4, server operators only): bans `mask` from the whole server
    /// (on) or lifts the ban (off); a `room:NAME` mask closes that room. Sessions the ban
    /// matches are ended. Answered by `done` or an error.
    case serverBan(on: Bool, mask: String, reason: String)
    /// Client → server (version 4, server operators only): ends `nick`'s session, for `reason`.
    /// Answered by `done` or an error.
    case kill(nick: String, reason: String)

    // MARK: Server → client

    /// Server → client, answer to `hello`: the version both will speak, the nick the client
    /// now holds, the largest frame the server accepts from it, and a message of the day.
    case welcome(version: UInt16, nick: String, maxFrameSize: UInt32, motd: String)
    /// Server → client: `sender` said `text` in `room`; the sender receives it too.
    case message(room: String, seq: UInt64, time: UInt64, sender: String, text: String)
    /// Server → client: `sender` performed `/me text` in `room`; the sender receives it too.
    case action(room: String, seq: UInt64, time: UInt64, sender: String, text: String)
    /// Server → client: a direct message, delivered to `recipient` and echoed to `sender`.
    case direct(sender: String, recipient: String, time: UInt64, text: String)
    /// Server → client: `nick` entered `room`; the joiner's own copy acknowledges its `join`.
    case joined(room: String, seq: UInt64, time: UInt64, nick: String)
    /// Server → client: `nick` left `room`; the leaver's own copy acknowledges its `part`.
    case left(room: String, seq: UInt64, time: UInt64, nick: String)
    /// Server → client: `nick`, who was in `room`, disconnected, for `reason`.
    case quit(room: String, seq: UInt64, time: UInt64, nick: String, reason: String)
    /// Server → client: `old` is now known as `new` in `room`.
    case nickChanged(room: String, seq: UInt64, time: UInt64, old: String, new: String)
    /// Server → client: the receiver's `changeNick` succeeded; it is now `nick`.
    case nickAccepted(nick: String)
    /// Server → client, answer to `listRooms`: every room.
    case roomList(rooms: [RoomInfo])
    /// Server → client, answer to `who` and sent after `joined` to the joiner: who is in `room`.
    case members(room: String, nicks: [String])
    /// Server → client: `room`'s topic, set by `setBy` at `time` (room event `seq`). Broadcast
    /// when it changes (empty `text`: cleared) and sent to a joiner when the room has one.
    case topic(room: String, seq: UInt64, time: UInt64, setBy: String, text: String)
    /// Server → client: past messages of `room`, sent to a joiner and in answer to
    /// `requestHistory`. Entries must be in strictly increasing `seq` order: the encoder
    /// writes differences and does not check.
    case history(room: String, entries: [HistoryEntry])
    /// Server → client (version 2), sent to a joiner right after its `joined`: the room's
    /// `epoch` (non-zero; a new epoch means the room's history and `seq` started again), the
    /// `seq` of its oldest stored event (0 when none is stored) and its latest `seq`.
    case roomState(room: String, epoch: UInt64, firstSeq: UInt64, lastSeq: UInt64)
    /// Server → client (version 2): one page of `room`'s stored events, oldest first, answering
    /// `fetchHistory` or replaying recent history to a joiner. `complete` says that no stored
    /// event lies beyond this page in the direction asked (older, for a join's replay).
    /// Entries must be in strictly increasing `seq` order: the encoder does not check.
    case historyPage(room: String, epoch: UInt64, complete: Bool, entries: [HistoryEntry])
    /// Server → client (version 2), answer to `listRooms`: one part of the room list; the part
    /// with `complete` set is the last.
    case roomListPage(complete: Bool, rooms: [RoomInfo])
    /// Server → client (version 2), answer to `who` and sent after `joined` to the joiner: one
    /// part of `room`'s members; the part with `complete` set is the last.
    case membersPage(room: String, complete: Bool, nicks: [String])
    /// Server → client (version 2): `nick` is away with `text`, or back when `text` is empty.
    /// Acknowledges the receiver's own `setAway`, and follows the `direct` echo of a `tell` to
    /// someone away.
    case away(nick: String, text: String)
    /// Server → client (version 2), right after `welcome`: the rate limits the server applies
    /// to this client, so it can pace what it sends. `requestRate` is in thousandths of a
    /// request per second and `byteRate` in bytes per second; 0 means no limit.
    case limits(requestRate: UInt32, requestBurst: UInt32, byteRate: UInt32, byteBurst: UInt32)
    /// Server → client (version 3), answer to `register`: `account` exists and the client is
    /// logged in as it.
    case registered(account: String)
    /// Server → client (version 3), answer to `login`: the client is logged in as `account`.
    case loggedIn(account: String)
    /// Server → client (version 3), answer to `changePassword`: `account`'s password is the new one.
    case passwordChanged(account: String)
    /// Server → client (version 3), answer to `dropAccount`: `account` no longer exists; the
    /// client keeps its nick as a guest.
    case accountDropped(account: String)
    /// Server → client (version 4), a room event: `by` removed `nick` from `room` for `reason`.
    /// The kicked member receives it last of the room's events; clients of versions 1–3
    /// receive `left` in its place.
    case kicked(room: String, seq: UInt64, time: UInt64, nick: String, by: String, reason: String)
    /// Server → client (version 4), a room event: `by` turned `mode` of `room` on or off, with
    /// `argument` (the nick of a role, the key, the limit, the canonical ban mask).
    case modeChanged(room: String, seq: UInt64, time: UInt64, by: String, mode: RoomMode, on: Bool, argument: String)
    /// Server → client (version 4): `by` invited `nick` into `room`; sent to both.
    case invited(room: String, nick: String, by: String)
    /// Server → client (version 4): `room`'s settings and roles; sent to a joiner after its
    /// members, and after the members that answer `who`.
    case roomModes(room: String, modes: RoomModes)
    /// Server → client (version 4), answer to `listBans`: the bans of `room`, or of the server
    /// when `room` is empty, oldest first.
    case banList(room: String, entries: [BanEntry])
    /// Server → client (version 4): the request of type `request` was carried out, as `text`
    /// says (the answer to `serverBan` and `kill`).
    case done(request: FrameType, text: String)

    // MARK: Either direction

    /// Either direction: asks the peer to answer `pong` with the same `token`.
    case ping(token: UInt64)
    /// Either direction: answers the `ping` carrying `token`.
    case pong(token: UInt64)
    /// Either direction: reports `code`. If `fatal`, the sender closes the connection after
    /// this frame. `frameType` is the type of the frame at fault, or `.none`.
    case error(code: ErrorCode, fatal: Bool, frameType: FrameType, reason: String)
    /// Either direction: the sender is ending the session and sends nothing more.
    case goodbye(reason: String)

    // MARK: Forward compatibility

    /// A frame of a skippable type (0x01–0x7F) this version does not define. Receivers ignore
    /// it. The encoder writes `type` and `payload` verbatim, whatever the type.
    case unknown(type: FrameType, payload: [UInt8])

    /// The type byte this frame is written with.
    public var type: FrameType {
        switch self {
        case .hello: .hello
        case .changeNick: .changeNick
        case .join: .join
        case .part: .part
        case .say: .say
        case .emote: .emote
        case .tell: .tell
        case .listRooms: .listRooms
        case .who: .who
        case .setTopic: .setTopic
        case .requestHistory: .requestHistory
        case .fetchHistory: .fetchHistory
        case .setAway: .setAway
        case .register: .register
        case .login: .login
        case .changePassword: .changePassword
        case .dropAccount: .dropAccount
        case .joinWithKey: .joinWithKey
        case .kick: .kick
        case .setMode: .setMode
        case .invite: .invite
        case .listBans: .listBans
        case .serverBan: .serverBan
        case .kill: .kill
        case .kicked: .kicked
        case .modeChanged: .modeChanged
        case .invited: .invited
        case .roomModes: .roomModes
        case .banList: .banList
        case .done: .done
        case .registered: .registered
        case .loggedIn: .loggedIn
        case .passwordChanged: .passwordChanged
        case .accountDropped: .accountDropped
        case .welcome: .welcome
        case .message: .message
        case .action: .action
        case .direct: .direct
        case .joined: .joined
        case .left: .left
        case .quit: .quit
        case .nickChanged: .nickChanged
        case .nickAccepted: .nickAccepted
        case .roomList: .roomList
        case .members: .members
        case .topic: .topic
        case .history: .history
        case .roomState: .roomState
        case .historyPage: .historyPage
        case .roomListPage: .roomListPage
        case .membersPage: .membersPage
        case .away: .away
        case .limits: .limits
        case .ping: .ping
        case .pong: .pong
        case .error: .error
        case .goodbye: .goodbye
        case let .unknown(type, _): type
        }
    }
}

/// Which way `fetchHistory` pages from its `seq`.
public enum HistoryDirection: UInt8, Hashable, Sendable {
    /// Events older than `seq`: scrolling back.
    case before = 0
    /// Events newer than `seq`: catching up.
    case after = 1
}

/// One room in a `roomList` or `roomListPage` answer.
public struct RoomInfo: Hashable, Sendable {
    /// The room's name.
    public var name: String
    /// How many sessions are in the room.
    public var memberCount: UInt32
    /// The room's topic; empty when it has none.
    public var topic: String

    /// Describes one room.
    public init(name: String, memberCount: UInt32, topic: String) {
        self.name = name
        self.memberCount = memberCount
        self.topic = topic
    }
}

/// One past event in a `history` batch or a `historyPage`.
public struct HistoryEntry: Hashable, Sendable {
    /// What kind of room event the entry records.
    public enum Kind: UInt8, Hashable, Sendable {
        /// A room message, delivered at the time as `Frame.message`.
        case message = 0
        /// A room action, delivered at the time as `Frame.action`.
        case action = 1
        /// A topic change, delivered at the time as `Frame.topic` (`sender` set it; empty
        /// `text` cleared it). Only `historyPage` carries these; `history` may not.
        case topic = 2
    }

    /// Message, action or topic change.
    public var kind: Kind
    /// The room sequence number the entry had when it was delivered.
    public var seq: UInt64
    /// When the server stamped it, in milliseconds since the Unix epoch.
    public var time: UInt64
    /// Who sent it (for a topic change: who set it).
    public var sender: String
    /// What was said, or the topic.
    public var text: String

    /// Describes one past event.
    public init(kind: Kind, seq: UInt64, time: UInt64, sender: String, text: String) {
        self.kind = kind
        self.seq = seq
        self.time = time
        self.sender = sender
        self.text = text
    }
}
