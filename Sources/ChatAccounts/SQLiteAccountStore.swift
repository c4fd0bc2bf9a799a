import ChatCore
import ChatStorage
import Dispatch

/// Accounts in their own SQLite file in the data directory (`accounts.sqlite`), written on a
/// serial queue of their own.
///
/// Why a file of its own rather than a table in the rooms' database: the rooms' writer batches
/// commits for throughput (group commit) and its retention and checkpoints run on its schedule;
/// an account changes a few times in its life, and must not wait behind a room's burst of
/// messages or be tied to the room schema's migrations. The data directory's lock, taken by the
/// room store, covers this file too. Writes are synchronous (`synchronous=FULL`): a registration
/// confirmed to the client survives a power cut.
///
/// `@unchecked Sendable`: `database` and the statements are used only on `queue` (and by
/// `loadAll` before any write is asked for).
public final class SQLiteAccountStore: AccountStore, @unchecked Sendable {
    /// The file.
    public let path: String
    private let database: SQLiteDatabase
    private let queue = DispatchQueue(label: "ChatAccounts.SQLiteAccountStore")
    private let upsert: SQLiteStatement
    private let remove: SQLiteStatement

    /// Opens (creating if needed) `accounts.sqlite` in `directory`.
    public init(directory: String) throws(AccountStoreError) {
        path = directory + "/accounts.sqlite"
        do throws(SQLiteError) {
            database = try SQLiteDatabase.openStore(
                path: path,
                schema: """
                CREATE TABLE IF NOT EXISTS accounts (
                    key TEXT PRIMARY KEY NOT NULL,
                    name TEXT NOT NULL,
                    password_hash TEXT NOT NULL,
                    created INTEGER NOT NULL
                ) WITHOUT ROWID
                """)
            upsert = try database.prepare("INSERT OR REPLACE INTO accounts (key, name, password_hash, created) VALUES (?, ?, ?, ?)")
            remove = try database.prepare("DELETE FROM accounts WHERE key = ?")
        } catch {
            throw AccountStoreError("cannot open the accounts database: \(error)")
        }
    }

    /// Every stored account.
    public func loadAll() throws(AccountStoreError) -> [AccountRecord] {
        let result = queue.sync { () -> Result<[AccountRecord], AccountStoreError> in
            do throws(SQLiteError) {
                let select = try database.prepare("SELECT key, name, password_hash, created FROM accounts")
                var records: [AccountRecord] = []
                while try select.step() {
                    records.append(
                        AccountRecord(
                            name: select.text(1), key: select.text(0), passwordHash: select.text(2),
                            created: select.uint64(3)))
                }
                return .success(records)
            } catch {
                return .failure(AccountStoreError("cannot read the accounts: \(error)"))
            }
        }
        return try result.get()
    }

    /// Writes `record` on the store's queue; answers on `replyQueue`.
    public func save(
        _ record: AccountRecord, replyOn replyQueue: DispatchQueue, _ completion: @escaping @Sendable (Result<Void, AccountStoreError>) -> Void
    ) {
        queue.async { [self] in
            let result: Result<Void, AccountStoreError>
            do throws(SQLiteError) {
                upsert.reset()
                try upsert.bind(.text(record.key), .text(record.name), .text(record.passwordHash), .integer(Int64(bitPattern: record.created)))
                try upsert.run()
                result = .success(())
            } catch {
                result = .failure(AccountStoreError("cannot store the account: \(error)"))
            }
            replyQueue.async { completion(result) }
        }
    }

    /// Deletes `key`'s record on the store's queue; answers on `replyQueue`.
    public func delete(key: String, replyOn replyQueue: DispatchQueue, _ completion: @escaping @Sendable (Result<Void, AccountStoreError>) -> Void) {
        queue.async { [self] in
            let result: Result<Void, AccountStoreError>
            do throws(SQLiteError) {
                remove.reset()
                try remove.bind(.text(key))
                try remove.run()
                result = .success(())
            } catch {
                result = .failure(AccountStoreError("cannot delete the account: \(error)"))
            }
            replyQueue.async { completion(result) }
        }
    }
}

extension SQLiteDatabase {
    /// Opens (creating if needed) a small store's file at `path` — accounts, moderation — in WAL
    /// mode with `synchronous=FULL`, so a change confirmed to a client survives a power cut, and
    /// makes sure `schema` is there.
    static func openStore(path: String, schema: String) throws(SQLiteError) -> SQLiteDatabase {
        let database = try SQLiteDatabase(path: path, mode: .readWriteCreate)
        try database.execute("PRAGMA journal_mode=WAL")
        try database.execute("PRAGMA synchronous=FULL")
        try database.execute(schema)
        return database
    }
}
