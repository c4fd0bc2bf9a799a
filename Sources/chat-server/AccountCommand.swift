import ArgumentParser
import ChatAccounts
import ChatCluster
import ChatCore
import ChatProtocol
import ChatServer
import ChatStorage
import ConfigFormat
import Dispatch
import Glibc
import RedisClient

/// `chat-server account`: the operator's hand on the accounts, without a client and without the
/// network — above all to make a server operator's account (`--admin-account`), which a client
/// may not register (docs/SECURITY.md, "Server operators' accounts").
///
/// It writes where the server keeps its accounts: `accounts.sqlite` in `--data-dir` (the server
/// must be stopped: it holds the directory's lock and reads the accounts at start), or a
/// cluster's Redis with `--cluster`, through the scripts the nodes use (nodes read an account
/// when it is used, so they need no restart). A server run with `--no-persistence` keeps accounts
/// in memory only; nothing here reaches them. Passwords are hashed with the server's parameters
/// (`AccountSettings().hashing`).
struct AccountCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "account",
        abstract: "Create accounts (a server operator's above all), change their passwords, and list them.",
        discussion: """
            Works on the accounts.sqlite of --data-dir (the server's default directory unless given; \
            stop the server first: it holds the directory's lock and reads the accounts at start), \
            or with --cluster redis://HOST:PORT on a cluster's Redis (the nodes see the change at \
            once). `add` creates a data directory that does not exist yet (mode 0700, and says so), \
            for an operator's account made before the server's first start; `passwd` and `list` \
            refuse one (exit 1); all three refuse a directory its group or others may write to. A \
            name listed in --admin-account cannot be registered by a client: create it here. The password is read from the terminal without echo (twice), or from the first \
            line of --password-file FILE (- for standard input), or from standard input when it is \
            not a terminal.
            """,
        subcommands: [Add.self, SetPassword.self, List.self])

    /// `account add NAME`: creates the account.
    struct Add: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "add", abstract: "Create the account NAME (refused if it exists: use passwd).")

        @Argument(help: "The account's name: a nick (docs/PROTOCOL.md, \"Names\").")
        var name: String

        @OptionGroup var place: AccountPlace
        @OptionGroup var password: PasswordSource

        func validate() throws { try AccountPlace.check(name: name) }

        func run() throws {
            let hash = try password.hashed(for: name)
            let record = AccountRecord(name: name, key: ChatName.nickKey(name), passwordHash: hash, created: Self.nowMillis())
            // The one command that may come before the server's first start: it makes the directory.
            try place.withAccounts(creatingDirectory: true) { accounts in try accounts.add(record) }
            print("account \(name) created")
        }

        static func nowMillis() -> UInt64 {
            var time = timespec()
            clock_gettime(CLOCK_REALTIME, &time)
            return UInt64(time.tv_sec) * 1000 + UInt64(time.tv_nsec) / 1_000_000
        }
    }

    /// `account passwd NAME`: gives the account a new password.
    struct SetPassword: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "passwd", abstract: "Give the existing account NAME a new password.")

        @Argument(help: "The account's name.")
        var name: String

        @OptionGroup var place: AccountPlace
        @OptionGroup var password: PasswordSource

        func validate() throws { try AccountPlace.check(name: name) }

        func run() throws {
            let hash = try password.hashed(for: name)
            try place.withAccounts { accounts in try accounts.setPassword(ChatName.nickKey(name), hash) }
            print("password of \(name) changed")
        }
    }

    /// `account list`: the accounts' names, one a line.
    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(commandName: "list", abstract: "Print every account's name, one a line, sorted.")

        @OptionGroup var place: AccountPlace

        func run() throws {
            let names = try place.withAccounts { accounts in try accounts.names() }
            for name in names.sorted() { print(name) }
        }
    }
}

/// Where the accounts are: a data directory, or a cluster's Redis.
struct AccountPlace: ParsableArguments {
    @Option(
        help: ArgumentHelp(
            "The server's data directory, whose accounts.sqlite to change. Default: $XDG_STATE_HOME/chat-server, else ~/.local/state/chat-server.",
            valueName: "PATH"))
    var dataDir: String?

    @Option(help: ArgumentHelp("Change the accounts of the cluster whose Redis is at this address instead.", valueName: "redis://HOST:PORT"))
    var cluster: String?

    func validate() throws {
        if dataDir != nil, cluster != nil { throw ValidationError("--data-dir and --cluster contradict each other: a cluster keeps its accounts in Redis") }
    }

    /// Checks that `name` can be an account's.
    static func check(name: String) throws {
        guard ChatName.isValidNick(name) else { throw ValidationError("\(name) is not a valid account name (a nick: docs/PROTOCOL.md, \"Names\")") }
    }

