import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

extension TerminalTests {
    /// The client against a server that stores its rooms: killed and restarted, it is the same room.
    @Suite(.serialized) struct DurableRestart {
        @Test func aKilledAndRestartedServerIsTheSameRoomAndTheClientShowsExactlyWhatItMissed() async throws {
            let data = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: data) }
            let storage = ["--data-dir", data.path]
            var server = try await ChatServerProcess(arguments: storage)
            defer { server.stop() }
            let port = server.port
            let relay = try TCPRelay(to: port)
            defer { relay.stop() }
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: relay.port, home: home))
            defer { tmux.stop() }
            try await tmux.waitFor("-!- alice joined")
            let bob = try await Peer(nick: "bob", port: port)
            for index in 1...3 { try await bob.say("seen \(index)") }
            try await tmux.waitFor("<bob> seen 3")

            // alice is cut off; bob says two things, which are stored once echoed; then the server
            // is killed outright and started again on the same port and data directory.
            relay.refusesConnections = true
            relay.cutAll()
            try await tmux.waitFor("disconnected:")
            try await bob.say("missed 1")
            try await bob.say("missed 2")
            #expect(await bob.waitFor(TerminalTests.said("missed 2", by: "bob")), "bob's lines were acknowledged")
            bob.close()
            server.child.killNow()
            server = try await ChatServerProcess(port: port, arguments: storage)
            relay.refusesConnections = false

            try await tmux.waitFor("— 2 new since you left —")
            try await tmux.waitFor("<bob> missed 2")
            let rows = try await tmux.screen()
            #expect(!rows.contains { $0.contains("started again") }, "the same epoch: not a new room\n\(rows.joined(separator: "\n"))")
            let marker = try #require(rows.firstIndex { $0.contains("2 new since you left") })
            let first = try #require(rows.firstIndex { $0.contains("<bob> missed 1") })
            let second = try #require(rows.firstIndex { $0.contains("<bob> missed 2") })
            #expect(marker < first && first < second, "the marker, then the missed messages in order:\n\(rows.joined(separator: "\n"))")
            for index in 1...3 {
                #expect(rows.filter { $0.contains("<bob> seen \(index)") }.count == 1, "\"seen \(index)\" is not shown again")
            }
        }

        /// A server killed and started again on a journal someone deleted cannot prove it kept
        /// everything it acknowledged: its rooms move to a new epoch, and the client shows the
        /// break — the room marked as started again — rather than go on as if nothing was lost.
        @Test func aRestartOnADeletedJournalIsShownAsTheRoomStartedAgain() async throws {
            let data = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: data) }
            let storage = ["--data-dir", data.path]
            var server = try await ChatServerProcess(arguments: storage)
            defer { server.stop() }
            let port = server.port
            let relay = try TCPRelay(to: port)
            defer { relay.stop() }
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: relay.port, home: home))
            defer { tmux.stop() }
            try await tmux.waitFor("-!- alice joined")
            let bob = try await Peer(nick: "bob", port: port)
            try await bob.say("before the loss")
            try await tmux.waitFor("<bob> before the loss")
            bob.close()

            relay.refusesConnections = true
            relay.cutAll()
            try await tmux.waitFor("disconnected:")
            server.child.killNow()
            _ = await server.child.waitForExit(timeout: .seconds(10))
            let journal = try FileManager.default.contentsOfDirectory(atPath: data.path).filter { $0.hasPrefix("journal-") }
            #expect(!journal.isEmpty, "the killed server left its journal file")
            for name in journal { try FileManager.default.removeItem(atPath: data.path + "/" + name) }
            server = try await ChatServerProcess(port: port, arguments: storage)
            relay.refusesConnections = false

            try await tmux.waitFor("started again")
            let rows = try await tmux.screen()
            let marker = try #require(rows.lastIndex { $0.contains("started again") })
            let before = try #require(rows.firstIndex { $0.contains("<bob> before the loss") })
            #expect(before < marker, "the old history above, the break below it:\n\(rows.joined(separator: "\n"))")
        }
    }
}
