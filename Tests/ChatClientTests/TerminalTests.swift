import ChatProtocol
import Foundation
import Glibc
import Testing

/// The real chat-client in a real terminal (tmux), against the real chat-server: typed with
/// `send-keys`, read back with `capture-pane`.
@Suite(.serialized) struct TerminalTests {
    private static let prompt = "[#general] "

    /// Starts a server, the client as alice in tmux, and a peer bob; waits until alice sees bob.
    private func start(_ body: (TestServer, TmuxSession, Peer, URL) async throws -> Void) async throws {
        let server = try await TestServer()
        defer { server.stop() }
        let home = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: home) }
        let tmux = try TmuxSession(try clientInTerminal(nick: "alice", port: server.port, home: home))
        defer { tmux.stop() }
        try await tmux.waitFor("-!- alice joined")
        let bob = try await Peer(nick: "bob", port: server.port)
        defer { bob.close() }
        try await tmux.waitFor("-!- bob joined")
        try await body(server, tmux, bob, home)
    }

    private func said(_ text: String, by sender: String) -> (Frame) -> Bool {
        { if case .message(_, _, _, let who, let what) = $0 { who == sender && what == text } else { false } }
    }

    @Test func halfTypedLineSurvivesIncomingMessages() async throws {
        try await start { _, tmux, bob, _ in
            let typed = "half typed ünï 日本 line"
            try tmux.type(typed)
            try await tmux.waitForScreen("the typed line") { _ in (try? tmux.inputLine(prompt: Self.prompt)) == Self.prompt + typed }
            try tmux.press("Left", "Left", "Left", "Left")

            for index in 1...3 {
                try await bob.say("message \(index) from bob")
                try await tmux.waitFor("<bob> message \(index) from bob")
                try await expectInputLine(typed, in: tmux, "the line is intact after message \(index)")
            }
            // The cursor is still four characters from the end: what we type lands there.
            try tmux.type("X")
            try tmux.press("Enter")
            #expect(await bob.waitFor(said("half typed ünï 日本 Xline", by: "alice")), "the line was sent with X inserted at the cursor")
        }
    }

    @Test func wrappedLineSurvivesIncomingMessages() async throws {
        try await start { _, tmux, bob, _ in
            // 11 prompt columns + 150 characters wrap over three rows of 80.
            let typed = String(repeating: "wrap-me-", count: 18) + "ünïcode"
            try tmux.type(typed)
            try await tmux.waitForScreen("the wrapped line") { _ in (try? tmux.inputLine(prompt: Self.prompt)) == Self.prompt + typed }
            try tmux.press("C-a")
            for index in 1...3 {
                try await bob.say("wrapped \(index)")
                try await tmux.waitFor("<bob> wrapped \(index)")
                try await expectInputLine(typed, in: tmux, "the wrapped line is intact after message \(index)")
            }
            try tmux.type(">")
            try tmux.press("Enter")
            #expect(await bob.waitFor(said(">" + typed, by: "alice")), "the cursor stayed at the start of the line")
        }
    }

    @Test func tabCompletesNicksAndCommands() async throws {
        try await start { _, tmux, bob, _ in
            try tmux.type("bo")
            try tmux.press("Tab")
            try tmux.type("hi")
            try await tmux.waitForScreen("the completed nick") { _ in (try? tmux.inputLine(prompt: Self.prompt)) == Self.prompt + "bob: hi" }
            try tmux.press("Enter")
            #expect(await bob.waitFor(said("bob: hi", by: "alice")), "the completed line is sent")

            try tmux.type("/ms")
            try tmux.press("Tab")
            try await tmux.waitForScreen("/ms completed") { _ in (try? tmux.inputLine(prompt: Self.prompt)) == Self.prompt + "/msg" }
            try tmux.type("b")
            try tmux.press("Tab")
            try await tmux.waitForScreen("the recipient completed") { _ in (try? tmux.inputLine(prompt: Self.prompt)) == Self.prompt + "/msg bob" }
            try tmux.type("secret")
            try await tmux.waitForScreen("the completed command") { _ in (try? tmux.inputLine(prompt: Self.prompt)) == Self.prompt + "/msg bob secret" }
            try tmux.press("Enter")
            #expect(await bob.waitFor { if case .direct("alice", "bob", _, "secret") = $0 { true } else { false } }, "the direct message arrives")
        }
    }

    @Test func historyIsRecalledAfterARestart() async throws {
        let server = try await TestServer()
        defer { server.stop() }
        let home = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: home) }
        let command = try clientInTerminal(nick: "alice", port: server.port, home: home)

        let first = try TmuxSession(command)
        defer { first.stop() }
        try await first.waitFor("-!- alice joined")
        try first.type("remember this line")
        try first.press("Enter")
        try await first.waitFor("<alice> remember this line")
        try first.type("/quit")
        try first.press("Enter")
        try await first.waitFor("EXIT=0")
        first.stop()

        let second = try TmuxSession(command)
        defer { second.stop() }
        try await second.waitFor("-!- alice joined")
        try second.press("Up")
        try await second.waitForScreen("/quit recalled") { _ in (try? second.inputLine(prompt: Self.prompt)) == Self.prompt + "/quit" }
        try second.press("Up")
        try await second.waitForScreen("the older line recalled") { _ in
            (try? second.inputLine(prompt: Self.prompt)) == Self.prompt + "remember this line"
        }
    }

    @Test func reconnectsAndRejoinsAfterTheServerRestarts() async throws {
        var server = try await TestServer()
        defer { server.stop() }
        let port = server.port
        let home = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: home) }
        let tmux = try TmuxSession(try clientInTerminal(nick: "alice", port: port, home: home))
        defer { tmux.stop() }
        try await tmux.waitFor("-!- alice joined")

        server.stop()
        try await tmux.waitFor("disconnected:")
        try tmux.type("typed while offline")
        server = try await TestServer(port: port)
        try await tmux.waitForScreen("a second connection") { rows in
            rows.filter { $0.contains("connected to 127.0.0.1:\(port) as alice") && !$0.contains("dis") }.count >= 2
        }
        let bob = try await Peer(nick: "bob", port: port)
        defer { bob.close() }
        try await bob.say("welcome back")
        try await tmux.waitFor("<bob> welcome back")
        try await expectInputLine("typed while offline", in: tmux, "the half-typed line survived the outage")
        try tmux.press("Enter")
        #expect(await bob.waitFor(said("typed while offline", by: "alice")), "alice talks in #general again")
    }

    @Test func quitLeavesTheTerminalSane() async throws {
        try await start { _, tmux, bob, _ in
            try tmux.type("/quit gone fishing")
            try tmux.press("Enter")
            try await tmux.waitFor("EXIT=0")
            try await expectSaneTerminal(tmux)
            #expect(await bob.waitFor { if case .quit("general", _, _, "alice", "gone fishing") = $0 { true } else { false } },
                    "the server got the goodbye")
            try tmux.type("typed after")
            try tmux.press("Enter")
            try await tmux.waitFor("SHELL-READ=typed after")
        }
    }

    @Test func ctrlCLeavesTheTerminalSane() async throws {
        try await start { _, tmux, bob, _ in
            try tmux.type("half a thought")
            try tmux.press("C-c")
            try await tmux.waitFor("EXIT=0")
            try await expectSaneTerminal(tmux)
            #expect(await bob.waitFor { if case .quit("general", _, _, "alice", "interrupted") = $0 { true } else { false } },
                    "Ctrl-C says goodbye before leaving")
            try tmux.type("typed after")
            try tmux.press("Enter")
            try await tmux.waitFor("SHELL-READ=typed after")
        }
    }

    @Test(arguments: [(SIGTERM, "terminated"), (SIGHUP, "terminal closed")])
    func signalSaysGoodbyeAndLeavesTheTerminalSane(signal: Int32, reason: String) async throws {
        try await start { _, tmux, bob, _ in
            try tmux.type("half a thought")
            let client = try #require(try tmux.clientPID(), "the client should be running in the pane")
            kill(client, signal)
            try await tmux.waitFor("EXIT=0")
            try await expectSaneTerminal(tmux)
            #expect(await bob.waitFor { if case .quit("general", _, _, "alice", reason) = $0 { true } else { false } },
                    "signal \(signal) says goodbye (\(reason)) before leaving")
        }
    }

    @Test func ctrlDOnAnEmptyLineLeaves() async throws {
        try await start { _, tmux, _, _ in
            try tmux.press("C-d")
            try await tmux.waitFor("EXIT=0")
            try await expectSaneTerminal(tmux)
        }
    }

    /// Expects the prompt row (and the rows it wraps onto) to read `typed`. The client redraws the
    /// prompt right after printing a message, but tmux may show the two writes separately, so
    /// this waits for the redraw; a mangled line still fails when the wait runs out.
    private func expectInputLine(_ typed: String, in tmux: TmuxSession, _ what: String) async throws {
        let intact = try await eventually(timeout: .seconds(10)) { try tmux.inputLine(prompt: Self.prompt) == Self.prompt + typed }
        let shown = try tmux.inputLine(prompt: Self.prompt)
        #expect(intact, "\(what): the prompt row reads \(String(describing: shown))")
    }

    private func expectSaneTerminal(_ tmux: TmuxSession) async throws {
        // The wrapper prints EXIT= first and runs stty for the TTY= line after it.
        try await tmux.waitFor("TTY=")
        let modes = try tmux.screen().first { $0.hasPrefix("TTY=") } ?? ""
        for mode in ["icanon", "echo", "isig"] {
            #expect(modes.contains(mode) && !modes.contains("-\(mode)"), "\(mode) is back on: \(modes)")
        }
    }
}
