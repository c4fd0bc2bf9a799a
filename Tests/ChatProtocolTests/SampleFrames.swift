import ChatProtocol

/// Frames used across the tests: the examples of docs/PROTOCOL.md, one or more per type.
enum SampleFrames {
    /// The time of the examples: 2026-01-01T00:00:00Z in milliseconds.
    static let time: UInt64 = 1_767_225_600_000

    /// Every hex example of docs/PROTOCOL.md by its block name, with the frame it must decode to.
    static let documented: [String: Frame] = [
        "hello": .hello(version: 1, nick: "alice", password: nil),
        "hello-password": .hello(version: 1, nick: "alice", password: "s3cret"),
        "changeNick": .changeNick(nick: "alice_"),
        "join": .join(room: "general"),
        "part": .part(room: "general"),
        "say": .say(room: "general", text: "hello"),
        "emote": .emote(room: "general", text: "waves"),
        "tell": .tell(recipient: "bob", text: "hi bob"),
        "listRooms": .listRooms,
        "who": .who(room: "general"),
        "setTopic": .setTopic(room: "general", text: "Swift sockets"),
        "requestHistory": .requestHistory(room: "general", count: 20),
        "fetchHistory": .fetchHistory(room: "general", direction: .after, seq: 300, limit: 50),
        "setAway": .setAway(text: "lunch"),
        "register": .register(password: "hunter2"),
        "login": .login(account: "alice", password: "hunter2"),
        "changePassword": .changePassword(old: "hunter2", new: "correct horse"),
        "dropAccount": .dropAccount(password: "hunter2"),
        "registered": .registered(account: "alice"),
        "loggedIn": .loggedIn(account: "alice"),
        "passwordChanged": .passwordChanged(account: "alice"),
        "accountDropped": .accountDropped(account: "alice"),
        "kick": .kick(room: "general", nick: "bob", reason: "spam"),
        "setMode": .setMode(room: "general", mode: .key, on: true, argument: "s3cret"),
        "invite": .invite(room: "general", nick: "bob"),
        "listBans": .listBans(room: "general"),
        "serverBan": .serverBan(on: true, mask: "address:203.0.113.0/24", reason: "flood"),
        "kill": .kill(nick: "bob", reason: "abuse"),
        "joinWithKey": .joinWithKey(room: "general", key: "s3cret"),
        "kicked": .kicked(room: "general", seq: 42, time: time, nick: "bob", by: "alice", reason: "spam"),
        "modeChanged": .modeChanged(room: "general", seq: 43, time: time, by: "alice", mode: .ban, on: true, argument: "nick:bob"),
        "invited": .invited(room: "general", nick: "bob", by: "alice"),
        "roomModes": .roomModes(
            room: "general",
            modes: RoomModes(founder: "alice", moderated: true, topicLock: true, memberLimit: 50, ops: ["alice"], voices: ["bob"])),
        "banList": .banList(
            room: "general", entries: [BanEntry(mask: "nick:bob", setBy: "alice", time: time, reason: "spam")]),
        "done": .done(request: .kill, text: "killed bob"),
        "welcome": .welcome(version: 1, nick: "alice", maxFrameSize: 16384, motd: "Welcome!"),
        "message": .message(room: "general", seq: 7, time: time, sender: "alice", text: "hello"),
        "action": .action(room: "general", seq: 8, time: time + 1500, sender: "alice", text: "waves"),
        "direct": .direct(sender: "alice", recipient: "bob", time: time, text: "hi bob"),
        "joined": .joined(room: "general", seq: 1, time: time, nick: "alice"),
        "left": .left(room: "general", seq: 9, time: time, nick: "alice"),
        "quit": .quit(room: "general", seq: 10, time: time, nick: "bob", reason: "connection reset"),
        "nickChanged": .nickChanged(room: "general", seq: 11, time: time, old: "alice", new: "alice_"),
        "nickAccepted": .nickAccepted(nick: "alice_"),
        "roomList": .roomList(rooms: [
            RoomInfo(name: "general", memberCount: 3, topic: "Swift sockets"),
            RoomInfo(name: "random", memberCount: 1, topic: ""),
        ]),
        "members": .members(room: "general", nicks: ["alice", "bob", "carol"]),
        "topic": .topic(room: "general", seq: 12, time: time, setBy: "alice", text: "Swift sockets"),
        "history": .history(room: "general", entries: [
            HistoryEntry(kind: .message, seq: 7, time: time, sender: "alice", text: "hello"),
            HistoryEntry(kind: .action, seq: 8, time: time + 1500, sender: "bob", text: "waves"),
        ]),
        "roomState": .roomState(room: "general", epoch: 0x2545_F491_4F6C_DD1D, firstSeq: 201, lastSeq: 305),
        "historyPage": .historyPage(room: "general", epoch: 0x2545_F491_4F6C_DD1D, complete: true, entries: [
            HistoryEntry(kind: .topic, seq: 302, time: time, sender: "alice", text: "v2"),
            HistoryEntry(kind: .message, seq: 304, time: time + 1500, sender: "bob", text: "hi"),
        ]),
        "roomListPage": .roomListPage(complete: false, rooms: [RoomInfo(name: "general", memberCount: 3, topic: "")]),
        "membersPage": .membersPage(room: "general", complete: true, nicks: ["alice", "bob"]),
        "away": .away(nick: "bob", text: "lunch"),
        "limits": .limits(requestRate: 50_000, requestBurst: 100, byteRate: 65_536, byteBurst: 1_048_576),
        "ping": .ping(token: 42),
        "pong": .pong(token: 42),
        "error": .error(code: .nickTaken, fatal: true, frameType: .hello, reason: "nick alice is taken"),
        "error-rate": .error(code: .rateLimited, fatal: false, frameType: .say, reason: "slow down"),
        "goodbye": .goodbye(reason: "bye"),
        "unknown": .unknown(type: FrameType(rawValue: 0x7E), payload: [1, 2, 3]),
    ]

