import Dispatch

extension ChatServer {
    /// Runs a timer on the server's queue every `interval`: each run records how late it came
    /// (`chat_event_loop_lag_seconds`, while metrics are recorded) and calls `beat`, on the
    /// server's queue. `beat` is what a supervisor's watchdog should hear (systemd's
    /// `WATCHDOG=1`): it comes from the loop itself, so a loop stuck in a turn stops it, where a
    /// thread of its own would beat on. Call once, after `start()`; the timer lives as long as
    /// the server.
    ///
    /// Why lateness measures the loop: the timer is due at a fixed time, and the queue runs it
    /// only once the turn before it is over; a loop that spends 40 ms on a fan-out or a flush
    /// runs it up to 40 ms late. What a quiet loop shows is the timer's own slack (the kernel's,
    /// about 50 µs).
    public func monitorLoop(every interval: Duration = .milliseconds(100), beat: @escaping @Sendable () -> Void) {
        let step = UInt64(interval / .nanoseconds(1))
        let timer = DispatchSource.makeTimerSource(queue: queue)
        // A deadline the timer is measured against; the next one follows the last, so one late
        // run does not make the next look late too.
        let due = Deadline(DispatchTime.now().uptimeNanoseconds + step)
        timer.schedule(deadline: DispatchTime(uptimeNanoseconds: due.nanoseconds), repeating: .never, leeway: .nanoseconds(0))
        timer.setEventHandler { [weak self] in
            guard let self else { return }
            let now = DispatchTime.now().uptimeNanoseconds
            metrics?.loopLag.record(nanoseconds: now > due.nanoseconds ? now - due.nanoseconds : 0)
            beat()
            due.nanoseconds = max(due.nanoseconds + step, now + step / 2)
            loopMonitorTimer?.schedule(deadline: DispatchTime(uptimeNanoseconds: due.nanoseconds), repeating: .never, leeway: .nanoseconds(0))
        }
        queue.sync { loopMonitorTimer = timer }
        timer.activate()
    }
}

/// The loop monitor's next deadline (uptime nanoseconds). `@unchecked Sendable`: used on the
/// server's queue only, by the timer's handler.
private final class Deadline: @unchecked Sendable {
    var nanoseconds: UInt64
    init(_ nanoseconds: UInt64) { self.nanoseconds = nanoseconds }
}
