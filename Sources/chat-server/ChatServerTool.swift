import ArgumentParser
import ChatServer
import ConfigFormat
import Glibc
import Logging
import SocketCore

/// `chat-server`: the root command. Serving (`ServeCommand`) is the default: every invocation
/// that names no other subcommand — `chat-server --port 0 --data-dir X`, `chat-server --status
/// --metrics HOST:PORT` — serves, or asks a server, as it always did (`route` makes it so); the
/// others work on a data directory (`backup`, `check`) or its accounts (`account`).
struct ChatServerTool: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chat-server",
        abstract: "A chat server (docs/PROTOCOL.md) and the tools to run it.",
        discussion: """
            With no command, serves: `chat-server [--config FILE] [--port N] [--data-dir DIR] \
            [--metrics HOST:PORT] …` is `chat-server serve …`; `chat-server --help` lists every \
            serving flag, `chat-server help COMMAND` the others'.
            """,
        version: BuildInfo.version,
        // No `defaultSubcommand`: `route` sends every command line that names no other command to
        // `serve` itself, and ArgumentParser with a default subcommand builds the serving
        // flags' definitions twice more on every start (18 M instructions, 40% of start-up).
        subcommands: [ServeCommand.self, BackupCommand.self, CheckCommand.self, AccountCommand.self])

    /// The subcommands other than serving, by name: what `route(_:)` leaves to ArgumentParser.
    static var otherCommands: Set<String> {
        Set(configuration.subcommands.map { $0._commandName }).subtracting([ServeCommand._commandName]).union(["help"])
    }

    /// Runs `chat-server` with `arguments` (without the program's name) and exits.
    ///
    /// A serving invocation is parsed here rather than by `main()`: a `--config FILE` becomes the
    /// flags it holds, placed before the command line's (`ServerConfigFile`), and an error in a
    /// flag that came from the file is reported with the file's line and exit status 78, not as
    /// a command-line mistake (64).
    static func route(_ arguments: [String]) -> Never {
        // Whatever any command makes is its user's alone: the databases hold password hashes and
        // room keys, and SQLite makes them (and their -wal and -shm files) 0644 under the usual
        // umask 022. Set once, before anything is opened, rather than a mode at each of the
        // places a file is made (SQLite's among them).
        umask(0o077)
        if let first = arguments.first, otherCommands.contains(first) {
            main(arguments)
            Glibc.exit(ExitStatus.success)
        }
        let commandLine = arguments.first == ServeCommand._commandName ? Array(arguments.dropFirst()) : arguments
        // `--help` and `--version` alone are the root's business: its help points at serving.
        if commandLine == ["--version"] || commandLine.contains("--help") || commandLine.contains("-h") {
            main([ServeCommand._commandName] + commandLine)
            Glibc.exit(ExitStatus.success)
        }
        ServerInvocation.commandLine = commandLine
        let file: ServerConfigFile?
        do {
            file = try ServerInvocation.configFile(for: commandLine)
        } catch {
            StandardError.write("chat-server: \(error)\n")
            Glibc.exit(ExitStatus.config)
        }
        let arguments = (file?.arguments(before: commandLine) ?? []) + commandLine
        var command: any ParsableCommand
        do {
            // Parsed as a root of its own: through `ChatServerTool` ArgumentParser would build the
            // serving flags' definitions once more (to see whether `serve` takes passthrough
            // arguments), 11 M instructions, a tenth of start-up.
            command = try ServeCommand.parseAsRoot(arguments)
        } catch {
            // Parsed again through the root, so the usage in the message reads `chat-server serve`.
            let rooted = Result { try parseAsRoot([ServeCommand._commandName] + arguments) }
            let failure = rooted.failure ?? error
            if let file, let entry = Self.entry(behind: message(for: failure), in: file, commandLine: commandLine) {
                StandardError.write("chat-server: \(file.path):\(entry.line): \(entry.key): \(message(for: failure))\n")
                Glibc.exit(ExitStatus.config)
            }
            exit(withError: failure)
        }
        do {
            try command.run()
            Glibc.exit(ExitStatus.success)
        } catch {
            exit(withError: error)
        }
    }

    /// The entry of `file` behind the serving flags' failure `message`, or nil when the command
    /// line's own flags are behind it: the entry the message names as a flag (`blame`); else,
    /// for a check of settings together whose message names none ("the idle timeout must be
    /// longer than the idle ping interval"), the first entry without which the flags parse — or,
    /// failing that, fail otherwise (a later check then stops them). Parses once per entry, on
    /// the way to an error only.
    static func entry(behind message: String, in file: ServerConfigFile, commandLine: [String]) -> ConfigFile.Entry? {
        if let named = file.blame(message, commandLine: commandLine) { return named }
        func failure(_ arguments: [String]) -> String? {
            do {
                _ = try ServeCommand.parseAsRoot(arguments)
                return nil
            } catch {
                return Self.message(for: error)
            }
        }
        // Compared with a failure of the same parse: `message` may come through the root command.
        guard let failed = failure(file.arguments(before: commandLine) + commandLine) else { return nil }
        var changed: ConfigFile.Entry?
        for entry in file.entries {
            guard let other = failure(file.arguments(before: commandLine, leavingOut: entry) + commandLine) else { return entry }
            if other != failed, changed == nil { changed = entry }
        }
        return changed
    }
}

