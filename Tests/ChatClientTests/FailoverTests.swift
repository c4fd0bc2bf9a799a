import ChatClient
import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

/// chat-client given several servers (`--server`, repeated), in pipe mode against real
/// chat-server processes: which server it lands on, what it says when it moves, and that a
/// move to the same chat loses and repeats nothing.
@Suite(.serialized) struct FailoverTests {
    private func client(_ arguments: [String]) throws -> ChildProcess {
        try pipeClient(arguments)
    }

    /// A loopback port nothing listens on (a server's, after it stopped): connecting is refused.
    private func deadPort() async throws -> Int {
        let server = try await ChatServerProcess()
        let port = server.port
        server.stop()
        return port
    }

    @Test func aRefusedFirstServerIsSkippedWithoutWaiting() async throws {
        let dead = try await deadPort()
        let live = try await ChatServerProcess()
        defer { live.stop() }
        let watcher = try await Peer(nick: "watcher", port: live.port)
        defer { watcher.close() }
        let bot = try client(["--nick", "bot", "--server", "127.0.0.1:\(dead)", "--server", "127.0.0.1:\(live.port)"])
        defer { bot.stop() }
        #expect(await bot.waitForOutput("#general -!- bot joined"), "the client lands on the second server: \(bot.output)")
        #expect(bot.output.contains("cannot connect to 127.0.0.1:\(dead): "), "says why it left the first: \(bot.output)")
        #expect(bot.output.contains("; trying 127.0.0.1:\(live.port)"), "and where it goes: \(bot.output)")
        #expect(bot.output.contains("connected to 127.0.0.1:\(live.port) as bot"), "names the server it is on: \(bot.output)")
        #expect(!bot.output.contains("every server failed") && !bot.output.contains("reconnecting in"),
                "a live server was left in the round: no backoff wait: \(bot.output)")
        bot.send("made it")
        #expect(await watcher.waitFor(TerminalTests.said("made it", by: "bot")), "the line reached the live server's room")
        bot.send("/quit")
        #expect(await bot.waitForExit() == 0, "/quit exits with status 0: \(bot.output)")
    }

    @Test func anIPv6ServerIsReachedInBrackets() async throws {
        let dead = try await deadPort()
        let live = try await ChatServerProcess(arguments: ["--host", "::1"])
        defer { live.stop() }
        let bot = try client(["--nick", "bot", "--server", "127.0.0.1:\(dead)", "--server", "[::1]:\(live.port)"])
        defer { bot.stop() }
        #expect(await bot.waitForOutput("#general -!- bot joined"), "the client reaches [::1]: \(bot.output)")
        #expect(bot.output.contains("trying [::1]:\(live.port)") && bot.output.contains("connected to [::1]:\(live.port) as bot"),
                "IPv6 addresses are shown in brackets: \(bot.output)")
        bot.closeInput()
        #expect(await bot.waitForExit() == 0)
    }

    @Test func aServerThatNeverAnswersTheHelloIsLeftForTheNext() async throws {
        let silent = try SilentListener()
        defer { silent.close() }
        let live = try await ChatServerProcess()
        defer { live.stop() }
        let bot = try client(["--nick", "bot", "--handshake-timeout", "1", "--server", "127.0.0.1:\(silent.port)", "--server", "127.0.0.1:\(live.port)"])
        defer { bot.stop() }
        #expect(await bot.waitForOutput("#general -!- bot joined"), "the client moves on to the live server: \(bot.output)")
        #expect(bot.output.contains("cannot connect to 127.0.0.1:\(silent.port): server did not answer the hello within 1 s; trying 127.0.0.1:\(live.port)"),
                "the silent server is left after the handshake timeout, and the move is announced: \(bot.output)")
        bot.closeInput()
        #expect(await bot.waitForExit() == 0)
    }

    @Test func aServerWhoseConnectNeverCompletesIsLeftAfterTheHandshakeTimeout() async throws {
        // A connect that neither succeeds nor fails, as to a machine that died: the kernel would
        // keep retrying for two minutes.
        let unreachable = try FullBacklogListener()
        defer { unreachable.close() }
        let live = try await ChatServerProcess()
        defer { live.stop() }
        let bot = try client(["--nick", "bot", "--handshake-timeout", "1", "--server", "127.0.0.1:\(unreachable.port)", "--server", "127.0.0.1:\(live.port)"])
        defer { bot.stop() }
        #expect(await bot.waitForOutput("#general -!- bot joined"), "the client moves on to the live server: \(bot.output)")
        #expect(bot.output.contains(
            "cannot connect to 127.0.0.1:\(unreachable.port): the server did not accept the connection within 1 s; trying 127.0.0.1:\(live.port)"),
            "the connect is given up after --handshake-timeout, not the kernel's two minutes: \(bot.output)")
        bot.closeInput()
        #expect(await bot.waitForExit() == 0)
    }

    @Test func aFrozenServerIsLeftForTheNextWhenItsPingGoesUnanswered() async throws {
        let frozen = try await ChatServerProcess()
        defer { frozen.stop() }
        let live = try await ChatServerProcess()
        defer { live.stop() }
        let watcher = try await Peer(nick: "watcher", port: live.port)
        defer { watcher.close() }
        let bot = try client([
            "--nick", "bot", "--ping-interval", "1", "--handshake-timeout", "2",
            "--server", "127.0.0.1:\(frozen.port)", "--server", "127.0.0.1:\(live.port)",
        ])
        defer { bot.stop() }
        #expect(await bot.waitForOutput("#general -!- bot joined"), "on the first server: \(bot.output)")
        kill(frozen.pid, SIGSTOP)
        defer { kill(frozen.pid, SIGCONT) }
        #expect(await bot.waitForOutput("reconnected to 127.0.0.1:\(live.port): 1 room"), "the client moved on: \(bot.output)")
        #expect(bot.output.contains("connection to 127.0.0.1:\(frozen.port) lost: the server did not answer a ping for 1 s; trying 127.0.0.1:\(live.port)"),
                "the hung node is named with why it was left: \(bot.output)")
        // Sent as soon as the client says it is connected: a line typed then goes after the
        // rejoin, not before it into a room this connection is not in yet.
        bot.send("moved")
        #expect(await watcher.waitFor(TerminalTests.said("moved", by: "bot")), "the line reached the live server's room: \(bot.output)")
    }

    @Test func tlsFlagsApplyToEveryServerEachVerifiedUnderItsOwnName() async throws {
        let certificates = try TemporaryDirectory(prefix: "failover-tls")
        defer { certificates.remove() }
        let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("Scripts/dev-cert.sh")
        let issue = try ChildProcess(script, ["--out", certificates.path])
        #expect(await issue.waitForExit() == 0, "dev-cert.sh made a CA and a certificate for localhost and ::1: \(issue.output)")
        let tls = ["--tls-cert", "\(certificates.path)/server.pem", "--tls-key", "\(certificates.path)/server-key.pem"]
        let first = try await ChatServerProcess(arguments: tls)
        defer { first.stop() }
        let second = try await ChatServerProcess(arguments: tls + ["--host", "::1"])
        defer { second.stop() }
        let bot = try client([
            "--nick", "bot", "--tls-ca", "\(certificates.path)/ca.pem",
            "--server", "localhost:\(first.port)", "--server", "[::1]:\(second.port)",
        ])
        defer { bot.stop() }
        #expect(await bot.waitForOutput("#general -!- bot joined"), "joined over TLS on the first server: \(bot.output)")
        first.child.killNow()
        #expect(await bot.waitForOutput("reconnected to [::1]:\(second.port): 1 room"), "moved to the second: \(bot.output)")
        #expect(await bot.waitForOutput("#general — started again"), "and rejoined there: \(bot.output)")
        let verified = bot.lines.filter { $0.contains("-- encrypted: TLS") && $0.hasSuffix(" verified") && !$0.contains("NOT verified") }
        #expect(verified.count == 2, "both connections encrypted and verified, localhost's and ::1's: \(bot.output)")
    }

    @Test func aScriptGivesUpOnlyWhenEveryServerFailed() async throws {
        let first = try await deadPort()
        let second = try await deadPort()
        let bot = try client(["--nick", "bot", "--server", "127.0.0.1:\(first)", "--server", "127.0.0.1:\(second)"])
        defer { bot.stop() }
        #expect(await bot.waitForExit() == 1, "exit status 1 when no server answers: \(bot.output)")
        #expect(bot.output.contains("cannot connect to 127.0.0.1:\(first): ") && bot.output.contains("; trying 127.0.0.1:\(second)"),
                "the second was tried after the first: \(bot.output)")
        #expect(bot.output.contains("cannot reach any of the 2 servers (127.0.0.1:\(first), 127.0.0.1:\(second)); the last: "),
                "the final error names every server: \(bot.output)")
    }

    @Test func aMalformedServerAddressIsRefusedClearly() async throws {
        let cases = [
            (["--server", "127.0.0.1"], "--server 127.0.0.1: expected HOST:PORT, such as 127.0.0.1:7000 or [::1]:7000"),
            (["--server", "::1:7000"], "--server ::1:7000: an IPv6 address goes in brackets, such as [::1]:7000"),
            (["--server", "localhost:70000"], "--server localhost:70000: the port \"70000\" is not a number from 1 to 65535"),
            (["--server", "127.0.0.1:7000", "--port", "7001"], "either with --server HOST:PORT (repeatable) or with --host and --port, not both"),
        ]
        for (arguments, message) in cases {
            let bot = try client(["--nick", "bot"] + arguments)
            defer { bot.stop() }
            let status = await bot.waitForExit()
            #expect(status != nil && status != 0, "\(arguments) is refused: \(bot.output)")
            #expect(bot.output.contains(message), "\(arguments): the error says \(message): \(bot.output)")
        }
    }

    /// The cluster case without a cluster: the second server is the same chat (the first's data
    /// directory, taken over after the first was killed), so the client must show exactly what
    /// it missed. The second server's address is a relay, since its port is only known once it
    /// starts, after the client was given its list.
    @Test func movingToAServerOfTheSameChatShowsExactlyWhatWasMissed() async throws {
        let data = try TemporaryDirectory(prefix: "failover-data")
        defer { data.remove() }
        let storage = ["--data-dir", data.path]
        let first = try await ChatServerProcess(arguments: storage)
        defer { first.stop() }
        let second = try TCPRelay(to: nil)
        defer { second.stop() }
        let bot = try client(["--nick", "bot", "--server", "127.0.0.1:\(first.port)", "--server", "127.0.0.1:\(second.port)"])
        defer { bot.stop() }
        #expect(await bot.waitForOutput("#general -!- bot joined"), "on the first server: \(bot.output)")
        let bob = try await Peer(nick: "bob", port: first.port, version: 2)
        for index in 1...3 { try await bob.say("seen \(index)") }
        #expect(await bot.waitForOutput("<bob> seen 3"), "bot saw bob's lines: \(bot.output)")
        bob.close()

        // The first node dies; the client goes round the list while the second starts on the
        // same data directory, where carol says what the client misses.
        first.child.killNow()
        #expect(await bot.waitForOutput("connection to 127.0.0.1:\(first.port) lost: "), "the loss is announced: \(bot.output)")
        #expect(bot.output.contains("; trying 127.0.0.1:\(second.port)"), "the next server is named: \(bot.output)")
        let takeover = try await ChatServerProcess(arguments: storage)
        defer { takeover.stop() }
        let carol = try await Peer(nick: "carol", port: takeover.port, version: 2)
        defer { carol.close() }
        let missed = (1...5).map { "missed \($0)" }
        for text in missed { try await carol.say(text) }
        #expect(await carol.waitFor(TerminalTests.said("missed 5", by: "carol")), "carol's lines are stored")
        second.forward(to: takeover.port)

        #expect(await bot.waitForOutput("<carol> missed 5"), "the client catches up on the second server: \(bot.output)")
        #expect(await bot.waitForOutput("reconnected to 127.0.0.1:\(second.port): 1 room, 5 new messages"), "it says where it is: \(bot.output)")
        try await carol.say("live after")
        #expect(await bot.waitForOutput("<carol> live after"), "and follows the room live: \(bot.output)")

        let lines = bot.lines.map(String.init)
        #expect(!lines.contains { $0.contains("started again") }, "the same chat: not a new room\n\(bot.output)")
        let markers = lines.indices.filter { lines[$0].contains("#general — 5 new since you left —") }
        #expect(markers.count == 1, "one catch-up marker with the count\n\(bot.output)")
        let shown = lines.filter { $0.contains("<bob> ") || $0.contains("<carol> ") }.map { String($0.split(separator: ">", maxSplits: 1)[1].dropFirst()) }
        #expect(shown == ["seen 1", "seen 2", "seen 3"] + missed + ["live after"],
                "every line once, in order, none lost:\n\(bot.output)")
        if let marker = markers.first, let firstMissed = lines.firstIndex(where: { $0.contains("<carol> missed 1") }) {
            #expect(marker < firstMissed, "the marker comes before the missed lines\n\(bot.output)")
        }
    }
}
