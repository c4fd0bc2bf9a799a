/// Protocol-wide constants of the chat wire format (docs/PROTOCOL.md, "Limits").
public enum WireProtocol {
    /// The highest protocol version this module speaks; sent in `hello` and confirmed in `welcome`.
    public static let version: UInt16 = 4

    /// The lowest protocol version this module still speaks: version 1, whose frames versions 2
    /// to 4 keep byte for byte.
    public static let minimumVersion: UInt16 = 1

    /// The largest frame (type byte + fields, the value of the length prefix) any peer may send.
    ///
    /// Clients decode server frames with this limit; a server announces its own, smaller,
    /// limit for client frames in `welcome`.
    public static let maxFrameSize = 1 << 20

    /// The limit a server applies to client frames unless configured otherwise: 16 KiB.
    public static let defaultServerMaxFrameSize = 16 << 10

    /// The longest a varint may be: ten bytes carry 64 bits.
    public static let maxVarintLength = 10

    /// The longest password a server accepts, in bytes (docs/PROTOCOL.md, `register`): a
    /// password is hashed whole, so a long one costs more to hash and to hold in the queue; 256
    /// bytes is far beyond any passphrase.
    public static let maxPasswordBytes = 256
}
