import ChatCore
import Dispatch
import SocketCore

/// Where a server keeps its accounts: the one seam between the chat's account rules and the
/// backends — memory (`MemoryAccountStore`), SQLite in the data directory
/// (`SQLiteAccountStore`).
///
/// The records are few and small (at most `--max-accounts`, about 200 bytes each), so the chat
/// reads them all once at start-up and keeps them in memory: deciding whether a nick is reserved
/// then never waits for a read. Writes go through the store, off the event loop; a change is
/// confirmed to the client only once the store has kept it.
public protocol AccountStore: AnyObject, Sendable {
    /// Every record, read at start-up (before the server serves anyone).
    func loadAll() throws(AccountStoreError) -> [AccountRecord]
    /// Inserts `record`, or replaces the one with its key; calls `completion` on `queue` when kept.
    func save(_ record: AccountRecord, replyOn queue: DispatchQueue, _ completion: @escaping @Sendable (Result<Void, AccountStoreError>) -> Void)
    /// Deletes the record of `key` (nothing if there is none); calls `completion` on `queue` when done.
    func delete(key: String, replyOn queue: DispatchQueue, _ completion: @escaping @Sendable (Result<Void, AccountStoreError>) -> Void)
}

/// Accounts in memory only: lost when the server stops (docs/SERVER.md says so). The server's
/// default without persistence (`--no-persistence`).
///
/// `@unchecked Sendable`: `records` is guarded by `lock`.
public final class MemoryAccountStore: AccountStore, @unchecked Sendable {
    private let lock = Locked([String: AccountRecord]())

    /// An empty store.
    public init() {}

    /// What was saved and not deleted since this store was made.
    public func loadAll() throws(AccountStoreError) -> [AccountRecord] {
        lock.withLock { Array($0.values) }
    }

    /// Keeps `record`; answers on `queue`, never synchronously, as the other stores do.
    public func save(_ record: AccountRecord, replyOn queue: DispatchQueue, _ completion: @escaping @Sendable (Result<Void, AccountStoreError>) -> Void) {
        lock.withLock { $0[record.key] = record }
        queue.async { completion(.success(())) }
    }

    /// Forgets `key`'s record; answers on `queue`.
    public func delete(key: String, replyOn queue: DispatchQueue, _ completion: @escaping @Sendable (Result<Void, AccountStoreError>) -> Void) {
        _ = lock.withLock { $0.removeValue(forKey: key) }
        queue.async { completion(.success(())) }
    }
}
