import ChatCluster
import ChatCore
import ChatProtocol
import RedisProtocol
import SocketTLS

/// Everything a `ChatServer` can be told: where to listen, and every limit it enforces.
///
/// The defaults are the documented defaults of `chat-server`'s flags; docs/SERVER.md explains
/// each choice.
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
        let parser = ClusterNode.parserLimits(maxFrameSize: maxFrameSize)
        return ClusterNode.maxCommandsInFlight * (maxFrameSize + 512) + 2 * ClusterReplies.connectionBytes(parser)
    }

    /// The most connections open at once, handshaking ones included.
    public var maxClients = 10_000
    /// The most connections open at once from one IP address. High by default because load
    /// tests open thousands of connections from 127.0.0.1.
    public var maxClientsPerAddress = 1_000
    /// The largest frame accepted from a client (announced in `welcome`).
    public var maxFrameSize = WireProtocol.defaultServerMaxFrameSize
    /// The most rooms one client may be in.
    public var maxRoomsPerClient = 50

    /// Frames a client may send per second, on average; 0 turns this limit off. Every frame
    /// counts, pings included; only `goodbye` always gets through.
    public var messageRate: Double = 50
    /// Frames a client may send in a burst above the average rate.
    public var messageBurst = 100
    /// Bytes a client may send per second, on average, counting whole frames; 0 turns this limit
    /// off.
    public var byteRate = 64 << 10
    /// Bytes a client may send in a burst above the average byte rate; at least `maxFrameSize`,
    /// or a frame of the largest size could never pass.
    public var byteBurst = 1 << 20
    /// Frames all connections from one address may send per second together, on average; 0
    /// turns this limit off. Without it, an address's connections would multiply its rate.
    public var addressMessageRate: Double = 500
    /// Frames all connections from one address may send in a burst above their average rate.
    public var addressMessageBurst = 1_000
    /// Bytes all connections from one address may send per second together, on average; 0
    /// turns this limit off.
    public var addressByteRate = 1 << 20
    /// Bytes all connections from one address may send in a burst above their average byte rate;
    /// at least `maxFrameSize`.
    public var addressByteBurst = 4 << 20
    /// Bytes per second, on average, that the frames of all connections from one address may
    /// cost the server to deliver, every recipient counted (a line to a room of 1,000 costs its
    /// size 1,000 times); 0 turns this limit off. Room fan-out is the one amplification left once
    /// reading is limited: this bounds the work one address can make the server do.
    public var addressFanoutRate = 32 << 20
    /// Delivery bytes all connections from one address may cause in a burst above their average.
    public var addressFanoutBurst = 64 << 20
    /// Connections one address may open per second, on average; more are refused with
    /// `tooManyConnectionsFromAddress`. 0 turns this limit off. A reconnect loop costs the server
    /// a session (and log lines) per turn; this bounds how many.
    public var addressConnectionRate: Double = 20
    /// Connections one address may open at once above its average rate: a whole office
    /// reconnecting after a restart.
    public var addressConnectionBurst = 200
    /// Frames refused in a row (for exceeding a rate) after which the client is disconnected.
    public var rateAbuseLimit = 100

    /// Messages, actions and topic changes kept per room and replayed to a joiner; the memory
    /// budget may keep fewer.
    public var historySize = 100
    /// How long a connection may take to complete the handshake.
    public var handshakeTimeout: Duration = .seconds(5)
    /// How long a client may stay silent before the server pings it.
    public var idlePingInterval: Duration = .seconds(30)
    /// How long a client may stay silent (answering no ping) before it is disconnected.
    public var idleTimeout: Duration = .seconds(90)
    /// The most memory the server may use, in bytes: `MemoryBudget` divides it among connections,
    /// history and output queues, and the server keeps each part within its share.
    public var maxMemory = 512 << 20
    /// How long a client's outbound queue may stay above `MemoryBudget.lagThreshold` before it is
    /// disconnected as a slow consumer. A client that reads catches up long before; a burst that
    /// others may legally send never gets a reading client disconnected.
    public var slowConsumerTimeout: Duration = .seconds(10)
    /// On shutdown, how long to wait for queued bytes to reach the clients.
    public var drainTimeout: Duration = .seconds(5)
    /// How long a connection being closed (after a fatal error or goodbye) may wait for the peer to
    /// read what is left and close its side, before the server closes it anyway.
    public var lingerTimeout: Duration = .seconds(2)

    /// The password clients must present in `hello`; nil for none.
    public var password: String?
    /// Wrong passwords from one address after which that address is refused for
    /// `passwordLockout`, right password or not.
    public var passwordAttempts = 5
    /// How long an address that guessed wrong `passwordAttempts` times is refused.
    public var passwordLockout: Duration = .seconds(60)
    /// How long the answer to a wrong password is held back, so guesses cannot come in quick
    /// succession even before the lockout.
    public var passwordDelay: Duration = .seconds(1)
    /// The message of the day sent in `welcome`.
    public var motd = ""
    /// Accounts: their cap, throttles and password hashing (AccountSettings.swift).
    public var accounts = AccountSettings()

    /// The largest `maxFrameSize` allowed: a delivery adds up to this many bytes (seq, time, sender)
    /// to what a client sent, and every frame must stay within the protocol's 1 MiB.
    public static let maxFrameSizeCeiling = WireProtocol.maxFrameSize - 1024

    /// The defaults, listening on 127.0.0.1:7000.
    public init() {}

    /// Turns off every rate limit, per connection and per address: for load tests, whose clients
    /// all come from one address as fast as they can.
    public mutating func turnOffRateLimits() {
        messageRate = 0
        byteRate = 0
        addressMessageRate = 0
        addressByteRate = 0
        addressFanoutRate = 0
        addressConnectionRate = 0
    }

    /// How `maxMemory` is divided for these limits.
    public var memoryBudget: MemoryBudget {
        MemoryBudget(
            total: maxMemory, maxClients: maxClients, maxFrameSize: maxFrameSize,
            extraPerConnection: tls == nil ? 0 : Self.tlsConnectionBytes, clusterLink: isClusterNode ? clusterLinkBytes : 0,
            accounts: accounts.memoryReserve)
    }

    /// Returns a description of the first setting that cannot work, or nil if all can.
    public func problem() -> String? {
        if !(0...65_535).contains(port) { return "port must be 0...65535" }
        if let tls, !tls.isServer { return "the TLS configuration must be a server's (a certificate and a key)" }
        if let plainPort {
            if tls == nil { return "a plain-text port besides the main one needs TLS on the main one" }
            if !(0...65_535).contains(plainPort) { return "the plain-text port must be 0...65535" }
        }
        if maxClients < 1 { return "the client limit must be at least 1" }
        if maxClientsPerAddress < 1 { return "the per-address limit must be at least 1" }
        if !(64...Self.maxFrameSizeCeiling).contains(maxFrameSize) {
            return "the frame size limit must be 64...\(Self.maxFrameSizeCeiling)"
        }
        if maxRoomsPerClient < 1 { return "the room limit must be at least 1" }
        if messageRate < 0 || !messageRate.isFinite { return "the message rate must be 0 or more" }
        if messageBurst < 1 { return "the burst must be at least 1" }
        if byteRate < 0 { return "the byte rate must be 0 or more" }
        if byteRate > 0, byteBurst < maxFrameSize {
            return "the byte burst (\(byteBurst)) must be at least the frame size limit (\(maxFrameSize)), or the largest frames could never pass"
        }
        if addressMessageRate < 0 || !addressMessageRate.isFinite { return "the address message rate must be 0 or more" }
        if addressMessageBurst < 1 { return "the address burst must be at least 1" }
        if addressByteRate < 0 { return "the address byte rate must be 0 or more" }
        if addressByteRate > 0, addressByteBurst < maxFrameSize {
            return "the address byte burst (\(addressByteBurst)) must be at least the frame size limit (\(maxFrameSize))"
        }
        if addressFanoutRate < 0 { return "the address fan-out rate must be 0 or more" }
        if addressFanoutRate > 0, addressFanoutBurst < maxFrameSize {
            return "the address fan-out burst (\(addressFanoutBurst)) must be at least the frame size limit (\(maxFrameSize))"
        }
        if addressConnectionRate < 0 || !addressConnectionRate.isFinite { return "the address connection rate must be 0 or more" }
        if addressConnectionBurst < 1 { return "the address connection burst must be at least 1" }
        if rateAbuseLimit < 1 { return "the abuse limit must be at least 1" }
        if historySize < 0 { return "the history size must be 0 or more" }
        if let problem = accounts.problem { return problem }
        if let problem = memoryBudget.problem { return problem }
        if passwordAttempts < 1 { return "the password attempts must be at least 1" }
        if passwordDelay < .zero { return "the password delay must be 0 or more" }
        for (name, value) in [
            ("handshake timeout", handshakeTimeout), ("idle ping interval", idlePingInterval),
            ("idle timeout", idleTimeout), ("drain timeout", drainTimeout), ("linger timeout", lingerTimeout),
            ("slow consumer timeout", slowConsumerTimeout), ("password lockout", passwordLockout),
        ] where value <= .zero {
            return "the \(name) must be positive"
        }
        if idleTimeout <= idlePingInterval { return "the idle timeout must be longer than the idle ping interval" }
        return nil
    }
}
