import Foundation
import Glibc
import Testing
@testable import SocketStreams

/// `Stream.getBoundStreams`: an in-memory pair with the socket pair's event semantics.
@Suite("Stream.getBoundStreams")
struct StreamBridgeBoundTests {
    @Test func carriesBytesThroughASmallBufferAndThenEnds() async throws {
        let total = 1 << 20
        let (received, expected, inputEvents, status) = try await bridgeOnNewThread {
            var input: InputStream?
            var output: OutputStream?
            Stream.getBoundStreams(withBufferSize: 1024, inputStream: &input, outputStream: &output)
            let (reader, writer) = (input!, output!)
            let expected = (0..<total).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ $0 >> 11) }
            var received: [UInt8] = []
            var written = 0
            let recorder = BridgeEventRecorder()
            recorder.onEvent = { stream, event in
                if stream === writer, event == .hasSpaceAvailable, written < total {
                    // Offer more than fits: the write must accept only what the buffer has room for.
                    let result = expected[written...].prefix(4096).withUnsafeBufferPointer {
                        writer.write($0.baseAddress!, maxLength: $0.count)
                    }
                    if result > 0 { written += result }
                    if written == total { writer.close() }
                }
                if stream === reader, event == .hasBytesAvailable {
                    var chunk = [UInt8](repeating: 0, count: 700)
                    let count = reader.read(&chunk, maxLength: chunk.count)
                    if count > 0 { received += chunk[0..<count] }
                }
            }
            for stream in [reader, writer] as [Stream] {
                stream.delegate = recorder
                stream.schedule(in: .current, forMode: .default)
                stream.open()
            }
            bridgeRunRunLoop(timeout: 60) { recorder.saw(.endEncountered, on: reader) }
            defer { reader.close() }
            return (received, expected, recorder.names(for: reader), reader.streamStatus)
        }

        #expect(received.count == total, "expected \(total) bytes, got \(received.count)")
        #expect(received == expected, "expected the bytes in the order written")
        #expect(inputEvents.first == "openCompleted" && inputEvents.last == "endEncountered",
                "input events began with \(inputEvents.prefix(3)) and ended with \(inputEvents.suffix(3))")
        #expect(status == .atEnd)
    }

    @Test func writingAfterTheInputClosedFailsWithEPIPE() async throws {
        let (result, error, sawError) = try await bridgeOnNewThread {
            var input: InputStream?
            var output: OutputStream?
            Stream.getBoundStreams(withBufferSize: 64, inputStream: &input, outputStream: &output)
            let writer = output!
            let recorder = BridgeEventRecorder()
            writer.delegate = recorder
            writer.schedule(in: .current, forMode: .default)
            input!.open()
            writer.open()
            input!.close()
            let result = writer.write(Array("late".utf8), maxLength: 4)
            bridgeRunRunLoop { recorder.saw(.errorOccurred, on: writer) }
            defer { writer.close() }
            return (result, (writer.streamError as NSError?)?.userInfo[NSUnderlyingErrorKey] as? SocketError, recorder.saw(.errorOccurred, on: writer))
        }

        #expect(result == -1)
        #expect(error?.errno == EPIPE, "expected EPIPE, got \(String(describing: error))")
        #expect(sawError, "expected .errorOccurred on the output stream")
    }

    @Test func eventsPostedBeforeSchedulingArriveOnceScheduled() async throws {
        let events = try await bridgeOnNewThread {
            var input: InputStream?
            var output: OutputStream?
            Stream.getBoundStreams(withBufferSize: 64, inputStream: &input, outputStream: &output)
            let (reader, writer) = (input!, output!)
            defer { reader.close(); writer.close() }
            reader.open()
            writer.open()
            _ = writer.write(Array("early".utf8), maxLength: 5)
            let recorder = BridgeEventRecorder()
            reader.delegate = recorder
            reader.schedule(in: .current, forMode: .default)
            bridgeRunRunLoop { recorder.saw(.hasBytesAvailable, on: reader) }
            return recorder.names(for: reader)
        }

        #expect(events == ["openCompleted", "hasBytesAvailable"], "events: \(events)")
    }
}
