import ChatProtocol

/// The limits of accounts (docs/SERVER.md, "Accounts"; docs/SECURITY.md has the threat rows).
///
/// Guesses are counted in fixed windows, as Redis counts them with `INCR` and an expiry: a
/// window opens with the first attempt and lasts `loginWindow`. An address may check at most
/// `loginAttemptsPerAddress` passwords in it, at most `loginAttemptsPerAccountFromAddress` of
/// one account; an account is checked at most `loginAttemptsPerAccount` times in all, except
/// from an address that has not guessed wrong at it, which is always let try — so an owner is
/// not locked out by guesses from elsewhere (`GuessWindows` has the rule, docs/SECURITY.md the
/// trade-off). A guess past a window is answered `throttled` without being hashed. An attempt
/// is counted before its hash is checked — fifty guesses in flight at once cannot all slip under
/// the limit — and given back when it succeeds, so a right password never uses up the owner's
/// own attempts. Room keys are guessed under the same limits, per room.
public struct AccountSettings: Sendable, Equatable {
    /// The most accounts the server keeps (the disk, and the memory their records take, are bounded).
    public var maxAccounts = 10_000
    /// Password checks of one account per `loginWindow` from all addresses together, past which
    /// only an address that has not guessed wrong at it is still checked.
    public var loginAttemptsPerAccount = 20
    /// Password checks of one account per `loginWindow` from one address (an IPv6 address by its
    /// /64): the budget an address sees for any name, with an account or not.
    public var loginAttemptsPerAccountFromAddress = 5
    /// Password checks per address (an IPv6 address by its /64) per `loginWindow`, all accounts
    /// (and room keys) together.
    public var loginAttemptsPerAddress = 20
    /// The window the login attempts are counted in.
    public var loginWindow: Duration = .seconds(60)
    /// Registrations per address (IPv6: /64) per `registrationWindow`.
    public var registrationsPerAddress = 3
    /// Registrations per `registrationWindow` from all addresses together (in a cluster, through
    /// every node): many addresses cannot fill `maxAccounts` in seconds.
    public var registrationsPerServer = 60
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
    /// Argon2id's passes (`t`) per password hash. With `hashingMemoryBytes`, OWASP's first
    /// recommendation for Argon2id (2023), which `PasswordHashing.standard` is made of: 12 ms
    /// of one core on this project's 2-core test machine.
    public var hashingPasses = 2
    /// Argon2id's memory (`m`) per password hash, in bytes, held while the hash runs.
    public var hashingMemoryBytes = 19 << 20
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
        hashingWorkers * hashingMemoryBytes + hashingQueue * Self.queuedJobBytes + maxAccounts * Self.recordBytes
    }

    /// A description of the first setting that cannot work, or nil.
    public var problem: String? {
        if maxAccounts < 0 { return "the account limit must be 0 or more" }
        if loginAttemptsPerAccount < 1 || loginAttemptsPerAccountFromAddress < 1 || loginAttemptsPerAddress < 1 {
            return "the login attempts must be at least 1"
        }
        if registrationsPerAddress < 0 || registrationsPerServer < 0 { return "the registrations per address and per server must be 0 or more" }
        if loginWindow <= .zero || registrationWindow <= .zero { return "the account windows must be positive" }
        if !(1...8).contains(hashingWorkers) { return "the hashing workers must be 1...8" }
        if hashingQueue < 0 { return "the hashing queue must be 0 or more" }
        // Argon2id's (libsodium's) least: one pass and 8 KiB.
        if hashingPasses < 1 || hashingMemoryBytes < 8 << 10 { return "password hashing needs at least 1 pass and 8 KiB of memory" }
        if let bad = adminAccounts.first(where: { !ChatName.isValidNick($0) }) { return "admin account \(bad) is not a valid account name" }
        return nil
    }
}
