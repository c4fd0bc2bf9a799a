/// Waits for `condition`, checking it every `interval`, for at most `timeout`; returns whether it
/// held. For state that announces no event of its own (a tmux screen, a count in another process,
/// the kernel releasing a descriptor); where an event exists, wait for the event instead.
public func eventually(
    timeout: Duration = .seconds(30), every interval: Duration = .milliseconds(50),
    _ condition: () async throws -> Bool
) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try? await Task.sleep(for: interval)
    }
    return try await condition()
}
