import SocketCore
import SocketTLS

/// Everything that shapes one load-test run, with the bounds that keep a run small enough to stop
/// by itself: loopback targets only, at most ten minutes of sending, at most 100 million messages.
public struct LoadTestConfiguration: Sendable {
    /// How senders pace themselves.
    public enum Pacing: Sendable, Hashable {
        /// Open loop: `messagesPerSecond` in all, spread evenly over the senders. Each message is
        /// stamped with the time it was *scheduled*, so a server that stalls shows up as latency
        /// instead of slowing the load down (no coordinated omission).
        case fixedRate(messagesPerSecond: Int)
        /// Closed loop: each sender keeps `window` messages in flight (sent, echo not yet back).
        case maximum(window: Int)
    }

    /// The hosts a load test may target: this machine only.
    public static let loopbackHosts: Set<String> = ["127.0.0.1", "::1", "localhost"]
    /// The longest sending phase allowed, in seconds.
    public static let maximumDuration = 600.0
    /// The most messages one run may send.
    public static let maximumMessages = 100_000_000
    /// The most clients one run may open (each is a descriptor here and one in the server).
    public static let maximumClients = 20_000

    /// The servers the clients connect to: client `i` goes to `servers[i % servers.count]`, so
    /// with several nodes of a cluster every room has members on each and delivery accounting
    /// covers cross-node delivery. Hosts must be in `loopbackHosts`.
    public var servers: [ServerAddress] = [ServerAddress(host: "127.0.0.1", port: 7000)]
    /// How many clients connect.
    public var clients: Int = 50
    /// How many rooms they are spread over (client `i` joins room `i % rooms`).
    public var rooms: Int = 1
    /// How many of the clients send (the first `senders`, so they spread over the rooms too).
    public var senders: Int = 5
    /// How the senders pace themselves.
    public var pacing: Pacing = .maximum(window: 64)
    /// Stop sending after this many messages in all.
    public var messages: Int = 1_000_000
    /// Stop sending after this many seconds, whatever was sent.
    public var duration: Double = 10
    /// New connections opened per second while ramping up.
    public var connectRate: Int = 2_000
    /// Bytes of text per message (the payload is padded up to it; 0: as short as it gets).
    public var messageSize: Int = 0
    /// Serial I/O queues the clients are spread over.
    public var threads: Int = 2
    /// Seconds allowed for all clients to connect and join.
    public var connectTimeout: Double = 60
    /// After sending stops, how long to wait for deliveries without progress before counting the
    /// missing ones as lost.
    public var drainTimeout: Double = 5
    /// The server processes (every node of a cluster, and Redis if wanted), to report their CPU
    /// time and memory, summed, from /proc; empty: not reported.
    public var serverPIDs: [Int32] = []
    /// Prefix of the nicks and rooms, so that runs against one server do not mix.
    public var namePrefix: String = "lt"
    /// Speak TLS with this client context (one for every client: each handshake verifies the
    /// server's certificate against the client's server address), or nil for plain text.
    public var tls: TLSContext?

    /// A configuration with every default.
    public init() {}

    /// Everything wrong with this configuration, one sentence each; empty when it can run.
    public var problems: [String] {
        var problems: [String] = []
        if servers.isEmpty { problems.append("at least one server is needed") }
        if servers.contains(where: { !Self.loopbackHosts.contains($0.host) }) {
            problems.append("host must be one of \(Self.loopbackHosts.sorted().joined(separator: ", ")): a load test only targets this machine")
        }
        if servers.contains(where: { !(1...65_535).contains($0.port) }) { problems.append("port must be 1...65535") }
        if !(1...Self.maximumClients).contains(clients) { problems.append("clients must be 1...\(Self.maximumClients)") }
        if !(1...max(1, clients)).contains(rooms) { problems.append("rooms must be 1...clients") }
        if !(1...max(1, clients)).contains(senders) { problems.append("senders must be 1...clients") }
        switch pacing {
        case .fixedRate(let rate) where !(1...10_000_000).contains(rate):
            problems.append("rate must be 1...10000000 messages per second")
        case .maximum(let window) where !(1...4096).contains(window):
            problems.append("window must be 1...4096")
        default:
            break
        }
        if !(1...Self.maximumMessages).contains(messages) { problems.append("messages must be 1...\(Self.maximumMessages)") }
        if !(duration > 0 && duration <= Self.maximumDuration) { problems.append("duration must be more than 0 and at most \(Int(Self.maximumDuration)) seconds") }
        if !(1...100_000).contains(connectRate) { problems.append("connect rate must be 1...100000 per second") }
        if !(0...8_000).contains(messageSize) { problems.append("message size must be 0...8000 bytes") }
        if !(1...16).contains(threads) { problems.append("threads must be 1...16") }
        if !(connectTimeout > 0 && connectTimeout <= 600) { problems.append("connect timeout must be more than 0 and at most 600 seconds") }
        if !(drainTimeout > 0 && drainTimeout <= 60) { problems.append("drain timeout must be more than 0 and at most 60 seconds") }
        if namePrefix.isEmpty || namePrefix.utf8.count > 8
            || !namePrefix.utf8.allSatisfy({ (UInt8(ascii: "a")...UInt8(ascii: "z")).contains($0) }) {
            problems.append("name prefix must be 1 to 8 lowercase letters")
        }
        return problems
    }

    /// The room client `index` joins.
    func room(ofClient index: Int) -> Int { index % rooms }

    /// The server client `index` connects to.
    func server(ofClient index: Int) -> ServerAddress { servers[index % servers.count] }

    /// How many messages sender `ordinal` may send: `messages` split as evenly as it goes.
    func quota(ofSender ordinal: Int) -> UInt64 {
        UInt64(messages / senders + (ordinal < messages % senders ? 1 : 0))
    }
}