    /// Every malformed example of docs/PROTOCOL.md by its block name, with the error it must
    /// give to a decoder with the server's 16 KiB limit.
    static let documentedErrors: [String: FrameError] = [
        "bad-too-large": .frameTooLarge(length: 16385, limit: 16384),
        "bad-empty": .truncated(.type),
        "bad-unknown-type": .unknownType(FrameType(rawValue: 0x80)),
        "bad-truncated": .truncated(.room),
        "bad-trailing": .trailingBytes(type: .ping, count: 1),
        "bad-non-minimal": .nonMinimalInteger(.token),
        "bad-overflow": .integerOverflow(.token),
        "bad-utf8": .invalidUTF8(.text),
        "bad-name": .badName(.room, .invalidCharacter),
        "bad-value": .invalidValue(.fatal),
        "bad-topic-in-history": .invalidValue(.entryKind),
    ]

    /// Frames beyond the examples: edge values, empty lists and texts, multi-byte UTF-8.
    static let edgeCases: [Frame] = [
        .hello(version: .max, nick: "Z{}|^`[]\\_-9", password: ""),
        .say(room: "a", text: ""),
        .say(room: String(repeating: "x", count: 32), text: "héllo wörld 👋 — ☃"),
        .tell(recipient: String(repeating: "n", count: 24), text: String(repeating: "long ", count: 100)),
        .requestHistory(room: "r", count: .max),
        .welcome(version: 0, nick: "a", maxFrameSize: .max, motd: ""),
        .message(room: "general", seq: .max, time: .max, sender: "alice", text: "\u{0}\u{7F}"),
        .roomList(rooms: []),
        .members(room: "empty", nicks: []),
        .history(room: "general", entries: []),
        .fetchHistory(room: "r", direction: .before, seq: 0, limit: 0),
        .fetchHistory(room: "r", direction: .after, seq: .max, limit: .max),
        .setAway(text: ""),
        .roomState(room: "r", epoch: .max, firstSeq: 0, lastSeq: 0),
        .historyPage(room: "r", epoch: 1, complete: false, entries: []),
        .roomListPage(complete: true, rooms: []),
        .membersPage(room: "r", complete: false, nicks: []),
        .away(nick: "a", text: ""),
        .limits(requestRate: .max, requestBurst: 0, byteRate: .max, byteBurst: 0),
        .history(room: "general", entries: [
            HistoryEntry(kind: .message, seq: 1, time: .max, sender: "a", text: ""),
            HistoryEntry(kind: .action, seq: 2, time: 0, sender: "b", text: "clock went back"),
            HistoryEntry(kind: .message, seq: .max, time: 5, sender: "c", text: "last"),
        ]),
        .ping(token: 0),
        .pong(token: .max),
        .error(code: ErrorCode(rawValue: 65535), fatal: false, frameType: .none, reason: ""),
        .goodbye(reason: ""),
        .unknown(type: FrameType(rawValue: 0x7F), payload: []),
        .kick(room: "r", nick: "a", reason: ""),
        .setMode(room: "r", mode: RoomMode(rawValue: 255), on: false, argument: ""),
        .listBans(room: ""),
        .serverBan(on: false, mask: "", reason: ""),
        .roomModes(room: "r", modes: RoomModes()),
        .banList(room: "", entries: [BanEntry(mask: "room:spam", setBy: "", time: .max, reason: "")]),
        .modeChanged(room: "r", seq: .max, time: 0, by: "a", mode: .registered, on: false, argument: ""),
        .done(request: .serverBan, text: ""),
    ]

    /// All of the above.
    static var all: [Frame] {
        documented.keys.sorted().map { documented[$0]! } + edgeCases
    }
}
