import ChatProtocol
import Foundation
import Testing
import TestSupport

extension TerminalTests {
    /// docs/CLIENT.md's "A day in the client", step by step: three people in three terminals,
    /// several rooms and queries, a reconnect, scrolling back, searching, a config file and logs.
    @Suite struct ADayInTheClient {
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

            try await bob.type("morning all")
            try await bob.press("Enter")
            for index in 1...20 {
                try await bob.type("chatter \(index)")
                try await bob.press("Enter")
            }
            try await alice.waitFor("#general <bob> chatter 20")

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
            // Fewer than the join's replay holds (docs/CLIENT.md says why).
            for index in 1...12 {
                try await bob.type("catch-up \(index)")
                try await bob.press("Enter")
            }
            try await bob.waitFor("<bob> catch-up 12")
            relay.refusesConnections = false
            try await alice.waitForLogicalLine(containing: "reconnected to 127.0.0.1:\(relay.port): 2 rooms, 12 new messages in 1 of them")
            try await alice.waitFor("1:#general(12)")

            // Back in #general: the missed lines, a page back, and a search.
            try await alice.press("M-1")
            try await alice.waitFor("<bob> catch-up 12")
            try await alice.press("PPage")
            try await alice.waitFor("alice -- more -- |")
            try await alice.waitForScreen("the morning's chatter") { rows in
                rows.contains { $0.hasSuffix("<bob> chatter 10") } && !rows.contains { $0.hasSuffix("<bob> catch-up 12") }
            }
            try await alice.press("NPage", "NPage")
            try await alice.waitForScreen("the end again") { rows in
                rows.contains { $0.hasSuffix("<bob> catch-up 12") } && !rows.contains { $0.contains("-- more --") }
            }
            try await alice.type("/lastlog morning")
            try await alice.press("Enter")
            try await alice.waitFor("lastlog: 1 line contains \"morning\":")

            // Evening: the logs hold the day, one file a window.
            let logs = homes[0].appendingPathComponent(".local/share/chat-client/logs/127.0.0.1:\(relay.port)")
            let general = (try? String(contentsOf: logs.appendingPathComponent("#general.log"), encoding: .utf8)) ?? ""
            #expect(general.contains(" #general <bob> morning all") && general.contains(" #general <bob> catch-up 12"), "#general.log:\n\(general)")
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
