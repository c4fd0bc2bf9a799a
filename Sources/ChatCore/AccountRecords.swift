/// One registered account: a nick, reserved for whoever knows its password.
public struct AccountRecord: Sendable, Equatable {
    /// The nick as it was registered (case kept); the account's name.
    public var name: String
    /// The key the account is found by: the nick case-folded as nicks are (`ChatName.nickKey`).
    public var key: String
    /// The Argon2id hash, parameters and salt included (`PasswordHashing`).
    public var passwordHash: String
    /// When it was registered, in milliseconds since the Unix epoch.
    public var created: UInt64

    /// Describes an account.
    public init(name: String, key: String, passwordHash: String, created: UInt64) {
        self.name = name
        self.key = key
        self.passwordHash = passwordHash
        self.created = created
    }
}

/// Why a store could not keep a change.
public struct AccountStoreError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What went wrong, for the client's `storageFailed` reason and the log.
    public var message: String

    /// Wraps a message.
    public init(_ message: String) { self.message = message }

    /// The message.
    public var description: String { message }
}

/// What a password hashing job found: the answer the account rules take back from the hashing
/// pool (`PasswordHashingPool`).
public enum PasswordHashingOutcome: Sendable, Equatable {
    /// The new hash; nil if libsodium could not allocate its memory.
    case hashed(String?)
    /// Whether the password matched, and — when it did, with older parameters — its hash with
    /// the pool's parameters, to store instead.
    case verified(Bool, rehashed: String?)
    /// The job was queued, then gave its place to a smaller share (see `PasswordHashingPool`):
    /// nothing was computed. Answer it as a job refused at once (`busy`).
    case refused
}
