import RedisClient
import RedisProtocol

/// The cluster's accounts, in Redis, so that every node sees every registration at once
/// (docs/CLUSTER.md, "Accounts"): a hash per account (`chat:account:{key}`: name, hash,
/// created), the set of keys (`chat:accounts`, whose size the cap counts), and the windows of
/// login and registration throttling as expiring counters (`chat:guesses:account:{key}`,
/// `chat:guesses:account:{key}:from:{address}`, `chat:guesses:address:{address}`,
/// `chat:registrations:address:{address}`, `chat:registrations:server`).
///
/// Nodes keep no copy: a node reads an account when a password is checked against it, in the
/// same script that counts the guess, so a registration, a new password or a drop on one node
/// holds on every other from its next request, with nothing to invalidate. Whether a nick is
/// reserved is decided by the nick claim script (`NickRegistry.claimScript`), which looks at the
/// account's key itself.
///
/// Threading: confined to the queue of its connection.
public struct ClusterAccounts: Sendable {
    private let commands: RedisConnection

    /// Accounts read and written through `commands`.
    public init(commands: RedisConnection) {
        self.commands = commands
    }

    /// One account as Redis keeps it.
    public struct Record: Sendable, Equatable {
        /// The nick as registered.
        public var name: String
        /// The Argon2id hash string.
        public var passwordHash: String
        /// When it was registered, in milliseconds since the Unix epoch.
        public var created: UInt64
    }

    /// KEYS: the account's hash, the set of accounts. ARGV: name, key, password hash, created,
    /// the cap. Creates the account unless it exists (0) or the cap is reached (-1); 1 when made.
    /// One script, so two nodes registering the last place (or one name) at once cannot both win.
    static let registerScript = """
        if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
        if redis.call('SCARD', KEYS[2]) >= tonumber(ARGV[5]) then return -1 end
        redis.call('HSET', KEYS[1], 'name', ARGV[1], 'hash', ARGV[3], 'created', ARGV[4])
        redis.call('SADD', KEYS[2], ARGV[2])
        return 1
        """

    /// What a registration came to.
    public enum Registration: Sendable, Equatable {
        /// The account exists now.
        case registered
        /// An account of that key existed already.
        case exists
        /// The cluster holds as many accounts as the cap allows.
        case full
    }

    /// Registers the account `key` called `name` with `passwordHash`, unless it exists or the
    /// cluster holds `maxAccounts` accounts.
    public func register(
        name: String, key: String, passwordHash: String, created: UInt64, maxAccounts: Int,
        completion: @escaping (Result<Registration, ClusterError>) -> Void
    ) {
        eval(
            Self.registerScript, keys: [Self.accountKey(key), "chat:accounts"],
            arguments: [name, key, passwordHash, String(created), String(maxAccounts)]
        ) { reply in
            switch reply.map(\.integer) {
            case .success(1): completion(.success(.registered))
            case .success(0): completion(.success(.exists))
            case .success(-1): completion(.success(.full))
            case .success: completion(.failure(.malformedReply("register returned \(reply)")))
            case .failure(let error): completion(.failure(error))
            }
        }
    }

    /// KEYS: the account's hash. ARGV: the new password hash. Replaces the hash of an account that
    /// still exists (1); 0 when it was dropped meanwhile.
    static let setHashScript = """
        if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
        redis.call('HSET', KEYS[1], 'hash', ARGV[1])
        return 1
        """

    /// Replaces the password hash of the account `key`; true when it still existed.
    public func setPasswordHash(key: String, _ passwordHash: String, completion: @escaping (Result<Bool, ClusterError>) -> Void) {
        eval(Self.setHashScript, keys: [Self.accountKey(key)], arguments: [passwordHash]) { reply in
            completion(reply.flatMap { value in
                value.integer.map { .success($0 == 1) } ?? .failure(.malformedReply("set hash returned \(value)"))
            })
        }
    }

