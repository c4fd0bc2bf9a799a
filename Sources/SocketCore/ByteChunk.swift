/// An immutable run of bytes at a stable address, shared by reference.
///
/// The unit of every outbound queue: the server encodes a room message once into a `ByteChunk` and
/// queues the same chunk for every member (a retain, not a copy), and a gather write hands the
/// chunks' addresses straight to `sendmsg`. Immutable after creation, hence `Sendable`.
public final class ByteChunk: @unchecked Sendable {
    private let storage: UnsafeMutableRawPointer
    /// The number of bytes.
    public let count: Int

    /// Allocates `count` bytes and lets `initialize` fill all of them.
    public init(count: Int, initializingWith initialize: (UnsafeMutableRawBufferPointer) -> Void) {
        storage = UnsafeMutableRawPointer.allocate(byteCount: max(count, 1), alignment: 1)
        self.count = count
        initialize(UnsafeMutableRawBufferPointer(start: storage, count: count))
    }

    /// Copies the bytes of `source`.
    public convenience init(_ source: some Collection<UInt8>) {
        self.init(count: source.count) { $0.copyBytes(from: source) }
    }

    /// Copies `source`.
    public convenience init(copying source: UnsafeRawBufferPointer) {
        self.init(count: source.count) { $0.copyMemory(from: source) }
    }

    deinit {
        storage.deallocate()
    }

    /// The bytes; valid for the chunk's lifetime.
    public var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: storage, count: count) }
}
