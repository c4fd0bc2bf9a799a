import Dispatch
import Foundation
import Glibc
import SocketStreams

/// The classic NSStream chat client: `Stream.getStreamsToHost`, both streams scheduled in the main
/// run loop, one delegate that prints incoming lines and writes the lines typed on standard input.
///
/// This is the code an Apple-platform tutorial shows; on Linux it compiles and runs because
/// SocketStreams supplies `getStreamsToHost`. Every line sent is prefixed with the nick, so the
/// relay needs to know nothing about nicks.
///
/// Threading: everything runs on the main thread, which must run `RunLoop.main`: stream events
/// arrive there because the streams are scheduled in the main run loop, and standard input is read
/// by a Dispatch source on the main queue, which the main run loop drains.
final class StreamChatClient: NSObject, StreamDelegate {
    private let host: String
    private let port: Int
    private let nick: String
    private let input: InputStream
    private let output: OutputStream
    private var standardInput: DispatchSourceRead?
    /// Received bytes after the last complete line.
    private var incoming: [UInt8] = []
    /// Typed bytes after the last complete line.
    private var typed: [UInt8] = []
    /// Lines the output stream has not accepted yet.
    private var outgoing: [UInt8] = []
    private var typingFinished = false

    /// Prepares the streams; nothing touches the network before `start()`.
    init(host: String, port: Int, nick: String) {
        var input: InputStream?
        var output: OutputStream?
        Stream.getStreamsToHost(withName: host, port: port, inputStream: &input, outputStream: &output)
        self.host = host
        self.port = port
        self.nick = nick
        self.input = input!
        self.output = output!
    }

    /// Schedules both streams in the main run loop, opens them and starts reading standard input.
    /// Call on the main thread, then run `RunLoop.main`.
    func start() {
        for stream in [input, output] as [Stream] {
            stream.delegate = self
            stream.schedule(in: .main, forMode: .default)
            stream.open()
        }
        let source = DispatchSource.makeReadSource(fileDescriptor: STDIN_FILENO, queue: .main)
        source.setEventHandler { [unowned self] in readStandardInput() }
        standardInput = source
        source.activate()
    }

    func stream(_ aStream: Stream, handle eventCode: Stream.Event) {
        // The drop-in's promise: events come on the thread whose run loop the streams are in.
        precondition(Thread.isMainThread, "stream event delivered off the main thread")
        switch eventCode {
        case .openCompleted where aStream === input:
            // The input's batch carries its first bytes too, so this line comes before any of them.
            let address = host.contains(":") ? "[\(host)]:\(port)" : "\(host):\(port)"
            writeLine("* connected to \(address) as \(nick)")
        case .hasBytesAvailable:
            readIncoming()
        case .hasSpaceAvailable:
            flushOutgoing()
        case .endEncountered:
            writeLine("* the relay closed the connection")
            exit(0)
        case .errorOccurred:
            let reason = aStream.streamError?.localizedDescription ?? "unknown error"
            writeLine("stream-chat-example: \(reason)", to: STDERR_FILENO)
            exit(1)
        default:
            break
        }
    }

    /// Prints every complete line that has arrived.
    private func readIncoming() {
        var buffer = [UInt8](repeating: 0, count: 4096)
        while input.hasBytesAvailable {
            let count = input.read(&buffer, maxLength: buffer.count)
            // 0 and -1 are followed by .endEncountered / .errorOccurred, handled there.
            guard count > 0 else { return }
            incoming += buffer[0..<count]
        }
        for line in Self.takeLines(from: &incoming) {
            writeLine(String(decoding: line, as: UTF8.self))
        }
    }

    /// Reads what was typed; each complete line goes out as "nick: line". At end of input, the
    /// output stream is closed once everything is sent: the relay then hangs up and we exit.
    private func readStandardInput() {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = Glibc.read(STDIN_FILENO, &buffer, buffer.count)
        if count > 0 {
            typed += buffer[0..<count]
        } else if count == 0 || errno != EINTR {
            // A last line without its newline still counts.
            if !typed.isEmpty { typed.append(UInt8(ascii: "\n")) }
            standardInput?.cancel()
            typingFinished = true
        }
        for line in Self.takeLines(from: &typed) where !line.isEmpty {
            outgoing += Array("\(nick): ".utf8) + line + [UInt8(ascii: "\n")]
        }
        flushOutgoing()
    }

    /// Writes queued lines while the output stream has room; a write never blocks that way.
    private func flushOutgoing() {
        while !outgoing.isEmpty, output.hasSpaceAvailable {
            let count = output.write(outgoing, maxLength: outgoing.count)
            guard count > 0 else { return }
            outgoing.removeFirst(count)
        }
        if typingFinished, outgoing.isEmpty, output.streamStatus == .open {
            output.close()
        }
    }

    /// Removes the complete lines (without their "\n" or "\r\n") from the front of `bytes`.
    private static func takeLines(from bytes: inout [UInt8]) -> [[UInt8]] {
        var lines: [[UInt8]] = []
        while let end = bytes.firstIndex(of: UInt8(ascii: "\n")) {
            var line = Array(bytes[..<end])
            if line.last == UInt8(ascii: "\r") { line.removeLast() }
            lines.append(line)
            bytes.removeFirst(end + 1)
        }
        return lines
    }
}
