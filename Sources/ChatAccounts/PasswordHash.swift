import CSodium
import ChatCore
import ChatProtocol

/// Argon2id password hashes, through libsodium (`crypto_pwhash_argon2id_*`).
///
/// A hash is stored as libsodium's encoded string — `$argon2id$v=19$m=19456,t=2,p=1$salt$hash` —
/// which carries its own salt and the parameters it was made with, so the parameters can be raised
/// later: an older hash still verifies, and `needsRehash` says when to store a new one (at the next
/// successful login). Verification is libsodium's, in constant time.
///
/// Hashing is slow and memory-hard on purpose (milliseconds and `memoryBytes` each): never call
/// these on the event loop; `PasswordHashingPool` runs them on its workers.
public struct PasswordHashing: Sendable, Equatable {
    /// Passes over memory (Argon2id's `t`).
    public var passes: Int
    /// Memory per hash, in bytes (Argon2id's `m`, which libsodium takes in bytes).
    public var memoryBytes: Int

    /// OWASP's first recommendation for Argon2id (2023), `AccountSettings`' defaults: `m` = 19 MiB, `t` = 2, one lane — 12 ms
    /// of one core on this project's 2-core test machine, and 19 MiB while it runs.
    public static let standard = PasswordHashing(passes: AccountSettings().hashingPasses, memoryBytes: AccountSettings().hashingMemoryBytes)

    /// The longest password accepted, in bytes: the protocol's `WireProtocol.maxPasswordBytes`.
    public static let maxPasswordBytes = WireProtocol.maxPasswordBytes

    /// Hashing with `passes` and `memoryBytes`, which must be at least libsodium's minimums.
    public init(passes: Int, memoryBytes: Int) {
        precondition(passes >= Int(crypto_pwhash_argon2id_OPSLIMIT_MIN), "Argon2id needs at least one pass")
        precondition(memoryBytes >= Int(crypto_pwhash_argon2id_MEMLIMIT_MIN), "Argon2id needs at least 8 KiB")
        self.passes = passes
        self.memoryBytes = memoryBytes
    }

    /// `password` hashed with a fresh random salt, as the encoded string to store; nil if libsodium
    /// could not allocate the memory the parameters need.
    public func hash(_ password: String) -> String? {
        Self.initialize
        var password = Self.bytes(of: password)
        defer { Self.wipe(&password) }
        var out = [CChar](repeating: 0, count: Int(crypto_pwhash_argon2id_STRBYTES))
        let result = password.withUnsafeBufferPointer { bytes in
            bytes.withMemoryRebound(to: CChar.self) { characters in
                crypto_pwhash_argon2id_str(&out, characters.baseAddress!, UInt64(characters.count - 1), UInt64(passes), memoryBytes)
            }
        }
        guard result == 0 else { return nil }
        return String(decoding: out.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }

    /// Whether `password` is the one `stored` was made from, by libsodium's constant-time check;
    /// false for a string that is not an Argon2id hash.
    public static func verify(_ password: String, against stored: String) -> Bool {
        initialize
        var password = bytes(of: password)
        defer { wipe(&password) }
        return password.withUnsafeBufferPointer { bytes in
            bytes.withMemoryRebound(to: CChar.self) { characters in
                crypto_pwhash_argon2id_str_verify(stored, characters.baseAddress!, UInt64(characters.count - 1)) == 0
            }
        }
    }

    /// Whether `stored` was made with other parameters than these (or is no Argon2id hash), so
    /// that a login that verified it should store a new hash.
    public func needsRehash(_ stored: String) -> Bool {
        crypto_pwhash_argon2id_str_needs_rehash(stored, UInt64(passes), memoryBytes) != 0
    }

    /// 32 random bytes from libsodium's generator, as hexadecimal text: a password nobody knows.
    public static func randomPassword() -> String {
        initialize
        var bytes = [UInt8](repeating: 0, count: 32)
        bytes.withUnsafeMutableBytes { randombytes_buf($0.baseAddress!, $0.count) }
        return bytes.map { String($0, radix: 16) }.joined()
    }

    /// `password`'s UTF-8 and a 0 after it: never empty, so its buffer always has an address
    /// (libsodium reads only the length it is given).
    private static func bytes(of password: String) -> [UInt8] {
        var bytes = Array(password.utf8)
        bytes.append(0)
        return bytes
    }

    /// Overwrites `bytes` in a way the optimizer keeps, so a password does not linger in freed memory.
    private static func wipe(_ bytes: inout [UInt8]) {
        bytes.withUnsafeMutableBytes { sodium_memzero($0.baseAddress, $0.count) }
    }

    /// libsodium's one-time set-up (thread-safe, and idempotent in libsodium too).
    private static let initialize: Void = {
        precondition(sodium_init() >= 0, "libsodium failed to initialise")
    }()
}
