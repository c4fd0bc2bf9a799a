/// A first-in, first-out run of bytes in one contiguous allocation, freed whenever it drains.
///
/// Each `TLSSession` has two: ciphertext that arrived and waits for OpenSSL to read it, and
/// ciphertext OpenSSL wrote that waits to be sent. Both are usually empty between events, and an
/// empty queue holds no memory, so an idle connection costs no buffer here. Bytes are appended at
/// the tail and consumed from the head; the unread part is moved to the front only when the tail
/// would otherwise have to grow.
///
/// Not thread-safe: used only by the session that owns it, on its owner's queue.
final class ByteQueue {
    private var storage: UnsafeMutableRawPointer?
    private var capacity = 0
    private var head = 0
    private var tail = 0

    init() {}

    deinit { storage?.deallocate() }

    /// Whether the producer has said no more bytes will come (the peer's TCP stream ended).
    var isFinished = false

    /// The number of bytes waiting.
    var count: Int { tail - head }

    /// Whether no bytes are waiting.
    var isEmpty: Bool { head == tail }

    /// The bytes that have ever been allocated and not yet released (for memory accounting).
    var allocatedBytes: Int { capacity }

    /// The waiting bytes, valid until the next `append` or `consume`.
    var readable: UnsafeRawBufferPointer {
        guard let storage else { return UnsafeRawBufferPointer(start: nil, count: 0) }
        return UnsafeRawBufferPointer(start: storage + head, count: tail - head)
    }

    /// Copies `bytes` to the tail.
    func append(_ bytes: UnsafeRawBufferPointer) {
        guard let source = bytes.baseAddress, bytes.count > 0 else { return }
        reserve(bytes.count)
        (storage.unsafelyUnwrapped + tail).copyMemory(from: source, byteCount: bytes.count)
        tail += bytes.count
    }

    /// Copies up to `buffer.count` bytes from the head into `buffer` and consumes them; returns how many.
    func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        let taken = min(buffer.count, count)
        guard taken > 0, let target = buffer.baseAddress else { return 0 }
        target.copyMemory(from: storage.unsafelyUnwrapped + head, byteCount: taken)
        consume(taken)
        return taken
    }

    /// Drops `byteCount` bytes from the head; the memory goes back to the allocator once none are left.
    func consume(_ byteCount: Int) {
        precondition(byteCount >= 0 && byteCount <= count, "consumed \(byteCount) of \(count) bytes")
        head += byteCount
        if head == tail { release() }
    }

    /// Drops everything and frees the memory.
    func release() {
        storage?.deallocate()
        storage = nil
        capacity = 0
        head = 0
        tail = 0
    }

    private func reserve(_ extra: Int) {
        if tail + extra <= capacity { return }
        let waiting = tail - head
        if waiting + extra <= capacity, let storage {
            // Room enough once the consumed head is reclaimed.
            storage.copyMemory(from: storage + head, byteCount: waiting)
            head = 0
            tail = waiting
            return
        }
        // Grow geometrically so a stream of small appends costs amortised constant time; the first
        // allocation is one page, enough for a burst of chat-sized records.
        let newCapacity = max(waiting + extra, capacity * 2, 4096)
        let newStorage = UnsafeMutableRawPointer.allocate(byteCount: newCapacity, alignment: 16)
        if let storage {
            newStorage.copyMemory(from: storage + head, byteCount: waiting)
            storage.deallocate()
        }
        storage = newStorage
        capacity = newCapacity
        head = 0
        tail = waiting
    }
}
