import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

extension TerminalTests {
    /// How the client deals with servers that refuse, fall silent, drop it or restart.
    @Suite(.serialized) struct Connection {
        private let prompt = TerminalTests.prompt

        @Test func aTakenNickAtTheStartFallsBackToNickUnderscore() async throws {
            let server = try await ChatServerProcess()
            defer { server.stop() }
            let holder = try await Peer(nick: "alice", port: server.port)
            defer { holder.close() }
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: server.port, home: home))
            defer { tmux.stop() }
            try await tmux.waitFor("the nick alice is taken; trying alice_")
            try await tmux.waitFor("-!- alice_ joined")
            #expect(await holder.waitFor { if case .joined("general", _, _, "alice_") = $0 { true } else { false } },
                    "the client joined as alice_")
        }

        @Test func aServerThatAcceptsAndSaysNothingIsLeftAfterTheHandshakeDeadline() async throws {
            let silent = try SilentListener()
            defer { silent.close() }
            let port = silent.port

            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: port, home: home, extra: ["--handshake-timeout", "1"]))
            defer { tmux.stop() }
            try await tmux.waitFor("server did not answer the hello within 1 s; reconnecting")
            try await tmux.waitFor("(attempt 2)")
            try await tmux.type("/quit")
            try await tmux.press("Enter")
            try await tmux.waitFor("EXIT=0")
        }

        @Test func aServerThatStopsAnsweringIsPingedAndRedialled() async throws {
            try await TerminalTests.start(clientArguments: ["--ping-interval", "1", "--handshake-timeout", "2"]) { server, tmux, bob, _ in
                // bob stays, so the room (and its epoch) outlives alice's dead connection.
                kill(server.pid, SIGSTOP)
                try await tmux.waitFor("the server did not answer a ping for 1 s")
                kill(server.pid, SIGCONT)
                try await tmux.waitFor("-- reconnected to 127.0.0.1:\(server.port): 1 room, nothing new")
            }
        }

        @Test func aRejoinShowsOnlyWhatWasMissedWithAMarker() async throws {
            let server = try await ChatServerProcess()
            defer { server.stop() }
            let relay = try TCPRelay(to: server.port)
            defer { relay.stop() }
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: relay.port, home: home))
            defer { tmux.stop() }
            try await tmux.waitFor("-!- alice joined")
            let bob = try await Peer(nick: "bob", port: server.port)
            defer { bob.close() }
            for index in 1...3 { try await bob.say("seen \(index)") }
            try await tmux.waitFor("<bob> seen 3")

            // The outage lasts until bob has said two things: the client's redials are refused.
            relay.refusesConnections = true
            relay.cutAll()
            try await tmux.waitFor("disconnected:")
            #expect(await bob.waitFor { if case .quit("general", _, _, "alice", _) = $0 { true } else { false } }, "the server saw alice go")
            try await bob.say("missed 1")
            try await bob.say("missed 2")
            #expect(await bob.waitFor(TerminalTests.said("missed 2", by: "bob")), "bob's lines are in the room's history")
            relay.refusesConnections = false
            try await tmux.waitFor("— 2 new since you left —")
            try await tmux.waitFor("<bob> missed 2")
            try await tmux.waitFor("-- reconnected to 127.0.0.1:\(relay.port): 1 room, 2 new messages")
            let rows = try await tmux.screen()
            let marker = try #require(rows.firstIndex { $0.contains("2 new since you left") })
            let first = try #require(rows.firstIndex { $0.contains("<bob> missed 1") })
            let second = try #require(rows.firstIndex { $0.contains("<bob> missed 2") })
            #expect(marker < first && first < second, "the marker, then the missed messages in order:\n\(rows.joined(separator: "\n"))")
            for index in 1...3 {
                #expect(rows.filter { $0.contains("<bob> seen \(index)") }.count == 1, "\"seen \(index)\" is not shown again")
            }
        }

        @Test func aRestartedServerIsRecognised() async throws {
            var server = try await ChatServerProcess()
            defer { server.stop() }
            let port = server.port
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: port, home: home))
            defer { tmux.stop() }
            try await tmux.waitFor("-!- alice joined")
            try await tmux.type("before the restart")
            try await tmux.press("Enter")
            try await tmux.waitFor("<alice> before the restart")

            server.stop()
            try await tmux.waitFor("disconnected:")
            try await tmux.type("typed while offline")
            server = try await ChatServerProcess(port: port)
            try await tmux.waitFor("— started again: the server restarted or forgot the room —")
            let bob = try await Peer(nick: "bob", port: port)
            defer { bob.close() }
            try await bob.say("welcome back")
            try await tmux.waitFor("<bob> welcome back")
            try await tmux.waitForInput("typed while offline", prompt: prompt)
            try await tmux.press("Enter")
            #expect(await bob.waitFor(TerminalTests.said("typed while offline", by: "alice")), "alice talks in #general again")
        }
    }
}
