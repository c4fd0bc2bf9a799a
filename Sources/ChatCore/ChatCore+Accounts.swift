import ChatProtocol

// MARK: - Accounts
//
// Register, log in, change the password, drop the account (protocol version 3), and the rule
// that a registered nick is reserved: a guest can take it neither in `hello` nor by `changeNick`.
//
// The records live in memory (`AccountDirectory.records`), loaded from the `AccountStore` at
// start-up, so whether a nick is reserved is known at once. What is slow runs elsewhere, asked
// for like the store's reads (ChatCore+Reads.swift): the core appends `AccountWork` — a hash to
// compute or check on the hashing pool, a record to save or delete in the store — the server
// carries it out and hands the answer back (`accountAnswered`). The asking client is served
// nothing more until its answer comes (`isAwaitingAccount`), so its replies keep request order.
//
// A cluster node keeps no records (`accounts.records` stays empty): they are in Redis, where
// every node sees a change at once (docs/CLUSTER.md, "Accounts"). There a password check starts
// with `AccountWork.Job.guess`, which counts the guess in the cluster-wide windows and reads the
// record in one step; a registration is counted against its address (`countRegistration`), then
// made by `create`, which checks the cap in the same step; and
// whether a nick is reserved is the cluster nick claim's answer (`clusterNickReserved`).

/// Work the core asks the server to carry out for an account request.
public struct AccountWork: Sendable {
    /// What to do.
    public enum Job: Sendable {
        /// Hash `password` on the hashing pool (`PasswordHashingPool.Job.hash`).
        case hash(password: String)
        /// Check `password` against `stored` on the hashing pool; with no `stored` (no such
        /// account), against the pool's dummy hash, which costs as much and never matches, so a
        /// login for a name without an account is answered exactly as a wrong password is.
        case verify(password: String, stored: String?)
        /// Keep `record` in the account store.
        case save(AccountRecord)
        /// Delete the account `key` from the account store.
        case delete(key: String)
        /// Cluster mode: count a password guess against the account `key` and the throttle key
        /// `address` in the cluster's windows, and read the account → `AccountAnswer.guessed`.
        case guess(key: String, address: String)
        /// Cluster mode: give back a guess counted by `guess` (a right password, or one the pool
        /// could not check). Nobody waits for it.
        case giveBack(key: String, address: String)
        /// Cluster mode: count a registration from the throttle key `address` in the cluster's
        /// windows, the address's and the cluster's → `AccountAnswer.registrationCounted`.
        case countRegistration(address: String)
        /// Cluster mode: give back a registration counted by `countRegistration` (the pool could
        /// not hash its password). Nobody waits for it.
        case giveBackRegistration(address: String)
        /// Cluster mode: make `record` unless its key exists or the cluster holds
        /// `AccountSettings.maxAccounts` accounts → `AccountAnswer.created`.
        case create(AccountRecord)
    }

    /// Tells the answer which work it answers.
    public let ticket: UInt64
    /// What to do.
    public let job: Job
    /// The share of the hashing pool a `hash` or `verify` counts against: the asking client's
    /// address prefix (`ChatCore.hashingShare(of:)`); empty for other work.
    public let share: String
}

/// The answer to an `AccountWork`.
public enum AccountAnswer: Sendable {
    /// The pool's outcome of a `hash` or `verify`.
    case hashing(PasswordHashingOutcome)
    /// The pool's queue was full: nothing was computed.
    case busy
    /// The store kept (or failed to keep) a `save` or `delete`.
    case stored(Result<Void, AccountStoreError>)
    /// What a `guess` found.
    case guessed(Result<AccountGuess, AccountStoreError>)
    /// What a `create` came to.
    case created(Result<AccountCreation, AccountStoreError>)
    /// What a `countRegistration` found.
    case registrationCounted(Result<RegistrationCount, AccountStoreError>)
}

/// What counting a registration in the cluster's windows found (`AccountWork.Job.countRegistration`).
public enum RegistrationCount: Sendable, Equatable {
    /// Counted, in the address's window and the cluster's.
    case counted
    /// The address's window (`server` false) or the cluster's (`server` true) is full for
    /// `waitMilliseconds` more; nothing was counted.
    case full(server: Bool, waitMilliseconds: UInt64)
}

/// What counting a password guess in the cluster found (`AccountWork.Job.guess`).
public enum AccountGuess: Sendable, Equatable {
    /// Counted: check the password against this record.
    case admitted(AccountRecord)
    /// No such account; the guess was counted against the address.
    case noAccount
    /// The account's (`account` true) or the address's window is full for `waitMilliseconds`
    /// more; nothing was counted.
    case throttled(account: Bool, waitMilliseconds: UInt64)
}

/// What a registration in the cluster came to (`AccountWork.Job.create`).
public enum AccountCreation: Sendable, Equatable {
    /// The account exists now.
    case created
    /// An account of that name existed already.
    case exists
    /// The cluster holds as many accounts as it allows.
    case full
}

/// A login the core refused for its password, for the server's log: the core writes no log, so
/// it reports each one (`ChatCore.takeLoginFailures`) and the server logs it, throttled per
/// address, for the operator and for tools such as fail2ban. The password is never in it.
public struct LoginFailure: Sendable, Equatable {
    /// Why the login was refused.
    public enum Cause: Sendable, Equatable {
        /// The password did not match the account's.
        case wrongPassword
        /// No account has the name. The client is answered as for a wrong password; the
        /// operator's log says which it was.
        case noAccount
        /// Not checked: the guess windows are full — the account's (`account` true) or the
        /// address's own — for `waitMilliseconds` more.
        case throttled(account: Bool, waitMilliseconds: UInt64)
    }

    /// The client that tried.
    public let client: ClientID
    /// The account tried, by its key (`ChatName.nickKey` of the name sent): what the guess
    /// windows count it under.
    public let account: String
    /// Why it was refused.
    public let cause: Cause
}

/// Attempts counted in one fixed window.
struct AttemptWindow: Sendable {
    /// When the window opened (uptime milliseconds).
    var start: UInt64
    var count: Int
}

/// The limits of `GuessWindows`, each per `window` milliseconds.
struct GuessLimits: Sendable {
    /// Guesses at one subject from all addresses together, past which only an address that has
    /// no guess at it counted in its window is still let try.
    var perSubject: Int
    /// Guesses at one subject from one address.
    var perSubjectFromAddress: Int
    /// Guesses from one address at every subject together.
    var perAddress: Int
    var window: UInt64
}

