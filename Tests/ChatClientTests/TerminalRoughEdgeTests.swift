import ChatClient
import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

extension TerminalTests {
    /// The user's own libedit settings: `~/.editrc` is read before the client binds its keys.
    @Suite(.serialized) struct EditRC {
        @Test func bindDashVInTheUsersEditrcGivesViMode() async throws {
            let server = try await ChatServerProcess()
            defer { server.stop() }
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            try "bind -v\n".write(to: home.appendingPathComponent(".editrc"), atomically: true, encoding: .utf8)
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: server.port, home: home))
            defer { tmux.stop() }
            try await tmux.waitFor("-!- alice joined")
            let bob = try await Peer(nick: "bob", port: server.port)
            defer { bob.close() }
            try await tmux.waitFor("-!- bob joined")

            // vi: Esc to command mode, 0 to the start, dw deletes the first word.
            try await tmux.type("hello world")
            try await tmux.press("Escape")
            try await tmux.type("0")
            try await tmux.type("dw")
            try await tmux.waitForInput("world", prompt: TerminalTests.prompt)
            #expect(try await !tmux.screen().contains { $0.contains("there is no window") }, "Esc 0 is vi's, not a window switch")
            // The client's own keys still work in vi mode: Enter sends, in command mode too.
            try await tmux.press("Enter")
            #expect(await bob.waitFor(TerminalTests.said("world", by: "alice")), "Enter sent the line")
            // The next line starts in insert mode, where Tab completes.
            try await tmux.type("/jo")
            try await tmux.press("Tab")
            try await tmux.waitForInput("/join ", prompt: TerminalTests.prompt)
            try await tmux.press("C-u")
            try await tmux.type("b")
            try await tmux.press("Tab")
            try await tmux.waitForInput("bob: ", prompt: TerminalTests.prompt)
        }
    }

    /// The smaller things a daily user runs into.
    @Suite(.serialized) struct RoughEdges {
        private let prompt = TerminalTests.prompt

        /// Once the client is back on a server, the next loss starts the delays from the shortest.
        @Test func theReconnectBackoffStartsAgainOnceConnected() async throws {
            var server = try await ChatServerProcess()
            defer { server.stop() }
            let port = server.port
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: port, home: home))
            defer { tmux.stop() }
            try await tmux.waitFor("-!- alice joined")
            server.stop()
            try await tmux.waitFor("(attempt 4)")
            server = try await ChatServerProcess(port: port)
            try await tmux.waitFor("reconnected to 127.0.0.1:\(port)")
            try await tmux.type("/clear")
            try await tmux.press("Enter")
            try await tmux.waitForScreen("an empty window") { rows in !rows.contains { $0.contains("attempt") } }
            server.stop()
            try await tmux.waitFor("reconnecting in")
            let rows = try await tmux.screen()
            #expect(rows.contains { $0.contains("(attempt 1)") }, "the first delay again:\n\(rows.joined(separator: "\n"))")
        }

        /// A query window follows its nick's changes; a `/msg` sent before `/query` is in it.
        @Test func queryWindowsFollowNickChangesAndHoldYourOwnMessages() async throws {
            try await TerminalTests.start { server, tmux, bob, _ in
                let carol = try await Peer(nick: "carol", port: server.port)
                defer { carol.close() }
                try await carol.tell("alice", "psst")
                try await tmux.waitFor("alice | [1:#general] 2:carol(1!)")
                try await carol.connection.send(.changeNick(nick: "carol2"))
                try await tmux.waitFor("carol is now known as carol2")
                try await tmux.waitFor("alice | [1:#general] 2:carol2(1!)")
                try await carol.tell("alice", "it is me")
                try await tmux.waitFor("alice | [1:#general] 2:carol2(2!)")
                try await tmux.press("M-2")
                try await tmux.waitFor("*carol2* it is me")
                try await tmux.waitFor("*carol* psst")

                try await tmux.press("M-1")
                try await tmux.type("/msg bob see you at noon")
                try await tmux.press("Enter")
                #expect(await bob.waitFor { if case .direct("alice", "bob", _, "see you at noon") = $0 { true } else { false } })
                try await tmux.type("/query bob")
                try await tmux.press("Enter")
                try await tmux.waitForInput("", prompt: "[bob] ")
                try await tmux.waitFor("-> *bob* see you at noon")
            }
        }

        /// A kick stands out; a join is dim.
        @Test func aKickIsDrawnToStandOutNotDimLikeAJoin() async throws {
            let server = try await ChatServerProcess()
            defer { server.stop() }
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            // Colour on, whatever the test runner's own NO_COLOR says.
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: server.port, home: home, environment: ["NO_COLOR": ""]))
            defer { tmux.stop() }
            try await tmux.waitFor("-!- alice joined")
            let dave = try await Peer(nick: "dave", port: server.port)
            defer { dave.close() }
            try await tmux.waitFor("-!- dave joined")
            try await tmux.type("/kick dave spam")
            try await tmux.press("Enter")
            try await tmux.waitFor("dave was kicked by alice (spam)")
            let styled = try await tmux.tmux(["capture-pane", "-p", "-e"]).split(separator: "\n").map(String.init)
            let join = try #require(styled.first { $0.contains("dave joined") })
            let kick = try #require(styled.first { $0.contains("was kicked") })
            #expect(join.contains("\u{1B}[2m"), "a join is dim: \(join.debugDescription)")
            #expect(!kick.contains("\u{1B}[2m") && kick.contains("\u{1B}[1m"), "a kick is bold, not dim: \(kick.debugDescription)")
        }

        /// Long lines wrap at words under the text, and a room's window does not repeat its name.
        @Test func longLinesWrapAtWordsWithAHangingIndent() async throws {
            try await TerminalTests.start { _, tmux, bob, _ in
                let words = (1...30).map { "word\($0)" }
                try await bob.say(words.joined(separator: " "))
                try await tmux.waitFor("word30")
                let rows = try await tmux.screen()
                let first = try #require(rows.firstIndex { $0.contains("<bob> word1 ") }, "\(rows.joined(separator: "\n"))")
                #expect(rows[first].wholeMatch(of: /\d\d:\d\d <bob> word1 .*/) != nil, "no room name in the room's own window: \(rows[first])")
                let indent = String(repeating: " ", count: "00:00 <bob> ".count)
                var shown: [String] = rows[first].split(separator: " ").dropFirst(2).map(String.init)
                var index = first + 1
                while index < rows.count, rows[index].hasPrefix(indent) {
                    #expect(!rows[index].hasPrefix(indent + " "), "continuation rows start under the text: \(rows[index].debugDescription)")
                    shown += rows[index].split(separator: " ").map(String.init)
                    index += 1
                }
                #expect(index > first + 1, "the line wrapped:\n\(rows.joined(separator: "\n"))")
                #expect(shown == words, "every word whole, in order:\n\(rows.joined(separator: "\n"))")
                #expect(!rows.contains { $0.contains("#general <bob>") || $0.contains("#general -!-") },
                        "lines in #general's window do not name it:\n\(rows.joined(separator: "\n"))")
            }
        }

        /// `/help` at 120 columns: descriptions in one column near the commands, wrapped at words.
        @Test func helpLinesUpItsDescriptionsAndWrapsThemAtWords() async throws {
            let server = try await ChatServerProcess()
            defer { server.stop() }
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: server.port, home: home), columns: 120, rows: 100)
            defer { tmux.stop() }
            try await tmux.waitFor("-!- alice joined")
            try await tmux.type("/help")
            try await tmux.press("Enter")
            try await tmux.waitFor("keys:")
            let rows = try await tmux.screen()
            var columns: Set<Int> = []
            for spec in CommandSpec.all where spec.usage.count <= 20 {
                let row = try #require(rows.first { $0.contains(" " + spec.usage + "  ") }, "a row for \(spec.usage)")
                let start = try #require(row.range(of: spec.summary.split(separator: " ").prefix(2).joined(separator: " ")), "\(row)")
                columns.insert(row.distance(from: row.startIndex, to: start.lowerBound))
            }
            #expect(columns.count == 1, "the descriptions start in one column: \(columns.sorted())\n\(rows.joined(separator: "\n"))")
            #expect((columns.first ?? 999) <= 40, "near the commands: \(columns.sorted())")
            let text = rows.joined(separator: " ").split(separator: " ").joined(separator: " ")
            for spec in CommandSpec.all {
                let summary = spec.summary.split(separator: " ").joined(separator: " ")
                #expect(text.contains(summary), "\(spec.usage)'s description is whole, wrapped at words:\n\(rows.joined(separator: "\n"))")
            }
        }

        /// Alt-A and `/window goto active` go to the window with activity, mentions first.
        @Test func altAGoesToTheActiveWindowMentionsFirst() async throws {
            try await TerminalTests.start(rooms: ["general", "dev", "ops"]) { _, tmux, bob, _ in
                try await bob.join("dev")
                try await bob.join("ops")
                try await bob.say("plain news", in: "dev")
                try await bob.say("alice: look here", in: "ops")
                try await tmux.waitFor("alice | [1:#general] 2:#dev(1) 3:#ops(1!)")
                try await tmux.press("M-a")
                try await tmux.waitForInput("", prompt: "[#ops] ")
                try await tmux.press("M-a")
                try await tmux.waitForInput("", prompt: "[#dev] ")
                try await bob.say("back in general")
                try await tmux.waitFor("alice | 1:#general(1) [2:#dev] 3:#ops")
                try await tmux.type("/window goto active")
                try await tmux.press("Enter")
                try await tmux.waitForInput("", prompt: prompt)
                try await tmux.type("/window goto active")
                try await tmux.press("Enter")
                try await tmux.waitFor("no window has activity")
            }
        }

        /// `/window ` then Tab lists what can follow: the subcommands and the open windows.
        @Test func windowThenTabListsTheWindows() async throws {
            try await TerminalTests.start(rooms: ["general", "dev"]) { _, tmux, _, _ in
                try await tmux.type("/window ")
                try await tmux.press("Tab")
                try await tmux.waitForScreen("the windows offered") { rows in
                    rows.contains { $0.contains("#general") && $0.contains("#dev") && $0.contains("list") && $0.contains("close") }
                }
                try await tmux.type("#d")
                try await tmux.press("Tab")
                try await tmux.waitForInput("/window #dev ", prompt: prompt)
            }
        }

        /// Leaving Ctrl-R's search with an arrow key takes the match, without `[C` typed into it.
        @Test func ctrlRThenRightTakesTheMatchWithoutTypingTheKey() async throws {
            try await TerminalTests.start { _, tmux, bob, _ in
                try await tmux.type("first line")
                try await tmux.press("Enter")
                #expect(await bob.waitFor(TerminalTests.said("first line", by: "alice")))
                try await tmux.press("C-r")
                try await tmux.type("fir")
                try await tmux.waitFor("first line")
                try await tmux.press("Right")
                try await tmux.waitForInput("first line", prompt: prompt)
                try await tmux.press("C-e")
                try await tmux.type("!")
                try await tmux.press("Enter")
                #expect(await bob.waitFor(TerminalTests.said("first line!", by: "alice")), "the match, then ! at its end: \(bob.messages(from: "alice"))")
            }
        }

        /// Ctrl-G ends Ctrl-R's search with the line as it was, leaving no blank row behind.
        @Test func ctrlRThenCtrlGLeavesNoBlankRow() async throws {
            try await TerminalTests.start { _, tmux, bob, _ in
                try await tmux.type("an earlier line")
                try await tmux.press("Enter")
                #expect(await bob.waitFor(TerminalTests.said("an earlier line", by: "alice")))
                try await tmux.type("draft")
                try await tmux.press("C-r")
                try await tmux.type("ear")
                try await tmux.waitFor("an earlier line")
                try await tmux.press("C-g")
                let height = try #require(Int(try await tmux.format("#{pane_height}")))
                try await tmux.waitForScreen("the line given back on the last row") { rows in
                    rows.count >= height && rows[height - 1] == prompt + "draft"
                }
            }
        }
    }
}
