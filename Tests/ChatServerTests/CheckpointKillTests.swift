import ChatProtocol
import ChatStorage
import Foundation
import Glibc
import TestSupport
import Testing

/// Whether the last checkpoint line in a server's output says one started and none ended
/// after it: a server killed then died inside a checkpoint run.
func endsInsideACheckpoint(_ output: String) -> Bool {
    guard let started = output.range(of: "checkpoint started", options: .backwards) else { return false }
    guard let done = output.range(of: "checkpoint done", options: .backwards) else { return true }
    return started.lowerBound > done.lowerBound
}

@Suite("A server killed inside a checkpoint", .serialized)
struct CheckpointKillTests {
    /// Checkpoints copy the log into the database file off the event loop, and a restart pass
    /// lets the next commit write the log over from its start: a kill in the middle of either
    /// must lose nothing a client was shown. Checkpoints are made frequent (every 16 pages,
    /// `CHAT_SERVER_CHECKPOINT_PAGES`), each pausing after its first pass
    /// (`CHAT_SERVER_CHECKPOINT_PAUSE_MS`), and logged at debug level; under load, the test kills
    /// the server (SIGKILL) when the last line says a run started, keeps the round only if
    /// the dead server's last line still says so, and restarts it on the same directory. It
    /// fails unless at least one kill landed inside a run.
    @Test func everyEchoedMessageSurvivesAKillInsideACheckpoint() async throws {
        let data = try TemporaryDirectory(prefix: "chat-checkpoint-kill")
        defer { data.remove() }
        // No bound on events kept: retention deleting the oldest of a room's 100,000 would look
        // like messages lost to the kills.
        let arguments = ["--data-dir", data.path, "--no-rate-limits", "--log-level", "debug", "--retain-events", "0"]
        // Each run also waits 300 ms after its first pass, the database file partly written
        // from the log: the kill lands there for certain, not by luck of timing on a busy machine.
        let environment = ["CHAT_SERVER_CHECKPOINT_PAGES": "16", "CHAT_SERVER_CHECKPOINT_PAUSE_MS": "300"]
        var seen = Set<SeenMessage>()
        var killsInside = 0
        var rounds = 0
        while killsInside < 2, rounds < 6 {
            rounds += 1
            let round = rounds
            let server = try await ChatServerProcess(arguments: arguments, environment: environment)
            var talkers: [TestClient] = []
            for index in 0..<3 {
                let client = try await TestClient.connect(port: server.port, nick: "talker\(index)", version: 2)
                _ = try await client.joinRoom("load")
                talkers.append(client)
            }
            var readers: [Task<[SeenMessage], Never>] = []
            var senders: [Task<Void, Never>] = []
            for (index, client) in talkers.enumerated() {
                readers.append(Task { await client.messagesUntilClosed(in: "load") })
                senders.append(
                    Task {
                        for number in 0..<1_000_000 {
                            do { try await client.send(.say(room: "load", text: "r\(round)-t\(index)-\(number)")) } catch { return }
                        }
                    })
            }
            // Under load, checkpoints come one after another; the kill waits for the start of one.
            let busy = await server.child.waitFor(timeout: .seconds(60)) { output, status in
                status != nil || output.components(separatedBy: "checkpoint done").count > 5
            }
            #expect(busy, "checkpoints run under load")
            _ = await server.child.waitFor(timeout: .seconds(30)) { output, status in status != nil || endsInsideACheckpoint(output) }
            server.child.killNow()
            _ = await server.child.waitForExit(timeout: .seconds(30))
            if endsInsideACheckpoint(server.child.output) { killsInside += 1 }
            for sender in senders { await sender.value }
            for reader in readers { seen.formUnion(await reader.value) }
            for client in talkers { client.close() }
        }
        #expect(killsInside >= 1, "no kill landed inside a checkpoint run in \(rounds) rounds")

        let server = try await ChatServerProcess(arguments: arguments, environment: environment)
        let checker = try await TestClient.connect(port: server.port, nick: "checker", version: 2)
        _ = try await checker.joinRoom("load")
        let history = try await checker.fetchAll("load", after: 0)
        checker.close()
        server.stop()
        let stored = Set(history.map { SeenMessage(seq: $0.seq, sender: $0.sender, text: $0.text) })
        let missing = seen.subtracting(stored)
        #expect(seen.count >= 100, "the talkers were shown messages before each kill: \(seen.count)")
        #expect(missing.isEmpty, "\(missing.count) of \(seen.count) messages clients were shown are not stored, e.g. \(missing.prefix(3))")
        #expect(history.map(\.seq) == history.map(\.seq).sorted(), "history is in seq order")
        let database = try SQLiteDatabase(path: data.path + "/" + RoomDatabase.fileName, mode: .readOnly)
        #expect(try database.text("PRAGMA integrity_check") == "ok", "the database is intact after the kills")
        print("checkpoint kills: \(rounds) rounds, \(killsInside) inside a run, \(seen.count) messages shown, all stored")
    }
}
