import RedisClient
import RedisProtocol

/// Cluster-wide nicks and the liveness of nodes, in Redis (docs/CLUSTER.md).
///
/// A node proves it is alive with `heartbeat()`, which sets `chat:node:<id>` to expire after
/// `ttl` and records the beat in the sorted set `chat:nodes`. A nick is `chat:nick:<nick>`, holding
/// its owner's id; claiming runs a script that takes it only if nobody holds it or its holder's
/// node key has expired, so two nodes racing for one nick cannot both win — Redis runs one script
/// after the other. `reap` frees the nicks of nodes whose heartbeat stopped, in one script, so of
/// all the nodes that reap at once exactly one learns of each dead node and announces its quits.
///
/// The owner drives it: it calls `heartbeat()` every `ttl / 5` or so, and `reap` now and then.
/// Threading: confined to the queue of its connection.
public final class NickRegistry: @unchecked Sendable {
    /// This node's id, unique in the cluster.
    public let nodeID: String
    /// How long this node's claims outlive its last heartbeat.
    public let ttlMilliseconds: Int
    /// Whether the node was registered when the registry was opened (its first heartbeat): false
    /// for a new node, and for one reopening after it was reaped.
    public private(set) var wasRegisteredAtOpen = false
    private let commands: RedisConnection
    private let scripts: Scripts

    private struct Scripts {
        var heartbeat: [UInt8]
        var claim: [UInt8]
        var release: [UInt8]
        var reap: [UInt8]
    }

    /// ARGV: node id, ttl in ms. Returns `{Redis's time in ms, 1 if the node's registration was
    /// alive before this beat else 0}`: alive means listed in `chat:nodes` (not reaped) and its key
    /// not expired — once the key expires, other nodes' clients may claim the node's nicks.
    static let heartbeatScript = """
        local now = redis.call('TIME')
        local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
        local known = redis.call('ZSCORE', 'chat:nodes', ARGV[1])
        local alive = redis.call('EXISTS', 'chat:node:' .. ARGV[1])
        redis.call('SET', 'chat:node:' .. ARGV[1], ms, 'PX', ARGV[2])
        redis.call('ZADD', 'chat:nodes', ms, ARGV[1])
        if known and alive == 1 then return {ms, 1} end
        return {ms, 0}
        """

    /// What a heartbeat found.
    public struct Heartbeat: Equatable, Sendable {
        /// Redis's time, in milliseconds since the Unix epoch.
        public var time: UInt64
        /// Whether the node's registration was alive before this beat. False for a node's first
        /// beat — and for a later one if its key expired (a stall or a partition longer than the
        /// ttl: another node's client may hold one of its nicks now), another node reaped it, or
        /// Redis lost its data. Its clients must go then.
        public var wasRegistered: Bool
    }

    /// KEYS: the nick's key. ARGV: node id, nick, and whether the claimer logged in to the nick's
    /// account and takes the nick back from whoever holds it ('ghost') or not (''). Returns 1
    /// when the node holds the nick now, 0 when a live node holds it, 2 when it is a registered
    /// nick (`chat:account:<nick>`, ClusterAccounts) and the claimer a guest: the reservation is
    /// checked in the same step as the claim, so a registration on one node holds on every node
    /// from the next claim. A ghost claim tells the holder's node, on its direct channel,
    /// `ghost <nick>`, which disconnects its client there.
    static let claimScript = """
        if ARGV[3] == '' and redis.call('EXISTS', 'chat:account:' .. ARGV[2]) == 1 then return 2 end
        local owner = redis.call('GET', KEYS[1])
        if owner and owner ~= ARGV[1] and redis.call('EXISTS', 'chat:node:' .. owner) == 1 then
            if ARGV[3] ~= 'ghost' then return 0 end
            redis.call('PUBLISH', 'chat:node:' .. owner .. ':direct', 'ghost ' .. ARGV[2])
        end
        if owner and owner ~= ARGV[1] then
            redis.call('SREM', 'chat:node:' .. owner .. ':nicks', ARGV[2])
        end
        redis.call('SET', KEYS[1], ARGV[1])
        redis.call('SADD', 'chat:node:' .. ARGV[1] .. ':nicks', ARGV[2])
        return 1
        """