/// What the serving process was started with, for the config file's reload (SIGHUP).
enum ServerInvocation {
    /// The command line's serving flags (without `serve`), set once by `ChatServerTool.route`
    /// before anything else runs and only read after.
    nonisolated(unsafe) static var commandLine: [String] = []

    /// The file `--config` names in `commandLine`, read and checked; nil without `--config`.
    static func configFile(for commandLine: [String]) throws(ServerConfigFile.Problem) -> ServerConfigFile? {
        var path: String?
        for (index, argument) in commandLine.enumerated() {
            if argument == "--config", index + 1 < commandLine.count { path = commandLine[index + 1] }
            if argument.hasPrefix("--config=") { path = String(argument.dropFirst("--config=".count)) }
        }
        guard let path else { return nil }
        return try ServerConfigFile(path: path, settings: settings)
    }

    /// The serving flags in force: the config file's, then the command line's.
    static func effectiveArguments() throws -> [String] {
        let file = try configFile(for: commandLine)
        return (file?.arguments(before: commandLine) ?? []) + commandLine
    }

    /// What each serving flag is, by its name (`max-clients`): read off `ServeCommand`'s
    /// declarations, so the config file takes exactly the flags `--help` lists.
    static let settings: [String: ServerConfigFile.Kind] = {
        var kinds: [String: ServerConfigFile.Kind] = [:]
        for child in Mirror(reflecting: ServeCommand()).children {
            guard let label = child.label, label.hasPrefix("_") else { continue }
            let type = String(describing: Swift.type(of: child.value))
            let kind: ServerConfigFile.Kind
            if type.hasPrefix("Flag<") {
                kind = .flag
            } else if type.hasPrefix("Option<Array<") {
                kind = .list
            } else if type.hasPrefix("Option<") {
                kind = .option
            } else {
                continue
            }
            kinds[kebabCase(String(label.dropFirst()))] = kind
        }
        return kinds
    }()

    /// `maxClientsPerAddress` as ArgumentParser names its flag: `max-clients-per-address`.
    private static func kebabCase(_ name: String) -> String {
        var result = ""
        for character in name {
            if character.isUppercase {
                result += "-" + character.lowercased()
            } else {
                result.append(character)
            }
        }
        return result
    }

    /// Each flag's value in `arguments` (the last one given; a list's values joined), for telling
    /// which settings a reload changed.
    static func values(in arguments: [String]) -> [String: String] {
        var values: [String: String] = [:]
        var index = 0
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            guard argument.hasPrefix("--") else { continue }
            var name = String(argument.dropFirst(2))
            var value: String?
            if let equals = name.firstIndex(of: "=") {
                value = String(name[name.index(after: equals)...])
                name = String(name[..<equals])
            }
            switch settings[name] {
            case .flag?:
                values[name] = "true"
            case .list?:
                let item = value ?? (index < arguments.count ? arguments[index] : "")
                if value == nil { index += 1 }
                values[name] = values[name].map { $0 + "," + item } ?? item
            case .option?:
                values[name] = value ?? (index < arguments.count ? arguments[index] : "")
                if value == nil { index += 1 }
            case nil:
                continue
            }
        }
        return values
    }
}

