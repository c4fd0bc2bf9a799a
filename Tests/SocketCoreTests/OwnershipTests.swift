import Dispatch
import Glibc
import Testing
@testable import SocketCore

/// Who closes what: a leaked descriptor is caught where it happens, and the Dispatch rules for
/// suspending and cancelling a source are kept by `SuspendableSource`.
@Suite("Ownership")
struct OwnershipTests {
    @Test func aSocketDroppedWithoutCloseTrapsInDebugBuilds() async {
        // In a process of its own: the trap ends that process, not the test runner. A Swift trap
        // is SIGILL on x86_64 and SIGTRAP on arm64; a failure to make the socket exits instead.
        #if DEBUG
        let trapped = await #expect(processExitsWith: .failure) {
            _ = try Socket(family: AF_INET, label: "leaked on purpose")
        }
        #expect(trapped?.exitStatus == .signal(SIGILL) || trapped?.exitStatus == .signal(SIGTRAP),
                "expected the assertion's trap, got \(String(describing: trapped?.exitStatus))")
        #else
        // Release builds close the descriptor and carry on.
        await #expect(processExitsWith: .success) {
            _ = try Socket(family: AF_INET, label: "leaked on purpose")
        }
        #endif
    }

    @Test func aClosedSocketCanBeDropped() async {
        await #expect(processExitsWith: .success) {
            let socket = try Socket(family: AF_INET, label: "closed")
            socket.close()
        }
    }

    @Test func aSuspendedSourceStillRunsItsCancelHandler() async throws {
        let queue = DispatchQueue(label: "OwnershipTests")
        let cancelled = DispatchSemaphore(value: 0)
        let timer = DispatchSource.makeTimerSource(queue: queue)
        timer.schedule(deadline: .now() + .seconds(3600))
        timer.setCancelHandler { cancelled.signal() }
        let source = queue.sync { SuspendableSource(activating: timer) }
        queue.sync {
            // Suspending twice and resuming twice must balance: the second of each does nothing.
            source.suspend()
            source.suspend()
            source.resume()
            source.resume()
            source.suspend()
            #expect(source.isSuspended)
            // libdispatch never runs the cancel handler of a suspended source; cancel resumes it first.
            source.cancel()
            source.cancel()
            #expect(source.isCancelled && !source.isSuspended)
        }
        #expect(cancelled.wait(timeout: .now() + .seconds(10)) == .success, "the cancel handler never ran")
    }
}
