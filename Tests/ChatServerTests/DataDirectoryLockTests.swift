import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

/// The data directory belongs to one server for as long as it runs (issue 38, finding 1): its lock
/// is on the directory itself, so deleting a file in it takes nothing away, and a server whose
/// directory is deleted or replaced under it exits rather than write into whatever is there now.
@Suite("The data directory's lock, against the real server", .serialized)
struct DataDirectoryLockTests {
    /// What `chat-server` exits with when its data directory is gone (EX_IOERR): docs/OPERATIONS.md.
    static let directoryLostStatus: Int32 = 74

    @Test func aSecondServerIsRefusedEvenWhenTheLockFileIsDeleted() async throws {
        let scratch = try TemporaryDirectory(prefix: "chat-lock")
        defer { scratch.remove() }
        let data = scratch.path + "/data"
        let first = try await ChatServerProcess(arguments: ["--data-dir", data, "--log-level", "warning"])
        defer { first.stop() }
        // What an earlier server locked; deleting it must not free the directory.
        unlink(data + "/lock")
        let second = try await Operations.run(["--port", "0", "--data-dir", data])
        #expect(second.status != nil && second.status != 0, "a second server on a live directory is refused: \(second.output)")
        #expect(second.output.contains("another chat-server is using it"), "\(second.output)")
        #expect(!second.output.contains("listening on"), "the second server never listens:\n\(second.output)")
    }

    @Test func aServerWhoseDirectoryIsDeletedExitsAndNeverWritesIntoTheNextServersDirectory() async throws {
        let scratch = try TemporaryDirectory(prefix: "chat-lock")
        defer { scratch.remove() }
        let data = scratch.path + "/data"
        let first = try await ChatServerProcess(arguments: ["--data-dir", data])
        defer { first.stop() }
        let early = try await TestClient.connect(to: first, nick: "early", version: 2)
        _ = try await early.joinRoom("room")
        try await early.send((0..<5).map { .say(room: "room", text: "first server \($0)") })
        _ = try await early.collect(5, "echoes") { frame -> Bool? in
            if case .message("room", _, _, "early", _) = frame { return true }
            return nil
        }

        // An operator (or a script) deletes the directory under the running server and starts
        // another one on the same path.
        try FileManager.default.removeItem(atPath: data)
        let second = try await ChatServerProcess(arguments: ["--data-dir", data])
        let newcomer = try await TestClient.connect(to: second, nick: "newcomer", version: 2)
        _ = try await newcomer.joinRoom("room")
        try await newcomer.send((0..<3).map { .say(room: "room", text: "second server \($0)") })
        _ = try await newcomer.collect(3, "echoes") { frame -> Bool? in
            if case .message("room", _, _, "newcomer", _) = frame { return true }
            return nil
        }
        // The first server's client goes on talking: none of it may land in the new directory.
        for number in 0..<20 { try? await early.send(.say(room: "room", text: "after the deletion \(number)")) }

        let status = await first.child.waitForExit(timeout: .seconds(30))
        #expect(status == Self.directoryLostStatus, "the first server exits when its directory is gone:\n\(first.child.output)")
        #expect(first.child.output.contains("data directory"), "and says why:\n\(first.child.output)")
        early.close()
        newcomer.close()
        second.stop()

        // What the directory holds now is the second server's alone.
        let third = try await ChatServerProcess(arguments: ["--data-dir", data])
        defer { third.stop() }
        let checker = try await TestClient.connect(to: third, nick: "checker", version: 2)
        _ = try await checker.joinRoom("room")
        let texts = try await checker.fetchAll("room", after: 0).map(\.text)
        #expect(texts == (0..<3).map { "second server \($0)" }, "only the second server's lines are stored: \(texts)")
        checker.close()
    }
}
