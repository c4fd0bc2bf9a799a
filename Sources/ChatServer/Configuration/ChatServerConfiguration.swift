import ChatAccounts
import ChatCluster
import ChatCore
import ChatProtocol
import RedisProtocol
import SocketTLS

/// Everything a `ChatServer` can be told: where to listen, and every limit it enforces.
///
/// The defaults are the documented defaults of `chat-server`'s flags; docs/SERVER.md explains
/// each choice.
@dynamicMemberLookup
public struct ChatServerConfiguration: Sendable {
    /// The address to listen on.
    public var host = "127.0.0.1"
    /// The port to listen on; 0 lets the OS choose (read it back from `ChatServer.port`).
    public var port = 7000
    /// TLS on `port`: a server configuration (certificate chain and key files), or nil for plain
    /// text. The files are read at start-up and again by `ChatServer.reloadTLS()`.
    public var tls: TLSConfiguration?
    /// With `tls`, a second, plain-text port on the same host (0: the OS chooses); nil for none.
    public var plainPort: Int?

    /// What a TLS connection costs beyond a plain one, at most: OpenSSL's `SSL` object (about
    /// 15 KiB idle in the engine's measurement), its record buffer for a partial record (17 KiB),
    /// and the allocator's slack after handshakes (the real server grew 26–41 KiB per idle TLS
    /// connection more than per plain one after 2,000 concurrent handshakes: BENCHMARKS.md).
    /// Ciphertext waiting to be sent is counted with the output queues instead.
    public static let tlsConnectionBytes = 48 << 10

    /// Whether the server is a node of a cluster (`ChatServer` sets it from its cluster): the
    /// memory budget then reserves `clusterLinkBytes` for what waits in its Redis connections.
    public var isClusterNode = false

    /// What a cluster node's Redis link may hold, at most: every command that may wait for
    /// Redis's reply (`ClusterNode.maxCommandsInFlight`, each at most a frame and its command's
    /// words), and on each of its two connections the largest reply the node asks for, as its
    /// parser's limits allow it (`ClusterReplies.connectionBytes`: parsed and still buffered).
    public var clusterLinkBytes: Int {
        let parser = ClusterNode.parserLimits(maxFrameSize: limits.maxFrameSize)
        return ClusterNode.maxCommandsInFlight * (limits.maxFrameSize + 512) + 2 * ClusterReplies.connectionBytes(parser)
    }

    /// The most memory the server may use, in bytes: `MemoryBudget` divides it among connections,
    /// history and output queues, and the server keeps each part within its share.
    public var maxMemory = 512 << 20
    /// How long a client's outbound queue may stay above `MemoryBudget.lagThreshold` before it is
    /// disconnected as a slow consumer. A client that reads catches up long before; a burst that
    /// others may legally send never gets a reading client disconnected.
    public var slowConsumerTimeout: Duration = .seconds(10)
    /// On shutdown, how long to wait for queued bytes to reach the clients.
    public var drainTimeout: Duration = .seconds(5)
    /// The limits the chat enforces; each is also reachable by its own name here
    /// (`configuration.maxClients`).
    public var limits = ChatLimits()

    /// The largest `maxFrameSize` allowed (`ChatLimits.maxFrameSizeCeiling`).
    public static let maxFrameSizeCeiling = ChatLimits.maxFrameSizeCeiling

    /// The defaults, listening on 127.0.0.1:7000.
    public init() {}

    /// A limit of `limits`, by its name.
    public subscript<Value>(dynamicMember keyPath: WritableKeyPath<ChatLimits, Value>) -> Value {
        get { limits[keyPath: keyPath] }
        set { limits[keyPath: keyPath] = newValue }
    }

    /// Turns off every rate limit (`ChatLimits.turnOffRateLimits()`).
    public mutating func turnOffRateLimits() { limits.turnOffRateLimits() }

    /// How `maxMemory` is divided for these limits.
    public var memoryBudget: MemoryBudget {
        MemoryBudget(
            total: maxMemory, maxClients: limits.maxClients, maxFrameSize: limits.maxFrameSize,
            extraPerConnection: tls == nil ? 0 : Self.tlsConnectionBytes, clusterLink: isClusterNode ? clusterLinkBytes : 0,
            accounts: limits.accounts.memoryReserve)
    }

    /// Returns a description of the first setting that cannot work, or nil if all can.
    public func problem() -> String? {
        if !(0...65_535).contains(port) { return "port must be 0...65535" }
        if let tls, !tls.isServer { return "the TLS configuration must be a server's (a certificate and a key)" }
        if let plainPort {
            if tls == nil { return "a plain-text port besides the main one needs TLS on the main one" }
            if !(0...65_535).contains(plainPort) { return "the plain-text port must be 0...65535" }
        }
        if let problem = limits.problem { return problem }
        if let problem = memoryBudget.problem { return problem }
        for (name, value) in [("drain timeout", drainTimeout), ("slow consumer timeout", slowConsumerTimeout)] where value <= .zero {
            return "the \(name) must be positive"
        }
        return nil
    }
}

extension AccountSettings {
    /// How passwords are hashed: Argon2id with `hashingPasses` and `hashingMemoryBytes`.
    public var hashing: PasswordHashing { PasswordHashing(passes: hashingPasses, memoryBytes: hashingMemoryBytes) }
}

extension ChatCore {
    /// An empty chat with the limits and memory budget of `configuration` (`init(limits:budget:…)`).
    public init(
        configuration: ChatServerConfiguration, log: RoomLogMode = .memory, epochs: EpochSource = .random()
    ) {
        self.init(limits: configuration.limits, budget: configuration.memoryBudget, log: log, epochs: epochs)
    }
}