/// Reloads the serving settings on SIGHUP: reads the config file again, parses it with the
/// command line as at start, and hands the server what can change while it runs
/// (`ChatServerConfiguration.liveSettings`, and the log level); what cannot is logged as waiting
/// for a restart. A file that no longer parses changes nothing: the error, with its line, is
/// logged and the running settings stay. Without `--config`, the TLS files are read again.
///
/// `@unchecked Sendable`: `startedArguments` is used on the signal source's queue only (one
/// reload at a time); the rest is immutable.
final class ConfigReloader: @unchecked Sendable {
    private let configPath: String?
    private let commandLine: [String]
    private let logger: Logger
    /// The settings of the last successful load: what a reload compares the file against.
    private var startedArguments: [String]

    /// A reloader for a server started with `commandLine` (and the file at `configPath`, if any)
    /// into `started`, whose flags were `startedArguments`.
    init(configPath: String?, commandLine: [String], started: ChatServerConfiguration, startedArguments: [String], logger: Logger) {
        self.configPath = configPath
        self.commandLine = commandLine
        self.startedArguments = startedArguments
        self.logger = logger
    }

    /// The flags a reload applies: the live settings, the log level.
    static var liveFlags: Set<String> {
        Set(ChatServerConfiguration.liveSettings.flatMap { $0.flag.split(separator: "/").map(String.init) }).union(["log-level"])
    }

    /// Reloads into `server` (from the SIGHUP source's queue).
    func reload(_ server: ChatServer) {
        guard let configPath else {
            guard server.configuration.tls != nil else {
                return logger.info("SIGHUP: nothing to reload (no --config, no TLS)", metadata: ["signal": "SIGHUP"])
            }
            logger.info("reloading the TLS certificate", metadata: ["signal": "SIGHUP"])
            server.reloadTLS()
            return
        }
        let arguments: [String]
        let fresh: ServeCommand
        do {
            let file = try ServerConfigFile(path: configPath, settings: ServerInvocation.settings)
            arguments = file.arguments(before: commandLine) + commandLine
            do {
                guard let command = try ServeCommand.parseAsRoot(arguments) as? ServeCommand else {
                    return logger.error("configuration not reloaded: it does not describe a server", metadata: ["config.file": "\(configPath)"])
                }
                fresh = command
            } catch {
                let message = ChatServerTool.message(for: error)
                let place =
                    ChatServerTool.entry(behind: message, in: file, commandLine: commandLine).map { "\(configPath):\($0.line): \($0.key)" }
                    ?? configPath
                return logger.error(
                    "configuration not reloaded; the running one stays", metadata: ["config.error": "\(place): \(message)"])
            }
        } catch {
            return logger.error("configuration not reloaded; the running one stays", metadata: ["config.error": "\(error)"])
        }
        let configuration: ChatServerConfiguration
        do {
            configuration = try fresh.serverConfiguration()
        } catch {
            return logger.error(
                "configuration not reloaded; the running one stays", metadata: ["config.error": "\(configPath): \(error)"])
        }
        var changed = server.reconfigure(configuration)
        if fresh.logLevel != ServerLogHandler.level {
            ServerLogHandler.setLevel(fresh.logLevel)
            changed.append("log-level")
        }
        let before = ServerInvocation.values(in: startedArguments)
        let after = ServerInvocation.values(in: arguments)
        let waiting = Set(before.keys).union(after.keys).filter { before[$0] != after[$0] && !Self.liveFlags.contains($0) }.sorted()
        startedArguments = arguments
        var metadata: Logger.Metadata = [
            "config.file": "\(configPath)", "config.changed": "\(changed.isEmpty ? "nothing" : changed.joined(separator: ","))",
        ]
        if !waiting.isEmpty { metadata["config.at_next_start"] = "\(waiting.joined(separator: ","))" }
        logger.notice("configuration reloaded", metadata: metadata)
    }
}

extension Result {
    /// The error, if this is a failure.
    fileprivate var failure: Failure? {
        if case .failure(let error) = self { return error }
        return nil
    }
}