    /// KEYS: the nick's key. ARGV: node id, nick. Returns 1 when the node held it and let it go
    /// (with its away message).
    static let releaseScript = """
        redis.call('SREM', 'chat:node:' .. ARGV[1] .. ':nicks', ARGV[2])
        if redis.call('GET', KEYS[1]) == ARGV[1] then
            redis.call('DEL', KEYS[1])
            redis.call('DEL', 'chat:away:' .. ARGV[2])
            return 1
        end
        return 0
        """

    /// ARGV: how long without a heartbeat makes a node dead, in ms. Frees the nicks of every dead
    /// node (one whose heartbeat is that old and whose key has expired) and forgets the node.
    /// Returns a flat list: node id, its nick count, its nicks, the next node id, ….
    static let reapScript = """
        local now = redis.call('TIME')
        local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
        local result = {}
        for _, node in ipairs(redis.call('ZRANGEBYSCORE', 'chat:nodes', '-inf', ms - tonumber(ARGV[1]))) do
            if redis.call('EXISTS', 'chat:node:' .. node) == 0 then
                local set = 'chat:node:' .. node .. ':nicks'
                local freed = {}
                for _, nick in ipairs(redis.call('SMEMBERS', set)) do
                    if redis.call('GET', 'chat:nick:' .. nick) == node then
                        redis.call('DEL', 'chat:nick:' .. nick)
                        redis.call('DEL', 'chat:away:' .. nick)
                        table.insert(freed, nick)
                    end
                end
                redis.call('DEL', set)
                redis.call('ZREM', 'chat:nodes', node)
                table.insert(result, node)
                table.insert(result, #freed)
                for _, nick in ipairs(freed) do table.insert(result, nick) end
            end
        end
        return result
        """

    private init(nodeID: String, ttlMilliseconds: Int, commands: RedisConnection, scripts: Scripts) {
        self.nodeID = nodeID
        self.ttlMilliseconds = ttlMilliseconds
        self.commands = commands
        self.scripts = scripts
    }

    /// Loads the scripts, registers the node with a first heartbeat, and returns the registry.
    public static func open(
        nodeID: String, ttlMilliseconds: Int = 5_000, commands: RedisConnection,
        completion: @escaping (Result<NickRegistry, ClusterError>) -> Void
    ) {
        let sources = [heartbeatScript, claimScript, releaseScript, reapScript]
        var hashes: [[UInt8]] = []
        var failed = false
        for source in sources {
            commands.send("SCRIPT", "LOAD", source) { reply in
                guard !failed else { return }
                guard case .success(.bulkString(let sha?)) = reply else {
                    failed = true
                    completion(.failure(ClusterError(reply, expecting: "a script hash")))
                    return
                }
                hashes.append(sha)
                guard hashes.count == sources.count else { return }
                let scripts = Scripts(heartbeat: hashes[0], claim: hashes[1], release: hashes[2], reap: hashes[3])
                let registry = NickRegistry(nodeID: nodeID, ttlMilliseconds: ttlMilliseconds, commands: commands, scripts: scripts)
                registry.heartbeat { result in
                    completion(result.map { beat in
                        registry.wasRegisteredAtOpen = beat.wasRegistered
                        return registry
                    })
                }
            }
        }
    }

    /// Renews this node's life for another `ttl` (registering it if it was not); `completion`
    /// gets Redis's time and whether the node was registered before.
    public func heartbeat(completion: @escaping (Result<Heartbeat, ClusterError>) -> Void = { _ in }) {
        run(scripts.heartbeat, keys: [], arguments: [nodeID, String(ttlMilliseconds)]) { reply in
            completion(reply.flatMap { value in
                guard case .array(let parts?) = value, parts.count == 2, let time = parts[0].integer.flatMap({ UInt64(exactly: $0) }),
                    let known = parts[1].integer
                else { return .failure(ClusterError(.success(value), expecting: "{time, registered}")) }
                return .success(Heartbeat(time: time, wasRegistered: known == 1))
            })
        }
    }

