import Glibc
import Dispatch

/// A serial Dispatch queue with the read scratch shared by every channel that runs on it.
///
/// Connections made through the async API are spread over a small pool of these (one per core) so
/// that ten thousand connections cost ten thousand small channel objects, not ten thousand queues
/// and read buffers.
public final class IOQueue: Sendable {
    /// The serial queue the channels' handlers run on.
    public let queue: DispatchQueue
    /// Scratch for reads; used only on `queue`.
    public let readBuffer: ReadBuffer

    /// Creates a queue named `label` with its own read scratch.
    public init(label: String) {
        queue = DispatchQueue(label: label)
        readBuffer = ReadBuffer()
    }

    private static let pool: [IOQueue] = (0..<max(1, System.coreCount)).map { IOQueue(label: "SocketCore.io.\($0)") }
    private static let nextIndex = Locked(0)

    /// The next queue of the shared pool, round robin.
    public static func next() -> IOQueue {
        let index = nextIndex.withLock { index in
            defer { index = (index + 1) % pool.count }
            return index
        }
        return pool[index]
    }
}

/// Facts about the machine the pools are sized by.
package enum System {
    /// The number of online processors.
    package static var coreCount: Int {
        Int(sysconf(Int32(_SC_NPROCESSORS_ONLN)))
    }
}
