import ChatProtocol
import Foundation
import Glibc
import SocketCore
import Testing
import TestSupport

/// What an operator meets when the server, or one of its commands, cannot start on what it was
/// given (exploratory testing, operator defects 1–3): a listener beside the chat port that cannot
/// be bound, a data directory others could change, a data directory that does not exist. Each is
/// one line and exit 1 — never a crash, which systemd would restart in a loop — and nothing is
/// created that the operator did not ask for. Every file the server makes is its user's alone.
@Suite("Start-up refusals of the real server", .serialized)
struct StartupRefusalTests {
    // MARK: Listeners beside the chat port

    /// `--metrics` on a port another socket holds, or on a name that does not resolve: the error,
    /// exit 1, and the chat listener (already bound) closed rather than dropped open — which the
    /// debug build traps on (SIGILL, exit 132).
    @Test(arguments: [ServerMode.memory, .durable])
    func aMetricsAddressThatCannotBeBoundExitsOneWithItsError(mode: ServerMode) async throws {
        let taken = try SocketListener(host: "127.0.0.1", port: 0)
        defer { taken.close() }
        let scratch = try TemporaryDirectory(prefix: "chat-refusal")
        defer { scratch.remove() }
        let storage = mode == .durable ? ["--data-dir", scratch.path + "/data"] : ["--no-persistence"]
        let busy = "127.0.0.1:\(taken.port)"
        let cases = [
            (busy, "chat-server: cannot serve metrics on \(busy): bind \(busy) failed: Address already in use (errno 98)"),
            ("nosuch.invalid:0", "chat-server: cannot serve metrics on nosuch.invalid:0: resolve nosuch.invalid:0 failed: "),
        ]
        for (address, says) in cases {
            let run = try await Operations.run(["--port", "0", "--metrics", address, "--log-level", "warning"] + storage)
            #expect(run.status == 1, "\(mode), --metrics \(address): exit 1, not \(String(describing: run.status)):\n\(run.output)")
            #expect(run.output.hasPrefix(says), "\(mode), --metrics \(address): the error alone, first:\n\(run.output)")
            #expect(run.output.split(separator: "\n").count == 1, "\(mode), --metrics \(address): one line:\n\(run.output)")
            #expect(!run.output.contains("listening on"), "nothing serves without its metrics port")
        }
        if mode == .durable {
            // The refused start closed its store: the next one finds the directory free and whole.
            let next = try await ServerUnderTest(arguments: ["--port", "0", "--data-dir", scratch.path + "/data", "--log-level", "warning"])
            next.stop()
            #expect(await next.child.waitForExit() == 0, "a server starts and stops on the directory after:\n\(next.child.output)")
        }
    }

