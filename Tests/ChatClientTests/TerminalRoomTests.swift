import ChatProtocol
import Foundation
import Testing
import TestSupport

extension TerminalTests {
    /// Several rooms and conversations on one screen: the status line, switching keys,
    /// activity and mention markers, the bell, /query, /away and /ignore.
    @Suite(.serialized) struct Rooms {
        @Test func altNumberAndCtrlNPSwitchWindows() async throws {
            try await TerminalTests.start(rooms: ["general", "dev"]) { _, tmux, bob, _ in
                try await tmux.waitForScreen("the status line with both rooms") { rows in
                    rows.contains { $0 == "alice | [1:#general] 2:#dev" }
                }
                try await tmux.press("M-2")
                try await tmux.waitForInput("", prompt: "[#dev] ")
                try await tmux.waitFor("alice | 1:#general [2:#dev]")
                try await tmux.press("C-p")
                try await tmux.waitForInput("", prompt: "[#general] ")
                try await tmux.press("C-n")
                try await tmux.waitForInput("", prompt: "[#dev] ")
                try await tmux.type("said in dev")
                try await tmux.press("Enter")
                try await tmux.waitFor("<alice> said in dev")
                try await tmux.press("M-1")
                try await tmux.waitForInput("", prompt: "[#general] ")
                try await tmux.press("M-5")
                try await tmux.waitFor("there is no window 5 (there are 2)")
            }
        }

        @Test func otherRoomsShowUnreadCountsMentionsAndRingTheBell() async throws {
            try await TerminalTests.start(rooms: ["general", "dev"]) { _, tmux, bob, home in
                let bells = home.appendingPathComponent("output.log")
                try await tmux.tmux(["pipe-pane", "-o", "cat >> '\(bells.path)'"])
                try await bob.join("dev")
                try await bob.say("just chatting", in: "dev")
                try await tmux.waitFor("alice | [1:#general] 2:#dev(1)")
                #expect(try await !tmux.screen().contains { $0.contains("just chatting") }, "#dev's line stays in #dev's window")
                #expect(!((try? String(contentsOf: bells, encoding: .utf8)) ?? "").contains("\u{07}"), "no bell for chatter")

                try await bob.say("alice: have a look", in: "dev")
                try await tmux.waitFor("alice | [1:#general] 2:#dev(2!)")
                #expect(await eventually { ((try? String(contentsOf: bells, encoding: .utf8)) ?? "").contains("\u{07}") },
                        "a mention rings the bell")

                try await bob.tell("alice", "psst")
                try await tmux.waitFor("alice | [1:#general] 2:#dev(2!) 3:bob(1!)")
                try await tmux.press("M-3")
                try await tmux.waitForInput("", prompt: "[bob] ")
                try await tmux.waitFor("*bob* psst")
                try await tmux.waitFor("alice | 1:#general 2:#dev(2!) [3:bob]")
                try await tmux.type("psst back")
                try await tmux.press("Enter")
                #expect(await bob.waitFor { if case .direct("alice", "bob", _, "psst back") = $0 { true } else { false } },
                        "text in a query window is a direct message")
                try await tmux.press("M-2")
                try await tmux.waitFor("alice | 1:#general [2:#dev] 3:bob")
            }
        }

        @Test func queryAwayAndIgnore() async throws {
            try await TerminalTests.start { server, tmux, bob, _ in
                let carol = try await Peer(nick: "carol", port: server.port, version: 2)
                defer { carol.close() }
                try await tmux.waitFor("-!- carol joined")
                try await tmux.type("/away at lunch")
                try await tmux.press("Enter")
                try await tmux.waitFor("you are marked away: at lunch")
                try await tmux.waitFor("alice (away) | [1:#general]")
                try await carol.tell("alice", "are you there?")
                #expect(await carol.waitFor { if case .away("alice", "at lunch") = $0 { true } else { false } },
                        "someone who writes to alice learns she is away")
                try await tmux.type("/away")
                try await tmux.press("Enter")
                try await tmux.waitFor("you are no longer marked away")

                try await tmux.type("/ignore bob")
                try await tmux.press("Enter")
                try await tmux.waitFor("ignoring bob")
                try await bob.say("you cannot see this")
                try await carol.say("but you see carol")
                try await tmux.waitFor("<carol> but you see carol")
                #expect(try await !tmux.screen().contains { $0.contains("you cannot see this") }, "bob's line is hidden")
                try await tmux.type("/unignore bob")
                try await tmux.press("Enter")
                // Only once the client has taken the command: a line that overtakes it is hidden.
                try await tmux.waitFor("no longer ignoring bob")
                try await bob.say("visible again")
                try await tmux.waitFor("<bob> visible again")

                try await tmux.type("/query carol")
                try await tmux.press("Enter")
                try await tmux.waitForInput("", prompt: "[carol] ")
                try await tmux.type("hello carol")
                try await tmux.press("Enter")
                #expect(await carol.waitFor { if case .direct("alice", "carol", _, "hello carol") = $0 { true } else { false } })
                try await tmux.type("/part")
                try await tmux.press("Enter")
                try await tmux.waitForInput("", prompt: "[#general] ")
            }
        }
    }
}

extension TerminalTests.Rooms {
    @Test func hostileTextIsShownHarmlessly() async throws {
        try await TerminalTests.start { _, tmux, bob, _ in
            try await tmux.type("kept")
            try await bob.say("\u{1B}[2J\u{1B}[31mevil \u{202E}desrever\u{2028}fake line")
            try await tmux.waitFor("<bob> ^[[2J^[[31mevil <U+202E>desrever<U+2028>fake line")
            try await tmux.waitForInput("kept", prompt: TerminalTests.prompt)
        }
    }
}