    /// Runs `body` with the accounts this place names, then closes them. A data directory that
    /// does not exist is made (mode 0700, and said) if `creatingDirectory`, else refused: a
    /// mistyped `--data-dir` must not become an empty directory that lists no accounts.
    func withAccounts<T>(creatingDirectory: Bool = false, _ body: (AccountBook) throws -> T) throws -> T {
        if let cluster {
            let configuration: ClusterConfiguration
            do {
                configuration = try ClusterConfiguration(url: cluster)
            } catch {
                throw ValidationError("--cluster: \(error)")
            }
            let book = try ClusterAccountBook(host: configuration.host, port: configuration.port)
            defer { book.close() }
            return try body(book)
        }
        guard let path = dataDir ?? DataDirectoryDefault.path() else {
            throw ValidationError("no --data-dir given and neither $XDG_STATE_HOME nor $HOME is set")
        }
        let existed = access(path, F_OK) == 0
        let directory: DataDirectory
        do {
            directory = try DataDirectory(path: path, creating: creatingDirectory, rootMayUseOthers: true)
        } catch {
            if error.message.hasSuffix(DataDirectory.heldByAnotherServer) {
                throw AccountCommandError("\(error.message); stop the server first (it reads its accounts at start), then run this again")
            }
            if !creatingDirectory, !existed {
                throw AccountCommandError("\(error.message): name the server's --data-dir (only `account add` creates one)")
            }
            throw AccountCommandError(error.message)
        }
        if !existed { print("created the data directory \(path) (mode 0700)") }
        if let warning = directory.warning { StandardError.write("chat-server account: warning: \(warning)\n") }
        return try withExtendedLifetime(directory) {
            let store: SQLiteAccountStore
            do {
                store = try SQLiteAccountStore(directory: path)
            } catch {
                throw AccountCommandError("\(error)")
            }
            return try body(SQLiteAccountBook(store: store))
        }
    }
}

/// Where the password comes from.
struct PasswordSource: ParsableArguments {
    @Option(help: ArgumentHelp("Read the password from the first line of FILE (- for standard input).", valueName: "FILE"))
    var passwordFile: String?

    /// The password, read from `--password-file`, the terminal (twice, without echo), or
    /// standard input when it is not a terminal; hashed with the server's parameters.
    func hashed(for name: String) throws -> String {
        let password: String
        if let passwordFile {
            if passwordFile == "-" {
                guard let line = PasswordFile.firstLine(readingFrom: stdinDescriptor) else { throw AccountCommandError("no password on standard input") }
                password = line
            } else {
                do {
                    password = try PasswordFile.firstLine(of: passwordFile)
                } catch {
                    throw AccountCommandError("cannot read the password from \(passwordFile): \(error)")
                }
            }
        } else if isatty(stdinDescriptor) == 1 {
            password = try PasswordPrompt.askTwice(for: name)
        } else {
            guard let line = PasswordFile.firstLine(readingFrom: stdinDescriptor) else { throw AccountCommandError("no password on standard input") }
            password = line
        }
        guard !password.isEmpty, password.utf8.count <= PasswordHashing.maxPasswordBytes else {
            throw AccountCommandError("a password must be 1 to \(PasswordHashing.maxPasswordBytes) bytes")
        }
        guard let hash = AccountSettings().hashing.hash(password) else { throw AccountCommandError("the password could not be hashed (out of memory?)") }
        return hash
    }

    private var stdinDescriptor: Int32 { 0 }
}

/// A failure of `chat-server account`, printed as one line.
struct AccountCommandError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

// MARK: - The password prompt

/// Reads a password from the terminal with echo off, restoring the terminal on every way out
/// (an answer, end of input, SIGINT, SIGTERM, SIGHUP).
enum PasswordPrompt {
    /// The terminal's modes before echo was turned off, and its descriptor: for the signal
    /// handler, which can reach only globals. Written before the handler is installed.
    nonisolated(unsafe) private static var saved = termios()
    nonisolated(unsafe) private static var terminal: Int32 = -1

    /// Asks for the password of `name` twice on /dev/tty; throws if the two differ.
    static func askTwice(for name: String) throws -> String {
        let descriptor = open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC)
        guard descriptor >= 0 else { throw AccountCommandError("no terminal to ask for the password: use --password-file") }
        defer { close(descriptor) }
        guard let first = ask("password for \(name): ", on: descriptor), let second = ask("again: ", on: descriptor) else {
            throw AccountCommandError("no password given")
        }
        guard first == second else { throw AccountCommandError("the two passwords differ; nothing was changed") }
        return first
    }

    /// Turns echo off, writes `prompt`, and reads one line.
    private static func ask(_ prompt: String, on descriptor: Int32) -> String? {
        guard tcgetattr(descriptor, &saved) == 0 else {
            write(prompt, to: descriptor)
            return PasswordFile.firstLine(readingFrom: descriptor)
        }
        terminal = descriptor
        let handlers = [SIGINT, SIGTERM, SIGHUP].map { number in
            (number, signal(number) { number in
                // Only globals here: the terminal's modes come back, then the signal does what it would have.
                _ = tcsetattr(PasswordPrompt.terminal, TCSAFLUSH, &PasswordPrompt.saved)
                signal(number, SIG_DFL)
                raise(number)
            })
        }
        var quiet = saved
        quiet.c_lflag &= ~tcflag_t(ECHO)
        _ = tcsetattr(descriptor, TCSAFLUSH, &quiet)
        // Asked only once echo is off and the handlers are in: a key typed at the prompt is
        // never shown, and a Ctrl-C at it always finds the handler that gives echo back.
        write(prompt, to: descriptor)
        let line = PasswordFile.firstLine(readingFrom: descriptor)
        _ = tcsetattr(descriptor, TCSAFLUSH, &saved)
        for (number, handler) in handlers { signal(number, handler) }
        // The Enter the user typed was not echoed either.
        write("\n", to: descriptor)
        return line
    }

    private static func write(_ text: String, to descriptor: Int32) {
        var bytes = Array(text.utf8)
        _ = bytes.withUnsafeMutableBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }
    }
}

