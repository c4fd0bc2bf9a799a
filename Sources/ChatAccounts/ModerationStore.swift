import ChatProtocol
import Dispatch
import SocketCore

/// A registered room's settings as a store keeps them: what lasts while it has no members.
public struct RegisteredRoomRecord: Sendable, Equatable {
    /// The room's name.
    public var name: String
    /// The founder's account key.
    public var founder: String
    /// Mode `inviteOnly`.
    public var inviteOnly: Bool
    /// Mode `moderated`.
    public var moderated: Bool
    /// Mode `topicLock`.
    public var topicLock: Bool
    /// The key joining needs; empty for none.
    public var key: String
    /// The most members; 0 for no limit.
    public var memberLimit: Int
    /// The room's bans, oldest first.
    public var bans: [BanEntry]
    /// Roles given to accounts (`op` or `voice`), by account key.
    public var roles: [String: String]

    /// Describes a registered room.
    public init(
        name: String, founder: String, inviteOnly: Bool, moderated: Bool, topicLock: Bool, key: String, memberLimit: Int,
        bans: [BanEntry], roles: [String: String]
    ) {
        self.name = name
        self.founder = founder
        self.inviteOnly = inviteOnly
        self.moderated = moderated
        self.topicLock = topicLock
        self.key = key
        self.memberLimit = memberLimit
        self.bans = bans
        self.roles = roles
    }
}

/// A role a member held in an unregistered room when the server stopped, for it to take back
/// when it rejoins after the restart (docs/SERVER.md, "Moderation").
public struct RememberedRole: Sendable, Equatable {
    /// The room.
    public var room: String
    /// Who held it: `account:KEY` for a member logged in, `nick:KEY` for a guest.
    public var holder: String
    /// `op` or `voice`.
    public var role: String

    /// Describes a role held at a stop.
    public init(room: String, holder: String, role: String) {
        self.room = room
        self.holder = holder
        self.role = role
    }
}

/// Everything a moderation store holds, read once at start-up.
public struct ModerationSnapshot: Sendable, Equatable {
    /// Every registered room.
    public var rooms: [RegisteredRoomRecord]
    /// The server's bans, oldest first.
    public var serverBans: [BanEntry]
    /// The roles members held in unregistered rooms when the server last stopped cleanly.
    public var rememberedRoles: [RememberedRole]

    /// Describes what a store holds.
    public init(rooms: [RegisteredRoomRecord] = [], serverBans: [BanEntry] = [], rememberedRoles: [RememberedRole] = []) {
        self.rooms = rooms
        self.serverBans = serverBans
        self.rememberedRoles = rememberedRoles
    }
}

/// One change for a moderation store.
public enum ModerationWrite: Sendable, Equatable {
    /// The room's settings are now these; nil: it is no longer registered.
    case room(String, RegisteredRoomRecord?)
    /// The server's bans are now these (at most 1,000, so written whole).
    case serverBans([BanEntry])
    /// The roles held in unregistered rooms are now these (written whole at a stop; emptied once
    /// read back, so that a later crash does not bring back stale ones).
    case rememberedRoles([RememberedRole])
}

/// Where a server keeps registered rooms and server bans: memory (`MemoryModerationStore`,
/// `--no-persistence`) or SQLite in the data directory (`SQLiteModerationStore`).
///
/// As with accounts (`AccountStore`), the records are few and small, read whole at start-up and
/// kept in memory, so no join waits for a read; changes are written off the event loop. Unlike an
/// account change, a moderation change is not held until it is written: a client sees its mode
/// change at once, and a write that fails is logged (the change holds until the server stops).
public protocol ModerationStore: AnyObject, Sendable {
    /// Everything stored, read at start-up.
    func loadAll() throws(AccountStoreError) -> ModerationSnapshot
    /// Applies `writes` in order, off the caller's thread; calls `completion` on `queue` with
    /// the first failure, if any.
    func apply(_ writes: [ModerationWrite], replyOn queue: DispatchQueue, _ completion: @escaping @Sendable (AccountStoreError?) -> Void)
}

/// Registered rooms and server bans in memory only: lost when the server stops.
///
/// `@unchecked Sendable`: the snapshot is guarded by `lock`.
public final class MemoryModerationStore: ModerationStore, @unchecked Sendable {
    private let lock = Locked(ModerationSnapshot())

    /// An empty store.
    public init() {}

    /// What was written since this store was made.
    public func loadAll() throws(AccountStoreError) -> ModerationSnapshot {
        lock.withLock { $0 }
    }

    /// Keeps `writes`; answers on `queue`.
    public func apply(_ writes: [ModerationWrite], replyOn queue: DispatchQueue, _ completion: @escaping @Sendable (AccountStoreError?) -> Void) {
        lock.withLock { snapshot in
            for write in writes {
                switch write {
                case .room(let name, let record):
                    snapshot.rooms.removeAll { $0.name == name }
                    if let record { snapshot.rooms.append(record) }
                case .serverBans(let bans):
                    snapshot.serverBans = bans
                case .rememberedRoles(let roles):
                    snapshot.rememberedRoles = roles
                }
            }
        }
        queue.async { completion(nil) }
    }
}
