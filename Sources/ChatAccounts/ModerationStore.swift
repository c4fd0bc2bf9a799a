import ChatCore
import ChatProtocol
import Dispatch
import SocketCore

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