/// The windows that password and room-key guesses are counted in — the rule of guessing, for a
/// server on its own; a cluster keeps the same rule in Redis (`ClusterAccounts.guessScript`),
/// and docs/SECURITY.md ("Guessing") gives its figures and trade-off.
///
/// A subject is what is guessed: an account's password (`account:KEY`) or a room's key
/// (`room:NAME`); an address is a throttle key (`ChatCore.throttleKey`: IPv4 as it is, IPv6 by
/// its /64). A guess is let through when
/// 1. its address has guessed fewer than `perAddress` times in its window, and
/// 2. the address has guessed at the subject fewer than `perSubjectFromAddress` times, and
/// 3. either the subject has been guessed at fewer than `perSubject` times in all, or this
///    address has no guess at the subject counted now (none yet, or each given back).
/// Rule 3 is what keeps an owner in: guesses from everywhere else fill the subject's window,
/// yet the owner, logging in from an address that has not guessed wrong, is checked. Its cost
/// is that every address an attacker holds gets one guess past the subject's window: at most
/// `perSubject` + (its addresses) guesses a window, and `perSubjectFromAddress` × (its
/// addresses) whichever is smaller.
///
/// A guess is counted in all three windows when it is let through, before it is checked, so
/// guesses in flight at once cannot slip past a limit; a right one (or one the hashing pool could
/// not take) is given back, so an owner never uses up its own guesses and stays "clean".
///
/// Memory: a window is kept only while it counts a guess — one given back to nothing is
/// forgotten at once — and never more than `capacity` in all (about 100 bytes each: 5 MB at the
/// default, within the process's share of the memory budget). Past it, the windows that ended
/// go, then the oldest: that would take some thousands of addresses guessing at their full rate,
/// and forgetting a window a minute old gives them a guess or two sooner than its end would.
struct GuessWindows: Sendable {
    var byAddress: [String: AttemptWindow] = [:]
    var bySubject: [String: AttemptWindow] = [:]
    /// By subject and address (`pairKey`).
    var byPair: [String: AttemptWindow] = [:]
    /// The most windows kept, in the three together.
    var capacity = 50_000

    /// How many windows are kept.
    var count: Int { byAddress.count + bySubject.count + byPair.count }

    /// Why a guess is not let through: whose window is full, and for how long more (ms).
    enum Refusal: Sendable, Equatable {
        /// The address's own window (rule 1).
        case address(wait: UInt64)
        /// The subject's, from this address or from all (rules 2 and 3).
        case subject(wait: UInt64)

        var wait: UInt64 {
            switch self {
            case .address(let wait), .subject(let wait): wait
            }
        }

        /// Whether the subject's window is the full one (rules 2 and 3), not the address's.
        var isSubject: Bool {
            if case .subject = self { return true }
            return false
        }
    }

    static func pairKey(_ subject: String, _ address: String) -> String { subject + "\u{0}" + address }

    /// Why a guess at `subject` from `address` would not be let through now, or nil if it would.
    func refusal(at subject: String, from address: String, limits: GuessLimits, now: UInt64) -> Refusal? {
        if let wait = ChatCore.wait(byAddress[address], limit: limits.perAddress, window: limits.window, now: now) {
            return .address(wait: wait)
        }
        let pair = byPair[Self.pairKey(subject, address)]
        if let wait = ChatCore.wait(pair, limit: limits.perSubjectFromAddress, window: limits.window, now: now) {
            return .subject(wait: wait)
        }
        let counted = pair.map { now &- $0.start < limits.window ? $0.count : 0 } ?? 0
        if counted > 0, let wait = ChatCore.wait(bySubject[subject], limit: limits.perSubject, window: limits.window, now: now) {
            return .subject(wait: wait)
        }
        return nil
    }

    /// Lets a guess at `subject` from `address` through and counts it, or refuses it (counting
    /// nothing).
    mutating func admit(_ subject: String, from address: String, limits: GuessLimits, now: UInt64) -> Refusal? {
        if let refusal = refusal(at: subject, from: address, limits: limits, now: now) { return refusal }
        _ = ChatCore.spend(&byAddress[address], limit: .max, window: limits.window, now: now)
        _ = ChatCore.spend(&bySubject[subject], limit: .max, window: limits.window, now: now)
        _ = ChatCore.spend(&byPair[Self.pairKey(subject, address)], limit: .max, window: limits.window, now: now)
        if count > capacity { shed(window: limits.window, now: now) }
        return nil
    }

    /// Gives back a guess `admit` counted (a right password or key, or one nobody checked); a
    /// window left counting nothing is forgotten, as if it had never opened.
    mutating func giveBack(_ subject: String, from address: String) {
        Self.giveBack(&byAddress[address])
        Self.giveBack(&bySubject[subject])
        Self.giveBack(&byPair[Self.pairKey(subject, address)])
    }

    private static func giveBack(_ window: inout AttemptWindow?) {
        ChatCore.giveBack(&window)
        if window?.count == 0 { window = nil }
    }

    /// Brings the windows under `capacity`: those that ended go, then the oldest, down to three
    /// quarters of it (so the next shedding is thousands of guesses away).
    private mutating func shed(window length: UInt64, now: UInt64) {
        forgetEnded(window: length, now: now)
        guard count > capacity else { return }
        let excess = count - capacity * 3 / 4
        let starts = (byAddress.values.map(\.start) + bySubject.values.map(\.start) + byPair.values.map(\.start)).sorted()
        let cutoff = starts[excess - 1]
        // Windows that opened at `cutoff` or before go; ties may take a few more.
        byAddress = byAddress.filter { $0.value.start > cutoff }
        bySubject = bySubject.filter { $0.value.start > cutoff }
        byPair = byPair.filter { $0.value.start > cutoff }
    }

    /// Forgets the windows that have ended.
    mutating func forgetEnded(window length: UInt64, now: UInt64) {
        let current = { (window: AttemptWindow) in now &- window.start < length }
        if !byAddress.isEmpty { byAddress = byAddress.filter { current($0.value) } }
        if !bySubject.isEmpty { bySubject = bySubject.filter { current($0.value) } }
        if !byPair.isEmpty { byPair = byPair.filter { current($0.value) } }
    }
}

/// The accounts the core knows and the account work in flight.
@usableFromInline struct AccountDirectory: Sendable {
    /// Every account, by key (`ChatName.nickKey` of its name).
    var records: [String: AccountRecord] = [:]
    /// Registrations hashing now: counted against the cap with the records.
    var registering = 0
    /// Cluster mode: the names (case kept) of the accounts read from Redis, by key, for the
    /// replies that name an account. Not a record: a node never decides a reservation by it. At
    /// most one per account, so within the records' share of the memory budget.
    var clusterNames: [String: String] = [:]

    /// The name of the account `key`: as registered, when known here.
    func name(of key: String) -> String { records[key]?.name ?? clusterNames[key] ?? key }

    /// What an answer is for.
    enum Purpose: Sendable {
        case registerHashed(ClientID, name: String)
        /// Cluster mode: the registration of `name` was counted against the address.
        case registerCounted(ClientID, name: String, password: String)
        case registerSaved(ClientID, AccountRecord)
        /// `handshake`: a login that completes a `hello` for the account's nick.
        case login(ClientID, key: String, address: String, handshake: Bool)
        /// Cluster mode: the guess of a login (with its password) was counted and the record read.
        case loginGuessed(ClientID, key: String, password: String, handshake: Bool)
        /// Cluster mode: a login's password checked against `record`, read from Redis (nil: no
        /// account `key`, checked against the dummy hash).
        case clusterLogin(ClientID, AccountRecord?, key: String, address: String, handshake: Bool)
        /// Cluster mode: the guess of a `changePassword` (`newPassword` set) or a `dropAccount`
        /// was counted and the record read.
        case changeGuessed(ClientID, key: String, password: String, newPassword: String?)
        case changeVerified(ClientID, key: String, newPassword: String)
        case changeHashed(ClientID, key: String)
        case changeSaved(ClientID, key: String)
        case dropVerified(ClientID, key: String)
        case dropDeleted(ClientID, key: String)
        /// A background write (a rehash after a login): nobody waits.
        case quiet
    }

