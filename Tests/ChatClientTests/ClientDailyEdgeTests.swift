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

    // MARK: The topic at a reconnect

    /// A reconnect shows a room's topic again only when it changed while the client was away.
    @Test func anUnchangedTopicIsNotShownAgainAtAReconnect() async throws {
        let server = try await ChatServerProcess()
        defer { server.stop() }
        let relay = try TCPRelay(to: server.port)
        defer { relay.stop() }
        let bob = try await Peer(nick: "bob", port: server.port, version: WireProtocol.version)
        defer { bob.close() }
        let ann = try pipeClient(["--nick", "ann", "--port", "\(relay.port)", "--room", "general"])
        defer { ann.stop() }
        #expect(await ann.waitForOutput("-!- ann joined"), "ann is in: \(ann.output)")
        ann.send("/topic first topic")
        #expect(await ann.waitForOutput("topic: first topic (set by ann)"), "the topic is set: \(ann.output)")

        // Unchanged: the reconnect's summary, and the topic still shown once.
        relay.cutAll()
        #expect(await ann.waitForOutput("reconnected to 127.0.0.1:\(relay.port)"), "ann is back: \(ann.output)")
        let first = ann.lines.filter { $0.contains("topic: first topic") }
        #expect(first.count == 1, "the unchanged topic is not shown again:\n\(ann.output)")

        // Changed while away: shown.
        relay.refusesConnections = true
        relay.cutAll()
        #expect(await ann.waitForOutput("reconnecting in"), "ann is away: \(ann.output)")
        try await bob.connection.send(.setTopic(room: "general", text: "second topic"))
        #expect(await bob.waitFor { if case .topic("general", _, _, "bob", "second topic") = $0 { true } else { false } }, "bob set the topic")
        relay.refusesConnections = false
        #expect(await ann.waitForOutput("topic: second topic (set by bob)"), "the changed topic is shown: \(ann.output)")
        ann.send("/quit")
        #expect(await ann.waitForExit() == 0, "\(ann.output)")
        #expect(ann.lines.filter { $0.contains("topic: first topic") }.count == 1, "the first topic is shown once:\n\(ann.output)")
        #expect(ann.lines.filter { $0.contains("topic: second topic") }.count == 1, "the changed topic is shown once:\n\(ann.output)")
    }

    // MARK: Keys typed ahead after the hidden prompt's Enter

    /// The password, Enter and the start of the next line, arriving in one read: the password is
    /// taken, and what follows it reaches the input line.
    @Test func keysTypedAheadAfterTheHiddenPromptReachTheInputLine() async throws {
        let server = try await ChatServerProcess()
        defer { server.stop() }
        try await TerminalTests.Accounts.registerAccount("erin", password: "s3cret-erin", port: server.port)
        let home = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: home) }
        let tmux = try await TmuxSession(try clientInTerminal(nick: "erin", port: server.port, home: home))
        defer { tmux.stop() }
        try await tmux.waitFor("-!- erin_ joined")
        let bob = try await Peer(nick: "bob", port: server.port)
        defer { bob.close() }
        try await tmux.waitFor("-!- bob joined")

        try await tmux.type("/login erin")
        try await tmux.press("Enter")
        try await tmux.waitFor("password for erin (not shown")
        // One send-keys: the keys reach the client together, as fast typing over a slow link does.
        try await tmux.press("s3cret-erin", "Enter", "hello there")
        try await tmux.waitFor("logged in as erin")
        try await tmux.waitForInput("hello there", prompt: TerminalTests.prompt)
        try await tmux.press("Enter")
        #expect(await bob.waitFor(TerminalTests.said("hello there", by: "erin")), "the typed-ahead line is said once Enter is pressed")
        #expect(!bob.frames.contains { if case .message(_, _, _, _, let text) = $0 { text.contains("s3cret") } else { false } },
                "the password is never said")
    }

    /// `/password`'s three answers and the next line typed ahead in one go: each answer goes to
    /// its prompt, though the next prompt opens only once the client has taken the one before,
    /// and the last keys reach the input line; nothing typed at a prompt is said.
    @Test func answersTypedAheadGoToTheNextPromptsNotToTheRoom() async throws {
        let server = try await ChatServerProcess()
        defer { server.stop() }
        let home = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: home) }
        let tmux = try await TmuxSession(try clientInTerminal(nick: "erin", port: server.port, home: home))
        defer { tmux.stop() }
        try await tmux.waitFor("-!- erin joined")
        let bob = try await Peer(nick: "bob", port: server.port)
        defer { bob.close() }
        try await tmux.waitFor("-!- bob joined")

        try await tmux.type("/register")
        try await tmux.press("Enter")
        try await tmux.waitFor("password for erin (not shown")
        try await tmux.press("old-pw", "Enter", "old-pw", "Enter", "next line")
        try await tmux.waitFor("registered the account erin")
        try await tmux.waitForInput("next line", prompt: TerminalTests.prompt)
        try await tmux.press("C-u")

        try await tmux.type("/password")
        try await tmux.press("Enter")
        try await tmux.waitFor("password for erin (not shown")
        try await tmux.press("old-pw", "Enter", "new-pw", "Enter", "new-pw", "Enter", "after")
        try await tmux.waitFor("the password of erin is changed")
        try await tmux.waitForInput("after", prompt: TerminalTests.prompt)
        try await tmux.press("Enter")
        #expect(await bob.waitFor(TerminalTests.said("after", by: "erin")), "the line after the answers is said")
        #expect(!bob.frames.contains { if case .message(_, _, _, _, let text) = $0 { text.contains("-pw") } else { false } },
                "no password is said: \(bob.messages(from: "erin"))")
    }
}
