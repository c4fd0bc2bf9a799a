import ChatAccounts
import ChatCore
import ChatProtocol
import Dispatch
import SocketCore
import Testing
import TestSupport

/// The moderation stores behind `ModerationStore`: what one writes, another opening of the same
/// file reads back (SQLite, a real file in a temporary directory).
@Suite("Moderation stores")
struct ModerationStoreTests {
    static let ban = BanEntry(mask: "nick:troll", setBy: "alice", time: 1_767_225_600_000, reason: "spam")
    static let room = RegisteredRoomRecord(
        name: "general", founder: "alice", inviteOnly: true, moderated: false, topicLock: true, key: "s3cret", memberLimit: 50,
        bans: [ban, BanEntry(mask: "address:192.0.2.0/24", setBy: "alice", time: 1_767_225_600_001, reason: "")],
        roles: ["bob": "voice", "carol": "op"])

    @Test func sqliteKeepsRegisteredRoomsAndServerBansAcrossOpeningsAndForgetsAnUnregisteredRoom() throws {
        let directory = try TemporaryDirectory(prefix: "chat-moderation-store")
        defer { directory.remove() }
        let serverBans = [BanEntry(mask: "address:203.0.113.0/24", setBy: "root", time: 5, reason: "flood"), Self.ban]
        do {
            let store = try SQLiteModerationStore(directory: directory.path)
            #expect(try store.loadAll() == ModerationSnapshot())
            var other = Self.room
            other.name = "other"
            other.bans = []
            #expect(Self.apply([.room("general", Self.room), .room("other", other), .serverBans(serverBans)], to: store) == nil)
        }
        let reopened = try SQLiteModerationStore(directory: directory.path)
        let snapshot = try reopened.loadAll()
        #expect(snapshot.rooms.map(\.name) == ["general", "other"])
        #expect(snapshot.rooms.first == Self.room, "bans in order, roles and modes as written")
        #expect(snapshot.serverBans == serverBans)
        var changed = Self.room
        changed.bans = [Self.ban]
        changed.roles = [:]
        #expect(Self.apply([.room("general", changed), .room("other", nil), .serverBans([])], to: reopened) == nil)
        let again = try SQLiteModerationStore(directory: directory.path).loadAll()
        #expect(again == ModerationSnapshot(rooms: [changed], serverBans: []))
    }

    @Test func sqliteSaysWhyItCannotOpenItsFile() {
        #expect(throws: AccountStoreError.self) { try SQLiteModerationStore(directory: "/nonexistent/directory") }
    }

    @Test func memoryKeepsWhatWasWrittenForItsOwnLifetime() throws {
        let store = MemoryModerationStore()
        #expect(Self.apply([.room("general", Self.room), .serverBans([Self.ban])], to: store) == nil)
        #expect(try store.loadAll() == ModerationSnapshot(rooms: [Self.room], serverBans: [Self.ban]))
        #expect(try MemoryModerationStore().loadAll() == ModerationSnapshot())
    }

    /// Applies `writes` and waits for the answer: the failure, or nil.
    private static func apply(_ writes: [ModerationWrite], to store: any ModerationStore) -> AccountStoreError? {
        let queue = DispatchQueue(label: "ModerationStoreTests")
        let done = DispatchSemaphore(value: 0)
        let answer = Locked<AccountStoreError?>(nil)
        store.apply(writes, replyOn: queue) { failure in
            answer.withLock { $0 = failure }
            done.signal()
        }
        done.wait()
        return answer.withLock { $0 }
    }
}