    var outbox: [AccountWork] = []
    /// Logins refused since the server last took them (`takeLoginFailures`).
    var loginFailures: [LoginFailure] = []
    var nextTicket: UInt64 = 1
    var purposes: [UInt64: Purpose] = [:]
    /// The ticket each waiting client waits for.
    @usableFromInline var waiting: [ClientID: UInt64] = [:]

    /// Password and room-key guesses (a server on its own; a cluster counts them in Redis).
    var guesses = GuessWindows()
    /// Registrations per address key, and from all addresses together.
    var registrations: [String: AttemptWindow] = [:]
    var serverRegistrations: AttemptWindow?

    /// Asks for `job`, for `purpose`; returns its ticket. `share`: for a hash or a check, the
    /// share of the hashing pool it counts against.
    mutating func ask(_ job: AccountWork.Job, share: String = "", for purpose: Purpose) -> UInt64 {
        let ticket = nextTicket
        nextTicket += 1
        outbox.append(AccountWork(ticket: ticket, job: job, share: share))
        purposes[ticket] = purpose
        return ticket
    }
}

extension ChatCore {
    // MARK: The server's side

    /// Puts `records` (read from the account store at start-up) in the core. Call before serving.
    public mutating func loadAccounts(_ records: [AccountRecord]) {
        for record in records { accounts.records[record.key] = record }
    }

    /// How many accounts exist.
    public var accountCount: Int { accounts.records.count }

    /// The keys of the server operators' accounts (`--admin-account`) that have no record, sorted:
    /// on a server on its own, the ones its operator must still create. (A cluster node keeps
    /// no records: it asks Redis.)
    public var missingAdminAccounts: [String] {
        limits.accounts.adminAccounts.filter { accounts.records[$0] == nil }.sorted()
    }

    /// Takes the account work asked for since the last call, in order.
    public mutating func takeAccountWork() -> [AccountWork] {
        guard !accounts.outbox.isEmpty else { return [] }
        defer { accounts.outbox.removeAll() }
        return accounts.outbox
    }

    /// Takes the logins refused for their password since the last call, in order, for the log.
    public mutating func takeLoginFailures() -> [LoginFailure] {
        guard !accounts.loginFailures.isEmpty else { return [] }
        defer { accounts.loginFailures.removeAll() }
        return accounts.loginFailures
    }

    /// Whether `id` waits for an account answer: the server serves it no further request until then.
    @inlinable
    public func isAwaitingAccount(_ id: ClientID) -> Bool { accounts.waiting[id] != nil }

    /// The account `id` is logged in as, or nil.
    public func account(of id: ClientID) -> String? {
        id.slot < clients.count ? clients[id.slot]?.account.map { accounts.name(of: $0) } : nil
    }

    /// Whether a password from `address` over a connection that is (or is not) `encrypted` may be
    /// looked at: over TLS, or from loopback, or when the operator allows plain passwords.
    /// Anything else could have been read on the way, so it is refused unread.
    public static func acceptsPassword(from address: String, encrypted: Bool, allowPlain: Bool) -> Bool {
        encrypted || allowPlain || isLoopback(address)
    }

    /// Whether `address` (as the server writes peers: dotted IPv4, or IPv6 text, possibly
    /// IPv4-mapped) is a loopback address: 127.0.0.0/8 or ::1.
    static func isLoopback(_ address: String) -> Bool {
        guard let ip = IPAddress(address) else { return false }
        if ip.isIPv4 { return ip.bytes[0] == 127 }
        if ip.bytes[0..<15].allSatisfy({ $0 == 0 }) && ip.bytes[15] == 1 { return true }
        return ip.mappedIPv4?.bytes[0] == 127
    }

    /// The key that login and registration throttles count an address under: an IPv6 address by
    /// its /64 (one host is given a whole /64), anything else as it is.
    static func throttleKey(of address: String) -> String {
        guard !address.contains("."), let ip = IPAddress(address), !ip.isIPv4 else { return address }
        let bytes = ip.bytes
        return stride(from: 0, to: 8, by: 2).map { String(UInt16(bytes[$0]) << 8 | UInt16(bytes[$0 + 1]), radix: 16) }
            .joined(separator: ":") + "::/64"
    }

    /// The share of the hashing pool a client at `address` counts against
    /// (`PasswordHashingPool`): its IPv4 /24 (an IPv4-mapped IPv6 address too), its IPv6 /64 —
    /// what one host or one small network holds, so that a flood from one of them cannot take
    /// the queue from everyone else.
    static func hashingShare(of address: String) -> String {
        let dotted = address.split(separator: ":").last ?? address[...]
        if let ip = IPAddress(ipv4: dotted) {
            return "\(ip.bytes[0]).\(ip.bytes[1]).\(ip.bytes[2]).0/24"
        }
        return throttleKey(of: address)
    }

    /// The limits that password guesses are counted under (`GuessWindows`); room keys are
    /// guessed under the same.
    var guessLimits: GuessLimits {
        let limits = limits.accounts
        return GuessLimits(
            perSubject: limits.loginAttemptsPerAccount, perSubjectFromAddress: limits.loginAttemptsPerAccountFromAddress,
            perAddress: limits.loginAttemptsPerAddress, window: limits.loginWindow.milliseconds)
    }

    /// The key the guess windows count the account `key` under.
    static func guessSubject(account key: String) -> String { "account:" + key }
    /// The key the guess windows count the room `name`'s key under.
    static func guessSubject(room name: String) -> String { "room:" + name }

    /// Asks the hashing pool for `job`, for `purpose`, counted against the share of `id`'s
    /// address; `id` waits for the answer.
    private mutating func askHashing(_ job: AccountWork.Job, for purpose: AccountDirectory.Purpose, from id: ClientID) {
        let share = Self.hashingShare(of: address(of: id))
        accounts.waiting[id] = accounts.ask(job, share: share, for: purpose)
    }

