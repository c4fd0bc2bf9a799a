#if os(Linux)
import Foundation

/// Which stream of a pair a call is about.
enum StreamSide: Sendable {
    case input
    case output
}

/// The shared state behind a bridged `InputStream` / `OutputStream` pair: a socket
/// (`SocketStreamPair`) or an in-memory buffer (`BoundStreamPair`).
///
/// The stream classes are thin: they keep the delegate and forward everything else here. A core
/// posts events to `events(for:)`; at delivery time `stillHolds` re-checks each readiness event, so
/// a `.hasBytesAvailable` the delegate already read past is dropped instead of leading to a read
/// that blocks. Cores must be safe to call from any thread.
protocol StreamPairCore: AnyObject, Sendable {
    /// The event delivery of one side.
    func events(for side: StreamSide) -> StreamEventDelivery
    func open(_ side: StreamSide)
    func close(_ side: StreamSide)
    func status(_ side: StreamSide) -> Stream.Status
    func error(_ side: StreamSide) -> Error?
    /// `read(_:maxLength:)` with Apple's results: bytes read, 0 at end, -1 on failure.
    func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength: Int) -> Int
    /// `write(_:maxLength:)` with Apple's results: bytes accepted (possibly fewer), -1 on failure.
    func write(_ buffer: UnsafePointer<UInt8>, maxLength: Int) -> Int
    var hasBytesAvailable: Bool { get }
    var hasSpaceAvailable: Bool { get }
    /// Whether `event` is still true for `side` now; a readiness event that is not re-arms the
    /// core's watch so that the next real one is posted.
    func stillHolds(_ event: Stream.Event, for side: StreamSide) -> Bool
    func property(forKey key: Stream.PropertyKey, side: StreamSide) -> AnyObject?
    /// `setProperty(_:forKey:)` for either stream: whether the property was taken.
    func setProperty(_ value: AnyObject?, forKey key: Stream.PropertyKey) -> Bool
}

/// The order in which one batch of coalesced events reaches the delegate, as CFStream orders them.
private let deliveryOrder: [Stream.Event] = [
    .openCompleted, .hasBytesAvailable, .hasSpaceAvailable, .errorOccurred, .endEncountered,
]

/// Delivers a batch on the run-loop thread: each event still true, one `stream(_:handle:)` call
/// each; stops as soon as the stream is closed (the delegate may close it from a callback).
private func deliverInOrder(
    _ events: Stream.Event, from stream: Stream, side: StreamSide, core: StreamPairCore, delegate: () -> StreamDelegate?
) {
    for event in deliveryOrder where events.contains(event) {
        let status = core.status(side)
        guard status != .closed, status != .notOpen, core.stillHolds(event, for: side) else { continue }
        delegate()?.stream(stream, handle: event)
    }
}

/// The `InputStream` handed out by `Stream.getStreamsToHost` and `Stream.getBoundStreams`.
///
/// Threading: like Apple's streams, use it from one thread at a time, normally the thread whose run
/// loop it is scheduled in; its delegate is called there. The descriptor or buffer belongs to the
/// core, which the pair's output stream shares.
final class BridgedInputStream: InputStream, StreamDelegate, StreamEventTarget {
    /// The pair's shared state.
    let core: StreamPairCore
    private weak var storedDelegate: StreamDelegate?

    init(core: StreamPairCore) {
        self.core = core
        // InputStream's designated initializers all create a CFReadStream; an empty one is the
        // cheapest, and nothing of it is used since every method is overridden.
        super.init(data: Data())
    }

    deinit {
        closeForGood()
    }

    /// The delegate; the stream itself when none is set, as on Apple platforms.
    override var delegate: StreamDelegate? {
        get { storedDelegate ?? self }
        set { storedDelegate = newValue }
    }

    override var streamStatus: Stream.Status { core.status(.input) }
    override var streamError: Error? { core.error(.input) }
    override func open() { core.open(.input) }

    override func close() {
        closeForGood()
    }

