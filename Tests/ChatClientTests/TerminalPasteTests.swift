import ChatProtocol
import Foundation
import Testing
import TestSupport

extension TerminalTests {
    /// Long input and pastes, in a real terminal: nothing crashes, nothing is run as a command,
    /// nothing is lost to the rate limit, nothing reaches the shell.
    @Suite(.serialized) struct Pastes {
        private let prompt = TerminalTests.prompt

        @Test func longLinesNeverCrashTheClientOrReachTheShell() async throws {
            try await TerminalTests.start { _, tmux, bob, _ in
                // 10,000 characters fit in a message (the server takes 16 KiB frames): pasted,
                // then sent whole.
                let tenThousand = String(repeating: "x", count: 10_000)
                try await tmux.paste(tenThousand)
                // libedit wraps the line over 126 rows and shows the last ones, the cursor's.
                try await tmux.waitForScreen("the end of the pasted line at the bottom") { rows in
                    rows.last { !$0.isEmpty }.map { $0.count == (prompt.count + 10_000) % 80 && $0.allSatisfy { $0 == "x" } } ?? false
                }
                try await tmux.press("Enter")
                #expect(await bob.waitFor(TerminalTests.said(tenThousand, by: "alice")), "the 10,000-character line arrives whole")

                // 100,000 characters do not fit: refused with a note, the line stays empty.
                try await tmux.paste(String(repeating: "y", count: 100_000))
                try await tmux.waitFor("not pasted: the line would be 100000 bytes")
                try await tmux.waitForInput("", prompt: prompt)

                // Typed (or pasted by a terminal without bracketed paste): the line takes what a
                // message can hold and says that the rest was not typed.
                try await tmux.type(String(repeating: "z", count: 20_000))
                try await tmux.press("Enter")
                let limit = WireProtocol.defaultServerMaxFrameSize - 40
                #expect(await bob.waitFor(TerminalTests.said(String(repeating: "z", count: limit), by: "alice")),
                        "the full line (\(limit) bytes) is sent")
                // The line filled the screen, so the note printed above it went by: the window kept it.
                try await tmux.type("/lastlog line is full")
                try await tmux.press("Enter")
                try await tmux.waitFor("lastlog: 1 line contains \"line is full\"")
                try await tmux.waitFor("-- the line is full: a message can hold at most")

                try await tmux.type("/quit")
                try await tmux.press("Enter")
                try await tmux.waitFor("EXIT=0")
                try await tmux.type("after")
                try await tmux.press("Enter")
                try await tmux.waitFor("SHELL-READ=")
                let read = try await tmux.screen().first { $0.hasPrefix("SHELL-READ=") }
                #expect(read == "SHELL-READ=after", "nothing typed or pasted into the client reached the shell: \(read ?? "")")
            }
        }

        @Test func aMultiLinePasteIsTextNeverCommands() async throws {
            try await TerminalTests.start { _, tmux, bob, _ in
                try await tmux.type("half typed")
                try await tmux.paste("first line\n/part\n/quit now\n")
                let expected = ["first line", "/part", "/quit now"]
                #expect(await eventually { bob.messages(from: "alice") == expected },
                        "the three lines are said as text: \(bob.messages(from: "alice"))")
                try await tmux.waitForInput("half typed", prompt: prompt)
                #expect(!bob.frames.contains { if case .left(_, _, _, "alice") = $0 { true } else { false } }, "the pasted /part did not run")
                #expect(!bob.frames.contains { if case .quit(_, _, _, "alice", _) = $0 { true } else { false } }, "the pasted /quit did not run")
            }
        }

        @Test func linesPastedWithoutBracketsAreTextToo() async throws {
            try await TerminalTests.start { _, tmux, bob, _ in
                // What a terminal without bracketed paste sends: the lines and CRs in one write.
                try await tmux.tmux(["send-keys", "-l", "unbracketed one\r/part\rthree"])
                #expect(await eventually { bob.messages(from: "alice") == ["unbracketed one", "/part", "three"] },
                        "said as text: \(bob.messages(from: "alice"))")
                #expect(!bob.frames.contains { if case .left(_, _, _, "alice") = $0 { true } else { false } }, "the pasted /part did not run")
            }
        }

        @Test func aLongPasteIsConfirmedAndPacedWithoutLoss() async throws {
            // A strict server: 10 messages a second, 10 at once. Sent as fast as possible,
            // most of 150 lines would be dropped.
            try await TerminalTests.start(serverArguments: ["--rate-limit", "10", "--rate-burst", "10"]) { _, tmux, bob, _ in
                try await tmux.paste((1...5).map { "declined \($0)" }.joined(separator: "\n"))
                try await tmux.waitFor("send 5 pasted lines to #general? (y/n)")
                try await tmux.type("n")
                try await tmux.waitFor("paste of 5 lines discarded")

                let lines = (1...150).map { String(format: "pasted line %03d", $0) }
                try await tmux.paste(lines.joined(separator: "\n") + "\n")
                try await tmux.waitFor("send 150 pasted lines to #general? (y/n)")
                try await tmux.type("y")
                #expect(await eventually(timeout: .seconds(180)) { bob.messages(from: "alice").count >= 150 },
                        "every line arrives: \(bob.messages(from: "alice").count) of 150")
                #expect(bob.messages(from: "alice") == lines, "in order, none dropped, none of the declined paste")
                let screen = try await tmux.screen()
                #expect(!screen.contains { $0.contains("was not delivered") }, "no line was refused:\n\(screen.joined(separator: "\n"))")
            }
        }
    }
}