    /// Drops the account `key`: its record and its place under the cap, in one script, so the
    /// cap's count and the records never disagree. The rooms it founded stop being registered
    /// (their roles by account are forgotten), and the roles it was given elsewhere are forgotten,
    /// so that whoever registers the nick again inherits neither (ModerationCheck.swift keeps the
    /// two lists); each room changed counts a new version (`RoomKeys.version`).
    public func drop(key: String, completion: @escaping (Result<Void, ClusterError>) -> Void) {
        eval(Self.dropScript, keys: [Self.accountKey(key), "chat:accounts"], arguments: [key]) { reply in
            completion(reply.map { _ in () })
        }
    }

    /// KEYS: the account's hash, the set of accounts. ARGV: the account's key.
    static let dropScript = """
        redis.call('DEL', KEYS[1])
        redis.call('SREM', KEYS[2], ARGV[1])
        local founded = 'chat:account:' .. ARGV[1] .. ':rooms'
        for _, room in ipairs(redis.call('SMEMBERS', founded)) do
            local modes = 'chat:{' .. room .. '}:modes'
            if redis.call('HGET', modes, 'founder') == ARGV[1] then
                redis.call('HDEL', modes, 'founder')
                redis.call('DEL', 'chat:{' .. room .. '}:accountroles')
                redis.call('INCR', 'chat:{' .. room .. '}:version')
            end
            redis.call('SREM', 'chat:registered', room)
        end
        local given = 'chat:account:' .. ARGV[1] .. ':roles'
        for _, room in ipairs(redis.call('SMEMBERS', given)) do
            if redis.call('HDEL', 'chat:{' .. room .. '}:accountroles', ARGV[1]) == 1 then
                redis.call('INCR', 'chat:{' .. room .. '}:version')
            end
        end
        redis.call('DEL', founded, given)
        return 1
        """

    /// KEYS: the account's hash, its guess counter, its counter for guesses from the address, the
    /// address's guess counter. ARGV: the account's limit, the limit of one account from one
    /// address, the address's limit, the window in ms.
    ///
    /// The rule of guessing, as a server on its own keeps it (`GuessWindows` in ChatServer, which
    /// says why): a guess is refused — counted nowhere — when the address's counter is at its
    /// limit ({2, ms until it ends}), when the address's counter for this account is ({1, ms}),
    /// or when the account's counter is at its limit and the address has a guess at the account
    /// counted now ({1, ms}): an address that has not guessed wrong is let through past the
    /// account's limit. Otherwise the guess is counted in all three, and the account read:
    /// {0, name, hash, created}, or {3} when there is none — counted all the same, so a name
    /// without an account has the budget of one with. `INCR` and `PEXPIRE` in one script: a
    /// window never outlives its expiry, whichever node counts in it, so the limits hold across
    /// nodes.
    static let guessScript = """
        \(windowFunctions)
        local function count(key) open(key, ARGV[4]) end
        local function level(key) return tonumber(redis.call('GET', key) or '0') end
        if level(KEYS[4]) >= tonumber(ARGV[3]) then return {2, wait(KEYS[4])} end
        local fromAddress = level(KEYS[3])
        if fromAddress >= tonumber(ARGV[2]) then return {1, wait(KEYS[3])} end
        if fromAddress > 0 and level(KEYS[2]) >= tonumber(ARGV[1]) then return {1, wait(KEYS[2])} end
        count(KEYS[2])
        count(KEYS[3])
        count(KEYS[4])
        local record = redis.call('HMGET', KEYS[1], 'name', 'hash', 'created')
        if not record[1] then return {3} end
        return {0, record[1], record[2], record[3]}
        """

    /// What counting a guess found.
    public enum Guess: Sendable, Equatable {
        /// Counted: check the password against `record`.
        case admitted(Record)
        /// No such account (counted as a guess at one is).
        case noAccount
        /// The account's window is full for `waitMilliseconds` more; nothing counted.
        case accountThrottled(waitMilliseconds: UInt64)
        /// The address's window is full for `waitMilliseconds` more; nothing counted.
        case addressThrottled(waitMilliseconds: UInt64)
    }

