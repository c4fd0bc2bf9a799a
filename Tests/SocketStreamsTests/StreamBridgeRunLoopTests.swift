import Dispatch
import Foundation
import Glibc
import Testing
@testable import SocketStreams

/// How bridged streams meet run loops: which thread hears the events, when `run(mode:before:)`
/// returns, and that an idle connection sleeps.
///
/// Events for the main run loop are covered by `StreamBridgeExampleTests`: the example schedules in
/// `RunLoop.main` and checks its delegate runs on the main thread. In this test process no thread
/// runs the main run loop (Swift Testing's runner parks the main thread in `dispatch_main`).
@Suite("Bridged streams and run loops")
struct StreamBridgeRunLoopTests {
    @Test func eventsArriveOnTheThreadWhoseRunLoopTheyAreScheduledIn() async throws {
        let server = try BridgeTestServer(onAccept: BridgeTestServer.echo)
        defer { server.stop() }
        let port = server.port

        let (eventThreads, runLoopThread, schedulingThread, received) = try await bridgeOnNewThread {
            let runLoopHandoff = BridgeHandoff<BridgeUncheckedBox<RunLoop>>()
            let go = BridgeHandoff<BridgeUncheckedBox<(BridgeEventRecorder, () -> Bool)>>()
            let finished = BridgeHandoff<pthread_t>()
            Thread {
                runLoopHandoff.put(BridgeUncheckedBox(RunLoop.current))
                guard let work = go.take()?.value else { return }
                bridgeRunRunLoop(until: work.1)
                finished.put(pthread_self())
            }.start()

            // This thread makes the streams and schedules them in the other thread's run loop.
            let otherRunLoop = try #require(runLoopHandoff.take()).value
            let (input, output) = bridgeStreams(host: "127.0.0.1", port: port)
            let recorder = BridgeEventRecorder()
            var received: [UInt8] = []
            var sent = false
            recorder.onEvent = { stream, event in
                if stream === output, event == .hasSpaceAvailable, !sent {
                    sent = output.write(Array("ping\n".utf8), maxLength: 5) == 5
                }
                if stream === input, event == .hasBytesAvailable { bridgeReadAvailable(input, into: &received) }
            }
            for stream in [input, output] as [Stream] {
                stream.delegate = recorder
                stream.schedule(in: otherRunLoop, forMode: .default)
                stream.open()
            }
            go.put(BridgeUncheckedBox((recorder, { received.count >= 5 })))
            let runLoopThread = finished.take(timeout: 20)
            input.close()
            output.close()
            return (recorder.entries.map(\.thread), runLoopThread, pthread_self(), received)
        }

        let runner = try #require(runLoopThread, "expected the run-loop thread to see the echo within 20 s")
        #expect(String(decoding: received, as: UTF8.self) == "ping\n")
        #expect(!eventThreads.isEmpty)
        #expect(eventThreads.allSatisfy { pthread_equal($0, runner) != 0 },
                "expected every event on the thread running the scheduled run loop")
        #expect(pthread_equal(runner, schedulingThread) == 0)
    }

    @Test func runModeBeforeReturnsAfterAnEvent() async throws {
        let accepted = BridgeHandoff<BridgeUncheckedBox<SocketChannel>>()
        let server = try BridgeTestServer { server, socket in
            let channel = SocketChannel(socket: socket, queue: server.queue)
            server.keep(channel)
            channel.start()
            accepted.put(BridgeUncheckedBox(channel))
        }
        defer { server.stop() }
        let port = server.port
        let queue = server.queue

        let (waits, sawBytes) = try await bridgeOnNewThread {
            let (input, output) = bridgeStreams(host: "127.0.0.1", port: port)
            defer { input.close(); output.close() }
            let recorder = BridgeEventRecorder()
            input.delegate = recorder
            input.schedule(in: .current, forMode: .default)
            input.open()
            bridgeRunRunLoop { recorder.saw(.openCompleted, on: input) }
            guard let channel = accepted.take()?.value else { return ([Double](), false) }
            queue.async { channel.write(ByteChunk(Array("ping\n".utf8))) }

            // Nothing else wakes this run loop: each run returns because an event was handled,
            // long before its 30 s limit.
            var waits: [Double] = []
            while !recorder.saw(.hasBytesAvailable, on: input), waits.count < 5 {
                let start = Date()
                _ = RunLoop.current.run(mode: .default, before: Date(timeIntervalSinceNow: 30))
                waits.append(Date().timeIntervalSince(start))
            }
            return (waits, recorder.saw(.hasBytesAvailable, on: input))
        }

        #expect(sawBytes, "expected .hasBytesAvailable after the server wrote")
        #expect(waits.allSatisfy { $0 < 10 }, "expected run(mode:before:) to return after the event, waited \(waits) s")
    }

    @Test func idleOpenConnectionCostsNoCPU() async throws {
        let server = try BridgeTestServer(onAccept: BridgeTestServer.echo)
        defer { server.stop() }
        let port = server.port

        let (cpuSeconds, sourceEvents, deliveries) = try await bridgeOnNewThread {
            let (input, output) = bridgeStreams(host: "127.0.0.1", port: port)
            defer { input.close(); output.close() }
            let recorder = BridgeEventRecorder()
            for stream in [input, output] as [Stream] {
                stream.delegate = recorder
                stream.schedule(in: .current, forMode: .default)
                stream.open()
            }
            bridgeRunRunLoop { recorder.saw(.openCompleted, on: input) && recorder.saw(.hasSpaceAvailable, on: output) }
            let pair = try #require((input as? BridgedInputStream)?.core as? SocketStreamPair)

            let eventsBefore = pair.sourceEventCount
            let deliveriesBefore = recorder.entries.count
            let cpuBefore = bridgeThreadCPUTime()
            // The measurement window: one second of the run loop running with the idle pair scheduled.
            let end = Date(timeIntervalSinceNow: 1)
            while Date() < end { _ = RunLoop.current.run(mode: .default, before: end) }
            return (bridgeThreadCPUTime() - cpuBefore, pair.sourceEventCount - eventsBefore,
                    recorder.entries.count - deliveriesBefore)
        }

        #expect(cpuSeconds < 0.05, "expected the run-loop thread to sleep, it used \(cpuSeconds) s of CPU in 1 s")
        #expect(sourceEvents == 0, "expected no Dispatch source wakeups while idle, got \(sourceEvents)")
        #expect(deliveries == 0, "expected no delegate calls while idle, got \(deliveries)")
    }

    @Test func delegateDefaultsToTheStreamAndIsHeldWeakly() {
        var input: InputStream?
        var output: OutputStream?
        Stream.getBoundStreams(withBufferSize: 16, inputStream: &input, outputStream: &output)
        let stream = input!
        #expect(stream.delegate === stream, "a stream is its own delegate by default")
        do {
            let recorder = BridgeEventRecorder()
            stream.delegate = recorder
            #expect(stream.delegate === recorder)
        }
        #expect(stream.delegate === stream, "a released delegate must not be kept alive")
        stream.delegate = nil
        #expect(stream.delegate === stream, "setting nil restores the stream as its own delegate")
    }
}

/// Carries a non-Sendable value to another thread; the test makes sure one thread uses it at a time.
final class BridgeUncheckedBox<Value>: @unchecked Sendable {
    let value: Value
    init(_ value: Value) { self.value = value }
}