    /// The account work `ticket` was answered with `answer`.
    public mutating func accountAnswered(_ ticket: UInt64, _ answer: AccountAnswer, at now: ServerTime, into actions: inout [ChatAction]) {
        guard let purpose = accounts.purposes.removeValue(forKey: ticket) else { return }
        let id: ClientID
        switch purpose {
        case .quiet: return
        case .registerHashed(let client, _), .registerSaved(let client, _), .login(let client, _, _, _), .registerCounted(let client, _, _),
            .changeVerified(let client, _, _), .changeHashed(let client, _), .changeSaved(let client, _),
            .dropVerified(let client, _), .dropDeleted(let client, _), .loginGuessed(let client, _, _, _),
            .changeGuessed(let client, _, _, _), .clusterLogin(let client, _, _, _, _):
            id = client
        }
        if case .registerHashed = purpose { accounts.registering -= 1 }
        // The client left (or its slot is someone else's now): what it asked is dropped, except
        // a record already made, which is kept.
        guard accounts.waiting[id] == ticket, clients.indices.contains(id.slot), clients[id.slot] != nil else {
            if case .registerSaved(_, let record) = purpose, case .failure = answer.storeResult {
                if accounts.records[record.key] == record { accounts.records[record.key] = nil }
            }
            return
        }
        accounts.waiting[id] = nil
        let firstAction = actions.count
        defer { chargeReplies(to: id, for: actions[firstAction...]) }
        switch purpose {
        case .quiet:
            break
        case .registerHashed(_, let name):
            registerHashed(id, name: name, answer, at: now, into: &actions)
        case .registerCounted(_, let name, let password):
            switch answer {
            case .registrationCounted(.success(.counted)):
                accounts.registering += 1
                askHashing(.hash(password: password), for: .registerHashed(id, name: name), from: id)
            case .registrationCounted(.success(.full(let server, let wait))):
                refuse(.register, .throttled, Self.registrationsFullReason(server: server, wait: wait), to: id, into: &actions)
            case .registrationCounted(.failure(let error)):
                refuse(.register, .unavailable, "cannot register now: \(error); try again", to: id, into: &actions)
            default:
                refuse(.register, .internal, "no answer from the cluster", to: id, into: &actions)
            }
        case .registerSaved(_, let record):
            if case .created(let result) = answer {
                registerCreated(id, record: record, result, at: now, into: &actions)
            } else if case .failure(let error) = answer.storeResult {
                if accounts.records[record.key] == record { accounts.records[record.key] = nil }
                refuse(.register, .storageFailed, "the account was not stored: \(error)", to: id, into: &actions)
            } else {
                clients[id.slot]?.account = record.key
                actions.append(.send(.registered(account: record.name), to: id))
                // Registering logs in: an account a server operator banned before it existed
                // ends the session as a login to it would, and a room's ban of it kicks.
                if !endIfServerBanned(id, nick: nil, request: .register, at: now, into: &actions) {
                    loggedInAsMember(id, at: now, into: &actions)
                }
            }
        case .login(_, let key, let address, let handshake):
            loginVerified(id, key: key, address: address, handshake: handshake, answer, at: now, into: &actions)
        case .loginGuessed(_, let key, let password, let handshake):
            loginGuessed(id, key: key, password: password, handshake: handshake, answer, at: now, into: &actions)
        case .clusterLogin(_, let record, let key, let address, let handshake):
            clusterLoginVerified(id, record: record, key: key, address: address, handshake: handshake, answer, at: now, into: &actions)
        case .changeGuessed(_, let key, let password, let newPassword):
            changeGuessed(id, key: key, password: password, newPassword: newPassword, answer, into: &actions)
        case .changeVerified(_, let key, let newPassword):
            guard passwordMatched(answer, request: .changePassword, key: key, address: address(of: id), id: id, into: &actions)
            else { return }
            askHashing(.hash(password: newPassword), for: .changeHashed(id, key: key), from: id)
        case .changeHashed(_, let key):
            // A node keeps no records: Redis replaces the hash of the account by its key.
            let kept = !isClustered ? accounts.records[key] : AccountRecord(name: accounts.name(of: key), key: key, passwordHash: "", created: 0)
            guard case .hashing(.hashed(let hash?)) = answer, var record = kept else {
                refuse(.changePassword, answer.isBusy ? .busy : .internal, answer.isBusy ? Self.busyReason : "the password was not changed", to: id, into: &actions)
                return
            }
            record.passwordHash = hash
            if !isClustered { accounts.records[key] = record }
            accounts.waiting[id] = accounts.ask(.save(record), for: .changeSaved(id, key: key))
        case .changeSaved(_, let key):
            if case .failure(let error) = answer.storeResult {
                refuse(.changePassword, .storageFailed, "the new password was not stored: \(error)", to: id, into: &actions)
            } else {
                actions.append(.send(.passwordChanged(account: accounts.name(of: key)), to: id))
            }
        case .dropVerified(_, let key):
            guard passwordMatched(answer, request: .dropAccount, key: key, address: address(of: id), id: id, into: &actions)
            else { return }
            accounts.waiting[id] = accounts.ask(.delete(key: key), for: .dropDeleted(id, key: key))
        case .dropDeleted(_, let key):
            if case .failure(let error) = answer.storeResult {
                refuse(.dropAccount, .storageFailed, "the account was not deleted: \(error)", to: id, into: &actions)
            } else {
                let name = accounts.name(of: key)
                accounts.records[key] = nil
                accounts.clusterNames[key] = nil
                if clients[id.slot]?.account == key { clients[id.slot]?.account = nil }
                accountDropped(key)
                actions.append(.send(.accountDropped(account: name), to: id))
            }
        }
    }

    static let busyReason = "the server is checking too many passwords now; try again in a moment"

    // MARK: Requests

    /// Handles a version 3 account request from the welcomed client `id` called `nick`; false
    /// for any other frame.
    mutating func accountRequest(_ frame: Frame, from id: ClientID, nick: String, at now: ServerTime, into actions: inout [ChatAction]) -> Bool {
        let request: FrameType
        let passwords: [String]
        switch frame {
        case .register(let password): (request, passwords) = (.register, [password])
        case .login(_, let password): (request, passwords) = (.login, [password])
        case .changePassword(let old, let new): (request, passwords) = (.changePassword, [old, new])
        case .dropAccount(let password): (request, passwords) = (.dropAccount, [password])
        default: return false
        }
        if let problem = passwordProblem(passwords, from: id) {
            refuse(request, problem.code, problem.reason, to: id, into: &actions)
            return true
        }
        switch frame {
        case .register(let password):
            register(id, nick: nick, password: password, at: now, into: &actions)
        case .login(let account, let password):
            login(id, account: account, password: password, handshake: false, at: now, into: &actions)
        case .changePassword(let old, let new):
            guard let key = loggedInKey(of: id, request: .changePassword, into: &actions) else { return true }
            if isClustered {
                askGuess(key: key, from: id, for: .changeGuessed(id, key: key, password: old, newPassword: new))
                return true
            }
            guard let record = accounts.records[key], admitGuess(request, key: key, from: id, at: now, into: &actions) else { return true }
            askHashing(.verify(password: old, stored: record.passwordHash), for: .changeVerified(id, key: key, newPassword: new), from: id)
        case .dropAccount(let password):
            guard let key = loggedInKey(of: id, request: .dropAccount, into: &actions) else { return true }
            if isClustered {
                askGuess(key: key, from: id, for: .changeGuessed(id, key: key, password: password, newPassword: nil))
                return true
            }
            guard let record = accounts.records[key], admitGuess(request, key: key, from: id, at: now, into: &actions) else { return true }
            askHashing(.verify(password: password, stored: record.passwordHash), for: .dropVerified(id, key: key), from: id)
        default:
            break
        }
        return true
    }