    /// Takes replies already waiting on the registry's connection (a heartbeat's among them) now:
    /// before its owner judges a heartbeat unanswered.
    public func readWaitingReplies() { commands.readWaiting() }

    /// Who claims a nick, as far as its account goes.
    public enum Claimant: String, Sendable {
        /// Logged in to no account of that nick: a registered nick is refused.
        case guest = ""
        /// Logged in to the nick's account and taking it back: a live holder is ghosted.
        case ghost
    }

    /// What a claim came to.
    public enum Claim: Sendable, Equatable {
        /// The nick is this node's now.
        case claimed
        /// A live node holds it.
        case taken
        /// It is a registered nick and the claimant a guest.
        case reserved
    }

    /// Claims `nick` for this node as `claimant`.
    public func claim(_ nick: String, as claimant: Claimant = .guest, completion: @escaping (Result<Claim, ClusterError>) -> Void) {
        run(scripts.claim, keys: ["chat:nick:\(nick)"], arguments: [nodeID, nick, claimant.rawValue]) { reply in
            completion(reply.flatMap { value in
                switch value.integer {
                case 1: .success(.claimed)
                case 0: .success(.taken)
                case 2: .success(.reserved)
                default: .failure(.malformedReply("expected 0, 1 or 2, got \(value)"))
                }
            })
        }
    }

    /// Lets `nick` go if this node holds it; true when it did.
    public func release(_ nick: String, completion: @escaping (Result<Bool, ClusterError>) -> Void = { _ in }) {
        run(scripts.release, keys: ["chat:nick:\(nick)"], arguments: [nodeID, nick]) { reply in
            completion(reply.flatMap(Self.flag))
        }
    }

    /// Frees the nicks of nodes silent for `deadAfterMilliseconds` whose key has expired, and
    /// returns them by node: each dead node is reported to exactly one reaper.
    public func reap(deadAfterMilliseconds: Int, completion: @escaping (Result<[String: [String]], ClusterError>) -> Void) {
        run(scripts.reap, keys: [], arguments: [String(deadAfterMilliseconds)]) { reply in
            completion(reply.flatMap { value in
                guard case .array(let items?) = value else { return .failure(ClusterError(.success(value), expecting: "a list")) }
                var dead: [String: [String]] = [:]
                var index = 0
                while index + 1 < items.count {
                    guard let node = items[index].text, let count = items[index + 1].integer, count >= 0,
                        index + 2 + Int(count) <= items.count
                    else { return .failure(.malformedReply("reap returned \(items)")) }
                    dead[node] = items[(index + 2)..<(index + 2 + Int(count))].compactMap(\.text)
                    index += 2 + Int(count)
                }
                return .success(dead)
            })
        }
    }

    private func run(
        _ sha: [UInt8], keys: [String], arguments: [String], completion: @escaping (Result<RESPValue, ClusterError>) -> Void
    ) {
        let command = [Array("EVALSHA".utf8), sha, Array(String(keys.count).utf8)] + (keys + arguments).map { Array($0.utf8) }
        commands.send(command) { reply in
            switch reply {
            case .success(.error(let text)): completion(.failure(.refused(text)))
            case .success(let value): completion(.success(value))
            case .failure(let error): completion(.failure(.redis(error)))
            }
        }
    }

    private static func flag(_ value: RESPValue) -> Result<Bool, ClusterError> {
        switch value.integer {
        case 1: .success(true)
        case 0: .success(false)
        default: .failure(.malformedReply("expected 0 or 1, got \(value)"))
        }
    }
}

extension ClusterError {
    /// The error for a reply that is not what was expected: Redis's own error text, the
    /// connection's failure, or the shape that came instead.
    init(_ reply: RedisConnection.Reply, expecting what: String) {
        switch reply {
        case .success(.error(let text)): self = .refused(text)
        case .success(let value): self = .malformedReply("expected \(what), got \(value)")
        case .failure(let error): self = .redis(error)
        }
    }
}
