import ChatProtocol
import Foundation
import Testing
import TestSupport

extension TerminalTests {
    /// docs/CLIENT.md's "A day in the client", step by step: three people in three terminals,
    /// several rooms and queries, a reconnect, scrolling back, searching, a config file and logs.
    @Suite(.serialized) struct ADayInTheClient {
        /// Types `line` in `session`'s client and waits for its echo before anything else is typed.
        ///
        /// Typed back to back, lines reach a busy client together in one read, and a read with
        /// text after a line break is taken for a paste (docs/CLIENT.md, "Pasting"): the Enter
        /// that ends one line is swallowed into it, and more than 3 lines wait for a yes that the
        /// next typed key answers with a no. Lines were lost that way before anything was sent:
        /// `<bob> chatter 4hatter 10`, with chatter 5 to 9 gone, looked like a lost catch-up.
        static func say(_ line: String, as session: TmuxSession) async throws {
            try await session.type(line)
            try await session.press("Enter")
            try await session.waitForScreen("the echo of \"\(line)\"") { rows in rows.contains { $0.hasSuffix("> \(line)") } }
        }

        @Test func aDayInTheClient() async throws {
            let server = try await ChatServerProcess()
            defer { server.stop() }
            // alice's network goes through a relay the test can cut.
            let relay = try TCPRelay(to: server.port)
            defer { relay.stop() }
            let homes = try (0..<3).map { _ in try temporaryDirectory() }
            defer { for home in homes { try? FileManager.default.removeItem(at: home) } }

            // Morning: alice starts with her config file; bob and carol with flags.
            try writeConfig("""
                nick = "alice"
                servers = ["127.0.0.1:\(relay.port)"]
                autojoin = ["#general", "#dev"]
                timestamp_format = "%H:%M:%S"
                highlight = ["deploy"]
                log = true

                [aliases]
                wl = "window list"
                """, home: homes[0])
            let alice = try await TmuxSession(try clientInTerminal(nick: "alice", home: homes[0], rooms: [])
                .replacingOccurrences(of: "'--nick' 'alice'", with: ""))
            defer { alice.stop() }
            try await alice.waitFor("alice | [1:#general] 2:#dev")
            let bob = try await TmuxSession(try clientInTerminal(nick: "bob", port: server.port, home: homes[1], rooms: ["general", "dev"]))
            defer { bob.stop() }
            try await bob.waitFor("bob | [1:#general] 2:#dev")
            let carol = try await TmuxSession(try clientInTerminal(nick: "carol", port: server.port, home: homes[2]))
            defer { carol.stop() }
            try await carol.waitFor("carol | [1:#general]")
            try await alice.waitFor("-!- carol joined")

            try await Self.say("morning all", as: bob)
            for index in 1...20 { try await Self.say("chatter \(index)", as: bob) }
            try await alice.waitFor("<bob> chatter 20")

            // A query: carol asks, alice answers in the window the message opened.
            try await carol.type("/msg alice lunch at noon?")
            try await carol.press("Enter")
            try await alice.waitFor("3:carol(1!)")
            try await alice.press("M-3")
            try await alice.waitFor("*carol* lunch at noon?")
            try await alice.type("yes, see you there")
            try await alice.press("Enter")
            try await carol.waitFor("2:alice(1!)")
            try await carol.press("M-2")
            try await carol.waitFor("*alice* yes, see you there")

            // A highlight word in a room alice is not looking at.
            try await bob.press("M-2")
            try await bob.type("the deploy is green")
            try await bob.press("Enter")
            try await alice.waitFor("2:#dev(1!)")
            try await alice.type("/wl")
            try await alice.press("Enter")
            try await alice.waitFor("2: #dev — 1 unread, mentioned")

            // alice's network drops; bob talks on; alice comes back to one line and her windows.
            relay.refusesConnections = true
            relay.cutAll()
            try await alice.waitFor("disconnected:")
            try await bob.press("M-1")
            for index in 1...30 { try await Self.say("catch-up \(index)", as: bob) }
            relay.refusesConnections = false
            try await alice.waitForLogicalLine(containing: "reconnected to 127.0.0.1:\(relay.port): 2 rooms, 30 new messages in 1 of them")
            try await alice.waitFor("1:#general(30)")

            // Back in #general: the missed lines, a page back, and a search.
            try await alice.press("M-1")
            try await alice.waitFor("<bob> catch-up 30")
            try await alice.press("PPage")
            try await alice.waitFor("alice -- more -- |")
            try await alice.waitForScreen("the morning's chatter") { rows in
                rows.contains { $0.hasSuffix("<bob> chatter 10") } && !rows.contains { $0.hasSuffix("<bob> catch-up 30") }
            }
            try await alice.press("NPage", "NPage")
            try await alice.waitForScreen("the end again") { rows in
                rows.contains { $0.hasSuffix("<bob> catch-up 30") } && !rows.contains { $0.contains("-- more --") }
            }
            try await alice.type("/lastlog morning")
            try await alice.press("Enter")
            try await alice.waitFor("lastlog: 1 line contains \"morning\":")

            // Evening: the logs hold the day, one file a window.
            let logs = homes[0].appendingPathComponent(".local/share/chat-client/logs/127.0.0.1:\(relay.port)")
            let general = (try? String(contentsOf: logs.appendingPathComponent("#general.log"), encoding: .utf8)) ?? ""
            #expect(general.contains(" <bob> morning all") && general.contains(" <bob> catch-up 30"), "#general.log:\n\(general)")
            // Every line bob typed reached alice once, in order: the live ones and the 30 missed.
            let said = general.split(separator: "\n").compactMap { line in line.range(of: " <bob> ").map { String(line[$0.upperBound...]) } }
            // (/lastlog's answer is shown, not logged: the log has each line once.)
            #expect(said == ["morning all"] + (1...20).map { "chatter \($0)" } + (1...30).map { "catch-up \($0)" }, "#general.log:\n\(general)")
            // The reconnect put nothing in the rooms' windows but what was missed: no second join,
            // member list or "nothing new" (every line a window shows is in its log).
            let dev = (try? String(contentsOf: logs.appendingPathComponent("#dev.log"), encoding: .utf8)) ?? ""
            for (name, text) in [("#general", general), ("#dev", dev)] {
                let lines = text.split(separator: "\n")
                #expect(lines.filter { $0.hasSuffix(" -!- alice joined") }.count == 1, "one join line in \(name).log:\n\(text)")
                #expect(lines.filter { $0.contains(" -!- members (") }.count == 1, "one member list in \(name).log:\n\(text)")
                #expect(!text.contains("nothing new") && !text.contains("reconnected"), "\(name).log:\n\(text)")
            }
            // The marker is the screen's; the log has the missed lines in their place by time.
            #expect(!general.contains("new since you left"), "#general.log:\n\(general)")
            let stamps = general.split(separator: "\n").map { String($0.prefix(19)) }
            #expect(stamps == stamps.sorted(), "the log is in time order:\n\(general)")
            let query = (try? String(contentsOf: logs.appendingPathComponent("carol.log"), encoding: .utf8)) ?? ""
            #expect(query.contains("*carol* lunch at noon?") && query.contains("-> *carol* yes, see you there"), "carol.log:\n\(query)")
            try await alice.type("/quit good night")
            try await alice.press("Enter")
            try await alice.waitFor("EXIT=0")
            try await TerminalTests.expectSaneTerminal(alice)
            try await bob.waitFor("-!- alice quit (good night)")
        }
    }
}
