/// Namespace placeholder; replaced by the codec.
public enum ChatProtocolVersion { public static let current: UInt8 = 1 }
