import Dispatch

/// A fixed set of serial queues handed out round robin: work spread over them runs on at most
/// `count` threads, however many owners share them.
///
/// Every queue made with `DispatchQueue(label:)` targets Dispatch's overcommit pool, which starts
/// another thread whenever such a queue has work and no thread is idle; hundreds of per-object
/// queues with work at once mean hundreds of threads.
package final class QueueRing: Sendable {
    private let queues: [DispatchQueue]
    private let nextIndex = Locked(0)

    /// Makes `count` serial queues named `label.0`, `label.1`, ….
    package init(label: String, count: Int) {
        queues = (0..<count).map { DispatchQueue(label: "\(label).\($0)") }
    }

    /// The next queue, round robin.
    package func next() -> DispatchQueue {
        let index = nextIndex.withLock { index in
            defer { index = (index + 1) % queues.count }
            return index
        }
        return queues[index]
    }
}
