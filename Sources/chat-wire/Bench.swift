import ArgumentParser
import ChatProtocol
import ChatWireComparison
import Foundation

/// `chat-wire bench`: encode and decode throughput of representative frames.
struct Bench: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Measure encode and decode throughput (frames/s and bytes/s).",
        discussion: """
            For each representative frame, encodes it again and again into one reused buffer, \
            then decodes a stream of such frames fed to a FrameDecoder in chunks, each for \
            --seconds, and prints frames per second and megabytes (10^6 bytes) per second on \
            one core. Numbers from a debug build are meaningless: \
            swift run -c release chat-wire bench
            """)

    @Option(help: "How long to run each measurement, in seconds (0.05...10).")
    var seconds = 1.0

    @Option(help: "Bytes handed to the decoder per append, like one socket read.")
    var chunkSize = 65_536

    @Flag(help: "Print a Markdown table, as pasted into docs/BENCHMARKS.md.")
    var markdown = false

    func validate() throws {
        guard (0.05...10).contains(seconds) else { throw ValidationError("--seconds must be 0.05...10") }
        guard chunkSize >= 1 else { throw ValidationError("--chunk-size must be at least 1") }
    }

    func run() throws {
        #if DEBUG
        print("warning: debug build; run `swift run -c release chat-wire bench` for real numbers\n")
        #endif
        let duration = Duration.milliseconds(Int((seconds * 1000).rounded()))
        let samples: [(String, Frame)] = [
            ("say \"hello\" (client)", .say(room: "general", text: "hello")),
            ("message, 100-byte text (delivery)", .message(
                room: "general", seq: 123_456, time: WireComparison.sampleTime, sender: "alice",
                text: WireComparison.hundredByteText)),
            ("joined (presence)", .joined(room: "general", seq: 123_457, time: WireComparison.sampleTime, nick: "bob")),
            ("history, 50 messages", WireComparison.representativeOperations().last!.frame),
        ]
        var rows: [[String]] = []
        for (name, frame) in samples {
            let size = FrameEncoder.encode(frame).count
            let encoded = measureEncode(frame, for: duration)
            let decoded = try measureDecode(frame, for: duration)
            rows.append([
                name, "\(size)", rate(encoded), megabytes(encoded * Double(size)),
                rate(decoded), megabytes(decoded * Double(size)),
            ])
        }
        let headers = ["Frame", "Bytes", "Encode frames/s", "Encode", "Decode frames/s", "Decode"]
        if markdown {
            print("| " + headers.joined(separator: " | ") + " |")
            print("| --- | " + Array(repeating: "---:", count: headers.count - 1).joined(separator: " | ") + " |")
            for row in rows { print("| " + row.joined(separator: " | ") + " |") }
        } else {
            let table = [headers] + rows
            let widths = headers.indices.map { column in table.map { $0[column].count }.max() ?? 0 }
            for row in table {
                print(row.indices.map { row[$0].padding(toLength: widths[$0], withPad: " ", startingAt: 0) }
                    .joined(separator: "  "))
            }
        }
    }

    /// Frames per second for encoding `frame` into a buffer that is reused, as a server's
    /// outbound buffer would be.
    private func measureEncode(_ frame: Frame, for duration: Duration) -> Double {
        var buffer: [UInt8] = []
        buffer.reserveCapacity(1 << 20)
        var frames = 0
        var checksum = 0
        let clock = ContinuousClock()
        let start = clock.now
        while clock.now - start < duration {
            for _ in 0..<256 {
                checksum &+= FrameEncoder.encode(frame, into: &buffer)
                if buffer.count > 512 << 10 { buffer.removeAll(keepingCapacity: true) }
            }
            frames += 256
        }
        let elapsed = clock.now - start
        blackHole(checksum)
        return Double(frames) / elapsed.seconds
    }

    /// Frames per second for decoding a stream of `frame`s handed over in `chunkSize` pieces.
    private func measureDecode(_ frame: Frame, for duration: Duration) throws -> Double {
        var stream: [UInt8] = []
        while stream.count < 1 << 20 { FrameEncoder.encode(frame, into: &stream) }
        var decoder = FrameDecoder(maxFrameSize: WireProtocol.maxFrameSize)
        var frames = 0
        var checksum = 0
        let clock = ContinuousClock()
        let start = clock.now
        while clock.now - start < duration {
            try stream.withUnsafeBytes { bytes in
                var offset = 0
                while offset < bytes.count {
                    let end = min(offset + chunkSize, bytes.count)
                    decoder.append(UnsafeRawBufferPointer(rebasing: bytes[offset..<end]))
                    offset = end
                    while let decoded = try decoder.next() {
                        frames += 1
                        checksum &+= Int(decoded.type.rawValue)
                    }
                }
            }
        }
        let elapsed = clock.now - start
        blackHole(checksum)
        return Double(frames) / elapsed.seconds
    }

    private func rate(_ perSecond: Double) -> String {
        perSecond >= 1e6 ? String(format: "%.2f M", perSecond / 1e6) : String(format: "%.1f k", perSecond / 1e3)
    }

    private func megabytes(_ bytesPerSecond: Double) -> String {
        String(format: "%.0f MB/s", bytesPerSecond / 1e6)
    }
}

/// Keeps the optimizer from discarding work whose result is otherwise unused.
@inline(never)
func blackHole(_ value: Int) {
    if value == 0x5EED_F00D { print("") }
}

extension Duration {
    /// The duration in seconds, as a Double.
    var seconds: Double {
        let (whole, attoseconds) = components
        return Double(whole) + Double(attoseconds) / 1e18
    }
}
