import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

extension TerminalTests {
    /// libedit's editing as a daily user meets it, and the places where the client adds to it:
    /// redrawing after resizes, kills that add up, Esc then a digit, history walks, stopping a
    /// paste, and the history file's mode.
    @Suite(.serialized) struct Editing {
        private let prompt = TerminalTests.prompt

        @Test func shrinkingAndGrowingTheTerminalLeavesTheWholeLineInView() async throws {
            try await TerminalTests.start { _, tmux, _, _ in
                let typed = "the quick brown fox jumps over the lazy dog"
                try await tmux.type(typed)
                try await tmux.tmux(["resize-window", "-x", "20", "-y", "20"])
                try await tmux.waitForScreen("the line wrapped at 20 columns") { rows in
                    rows.contains { $0.hasPrefix(prompt) } && rows.contains("r the lazy dog")
                }
                try await tmux.tmux(["resize-window", "-x", "80", "-y", "24"])
                try await tmux.waitForInput(typed, prompt: prompt)
                try await tmux.press("C-l")
                try await tmux.waitForInput(typed, prompt: prompt)
                // The status line is redrawn on its own, after the resized line (a later turn of
                // the client's main queue), so it is waited for rather than read at once.
                let whole = await eventually { (try? await tmux.statusLine()) == "alice | [1:#general]" }
                let status = try await tmux.statusLine() ?? ""
                #expect(whole, "the status line is whole again: \(status)")
            }
        }

        @Test func escapeThenADigitSwitchesWindowsAsAltDoes() async throws {
            try await TerminalTests.start(rooms: ["general", "dev"]) { _, tmux, _, _ in
                try await tmux.press("Escape")
                // A user's pause between the two keys; libedit waits for the key after Escape.
                try await Task.sleep(for: .milliseconds(300))
                try await tmux.type("2")
                try await tmux.waitForInput("", prompt: "[#dev] ")
                try await tmux.waitFor("alice | 1:#general [2:#dev]")
            }
        }

        @Test func aHalfTypedLineSurvivesAWalkThroughTheHistory() async throws {
            try await TerminalTests.start { _, tmux, bob, _ in
                try await tmux.type("an earlier line")
                try await tmux.press("Enter")
                #expect(await bob.waitFor(TerminalTests.said("an earlier line", by: "alice")))
                try await tmux.type("draft")
                try await tmux.press("Up")
                try await tmux.waitForInput("an earlier line", prompt: prompt)
                try await tmux.press("Down")
                try await tmux.waitForInput("draft", prompt: prompt)
            }
        }

        @Test func ctrlCStopsAConfirmedPasteAndSaysHowManyLinesWent() async throws {
            // 5 messages a second: 200 lines would take 40 s.
            try await TerminalTests.start(serverArguments: ["--rate-limit", "5", "--rate-burst", "5"]) { _, tmux, bob, _ in
                try await tmux.type("kept")
                let lines = (1...200).map { String(format: "paste %03d", $0) }
                try await tmux.paste(lines.joined(separator: "\n") + "\n")
                try await tmux.waitFor("send 200 pasted lines to #general? (y/n)")
                try await tmux.type("y")
                #expect(await eventually { bob.messages(from: "alice").count >= 6 }, "the paste started")
                try await tmux.press("C-c")
                try await tmux.waitFor("paste stopped: ")
                let note = try await tmux.screen().first { $0.contains("paste stopped: ") } ?? ""
                let sent = try #require(note.firstMatch(of: /paste stopped: (\d+) of 200 lines were sent, (\d+) not/), "the note: \(note)")
                let count = try #require(Int(sent.1))
                #expect(count + (Int(sent.2) ?? -1) == 200, "sent and not sent make the paste: \(note)")
                #expect(await eventually { bob.messages(from: "alice").count == count }, "the lines said sent arrive")
                #expect(bob.messages(from: "alice") == Array(lines.prefix(count)), "in order, nothing after the stop")
                try await tmux.waitForInput("kept", prompt: prompt)
            }
        }

        @Test func theHistoryFileIsReadableByItsOwnerOnly() async throws {
            let server = try await ChatServerProcess()
            defer { server.stop() }
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            // A file from an older client: plain lines, readable by everyone.
            let history = home.appendingPathComponent("history")
            try "an old line\n".write(to: history, atomically: true, encoding: .utf8)
            chmod(history.path, 0o644)
            let tmux = try await TmuxSession(
                try clientInTerminal(nick: "alice", port: server.port, home: home, extra: ["--history-file", history.path]))
            defer { tmux.stop() }
            try await tmux.waitFor("-!- alice joined")
            #expect(Self.mode(of: history.path) == 0o600, "an existing history file is made private")
            try await tmux.press("Up")
            try await tmux.waitForInput("an old line", prompt: prompt)
            try await tmux.press("C-u")
            try await tmux.type("/msg carol a private line")
            try await tmux.press("Enter")
            #expect(await eventually { (try? String(contentsOf: history, encoding: .utf8))?.contains("carol") == true }, "the line is saved")
            #expect(Self.mode(of: history.path) == 0o600, "still private after a save")

            let fresh = home.appendingPathComponent("fresh-history")
            let second = try await TmuxSession(
                try clientInTerminal(nick: "dave", port: server.port, home: home, extra: ["--history-file", fresh.path]))
            defer { second.stop() }
            try await second.waitFor("-!- dave joined")
            try await second.type("first words")
            try await second.press("Enter")
            #expect(await eventually { FileManager.default.fileExists(atPath: fresh.path) }, "a history file is created")
            #expect(Self.mode(of: fresh.path) == 0o600, "a new history file is private from the start")
        }

