/// The code carried by an `error` frame.
///
/// An open set: every UInt16 decodes, so a peer running a later version can send codes this
/// one does not know; show such an error by its reason. docs/PROTOCOL.md, "Error codes",
/// says when each is sent and whether it is normally fatal.
public struct ErrorCode: RawRepresentable, Hashable, Sendable {
    /// The code on the wire.
    public var rawValue: UInt16

    /// Wraps a code, known or not.
    @inlinable
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    /// The server does not speak the version the client asked for.
    public static let unsupportedVersion = ErrorCode(rawValue: 1)
    /// Someone else holds that nick (nicks compare ignoring ASCII case).
    public static let nickTaken = ErrorCode(rawValue: 2)
    /// The nick breaks the naming rules.
    public static let invalidNick = ErrorCode(rawValue: 3)
    /// The password is missing or wrong.
    public static let badPassword = ErrorCode(rawValue: 4)
    /// The server has no room for another connection.
    public static let serverFull = ErrorCode(rawValue: 5)
    /// The client's address has too many connections open.
    public static let tooManyConnectionsFromAddress = ErrorCode(rawValue: 6)
    /// A frame other than `hello` arrived before the handshake completed.
    public static let handshakeRequired = ErrorCode(rawValue: 7)
    /// No `hello` arrived in time.
    public static let handshakeTimeout = ErrorCode(rawValue: 8)
    /// The client sends too fast; the frame named in `frameType` was dropped.
    public static let rateLimited = ErrorCode(rawValue: 9)
    /// A frame exceeded the receiver's size limit.
    public static let frameTooLarge = ErrorCode(rawValue: 10)
    /// A frame could not be decoded; the reason says why.
    public static let malformedFrame = ErrorCode(rawValue: 11)
    /// The client is in as many rooms as the server allows.
    public static let tooManyRooms = ErrorCode(rawValue: 12)
    /// The request names a room the client is not in.
    public static let notInRoom = ErrorCode(rawValue: 13)
    /// The room name breaks the naming rules.
    public static let invalidRoom = ErrorCode(rawValue: 14)
    /// No one holds the nick a direct message is addressed to.
    public static let noSuchNick = ErrorCode(rawValue: 15)
    /// Nothing arrived from the client for too long.
    public static let idleTimeout = ErrorCode(rawValue: 16)
    /// The client reads too slowly; its outbound queue overflowed.
    public static let slowConsumer = ErrorCode(rawValue: 17)
    /// The server is shutting down.
    public static let shuttingDown = ErrorCode(rawValue: 18)
    /// A bug or resource failure on the sender's side.
    public static let `internal` = ErrorCode(rawValue: 19)
    /// A well-formed frame that the receiver does not accept from this peer or in this state
    /// (a server-to-client frame sent by a client, a second `hello`).
    public static let unexpectedFrame = ErrorCode(rawValue: 20)
    /// The client is already in the room it asked to join.
    public static let alreadyInRoom = ErrorCode(rawValue: 21)
    /// The server could not store a room event (its disk is full, say), so it did not deliver
    /// it; the reason says why. Not fatal: later requests may succeed.
    public static let storageFailed = ErrorCode(rawValue: 22)
    /// A cluster node cannot reach what the cluster shares (its Redis), so it did not do what
    /// was asked; the reason says why. Not fatal, except in answer to `hello`: later requests may
    /// succeed, on this node once it reconnects or on another.
    public static let unavailable = ErrorCode(rawValue: 23)
    /// Version 3: the server cannot take another password check now (its hashing queue is full);
    /// the request was not looked at. Not fatal: try again in a moment.
    public static let busy = ErrorCode(rawValue: 24)
    /// Version 3: the account does not exist or the password is wrong. Fatal only in the handshake.
    public static let authenticationFailed = ErrorCode(rawValue: 25)
    /// The nick belongs to an account the client is not logged in as (sent to clients of every
    /// version, which show it by its reason).
    public static let nickReserved = ErrorCode(rawValue: 26)
    /// Version 3: too many password guesses for this account or from this address, or too many
    /// registrations from this address; the request was not looked at. The reason says when to retry.
    public static let throttled = ErrorCode(rawValue: 27)
    /// Version 3: the nick is already a registered account.
    public static let accountExists = ErrorCode(rawValue: 28)
    /// Version 3: the server holds as many accounts as it allows.
    public static let tooManyAccounts = ErrorCode(rawValue: 29)
    /// Version 3: a password over plain TCP from a non-loopback address; use TLS.
    public static let plainPasswordRefused = ErrorCode(rawValue: 30)
    /// Version 3: the request needs a login (`changePassword`, `dropAccount`).
    public static let notLoggedIn = ErrorCode(rawValue: 31)
    /// Fatal: the account's owner logged in from another connection and took the nick back; a
    /// client should not reconnect to take it again.
    public static let ghosted = ErrorCode(rawValue: 32)

