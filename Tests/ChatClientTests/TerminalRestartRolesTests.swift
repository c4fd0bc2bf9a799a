import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

extension TerminalTests {
    /// A room's op in the client keeps the room across a server restart (issue 37): a bot that
    /// rejoins first does not take it over.
    @Suite(.serialized) struct RestartRoles {
        @Test func theRoomsOpIsStillItsOpAfterTheServerRestartsAndABotRejoinsFirst() async throws {
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
            var bot: Peer? = try await Peer(nick: "bot", port: port, version: 4)
            try await tmux.waitFor("bot joined")

            // The server stops as an operator restarts it; the bot reconnects faster than alice.
            relay.refusesConnections = true
            server.child.signal(SIGTERM)
            #expect(await server.child.waitForExit(timeout: .seconds(30)) == 0)
            relay.cutAll()
            bot?.close()
            bot = nil
            server = try await ChatServerProcess(port: port, arguments: storage)
            let rejoined = try await Peer(nick: "bot", port: port, version: 4)
            defer { rejoined.close() }
            relay.refusesConnections = false

            try await tmux.waitFor("reconnected")
            #expect(
                await rejoined.waitFor { if case .modeChanged("general", _, _, _, .op, true, "alice") = $0 { true } else { false } },
                "alice took her op back when she rejoined, and the bot was told")
            try await tmux.type("/kick bot my room")
            try await tmux.press("Enter")
            #expect(
                await rejoined.waitFor { if case .kicked("general", _, _, "bot", "alice", _) = $0 { true } else { false } },
                "alice is the op: her kick works")
        }
    }
}