    /// Why the passwords of a request from `id` are not looked at — sent in the clear from afar,
    /// or of a length no password has — as the code and reason to refuse with; nil when they may be.
    func passwordProblem(_ passwords: [String], from id: ClientID) -> (code: ErrorCode, reason: String)? {
        guard clients[id.slot]?.passwordsAllowed == true else {
            return (.plainPasswordRefused, "passwords are accepted only over TLS (or from this host); yours was not looked at")
        }
        for password in passwords where password.isEmpty || password.utf8.count > WireProtocol.maxPasswordBytes {
            return (.badPassword, "a password must be 1 to \(WireProtocol.maxPasswordBytes) bytes")
        }
        return nil
    }

    private mutating func loggedInKey(of id: ClientID, request: FrameType, into actions: inout [ChatAction]) -> String? {
        // A node has no records to look in: Redis says whether the account still exists when the
        // password is checked (`changeGuessed`).
        guard let key = clients[id.slot]?.account, isClustered || accounts.records[key] != nil else {
            refuse(request, .notLoggedIn, "log in to the account first", to: id, into: &actions)
            return nil
        }
        return key
    }

    /// Registers `nick`, the client's own, as an account with `password`.
    private mutating func register(_ id: ClientID, nick: String, password: String, at now: ServerTime, into actions: inout [ChatAction]) {
        let key = ChatName.nickKey(nick)
        let limits = limits.accounts
        // A server operator's account is the operator's to make (`chat-server account add`),
        // never a client's: its nick is reserved from the start (`reservation`), so no guest
        // holds it to get here, and this says no whatever the way in.
        if limits.adminAccounts.contains(key) {
            let reason = "\(nick) is reserved for a server operator's account, which only the server's operator creates"
            refuse(.register, .nickReserved, reason, to: id, into: &actions)
            return
        }
        if accounts.records[key] != nil {
            refuse(.register, .accountExists, "\(nick) is already registered", to: id, into: &actions)
            return
        }
        // A node counts no accounts: Redis checks the cap when it makes the record (`create`).
        if !isClustered, accounts.records.count + accounts.registering >= limits.maxAccounts {
            refuse(.register, .tooManyAccounts, "the server holds as many accounts as it allows (\(limits.maxAccounts))", to: id, into: &actions)
            return
        }
        let addressKey = Self.throttleKey(of: address(of: id))
        if isClustered {
            // The windows are the cluster's: counted in Redis before anything is hashed.
            accounts.waiting[id] = accounts.ask(
                .countRegistration(address: addressKey), for: .registerCounted(id, name: nick, password: password))
            return
        }
        // The address's window and the server's must both have room; then both count it.
        let window = limits.registrationWindow.milliseconds
        let time = now.uptimeMillis
        let addressWait = Self.wait(accounts.registrations[addressKey], limit: limits.registrationsPerAddress, window: window, now: time)
        let serverWait = Self.wait(accounts.serverRegistrations, limit: limits.registrationsPerServer, window: window, now: time)
        if let wait = addressWait ?? serverWait {
            refuse(.register, .throttled, Self.registrationsFullReason(server: addressWait == nil, wait: wait), to: id, into: &actions)
            return
        }
        _ = Self.spend(&accounts.registrations[addressKey], limit: .max, window: window, now: time)
        _ = Self.spend(&accounts.serverRegistrations, limit: .max, window: window, now: time)
        accounts.registering += 1
        askHashing(.hash(password: password), for: .registerHashed(id, name: nick), from: id)
    }

    /// The reason a registration is refused `throttled` with: the address's window (or, with
    /// `server`, the server's — the cluster's) is full for `wait` ms more.
    static func registrationsFullReason(server: Bool, wait: UInt64) -> String {
        let whose = server ? "the server takes no more registrations this hour" : "too many registrations from your address"
        return "\(whose); try again in \(waitText(wait))"
    }

    private mutating func registerHashed(_ id: ClientID, name: String, _ answer: AccountAnswer, at now: ServerTime, into actions: inout [ChatAction]) {
        let key = ChatName.nickKey(name)
        guard case .hashing(.hashed(let hash?)) = answer else {
            if answer.isBusy {
                // Nothing was registered: the registration is given back to its windows.
                let addressKey = Self.throttleKey(of: address(of: id))
                if isClustered {
                    _ = accounts.ask(.giveBackRegistration(address: addressKey), for: .quiet)
                } else {
                    Self.giveBack(&accounts.registrations[addressKey])
                    Self.giveBack(&accounts.serverRegistrations)
                }
                refuse(.register, .busy, Self.busyReason, to: id, into: &actions)
            } else {
                refuse(.register, .internal, "the password could not be hashed", to: id, into: &actions)
            }
            return
        }
        let record = AccountRecord(name: name, key: key, passwordHash: hash, created: now.wallMillis)
        if isClustered {
            accounts.waiting[id] = accounts.ask(.create(record), for: .registerSaved(id, record))
            return
        }
        // Checked again: another registration may have taken the last place meanwhile.
        if accounts.records[key] != nil {
            refuse(.register, .accountExists, "\(name) is already registered", to: id, into: &actions)
            return
        }
        if accounts.records.count >= limits.accounts.maxAccounts {
            refuse(.register, .tooManyAccounts, "the server holds as many accounts as it allows", to: id, into: &actions)
            return
        }
        // Reserved from now on, so that nobody takes the nick while the store writes.
        accounts.records[key] = record
        accounts.waiting[id] = accounts.ask(.save(record), for: .registerSaved(id, record))
    }

    /// Starts a login of `id` to `account`: throttles first, then the hash check on the pool.
    /// `handshake`: it completes a `hello` (a refusal then ends the connection).
    ///
    /// A name without an account goes the same way as one with — its own guess windows, a check
    /// on the hashing pool against the pool's dummy hash (as costly as a real one), the same
    /// answer — so neither the answer, nor the guesses allowed, nor the time taken tells whether
    /// an account exists (docs/SECURITY.md, "Account names").
    mutating func login(_ id: ClientID, account: String, password: String, handshake: Bool, at now: ServerTime, into actions: inout [ChatAction]) {
        let key = ChatName.nickKey(account)
        let address = address(of: id)
        if isClustered {
            askGuess(key: key, from: id, for: .loginGuessed(id, key: key, password: password, handshake: handshake))
            return
        }
        guard admitGuess(.login, key: key, from: id, handshake: handshake, at: now, into: &actions) else { return }
        askHashing(
            .verify(password: password, stored: accounts.records[key]?.passwordHash),
            for: .login(id, key: key, address: address, handshake: handshake), from: id)
    }

    /// The answer to a password that did not match, or to a name without an account: one text
    /// for both, naming the account as the client could have written it in any letter case.
    static func wrongPasswordReason(_ key: String) -> String { "no account \(key), or a wrong password" }

