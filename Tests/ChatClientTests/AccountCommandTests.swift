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
        // In pipe mode a script types each answer on a line of its own after the command, as
        // many as the terminal asks: /register the password twice, /password the current one
        // and the new one twice, /unregister a yes and the password.
        let first = try pipeClient(["--nick", "ann", "--port", "\(server.port)"])
        defer { first.stop() }
        #expect(await first.waitForOutput("joined"), "\(first.output)")
        Self.send(["/password", "no-secret", "no-secret-new", "no-secret-new"], to: first)
        #expect(await first.waitForOutput("you are not logged in to an account"), "a guest has no password to change: \(first.output)")
        Self.send(["/register", "old-secret", "old-secret"], to: first)
        #expect(await first.waitForOutput("registered the account ann"), "\(first.output)")
        Self.send(["/password", "wrong-secret", "new-secret", "new-secret"], to: first)
        #expect(await first.waitForOutput("wrong password"), "the wrong current password is refused: \(first.output)")
        Self.send(["/password", "old-secret", "new-secret", "new-secret"], to: first)
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
        // /unregister asks its password even with the password file, as the terminal does.
        Self.send(["/unregister", "y", "new-secret"], to: owner)
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

    /// Sends `lines` to `client`, one after the other, as a script piped into it would.
    static func send(_ lines: [String], to client: ChildProcess) {
        for line in lines { client.send(line) }
    }

    /// A guest's `/password` and `/unregister` are refused (not logged in) and `/login` to an
    /// account that does not exist is refused by the server; each still takes the lines a
    /// script gives for it — `/password` three, `/unregister` two, `/login` one — so none of
    /// them is said in the room, and the line after them is.
    @Test func aRefusedAccountCommandStillTakesItsLinesAndNoneIsSaid() async throws {
        let server = try await ChatServerProcess(arguments: ["--handshake-timeout", "60"])
        defer { server.stop() }
        let watcher = try await Peer(nick: "watcher", port: server.port)
        defer { watcher.close() }
        let guest = try pipeClient(["--nick", "guestpipe", "--port", "\(server.port)"])
        defer { guest.stop() }
        Self.send([
            "hello", "/password", "oldsecret", "newsecret", "newsecret", "/unregister", "y", "mypw",
            "/login nobody", "loginsecret", "after", "/quit",
        ], to: guest)
        #expect(await guest.waitForExit() == 0, "\(guest.output)")
        #expect(await watcher.waitFor(TerminalTests.said("after", by: "guestpipe")), "the line after the commands is said")
        #expect(watcher.messages(from: "guestpipe") == ["hello", "after"], "no password line reaches the room: \(watcher.messages(from: "guestpipe"))")
        #expect(guest.output.contains("you are not logged in to an account"), "\(guest.output)")
        #expect(!guest.output.contains("secret") && !guest.output.contains("mypw"), "no password is shown: \(guest.output)")
    }

    /// With `--account` and its password file, a script's first lines may be `/password`: they
    /// are handled once the login behind the hello is answered, and `/password` reads the
    /// current password and the new one twice, as at the terminal.
    @Test func aScriptWithAnAccountChangesItsPasswordInItsFirstLines() async throws {
        let server = try await ChatServerProcess(arguments: ["--handshake-timeout", "60"])
        defer { server.stop() }
        try await TerminalTests.Accounts.registerAccount("piper", password: "pw-old", port: server.port)
        let watcher = try await Peer(nick: "watcher", port: server.port)
        defer { watcher.close() }
        let directory = try TemporaryDirectory(prefix: "chat-client-account")
        defer { directory.remove() }
        let oldFile = try Self.passwordFile("pw-old", named: "old", in: directory)
        let script = try pipeClient(["--account", "piper", "--port", "\(server.port)", "--account-password-file", oldFile])
        defer { script.stop() }
        Self.send(["/password", "pw-old", "pw-new", "pw-new", "after", "/quit"], to: script)
        #expect(await script.waitForExit() == 0, "\(script.output)")
        #expect(script.output.contains("the password of piper is changed"), "\(script.output)")
        #expect(!script.output.contains("not logged in"), "/password waited for the login: \(script.output)")
        #expect(await watcher.waitFor(TerminalTests.said("after", by: "piper")), "the line after /password is said")
        #expect(watcher.messages(from: "piper") == ["after"], "no password line reaches the room: \(watcher.messages(from: "piper"))")

        let newFile = try Self.passwordFile("pw-new", named: "new", in: directory)
        let again = try pipeClient(["--account", "piper", "--port", "\(server.port)", "--account-password-file", newFile])
        defer { again.stop() }
        #expect(await again.waitForOutput("logged in as piper"), "the new password logs in: \(again.output)")
        again.send("/quit")
        #expect(await again.waitForExit() == 0)
    }

    /// `/register` then `/password` at once: `/password` is judged once the registration is
    /// answered, and each takes its lines (`/register` the password twice).
    @Test func registerThenPasswordAtOnceTakeTheirLines() async throws {
        let server = try await ChatServerProcess(arguments: ["--handshake-timeout", "60"])
        defer { server.stop() }
        let watcher = try await Peer(nick: "watcher", port: server.port)
        defer { watcher.close() }
        let script = try pipeClient(["--nick", "regpipe", "--port", "\(server.port)"])
        defer { script.stop() }
        Self.send(["/register", "pw-one", "pw-one", "/password", "pw-one", "pw-two", "pw-two", "after", "/quit"], to: script)
        #expect(await script.waitForExit() == 0, "\(script.output)")
        #expect(script.output.contains("registered the account regpipe"), "\(script.output)")
        #expect(script.output.contains("the password of regpipe is changed"), "\(script.output)")
        #expect(await watcher.waitFor(TerminalTests.said("after", by: "regpipe")), "the line after the commands is said")
        #expect(watcher.messages(from: "regpipe") == ["after"], "no password line reaches the room: \(watcher.messages(from: "regpipe"))")
    }

    /// The password of `--account` changed elsewhere: the login at `/reconnect` is refused, and
    /// `/login piper` reads the password file again, so fixing the file logs in. `/login` to
    /// another account never sends the file's password: it reads the next line.
    @Test func loginReadsThePasswordFileAgainAndOnlyForItsAccount() async throws {
        let server = try await ChatServerProcess(arguments: ["--handshake-timeout", "60"])
        defer { server.stop() }
        try await TerminalTests.Accounts.registerAccount("piper", password: "pw-old", port: server.port)
        try await TerminalTests.Accounts.registerAccount("other", password: "pw-other", port: server.port)
        let watcher = try await Peer(nick: "watcher", port: server.port)
        defer { watcher.close() }
        let directory = try TemporaryDirectory(prefix: "chat-client-account")
        defer { directory.remove() }
        let file = try Self.passwordFile("pw-old", in: directory)
        let client = try pipeClient(["--account", "piper", "--port", "\(server.port)", "--account-password-file", file])
        defer { client.stop() }
        #expect(await client.waitForOutput("logged in as piper"), "\(client.output)")

        // Another session of piper's logs in (ghosting this one) and changes the password.
        let elsewhere = try await Peer(nick: "elsewhere", port: server.port, room: nil, version: WireProtocol.version)
        defer { elsewhere.close() }
        try await elsewhere.connection.send(.login(account: "piper", password: "pw-old"))
        #expect(await elsewhere.waitFor { if case .loggedIn("piper") = $0 { true } else { false } })
        try await elsewhere.connection.send(.changePassword(old: "pw-old", new: "pw-new"))
        #expect(await elsewhere.waitFor { if case .passwordChanged("piper") = $0 { true } else { false } })
        elsewhere.close()
        #expect(await client.waitForOutput("not reconnecting by itself"), "\(client.output)")

        _ = try Self.passwordFile("pw-new", in: directory)
        client.send("/reconnect")
        #expect(await client.waitForOutput("the server refused the login to piper"), "\(client.output)")
        #expect(await client.waitForOutput("reconnected to"), "\(client.output)")
        client.send("/login piper")
        #expect(await client.waitFor { output, _ in output.components(separatedBy: "logged in as piper").count == 3 },
                "the file, read again, logs in: \(client.output)")
        Self.send(["/login other", "pw-other", "after"], to: client)
        #expect(await client.waitForOutput("logged in as other"), "/login other took the next line as its password: \(client.output)")
        #expect(await watcher.waitFor(TerminalTests.said("after", by: "other")), "the line after is said")
        #expect(!watcher.frames.contains { if case .message(_, _, _, _, let text) = $0 { text.contains("pw-") } else { false } },
                "no password line reaches the room")
        client.send("/quit")
        #expect(await client.waitForExit() == 0)
    }

    /// Ghosted, the client is not reconnecting by itself, and says so when text cannot be
    /// sent; an account command offline is refused as not connected (its lines taken), not as
    /// a server without accounts.
    @Test func offlineAfterBeingGhostedSaysItIsNotReconnecting() async throws {
        let server = try await ChatServerProcess(arguments: ["--handshake-timeout", "60"])
        defer { server.stop() }
        try await TerminalTests.Accounts.registerAccount("piper", password: "pw-piper", port: server.port)
        let directory = try TemporaryDirectory(prefix: "chat-client-account")
        defer { directory.remove() }
        let file = try Self.passwordFile("pw-piper", in: directory)
        let client = try pipeClient(["--account", "piper", "--port", "\(server.port)", "--account-password-file", file])
        defer { client.stop() }
        #expect(await client.waitForOutput("logged in as piper"), "\(client.output)")
        let elsewhere = try await Peer(nick: "elsewhere", port: server.port, room: nil, version: WireProtocol.version)
        defer { elsewhere.close() }
        try await elsewhere.connection.send(.login(account: "piper", password: "pw-piper"))
        #expect(await client.waitForOutput("not reconnecting by itself"), "\(client.output)")
        Self.send(["said offline", "/login other", "pw-other", "/quit"], to: client)
        #expect(await client.waitForExit() == 0, "\(client.output)")
        let refusals = client.lines.filter { $0.contains("not connected") }
        #expect(refusals.count == 2 && refusals.allSatisfy { $0.contains("not reconnecting by itself") && !$0.contains("(reconnecting)") },
                "both refusals say the client is not reconnecting: \(client.output)")
        #expect(!client.output.contains("pw-other") && !client.output.contains("no accounts"), "\(client.output)")
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
