import ChatAccounts
import ChatCore
import Dispatch
import SocketCore
import Testing
import TestSupport

/// The account stores behind `AccountStore`: what one keeps, another opening of the same file
/// reads back (SQLite), and memory keeps only for its own lifetime.
@Suite("Account stores")
struct AccountStoreTests {
    static let alice = AccountRecord(name: "Alice", key: "alice", passwordHash: "$argon2id$v=19$m=8,t=1,p=1$c2FsdA$aGFzaA", created: 1_700_000_000_000)
    static let bob = AccountRecord(name: "bob", key: "bob", passwordHash: "$argon2id$v=19$m=8,t=1,p=1$c2FsdA$b3RoZXI", created: 1_700_000_000_001)

    @Test func sqliteKeepsRecordsAcrossOpeningsAndDeletesThem() throws {
        let directory = try TemporaryDirectory(prefix: "chat-accounts-store")
        defer { directory.remove() }
        do {
            let store = try SQLiteAccountStore(directory: directory.path)
            #expect(try store.loadAll().isEmpty)
            #expect(Self.wait { store.save(Self.alice, replyOn: $0, $1) } == "kept")
            #expect(Self.wait { store.save(Self.bob, replyOn: $0, $1) } == "kept")
            var changed = Self.alice
            changed.passwordHash = "$argon2id$v=19$m=8,t=1,p=1$c2FsdA$bmV3"
            #expect(Self.wait { store.save(changed, replyOn: $0, $1) } == "kept", "a save replaces the record of its key")
        }
        let reopened = try SQLiteAccountStore(directory: directory.path)
        let records = try reopened.loadAll().sorted { $0.key < $1.key }
        #expect(records.map(\.key) == ["alice", "bob"])
        #expect(records.first?.name == "Alice", "the name keeps its case")
        #expect(records.first?.passwordHash.hasSuffix("bmV3") == true)
        #expect(records.last == Self.bob)
        #expect(Self.wait { reopened.delete(key: "alice", replyOn: $0, $1) } == "kept")
        #expect(try SQLiteAccountStore(directory: directory.path).loadAll() == [Self.bob])
    }

    @Test func sqliteSaysWhyItCannotOpenItsFile() {
        #expect(throws: AccountStoreError.self) { try SQLiteAccountStore(directory: "/nonexistent/directory") }
    }

    @Test func memoryKeepsRecordsForItsOwnLifetimeOnly() throws {
        let store = MemoryAccountStore()
        #expect(Self.wait { store.save(Self.alice, replyOn: $0, $1) } == "kept")
        #expect(try store.loadAll() == [Self.alice])
        #expect(Self.wait { store.delete(key: "alice", replyOn: $0, $1) } == "kept")
        #expect(try store.loadAll().isEmpty)
        #expect(try MemoryAccountStore().loadAll().isEmpty, "a new store (a restarted server) has none")
    }

    /// Runs an asynchronous store call and waits (at most 30 s) for its answer: "kept", or why not.
    private static func wait(
        _ call: (DispatchQueue, @escaping @Sendable (Result<Void, AccountStoreError>) -> Void) -> Void
    ) -> String? {
        let answered = Locked<Result<Void, AccountStoreError>?>(nil)
        let done = DispatchSemaphore(value: 0)
        call(DispatchQueue(label: "AccountStoreTests")) { result in
            answered.withLock { $0 = result }
            done.signal()
        }
        guard done.wait(timeout: .now() + .seconds(30)) == .success else { return nil }
        return answered.withLock { result in
            switch result {
            case .success: "kept"
            case .failure(let error): error.message
            case nil: nil
            }
        }
    }
}