    /// `--plain-port` beside TLS on a port another socket holds: the error, exit 1, and the TLS
    /// listener bound before it closed; before, the process trapped without even printing the error.
    @Test(arguments: [ServerMode.memory, .durable])
    func aPlainPortInUseBesideTLSExitsOneWithItsError(mode: ServerMode) async throws {
        let taken = try SocketListener(host: "127.0.0.1", port: 0)
        defer { taken.close() }
        let certificates = try await DevCertificates.make()
        let scratch = try TemporaryDirectory(prefix: "chat-refusal")
        defer { scratch.remove() }
        let storage = mode == .durable ? ["--data-dir", scratch.path + "/data"] : ["--no-persistence"]
        let run = try await Operations.run(
            ["--port", "0", "--plain-port", "\(taken.port)", "--log-level", "warning"] + certificates.serverArguments + storage)
        #expect(run.status == 1, "\(mode): exit 1, not \(String(describing: run.status)):\n\(run.output)")
        #expect(
            run.output == "chat-server: bind 127.0.0.1:\(taken.port) failed: Address already in use (errno 98)\n",
            "\(mode): the error alone:\n\(run.output)")
    }

    // MARK: The data directory's permissions

    /// A data directory its group or anyone may write to is refused — by the server and by every
    /// command that opens one — with one line that says what to run; one others may only read is
    /// served, with a warning.
    @Test func aDataDirectoryOthersCanWriteIsRefusedByTheServerAndEveryCommand() async throws {
        let scratch = try TemporaryDirectory(prefix: "chat-permissions")
        defer { scratch.remove() }
        let data = scratch.path + "/data"
        let passwordFile = scratch.path + "/password"
        try "pw-root\n".write(toFile: passwordFile, atomically: true, encoding: .utf8)
        let made = try await Operations.run(["account", "add", "root", "--data-dir", data, "--password-file", passwordFile])
        #expect(made.status == 0, "\(made.output)")
        // A server's data directory, rooms and all, as `backup` wants one.
        let first = try await ServerUnderTest(arguments: ["--port", "0", "--data-dir", data, "--log-level", "warning"])
        first.stop()
        for mode in [0o777, 0o770, 0o1777] as [mode_t] {
            #expect(chmod(data, mode) == 0)
            let octal = Self.octal(mode)
            let problem = "data directory \(data) is writable by others (mode \(octal)): they could replace its files; run chmod 700 \(data)"
            let runs: [(arguments: [String], says: String)] = [
                (["--port", "0", "--data-dir", data], "chat-server: \(problem)\n"),
                (["check", data], "chat-server check: \(problem)\n"),
                (["backup", scratch.path + "/copy", "--data-dir", data], "chat-server backup: \(problem)\n"),
                (["account", "list", "--data-dir", data], "Error: \(problem)\n"),
                (["account", "add", "ops", "--data-dir", data, "--password-file", passwordFile], "Error: \(problem)\n"),
            ]
            for run in runs {
                let result = try await Operations.run(run.arguments)
                #expect(result.status == 1, "mode \(octal), \(run.arguments): exit 1, not \(String(describing: result.status)):\n\(result.output)")
                #expect(result.output == run.says, "mode \(octal), \(run.arguments): says\n\(run.says)but said\n\(result.output)")
            }
        }
        #expect(access(scratch.path + "/copy", F_OK) != 0, "no backup was made of it")

        #expect(chmod(data, 0o755) == 0)
        let readable = try await ServerUnderTest(arguments: ["--port", "0", "--data-dir", data])
        defer { readable.stop() }
        let warning = "data directory \(data) can be listed by others (mode 0755): run chmod 700 \(data) so that they cannot read its files either"
        #expect(readable.child.output.contains(warning), "a directory others may read is served, with a warning:\n\(readable.child.output)")
    }

    /// Under umask 022, where the database files were made 0644 (password hashes, room keys): every
    /// file the server, `account add` and `backup` make is 0600, and a directory they make 0700.
    @Test func everyFileTheServerMakesIsItsOwnUnderAnOpenUmask() async throws {
        let scratch = try TemporaryDirectory(prefix: "chat-umask")
        defer { scratch.remove() }
        let data = scratch.path + "/data"
        let passwordFile = scratch.path + "/password"
        try "pw-root\n".write(toFile: passwordFile, atomically: true, encoding: .utf8)
        let openUmask = ["/bin/sh", "-c", "umask 022 && exec \"$0\" \"$@\""]
        let add = try ChildProcess(
            URL(fileURLWithPath: openUmask[0]),
            Array(openUmask.dropFirst()) + [try Operations.executable().path, "account", "add", "root", "--data-dir", data, "--password-file", passwordFile])
        #expect(await add.waitForExit() == 0, "\(add.output)")
        #expect(try Self.modes(in: data) == ["accounts.sqlite": 0o600], "account add made the directory's one file private")

        let server = try await ServerUnderTest(
            arguments: ["--port", "0", "--data-dir", data, "--admin-account", "root", "--log-level", "warning"], wrapper: openUmask)
        defer { server.stop() }
        // An account, a room and a message: every database and the journal are written.
        let alice = try await TestClient.connect(port: server.port, nick: "alice", version: 3)
        try await alice.send(.register(password: "pw-alice"))
        #expect(try await registration(of: alice) == .registered(account: "alice"))
        alice.close()
        let bob = try await TestClient.connect(port: server.port, nick: "bob")
        try await bob.join("r")
        try await bob.send(.say(room: "r", text: "hello"))
        _ = try await bob.waitFor("the echo") { if case .message = $0 { true } else { nil } }
        bob.close()
        let modes = try Self.modes(in: data)
        for name in ["accounts.sqlite", "accounts.sqlite-wal", "moderation.sqlite", "moderation.sqlite-wal", "rooms.sqlite3", "rooms.sqlite3-wal"] {
            #expect(modes[name] != nil, "\(name) is there to be checked: \(modes)")
        }
        #expect(modes.values.allSatisfy { $0 == 0o600 }, "every file is 0600: \(modes.mapValues { String($0, radix: 8) })")
        #expect(try Self.mode(of: data) == 0o700)

        let copy = scratch.path + "/copy"
        let backup = try ChildProcess(
            URL(fileURLWithPath: openUmask[0]), Array(openUmask.dropFirst()) + [try Operations.executable().path, "backup", copy, "--data-dir", data])
        #expect(await backup.waitForExit() == 0, "\(backup.output)")
        let copied = try Self.modes(in: copy)
        #expect(!copied.isEmpty && copied.values.allSatisfy { $0 == 0o600 }, "the copy's files are 0600: \(copied.mapValues { String($0, radix: 8) })")
        #expect(try Self.mode(of: copy) == 0o700)
    }

    // MARK: A data directory that does not exist

    /// `account list` and `account passwd` read accounts that must exist already: a mistyped
    /// `--data-dir` is refused as `check` refuses it, and nothing is created there. `account add`
    /// may come before the server's first start, so it creates the directory, and says so.
    @Test func accountCommandsRefuseADataDirectoryThatDoesNotExistWhileAddMakesIt() async throws {
        let scratch = try TemporaryDirectory(prefix: "chat-typo")
        defer { scratch.remove() }
        let typo = scratch.path + "/typo"
        let passwordFile = scratch.path + "/password"
        try "pw-root\n".write(toFile: passwordFile, atomically: true, encoding: .utf8)
        let refusal = "Error: \(typo) is not a directory: name the server's --data-dir (only `account add` creates one)\n"
        for arguments in [["list", "--data-dir", typo], ["passwd", "root", "--data-dir", typo, "--password-file", passwordFile]] {
            let run = try await AccountAttackTests.accountCommand(arguments)
            #expect(run.status == 1, "\(arguments): exit 1, not \(run.status):\n\(run.output)")
            #expect(run.output == refusal, "\(arguments): says\n\(refusal)but said\n\(run.output)")
            #expect(access(typo, F_OK) != 0, "\(arguments) created nothing")
        }
        let add = try await AccountAttackTests.accountCommand(["add", "root", "--data-dir", typo, "--password-file", passwordFile])
        #expect(add.status == 0, "\(add.output)")
        #expect(add.output == "created the data directory \(typo) (mode 0700)\naccount root created\n", "\(add.output)")
        #expect(try Self.mode(of: typo) == 0o700)
        let list = try await AccountAttackTests.accountCommand(["list", "--data-dir", typo])
        #expect(list.status == 0 && list.output == "root\n", "\(list.output)")
    }

    // MARK: Helpers

    /// The permission bits of each regular file in `directory`, by name.
    static func modes(in directory: String) throws -> [String: mode_t] {
        var modes: [String: mode_t] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: directory) {
            var info = stat()
            guard lstat(directory + "/" + name, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { continue }
            modes[name] = info.st_mode & 0o7777
        }
        return modes
    }

    /// `mode` as `ls` and `chmod` write it: four octal digits.
    static func octal(_ mode: mode_t) -> String {
        let digits = String(mode, radix: 8)
        return String(repeating: "0", count: max(0, 4 - digits.count)) + digits
    }

    /// The permission bits of `path`.
    static func mode(of path: String) throws -> mode_t {
        var info = stat()
        guard lstat(path, &info) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        return info.st_mode & 0o7777
    }
}
