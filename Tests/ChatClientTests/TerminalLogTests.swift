import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

extension TerminalTests {
    /// The window logs across several runs of the client: a line the room's backlog shows again
    /// at every start is logged once, and the files stay in time order.
    @Suite(.serialized) struct Logs {
        @Test func threeClientStartsLeaveEachLineOnceInTheLogInTimeOrder() async throws {
            let server = try await ChatServerProcess()
            defer { server.stop() }
            let relay = try TCPRelay(to: server.port)
            defer { relay.stop() }
            let home = try temporaryDirectory()
            defer { try? FileManager.default.removeItem(at: home) }
            try writeConfig("timestamp_format = \"%H:%M:%S\"\nlog = true\n", home: home)
            let bob = try await Peer(nick: "bob", port: server.port)
            defer { bob.close() }
            try await bob.say("good morning all")

            var said: [String] = ["good morning all"]
            for run in 1...3 {
                let tmux = try await TmuxSession(try clientInTerminal(nick: "alice", port: relay.port, home: home))
                defer { tmux.stop() }
                try await tmux.waitFor("<bob> good morning all")
                try await tmux.waitFor("<bob> \(said.last ?? "")")
                let live = "live in run \(run)"
                try await bob.say(live)
                try await tmux.waitFor("<bob> \(live)")
                said.append(live)
                if run == 1 {
                    // A completion list and a reconnect's countdown are for the moment, not the log.
                    try await tmux.type("/w")
                    try await tmux.press("Tab")
                    try await tmux.waitFor("/whois")
                    try await tmux.press("C-u")
                    relay.cutAll()
                    try await tmux.waitFor("reconnecting in")
                    try await tmux.waitFor("reconnected to")
                }
                try await tmux.type("/quit")
                try await tmux.press("Enter")
                try await tmux.waitFor("EXIT=0")
                tmux.stop()
                // Said while alice is away: the next start shows it in the backlog, and logs it once.
                let away = "while away after run \(run)"
                try await bob.say(away)
                #expect(await bob.waitFor(TerminalTests.said(away, by: "bob")), "bob's line is echoed")
                said.append(away)
            }
            // The last "while away" line was never shown: the log cannot have it.
            said.removeLast()

            let path = home.appendingPathComponent(".local/share/chat-client/logs/127.0.0.1:\(relay.port)/#general.log")
            let text = try String(contentsOf: path, encoding: .utf8)
            let lines = text.split(separator: "\n").map(String.init)
            let bobs = lines.compactMap { line in line.firstRange(of: "<bob> ").map { String(line[$0.upperBound...]) } }
            #expect(bobs == said, "each of bob's lines once, in order:\n\(text)")
            let stamps = lines.map { String($0.prefix(19)) }
            #expect(stamps == stamps.sorted(), "the stamps never go backwards:\n\(text)")
            #expect(!text.contains("reconnecting in") && !text.contains("/whois"), "no countdown, no completion list:\n\(text)")
        }
    }
}
