import ArgumentParser
import ChatStorage
import Dispatch
import Glibc

/// `chat-server backup DEST`: an online, consistent copy of a data directory, taken while its
/// server runs (`DataDirectoryCopy.backup`: rooms with the journal's records not yet in the
/// database, accounts, moderation); a server started on DEST serves it as it was.
struct BackupCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "backup",
        abstract: "Copy a data directory, while its server runs, into a new directory a server can start on.",
        discussion: """
            The copy is consistent: each SQLite file (rooms.sqlite3, accounts.sqlite, \
            moderation.sqlite) is copied with SQLite's online backup as of one moment, and the \
            journal's records that the database has not taken in yet — acknowledged messages — are \
            read first and applied to the copy, so every message acknowledged before the backup \
            began is in it. The running server is not stopped, locked or written to.

            Run it as the user the server runs as (or root): `sudo chat-server backup \
            /var/backups/chat-$(date +%F) --data-dir /var/lib/chat-server`. To restore, stop the \
            server, move its directory aside, put the copy in its place (mode 0700, owned by the \
            server's user), and start it; `chat-server check DIR` verifies a copy first \
            (docs/OPERATIONS.md, "Backup and restore").
            """)

    @Argument(help: ArgumentHelp("The directory to copy into: new, or empty; created if missing.", valueName: "DEST"))
    var destination: String

    @Option(
        help: ArgumentHelp(
            "The data directory to copy (the server's --data-dir). Default: $XDG_STATE_HOME/chat-server, else ~/.local/state/chat-server.",
            valueName: "PATH"))
    var dataDir: String?

    func run() throws {
        guard let source = dataDir ?? DataDirectoryDefault.path() else {
            StandardError.write("chat-server backup: no --data-dir given and neither $XDG_STATE_HOME nor $HOME is set\n")
            throw ExitCode(ExitStatus.usage)
        }
        let started = DispatchTime.now().uptimeNanoseconds
        let summary: DataDirectoryCopy.Summary
        do {
            summary = try DataDirectoryCopy.backup(from: source, to: destination)
        } catch {
            StandardError.write("chat-server backup: \(error.message)\n")
            throw ExitCode(ExitStatus.startupRefused)
        }
        let millis = (DispatchTime.now().uptimeNanoseconds - started) / 1_000_000
        for database in summary.databases { print("copied \(database.name) (\(database.bytes) bytes)") }
        print(
            "read \(summary.journalFiles) journal files (\(summary.journalRecords) records; \(summary.journalRecordsApplied) added to the copy)")
        print("backup of \(source) in \(destination), \(millis) ms")
    }
}

/// `chat-server check DIR`: whether a data directory — a backup, or a stopped server's — can be
/// served: every SQLite file's integrity, the schema version, and the journal's files.
struct CheckCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "check",
        abstract: "Verify a data directory (a backup, or a stopped server's): exit 0 if a server can serve it, 65 if not.",
        discussion: """
            Runs SQLite's integrity check on each of rooms.sqlite3, accounts.sqlite and \
            moderation.sqlite (writing nothing), checks the rooms' schema version, and reads every journal \
            file to its end. A directory a running server holds is refused (it is locked): check a \
            backup (`chat-server backup`) instead.
            """)

    @Argument(help: ArgumentHelp("The data directory to check.", valueName: "DIR"))
    var directory: String

    func run() throws {
        let report: DataDirectoryCopy.Report
        do {
            report = try DataDirectoryCopy.check(directory)
        } catch {
            StandardError.write("chat-server check: \(error.message)\n")
            throw ExitCode(ExitStatus.startupRefused)
        }
        for database in report.databases { print("\(database.name): \(database.verdict)") }
        for file in report.journalFiles {
            print("\(file.name): \(file.records) records\(file.intact ? "" : ", the last cut short")")
        }
        for note in report.notes { print("note: \(note)") }
        guard report.problems.isEmpty else {
            for problem in report.problems { StandardError.write("chat-server check: \(problem)\n") }
            throw ExitCode(ExitStatus.dataDamaged)
        }
        print("\(directory): ok")
    }
}

/// The data directory when none is named: the server's default.
enum DataDirectoryDefault {
    /// $XDG_STATE_HOME/chat-server, else ~/.local/state/chat-server; nil without either variable.
    static func path() -> String? {
        if let state = getenv("XDG_STATE_HOME").map({ String(cString: $0) }), state.hasPrefix("/") {
            return state + "/chat-server"
        }
        guard let home = getenv("HOME").map({ String(cString: $0) }), !home.isEmpty else { return nil }
        return home + "/.local/state/chat-server"
    }
}