    /// The reason a guess is refused `throttled` with, for `refusal` of a guess at an account's
    /// password (or, with `room`, at that room's key). The same for every account, existing or not.
    static func guessRefusalReason(_ refusal: GuessWindows.Refusal, room: String? = nil) -> String {
        let whose: String
        switch (refusal, room) {
        case (.address, nil): whose = "too many password attempts from your address"
        case (.subject, nil): whose = "too many password attempts for this account"
        case (.address, _?): whose = "too many wrong room keys from your address"
        case (.subject, let room?): whose = "too many wrong keys for #\(room)"
        }
        return "\(whose); try again in \(waitText(refusal.wait))"
    }

    /// A wait of `millis` as a person reads it: seconds up to two minutes, then minutes, then
    /// hours and minutes, each rounded up ("57 min", not "3428 s").
    static func waitText(_ millis: UInt64) -> String {
        let seconds = (millis + 999) / 1000
        if seconds < 120 { return "\(seconds) s" }
        let minutes = (seconds + 59) / 60
        if minutes < 120 { return "\(minutes) min" }
        return "\(minutes / 60) h \(minutes % 60) min"
    }

    /// Counts a password check of `key` from `id`'s address (`GuessWindows`); refuses it
    /// `throttled` (and returns false) when the windows say no.
    private mutating func admitGuess(
        _ request: FrameType, key: String, from id: ClientID, handshake: Bool = false, at now: ServerTime, into actions: inout [ChatAction]
    ) -> Bool {
        let addressKey = Self.throttleKey(of: address(of: id))
        let subject = Self.guessSubject(account: key)
        guard let refusal = accounts.guesses.admit(subject, from: addressKey, limits: guessLimits, now: now.uptimeMillis) else { return true }
        let reason = Self.guessRefusalReason(refusal)
        if request == .login { reportLoginFailure(id, key: key, .throttled(account: refusal.isSubject, waitMilliseconds: refusal.wait)) }
        if handshake {
            failLogin(id, handshake: true, .throttled, reason, at: now, into: &actions)
        } else {
            refuse(request, .throttled, reason, to: id, into: &actions)
        }
        return false
    }

    /// Whether a verify answer matched; when it did not (or the pool was busy), refuses `request`.
    /// A match gives its attempt back.
    private mutating func passwordMatched(
        _ answer: AccountAnswer, request: FrameType, key: String, address: String, id: ClientID, into actions: inout [ChatAction]
    ) -> Bool {
        switch answer {
        case .hashing(.verified(true, _)):
            giveBackGuess(key: key, address: address)
            return true
        case .busy:
            giveBackGuess(key: key, address: address)
            refuse(request, .busy, Self.busyReason, to: id, into: &actions)
        default:
            refuse(request, .authenticationFailed, "wrong password", to: id, into: &actions)
        }
        return false
    }

    private mutating func loginVerified(
        _ id: ClientID, key: String, address: String, handshake: Bool, _ answer: AccountAnswer, at now: ServerTime,
        into actions: inout [ChatAction]
    ) {
        switch answer {
        case .busy:
            giveBackGuess(key: key, address: address)
            failLogin(id, handshake: handshake, .busy, Self.busyReason, at: now, into: &actions)
            return
        case .hashing(.verified(true, let rehashed)):
            // Dropped (or its password changed) while this was checked: the check is void.
            guard var record = accounts.records[key] else {
                failLogin(id, handshake: handshake, .authenticationFailed, Self.wrongPasswordReason(key), at: now, into: &actions)
                return
            }
            giveBackGuess(key: key, address: address)
            if let rehashed {
                record.passwordHash = rehashed
                accounts.records[key] = record
                _ = accounts.ask(.save(record), for: .quiet)
            }
            completeLogin(id, record: record, handshake: handshake, at: now, into: &actions)
        default:
            reportLoginFailure(id, key: key, accounts.records[key] == nil ? .noAccount : .wrongPassword)
            failLogin(id, handshake: handshake, .authenticationFailed, Self.wrongPasswordReason(key), at: now, into: &actions)
        }
    }

    /// Reports a login of `id` to the account `key` refused for `cause`, for the server's log.
    private mutating func reportLoginFailure(_ id: ClientID, key: String, _ cause: LoginFailure.Cause) {
        accounts.loginFailures.append(LoginFailure(client: id, account: key, cause: cause))
    }

    /// What every mode does first once `id` proved it owns `record`: a session of a server-banned
    /// account is ended (before any ghosting: a banned account takes no nick back); otherwise a
    /// holder of the nick on this server or node is ghosted and `id` is logged in. Returns
    /// whether it was.
    private mutating func logIn(_ id: ClientID, to record: AccountRecord, at now: ServerTime, into actions: inout [ChatAction]) -> Bool {
        if let banned = serverBanRefusal(accountKey: record.key, nick: record.name, address: address(of: id), request: .login) {
            disconnect(id, banned, at: now, into: &actions)
            return false
        }
        if let holder = nicks[record.key], holder != id {
            let reason = "\(record.name) logged in from another connection and took the nick back"
            disconnect(holder, Disconnection(code: .ghosted, reason: reason), at: now, into: &actions)
        }
        clients[id.slot]?.account = record.key
        return true
    }

    /// `id` proved it owns `record`: a connection holding the nick is ghosted, and `id` takes the
    /// nick — welcomed with it when this completes its handshake, renamed to it otherwise.
    private mutating func completeLogin(_ id: ClientID, record: AccountRecord, handshake: Bool, at now: ServerTime, into actions: inout [ChatAction]) {
        guard logIn(id, to: record, at: now, into: &actions) else { return }
        if handshake, let pending = clients[id.slot]?.pendingHello {
            clients[id.slot]?.pendingHello = nil
            welcome(id, nick: pending.nick, version: pending.version, into: &actions)
        } else if let current = clients[id.slot]?.nick, ChatName.nickKey(current) != record.key {
            rename(id, from: current, to: record.name, at: now, into: &actions)
        }
        actions.append(.send(.loggedIn(account: record.name), to: id))
        loggedInAsMember(id, at: now, into: &actions)
    }

    private mutating func failLogin(
        _ id: ClientID, handshake: Bool, _ code: ErrorCode, _ reason: String, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        if handshake {
            disconnect(id, Disconnection(code: code, frameType: .login, reason: reason), at: now, into: &actions)
        } else {
            refuse(.login, code, reason, to: id, into: &actions)
        }
    }

    // MARK: Cluster mode

    /// Asks Redis to count a password guess of `id` against `key` (and `id`'s address) and read
    /// the account, for `purpose`; `id` waits for the answer.
    private mutating func askGuess(key: String, from id: ClientID, for purpose: AccountDirectory.Purpose) {
        let address = Self.throttleKey(of: address(of: id))
        accounts.waiting[id] = accounts.ask(.guess(key: key, address: address), for: purpose)
    }

    /// Gives back a guess of `key` from `address`: to the windows here, or to the cluster's.
    private mutating func giveBackGuess(key: String, address: String) {
        let addressKey = Self.throttleKey(of: address)
        if isClustered {
            _ = accounts.ask(.giveBack(key: key, address: addressKey), for: .quiet)
        } else {
            accounts.guesses.giveBack(Self.guessSubject(account: key), from: addressKey)
        }
    }

