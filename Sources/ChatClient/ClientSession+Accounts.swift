import ChatProtocol

// MARK: - Accounts (protocol version 3)
//
// The session's side of accounts: what the server's answers to `register`, `login`,
// `changePassword` and `dropAccount` change and show. Passwords never pass through here: the
// terminal reads them (AccountCommands.swift) and sends the frames itself.

extension ClientSession {
    /// What to do for one of the server's account answers: remember the account, say what happened.
    mutating func accountAnswer(_ frame: Frame) -> [SessionAction] {
        switch frame {
        case .registered(let name):
            account = name
            return [notice("registered the account \(name); you are logged in as it")]
        case .loggedIn(let name):
            account = name
            return [notice("logged in as \(name)")]
        case .passwordChanged(let name):
            return [notice("the password of \(name) is changed")]
        case .accountDropped(let name):
            account = nil
            return [notice("the account \(name) is deleted; you keep the nick as a guest")]
        default:
            return []
        }
    }
}
