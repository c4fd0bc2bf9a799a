import Dispatch

extension DispatchQueue {
    /// Starts a timer that runs `handler` on this queue every `interval`, the first time after
    /// `delay` (one interval unless given); cancel the returned source to stop it.
    ///
    /// Install it from nonisolated code: a closure written in a `@MainActor` context is isolated
    /// to the main actor and traps when the timer fires here.
    package func startRepeatingTimer(
        every interval: DispatchTimeInterval, firstAfter delay: DispatchTimeInterval? = nil,
        leeway: DispatchTimeInterval = .nanoseconds(0), _ handler: @escaping () -> Void
    ) -> DispatchSourceTimer {
        let timer = DispatchSource.makeTimerSource(queue: self)
        timer.schedule(deadline: .now() + (delay ?? interval), repeating: interval, leeway: leeway)
        timer.setEventHandler(handler: handler)
        timer.activate()
        return timer
    }
}
