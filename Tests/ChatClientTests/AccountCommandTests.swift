import ChatClient
import ChatProtocol
import Foundation
import Testing
import TestSupport

/// chat-client's accounts (AccountCommands.swift) against the real chat-server, in pipe mode:
/// `/register` and `/login` with `--account-password-file`, `--account` logging in behind every
/// hello, and the refusals a script must not retry.
@Suite(.serialized) struct AccountCommandTests {
    /// The file `name` in `directory`, whose first line is `password`.
    static func passwordFile(_ password: String, named name: String = "password", in directory: TemporaryDirectory) throws -> String {
        let path = directory.path + "/" + name
        try (password + "\n").write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test func registersThenLogsInWithHelloAndGhostsItsOwnStaleSession() async throws {
        let server = try await ChatServerProcess(arguments: ["--handshake-timeout", "60"])
        defer { server.stop() }
        let directory = try TemporaryDirectory(prefix: "chat-client-account")
        defer { directory.remove() }
        let passwordFile = try Self.passwordFile("hunter2", in: directory)
        let first = try pipeClient(["--nick", "ann", "--port", "\(server.port)", "--account-password-file", passwordFile])
        defer { first.stop() }
        #expect(await first.waitForOutput("joined"), "ann is in: \(first.output)")
        first.send("/register")
        #expect(await first.waitForOutput("registered the account ann"), "\(first.output)")
        #expect(!first.output.contains("hunter2"), "the password is never shown")

        // A guest cannot take the nick: it falls back to ann_, as for a nick that is taken.
        let guest = try pipeClient(["--nick", "ann", "--port", "\(server.port)"])
        defer { guest.stop() }
        #expect(await guest.waitForOutput("the nick ann is a registered nick; trying ann_"), "\(guest.output)")
        #expect(await guest.waitForOutput("connected to 127.0.0.1:\(server.port) as ann_"), "\(guest.output)")
        guest.send("/quit")
        #expect(await guest.waitForExit() == 0)

        // The owner again, logging in behind its hello: the first session is ghosted and stays offline.
        let second = try pipeClient(["--account", "ann", "--port", "\(server.port)", "--account-password-file", passwordFile])
        defer { second.stop() }
        #expect(await second.waitForOutput("logged in as ann"), "second: \(second.output) first: \(first.output)")
        #expect(await first.waitForOutput("/reconnect connects again"), "the ghosted session stays offline: \(first.output)")

        // The same from a config file's account and account_password_file, with no flag for them.
        let config = directory.path + "/config.toml"
        try "account = \"ann\"\naccount_password_file = \"\(passwordFile)\"\n".write(toFile: config, atomically: true, encoding: .utf8)
        let third = try pipeClient(["--config", config, "--port", "\(server.port)"])
        defer { third.stop() }
        #expect(await third.waitForOutput("logged in as ann"), "third: \(third.output)")
        #expect(await second.waitForOutput("/reconnect connects again"), "the config's login ghosts the second session: \(second.output)")
        third.send("/quit")
        #expect(await third.waitForExit() == 0)
    }

    @Test func theSameCommandAfterRegisteringLogsInToTheNicksAccount() async throws {
        // Register with --nick and --account-password-file, quit, and start the same command
        // again: the nick is registered now, and the client holds its password. It logs in,
        // rather than give up (as it did) or fall back to ann_ as a guest would.
        let server = try await ChatServerProcess(arguments: ["--handshake-timeout", "60"])
        defer { server.stop() }
        let directory = try TemporaryDirectory(prefix: "chat-client-account")
        defer { directory.remove() }
        let passwordFile = try Self.passwordFile("hunter2", in: directory)
        let command = ["--nick", "ann", "--port", "\(server.port)", "--account-password-file", passwordFile]
        let first = try pipeClient(command)
        defer { first.stop() }
        first.send("/register")
        #expect(await first.waitForOutput("registered the account ann"), "\(first.output)")
        first.send("/quit")
        #expect(await first.waitForExit() == 0)

        let again = try pipeClient(command)
        defer { again.stop() }
        #expect(await again.waitForOutput("logged in as ann"), "\(again.output)")
        again.send("/quit")
        #expect(await again.waitForExit() == 0, "\(again.output)")

        // A password file with the wrong password: refused, and said so; no retry, no guest.
        let wrongFile = try Self.passwordFile("hunter3", named: "wrong", in: directory)
        let wrong = try pipeClient(["--nick", "ann", "--port", "\(server.port)", "--account-password-file", wrongFile])
        defer { wrong.stop() }
        #expect(await wrong.waitForExit() == 1, "\(wrong.output)")
        #expect(wrong.output.contains("the server refused us") && !wrong.output.contains("as ann_"), "\(wrong.output)")
    }

    @Test func changesItsPasswordThenDeletesItsAccount() async throws {
        let server = try await ChatServerProcess(arguments: ["--handshake-timeout", "60"])
        defer { server.stop() }
        let directory = try TemporaryDirectory(prefix: "chat-client-account")
        defer { directory.remove() }
        // In pipe mode a script types each password on the line after the command.
        let first = try pipeClient(["--nick", "ann", "--port", "\(server.port)"])
        defer { first.stop() }
        #expect(await first.waitForOutput("joined"), "\(first.output)")
        first.send("/password")
        #expect(await first.waitForOutput("you are not logged in to an account"), "a guest has no password to change: \(first.output)")
        first.send("/register")
        first.send("old-secret")
        #expect(await first.waitForOutput("registered the account ann"), "\(first.output)")
        first.send("/password")
        first.send("wrong-secret")
        first.send("new-secret")
        #expect(await first.waitForOutput("wrong password"), "the wrong current password is refused: \(first.output)")
        first.send("/password")
        first.send("old-secret")
        first.send("new-secret")
        #expect(await first.waitForOutput("the password of ann is changed"), "\(first.output)")
        #expect(!first.output.contains("secret"), "no password is ever shown: \(first.output)")
        first.send("/quit")
        #expect(await first.waitForExit() == 0)

        // The old password no longer logs in; the new one does, and deletes the account.
        let oldFile = try Self.passwordFile("old-secret", named: "old", in: directory)
        let stale = try pipeClient(["--account", "ann", "--port", "\(server.port)", "--account-password-file", oldFile])
        defer { stale.stop() }
        #expect(await stale.waitForExit() == 1, "\(stale.output)")
        let newFile = try Self.passwordFile("new-secret", named: "new", in: directory)
        let owner = try pipeClient(["--account", "ann", "--port", "\(server.port)", "--account-password-file", newFile])
        defer { owner.stop() }
        #expect(await owner.waitForOutput("logged in as ann"), "\(owner.output)")
        owner.send("/unregister")
        #expect(await owner.waitForOutput("the account ann is deleted; you keep the nick as a guest"), "\(owner.output)")
        owner.send("/quit")
        #expect(await owner.waitForExit() == 0)

        // The nick is anyone's again: a guest takes it as it is, not ann_.
        let guest = try pipeClient(["--nick", "ann", "--port", "\(server.port)"])
        defer { guest.stop() }
        #expect(await guest.waitForOutput("connected to 127.0.0.1:\(server.port) as ann"), "\(guest.output)")
        #expect(!guest.output.contains("ann_"), "\(guest.output)")
        guest.send("/quit")
        #expect(await guest.waitForExit() == 0)
    }

    @Test func parsesTheAccountCommands() throws {
        #expect(try CommandParser.parse("/register") == .register)
        #expect(try CommandParser.parse("/login") == .login(account: nil))
        #expect(try CommandParser.parse("/login Ann") == .login(account: "Ann"))
        #expect(throws: CommandError.usage("/register")) { try CommandParser.parse("/register secret") }
        #expect(throws: CommandError.invalidNick("9ann")) { try CommandParser.parse("/login 9ann") }
        #expect(try CommandParser.parse("/password") == .changePassword)
        #expect(try CommandParser.parse("/unregister") == .dropAccount)
        #expect(throws: CommandError.usage("/password")) { try CommandParser.parse("/password old new") }
        #expect(throws: CommandError.usage("/unregister")) { try CommandParser.parse("/unregister secret") }
        for line in ["/password old new", "/unregister secret", "/register secret", "/login ann secret"] {
            #expect(CommandParser.holdsSecret(line), "\(line) stays out of the history file")
        }
        #expect(!CommandParser.holdsSecret("/password") && !CommandParser.holdsSecret("/unregister"))
    }

    @Test func onlyLoopbackHostsAreSparedThePlainTextWarning() {
        for host in ["127.0.0.1", "127.8.9.10", "localhost", "::1"] { #expect(AccountLogin.isLoopback(host), "\(host)") }
        for host in ["10.0.0.1", "chat.example.org", "2001:db8::1"] { #expect(!AccountLogin.isLoopback(host), "\(host)") }
    }
}
