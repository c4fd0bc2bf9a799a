import CSocketShims
import Dispatch
import Glibc

/// One epoll set per serial queue, watched by a single Dispatch read source: the channels that run
/// on the queue register their descriptors here instead of each making Dispatch sources of their
/// own.
///
/// Why: a Dispatch read source costs a connection about 600 bytes that live as long as it does
/// (the source object, its unote and epoll registration, a continuation and a heap block for each
/// of its two handlers, the Swift wrapper and the suspend bookkeeping), a third of what an idle
/// chat connection cost the server in all. An epoll registration costs the process nothing (the
/// kernel keeps it), and the channel's own pointer is the event's data, so there is no table either.
///
/// Descriptors are registered edge-triggered for input, output and the peer's half-close at once,
/// and never modified: each change of readiness is reported once, so a channel must read until
/// `EAGAIN` or end of stream whenever it is not paused (a paused channel reads again when resumed,
/// whatever was reported meanwhile), and a writer that got `EAGAIN` is woken when room appears.
/// Nothing needs suspending or resuming, so none of libdispatch's suspend-count rules apply here;
/// and a hung-up descriptor stays registered until the channel removes it.
///
/// Lifetime: made by the first channel that starts on a queue and kept as that queue's specific
/// value; when its last channel leaves, it cancels its source, closes the epoll descriptor in the
/// source's cancel handler (so the source never watches a closed or reused number), and lets go
/// of the queue. A later channel makes a new one.
///
/// Threading: `@unchecked Sendable` because everything, construction included, happens on `queue`.
final class SocketPoller: @unchecked Sendable {
    /// The queue the poller and all its channels run on.
    let queue: DispatchQueue
    /// The epoll descriptor; owned by the poller, closed in the source's cancel handler.
    private let descriptor: Int32
    /// The read source on `descriptor`; nil once cancelled.
    private var source: (any DispatchSourceRead)?
    /// Channels registered now.
    private var registered = 0
    /// Where `epoll_wait` puts the events of one call.
    private let events: UnsafeMutablePointer<socketcore_epoll_event>
    /// Events taken per `epoll_wait`; a turn takes at most `maxWaitsPerTurn` batches, then lets the
    /// queue's other work run before the next turn.
    private static let eventsPerWait: Int32 = 64
    private static let maxWaitsPerTurn = 16

    /// The flags every descriptor is registered with, once.
    private static let interest = UInt32(
        SOCKETCORE_EPOLLIN | SOCKETCORE_EPOLLOUT | SOCKETCORE_EPOLLRDHUP | SOCKETCORE_EPOLLET)

    /// What `queue.setSpecific` files the poller under.
    private static let key = DispatchSpecificKey<SocketPoller>()

    /// The poller of `queue`, made if it has none. Call on `queue`.
    static func of(_ queue: DispatchQueue) throws(SocketError) -> SocketPoller {
        if let poller = queue.getSpecific(key: key) { return poller }
        let poller = try SocketPoller(queue: queue)
        queue.setSpecific(key: key, value: poller)
        return poller
    }

    private init(queue: DispatchQueue) throws(SocketError) {
        self.queue = queue
        descriptor = try retryingInterrupts("epoll_create1") { socketcore_epoll_create() }
        events = .allocate(capacity: Int(Self.eventsPerWait))
        let source = DispatchSource.makeReadSource(fileDescriptor: descriptor, queue: queue)
        // The source holds the poller (through its handlers) until it is cancelled, and the
        // poller holds the source until then: the cycle ends in the cancel handler.
        source.setEventHandler { [self] in turn() }
        source.setCancelHandler { [self] in
            Glibc.close(descriptor)
            self.source = nil
        }
        self.source = source
        source.activate()
    }

    deinit { events.deallocate() }

    /// Adds `channel`'s descriptor. The poller holds the channel from now until it calls
    /// `remove`, and reports readiness to it through `SocketChannel.handleReadiness`.
    func add(_ channel: SocketChannel, descriptor fd: Int32) throws(SocketError) {
        let retained = Unmanaged.passRetained(channel)
        do {
            _ = try retryingInterrupts("epoll_ctl add", target: channel.label) {
                socketcore_epoll_add(descriptor, fd, Self.interest, retained.toOpaque())
            }
        } catch {
            retained.release()
            leaveIfUnused()
            throw error
        }
        registered += 1
    }

    /// Removes `channel`'s descriptor (still open) so that no later `epoll_wait` reports it. The
    /// poller lets go of the channel after the current turn of the queue, since events already
    /// taken in this turn may still name it.
    func remove(_ channel: SocketChannel, descriptor fd: Int32) {
        do {
            _ = try retryingInterrupts("epoll_ctl del", target: channel.label) {
                socketcore_epoll_remove(descriptor, fd)
            }
        } catch {
            // ENOENT or EBADF: the descriptor was never added here or is closed already, a bug.
            preconditionFailure("\(error)")
        }
        let retained = Unmanaged.passUnretained(channel)
        queue.async { retained.release() }
        registered -= 1
        leaveIfUnused()
    }

    /// Tears the poller down once no channel uses it: the queue forgets it, and the source's
    /// cancel handler closes the epoll descriptor.
    private func leaveIfUnused() {
        guard registered == 0, let source else { return }
        queue.setSpecific(key: Self.key, value: nil)
        source.cancel()
    }

    /// Hands the ready descriptors' events to their channels, a batch per `epoll_wait`, until none
    /// is left or the turn's budget is spent (then the next turn is queued behind other work).
    private func turn() {
        for _ in 0..<Self.maxWaitsPerTurn {
            // Torn down by a channel that left during this turn: the rest is for no one.
            guard let source, !source.isCancelled else { return }
            let count: Int32
            do {
                count = try retryingInterrupts("epoll_wait") { socketcore_epoll_wait(descriptor, events, Self.eventsPerWait, 0) }
            } catch {
                preconditionFailure("\(error)")
            }
            for index in 0..<Int(count) {
                let event = events[index]
                let channel = Unmanaged<SocketChannel>.fromOpaque(event.data!).takeUnretainedValue()
                channel.handleReadiness(event.events)
            }
            if count < Self.eventsPerWait { return }
        }
        queue.async { [self] in turn() }
    }
}
