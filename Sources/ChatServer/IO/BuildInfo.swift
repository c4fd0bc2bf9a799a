import ChatProtocol

/// Which chat-server this is: what `chat-server --version` prints, the `chat_build_info` metric's
/// labels and the status page's first line say.
public enum BuildInfo {
    /// The release, by semantic versioning: the minor number grows with each set of changes an
    /// operator should read about (docs/OPERATIONS.md), the major one with a change of what a
    /// data directory or a config file may hold.
    public static let version = "0.2.0"
    /// The newest protocol version the server speaks (docs/PROTOCOL.md).
    public static let protocolVersion = WireProtocol.version
}
