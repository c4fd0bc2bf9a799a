import ChatProtocol
import ChatStorage
import Foundation
import Glibc
import Testing
import TestSupport

/// `chat-server backup DEST` and `chat-server check DIR` against the real binary (issue 38,
/// finding 6): a backup taken while a server is under a steady load — with SQLite's write lock
/// held elsewhere part of the time, so that acknowledged messages sit in the journal only — is
/// restored into a new server that serves every message acknowledged before the backup began,
/// every account and every ban.
@Suite("Online backup and check, against the real server", .serialized)
struct BackupTests {
    @Test func aBackupUnderLoadRestoresEveryAcknowledgedMessageAccountAndBan() async throws {
        let scratch = try TemporaryDirectory(prefix: "chat-backup")
        defer { scratch.remove() }
        let data = scratch.path + "/data"
        let copy = scratch.path + "/copy"
        // The operator's account is made by the operator, not over the network (SECURITY.md).
        let passwordFile = scratch.path + "/root-password"
        try "pw-root\n".write(toFile: passwordFile, atomically: true, encoding: .utf8)
        let made = try await Operations.run(["account", "add", "root", "--data-dir", data, "--password-file", passwordFile])
        #expect(made.status == 0, "chat-server account add root: \(made.output)")
        let server = try await ChatServerProcess(
            arguments: ["--data-dir", data, "--admin-account", "root", "--no-rate-limits", "--log-level", "warning"])
        defer { server.stop() }

        // Accounts and a server ban, in accounts.sqlite and moderation.sqlite.
        let root = try await TestClient.connect(to: server, nick: "guest1", version: 4)
        try await root.send(.login(account: "root", password: "pw-root"))
        _ = try await root.waitFor("root's login") { $0 == .loggedIn(account: "root") ? true : nil }
        let carol = try await Self.register("carol", on: server)
        carol.close()
        try await root.send(.serverBan(on: true, mask: "address:127.0.0.9", reason: "backup drill"))
        _ = try await root.waitFor("the ban's answer") { frame -> Bool? in
            if case .done(.serverBan, _) = frame { return true }
            if case .error = frame { Issue.record("the ban was refused: \(frame)") }
            return nil
        }
        root.close()

        // A steady load: batches of 20 lines, each batch's echoes awaited, bounded in count and time.
        let sender = try await TestClient.connect(to: server, nick: "sender", version: 2)
        let (epoch, _, _) = try await sender.joinRoom("load")
        let acknowledged = AcknowledgedLines()
        let load = Task {
            let deadline = ContinuousClock.now + .seconds(60)
            for batch in 0..<200 where ContinuousClock.now < deadline && !Task.isCancelled {
                let texts = (0..<20).map { "line \(batch)-\($0)" }
                try await sender.send(texts.map { .say(room: "load", text: $0) })
                let echoed = try await sender.collect(texts.count, "echoes") { frame -> String? in
                    if case .message("load", _, _, "sender", let text) = frame { return text }
                    return nil
                }
                acknowledged.add(echoed)
            }
        }
        #expect(await eventually { acknowledged.count >= 400 }, "the load runs")
        // The database takes nothing in while this holds its write lock: what is acknowledged
        // from now on is in the journal only, until the lock goes.
        let blocker = try SQLiteDatabase(path: data + "/" + RoomDatabase.fileName, mode: .readWrite)
        try blocker.execute("BEGIN IMMEDIATE")
        let before = acknowledged.count
        #expect(await eventually { acknowledged.count >= before + 200 }, "the load goes on into the journal")
        let journaled = RoomJournal.files(in: data).count
        #expect(journaled > 0, "acknowledged lines wait in the journal")

        let mustHave = acknowledged.snapshot()
        let backup = try await Operations.run(["backup", copy, "--data-dir", data])
        #expect(backup.status == 0, "chat-server backup succeeds:\n\(backup.output)")
        try blocker.execute("ROLLBACK")
        load.cancel()
        _ = try? await load.value
        sender.close()
        #expect(backup.output.contains("journal files"), "it reads the journal:\n\(backup.output)")

        let check = try await Operations.run(["check", copy])
        #expect(check.status == 0, "chat-server check accepts the copy:\n\(check.output)")
        server.stop()

        // The copy, served by a new server.
        let restored = try await ChatServerProcess(arguments: ["--data-dir", copy, "--admin-account", "root", "--log-level", "warning"])
        defer { restored.stop() }
        #expect(await restored.child.waitForOutput("started on a restored backup"), "the restore is logged")
        let checker = try await TestClient.connect(to: restored, nick: "checker", version: 2)
        let (restoredEpoch, _, _) = try await checker.joinRoom("load")
        #expect(restoredEpoch != epoch, "a restored room moves to a new epoch: clients that saw later lines see the break")
        let stored = Set(try await checker.fetchAll("load", after: 0).map(\.text))
        let missing = mustHave.subtracting(stored)
        #expect(missing.isEmpty, "\(missing.count) of \(mustHave.count) lines acknowledged before the backup are missing, e.g. \(missing.prefix(3))")
        checker.close()
        for account in ["root", "carol"] {
            let client = try await TestClient.connect(to: restored, nick: "guest\(account)", version: 4)
            try await client.send(.login(account: account, password: "pw-\(account)"))
            let answer = try await client.waitFor("the login's answer") { frame -> Frame? in
                switch frame {
                case .loggedIn, .error: frame
                default: nil
                }
            }
            #expect(answer == .loggedIn(account: account), "\(account)'s account is restored: \(answer)")
            client.close()
        }
        let banned = try BlockingSocket(port: restored.port, source: "127.0.0.9")
        defer { banned.close() }
        await banned.send([.hello(version: 4, nick: "evader", password: nil)])
        #expect(await errorCode(from: banned) == .banned, "the server ban is restored")
    }