        private static func mode(of path: String) -> mode_t? {
            var info = stat()
            return stat(path, &info) == 0 ? info.st_mode & 0o777 : nil
        }
    }

    /// Input meant to break the client: invalid UTF-8, resize storms, floods of lines.
    @Suite(.serialized) struct Hostile {
        private let prompt = TerminalTests.prompt

        @Test func invalidUTF8TypedOrPastedBecomesReplacementCharacters() async throws {
            try await TerminalTests.start { _, tmux, bob, home in
                // a, a stray byte, b, a lead byte without its continuation, (
                try await tmux.tmux(["send-keys", "-H", "61", "ff", "62", "c3", "28"])
                try await tmux.waitForInput("a\u{FFFD}b\u{FFFD}(", prompt: prompt)
                try await tmux.press("Enter")
                #expect(await bob.waitFor(TerminalTests.said("a\u{FFFD}b\u{FFFD}(", by: "alice")), "typed bytes arrive as U+FFFD")

                let file = home.appendingPathComponent("invalid-paste")
                try Data([0x78, 0xC0, 0xAF, 0x79, 0xED, 0xA0, 0x80, 0x7A]).write(to: file)
                try await tmux.tmux(["load-buffer", "-b", "bad", file.path])
                try await tmux.tmux(["paste-buffer", "-p", "-d", "-b", "bad"])
                try await tmux.press("Enter")
                let expected = String(decoding: [0x78, 0xC0, 0xAF, 0x79, 0xED, 0xA0, 0x80, 0x7A] as [UInt8], as: UTF8.self)
                #expect(await bob.waitFor(TerminalTests.said(expected, by: "alice")), "pasted bytes arrive as U+FFFD: \(bob.messages(from: "alice"))")
            }
        }

        @Test func aResizeStormDownToTenColumnsWhileMessagesArrive() async throws {
            try await TerminalTests.start(serverArguments: ["--rate-limit", "100000", "--rate-burst", "100000"]) { _, tmux, bob, _ in
                let typed = "typed before the storm"
                try await tmux.type(typed)
                let talker = Task {
                    for index in 1...200 {
                        try await bob.say("storm \(index)")
                        try await Task.sleep(for: .milliseconds(5))
                    }
                }
                for (index, columns) in [10, 80, 13, 120, 10, 40, 11, 200, 10, 25].enumerated() {
                    try await tmux.tmux(["resize-window", "-x", "\(columns)", "-y", "\(10 + index)"])
                }
                try await talker.value
                try await tmux.tmux(["resize-window", "-x", "80", "-y", "24"])
                try await tmux.waitFor("<bob> storm 200")
                try await tmux.waitForInput(typed, prompt: prompt)
                try await tmux.type("!")
                try await tmux.press("Enter")
                #expect(await bob.waitFor(TerminalTests.said(typed + "!", by: "alice")), "the line was kept through the storm")
            }
        }

        @Test func aThousandLinesASecondLeaveTheTypedLineIntact() async throws {
            try await TerminalTests.start(serverArguments: ["--rate-limit", "100000", "--rate-burst", "100000"]) { _, tmux, bob, _ in
                let flood = Task {
                    // 3,000 lines in 3 s, 10 every 10 ms.
                    for batch in 0..<300 {
                        for index in 1...10 { try await bob.say("flood \(batch * 10 + index)") }
                        try await Task.sleep(for: .milliseconds(10))
                    }
                }
                let typed = "typed ünï 日本 while flooded"
                for word in typed.split(separator: " ", omittingEmptySubsequences: false) {
                    try await tmux.type(String(word) + " ")
                }
                try await flood.value
                try await tmux.waitFor("<bob> flood 3000")
                try await tmux.waitForInput(typed + " ", prompt: prompt)
                let rows = try await tmux.screen()
                let input = try #require(rows.lastIndex { $0.hasPrefix(prompt) })
                #expect(rows[input - 1] == "alice | [1:#general]", "the status line sits above the input row:\n\(rows.joined(separator: "\n"))")
                let above = rows[..<(input - 1)].filter { !$0.isEmpty }
                #expect(above.allSatisfy { $0.wholeMatch(of: /\d\d:\d\d <bob> flood \d+/) != nil },
                        "every row above is one whole message:\n\(rows.joined(separator: "\n"))")
                try await tmux.press("BSpace", "Enter")
                #expect(await bob.waitFor(TerminalTests.said(typed, by: "alice")), "the typed line is sent whole")
            }
        }
    }
}
