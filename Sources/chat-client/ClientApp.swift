import ChatClient
import Dispatch
import Foundation
import Glibc

/// Wires a driver to the terminal or pipe front end and to the signals that end the client,
/// and makes sure the terminal is restored on every way out.
@MainActor
enum ClientApp {
    /// Runs the client until it finishes; returns the exit status.
    static func run(
        configuration: ChatClientDriver.Configuration, session: ClientSession, interactive: Bool, historyFile: String?,
        settings: ClientSettings, configPath: String?
    ) async -> Int32 {
        let colour = MessageRenderer.wantsColour(isTerminal: true, environment: ProcessInfo.processInfo.environment)
        let terminal = interactive
            ? TerminalFrontEnd(historyFile: historyFile, colour: colour, settings: settings, configPath: configPath)
            : nil
        let pipe = terminal == nil ? PipeFrontEnd() : nil
        let display: any ClientDisplay = terminal ?? pipe!
        let driver = ChatClientDriver(configuration: configuration, session: session, display: display)
        driver.aliases = settings.aliases

        let status = await withCheckedContinuation { (continuation: CheckedContinuation<Int32, Never>) in
            driver.onFinished = { status in
                terminal?.stop(status: status)
                continuation.resume(returning: status)
            }
            let signals = SignalTrap(terminal: terminal, driver: driver)
            signals.install()
            keepAlive = signals
            if let terminal { terminal.start(driver: driver) } else { pipe?.start(driver: driver) }
            driver.start()
        }
        return status
    }

    private static var keepAlive: SignalTrap?
}

/// Turns SIGINT, SIGTERM and SIGHUP into a clean exit, and SIGWINCH into a redraw.
///
/// From the client's first instruction (`catchSignals`), a handler writes each of these signals
/// to a pipe; once the client runs, a Dispatch read source on the main queue takes them from the
/// pipe, so the client runs its normal exit path and restores the terminal. A second
/// SIGINT/SIGTERM while leaving exits at once, still restoring the terminal.
///
/// Why not Dispatch signal sources: libdispatch on Linux registers a source's signal some time
/// after the source is resumed, on its manager thread, not during the call. Until then a signal
/// met its disposition: ignored (`SIG_IGN`, as the sources were once given), it was lost, and a
/// SIGTERM at start-up left the client running; at its default, it ended the client unhandled.
/// Blocking the signals, as `chat-server` does while it starts, cannot keep them pending here:
/// an async `main` parks the main thread in `dispatch_main`, which waits in `sigsuspend` with
/// every signal unblocked. A handler installed before anything else runs has no such window,
/// and what it writes waits in the pipe until the trap reads it.
@MainActor
final class SignalTrap {
    /// The pipe's write end, for the handler; set once, before the handler is installed.
    private nonisolated(unsafe) static var pipeWriteEnd: Int32 = -1
    /// The pipe's read end, for `install`.
    private nonisolated(unsafe) static var pipeReadEnd: Int32 = -1

    /// Installs the handler that writes SIGINT, SIGTERM, SIGHUP and SIGWINCH to the pipe. Call
    /// it first in `main`: a signal before it still meets its default action.
    nonisolated static func catchSignals() {
        var ends: [Int32] = [-1, -1]
        guard pipe(&ends) == 0 else { return }
        for end in ends {
            _ = fcntl(end, F_SETFD, FD_CLOEXEC)
            _ = fcntl(end, F_SETFL, O_NONBLOCK)
        }
        (pipeReadEnd, pipeWriteEnd) = (ends[0], ends[1])
        var action = sigaction()
        // Only a write(2) and errno: what a signal handler may do. A full pipe drops the byte;
        // the signals it already holds are enough to act on.
        action.__sigaction_handler.sa_handler = { number in
            let saved = errno
            var byte = UInt8(truncatingIfNeeded: number)
            _ = write(SignalTrap.pipeWriteEnd, &byte, 1)
            errno = saved
        }
        sigemptyset(&action.sa_mask)
        action.sa_flags = SA_RESTART
        for number in [SIGINT, SIGTERM, SIGHUP, SIGWINCH] { sigaction(number, &action, nil) }
    }

    private let terminal: TerminalFrontEnd?
    private weak var driver: ChatClientDriver?
    private var source: (any DispatchSourceRead)?
    private var leaving = false

    init(terminal: TerminalFrontEnd?, driver: ChatClientDriver) {
        self.terminal = terminal
        self.driver = driver
    }

    /// Starts taking the caught signals, first those that came while the client started.
    func install() {
        SignalTrap.current = self
        guard Self.pipeReadEnd >= 0 else { return }
        let source = DispatchSource.makeReadSource(fileDescriptor: Self.pipeReadEnd, queue: .main)
        source.setEventHandler { @Sendable in
            MainActor.assumeIsolated { SignalTrap.takeSignals() }
        }
        source.resume()
        self.source = source
    }

    /// Reads the pipe to EAGAIN and acts on each signal in the order they came.
    private static func takeSignals() {
        var bytes = [UInt8](repeating: 0, count: 64)
        while true {
            let count = read(pipeReadEnd, &bytes, bytes.count)
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return }
            for number in bytes[..<count] {
                switch Int32(number) {
                case SIGINT: leave(reason: "interrupted")
                case SIGTERM: leave(reason: "terminated")
                case SIGHUP: leave(reason: "terminal closed")
                case SIGWINCH: current?.terminal?.terminalResized()
                default: break
                }
            }
        }
    }

    private static var current: SignalTrap?

    private static func leave(reason: String) {
        guard let trap = current else { return }
        if trap.leaving {
            trap.terminal?.stop()
            exit(130)
        }
        trap.leaving = true
        trap.driver?.quit(reason: reason)
    }
}