    /// Closes this side and stops its event delivery; also what an unclosed stream does in deinit.
    private func closeForGood() {
        core.close(.input)
        core.events(for: .input).detach()
    }

    override func read(_ buffer: UnsafeMutablePointer<UInt8>, maxLength len: Int) -> Int {
        core.read(buffer, maxLength: len)
    }

    /// Always `false`: bytes go straight from the kernel (or the bound buffer) to the caller.
    override func getBuffer(
        _ buffer: UnsafeMutablePointer<UnsafeMutablePointer<UInt8>?>, length len: UnsafeMutablePointer<Int>
    ) -> Bool {
        false
    }

    override var hasBytesAvailable: Bool { core.hasBytesAvailable }

    override func schedule(in aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        core.events(for: .input).schedule(self, in: aRunLoop, forMode: mode)
    }

    override func remove(from aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        core.events(for: .input).remove(from: aRunLoop, forMode: mode)
    }

    override func property(forKey key: Stream.PropertyKey) -> AnyObject? {
        core.property(forKey: key, side: .input)
    }

    /// Takes the socket security properties (see `getStreamsToHost`); `false` for anything else.
    override func setProperty(_ property: AnyObject?, forKey key: Stream.PropertyKey) -> Bool {
        core.setProperty(property, forKey: key)
    }

    func deliver(_ events: Stream.Event) {
        deliverInOrder(events, from: self, side: .input, core: core) { delegate }
    }
}

/// The `OutputStream` handed out by `Stream.getStreamsToHost` and `Stream.getBoundStreams`.
///
/// Threading: as for `BridgedInputStream`.
final class BridgedOutputStream: OutputStream, StreamDelegate, StreamEventTarget {
    /// The pair's shared state.
    let core: StreamPairCore
    private weak var storedDelegate: StreamDelegate?

    init(core: StreamPairCore) {
        self.core = core
        // See BridgedInputStream.init: the memory stream underneath is never used.
        super.init(toMemory: ())
    }

    /// Not available: a bridged stream always belongs to a pair (`OutputStream.toMemory()` makes
    /// Foundation's own memory stream instead).
    @available(*, unavailable)
    required init(toMemory: ()) {
        preconditionFailure("BridgedOutputStream is made only by getStreamsToHost / getBoundStreams")
    }

    deinit {
        closeForGood()
    }

    /// The delegate; the stream itself when none is set, as on Apple platforms.
    override var delegate: StreamDelegate? {
        get { storedDelegate ?? self }
        set { storedDelegate = newValue }
    }

    override var streamStatus: Stream.Status { core.status(.output)  }
    override var streamError: Error? { core.error(.output) }
    override func open() { core.open(.output) }

    override func close() {
        closeForGood()
    }

    /// Closes this side and stops its event delivery; also what an unclosed stream does in deinit.
    private func closeForGood() {
        core.close(.output)
        core.events(for: .output).detach()
    }

    override func write(_ buffer: UnsafePointer<UInt8>, maxLength len: Int) -> Int {
        core.write(buffer, maxLength: len)
    }

    override var hasSpaceAvailable: Bool { core.hasSpaceAvailable }

    override func schedule(in aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        core.events(for: .output).schedule(self, in: aRunLoop, forMode: mode)
    }

    override func remove(from aRunLoop: RunLoop, forMode mode: RunLoop.Mode) {
        core.events(for: .output).remove(from: aRunLoop, forMode: mode)
    }

    override func property(forKey key: Stream.PropertyKey) -> AnyObject? {
        core.property(forKey: key, side: .output)
    }

    /// Takes the socket security properties (see `getStreamsToHost`); `false` for anything else.
    override func setProperty(_ property: AnyObject?, forKey key: Stream.PropertyKey) -> Bool {
        core.setProperty(property, forKey: key)
    }

    func deliver(_ events: Stream.Event) {
        deliverInOrder(events, from: self, side: .output, core: core) { delegate }
    }
}
#endif