    @Test func checkRefusesADamagedCopyAndADirectoryInUse() async throws {
        let scratch = try TemporaryDirectory(prefix: "chat-backup")
        defer { scratch.remove() }
        let data = scratch.path + "/data"
        let server = try await ChatServerProcess(arguments: ["--data-dir", data, "--log-level", "warning"])
        defer { server.stop() }
        let inUse = try await Operations.run(["check", data])
        #expect(inUse.status != 0 && inUse.output.contains("another chat-server is using it"), "\(inUse.output)")
        let copy = scratch.path + "/copy"
        let backup = try await Operations.run(["backup", copy, "--data-dir", data])
        #expect(backup.status == 0, "\(backup.output)")
        let again = try await Operations.run(["backup", copy, "--data-dir", data])
        #expect(again.status != 0 && again.output.contains("not empty"), "a backup never overwrites one:\n\(again.output)")
        // Damage the copy's rooms database: every page after the first (its header) overwritten.
        let path = copy + "/" + RoomDatabase.fileName
        let size = try #require(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
        let file = try FileHandle(forUpdating: URL(fileURLWithPath: path))
        try file.seek(toOffset: 4096)
        file.write(Data(repeating: 0xA5, count: size - 4096))
        try file.close()
        let damaged = try await Operations.run(["check", copy])
        #expect(damaged.status == 65, "a damaged copy: exit 65 (EX_DATAERR):\n\(damaged.output)")
        #expect(damaged.output.contains(RoomDatabase.fileName), "the damaged file is named:\n\(damaged.output)")
    }

    /// Registers `nick` with the password `pw-<nick>` (a version 4 session, logged in).
    static func register(_ nick: String, on server: ChatServerProcess) async throws -> TestClient {
        let client = try await TestClient.connect(to: server, nick: nick, version: 4)
        try await client.send(.register(password: "pw-\(nick)"))
        #expect(try await registration(of: client) == .registered(account: nick))
        return client
    }
}

/// The lines a sender saw echoed, shared between the load's task and the test.
final class AcknowledgedLines: @unchecked Sendable {
    private let lock = NSLock()
    private var lines: Set<String> = []

    func add(_ more: [String]) { lock.withLock { lines.formUnion(more) } }
    var count: Int { lock.withLock { lines.count } }
    func snapshot() -> Set<String> { lock.withLock { lines } }
}
