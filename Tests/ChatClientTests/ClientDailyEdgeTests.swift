import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

/// Rough edges a tester met in daily use of the terminal and pipe client, each against the real
/// chat-server and the real chat-client (in pipe mode, or in tmux).
@Suite(.serialized) struct ClientDailyEdgeTests {
    /// Whether a frame is a room message with `text`, by anyone.
    private static func saysText(_ text: String) -> (Frame) -> Bool {
        { if case .message(_, _, _, _, let said) = $0 { said == text } else { false } }
    }

    // MARK: /register while logged in to the nick's own account

    /// `/register` again, logged in to the account of the nick: refused by the client at once,
    /// without asking for a password, and the server never asked.
    @Test func registerWhileLoggedInToTheNicksAccountIsRefusedWithoutAsking() async throws {
        let server = try await ChatServerProcess()
        defer { server.stop() }
        let home = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: home) }
        let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: server.port, home: home))
        defer { tmux.stop() }
        try await tmux.waitFor("-!- alice joined")
        try await tmux.type("/register")
        try await tmux.press("Enter")
        try await TerminalTests.Accounts.answer(tmux, prompt: "password for alice (not shown", with: "pw-alice")
        try await TerminalTests.Accounts.answer(tmux, prompt: "the same password again", with: "pw-alice")
        try await tmux.waitFor("registered the account alice")

        try await tmux.type("/register")
        try await tmux.press("Enter")
        try await tmux.waitFor("you are logged in to the account alice already")
        try await tmux.waitForInput("", prompt: TerminalTests.prompt)
        let rows = try await tmux.screen()
        #expect(rows.filter { $0.contains("password for alice") }.isEmpty,
                "no password was asked for (the first /register's prompt is gone):\n\(rows.joined(separator: "\n"))")
        #expect(!rows.contains { $0.contains("already registered") }, "the server was not asked:\n\(rows.joined(separator: "\n"))")
    }

    /// In a script the refused `/register` still takes its two answer lines: they are not said.
    @Test func aRefusedRegisterInAScriptTakesItsAnswerLines() async throws {
        let server = try await ChatServerProcess()
        defer { server.stop() }
        let watcher = try await Peer(nick: "watcher", port: server.port)
        defer { watcher.close() }
        let ann = try pipeClient(["--nick", "ann", "--port", "\(server.port)", "--room", "general"])
        defer { ann.stop() }
        #expect(await ann.waitForOutput("-!- ann joined"), "ann is in: \(ann.output)")
        for line in ["/register", "pw-ann-1", "pw-ann-1", "/register", "pw-ann-2", "pw-ann-2", "after the refusal", "/quit"] {
            ann.send(line)
        }
        #expect(await ann.waitForExit() == 0, "the script ends with status 0: \(ann.output)")
        #expect(ann.output.contains("registered the account ann"), "the first /register went through: \(ann.output)")
        #expect(ann.output.contains("you are logged in to the account ann already"), "the second is refused by the client: \(ann.output)")
        #expect(!ann.output.contains("already registered"), "the server was not asked again: \(ann.output)")
        #expect(await watcher.waitFor(Self.saysText("after the refusal")), "the line after the answers is said")
        #expect(!watcher.frames.contains(where: Self.saysText("pw-ann-2")), "the refused command's answer lines are not said")
        #expect(!ann.output.contains("pw-ann"), "no password is shown: \(ann.output)")
    }
}
