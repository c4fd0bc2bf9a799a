import ArgumentParser
import ChatClient
import ChatProtocol
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
            Type text to say it in the current window, or a command: /join #room, /part, \
            /switch #room, /query nick, /msg nick text, /me text, /nick name, /who, /rooms, \
            /topic [text], /history [n], /away [message], /ignore [nick], /unignore nick, \
            /quit [reason], /help.

            Keys: Alt-1…9, Ctrl-N and Ctrl-P switch windows (the status line numbers them and \
            counts unread messages, with ! for a mention or a direct message); Tab completes \
            commands, nicks and rooms; Up/Down and Ctrl-R search history; Ctrl-W deletes a \
            word; Ctrl-C clears the line, and a second Ctrl-C on the empty line quits, as does \
            Ctrl-D on an empty line. A paste is sent as text, never as commands; more than 3 \
            lines are confirmed first and paced under the server's rate limit; Ctrl-C stops \
            a paste being sent. The line is edited by libedit (emacs keys).

            When stdin or stdout is not a terminal, it reads plain lines from stdin and writes \
            plain lines to stdout, and leaves at end of input:
              printf 'hi\\n/quit\\n' | chat-client --nick bot --room general

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

    @Option(help: "Your nick: 1-24 of A-Z a-z 0-9 _-[]\\`^{}|, not starting with a digit or -.")
    var nick: String

    @Option(name: .customLong("room"), help: "A room to join, e.g. #general (repeatable; the first is where you talk). Default: general.")
    var rooms: [String] = []

    @Option(help: "A file whose first line is the server password.")
    var passwordFile: String?

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

    /// Whose certificates to accept, or nil for plain text.
    private var trust: TLSTrust? {
        if tlsInsecure { return .insecureAcceptAnything }
        if let tlsCa { return .certificateAuthorities(file: tlsCa) }
        return tls ? .systemDefault : nil
    }

    func validate() throws {
        if tlsInsecure, tlsCa != nil { throw ValidationError("--tls-insecure checks nothing, so --tls-ca would be ignored: give one of them") }
        guard ChatName.isValidNick(nick) else { throw ValidationError(CommandError.invalidNick(nick).description) }
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

    func run() async throws {
        let password = try passwordFile.map(Self.readPassword)
        let interactive = isatty(STDIN_FILENO) == 1 && isatty(STDOUT_FILENO) == 1
        let configuration = ChatClientDriver.Configuration(
            servers: serverAddresses, password: password, exitIfFirstConnectFails: !interactive,
            handshakeTimeout: .milliseconds(Int(handshakeTimeout * 1000)), pingInterval: .milliseconds(Int(pingInterval * 1000)),
            tls: trust)
        let session = ClientSession(nick: nick, rooms: rooms.isEmpty ? ["general"] : rooms)
        let history = interactive ? (historyFile ?? Self.defaultHistoryFile()) : nil
        let status = await ClientApp.run(configuration: configuration, session: session, interactive: interactive, historyFile: history)
        if status != 0 { throw ExitCode(status) }
    }

    /// The `--server`s in the order given, or the one of `--host` and `--port`.
    private var serverAddresses: [ServerAddress] {
        // validate() refused every address that does not parse.
        let listed = servers.compactMap { try? ServerAddress(parsing: $0) }
        return listed.isEmpty ? [ServerAddress(host: host ?? "127.0.0.1", port: port ?? 7000)] : listed
    }

    private static func readPassword(_ path: String) throws -> String {
        do {
            let contents = try String(contentsOfFile: path, encoding: .utf8)
            return String(contents.split(separator: "\n", omittingEmptySubsequences: false).first ?? "")
        } catch {
            throw ValidationError("cannot read --password-file \(path): \(error.localizedDescription)")
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
