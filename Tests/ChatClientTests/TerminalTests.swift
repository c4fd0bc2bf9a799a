import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

/// The real chat-client in a real terminal (tmux), against the real chat-server: typed with
/// `send-keys`, pasted with `paste-buffer -p`, read back with `capture-pane`. One tmux test runs
/// at a time in each nested suite (each is `.serialized`), and the suites run side by side.
@Suite struct TerminalTests {
    static let prompt = "[#general] "

    /// A server, the client as alice in tmux (in `rooms`), and a peer bob in #general; the
    /// body runs once alice has seen bob arrive.
    static func start(
        serverArguments: [String] = [], rooms: [String] = ["general"], clientArguments: [String] = [],
        _ body: (ChatServerProcess, TmuxSession, Peer, URL) async throws -> Void
    ) async throws {
        let server = try await ChatServerProcess(arguments: serverArguments)
        defer { server.stop() }
        let home = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: home) }
        let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: server.port, home: home, rooms: rooms, extra: clientArguments))
        defer { tmux.stop() }
        try await tmux.waitFor("-!- alice joined")
        let bob = try await Peer(nick: "bob", port: server.port)
        defer { bob.close() }
        try await tmux.waitFor("-!- bob joined")
        try await body(server, tmux, bob, home)
    }

    static func said(_ text: String, by sender: String) -> (Frame) -> Bool {
        { if case .message(_, _, _, let who, let what) = $0 { who == sender && what == text } else { false } }
    }

    /// Expects the terminal to be back in cooked mode with echo and signals.
    static func expectSaneTerminal(_ tmux: TmuxSession) async throws {
        // The wrapper prints EXIT= first and runs stty for the TTY= line after it.
        try await tmux.waitFor("TTY=")
        let modes = try await tmux.screen().first { $0.hasPrefix("TTY=") } ?? ""
        for mode in ["icanon", "echo", "isig"] {
            #expect(modes.contains(mode) && !modes.contains("-\(mode)"), "\(mode) is back on: \(modes)")
        }
    }

    /// The line being typed, the keys that edit it, and the ways out of the client.
    @Suite(.serialized) struct Lines {
        // MARK: The input line

        @Test func halfTypedLineSurvivesIncomingMessages() async throws {
            try await TerminalTests.start { _, tmux, bob, _ in
                let typed = "half typed ünï 日本 line"
                try await tmux.type(typed)
                try await tmux.waitForInput(typed, prompt: TerminalTests.prompt)
                try await tmux.press("Left", "Left", "Left", "Left")
                for index in 1...3 {
                    try await bob.say("message \(index) from bob")
                    try await tmux.waitFor("<bob> message \(index) from bob")
                    try await tmux.waitForInput(typed, prompt: TerminalTests.prompt)
                }
                // The cursor is still four characters from the end: what we type lands there.
                try await tmux.type("X")
                try await tmux.press("Enter")
                #expect(await bob.waitFor(TerminalTests.said("half typed ünï 日本 Xline", by: "alice")), "the line was sent with X inserted at the cursor")
            }
        }

        @Test func aLineWiderThanTheTerminalWrapsOverRows() async throws {
            try await TerminalTests.start { _, tmux, bob, _ in
                // libedit wraps a long line over as many rows as it needs.
                let typed = String(repeating: "wrap-me-", count: 18) + "ünïcode"
                try await tmux.type(typed)
                try await tmux.waitForLogicalLine(containing: TerminalTests.prompt + typed)
                try await tmux.press("C-a")
                try await bob.say("while you type")
                try await tmux.waitFor("<bob> while you type")
                try await tmux.waitForLogicalLine(containing: TerminalTests.prompt + typed)
                try await tmux.type(">")
                try await tmux.press("Enter")
                #expect(await bob.waitFor(TerminalTests.said(">" + typed, by: "alice")), "the cursor stayed at the start of the line")
            }
        }

        @Test func wideCharactersKeepTheCursorInItsColumn() async throws {
            try await TerminalTests.start { _, tmux, bob, _ in
                // 日本語 and 😀 take two cells each; e + U+0301 one.
                try await tmux.type("日本語😀ab\u{65}\u{301}c")
                try await tmux.press("Left", "Left", "Left", "Left")
                try await tmux.type("X")
                try await tmux.waitForInput("日本語😀Xabe\u{301}c", prompt: TerminalTests.prompt)
                let expected = TerminalTests.prompt.count + 6 + 2 + 1  // after 日本語😀X
                #expect(try await eventually { try await tmux.format("#{cursor_x}") == "\(expected)" },
                        "the cursor stands after X, in column \(expected)")
                try await tmux.press("BSpace", "Left")
                try await tmux.type("Y")
                try await tmux.waitForInput("日本語Y😀abe\u{301}c", prompt: TerminalTests.prompt)
                #expect(try await eventually { try await tmux.format("#{cursor_x}") == "\(TerminalTests.prompt.count + 7)" },
                        "the cursor stands after Y")
                try await tmux.press("Enter")
                #expect(await bob.waitFor(TerminalTests.said("日本語Y😀abe\u{301}c", by: "alice")))
            }
        }

        @Test func resizingRedrawsTheBottomRows() async throws {
            try await TerminalTests.start { _, tmux, bob, _ in
                try await tmux.type("still here")
                try await tmux.tmux(["resize-window", "-x", "50", "-y", "20"])
                try await tmux.waitForScreen("the redrawn input row at 50 columns") { rows in
                    rows.count <= 21 && rows.last { $0.hasPrefix(TerminalTests.prompt) } == TerminalTests.prompt + "still here"
                }
                try await tmux.tmux(["resize-window", "-x", "100", "-y", "30"])
                try await bob.say("after the resize")
                try await tmux.waitFor("<bob> after the resize")
                try await tmux.waitForInput("still here", prompt: TerminalTests.prompt)
                let status = try await tmux.statusLine() ?? ""
                #expect(status.hasPrefix("alice | [1:#general]"), "the status line is drawn above the input row: \(status)")
            }
        }

        @Test func readlineKeysEditTheLine() async throws {
            try await TerminalTests.start { _, tmux, bob, _ in
                try await tmux.type("one two-three four")
                try await tmux.press("C-w")
                try await tmux.waitForInput("one two-three ", prompt: TerminalTests.prompt)
                try await tmux.press("C-w")
                try await tmux.waitForInput("one ", prompt: TerminalTests.prompt)  // readline's unix-word-rubout: up to whitespace
                try await tmux.press("C-y")
                // Kills in a row add up: both words come back.
                try await tmux.waitForInput("one two-three four", prompt: TerminalTests.prompt)
                try await tmux.press("C-a", "C-k")
                try await tmux.waitForInput("", prompt: TerminalTests.prompt)
                try await tmux.type("searchable line")
                try await tmux.press("Enter")
                #expect(await bob.waitFor(TerminalTests.said("searchable line", by: "alice")))
                try await tmux.type("other")
                try await tmux.press("Enter")
                try await tmux.press("C-r")
                try await tmux.type("search")
                // libedit's em-inc-search-prev: the match in the line, the pattern on the row below.
                try await tmux.waitFor("bck:search")
                try await tmux.waitForInput("searchable line", prompt: TerminalTests.prompt)
                try await tmux.press("C-g")
                try await tmux.waitForInput("", prompt: TerminalTests.prompt)
            }
        }

        @Test func altYPutsBackOlderKillsInTurn() async throws {
            try await TerminalTests.start { _, tmux, bob, _ in
                // Two kills with typing between them: two entries of the ring.
                try await tmux.type("first")
                try await tmux.press("C-u")
                try await tmux.type("second")
                try await tmux.press("C-u")
                try await tmux.type("say ")
                try await tmux.press("C-y")
                try await tmux.waitForInput("say second", prompt: TerminalTests.prompt)
                try await tmux.press("M-y")
                try await tmux.waitForInput("say first", prompt: TerminalTests.prompt)
                try await tmux.press("M-y")
                // Round the ring, back to the newest.
                try await tmux.waitForInput("say second", prompt: TerminalTests.prompt)
                // After another command Alt-y does nothing.
                try await tmux.press("C-e", "M-y")
                try await tmux.press("Enter")
                #expect(await bob.waitFor(TerminalTests.said("say second", by: "alice")))
            }
        }

        @Test func tabCompletesNicksAndCommands() async throws {
            try await TerminalTests.start { _, tmux, bob, _ in
                try await tmux.type("bo")
                try await tmux.press("Tab")
                try await tmux.type("hi")
                try await tmux.waitForInput("bob: hi", prompt: TerminalTests.prompt)
                try await tmux.press("Enter")
                #expect(await bob.waitFor(TerminalTests.said("bob: hi", by: "alice")), "the completed line is sent")

                try await tmux.type("/ms")
                try await tmux.press("Tab")
                try await tmux.type("b")
                try await tmux.press("Tab")
                try await tmux.type("secret")
                try await tmux.waitForInput("/msg bob secret", prompt: TerminalTests.prompt)
                try await tmux.press("Enter")
                #expect(await bob.waitFor { if case .direct("alice", "bob", _, "secret") = $0 { true } else { false } }, "the direct message arrives")
            }
        }

        @Test func historyIsRecalledAfterARestart() async throws {
            let server = try await ChatServerProcess()
            defer { server.stop() }
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let command = try clientInTerminal(nick: "alice", port: server.port, home: home)

            let first = try await TmuxSession(command)
            defer { first.stop() }
            try await first.waitFor("-!- alice joined")
            try await first.type("remember this line")
            try await first.press("Enter")
            try await first.waitFor("<alice> remember this line")
            try await first.type("/quit")
            try await first.press("Enter")
            try await first.waitFor("EXIT=0")
            first.stop()

            let second = try await TmuxSession(command)
            defer { second.stop() }
            try await second.waitFor("-!- alice joined")
            try await second.press("Up")
            try await second.waitForInput("/quit", prompt: TerminalTests.prompt)
            try await second.press("Up")
            try await second.waitForInput("remember this line", prompt: TerminalTests.prompt)
        }

        // MARK: Leaving

        @Test func quitLeavesTheTerminalSane() async throws {
            try await TerminalTests.start { _, tmux, bob, _ in
                try await tmux.type("/quit gone fishing")
                try await tmux.press("Enter")
                try await tmux.waitFor("EXIT=0")
                try await TerminalTests.expectSaneTerminal(tmux)
                // The alternate screen is left: the shell's screen is back, without the chat on it.
                #expect(try await tmux.format("#{alternate_on}") == "0", "the alternate screen is off")
                let shell = try await tmux.screen()
                #expect(!shell.contains { $0.contains("bob joined") || $0.hasPrefix("alice | ") },
                        "the chat stayed on the alternate screen:\n\(shell.joined(separator: "\n"))")
                #expect(await bob.waitFor { if case .quit("general", _, _, "alice", "gone fishing") = $0 { true } else { false } },
                        "the server got the goodbye")
                try await tmux.type("typed after")
                try await tmux.press("Enter")
                try await tmux.waitFor("SHELL-READ=typed after")
            }
        }

        @Test func ctrlCClearsTheLineAndASecondOneQuits() async throws {
            try await TerminalTests.start { _, tmux, bob, _ in
                try await tmux.type("half a thought")
                try await tmux.press("C-c")
                try await tmux.waitForInput("", prompt: TerminalTests.prompt)
                try await tmux.waitFor("press Ctrl-C again to quit")
                try await bob.say("still connected")
                try await tmux.waitFor("<bob> still connected")
                try await tmux.press("C-c")
                try await tmux.waitFor("EXIT=0")
                try await TerminalTests.expectSaneTerminal(tmux)
                #expect(await bob.waitFor { if case .quit("general", _, _, "alice", "interrupted") = $0 { true } else { false } },
                        "the second Ctrl-C says goodbye before leaving")
                #expect(!bob.messages(from: "alice").contains("half a thought"), "the cleared line was not sent")
                try await tmux.type("typed after")
                try await tmux.press("Enter")
                try await tmux.waitFor("SHELL-READ=typed after")
            }
        }

        @Test(arguments: [(SIGTERM, "terminated"), (SIGHUP, "terminal closed"), (SIGINT, "interrupted")])
        func signalSaysGoodbyeAndLeavesTheTerminalSane(signal: Int32, reason: String) async throws {
            try await TerminalTests.start { _, tmux, bob, _ in
                try await tmux.type("half a thought")
                let client = try #require(try await tmux.clientPID(), "the client should be running in the pane")
                kill(client, signal)
                try await tmux.waitFor("EXIT=0")
                try await TerminalTests.expectSaneTerminal(tmux)
                #expect(await bob.waitFor { if case .quit("general", _, _, "alice", reason) = $0 { true } else { false } },
                        "signal \(signal) says goodbye (\(reason)) before leaving")
            }
        }

        @Test func ctrlDOnAnEmptyLineLeavesCleanly() async throws {
            try await TerminalTests.start { _, tmux, _, _ in
                try await tmux.press("C-d")
                try await tmux.waitFor("EXIT=0")
                try await TerminalTests.expectSaneTerminal(tmux)
                let screen = try await tmux.screen()
                #expect(!screen.contains { $0.contains("^D") }, "no ^D left on screen:\n\(screen.joined(separator: "\n"))")
            }
        }
    }
}