    /// Counts a password guess against the account `key` from `address` (a throttle key), within
    /// `perAccount` guesses per `windowMilliseconds` from addresses that guessed at it already,
    /// `perAccountFromAddress` from this address and `perAddress` from it in all (`guessScript`),
    /// and reads the account.
    public func guess(
        key: String, address: String, perAccount: Int, perAccountFromAddress: Int, perAddress: Int, windowMilliseconds: UInt64,
        completion: @escaping (Result<Guess, ClusterError>) -> Void
    ) {
        eval(
            Self.guessScript,
            keys: [Self.accountKey(key), Self.accountGuesses(key), Self.accountGuesses(key, from: address), Self.addressGuesses(address)],
            arguments: [String(perAccount), String(perAccountFromAddress), String(perAddress), String(windowMilliseconds)]
        ) { reply in
            completion(reply.flatMap { value in
                guard case .array(let parts?) = value, let kind = parts.first?.integer else {
                    return .failure(.malformedReply("guess returned \(value)"))
                }
                let wait = parts.count > 1 ? UInt64(max(0, parts[1].integer ?? 0)) : 0
                switch kind {
                case 1: return .success(.accountThrottled(waitMilliseconds: wait))
                case 2: return .success(.addressThrottled(waitMilliseconds: wait))
                case 3: return .success(.noAccount)
                case 0:
                    guard parts.count == 4, let name = parts[1].text, let hash = parts[2].text, let created = parts[3].integer else {
                        return .failure(.malformedReply("guess returned \(value)"))
                    }
                    return .success(.admitted(Record(name: name, passwordHash: hash, created: UInt64(max(0, created)))))
                default:
                    return .failure(.malformedReply("guess returned \(value)"))
                }
            })
        }
    }

    /// KEYS: the guess counters. Gives one guess back to each that still counts one (a right
    /// password, or one the node could not check), so the owner does not use up its own guesses;
    /// a counter left at 0 is deleted, as if its window had never opened (as `GuessWindows` does).
    static let giveBackScript = """
        for _, key in ipairs(KEYS) do
            if tonumber(redis.call('GET', key) or '0') > 0 and redis.call('DECR', key) == 0 then redis.call('DEL', key) end
        end
        return 1
        """

    /// Gives back a guess counted against the account `key` and `address`.
    public func giveBack(key: String, address: String) {
        let keys = [Self.accountGuesses(key), Self.accountGuesses(key, from: address), Self.addressGuesses(address)]
        eval(Self.giveBackScript, keys: keys, arguments: []) { _ in }
    }

    /// KEYS: the address's registration counter, the cluster's. ARGV: the address's limit, the
    /// cluster's, the window in ms. Counts the registration in both and returns {0} when both
    /// have room; otherwise counts nothing and returns {1 (the address's) or 2 (the cluster's),
    /// ms until that window ends}.
    static let registrationScript = """
        \(windowFunctions)
        local function full(key, limit)
            return tonumber(redis.call('GET', key) or '0') >= tonumber(limit)
        end
        if full(KEYS[1], ARGV[1]) then return {1, wait(KEYS[1])} end
        if full(KEYS[2], ARGV[2]) then return {2, wait(KEYS[2])} end
        for _, key in ipairs(KEYS) do open(key, ARGV[3]) end
        return {0}
        """

    /// A window of the scripts above: a counter that `open` counts one in, giving a new one an
    /// expiry `length` ms on, and `wait`, the ms until it ends. Redis keeps a key through the
    /// millisecond its expiry names (it expires once the time is past it), while a server on its
    /// own (`ChatCore.wait`) has ended a window `length` ms after it opened: the expiry is set a
    /// millisecond short, so a window ends at the same instant in every mode.
    private static let windowFunctions = """
        local function open(key, length)
            if redis.call('INCR', key) == 1 then redis.call('PEXPIRE', key, math.max(1, tonumber(length) - 1)) end
        end
        local function wait(key) return math.max(0, redis.call('PTTL', key)) + 1 end
        """

    /// What counting a registration found.
    public enum RegistrationCount: Sendable, Equatable {
        /// Counted in the address's window and the cluster's.
        case counted
        /// The address's window (`cluster` false) or the cluster's is full for `waitMilliseconds`
        /// more; nothing was counted.
        case full(cluster: Bool, waitMilliseconds: UInt64)
    }

