import Foundation
import Testing
import TestSupport

/// chat-client's signals while it starts (ClientApp.swift, `SignalTrap`): caught from its first
/// instruction, so one that comes before the trap acts on them is neither lost nor left to its
/// default action, which would end the client without its exit path.
@Suite struct ClientSignalTests {
    /// The client is held before its trap exists: it reads its server password from a FIFO that
    /// nothing has written yet (a password manager's pipe, `--password-file <(pass show chat)`,
    /// is read the same way). A SIGTERM then waits; once the password comes, the client starts,
    /// the trap takes the signal, and the client leaves through its exit path.
    @Test func aSigtermWhileTheClientStartsEndsItThroughItsExitPath() async throws {
        let server = try await ChatServerProcess(arguments: ["--handshake-timeout", "60"])
        defer { server.stop() }
        let directory = try TemporaryDirectory(prefix: "chat-client-signals")
        defer { directory.remove() }
        let passwordPath = directory.path + "/password"
        try #require(mkfifo(passwordPath, 0o600) == 0, "mkfifo: \(String(cString: strerror(errno)))")

        let client = try pipeClient(["--nick", "ann", "--port", "\(server.port)", "--password-file", passwordPath])
        defer { client.stop() }
        // A writer's non-blocking open succeeds once the client has opened the FIFO to read.
        var writer: Int32 = -1
        let opened = await eventually(timeout: .seconds(30)) {
            writer = open(passwordPath, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
            return writer >= 0
        }
        try #require(opened, "the client never opened its password file: \(client.output)")
        defer { close(writer) }

        client.signal(SIGTERM)
        // Unblocked, SIGTERM's default action ends the client at once (status 143); the test
        // then stops here rather than write to a FIFO nobody reads.
        try await Task.sleep(for: .milliseconds(200))
        try #require(client.exitStatus == nil, "the client still reads its password, the signal pending")

        let line = Array("secret\n".utf8)
        #expect(write(writer, line, line.count) == line.count)
        close(writer)
        writer = -1
        #expect(await client.waitForExit() == 0, "the pending SIGTERM ended the client through its exit path: \(client.output)")
    }
}
