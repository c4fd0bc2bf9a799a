import ChatProtocol

/// Everything a `ChatServer` can be told: where to listen, and every limit it enforces.
///
/// The defaults are the documented defaults of `chat-server`'s flags; docs/SERVER.md explains
/// each choice.
public struct ChatServerConfiguration: Sendable {
    /// The address to listen on.
    public var host = "127.0.0.1"
    /// The port to listen on; 0 lets the OS choose (read it back from `ChatServer.port`).
    public var port = 7000

    /// The most connections open at once, handshaking ones included.
    public var maxClients = 10_000
    /// The most connections open at once from one IP address. High by default because load
    /// tests open thousands of connections from 127.0.0.1.
    public var maxClientsPerAddress = 1_000
    /// The largest frame accepted from a client (announced in `welcome`).
    public var maxFrameSize = WireProtocol.defaultServerMaxFrameSize
    /// The most rooms one client may be in.
    public var maxRoomsPerClient = 50

    /// Requests a client may send per second, on average; 0 turns rate limiting off.
    public var messageRate: Double = 50
    /// Requests a client may send in a burst above the average rate.
    public var messageBurst = 100
    /// Requests refused in a row (for exceeding the rate) after which the client is disconnected.
    public var rateAbuseLimit = 100

    /// Messages and actions kept per room and replayed to a joiner.
    public var historySize = 100
    /// How long a connection may take to complete the handshake.
    public var handshakeTimeout: Duration = .seconds(5)
    /// How long a client may stay silent before the server pings it.
    public var idlePingInterval: Duration = .seconds(30)
    /// How long a client may stay silent (answering no ping) before it is disconnected.
    public var idleTimeout: Duration = .seconds(90)
    /// The most bytes waiting to be sent to one client; a client that lets more pile up is
    /// disconnected as a slow consumer.
    public var outboundQueueLimit = 1 << 20
    /// On shutdown, how long to wait for queued bytes to reach the clients.
    public var drainTimeout: Duration = .seconds(5)
    /// How long a connection being closed (after a fatal error or goodbye) may wait for the peer to
    /// read what is left and close its side, before the server closes it anyway.
    public var lingerTimeout: Duration = .seconds(2)

    /// The password clients must present in `hello`; nil for none.
    public var password: String?
    /// The message of the day sent in `welcome`.
    public var motd = ""

    /// The largest `maxFrameSize` allowed: a delivery adds up to this many bytes (seq, time, sender)
    /// to what a client sent, and every frame must stay within the protocol's 1 MiB.
    public static let maxFrameSizeCeiling = WireProtocol.maxFrameSize - 1024

    /// The defaults, listening on 127.0.0.1:7000.
    public init() {}

    /// Returns a description of the first setting that cannot work, or nil if all can.
    public func problem() -> String? {
        if !(0...65_535).contains(port) { return "port must be 0...65535" }
        if maxClients < 1 { return "the client limit must be at least 1" }
        if maxClientsPerAddress < 1 { return "the per-address limit must be at least 1" }
        if !(64...Self.maxFrameSizeCeiling).contains(maxFrameSize) {
            return "the frame size limit must be 64...\(Self.maxFrameSizeCeiling)"
        }
        if maxRoomsPerClient < 1 { return "the room limit must be at least 1" }
        if messageRate < 0 || !messageRate.isFinite { return "the message rate must be 0 or more" }
        if messageBurst < 1 { return "the burst must be at least 1" }
        if rateAbuseLimit < 1 { return "the abuse limit must be at least 1" }
        if historySize < 0 { return "the history size must be 0 or more" }
        if outboundQueueLimit < 1024 { return "the outbound queue limit must be at least 1024 bytes" }
        for (name, value) in [
            ("handshake timeout", handshakeTimeout), ("idle ping interval", idlePingInterval),
            ("idle timeout", idleTimeout), ("drain timeout", drainTimeout), ("linger timeout", lingerTimeout),
        ] where value <= .zero {
            return "the \(name) must be positive"
        }
        if idleTimeout <= idlePingInterval { return "the idle timeout must be longer than the idle ping interval" }
        return nil
    }
}

extension Duration {
    /// The duration in whole milliseconds, rounded down.
    var milliseconds: UInt64 {
        let (seconds, attoseconds) = components
        return UInt64(max(0, seconds)) * 1000 + UInt64(max(0, attoseconds)) / 1_000_000_000_000_000
    }
}
