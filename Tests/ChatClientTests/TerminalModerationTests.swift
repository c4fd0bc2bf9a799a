import ChatProtocol
import Foundation
import Testing
import TestSupport

extension TerminalTests {
    /// Room moderation (version 4) between two real chat-clients in tmux against the real
    /// chat-server: roles shown in the nick list, a kick on both screens, no rejoin after it.
    @Suite(.serialized) struct Moderation {
        @Test func anOpKicksAndTheKickedClientDoesNotRejoin() async throws {
            let server = try await ChatServerProcess(arguments: [])
            defer { server.stop() }
            let aliceHome = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: aliceHome) }
            let bobHome = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: bobHome) }

            // alice creates #mod, so she is its op.
            let alice = try await TmuxSession(try clientInTerminal(nick: "alice", port: server.port, home: aliceHome, rooms: ["mod"]))
            defer { alice.stop() }
            try await alice.waitFor("-!- alice joined")
            let bob = try await TmuxSession(try clientInTerminal(nick: "bob", port: server.port, home: bobHome, rooms: ["mod"]))
            defer { bob.stop() }
            try await bob.waitFor("-!- bob joined")
            try await alice.waitFor("-!- bob joined")

            try await alice.type("/op bob")
            try await alice.press("Enter")
            try await bob.waitFor("mode #mod +o bob by alice")
            try await alice.type("/deop bob")
            try await alice.press("Enter")
            try await bob.waitFor("mode #mod -o bob by alice")
            try await alice.type("/voice bob")
            try await alice.press("Enter")
            try await alice.waitFor("mode #mod +v bob by alice")
            try await bob.waitFor("mode #mod +v bob by alice")
            try await alice.type("/who")
            try await alice.press("Enter")
            try await alice.waitFor("members (2): @alice +bob")

            try await alice.type("/kick bob spam")
            try await alice.press("Enter")
            try await alice.waitFor("bob was kicked by alice (spam)")
            try await bob.waitFor("you were kicked from #mod by alice (spam)")
            try await bob.waitFor("bob | [1:#mod(out)]")

            // Not after a reconnect either.
            try await bob.type("/reconnect")
            try await bob.press("Enter")
            try await bob.waitFor("reconnected to")
            try await alice.type("/who")
            try await alice.press("Enter")
            try await alice.waitFor("members (1): @alice")
            #expect(try await alice.screen().filter { $0.contains("-!- bob joined") }.count == 1, "bob joined once, before the kick")
        }
    }
}
