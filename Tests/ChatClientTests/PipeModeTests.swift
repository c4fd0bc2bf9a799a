import ChatClient
import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

/// chat-client with stdin and stdout on pipes, against the real chat-server.
@Suite(.serialized) struct PipeModeTests {
    @Test func twoPipedClientsExchangeMessages() async throws {
        let server = try await ChatServerProcess()
        defer { server.stop() }
        let ann = try pipeClient(["--nick", "ann", "--port", "\(server.port)", "--room", "#General"])
        defer { ann.stop() }
        #expect(await ann.waitForOutput("#general -!- ann joined"), "ann joins #general: \(ann.output)")
        let ben = try pipeClient(["--nick", "ben", "--port", "\(server.port)", "--room", "general"])
        defer { ben.stop() }
        #expect(await ann.waitForOutput("-!- ben joined"), "ann sees ben arrive: \(ann.output)")

        ben.send("hello ann, ünïcödé ok")
        #expect(await ann.waitForOutput("#general <ben> hello ann, ünïcödé ok"), "ann gets ben's message: \(ann.output)")
        ann.send("/msg ben psst")
        #expect(await ben.waitForOutput("*ann* psst"), "ben gets the direct message: \(ben.output)")
        #expect(await ann.waitForOutput("-> *ben* psst"), "ann sees her direct message acknowledged: \(ann.output)")
        ann.send("/quit see you")
        #expect(await ann.waitForExit() == 0, "/quit exits with status 0")
        #expect(await ben.waitForOutput("-!- ann quit (see you)"), "ben sees ann leave with her reason: \(ben.output)")
        ben.closeInput()
        #expect(await ben.waitForExit() == 0, "end of input exits with status 0")

        for output in [ann.output, ben.output] {
            #expect(!output.contains("\u{1B}"), "no escape codes in pipe mode: \(output.debugDescription)")
        }
    }

    @Test func scriptedClientSaysItsLinesAndLeaves() async throws {
        let server = try await ChatServerProcess()
        defer { server.stop() }
        let watcher = try await Peer(nick: "watcher", port: server.port)
        defer { watcher.close() }
        // The shell form: printf 'hi\n/quit\n' | chat-client --nick bot --room general
        let bot = try pipeClient(["--nick", "bot", "--port", "\(server.port)", "--room", "general"])
        defer { bot.stop() }
        bot.send("hi")
        bot.send("/quit")
        bot.closeInput()
        #expect(await bot.waitForExit() == 0, "the script ends with status 0: \(bot.output)")
        #expect(bot.output.contains("#general <bot> hi"), "the bot's own message is echoed: \(bot.output)")
        #expect(await watcher.waitFor { if case .message("general", _, _, "bot", "hi") = $0 { true } else { false } },
                "the room got the line")
    }

    /// `/help` names `/switch`'s argument as --help and CLIENT.md do: a room or a nick.
    @Test func helpSaysSwitchTakesARoomOrANick() async throws {
        let server = try await ChatServerProcess()
        defer { server.stop() }
        let bot = try pipeClient(["--nick", "bot", "--port", "\(server.port)"])
        defer { bot.stop() }
        bot.send("/help")
        bot.send("/quit")
        #expect(await bot.waitForExit() == 0, "\(bot.output)")
        #expect(bot.lines.contains { $0.contains("/switch #room|nick") }, "/help lists /switch #room|nick: \(bot.output)")
    }

    @Test func scriptedClientFailsWhenTheServerIsUnreachable() async throws {
        let server = try await ChatServerProcess()
        let port = server.port
        server.stop()
        let bot = try pipeClient(["--nick", "bot", "--port", "\(port)"])
        defer { bot.stop() }
        #expect(await bot.waitForExit() == 1, "exit status 1 when nothing listens")
        #expect(bot.output.contains("cannot reach 127.0.0.1:\(port)"), "says why: \(bot.output)")
    }
}

/// `--version`, and `--help` and docs/CLIENT.md naming the same commands and options.
@Suite struct ClientDocumentationTests {
    private func run(_ arguments: [String]) async throws -> (Int32?, String) {
        let child = try pipeClient(arguments)
        defer { child.stop() }
        let status = await child.waitForExit()
        return (status, child.output)
    }

    @Test func versionNamesTheReleaseAndTheProtocol() async throws {
        let (status, output) = try await run(["--version"])
        #expect(status == 0)
        #expect(output == "chat-client \(ClientVersion.current) (chat protocol \(WireProtocol.version))\n")
    }