    /// Why a guess counted in the cluster goes no further — Redis's refusal, an account that does
    /// not exist, a full window — as a code and reason; nil when it was admitted.
    private func guessProblem(_ answer: AccountAnswer, key: String) -> (code: ErrorCode, reason: String)? {
        switch answer {
        case .guessed(.success(.admitted)):
            return nil
        case .guessed(.success(.noAccount)):
            return (.authenticationFailed, Self.wrongPasswordReason(key))
        case .guessed(.success(.throttled(let account, let wait))):
            return (.throttled, Self.guessRefusalReason(account ? .subject(wait: wait) : .address(wait: wait)))
        case .guessed(.failure(let error)):
            return (.unavailable, "cannot check the password now: \(error); try again")
        default:
            return (.internal, "no answer from the cluster")
        }
    }

    private mutating func loginGuessed(
        _ id: ClientID, key: String, password: String, handshake: Bool, _ answer: AccountAnswer, at now: ServerTime,
        into actions: inout [ChatAction]
    ) {
        let record: AccountRecord?
        switch answer {
        case .guessed(.success(.admitted(let found))):
            record = found
            accounts.clusterNames[key] = found.name
        case .guessed(.success(.noAccount)):
            // Counted as any guess is (`ClusterAccounts.guessScript`), and checked against the
            // pool's dummy hash: no account answers as a wrong password does, after as long.
            record = nil
        default:
            if case .guessed(.success(.throttled(let account, let wait))) = answer {
                reportLoginFailure(id, key: key, .throttled(account: account, waitMilliseconds: wait))
            }
            let problem = guessProblem(answer, key: key) ?? (.internal, "")
            failLogin(id, handshake: handshake, problem.code, problem.reason, at: now, into: &actions)
            return
        }
        let address = address(of: id)
        askHashing(
            .verify(password: password, stored: record?.passwordHash),
            for: .clusterLogin(id, record, key: key, address: address, handshake: handshake), from: id)
    }

    private mutating func clusterLoginVerified(
        _ id: ClientID, record: AccountRecord?, key: String, address: String, handshake: Bool, _ answer: AccountAnswer, at now: ServerTime,
        into actions: inout [ChatAction]
    ) {
        switch answer {
        case .busy:
            giveBackGuess(key: key, address: address)
            failLogin(id, handshake: handshake, .busy, Self.busyReason, at: now, into: &actions)
        case .hashing(.verified(true, let rehashed)):
            guard var record else { break }
            giveBackGuess(key: key, address: address)
            if let rehashed {
                record.passwordHash = rehashed
                _ = accounts.ask(.save(record), for: .quiet)
            }
            clusterCompleteLogin(id, record: record, handshake: handshake, at: now, into: &actions)
            return
        default:
            break
        }
        if !answer.isBusy {
            reportLoginFailure(id, key: key, record == nil ? .noAccount : .wrongPassword)
            failLogin(id, handshake: handshake, .authenticationFailed, Self.wrongPasswordReason(key), at: now, into: &actions)
        }
    }

    /// `completeLogin` on a node: a local holder of the nick is ghosted here; the nick is then
    /// claimed in the cluster as its owner's, which ghosts a holder on another node
    /// (`clusterGhost`), and `loggedIn` follows the claim (`clusterNickClaimed`).
    private mutating func clusterCompleteLogin(
        _ id: ClientID, record: AccountRecord, handshake: Bool, at now: ServerTime, into actions: inout [ChatAction]
    ) {
        guard logIn(id, to: record, at: now, into: &actions) else { return }
        if handshake, let pending = clients[id.slot]?.pendingHello {
            clients[id.slot]?.pendingHello = nil
            clusterClaim(pending.nick, for: id, version: pending.version, as: .ghost, at: now, into: &actions)
        } else if let current = clients[id.slot]?.nick, ChatName.nickKey(current) != record.key {
            clusterChangeNick(of: id, from: current, to: record.name, as: .ghost, at: now, into: &actions)
        } else {
            actions.append(.send(.loggedIn(account: record.name), to: id))
            clusterLoggedInAsMember(id)
            return
        }
        // Claiming (not refused at once for want of Redis): `loggedIn` follows the claim.
        if cluster.awaiting[id] != nil { cluster.loggingIn[id] = record.name }
    }

    private mutating func changeGuessed(
        _ id: ClientID, key: String, password: String, newPassword: String?, _ answer: AccountAnswer, into actions: inout [ChatAction]
    ) {
        let request: FrameType = newPassword == nil ? .dropAccount : .changePassword
        guard case .guessed(.success(.admitted(let record))) = answer else {
            if case .guessed(.success(.noAccount)) = answer {
                clients[id.slot]?.account = nil
                refuse(request, .notLoggedIn, "the account \(key) no longer exists", to: id, into: &actions)
                return
            }
            let problem = guessProblem(answer, key: key) ?? (.internal, "")
            refuse(request, problem.code, problem.reason, to: id, into: &actions)
            return
        }
        accounts.clusterNames[key] = record.name
        let verify = AccountWork.Job.verify(password: password, stored: record.passwordHash)
        if let newPassword {
            askHashing(verify, for: .changeVerified(id, key: key, newPassword: newPassword), from: id)
        } else {
            askHashing(verify, for: .dropVerified(id, key: key), from: id)
        }
    }

    private mutating func registerCreated(
        _ id: ClientID, record: AccountRecord, _ result: Result<AccountCreation, AccountStoreError>, at now: ServerTime,
        into actions: inout [ChatAction]
    ) {
        switch result {
        case .success(.created):
            accounts.clusterNames[record.key] = record.name
            clients[id.slot]?.account = record.key
            actions.append(.send(.registered(account: record.name), to: id))
            // As on a server on its own: registering logs in, a banned account ends the session,
            // and a room's ban of it kicks.
            if !endIfServerBanned(id, nick: nil, request: .register, at: now, into: &actions) { clusterLoggedInAsMember(id) }
        case .success(.exists):
            refuse(.register, .accountExists, "\(record.name) is already registered", to: id, into: &actions)
        case .success(.full):
            let limit = limits.accounts.maxAccounts
            refuse(.register, .tooManyAccounts, "the cluster holds as many accounts as it allows (\(limit))", to: id, into: &actions)
        case .failure(let error):
            refuse(.register, .storageFailed, "the account was not stored: \(error)", to: id, into: &actions)
        }
    }

    // MARK: Reserved nicks

    /// Why `id` may not take `nick` — an account it is not logged in as — or nil when it may.
    /// A node keeps no records, but a client of its own logged in to the nick's account shows
    /// it is registered (Redis's claim decides every other case: `clusterNickReserved`).
    ///
    /// A nick listed in `--admin-account` is reserved whether or not its account exists yet:
    /// otherwise a guest could hold it, pass for the operator, and register it to become one.
    /// The reason is the same as for any registered nick, so it tells nobody which is which.
    func reservation(of nick: String, for id: ClientID) -> String? {
        let key = ChatName.nickKey(nick)
        let heldByOwner = isClustered && nicks[key].flatMap { clients[$0.slot]?.account } == key
        let reserved = accounts.records[key] != nil || heldByOwner || limits.accounts.adminAccounts.contains(key)
        guard reserved, clients[id.slot]?.account != key else { return nil }
        return "\(nick) is a registered nick; log in to its account to use it"
    }