// MARK: - The two places accounts live

/// The accounts `chat-server account` changes: one data directory's, or one cluster's.
protocol AccountBook {
    /// Creates `record`; throws if its key exists.
    func add(_ record: AccountRecord) throws
    /// Replaces the password hash of the account `key`; throws if there is none.
    func setPassword(_ key: String, _ hash: String) throws
    /// Every account's name.
    func names() throws -> [String]
}

/// `accounts.sqlite` in a data directory whose lock is held.
struct SQLiteAccountBook: AccountBook {
    let store: SQLiteAccountStore

    func add(_ record: AccountRecord) throws {
        if try store.loadAll().contains(where: { $0.key == record.key }) {
            throw AccountCommandError("the account \(record.name) exists already: use `chat-server account passwd \(record.name)`")
        }
        try save(record)
    }

    func setPassword(_ key: String, _ hash: String) throws {
        guard var record = try store.loadAll().first(where: { $0.key == key }) else { throw AccountCommandError("there is no account \(key)") }
        record.passwordHash = hash
        try save(record)
    }

    func names() throws -> [String] { try store.loadAll().map(\.name) }

    private func save(_ record: AccountRecord) throws {
        let done = DispatchSemaphore(value: 0)
        let outcome = Outcome<Void>()
        store.save(record, replyOn: DispatchQueue(label: "chat-server.account")) { result in
            outcome.set(result.mapError { $0 as any Error })
            done.signal()
        }
        done.wait()
        try outcome.get()
    }
}

/// A cluster's accounts in its Redis, changed by the scripts the nodes use (`ClusterAccounts`).
final class ClusterAccountBook: AccountBook {
    private let queue = DispatchQueue(label: "chat-server.account.redis")
    private let connection: RedisConnection

    /// Connects to Redis at `host:port` (5 s at most).
    init(host: String, port: Int) throws {
        let done = DispatchSemaphore(value: 0)
        let outcome = Outcome<RedisConnection>()
        RedisConnection.connect(host: host, port: port, queue: queue) { result in
            outcome.set(result.mapError { $0 as any Error })
            done.signal()
        }
        done.wait()
        do {
            connection = try outcome.get()
        } catch {
            throw AccountCommandError("cannot reach the cluster's Redis at \(host):\(port): \(error)")
        }
    }

    func close() { queue.sync { connection.close() } }

    func add(_ record: AccountRecord) throws {
        let registration = try call { accounts, done in
            // The operator is not held to --max-accounts, which bounds what clients register.
            accounts.register(
                name: record.name, key: record.key, passwordHash: record.passwordHash, created: record.created, maxAccounts: Int.max,
                completion: done)
        }
        if registration == .exists {
            throw AccountCommandError("the account \(record.name) exists already: use `chat-server account passwd \(record.name)`")
        }
    }

    func setPassword(_ key: String, _ hash: String) throws {
        let existed = try call { accounts, done in accounts.setPasswordHash(key: key, hash, completion: done) }
        if !existed { throw AccountCommandError("there is no account \(key)") }
    }

    func names() throws -> [String] { try call { accounts, done in accounts.names(completion: done) } }

    /// Runs one `ClusterAccounts` call on the connection's queue and waits for its answer.
    private func call<T>(_ body: @escaping @Sendable (ClusterAccounts, @escaping (Result<T, ClusterError>) -> Void) -> Void) throws -> T {
        let done = DispatchSemaphore(value: 0)
        let outcome = Outcome<T>()
        let accounts = ClusterAccounts(commands: connection)
        queue.async {
            body(accounts) { result in
                outcome.set(result.mapError { $0 as any Error })
                done.signal()
            }
        }
        done.wait()
        do {
            return try outcome.get()
        } catch {
            throw AccountCommandError("the cluster's Redis did not do it: \(error)")
        }
    }
}

/// One answer handed from a queue to the waiting thread.
///
/// `@unchecked Sendable`: written once before the semaphore the reader waits on is signalled.
private final class Outcome<T>: @unchecked Sendable {
    private var result: Result<T, any Error> = .failure(AccountCommandError("no answer"))
    func set(_ result: Result<T, any Error>) { self.result = result }
    func get() throws -> T { try result.get() }
}
