import ArgumentParser
import ChatClient
import ChatProtocol
import ConfigFormat
import Foundation
import SocketCore
import SocketTLS

/// `chat-client`: join a chat server from a terminal, or from a pipe.
@main
struct ChatClientCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "chat-client",
        abstract: "Chat from a terminal: several rooms, line editing, history and Tab completion while messages arrive.",
        discussion: """
            Type text to say it in the current window, or a command: /join #room [key], /part, \
            /switch #room|nick, /query nick, /msg nick text, /me text, /nick name, /who, /names, \
            /whois nick, /rooms, /topic [text], /history [n], /away [message], /ignore [nick], \
            /unignore nick, /window N|name|list|close|goto active, /clear, /lastlog text, \
            /set [name [value]], /save, /reconnect, /server HOST:PORT, /disconnect, \
            /quit [reason], /help. Short forms: /j /q /w /win /list /n /p, and aliases from the \
            config file.

            Accounts (protocol version 3): /register (the password asked twice at a hidden \
            prompt, or from the account password file) and /login [account] (from the file, \
            read again each time, for the file's account only); /password changes the \
            account's password (the current one, then the new one twice) and /unregister \
            deletes the account (a yes, then its password), both asked even with a file. The \
            password the server accepted is held in memory, never on disk, and logs the client \
            in again at every reconnect: after a server restart, or /reconnect after being \
            ghosted.

            Room moderation (protocol version 4): /kick nick [reason], /ban mask|nick [reason], \
            /unban mask|nick, /bans, /invite nick [#room], /mode [#room] [+i|-i|+k KEY|-k|+m|-m|\
            +t|-t|+l N|-l|+o nick|-o nick|+v nick|-v nick|+b mask|-b mask|+r|-r …], /op, /deop, \
            /voice, /devoice nick, /key KEY|-clear, /moderated on|off, /topiclock on|off; for \
            server operators /kill nick [reason], /serverban mask [reason], /serverunban mask, \
            /closeroom #room [reason], /serverbans. A room you were kicked from (or refused) is \
            not rejoined by itself.

            Every room and query is a window with its own lines; PageUp and PageDown scroll \
            back in it (-- more -- in the status line while scrolled). Long lines wrap at words \
            under their text. With log = true each window is logged, each line once and in \
            time order across restarts of the client. The settings (nick, \
            servers, autojoin, TLS, timestamp format, colours, buffer sizes, highlight words, \
            logs, aliases) are read from ~/.config/chat-client/config.toml; a malformed file \
            stops the client with the line named. Flags override the file.

            Keys: Alt-1…9, Ctrl-N and Ctrl-P switch windows (the status line numbers them and \
            counts unread messages, with ! for a mention or a direct message), Alt-A goes to \
            the window with activity, mentions first; Tab completes \
            commands, nicks and rooms; Up/Down and Ctrl-R search history; Ctrl-W deletes a \
            word; Ctrl-C clears the line, and a second Ctrl-C on the empty line quits, as does \
            Ctrl-D on an empty line. A paste is sent as text, never as commands; more than 3 \
            lines are confirmed first and paced under the server's rate limit; Ctrl-C stops \
            a paste being sent. The line is edited by libedit: emacs keys, or your own \
            settings from $EDITRC or ~/.editrc (bind -v for vi mode), read before the \
            client binds its keys.

            When stdin or stdout is not a terminal, it reads plain lines from stdin and writes \
            plain lines to stdout, and leaves at end of input:
              printf 'hi\\n/quit\\n' | chat-client --nick bot --room general
            There an account command's answers are the lines after it, whatever becomes of the \
            command: /register 2 (the password twice; none with an account password file), \
            /login 1 (none for the file's account), /password 3 (the current password, the new \
            one twice), /unregister 2 (y, then the password).

            Colour is off when NO_COLOR is set or stdout is not a terminal. A lost connection \
            is retried with growing delays, and the client rejoins its rooms and shows only \
            the messages it missed. Given several servers (the nodes of a cluster), it moves \
            to the next one at once when one fails, and waits only when all of them have:
              chat-client --nick alice --server 127.0.0.1:7001 --server 127.0.0.1:7002
            """,
        version: "chat-client \(ClientVersion.current) (chat protocol \(WireProtocol.version))")

    @Option(help: "The server's host name or address (default: 127.0.0.1).")
    var host: String?

    @Option(help: "The server's TCP port (default: 7000).")
    var port: Int?

    @Option(name: .customLong("server"), help: ArgumentHelp(
        "A server to connect to, instead of --host and --port; repeat it for the nodes of a cluster: the client starts with the first and moves to the next when one fails.",
        valueName: "HOST:PORT"))
    var servers: [String] = []

    @Option(help: "Your nick: 1-24 of A-Z a-z 0-9 _-[]\\`^{}|, not starting with a digit or -. Default: the config file's nick, else $USER.")
    var nick: String?

    @Option(name: .customLong("room"), help: "A room to join, e.g. #general (repeatable; the first is where you talk). Default: the config file's autojoin, else general.")
    var rooms: [String] = []

    @Option(help: "The config file (default: $XDG_CONFIG_HOME/chat-client/config.toml or ~/.config/chat-client/config.toml; docs/CLIENT.md lists its settings).")
    var config: String?

    @Option(help: "A file whose first line is the server password.")
    var passwordFile: String?

    @Option(help: "An account to log in to with every connection (protocol version 3), taking its nick; its password comes from the account password file. Default: the config file's account.")
    var account: String?

    @Option(help: "A file whose first line is the account password, for the account option (else the nick's own account): the login with every connection, /register, and /login to that account, which reads the file again. Default: the config file's account_password_file. Without one, /register and /login ask for the password at a hidden prompt, as /password and /unregister always do; the password the server accepts is kept in memory only, to log in again at every reconnect.")
    var accountPasswordFile: String?

    @Option(help: "Where to keep the input history. Default: $XDG_STATE_HOME/chat-client/history or ~/.local/state/chat-client/history.")
    var historyFile: String?

    @Option(help: "Seconds to wait for a server to accept the connection, and as long again for its answer to the handshake, before trying the next (or again).")
    var handshakeTimeout = 10.0

    @Option(help: "Seconds of silence from the server before the client pings it; unanswered for as long again, the connection is redialled.")
    var pingInterval = 30.0

    @Flag(help: "Speak TLS, verifying each server's certificate against the system's CAs and its host name.")
    var tls = false

    @Option(help: "Speak TLS and trust only the CA certificates in this PEM file (e.g. the ca.pem of Scripts/dev-cert.sh).")
    var tlsCa: String?

    @Flag(help: "Speak TLS without checking the server's certificate at all (testing only; a warning says so at every connect).")
    var tlsInsecure = false

    /// Whose certificates to accept, or nil for plain text: the flags, else the config file.
    private func trust(_ settings: ClientSettings) -> TLSTrust? {
        if tlsInsecure { return .insecureAcceptAnything }
        if let tlsCa { return .certificateAuthorities(file: tlsCa) }
        if tls { return .systemDefault }
        switch settings.tlsMode {
        case .off: return nil
        case .system: return .systemDefault
        case .insecure: return .insecureAcceptAnything
        case .ca: return settings.tlsCAFile.map { .certificateAuthorities(file: ClientPaths.expandingTilde($0)) }
        }
    }

    func validate() throws {
        if tlsInsecure, tlsCa != nil { throw ValidationError("--tls-insecure checks nothing, so --tls-ca would be ignored: give one of them") }
        if let nick, !ChatName.isValidNick(nick) { throw ValidationError(CommandError.invalidNick(nick).description) }
        for room in rooms where (try? ChatName.normalizedRoom(room)) == nil {
            throw ValidationError(CommandError.invalidRoom(room).description)
        }
        if !servers.isEmpty, host != nil || port != nil {
            throw ValidationError("give the servers either with --server HOST:PORT (repeatable) or with --host and --port, not both")
        }
        for server in servers {
            do {
                _ = try ServerAddress(parsing: server)
            } catch {
                throw ValidationError("--server \(server): \(error)")
            }
        }
        if let port, !(1...65535).contains(port) { throw ValidationError("--port must be 1-65535") }
        guard handshakeTimeout > 0, handshakeTimeout <= 3600 else { throw ValidationError("--handshake-timeout must be more than 0 and at most 3600 seconds") }
        guard pingInterval > 0, pingInterval <= 3600 else { throw ValidationError("--ping-interval must be more than 0 and at most 3600 seconds") }
    }

    /// ArgumentParser's own `main`, once the signals `SignalTrap` acts on are caught: from the
    /// first instruction, so that none that comes while the client starts is lost.
    static func main() async {
        SignalTrap.catchSignals()
        await main(nil)
    }

    func run() async throws {
        let configPath = config ?? ClientPaths.configFile()
        let settings = try Self.loadSettings(from: configPath, required: config != nil)
        let nick = try chosenNick(settings)
        let rooms = self.rooms.isEmpty ? (settings.autojoin.isEmpty ? ["general"] : settings.autojoin) : self.rooms
        for room in rooms where (try? ChatName.normalizedRoom(room)) == nil {
            throw Self.configError(configPath, "autojoin: \(CommandError.invalidRoom(room).description)")
        }
        let password = try (passwordFile ?? settings.passwordFile.map(ClientPaths.expandingTilde)).map { try Self.readPassword($0) }
        let interactive = isatty(STDIN_FILENO) == 1 && isatty(STDOUT_FILENO) == 1
        var configuration = ChatClientDriver.Configuration(
            servers: try serverAddresses(settings, configPath: configPath), password: password, exitIfFirstConnectFails: !interactive,
            handshakeTimeout: .milliseconds(Int(handshakeTimeout * 1000)), pingInterval: .milliseconds(Int(pingInterval * 1000)),
            tls: trust(settings))
        // The flags win over the config file's account and account_password_file.
        let account = self.account ?? settings.account
        if let accountPasswordFile = accountPasswordFile ?? settings.accountPasswordFile.map(ClientPaths.expandingTilde) {
            // Without --account: the nick's own account, for /register and /login.
            let name = account ?? nick
            guard ChatName.isValidNick(name) else { throw ValidationError("--account \(name) is not a valid nick") }
            configuration.account = AccountLogin(
                name: name, password: try Self.readPassword(accountPasswordFile, flag: "--account-password-file"), withHello: account != nil)
            configuration.accountPasswordFile = accountPasswordFile
        } else if account != nil {
            throw ValidationError("--account (or the config file's account) needs --account-password-file (or account_password_file)")
        }
        var session = ClientSession(nick: nick, rooms: rooms)
        session.highlightWords = settings.highlight
        if settings.mergedWindow, interactive { session.addMergedWindow() }
        let history = interactive ? (historyFile ?? Self.defaultHistoryFile()) : nil
        let status = await ClientApp.run(
            configuration: configuration, session: session, interactive: interactive, historyFile: history,
            settings: settings, configPath: configPath)
        if status != 0 { throw ExitCode(status) }
    }

    /// `--nick`, else the config file's, else `$USER`.
    private func chosenNick(_ settings: ClientSettings) throws -> String {
        // The account's nick is the one to hold; the login behind the hello takes it.
        if let account = account ?? settings.account {
            guard ChatName.isValidNick(account) else { throw ValidationError("account \(account) is not a valid nick") }
            return account
        }
        if let nick { return nick }
        if let configured = settings.nick {
            guard ChatName.isValidNick(configured) else { throw ValidationError("the config file's nick: \(CommandError.invalidNick(configured).description)") }
            return configured
        }
        let user = ProcessInfo.processInfo.environment["USER"] ?? ""
        guard ChatName.isValidNick(user) else {
            throw ValidationError("give a nick with --nick (or nick = \"…\" in the config file); $USER (\"\(user)\") is not a valid one")
        }
        return user
    }

    /// The config file's settings; the defaults when there is no file (and none was asked for).
    /// A file that is there but wrong ends the client before it starts, naming the line.
    private static func loadSettings(from path: String?, required: Bool) throws -> ClientSettings {
        guard let path else { return ClientSettings() }
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
                if !required { return ClientSettings() }
                throw configError(path, "cannot be read: there is no such file")
            }
            // Foundation's own description is "The operation could not be completed".
            let why = isDirectory.boolValue ? "it is a directory"
                : access(path, R_OK) != 0 ? String(cString: strerror(errno)) : "it is not UTF-8 text"
            throw configError(path, "cannot be read: \(why)")
        }
        do {
            return try ClientSettings(parsing: text)
        } catch {
            throw configError(path, error.description)
        }
    }

    /// Prints one line naming the file and ends the client with status 1, before anything starts.
    private static func configError(_ path: String?, _ reason: String) -> ExitCode {
        FileHandle.standardError.write(Data("chat-client: \(path ?? "the config file") \(reason); nothing was started\n".utf8))
        return ExitCode(1)
    }

    /// The `--server`s in the order given, or the one of `--host` and `--port`, else the config
    /// file's servers, else 127.0.0.1:7000.
    private func serverAddresses(_ settings: ClientSettings, configPath: String?) throws -> [ServerAddress] {
        // validate() refused every address that does not parse.
        let listed = servers.compactMap { try? ServerAddress(parsing: $0) }
        if !listed.isEmpty { return listed }
        if host != nil || port != nil || settings.servers.isEmpty {
            return [ServerAddress(host: host ?? "127.0.0.1", port: port ?? 7000)]
        }
        return try settings.servers.map { typed in
            do { return try ServerAddress(parsing: typed) } catch { throw Self.configError(configPath, "servers: \(typed): \(error)") }
        }
    }

    private static func readPassword(_ path: String, flag: String = "--password-file") throws -> String {
        do {
            return try PasswordFile.firstLine(of: path)
        } catch {
            throw ValidationError("cannot read \(flag) \(path): \(error)")
        }
    }

    /// `$XDG_STATE_HOME/chat-client/history`, falling back to `~/.local/state`; creates the
    /// directory. Nil (no history file) when neither variable is set.
    private static func defaultHistoryFile() -> String? {
        let environment = ProcessInfo.processInfo.environment
        let stateHome: String
        if let xdg = environment["XDG_STATE_HOME"], !xdg.isEmpty {
            stateHome = xdg
        } else if let home = environment["HOME"], !home.isEmpty {
            stateHome = home + "/.local/state"
        } else {
            return nil
        }
        let directory = stateHome + "/chat-client"
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        return directory + "/history"
    }
}
