import ChatProtocol
import Foundation
import Glibc
import Testing
import TestSupport

/// `chat-server --config FILE` against the real binary (issue 38, finding 6): the file sets flags
/// and the command line overrides it; an error names the file's line and exits 78;
/// `--check-config` checks without serving; SIGHUP applies what can change live, logs what waits
/// for a restart, and keeps the running settings when the file no longer parses.
@Suite("The server's config file", .serialized)
struct ServerConfigFileTests {
    @Test func theFileSetsFlagsAndTheCommandLineOverridesIt() async throws {
        let directory = try TemporaryDirectory(prefix: "chat-config")
        defer { directory.remove() }
        let file = directory.path + "/chat-server.toml"
        try """
        # a comment
        motd = "from the file"
        rate-limit = 12.5
        no-persistence = true
        admin-account = ["root"]
        """.write(toFile: file, atomically: true, encoding: .utf8)
        let fromFile = try await ChatServerProcess(.memory, arguments: ["--config", file, "--log-level", "warning"])
        let welcomed = try await TestClient.connect(to: fromFile, nick: "reader")
        #expect(welcomed.connection.welcome.motd == "from the file", "the file's motd: \(welcomed.connection.welcome)")
        welcomed.close()
        fromFile.stop()

        let overridden = try await ChatServerProcess(.memory, arguments: ["--config", file, "--motd", "from the flags", "--log-level", "warning"])
        defer { overridden.stop() }
        let client = try await TestClient.connect(to: overridden, nick: "reader")
        #expect(client.connection.welcome.motd == "from the flags", "the command line wins: \(client.connection.welcome)")
        client.close()
    }

    @Test func errorsNameTheLineAndCheckConfigExitsWithoutServing() async throws {
        let directory = try TemporaryDirectory(prefix: "chat-config")
        defer { directory.remove() }
        let cases: [(text: String, line: Int, says: String)] = [
            ("motd = \"hi\"\n\nmax-memory = \"lots\"\n", 3, "lots"),
            ("motd = \"hi\"\nmax-clints = 5\n", 2, "unknown setting max-clints"),
            ("motd = \"not closed\n", 1, "not closed"),
            ("no-persistence = \"yes\"\n", 1, "true or false"),
            ("[server]\nport = 1\n", 1, "unknown table"),
            ("tls-cert = \"/nowhere.pem\"\n", 1, "--tls-key"),
        ]
        for (index, example) in cases.enumerated() {
            let file = directory.path + "/bad\(index).toml"
            try example.text.write(toFile: file, atomically: true, encoding: .utf8)
            for mode in [["--check-config"], ["--port", "0", "--no-persistence"]] {
                let run = try await Operations.run(["--config", file] + mode)
                #expect(run.status == 78, "\(example.text): exit 78 (EX_CONFIG), not \(String(describing: run.status)):\n\(run.output)")
                #expect(run.output.contains("\(file):\(example.line):"), "\(example.text): names line \(example.line):\n\(run.output)")
                #expect(run.output.contains(example.says), "\(example.text): says \(example.says):\n\(run.output)")
                #expect(!run.output.contains("listening on"), "nothing serves a bad file")
            }
        }
        let good = directory.path + "/good.toml"
        try "motd = \"hello\"\nmax-memory = \"1G\"\nhandshake-timeout = 2.5\n".write(toFile: good, atomically: true, encoding: .utf8)
        let check = try await Operations.run(["--check-config", "--config", good])
        #expect(check.status == 0 && check.output.contains("configuration OK"), "\(check.output)")
        #expect(!check.output.contains("listening on"), "--check-config does not serve")
        // The shipped example checks, too.
        let example = Operations.root.appendingPathComponent("Scripts/systemd/chat-server.toml").path
        let shipped = try await Operations.run(["--check-config", "--config", example])
        #expect(shipped.status == 0, "the example config file is valid:\n\(shipped.output)")
    }