    /// Version 4: the request needs ops in the room (or, for a founder's change, the founder);
    /// also the answer to a non-op's `setTopic` in a topic-locked room.
    public static let notOperator = ErrorCode(rawValue: 33)
    /// Version 4: a ban matches the client: its `join` of a room (not fatal), or its `hello` or
    /// session on a server that banned it (fatal). Sent to clients of every version.
    public static let banned = ErrorCode(rawValue: 34)
    /// Version 4: the room is invite-only and the client was not invited.
    public static let inviteOnly = ErrorCode(rawValue: 35)
    /// Version 4: the room has a key and the `join` gave another (or none).
    public static let badRoomKey = ErrorCode(rawValue: 36)
    /// Version 4: the room has as many members as its limit allows.
    public static let roomFull = ErrorCode(rawValue: 37)
    /// Version 4: the room is moderated and the client is neither op nor voiced.
    public static let moderated = ErrorCode(rawValue: 38)
    /// Fatal: a server operator ended the session (sent to clients of every version).
    public static let killed = ErrorCode(rawValue: 39)
    /// Version 4: the request needs a server operator's account.
    public static let notAdmin = ErrorCode(rawValue: 40)
    /// Version 4: a mode this server does not know, or a mode's argument or a ban mask that is
    /// not valid; the reason says which.
    public static let invalidArgument = ErrorCode(rawValue: 41)
    /// Version 4: the room (or the server) holds as many bans as it allows.
    public static let listFull = ErrorCode(rawValue: 42)

    /// Every code this version defines, in numeric order.
    public static let allKnown: [ErrorCode] = (1...42).map(ErrorCode.init(rawValue:))

    /// The code's name as used in docs/PROTOCOL.md, or nil if this version does not define it.
    public var name: String? {
        let names = [
            "unsupportedVersion", "nickTaken", "invalidNick", "badPassword", "serverFull",
            "tooManyConnectionsFromAddress", "handshakeRequired", "handshakeTimeout",
            "rateLimited", "frameTooLarge", "malformedFrame", "tooManyRooms", "notInRoom",
            "invalidRoom", "noSuchNick", "idleTimeout", "slowConsumer", "shuttingDown",
            "internal", "unexpectedFrame", "alreadyInRoom", "storageFailed", "unavailable",
            "busy", "authenticationFailed", "nickReserved", "throttled", "accountExists",
            "tooManyAccounts", "plainPasswordRefused", "notLoggedIn", "ghosted", "notOperator",
            "banned", "inviteOnly", "badRoomKey", "roomFull", "moderated", "killed", "notAdmin",
            "invalidArgument", "listFull",
        ]
        let index = Int(rawValue) - 1
        return names.indices.contains(index) ? names[index] : nil
    }
}

extension ErrorCode: CustomStringConvertible {
    /// The name and number, e.g. `nickTaken (2)`, or just the number for an unknown code.
    public var description: String {
        name.map { "\($0) (\(rawValue))" } ?? "\(rawValue)"
    }
}
