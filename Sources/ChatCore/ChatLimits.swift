import ChatProtocol

/// The limits the chat rules enforce: connections, rates, rooms, history, timeouts, the server
/// password and accounts. `ChatServerConfiguration` carries them (and forwards their names), with
/// what only the I/O layer reads: addresses, TLS, the memory total, drain and slow consumers.
///
/// The defaults are the documented defaults of `chat-server`'s flags; docs/SERVER.md explains
/// each choice.
public struct ChatLimits: Sendable, Equatable {
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

    /// The defaults.
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

    /// A description of the first limit that cannot work, or nil if all can.
    public var problem: String? {
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
        if passwordAttempts < 1 { return "the password attempts must be at least 1" }
        if passwordDelay < .zero { return "the password delay must be 0 or more" }
        for (name, value) in [
            ("handshake timeout", handshakeTimeout), ("idle ping interval", idlePingInterval),
            ("idle timeout", idleTimeout), ("linger timeout", lingerTimeout), ("password lockout", passwordLockout),
        ] where value <= .zero {
            return "the \(name) must be positive"
        }
        if idleTimeout <= idlePingInterval { return "the idle timeout must be longer than the idle ping interval" }
        return nil
    }
}
