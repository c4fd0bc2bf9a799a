import Dispatch
import SocketCore

/// One registered account: a nick, reserved for whoever knows its password.
public struct AccountRecord: Sendable, Equatable {
    /// The nick as it was registered (case kept); the account's name.
    public var name: String
    /// The key the account is found by: the nick case-folded as nicks are (`ChatName.nickKey`).
    public var key: String
    /// The Argon2id hash, parameters and salt included (`PasswordHashing`).
    public var passwordHash: String
    /// When it was registered, in milliseconds since the Unix epoch.
    public var created: UInt64

    /// Describes an account.
    public init(name: String, key: String, passwordHash: String, created: UInt64) {
        self.name = name
        self.key = key
        self.passwordHash = passwordHash
        self.created = created
    }
}

/// Why a store could not keep a change.
public struct AccountStoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, for the client's `storageFailed` reason and the log.
    public var message: String

    /// Wraps a message.
    public init(_ message: String) { self.message = message }

    /// The message.
    public var description: String { message }
}

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
