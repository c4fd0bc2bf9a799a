import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

extension TerminalTests {
    /// The client in a terminal, given several servers (`--server`, repeated).
    @Suite(.serialized) struct Failover {
        /// Two servers that are not one chat: each has its own #general, with its own epoch. The
        /// client moves from the first to the second when the first dies, says so, names the new
        /// server in the status line, and marks the room as started again instead of taking the
        /// second chat's history for the first's (whose seqs are higher).
        @Test func aMoveIsAnnouncedAndAnotherChatIsMarkedNotMixed() async throws {
            let first = try await ChatServerProcess()
            defer { first.stop() }
            let second = try await ChatServerProcess()
            defer { second.stop() }
            let carol = try await Peer(nick: "carol", port: second.port, version: 2)
            defer { carol.close() }
            try await carol.say("second chat 1")
            try await carol.say("second chat 2")
            #expect(await carol.waitFor(TerminalTests.said("second chat 2", by: "carol")), "the second chat has a history")

            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let servers = ["127.0.0.1:\(first.port)", "127.0.0.1:\(second.port)"]
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", servers: servers, home: home))
            defer { tmux.stop() }
            try await tmux.waitFor("-- connected to 127.0.0.1:\(first.port) as alice")
            try await tmux.waitFor("-!- alice joined")
            try await tmux.waitForScreen("the first server in the status line") { rows in
                rows.contains { $0.hasPrefix("alice | [1:#general] | 127.0.0.1:\(first.port)") }
            }
            let bob = try await Peer(nick: "bob", port: first.port)
            defer { bob.close() }
            for index in 1...4 { try await bob.say("first chat \(index)") }
            try await tmux.waitFor("<bob> first chat 4")

            first.child.killNow()
            try await tmux.waitForLogicalLine(containing: "!! connection to 127.0.0.1:\(first.port) lost: the server closed the connection; trying 127.0.0.1:\(second.port)")
            try await tmux.waitFor("-- reconnected to 127.0.0.1:\(second.port): 1 room, 2 new messages")
            try await tmux.waitFor("— started again: the server restarted or forgot the room —")
            try await tmux.waitFor("<carol> second chat 2")
            try await tmux.waitForScreen("the second server in the status line") { rows in
                rows.contains { $0.hasPrefix("alice | [1:#general] | 127.0.0.1:\(second.port)") }
            }

            let rows = try await tmux.screen()
            let marker = try #require(rows.firstIndex { $0.contains("started again") })
            let other1 = try #require(rows.firstIndex { $0.contains("<carol> second chat 1") })
            let other2 = try #require(rows.firstIndex { $0.contains("<carol> second chat 2") })
            #expect(marker < other1 && other1 < other2, "the marker, then the second chat's history, whole:\n\(rows.joined(separator: "\n"))")
            #expect(!rows.contains { $0.contains("new since you left") }, "no catch-up count across chats:\n\(rows.joined(separator: "\n"))")
            for index in 1...4 {
                #expect(rows.filter { $0.contains("<bob> first chat \(index)") }.count == 1, "the first chat's lines stay as they were, once")
            }

            try await tmux.type("hello second chat")
            try await tmux.press("Enter")
            #expect(await carol.waitFor(TerminalTests.said("hello second chat", by: "alice")), "alice talks on the second server")
        }
    }
}
