#if os(Linux)
import Foundation

// MARK: - The drop-in
//
// swift-corelibs-foundation leaves `Stream.getStreamsToHost` and `Stream.getBoundStreams` out
// (they sit behind `#if false` there), so NSStream-style code stops compiling on Linux with
// "type 'Stream' has no member 'getStreamsToHost'". These two functions fill the gap with the same
// call shape: `&input, &output` on optional stream variables. Apple's parameters are
// `AutoreleasingUnsafeMutablePointer`, which exists only with the Objective-C runtime; an
// `UnsafeMutablePointer` accepts the same `&variable` arguments.

extension Stream {
    /// Creates a readable and a writable stream connected to `hostname` on `port` over TCP, as
    /// Apple's `getStreamsToHost(withName:port:inputStream:outputStream:)` does.
    ///
    /// Nothing happens on the network until one of the streams is opened: then the name is resolved
    /// (IPv4 and IPv6) and each address tried in turn; both streams report `.opening` until the
    /// connection is up, then `.openCompleted`. A failure (refused, unreachable, unknown host, no
    /// connection within 60 seconds, a port outside 0…65535) sets `streamStatus` to `.error`, posts
    /// `.errorOccurred` and leaves an `NSError` in `streamError`, in the domain CFNetwork reports the
    /// same failure in: `NSPOSIXErrorDomain` with the errno for socket calls, and
    /// `kCFErrorDomainCFNetwork` / `kCFHostErrorUnknown` with the `EAI_*` value under
    /// `kCFGetAddrInfoFailureKey` for a failed lookup. The `SocketError` is under
    /// `NSUnderlyingErrorKey`. Closing both streams while connecting closes the socket at once.
    ///
    /// TLS is not available: setting `socketSecurityLevelKey` (other than `.none`) or
    /// `kCFStreamPropertySSLSettings` makes the open fail with `SocketStreamsErrorDomain` /
    /// `SocketStreamsErrorCode.tlsUnavailable` instead of connecting in cleartext.
    ///
    /// The two streams share one socket, which is closed once both streams are closed; closing only
    /// the output stream shuts down sending (the peer reads end of stream) and reading goes on.
    /// Schedule the streams in a run loop to receive delegate events; they arrive on the thread
    /// running that run loop. Use each stream from one thread at a time.
    ///
    /// - Parameters:
    ///   - hostname: a host name or a numeric IPv4 / IPv6 address.
    ///   - port: the TCP port.
    ///   - inputStream: receives the stream to read from; pass `nil` if you do not want it.
    ///   - outputStream: receives the stream to write to; pass `nil` if you do not want it.
    public static func getStreamsToHost(
        withName hostname: String, port: Int,
        inputStream: UnsafeMutablePointer<InputStream?>?, outputStream: UnsafeMutablePointer<OutputStream?>?
    ) {
        handOut(core: SocketStreamPair(host: hostname, port: port), to: inputStream, outputStream)
    }

    /// Creates a bound pair of streams, as Apple's `getBoundStreams(withBufferSize:inputStream:outputStream:)`
    /// does: bytes written to the output stream are read from the input stream, through an
    /// in-memory buffer of `bufferSize` bytes.
    ///
    /// Both streams open at once and deliver the same events as socket streams, on the thread of
    /// the run loop they are scheduled in: `.hasBytesAvailable` when there is something to read,
    /// `.hasSpaceAvailable` when the buffer has room, `.endEncountered` on the input stream once the
    /// output stream is closed and everything written was read. Writing after the input stream
    /// closed fails with `EPIPE`.
    ///
    /// - Parameters:
    ///   - bufferSize: the buffer's size in bytes; must be positive.
    ///   - inputStream: receives the reading end.
    ///   - outputStream: receives the writing end.
    public static func getBoundStreams(
        withBufferSize bufferSize: Int,
        inputStream: UnsafeMutablePointer<InputStream?>?, outputStream: UnsafeMutablePointer<OutputStream?>?
    ) {
        handOut(core: BoundStreamPair(capacity: bufferSize), to: inputStream, outputStream)
    }

    private static func handOut(
        core: StreamPairCore,
        to inputStream: UnsafeMutablePointer<InputStream?>?, _ outputStream: UnsafeMutablePointer<OutputStream?>?
    ) {
        let input = BridgedInputStream(core: core)
        let output = BridgedOutputStream(core: core)
        // A stream nobody asked for is closed at once, so the pair ends when the other one closes.
        if let inputStream { inputStream.pointee = input } else { input.close() }
        if let outputStream { outputStream.pointee = output } else { output.close() }
    }
}
#endif
