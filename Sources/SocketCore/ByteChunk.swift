import Synchronization

/// An immutable run of bytes at a stable address, shared by reference.
///
/// The unit of every outbound queue: the server encodes a room message once into a `ByteChunk` and
/// queues the same chunk for every member (a retain, not a copy), and a gather write hands the
/// chunks' addresses straight to `sendmsg`. Immutable after creation, hence `Sendable` — except
/// a chunk made with `init(capacity:meter:)`, which its maker fills in parts (`fill(from:at:)`),
/// each part before any reader is given its range, on one queue: a room's events encoded one
/// after another, each queued for the members as soon as it is written.
///
/// A chunk made with a `MemoryMeter` adds what it really costs (`cost(ofBytes:)`) to the meter for
/// as long as it lives, wherever it is queued and however many queues share it: an owner that
/// bounds its memory reads the meter instead of guessing from queue lengths.
public final class ByteChunk: @unchecked Sendable {
    private let storage: UnsafeMutableRawPointer
    private let meter: MemoryMeter?
    /// The number of bytes.
    public let count: Int

    /// What one chunk of `count` bytes costs in memory: the bytes, the object, and the allocator's
    /// headers of both. A 3-byte frame costs about a hundred bytes, not three.
    @inlinable
    public static func cost(ofBytes count: Int) -> Int { count + overheadBytes }

    /// The memory a chunk costs beyond its bytes: the object (header, fields: 40 bytes) and two
    /// allocations, each with a malloc header and rounding (about 16 + 16 bytes), rounded up.
    public static let overheadBytes = 80

    /// Allocates `count` bytes and lets `initialize` fill all of them; the chunk counts against
    /// `meter` (if any) until it is freed.
    public init(
        count: Int, meter: MemoryMeter? = nil, initializingWith initialize: (UnsafeMutableRawBufferPointer) -> Void
    ) {
        storage = UnsafeMutableRawPointer.allocate(byteCount: max(count, 1), alignment: 1)
        self.count = count
        self.meter = meter
        initialize(UnsafeMutableRawBufferPointer(start: storage, count: count))
        meter?.add(Self.cost(ofBytes: count))
    }

    /// Copies the bytes of `source`.
    public convenience init(_ source: some Collection<UInt8>, meter: MemoryMeter? = nil) {
        self.init(count: source.count, meter: meter) { $0.copyBytes(from: source) }
    }

    /// Copies `source`.
    public convenience init(copying source: UnsafeRawBufferPointer, meter: MemoryMeter? = nil) {
        self.init(count: source.count, meter: meter) { $0.copyMemory(from: source) }
    }

    /// A chunk of `capacity` bytes whose contents are written later, in parts (`fill(from:at:)`).
    public convenience init(capacity: Int, meter: MemoryMeter? = nil) {
        self.init(count: capacity, meter: meter) { _ in }
    }

    /// Copies `source` into the bytes at `offset`. Only for a chunk made with
    /// `init(capacity:meter:)`, and only into bytes no reader has been given: readers rely on
    /// what they were given never changing.
    public func fill(from source: UnsafeRawBufferPointer, at offset: Int) {
        precondition(offset >= 0 && offset + source.count <= count, "a fill past the chunk's end")
        guard let base = source.baseAddress, !source.isEmpty else { return }
        (storage + offset).copyMemory(from: base, byteCount: source.count)
    }

    deinit {
        meter?.add(-Self.cost(ofBytes: count))
        storage.deallocate()
    }

    /// The bytes; valid for the chunk's lifetime.
    public var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: storage, count: count) }
}

/// Counts the bytes that live `ByteChunk`s made with it cost, from any thread.
public final class MemoryMeter: Sendable {
    private let total = Atomic<Int>(0)

    /// A meter at zero.
    public init() {}

    /// The bytes the meter's live chunks cost now.
    public var bytes: Int { total.load(ordering: .relaxed) }

    /// Adds `delta` bytes (negative to subtract).
    public func add(_ delta: Int) {
        total.wrappingAdd(delta, ordering: .relaxed)
    }
}
