import ChatProtocol
import SocketCore

// MARK: - Accounts in the client (protocol version 3)
//
// `--account NAME` with `--account-password-file PATH` logs in with every hello (the login rides
// behind it, so a registered nick is welcomed); `/register` and `/login [account]` send the
// same password from the file. Without the file they ask for it at a hidden prompt
// (`ClientDisplay.askSecret`): never typed into the input line, which is echoed and lands in the
// editor's history. Before a password leaves without TLS for a host that is not loopback, the
// client says so (the server will refuse it unless its operator allows plain passwords).

/// An account name and its password, as read from `--account-password-file`.
public struct AccountLogin: Sendable, Equatable {
    /// The account: a nick.
    public var name: String
    /// The password (the file's first line).
    public var password: String
    /// Whether to log in with every hello (`--account`), or only on `/login` and `/register`.
    public var withHello: Bool

    /// Describes a login.
    public init(name: String, password: String, withHello: Bool = true) {
        self.name = name
        self.password = password
        self.withHello = withHello
    }

    /// Whether `host` is a loopback address or name, where a password in plain text does not
    /// travel over a network.
    public static func isLoopback(_ host: String) -> Bool {
        host == "localhost" || host == "::1" || host.hasPrefix("127.") || host == "[::1]"
    }
}

extension ChatClientDriver {
    /// The login to send behind the hello to `server`, if an account is configured; warns first
    /// when it would go in plain text to a host that is not loopback.
    func loginBehindHello(to server: ServerAddress, encrypted: Bool) -> AccountLogin? {
        guard let login = configuration.account, login.withHello else { return nil }
        warnIfPlain(to: server.host, encrypted: encrypted)
        return login
    }

    /// Carries out `/register` or `/login` with the configured password, or without one with
    /// the password typed at a hidden prompt.
    func performAccount(_ request: AccountRequest) {
        guard session.version >= 3 else {
            show(.error(time: ClientClock.now(), text: "this server speaks protocol version \(session.version): it has no accounts"))
            return
        }
        if let login = configuration.account {
            return sendAccount(request, name: login.name, password: login.password)
        }
        let name: String
        switch request {
        case .register: name = session.nick
        case .login(let account): name = account ?? session.nick
        }
        askSecret("password for \(name) (not shown; Enter sends, Ctrl-C cancels): ") { [weak self] password in
            guard let self else { return }
            guard let password, !password.isEmpty else {
                return self.show(.notice(time: ClientClock.now(), text: "no password typed: nothing was sent"))
            }
            self.sendAccount(request, name: name, password: password)
        }
    }

    /// Sends `/register` or `/login` with `password`; `name` is the account to log in to when
    /// the command named none.
    private func sendAccount(_ request: AccountRequest, name: String, password: String) {
        guard session.isConnected else {
            return show(.error(time: ClientClock.now(), text: "not connected; the password was not sent"))
        }
        if let host = serverHost { warnIfPlain(to: host, encrypted: configuration.tls != nil) }
        switch request {
        case .register:
            send([.register(password: password)], fromUser: true)
        case .login(let account):
            send([.login(account: account ?? name, password: password)], fromUser: true)
        }
    }

    private var serverHost: String? {
        (try? ServerAddress(parsing: serverName))?.host
    }

    private func warnIfPlain(to host: String, encrypted: Bool) {
        guard !encrypted, !AccountLogin.isLoopback(host) else { return }
        show(.error(time: ClientClock.now(), text:
            "warning: sending the account password to \(host) without TLS: anyone on the way can read it (use --tls)"))
    }
}
