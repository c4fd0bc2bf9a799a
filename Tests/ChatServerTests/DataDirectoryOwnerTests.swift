import Foundation
import Glibc
import Testing
import TestSupport

/// A data directory that another user owns, against the real binary. The tests run as root here,
/// which is the case that matters: a server run as root on a directory an unprivileged user owns
/// would open, create and write files where that user can swap them (a `journal-N.log` made a
/// symbolic link to a system file) — and the files it made would be root's, which the service's
/// own user could not open afterwards.
@Suite("A data directory another user owns", .serialized)
struct DataDirectoryOwnerTests {
    /// The unprivileged user the directory is given to.
    static let nobody: uid_t = 65534

    /// The server refuses it at start — exit 1, one line naming the directory and its owner, and
    /// nothing made in it — while `backup`, as the operator's root, still copies it (OPERATIONS.md:
    /// `sudo chat-server backup` of the state directory that systemd gives a user of its own).
    @Test(.enabled(if: geteuid() == 0, "only root can give a directory to another user"))
    func aServerRunAsRootRefusesADataDirectoryAnotherUserOwnsWhileBackupStillCopiesIt() async throws {
        let scratch = try TemporaryDirectory(prefix: "chat-owner")
        defer { scratch.remove() }
        let data = scratch.path + "/data"
        // A server's directory with rooms in it, then given to another user, as systemd's
        // DynamicUser gives the state directory to the user it makes.
        let first = try await ServerUnderTest(arguments: ["--port", "0", "--data-dir", data, "--log-level", "warning"])
        first.stop()
        try Self.giveTree(data, to: Self.nobody)
        let before = try Self.owners(in: data)

        let server = try ChildProcess(try Operations.executable(), ["--port", "0", "--data-dir", data, "--log-level", "warning"])
        defer { server.stop() }
        _ = await server.waitFor(timeout: .seconds(60)) { output, status in status != nil || output.contains("listening on") }
        if server.exitStatus == nil {
            Issue.record("the server serves a directory uid \(Self.nobody) owns:\n\(server.output)")
            server.stop()
        }
        let status = await server.waitForExit(timeout: .seconds(10))
        let says = "chat-server: data directory \(data) belongs to another user (uid 65534, nobody), who could change it: "
            + "run as that user, or give it to uid 0 (sudo chown -R 0 \(data))\n"
        #expect(status == 1, "exit 1, as every start-up refusal, not \(String(describing: status))")
        #expect(server.output == says, "says\n\(says)but said\n\(server.output)")
        let after = try Self.owners(in: data)
        #expect(after == before, "nothing made or changed in it: \(after)")

        let copy = scratch.path + "/copy"
        let backup = try await Operations.run(["backup", copy, "--data-dir", data])
        #expect(backup.status == 0, "root still backs it up:\n\(backup.output)")
        #expect(access(copy + "/rooms.sqlite3", F_OK) == 0, "the copy holds the rooms' database")
    }

    // MARK: Helpers

    /// Gives `path` and everything in it to `user` (its group too).
    static func giveTree(_ path: String, to user: uid_t) throws {
        var info = stat()
        if lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR {
            for name in try FileManager.default.contentsOfDirectory(atPath: path) { try giveTree(path + "/" + name, to: user) }
        }
        guard lchown(path, user, gid_t(user)) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
    }

    /// The owner of each entry in `directory`, and of the directory itself (""), by name.
    static func owners(in directory: String) throws -> [String: uid_t] {
        var owners: [String: uid_t] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: directory) + [""] {
            var info = stat()
            guard lstat(name.isEmpty ? directory : directory + "/" + name, &info) == 0 else { continue }
            owners[name] = info.st_uid
        }
        return owners
    }
}