    /// A check of two settings together ("the idle timeout must be longer than the idle ping
    /// interval") names no flag, yet a value from the file is behind it: exit 78 with the file's
    /// line of that setting, as for any other problem in the file. The same values as flags stay
    /// a usage error (64), with or without a file that plays no part in it.
    @Test func aCombinationTheFileMakesNamesItsLineButTheSameFromFlagsIsAUsageError() async throws {
        let directory = try TemporaryDirectory(prefix: "chat-config")
        defer { directory.remove() }
        let problem = "the idle timeout must be longer than the idle ping interval"
        let both = directory.path + "/both.toml"
        try "motd = \"hi\"\nidle-timeout = 10\nidle-ping-interval = 30\n".write(toFile: both, atomically: true, encoding: .utf8)
        for mode in [["--check-config"], ["--port", "0", "--no-persistence"]] {
            let run = try await Operations.run(["--config", both] + mode)
            #expect(run.status == 78, "\(mode): exit 78 (EX_CONFIG), not \(String(describing: run.status)):\n\(run.output)")
            #expect(run.output == "chat-server: \(both):2: idle-timeout: \(problem)\n", "\(mode): the file's line:\n\(run.output)")
        }
        // One value from the file, the other from the command line: the file's is the one to blame.
        let one = directory.path + "/one.toml"
        try "idle-timeout = 10\n".write(toFile: one, atomically: true, encoding: .utf8)
        let mixed = try await Operations.run(["--config", one, "--idle-ping-interval", "30", "--check-config"])
        #expect(mixed.status == 78, "\(mixed.output)")
        #expect(mixed.output == "chat-server: \(one):1: idle-timeout: \(problem)\n", "\(mixed.output)")

        let unrelated = directory.path + "/unrelated.toml"
        try "motd = \"hi\"\n".write(toFile: unrelated, atomically: true, encoding: .utf8)
        for file in [[], ["--config", unrelated]] {
            let flags = try await Operations.run(file + ["--idle-timeout", "10", "--idle-ping-interval", "30", "--check-config"])
            #expect(flags.status == 64, "\(file): the command line's mistake, exit 64:\n\(flags.output)")
            #expect(flags.output.hasPrefix("Error: \(problem)\n"), "\(file): \(flags.output)")
            #expect(!flags.output.contains(unrelated), "\(file): the file is not blamed:\n\(flags.output)")
        }
    }

    @Test func sighupAppliesLiveSettingsAndKeepsThemWhenTheFileBreaks() async throws {
        let directory = try TemporaryDirectory(prefix: "chat-config")
        defer { directory.remove() }
        let file = directory.path + "/chat-server.toml"
        try "motd = \"one\"\nhistory-size = 100\n".write(toFile: file, atomically: true, encoding: .utf8)
        let server = try await ChatServerProcess(.durable, arguments: ["--config", file, "--log-level", "info"])
        defer { server.stop() }
        let first = try await TestClient.connect(to: server, nick: "first")
        #expect(first.connection.welcome.motd == "one")
        first.close()

        try "motd = \"two\"\nhistory-size = 50\n".write(toFile: file, atomically: true, encoding: .utf8)
        server.child.signal(SIGHUP)
        #expect(await server.child.waitForOutput("configuration reloaded"), "the reload is logged:\n\(server.child.output)")
        let reloaded = server.child.lines.first { $0.contains("configuration reloaded") }.map(String.init) ?? ""
        #expect(reloaded.contains("motd"), "what changed: \(reloaded)")
        #expect(reloaded.contains("history-size"), "what waits for a restart: \(reloaded)")
        let second = try await TestClient.connect(to: server, nick: "second")
        #expect(second.connection.welcome.motd == "two", "the new motd is in force: \(second.connection.welcome)")
        second.close()

        try "motd = \"three\"\nmax-memory = \"lots\"\n".write(toFile: file, atomically: true, encoding: .utf8)
        server.child.signal(SIGHUP)
        #expect(await server.child.waitForOutput("configuration not reloaded"), "a broken file is logged:\n\(server.child.output)")
        #expect(server.child.output.contains("\(file):2:"), "with its line:\n\(server.child.output)")
        let third = try await TestClient.connect(to: server, nick: "third")
        #expect(third.connection.welcome.motd == "two", "the running settings stay: \(third.connection.welcome)")
        third.close()
    }
}