    @Test func helpAndClientDocumentTheSameCommandsAndOptions() async throws {
        let (status, help) = try await run(["--help"])
        #expect(status == 0)
        let docsURL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("docs/CLIENT.md")
        let docs = try String(contentsOf: docsURL, encoding: .utf8)
        for spec in CommandSpec.all {
            #expect(help.contains("/" + spec.name), "--help names /\(spec.name)")
            #expect(docs.contains("`/" + spec.name), "CLIENT.md names /\(spec.name)")
        }
        let options = help.split(separator: "\n").compactMap { line -> String? in
            let trimmed = line.drop { $0 == " " }
            guard trimmed.hasPrefix("--") else { return nil }
            return String(trimmed.prefix { $0 != " " })
        }
        #expect(options.count >= 9, "the options were found in --help: \(options)")
        for option in options where option != "--help" {
            #expect(docs.contains("`" + option + "`"), "CLIENT.md documents \(option)")
        }
        // Every setting of the config file, and [tls]'s keys, in the example file of "The config file".
        let lines = docs.split(separator: "\n")
        for setting in ClientSettings.names + ["mode", "ca_file"] {
            #expect(lines.contains { $0.hasPrefix(setting + " = ") }, "CLIENT.md's config file sets \(setting)")
        }
        for table in ["[tls]", "[aliases]"] { #expect(lines.contains { $0 == table }, "CLIENT.md's config file has \(table)") }
        // Each of them is read by the parser, as the example writes it.
        let example = try #require(docs.range(of: "```toml\n").flatMap { start in
            docs[start.upperBound...].range(of: "```").map { String(docs[start.upperBound..<$0.lowerBound]) }
        })
        #expect(throws: Never.self, "CLIENT.md's example config file is read as it is") { try ClientSettings(parsing: example) }
    }
}

/// The client against servers that misbehave in ways the real server never does.
@Suite struct HostileServerTests {
    /// A server that reads a hello, answers with a welcome and closes at once, every time.
    private final class WelcomeAndDrop: @unchecked Sendable {
        let port: Int
        private let listener: Int32

        init() throws {
            let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            self.listener = listener
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } }
            guard listen(listener, 8) == 0 else { throw POSIXError(.EADDRINUSE) }
            _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) } }
            port = Int(UInt16(bigEndian: address.sin_port))
            var encoded: [UInt8] = []
            FrameEncoder.encode(.welcome(version: 1, nick: "bot", maxFrameSize: 16_384, motd: ""), into: &encoded)
            let welcome = encoded
            Thread.detachNewThread {
                while true {
                    let client = accept(listener, nil, nil)
                    if client < 0 { return }
                    var buffer = [UInt8](repeating: 0, count: 1024)
                    _ = read(client, &buffer, buffer.count)
                    _ = welcome.withUnsafeBytes { write(client, $0.baseAddress, $0.count) }
                    close(client)
                }
            }
        }

        func stop() {
            shutdown(listener, Int32(SHUT_RDWR))
            close(listener)
        }
    }

    @Test func aServerThatWelcomesAndDropsIsRedialledWithGrowingDelays() async throws {
        let server = try WelcomeAndDrop()
        defer { server.stop() }
        let bot = try pipeClient(["--nick", "bot", "--port", "\(server.port)"])
        defer { bot.stop() }
        #expect(await bot.waitForOutput("(attempt 4)"), "the client keeps redialling: \(bot.output)")
        let attempts = bot.lines.filter { $0.contains("reconnecting in") }
        #expect(attempts.filter { $0.hasSuffix("(attempt 1)") }.count == 1,
                "a session that did not stay up never resets the backoff:\n\(attempts.joined(separator: "\n"))")
        #expect(attempts.contains { $0.hasSuffix("(attempt 3)") })
    }

    @Test func aServerThatWelcomesAndDropsIsLeftForALiveOne() async throws {
        let flaky = try WelcomeAndDrop()
        defer { flaky.stop() }
        let live = try await ChatServerProcess()
        defer { live.stop() }
        let watcher = try await Peer(nick: "watcher", port: live.port)
        defer { watcher.close() }
        let bot = try pipeClient([
            "--nick", "bot", "--server", "127.0.0.1:\(flaky.port)", "--server", "127.0.0.1:\(live.port)",
        ])
        defer { bot.stop() }
        #expect(await bot.waitForOutput("#general -!- bot joined"), "the client ends up on the live server: \(bot.output)")
        #expect(bot.output.contains("connection to 127.0.0.1:\(flaky.port) lost: the server closed the connection; trying 127.0.0.1:\(live.port)"),
                "the drop is announced with the next server: \(bot.output)")
        bot.send("settled")
        #expect(await watcher.waitFor(TerminalTests.said("settled", by: "bot")), "the client talks on the live server")
        #expect(bot.lines.filter { $0.contains("connected to 127.0.0.1:") }.count == 2, "and stays there: \(bot.output)")
    }
}
