/// A conversation the user can switch to: a room, or a direct-message conversation with one
/// nick (a "query", as IRC clients call it).
public enum ChatWindow: Hashable, Sendable {
    /// A room, by its wire name (`general`).
    case room(String)
    /// Direct messages with `nick`.
    case query(String)
    /// Every window's lines in one stream (the `merged_window` setting), to read, not to talk in.
    case merged

    /// How the window is named on screen: `#general`, the nick, or `(all)`.
    public var title: String {
        switch self {
        case .room(let name): "#" + name
        case .query(let nick): nick
        case .merged: "(all)"
        }
    }
}

/// What happened in a window while the user was looking at another one.
public struct WindowActivity: Equatable, Sendable {
    /// Messages and actions not seen yet.
    public var unread = 0
    /// Whether one of them mentions the user's nick (every direct message counts).
    public var mentioned = false

    /// No activity.
    public init(unread: Int = 0, mentioned: Bool = false) {
        self.unread = unread
        self.mentioned = mentioned
    }
}

/// The rate limits a server applies to a client (version 2's `limits` frame).
public struct RateLimits: Equatable, Sendable {
    /// Requests per second (0: none).
    public var requestsPerSecond: Double
    /// Requests allowed at once above the rate.
    public var requestBurst: Int
    /// Bytes per second (0: none).
    public var bytesPerSecond: Double
    /// Bytes allowed at once above the rate.
    public var byteBurst: Int

    /// Limits as the server states them.
    public init(requestsPerSecond: Double, requestBurst: Int, bytesPerSecond: Double, byteBurst: Int) {
        self.requestsPerSecond = requestsPerSecond
        self.requestBurst = requestBurst
        self.bytesPerSecond = bytesPerSecond
        self.byteBurst = byteBurst
    }

    /// What a client assumes of a version 1 server, which does not say: modest, so a paste
    /// stays within what any reasonable server allows.
    public static let assumed = RateLimits(requestsPerSecond: 5, requestBurst: 10, bytesPerSecond: 16_384, byteBurst: 65_536)
}
