import ChatProtocol
import ConfigFormat
import SocketCore
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

// MARK: - Accounts in the client (protocol version 3)
//
// `--account NAME` with `--account-password-file PATH` logs in with every hello (the login rides
// behind it, so a registered nick is welcomed); `/register` and `/login` to the file's account
// send the file's password, read again each time. Every other password is asked for at a hidden
// prompt (`ClientDisplay.askSecret`): never typed into the input line, which is echoed and lands
// in the editor's history. Before a password leaves without TLS for a host that is not
// loopback, the client says so (the server will refuse it unless its operator allows plain
// passwords).
//
// In a script the answers are the lines after the command, so each command asks a number of
// questions fixed by its text and the flags alone (`answerCount`), never by the session's state:
// a refused command takes its lines as an accepted one does, and no password becomes chat.
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

    /// The account `/login` with no argument logs in to: the account password file's (so that
    /// `/login` alone never asks when there is a file), else the one the client last logged in
    /// to, else the nick the client was started with — not the `nick_` it fell back to because
    /// that nick is registered.
    var defaultLoginName: String {
        configuration.account?.name ?? rememberedLogin?.name ?? startNick
    }

    /// How many questions `line` asks when it is an account command: the lines a script gives
    /// after it (docs/CLIENT.md, "In a script"). `/register` asks the new password twice and
    /// `/login` the password once, none where the account password file answers; `/password`
    /// asks the current password and the new one twice, `/unregister` a yes and the password.
    /// Fixed by the line and the flags, so that a command refused for the session's state
    /// (offline, not logged in, an old server, `/register` of the account already logged in to)
    /// takes its lines all the same.
    public func answerCount(for line: String) -> Int {
        switch try? CommandParser.parse(line, aliases: aliases) {
        case .register: configuration.account == nil ? 2 : 0
        case .login(let account): usesPasswordFile(forLogin: account) ? 0 : 1
        case .changePassword: 3
        case .dropAccount: 2
        default: 0
        }
    }

    /// Whether `/login account` (nil: the default) sends the account password file's password:
    /// only to the file's own account, never to another.
    private func usesPasswordFile(forLogin account: String?) -> Bool {
        guard let file = configuration.account else { return false }
        return ChatName.nickKey(account ?? file.name) == ChatName.nickKey(file.name)
    }

    /// Carries out an account command: `/register` and `/login` to the file's account with the
    /// account password file's password, else one typed at a hidden prompt (a new one twice);
    /// `/password` and `/unregister` for the account the client is logged in to, their
    /// passwords always typed. Refused before anything is asked when it cannot be sent, or when
    /// `/register` would register the account the session is logged in to already.
    func performAccount(_ request: AccountRequest) {
        guard session.isConnected else {
            return show(.error(time: ClientClock.now(), text:
                "not connected: \(Self.command(request)) needs the server; nothing was sent \(connectionNote)"))
        }
        guard session.version >= 3 else {
            show(.error(time: ClientClock.now(), text: "this server speaks protocol version \(session.version): it has no accounts"))
            return
        }
        switch request {
        case .register:
            let name = session.nick
            // The server would ask nothing new, only refuse the nick as registered: say so before
            // the password is typed twice. A nick changed since the login is the server's to judge.
            if let account = session.account, ChatName.nickKey(account) == ChatName.nickKey(name) {
                return show(.error(time: ClientClock.now(), text: "you are logged in to the account \(account) already; nothing was sent"))
            }
            let register = { [weak self] (password: String) -> Void in
                self?.sendWithPassword(.register(password: password), remembering: AccountLogin(name: name, password: password))
            }
            guard configuration.account == nil else {
                if let password = readPasswordFile() { register(password) }
                return
            }
            askNewPassword("password for \(name)", again: "the same password again, to be sure", retry: "/register", then: register)
        case .login(let account):
            let name = account ?? defaultLoginName
            let login = { [weak self] (password: String) -> Void in
                self?.sendWithPassword(.login(account: name, password: password), remembering: AccountLogin(name: name, password: password))
            }
            guard !usesPasswordFile(forLogin: account) else {
                if let password = readPasswordFile() { login(password) }
                return
            }
            askPassword(for: name, then: login)
        case .changePassword, .drop:
            guard let account = session.account else {
                return show(.error(time: ClientClock.now(), text: "you are not logged in to an account (/login first)"))
            }
            request == .drop ? confirmDrop(of: account) : changePassword(of: account)
        }
    }

    /// The command a request comes from, to name it in a refusal.
    private static func command(_ request: AccountRequest) -> String {
        switch request {
        case .register: "/register"
        case .login: "/login"
        case .changePassword: "/password"
        case .drop: "/unregister"
        }
    }

    /// The account password file's first line, read now: a file fixed after the password was
    /// changed elsewhere is used at once. A pipe (`<(pass show chat)`) can be read only once, so
    /// its password is the one read at the start. Nil, said, when the file cannot be read.
    func readPasswordFile() -> String? {
        guard let file = configuration.account else { return nil }
        guard let path = configuration.accountPasswordFile, Self.isRegularFile(path) else { return file.password }
        do {
            return try PasswordFile.firstLine(of: path)
        } catch {
            show(.error(time: ClientClock.now(), text: "cannot read the account password file \(path): \(error); nothing was sent"))
            return nil
        }
    }

    /// Whether `path` is a regular file (following links), which can be read again.
    private static func isRegularFile(_ path: String) -> Bool {
        var status = stat()
        return stat(path, &status) == 0 && status.st_mode & S_IFMT == S_IFREG
    }

    /// What every hidden prompt says after its question.
    private static let secretHint = "(not shown; Enter sends, Ctrl-C cancels): "

    /// The password of the account `name`, typed at the hidden prompt. When none is typed it
    /// says so, and `then` is not called.
    private func askPassword(for name: String, then: @escaping (String) -> Void) {
        askSecret("password for \(name) \(Self.secretHint)") { [weak self] password in
            guard let password, !password.isEmpty else {
                self?.show(.notice(time: ClientClock.now(), text: "no password typed: nothing was sent"))
                return
            }
            then(password)
        }
    }

    /// A new password typed at the hidden prompt `prompt`, then again at `again`, since what is
    /// typed there is not seen; nothing goes on if either is empty or the two differ (`retry`
    /// is the command to type again).
    private func askNewPassword(_ prompt: String, again: String, retry: String, then: @escaping (String) -> Void) {
        let nothingTyped = "no password typed: nothing was sent"
        askSecret("\(prompt) \(Self.secretHint)") { [weak self] password in
            guard let self else { return }
            guard let password, !password.isEmpty else { return self.show(.notice(time: ClientClock.now(), text: nothingTyped)) }
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

    /// `/password`: the current password, then the new one twice. The current one is typed even
    /// with a password file, so that a script gives the same three lines whatever the file.
    private func changePassword(of account: String) {
        askPassword(for: account) { [weak self] old in
            self?.askNewPassword("new password for \(account)", again: "the same new password again, to be sure", retry: "/password") { [weak self] new in
                self?.sendWithPassword(.changePassword(old: old, new: new), remembering: AccountLogin(name: account, password: new))
            }
        }
    }

    /// `/unregister`: a yes first, then the password (typed even with a password file, as for
    /// `/password`); the server deletes the account.
    private func confirmDrop(of account: String) {
        ask("delete the account \(account) for good? Its rooms are unregistered and its roles forgotten (y/n) ") { [weak self] (yes: Bool) in
            guard let self else { return }
            guard yes else { return self.show(.notice(time: ClientClock.now(), text: "the account \(account) is kept")) }
            self.askPassword(for: account) { [weak self] password in
                self?.sendWithPassword(.dropAccount(password: password), remembering: nil)
            }
        }
    }

    /// Sends `frame`, which carries a password, if the client is still connected (the
    /// connection may have gone while the password was typed), warning first when it would go
    /// in plain text beyond loopback; `remembering` is the login the server's answer makes the
    /// one to log in with again (`noteAccountAnswer`).
    private func sendWithPassword(_ frame: Frame, remembering login: AccountLogin?) {
        guard session.isConnected else {
            return show(.error(time: ClientClock.now(), text: "not connected; the password was not sent \(connectionNote)"))
        }
        if let host = serverHost { warnIfPlain(to: host, encrypted: configuration.tls != nil) }
        if let login { pendingAccount = login }
        awaitingAccountAnswer = send([frame], fromUser: true)
    }

    /// Follows the server's answers to the account requests: an account it accepted is the one
    /// to log in to again with every later hello; a refused one is forgotten, and so is a
    /// dropped account. Any answer ends the wait of `accountRequestsAnswered`.
    func noteAccountAnswer(_ frame: Frame) {
        switch frame {
        case .registered, .loggedIn, .passwordChanged, .accountDropped:
            awaitingAccountAnswer = false
        case .error(_, _, let type, _) where type == .login || type == .register || type == .changePassword || type == .dropAccount:
            awaitingAccountAnswer = false
        default:
            break
        }
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