    /// Counts a registration from `address` (a throttle key), within `perAddress` per
    /// `windowMilliseconds` from it and `perCluster` from every address through every node.
    public func countRegistration(
        address: String, perAddress: Int, perCluster: Int, windowMilliseconds: UInt64,
        completion: @escaping (Result<RegistrationCount, ClusterError>) -> Void
    ) {
        eval(
            Self.registrationScript, keys: [Self.addressRegistrations(address), Self.clusterRegistrations],
            arguments: [String(perAddress), String(perCluster), String(windowMilliseconds)]
        ) { reply in
            completion(reply.flatMap { value in
                guard case .array(let parts?) = value, let kind = parts.first?.integer else {
                    return .failure(.malformedReply("registration count returned \(value)"))
                }
                let wait = parts.count > 1 ? UInt64(max(0, parts[1].integer ?? 0)) : 0
                switch kind {
                case 0: return .success(.counted)
                case 1, 2: return .success(.full(cluster: kind == 2, waitMilliseconds: wait))
                default: return .failure(.malformedReply("registration count returned \(value)"))
                }
            })
        }
    }

    /// Gives back a registration counted against `address` and the cluster.
    public func giveBackRegistration(address: String) {
        eval(Self.giveBackScript, keys: [Self.addressRegistrations(address), Self.clusterRegistrations], arguments: []) { _ in }
    }

    /// KEYS: none. Returns the name of every account (`chat:accounts`' keys, each account's
    /// `name`): at most `--max-accounts` short strings, for the operator's `chat-server account list`.
    static let namesScript = """
        local names = {}
        for _, key in ipairs(redis.call('SMEMBERS', 'chat:accounts')) do
            table.insert(names, redis.call('HGET', 'chat:account:' .. key, 'name') or key)
        end
        return names
        """

    /// Every account's name.
    public func names(completion: @escaping (Result<[String], ClusterError>) -> Void) {
        eval(Self.namesScript, keys: [], arguments: []) { reply in
            completion(reply.flatMap { value in
                guard case .array(let parts?) = value else { return .failure(.malformedReply("names returned \(value)")) }
                return .success(parts.compactMap(\.text))
            })
        }
    }

    /// Which of the account keys `keys` have no account (a node's check of its `--admin-account`
    /// list at start).
    public func missing(_ keys: [String], completion: @escaping (Result<[String], ClusterError>) -> Void) {
        guard !keys.isEmpty else { return completion(.success([])) }
        eval(Self.missingScript, keys: keys.map(Self.accountKey), arguments: keys) { reply in
            completion(reply.flatMap { value in
                guard case .array(let parts?) = value else { return .failure(.malformedReply("missing returned \(value)")) }
                return .success(parts.compactMap(\.text))
            })
        }
    }

    /// KEYS: accounts' hashes. ARGV: their keys, in the same order. Returns the keys whose hash
    /// does not exist.
    static let missingScript = """
        local missing = {}
        for index, key in ipairs(KEYS) do
            if redis.call('EXISTS', key) == 0 then table.insert(missing, ARGV[index]) end
        end
        return missing
        """

    static func accountKey(_ key: String) -> String { "chat:account:\(key)" }
    static func accountGuesses(_ key: String) -> String { "chat:guesses:account:\(key)" }
    static func accountGuesses(_ key: String, from address: String) -> String { "chat:guesses:account:\(key):from:\(address)" }
    static let clusterRegistrations = "chat:registrations:server"
    static func addressGuesses(_ address: String) -> String { "chat:guesses:address:\(address)" }
    static func addressRegistrations(_ address: String) -> String { "chat:registrations:address:\(address)" }

    private func eval(_ script: String, keys: [String], arguments: [String], completion: @escaping (Result<RESPValue, ClusterError>) -> Void) {
        let command = [Array("EVAL".utf8), Array(script.utf8), Array(String(keys.count).utf8)] + (keys + arguments).map { Array($0.utf8) }
        commands.send(command) { reply in
            switch reply {
            case .success(.error(let text)): completion(.failure(.refused(text)))
            case .success(let value): completion(.success(value))
            case .failure(let error): completion(.failure(.redis(error)))
            }
        }
    }
}