    /// A `hello` for the reserved `nick`: a version 3 client may prove it owns it with the `login`
    /// it sends right behind the `hello` (the handshake waits for it); any other is refused.
    /// Returns true when the hello was handled here.
    mutating func helloForReservedNick(
        _ nick: String, version: UInt16, from id: ClientID, at now: ServerTime, into actions: inout [ChatAction]
    ) -> Bool {
        guard let reason = reservation(of: nick, for: id) else { return false }
        guard version >= 3 else {
            disconnect(id, Disconnection(code: .nickReserved, frameType: .hello, reason: reason), at: now, into: &actions)
            return true
        }
        clients[id.slot]?.pendingHello = (nick, version, now.uptimeMillis)
        // Its next frame, the login, is decoded with version 3's types.
        clients[id.slot]?.version = min(version, WireProtocol.version)
        return true
    }

    /// No login came within `AccountSettings.loginWait` of a `hello` for the reserved `nick`: the
    /// client is a guest (a version 3 client that wants the nick sends its login with the hello).
    mutating func loginNeverCame(_ id: ClientID, nick: String, at now: ServerTime, into actions: inout [ChatAction]) {
        let reason = "\(nick) is a registered nick; log in to its account to use it (send login with hello)"
        disconnect(id, Disconnection(code: .nickReserved, frameType: .hello, reason: reason), at: now, into: &actions)
    }

    /// The frame after a `hello` for a reserved nick: it must be the login to that account.
    mutating func pendingHelloFrame(_ frame: Frame, from id: ClientID, at now: ServerTime, into actions: inout [ChatAction]) {
        // Called only while the hello waits for its login; a client gone or past it has nothing to do.
        guard let pending = clients[id.slot]?.pendingHello else { return }
        guard case .login(let account, let password) = frame, ChatName.nickKey(account) == ChatName.nickKey(pending.nick) else {
            let reason = "\(pending.nick) is a registered nick; send login for it right after hello, or choose another nick"
            disconnect(id, Disconnection(code: .nickReserved, frameType: .hello, reason: reason), at: now, into: &actions)
            return
        }
        if let problem = passwordProblem([password], from: id) {
            disconnect(id, Disconnection(code: problem.code, frameType: .login, reason: problem.reason), at: now, into: &actions)
            return
        }
        login(id, account: account, password: password, handshake: true, at: now, into: &actions)
    }

    // MARK: Room keys

    /// Why a room key from `id` for the room `name` would not be compared now (`GuessWindows`,
    /// under the limits of passwords: a key is guessed like a password, and from an address in
    /// the same window, so a guesser cannot switch from passwords to keys for more tries), or nil.
    func keyGuessRefusal(for id: ClientID, room name: String, at now: ServerTime) -> GuessWindows.Refusal? {
        let address = Self.throttleKey(of: address(of: id))
        return accounts.guesses.refusal(at: Self.guessSubject(room: name), from: address, limits: guessLimits, now: now.uptimeMillis)
    }

    /// Counts a wrong key for the room `name` from `id`'s address, in the room's windows and the
    /// address's. (A key is compared at once on a server on its own, so it is counted once known
    /// wrong; `admitKeyGuess` counts one that a cluster compares later.)
    mutating func countWrongKey(from id: ClientID, room name: String, at now: ServerTime) {
        let address = Self.throttleKey(of: address(of: id))
        var limits = guessLimits
        (limits.perAddress, limits.perSubject, limits.perSubjectFromAddress) = (.max, .max, .max)
        _ = accounts.guesses.admit(Self.guessSubject(room: name), from: address, limits: limits, now: now.uptimeMillis)
    }

    /// Cluster mode: counts a key for the room `name` from `id` before Redis compares it (so
    /// joins in flight at once cannot slip past the windows), or refuses it.
    mutating func admitKeyGuess(from id: ClientID, room name: String, at now: ServerTime) -> GuessWindows.Refusal? {
        let address = Self.throttleKey(of: address(of: id))
        return accounts.guesses.admit(Self.guessSubject(room: name), from: address, limits: guessLimits, now: now.uptimeMillis)
    }

    /// Cluster mode: gives back a key `admitKeyGuess` counted that was not wrong.
    mutating func giveBackKeyGuess(from id: ClientID, room name: String) {
        guard let address = clients[id.slot]?.address else { return }
        accounts.guesses.giveBack(Self.guessSubject(room: name), from: Self.throttleKey(of: address))
    }

    // MARK: Windows

    /// How long until `window` has room for another attempt under `limit`, or nil if it has now.
    /// A limit of 0 allows nothing (a whole window's wait), as Redis's scripts read it.
    static func wait(_ window: AttemptWindow?, limit: Int, window length: UInt64, now: UInt64) -> UInt64? {
        guard let window, now &- window.start < length else { return limit <= 0 ? length : nil }
        guard window.count >= limit else { return nil }
        return length - (now &- window.start)
    }

    /// Counts one attempt in `window` (opening a new one when the last has ended), unless it is
    /// full: then returns how long until it has room and counts nothing.
    static func spend(_ window: inout AttemptWindow?, limit: Int, window length: UInt64, now: UInt64) -> UInt64? {
        if let wait = wait(window, limit: limit, window: length, now: now) { return wait }
        if let open = window, now &- open.start < length {
            window!.count = open.count + 1
        } else {
            window = AttemptWindow(start: now, count: 1)
        }
        return nil
    }

    /// Gives one attempt back to `window` (a success, or a request the pool could not take).
    static func giveBack(_ window: inout AttemptWindow?) {
        if let open = window, open.count > 0 { window!.count = open.count - 1 }
    }

    /// Forgets windows that have ended, so the dictionaries hold only current ones.
    mutating func forgetEndedAccountWindows(at now: ServerTime) {
        let login = limits.accounts.loginWindow.milliseconds
        let registration = limits.accounts.registrationWindow.milliseconds
        let time = now.uptimeMillis
        accounts.guesses.forgetEnded(window: login, now: time)
        if let window = accounts.serverRegistrations, time &- window.start >= registration { accounts.serverRegistrations = nil }
        if !accounts.registrations.isEmpty {
            accounts.registrations = accounts.registrations.filter { time &- $0.value.start < registration }
        }
    }
}

extension AccountWork.Job {
    /// Whether the hashing pool does it (`hash`, `verify`); everything else is the store's, or
    /// in cluster mode Redis's.
    public var isHashing: Bool {
        switch self {
        case .hash, .verify: true
        default: false
        }
    }
}

extension AccountAnswer {
    var isBusy: Bool {
        if case .busy = self { return true }
        return false
    }

    var storeResult: Result<Void, AccountStoreError> {
        if case .stored(let result) = self { return result }
        return .failure(AccountStoreError("no answer from the store"))
    }
}
