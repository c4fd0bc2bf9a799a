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

    /// Carries out an account command: `/register` and `/login` with the configured password,
    /// or one typed at a hidden prompt (a new one twice, where the display asks twice);
    /// `/password` and `/unregister` for the account the client is logged in to.
    func performAccount(_ request: AccountRequest) {
        guard session.version >= 3 else {
            show(.error(time: ClientClock.now(), text: "this server speaks protocol version \(session.version): it has no accounts"))
            return
        }
        switch request {
        case .register:
            let name = session.nick
            let register = { [weak self] (password: String) -> Void in
                self?.sendWithPassword(.register(password: password), remembering: AccountLogin(name: name, password: password))
            }
            if let login = configuration.account { return register(login.password) }
            askNewPassword("password for \(name)", again: "the same password again, to be sure", retry: "/register", then: register)
        case .login(let account):
            let name = account ?? defaultLoginName
            password(for: name, fromFile: configuration.account?.password) { [weak self] password in
                self?.sendWithPassword(.login(account: name, password: password), remembering: AccountLogin(name: name, password: password))
            }
        case .changePassword, .drop:
            guard let account = session.account else {
                return show(.error(time: ClientClock.now(), text: "you are not logged in to an account (/login first)"))
            }
            request == .drop ? confirmDrop(of: account) : changePassword(of: account)
        }
    }

    /// What every hidden prompt says after its question.
    private static let secretHint = "(not shown; Enter sends, Ctrl-C cancels): "

    /// The password to send for the account `name`: `fromFile` (the account password file's),
    /// else one typed at the hidden prompt. When none is typed it says so, and `then` is not
    /// called.
    private func password(for name: String, fromFile: String?, then: @escaping (String) -> Void) {
        if let fromFile { return then(fromFile) }
        askSecret("password for \(name) \(Self.secretHint)") { [weak self] password in
            guard let password, !password.isEmpty else {
                self?.show(.notice(time: ClientClock.now(), text: "no password typed: nothing was sent"))
                return
            }
            then(password)
        }
    }

    /// A new password typed at the hidden prompt `prompt`, then again at `again` where the
    /// display asks twice; nothing goes on if either is empty or the two differ (`retry` is the
    /// command to type again).
    private func askNewPassword(_ prompt: String, again: String, retry: String, then: @escaping (String) -> Void) {
        let nothingTyped = "no password typed: nothing was sent"
        askSecret("\(prompt) \(Self.secretHint)") { [weak self] password in
            guard let self else { return }
            guard let password, !password.isEmpty else { return self.show(.notice(time: ClientClock.now(), text: nothingTyped)) }
            guard self.confirmsSecrets else { return then(password) }
            self.askSecret("\(again) \(Self.secretHint)") { [weak self] repeated in
                guard let self else { return }
                guard let repeated, !repeated.isEmpty else { return self.show(.notice(time: ClientClock.now(), text: nothingTyped)) }
                guard repeated == password else {
                    return self.show(.error(time: ClientClock.now(), text: "the two passwords differ: nothing was sent (\(retry) to try again)"))
                }
                then(password)
            }
        }
    }

    /// The password file's password if it is `account`'s: `/password` and `/unregister` must
    /// not send another account's.
    private func filePassword(of account: String) -> String? {
        guard let login = configuration.account, ChatName.nickKey(login.name) == ChatName.nickKey(account) else { return nil }
        return login.password
    }

    /// `/password`: the current password, then the new one (twice where the display asks twice).
    private func changePassword(of account: String) {
        password(for: account, fromFile: filePassword(of: account)) { [weak self] old in
            self?.askNewPassword("new password for \(account)", again: "the same new password again, to be sure", retry: "/password") { [weak self] new in
                self?.sendWithPassword(.changePassword(old: old, new: new), remembering: AccountLogin(name: account, password: new))
            }
        }
    }

    /// `/unregister`: a yes first, then the password; the server deletes the account.
    private func confirmDrop(of account: String) {
        ask("delete the account \(account) for good? Its rooms are unregistered and its roles forgotten (y/n) ") { [weak self] (yes: Bool) in
            guard let self else { return }
            guard yes else { return self.show(.notice(time: ClientClock.now(), text: "the account \(account) is kept")) }
            self.password(for: account, fromFile: self.filePassword(of: account)) { [weak self] password in
                self?.sendWithPassword(.dropAccount(password: password), remembering: nil)
            }
        }
    }

    /// Sends `frame`, which carries a password, if the client is connected, warning first when
    /// it would go in plain text beyond loopback; `remembering` is the login the server's answer
    /// makes the one to log in with again (`noteAccountAnswer`).
    private func sendWithPassword(_ frame: Frame, remembering login: AccountLogin?) {
        guard session.isConnected else {
            return show(.error(time: ClientClock.now(), text: "not connected; the password was not sent"))
        }
        if let host = serverHost { warnIfPlain(to: host, encrypted: configuration.tls != nil) }
        if let login { pendingAccount = login }
        send([frame], fromUser: true)
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
