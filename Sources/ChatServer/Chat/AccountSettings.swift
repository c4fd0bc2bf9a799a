import ChatAccounts
import ChatProtocol

/// The limits of accounts (docs/SERVER.md, "Accounts"; docs/SECURITY.md has the threat rows).
///
/// Guesses are counted in fixed windows, as Redis counts them with `INCR` and an expiry: a
/// window opens with an account's (or an address's) first attempt and lasts `loginWindow`; within
/// it at most `loginAttemptsPerAccount` (`loginAttemptsPerAddress`) passwords are checked, and
/// every further attempt is answered `throttled` without being hashed. An attempt is counted
/// before its hash is checked — fifty guesses in flight at once cannot all slip under the limit —
/// and given back when it succeeds, so a right password never uses up the owner's own attempts.
public struct AccountSettings: Sendable, Equatable {
    /// The most accounts the server keeps (the disk, and the memory their records take, are bounded).
    public var maxAccounts = 10_000
    /// Password checks per account per `loginWindow`, from anywhere.
    public var loginAttemptsPerAccount = 5
    /// Password checks per address (an IPv6 address by its /64) per `loginWindow`.
    public var loginAttemptsPerAddress = 20
    /// The window the login attempts are counted in.
    public var loginWindow: Duration = .seconds(60)
    /// Registrations per address (IPv6: /64) per `registrationWindow`.
    public var registrationsPerAddress = 3
    /// The window registrations are counted in.
    public var registrationWindow: Duration = .seconds(3600)
    /// How long a version 3 `hello` for a reserved nick waits for the `login` that its client
    /// sends with it (in the same write); without one by then, it is refused `nickReserved`. A
    /// guest has no login to send, and must not wait for the whole handshake timeout.
    public var loginWait: Duration = .seconds(1)
    /// Whether a password may come over plain TCP from a non-loopback address.
    public var allowPlainPasswords = false
    /// Password hashes computed at once, off the event loop.
    public var hashingWorkers = 1
    /// Password checks that may wait for a worker; past them, requests are answered `busy`.
    public var hashingQueue = 32
    /// How passwords are hashed.
    public var hashing = PasswordHashing.standard
    /// The keys (`ChatName.nickKey`) of the accounts whose sessions are server operators
    /// (`--admin-account`; docs/SERVER.md, "Moderation").
    public var adminAccounts: Set<String> = []

    /// Makes the accounts `names` (any letter case) the server operators'.
    public mutating func setAdminAccounts(_ names: [String]) {
        adminAccounts = Set(names.map(ChatName.nickKey))
    }

    /// What one account's record costs in memory, about: its name twice, a 97-byte hash and the
    /// dictionary's slack.
    public static let recordBytes = 512
    /// What one queued hashing job costs: the job, its closure and a password of at most 256 bytes.
    public static let queuedJobBytes = 1 << 10

    /// The defaults.
    public init() {}

    /// What accounts may cost in memory at most: the hashing workers' Argon2id memory
    /// (`PasswordHashingPool.memoryReserve`), the queued jobs, and every record.
    public var memoryReserve: Int {
        hashingWorkers * hashing.memoryBytes + hashingQueue * Self.queuedJobBytes + maxAccounts * Self.recordBytes
    }

    /// A description of the first setting that cannot work, or nil.
    public var problem: String? {
        if maxAccounts < 0 { return "the account limit must be 0 or more" }
        if loginAttemptsPerAccount < 1 || loginAttemptsPerAddress < 1 { return "the login attempts must be at least 1" }
        if registrationsPerAddress < 0 { return "the registrations per address must be 0 or more" }
        if loginWindow <= .zero || registrationWindow <= .zero { return "the account windows must be positive" }
        if !(1...8).contains(hashingWorkers) { return "the hashing workers must be 1...8" }
        if hashingQueue < 0 { return "the hashing queue must be 0 or more" }
        if let bad = adminAccounts.first(where: { !ChatName.isValidNick($0) }) { return "admin account \(bad) is not a valid account name" }
        return nil
    }
}
