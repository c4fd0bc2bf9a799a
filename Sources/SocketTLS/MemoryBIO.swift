import COpenSSL

/// The BIO type through which OpenSSL reads and writes a session's ciphertext: a `ByteQueue` in
/// memory instead of a socket.
///
/// OpenSSL's own memory BIO would do the same, but it keeps the largest buffer it ever needed for
/// the life of the connection, and what it holds can only be taken out by copying. A `ByteQueue`
/// frees its memory whenever it drains, and the channel sends straight from its bytes. The BIO
/// never blocks: reading an empty queue says "retry" (or end of stream once the queue is finished,
/// which is how the end of the peer's TCP stream reaches OpenSSL), and writing always takes everything.
enum MemoryBIO {
    /// Makes a BIO over `queue`. The BIO does not retain the queue: its owner keeps the queue alive
    /// for as long as the BIO exists (a `TLSSession` frees its SSL object, which frees the BIOs,
    /// before its queues go).
    static func make(over queue: ByteQueue) -> OpaquePointer {
        guard let bio = BIO_new(method.pointer) else { fatalError("BIO_new failed: out of memory") }
        BIO_set_data(bio, Unmanaged.passUnretained(queue).toOpaque())
        return bio
    }

    private static func queue(of bio: OpaquePointer?) -> ByteQueue {
        Unmanaged<ByteQueue>.fromOpaque(BIO_get_data(bio)).takeUnretainedValue()
    }

    /// The method table, built once; immutable afterwards and only read by OpenSSL.
    private final class Method: @unchecked Sendable {
        let pointer: OpaquePointer

        init() {
            let type = BIO_get_new_index() | BIO_TYPE_SOURCE_SINK
            guard let pointer = BIO_meth_new(type, "SocketTLS memory") else { fatalError("BIO_meth_new failed") }
            BIO_meth_set_create(pointer) { bio in
                BIO_set_init(bio, 1)
                return 1
            }
            BIO_meth_set_read_ex(pointer) { bio, target, capacity, readCount in
                sockettls_BIO_clear_retry_flags(bio)
                let queue = MemoryBIO.queue(of: bio)
                if queue.isEmpty {
                    readCount?.pointee = 0
                    // Without the retry flag an empty read means end of stream to OpenSSL.
                    if !queue.isFinished { sockettls_BIO_set_retry_read(bio) }
                    return 0
                }
                let taken = queue.read(into: UnsafeMutableRawBufferPointer(start: target, count: capacity))
                readCount?.pointee = taken
                return 1
            }
            BIO_meth_set_write_ex(pointer) { bio, source, count, writtenCount in
                sockettls_BIO_clear_retry_flags(bio)
                MemoryBIO.queue(of: bio).append(UnsafeRawBufferPointer(start: source, count: count))
                writtenCount?.pointee = count
                return 1
            }
            BIO_meth_set_ctrl(pointer) { bio, command, _, _ in
                switch command {
                case BIO_CTRL_FLUSH:
                    // Nothing to flush: written bytes are already in the queue.
                    return 1
                case BIO_CTRL_PENDING:
                    return Int(MemoryBIO.queue(of: bio).count)
                case BIO_CTRL_WPENDING:
                    return 0
                case BIO_CTRL_EOF:
                    let queue = MemoryBIO.queue(of: bio)
                    return queue.isFinished && queue.isEmpty ? 1 : 0
                default:
                    // Everything else (kTLS, datagram and socket controls) does not apply to memory.
                    return 0
                }
            }
            self.pointer = pointer
        }
    }

    private static let method = Method()
}
