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
//
// Logging in again: once the server accepts a `/register` or `/login`, the driver keeps that
// account and its password in memory (`rememberedLogin`), never on disk, and sends the login
// behind every later hello — after a server restart, a lost connection, or `/reconnect` after
// being ghosted — so the session gets its nick back as `--account` does (docs/CLIENT.md,
// "Logging in again", has the threat model).

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
    /// The login to send behind the hello to `server`: `--account`'s, or the one the server
    /// last accepted at `/register` or `/login`; nil for a guest. Warns first when it would go
    /// in plain text to a host that is not loopback.
    func loginBehindHello(to server: ServerAddress, encrypted: Bool) -> AccountLogin? {
        guard let login = rememberedLogin, login.withHello else { return nil }
        warnIfPlain(to: server.host, encrypted: encrypted)
        return login
    }

    /// The account `/login` with no argument logs in to: the one the client last logged in to,
    /// else `--account`, else the nick the client was started with — not the `nick_` it fell
    /// back to because that nick is registered.
    var defaultLoginName: String {
        rememberedLogin?.name ?? configuration.account?.name ?? startNick
    }

    /// Carries out `/register` or `/login` with the configured password, or without one with
    /// the password typed at a hidden prompt (a new one twice, where the display asks twice).
    func performAccount(_ request: AccountRequest) {
        guard session.version >= 3 else {
            show(.error(time: ClientClock.now(), text: "this server speaks protocol version \(session.version): it has no accounts"))
            return
        }
        let name: String
        switch request {
        case .register: name = session.nick
        case .login(let account): name = account ?? defaultLoginName
        case .changePassword, .drop:
            guard let account = session.account else {
                return show(.error(time: ClientClock.now(), text: "you are not logged in to an account (/login first)"))
            }
            return request == .drop ? confirmDrop(of: account) : changePassword(of: account)
        }
        if let login = configuration.account {
            return sendAccount(request, name: name, password: login.password)
        }
        let cancel = Self.secretHint
        askSecret("password for \(name) \(cancel)") { [weak self] password in
            guard let self else { return }
            guard let password, !password.isEmpty else {
                return self.show(.notice(time: ClientClock.now(), text: "no password typed: nothing was sent"))
            }
            guard case .register = request, self.confirmsSecrets else { return self.sendAccount(request, name: name, password: password) }
            self.askSecret("the same password again, to be sure \(cancel)") { [weak self] again in
                guard let self else { return }
                guard let again, !again.isEmpty else {
                    return self.show(.notice(time: ClientClock.now(), text: "no password typed: nothing was sent"))
                }
                guard again == password else {
                    return self.show(.error(time: ClientClock.now(), text: "the two passwords differ: nothing was sent (/register to try again)"))
                }
                self.sendAccount(request, name: name, password: password)
            }
        }
    }

    /// What every hidden prompt says after its question.
    static let secretHint = "(not shown; Enter sends, Ctrl-C cancels): "

    /// The password of `account`: the account password file's, if it is that account's, else
    /// typed at the hidden prompt; when none is typed it says so, and `then` is not called.
    private func accountPassword(of account: String, then: @escaping (String) -> Void) {
        if let login = configuration.account, ChatName.nickKey(login.name) == ChatName.nickKey(account) { return then(login.password) }
        askSecret("password for \(account) \(Self.secretHint)") { [weak self] password in
            guard let password, !password.isEmpty else {
                self?.show(.notice(time: ClientClock.now(), text: "no password typed: nothing was sent"))
                return
            }
            then(password)
        }
    }

    /// `/password`: the current password, then the new one (twice where the display asks twice).
    private func changePassword(of account: String) {
        accountPassword(of: account) { [weak self] old in
            guard let self else { return }
            self.askSecret("new password for \(account) \(Self.secretHint)") { [weak self] new in
                guard let self else { return }
                guard let new, !new.isEmpty else {
                    return self.show(.notice(time: ClientClock.now(), text: "no password typed: nothing was sent"))
                }
                guard self.confirmsSecrets else { return self.sendPasswordChange(of: account, old: old, new: new) }
                self.askSecret("the same new password again, to be sure \(Self.secretHint)") { [weak self] again in
                    guard let self else { return }
                    guard again == new else {
                        return self.show(.error(time: ClientClock.now(), text: "the two passwords differ: nothing was sent (/password to try again)"))
                    }
                    self.sendPasswordChange(of: account, old: old, new: new)
                }
            }
        }
    }

    private func sendPasswordChange(of account: String, old: String, new: String) {
        guard session.isConnected else {
            return show(.error(time: ClientClock.now(), text: "not connected; the password was not sent"))
        }
        if let host = serverHost { warnIfPlain(to: host, encrypted: configuration.tls != nil) }
        pendingAccount = AccountLogin(name: account, password: new)
        send([.changePassword(old: old, new: new)], fromUser: true)
    }

    /// `/unregister`: a yes first, then the password; the server deletes the account.
    private func confirmDrop(of account: String) {
        ask("delete the account \(account) for good? Its rooms are unregistered and its roles forgotten (y/n) ") { [weak self] (yes: Bool) in
            guard let self else { return }
            guard yes else { return self.show(.notice(time: ClientClock.now(), text: "the account \(account) is kept")) }
            self.accountPassword(of: account) { [weak self] password in
                guard let self else { return }
                guard self.session.isConnected else {
                    return self.show(.error(time: ClientClock.now(), text: "not connected; the password was not sent"))
                }
                if let host = self.serverHost { self.warnIfPlain(to: host, encrypted: self.configuration.tls != nil) }
                self.send([.dropAccount(password: password)], fromUser: true)
            }
        }
    }

    /// Sends `/register` or `/login` with `password` for the account `name`, and remembers it
    /// until the server answers.
    private func sendAccount(_ request: AccountRequest, name: String, password: String) {
        guard session.isConnected else {
            return show(.error(time: ClientClock.now(), text: "not connected; the password was not sent"))
        }
        if let host = serverHost { warnIfPlain(to: host, encrypted: configuration.tls != nil) }
        pendingAccount = AccountLogin(name: name, password: password)
        switch request {
        case .register:
            send([.register(password: password)], fromUser: true)
        case .login:
            send([.login(account: name, password: password)], fromUser: true)
        case .changePassword, .drop:
            // Sent by `changePassword(of:)` and `confirmDrop(of:)`, which ask more than this.
            break
        }
    }

    /// Follows the server's answers to `/register` and `/login`: an account it accepted is the
    /// one to log in to again with every later hello; a refused one is forgotten, and so is a
    /// dropped account.
    func noteAccountAnswer(_ frame: Frame) {
        switch frame {
        case .registered(let name), .loggedIn(let name):
            guard let pending = pendingAccount, ChatName.nickKey(pending.name) == ChatName.nickKey(name) else { return }
            rememberedLogin = AccountLogin(name: name, password: pending.password)
            pendingAccount = nil
        case .passwordChanged(let name):
            // Logged in again with the new one; a password file still holds the old one.
            guard let pending = pendingAccount, ChatName.nickKey(pending.name) == ChatName.nickKey(name) else { return }
            if rememberedLogin.map({ ChatName.nickKey($0.name) == ChatName.nickKey(name) }) == true {
                rememberedLogin?.password = pending.password
            }
            pendingAccount = nil
            if let file = configuration.account, ChatName.nickKey(file.name) == ChatName.nickKey(name) {
                show(.notice(time: ClientClock.now(), text: "the account password file still holds the old password: put the new one in it"))
            }
        case .error(_, _, let type, _) where type == .login || type == .register || type == .changePassword:
            pendingAccount = nil
        case .accountDropped:
            rememberedLogin = nil
            pendingAccount = nil
        default:
            break
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
